//! [`Admitting`]: a call on its way through its key's controls, holding
//! what it has taken (a rate token, the store's token, a bulkhead slot)
//! until it is admitted; dropped before that, refused or given up, it gives
//! each back. And what the driver hands a call it admits ([`Admitted`]).

use super::shared_rate::StoreToken;
use super::{CallTimes, Core, KeyTelemetry};
use crate::error::RejectReason;
use crate::key::KeyState;
use crate::priority::Priority;
use crate::rate::Reservation;

/// A rate token a call holds until it is admitted. A call's rate is its
/// key's own or the store's, never both; the store's token is boxed, so a
/// call holding either is no bigger than one holding the key's own.
#[derive(Debug)]
pub(crate) enum HeldToken {
    Local(Reservation),
    Store(Box<StoreToken>),
}

/// A call past the throttle, on its way through the rate and the
/// bulkhead. What it holds goes back when it is dropped: its token while
/// no later call of the key has taken one (`rate::gcra::cancel`), or to
/// the store it came from; its slot to the head of the bulkhead's queue.
/// No control counts such a call.
pub(crate) struct Admitting<'c> {
    core: &'c Core,
    /// `None` once admitted: nothing left to give back.
    call: Option<Call>,
}

/// What a call on its way holds, and what its outcome will be counted with.
#[derive(Debug)]
pub(crate) struct Call {
    pub(crate) state: triomphe::Arc<KeyState>,
    pub(crate) telemetry: KeyTelemetry,
    pub(crate) priority: Priority,
    pub(crate) times: CallTimes,
    /// How many rate tokens it takes (at most the key's burst).
    pub(crate) cost: u32,
    /// Its rate token, if it holds one: the key's own, or the store's.
    pub(crate) token: Option<HeldToken>,
    /// Whether it holds a slot of its key's bulkhead.
    pub(crate) holds_slot: bool,
}

impl<'c> Admitting<'c> {
    #[inline]
    pub(crate) fn new(
        core: &'c Core,
        state: triomphe::Arc<KeyState>,
        telemetry: KeyTelemetry,
        priority: Priority,
        times: CallTimes,
        cost: u32,
    ) -> Self {
        let call = Call {
            state,
            telemetry,
            priority,
            times,
            cost,
            token: None,
            holds_slot: false,
        };
        Self {
            core,
            call: Some(call),
        }
    }

    /// The call (present until admitted).
    #[inline(always)]
    pub(crate) fn call(&self) -> &Call {
        self.call.as_ref().expect("a call on its way")
    }

    #[inline(always)]
    pub(crate) fn call_mut(&mut self) -> &mut Call {
        self.call.as_mut().expect("a call on its way")
    }

    /// Where the call's own rate token lies in its key's bucket: the time
    /// up to which its tokens took it. `None` without a token of the key's
    /// own (none, or the store's).
    pub(crate) fn booked_until(&self) -> Option<crate::clock::Nanos> {
        match self.call().token.as_ref()? {
            HeldToken::Local(reservation) => Some(reservation.slot.tat),
            HeldToken::Store(_) => None,
        }
    }

    /// Gives back the slot the call holds, keeping the rest: a call that
    /// took a free slot and then finds its token ahead waits without one.
    #[inline]
    pub(crate) fn release_slot(&mut self) {
        let call = self.call_mut();
        if std::mem::take(&mut call.holds_slot) {
            if let Some(bulkhead) = call.state.bulkhead() {
                bulkhead.release();
            }
        }
    }

    /// The call is admitted: nothing goes back any more.
    #[inline(always)]
    pub(crate) fn admitted(self) -> Call {
        // Nothing is left to give back: the drop is not run at all.
        let mut admitted = std::mem::ManuallyDrop::new(self);
        admitted.call.take().expect("admitted once")
    }
}

impl Drop for Admitting<'_> {
    fn drop(&mut self) {
        let Some(call) = self.call.take() else {
            return;
        };
        if let Some(token) = call.token {
            match token {
                HeldToken::Local(token) => call.state.rate.cancel(token),
                HeldToken::Store(token) => self.core.give_back_store_token(&call.state, *token),
            }
        }
        if call.holds_slot {
            if let Some(bulkhead) = call.state.bulkhead() {
                bulkhead.release();
            }
        }
        // No permit was made of it, so neither an outcome nor a slot was
        // counted: the key may only make room in a full key space.
        self.core.room.call_ended(|| {
            triomphe::Arc::strong_count(&call.state) <= crate::registry::HOLDERS + 1
        });
    }
}

impl std::fmt::Debug for Admitting<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admitting")
            .field("call", &self.call)
            .finish_non_exhaustive()
    }
}

/// What the driver hands a call it admits. The driver is generic over it,
/// so that a plain call carries nothing more than its ticket.
pub(crate) trait Admitted<'c>: Sized {
    /// Whether the admission is counted in the metrics when it is made
    /// (a permit's); a joint call's keys count once every key admits it,
    /// and the rate alone counts no admissions.
    const COUNTED: bool;

    /// Whether the call keeps its rate token once admitted, to give it
    /// back if another key refuses the call.
    const KEEPS_TOKEN: bool;

    fn from_call(call: Admitting<'c>) -> Self;

    /// A call of a shadowed key that the controls would have refused for
    /// `reason`, let through holding nothing: what a permit says of it
    /// ([`Permit::would_refuse`](crate::manager::Permit::would_refuse)).
    fn shadowed(call: Admitting<'c>, reason: RejectReason) -> Self {
        let _ = reason;
        Self::from_call(call)
    }

    /// Its ticket, for the metrics of a counted admission.
    fn label(&self) -> Option<&str>;
}

/// One key of a call charged to several: still on its way, holding its
/// token (and, once taken, its slot) until every key admits the call.
impl<'c> Admitted<'c> for Admitting<'c> {
    const COUNTED: bool = false;
    const KEEPS_TOKEN: bool = true;

    #[inline]
    fn from_call(call: Admitting<'c>) -> Self {
        call
    }

    fn label(&self) -> Option<&str> {
        self.call().telemetry.label()
    }
}

/// The rate alone: the token is spent, and nothing else is held.
#[derive(Debug)]
pub(crate) struct Spent;

impl<'c> Admitted<'c> for Spent {
    const COUNTED: bool = false;
    const KEEPS_TOKEN: bool = false;

    #[inline]
    fn from_call(call: Admitting<'c>) -> Self {
        call.admitted();
        Spent
    }

    fn label(&self) -> Option<&str> {
        None
    }
}
