//! The one driver of admission: [`Core::decide`] runs a key's controls in
//! their one order as far as they go without waiting, and says where the
//! call must wait ([`Wait`]); [`Core::admit_after`] (`waiting.rs`) is the
//! one loop that waits there and goes on. Every entry point builds a
//! [`Request`] and hands it here with a [`Lookup`] of its key; the steps
//! themselves (and why each stands where it does) are in `steps.rs`.
//!
//! A call that waits for nothing, the common case, runs no async machinery:
//! a caller that never waits calls `decide` itself, inlined; an async one
//! calls [`Core::admit_at_once`]. A call that must wait is boxed
//! ([`MustWait`]), and enters the loop.
//!
//! What a call takes on its way, it holds in its [`Admitting`]: refused,
//! or dropped while it waits, it gives everything back.

use std::future::Future;
use std::time::Duration;

use super::admitting::{Admitted, Admitting, HeldToken};
use super::request::{Request, Scope};
use super::{BulkheadPlace, CallTimes, Core, FreeSlot, KeySettings, KeyTelemetry, Patience, Token};
use crate::bulkhead::{QueuedWait, WaiterId};
use crate::clock::Nanos;
use crate::error::{RejectReason, Rejected};
use crate::key::KeyState;
use crate::priority::Flow;
use crate::rate::Reservation;
use crate::registry::NoRoom;

/// How the driver finds the key of a call: all it knows of the key.
pub(crate) trait Lookup {
    /// The key's state and how it is named, made if the key is new.
    ///
    /// # Errors
    ///
    /// [`NoRoom`] when the key is new and the key space has none.
    fn find(&self, now: Nanos) -> Result<(triomphe::Arc<KeyState>, KeyTelemetry), NoRoom>;

    /// [`find`](Self::find) for a call that is never counted in events or
    /// metrics: the state alone.
    fn state(&self, now: Nanos) -> Result<triomphe::Arc<KeyState>, NoRoom>;

    /// Resolves at `until`, or sooner if room may have appeared in the key
    /// space.
    fn room_freed(&self, until: Nanos) -> impl Future<Output = ()>;

    /// The key's label in per-key metrics, if the manager has them.
    fn label(&self) -> Option<String>;

    /// The key's name in events, if the manager names keys.
    fn name(&self) -> Option<String>;
}

/// Why `decide` stopped short of admitting a call: refused, or a step that
/// must wait before the call can go on.
///
/// A wait is boxed: it holds the call on its way, and a healthy call's
/// result (this or its ticket) is returned through several steps, so
/// keeping it small saves copies on every call; a call that waits pays one
/// allocation, small next to the wait.
pub(crate) enum Stop<'c> {
    Refused(Rejected),
    Wait(Box<Wait<'c>>),
}

impl<'c> Stop<'c> {
    #[cold]
    pub(super) fn wait(wait: Wait<'c>) -> Self {
        Stop::Wait(Box::new(wait))
    }

    /// The refusal of a call that waits for nothing: what it took goes
    /// back.
    #[cold]
    pub(crate) fn refused(self, core: &Core, request: &Request) -> Rejected {
        match self {
            Stop::Refused(rejected) => rejected,
            Stop::Wait(wait) => wait.refused(core, request),
        }
    }
}

impl From<Rejected> for Stop<'_> {
    #[inline]
    fn from(rejected: Rejected) -> Self {
        Stop::Refused(rejected)
    }
}

/// Where a call that [`Core::admit_at_once`] could not decide must wait,
/// for [`Core::admit_after`] to go on from.
pub(crate) struct MustWait<'c>(pub(super) Box<Wait<'c>>);

impl MustWait<'_> {
    /// The refusal of the call, for a caller that will not wait after all
    /// (a shadowed key's): what it took goes back.
    #[cold]
    pub(crate) fn refused(self, core: &Core, request: &Request) -> Rejected {
        self.0.refused(core, request)
    }
}

/// A step that must wait, and the call on its way meanwhile.
pub(crate) enum Wait<'c> {
    /// The key is new and the key space full: nothing was taken; decide
    /// again at this time, or when room appears.
    ForRoom(Nanos),
    /// Its rate token is taken but not due: sleep until it is, then the
    /// bulkhead.
    ForToken(Admitting<'c>, Reservation),
    /// In its key's line for a rate token: wait for its turn, take the
    /// token, then as above.
    InLine(Admitting<'c>),
    /// In the bulkhead's queue: wait for the slot.
    InQueue(Admitting<'c>, WaiterId),
    /// Its rate is in a store: ask the store for the token (a round trip).
    ForStoreToken(Admitting<'c>),
}

/// # The driver
impl Core {
    /// The driver's first steps for the rate alone and a caller that never
    /// waits ([`check`](crate::ThrottleManager::check)): the key's next
    /// `cost` tokens, taken if they are due now, else refused with how far
    /// ahead they are. Nothing is held on the way, so nothing is built to
    /// give back. A call with its rate in a store decides locally, as every
    /// caller that never waits does; a token due now is taken even while
    /// callers wait in the key's line (a check never queues, so it takes
    /// no one's turn).
    #[inline(always)]
    pub(crate) fn spend_at_once(
        &self,
        lookup: &impl Lookup,
        request: &Request,
    ) -> Result<(), Rejected> {
        debug_assert!(request.scope == Scope::RateOnly && request.patience == Patience::Never);
        // The rate alone knows no priority: the task's is not asked for.
        let priority = request.asked;
        let now = self.now();
        let state = match lookup.state(now) {
            Ok(state) => state,
            Err(full) => {
                request.in_time(now, || 0, priority)?;
                let retry_at = now.saturating_add(full.retry_after);
                return Err(Wait::ForRoom(retry_at).refused(self, request));
            }
        };
        request.in_time(now, || state.quickest_answer(), priority)?;
        let settings = self.settings_of(&state);
        self.cost_fits(settings, priority, request.cost)?;
        let Some(settings) = &settings.rate else {
            return Ok(());
        };
        state
            .rate
            .take_due(now, settings.burst, request.cost)
            .map_err(|wait| Rejected::rate_limited(wait, priority))
    }

    /// `decide` for an async caller, with a wait the caller does not make
    /// turned into its refusal: the call admitted or refused, or where it
    /// must wait. Kept apart: `decide` inlined into a future would make
    /// every such future as large as all its steps' values together.
    #[inline(never)]
    pub(crate) fn admit_at_once<'c, A: Admitted<'c>>(
        &'c self,
        lookup: &impl Lookup,
        request: &Request,
    ) -> Result<Result<A, Rejected>, MustWait<'c>> {
        match self.decide(lookup, request) {
            Ok(admitted) => Ok(Ok(admitted)),
            Err(Stop::Refused(rejected)) => Ok(Err(rejected)),
            Err(Stop::Wait(wait)) if !wait.is_waited_for_by(request.patience) => {
                Ok(Err(wait.refused(self, request)))
            }
            Err(Stop::Wait(wait)) => Err(MustWait(wait)),
        }
    }

    /// The controls in their one order, as far as they go without waiting
    /// (see [`acquire`](crate::ThrottleManager::acquire) for the order and
    /// why).
    #[inline(always)]
    pub(crate) fn decide<'c, A: Admitted<'c>>(
        &'c self,
        lookup: &impl Lookup,
        request: &Request,
    ) -> Result<A, Stop<'c>> {
        let priority = self.resolve(request.asked)?;
        let now = self.now();
        let (state, telemetry) = match lookup.find(now) {
            Ok(found) => found,
            Err(full) => {
                request.in_time(now, || 0, priority)?;
                let retry_at = now.saturating_add(full.retry_after);
                return Err(Stop::wait(Wait::ForRoom(retry_at)));
            }
        };
        // A call that could not finish before its caller's deadline, even
        // starting now, is not started.
        request.in_time(now, || state.quickest_answer(), priority)?;
        // One look at the key's settings for the steps that run at once.
        let settings = self.settings_of(&state);
        self.cost_fits(settings, priority, request.cost)?;
        if request.scope != Scope::RateOnly {
            let span = telemetry.span();
            self.throttle_admits(&state, settings, now, priority, request, span)?;
        }
        let times = CallTimes::at(now);
        // A rate in a store is a round trip away: a caller that waits asks
        // the store (the long way), unless its tokens were taken with its
        // named limits; one that never waits decides locally. (A call whose
        // tokens were taken comes only while its key's rate is in the
        // store: had a reload removed the rate since, there is none to take.)
        let in_store = request.patience != Patience::Never && self.store_of(&state).is_some();
        let call = Admitting::new(self, state, telemetry, priority, times, request.cost);
        let call = if in_store || request.scope == Scope::RateOnly {
            call
        } else if !self.controls.bulkhead {
            return self.rate_then_slot(call, request, settings);
        } else if request.takes_slot() {
            // Decided in this branch, the call never merged with the
            // others': a merge moves it to a slot of its own, a copy of
            // every field just written, on every healthy call.
            return match self.free_slot_then_rate(call, request, settings) {
                Ok(decided) => decided,
                Err(call) => {
                    self.bulkhead_has_room(&call.call().state, priority, request)?;
                    self.rate_then_slot(call, request, settings)
                }
            };
        } else {
            call
        };
        if request.scope != Scope::RateOnly {
            self.bulkhead_has_room(&call.call().state, priority, request)?;
        }
        if in_store {
            if request.scope == Scope::RateTaken {
                return self.take_slot(call, request);
            }
            return Err(Stop::wait(Wait::ForStoreToken(call)));
        }
        self.rate_then_slot(call, request, settings)
    }

    /// Steps 3 to 5 while the key's bulkhead has a free slot: the healthy
    /// key's common case. Nothing can happen between the bulkhead's check
    /// (step 3) and its slot (step 5) when the slot is free and the token
    /// due now, so the free slot is taken first, and given back if the
    /// token is not due now. What the caller sees is what the order above
    /// gives (a full bulkhead refuses before the rate, a call it refuses
    /// takes no token, a call that waits for its token holds no slot
    /// meanwhile), for one look at the bulkhead instead of two.
    ///
    /// `Err(call)`: no slot is free and the caller may queue; go the long
    /// way, with nothing taken.
    #[inline(always)]
    fn free_slot_then_rate<'c, A: Admitted<'c>>(
        &'c self,
        mut call: Admitting<'c>,
        request: &Request,
        settings: &KeySettings,
    ) -> Result<Result<A, Stop<'c>>, Admitting<'c>> {
        let filled = match self.take_free_slot(&call.call().state, settings) {
            FreeSlot::NoBulkhead => return Ok(self.rate_then_slot(call, request, settings)),
            FreeSlot::Taken { filled } => filled,
            FreeSlot::None(refusal) if request.patience == Patience::Never => {
                return Ok(Err(Stop::Refused(refusal.rejected(call.call().priority))));
            }
            FreeSlot::None(_) => return Err(call),
        };
        call.call_mut().holds_slot = true;
        Ok(match self.token_for(&call, request, settings) {
            Ok(Token::Due(token)) => {
                let c = call.call_mut();
                self.slot_taken(c.priority, filled, &c.telemetry);
                if A::KEEPS_TOKEN {
                    c.token = token.map(HeldToken::Local);
                }
                Ok(A::from_call(call))
            }
            // The call waits for its token without a slot, and takes one
            // (or a place in the queue) once the token is due.
            Ok(Token::Ahead(token)) => {
                call.release_slot();
                call.call_mut().token = Some(HeldToken::Local(token));
                Err(Stop::wait(Wait::ForToken(call, token)))
            }
            Ok(Token::InLine) => {
                call.release_slot();
                Err(Stop::wait(Wait::InLine(call)))
            }
            Err(rejected) => Err(Stop::Refused(rejected)),
        })
    }

    /// The rate step on the key's local rate, then the bulkhead. (Always
    /// inlined: called from four places, the compiler would otherwise keep
    /// it apart, and move the call in and out of it on every admission.)
    #[inline(always)]
    pub(super) fn rate_then_slot<'c, A: Admitted<'c>>(
        &'c self,
        call: Admitting<'c>,
        request: &Request,
        settings: &KeySettings,
    ) -> Result<A, Stop<'c>> {
        let token = self.token_for(&call, request, settings)?;
        self.with_token(call, token, request)
    }

    /// Step 4 for `call`, as of when it was scheduled.
    #[inline(always)]
    fn token_for(
        &self,
        call: &Admitting<'_>,
        request: &Request,
        settings: &KeySettings,
    ) -> Result<Token, Rejected> {
        let c = call.call();
        let (now, cost) = (c.times.scheduled, c.cost);
        self.reserve_token(&c.state, settings, now, c.priority, request, cost)
    }

    /// The call's rate token, from step 4: due, the bulkhead; ahead or in
    /// line, a wait (or, for one key of a call charged to several, booked:
    /// it sleeps once every key's token is). (Always inlined, as
    /// [`rate_then_slot`](Self::rate_then_slot).)
    #[inline(always)]
    pub(super) fn with_token<'c, A: Admitted<'c>>(
        &'c self,
        mut call: Admitting<'c>,
        token: Token,
        request: &Request,
    ) -> Result<A, Stop<'c>> {
        match token {
            // Without a slot to take nothing can refuse the call from here:
            // the token is not kept to be given back, unless another key of
            // the call may yet refuse it.
            Token::Due(token) if !self.controls.bulkhead || !request.takes_slot() => {
                if A::KEEPS_TOKEN {
                    call.call_mut().token = token.map(HeldToken::Local);
                }
                Ok(A::from_call(call))
            }
            Token::Due(token) => {
                call.call_mut().token = token.map(HeldToken::Local);
                self.enter_bulkhead_step(call, request)
            }
            Token::Ahead(token) if request.scope == Scope::Token => {
                let c = call.call_mut();
                c.token = Some(HeldToken::Local(token));
                c.times.started = token.slot.start;
                Ok(A::from_call(call))
            }
            Token::Ahead(token) => {
                call.call_mut().token = Some(HeldToken::Local(token));
                Err(Stop::wait(Wait::ForToken(call, token)))
            }
            Token::InLine => Err(Stop::wait(Wait::InLine(call))),
        }
    }

    /// The last step, once the call's token is due: its bulkhead slot.
    #[inline(always)]
    pub(super) fn take_slot<'c, A: Admitted<'c>>(
        &'c self,
        call: Admitting<'c>,
        request: &Request,
    ) -> Result<A, Stop<'c>> {
        if !self.controls.bulkhead || !request.takes_slot() {
            return Ok(A::from_call(call));
        }
        self.enter_bulkhead_step(call, request)
    }

    fn enter_bulkhead_step<'c, A: Admitted<'c>>(
        &'c self,
        mut call: Admitting<'c>,
        request: &Request,
    ) -> Result<A, Stop<'c>> {
        match self.enter_slot(&mut call, request.patience, request.flow())? {
            Some(id) => Err(Stop::wait(Wait::InQueue(call, id))),
            None => Ok(A::from_call(call)),
        }
    }

    /// The slot of `call`, whose token is due: taken (`None`), or a place
    /// in the bulkhead's queue if `patience` waits there.
    ///
    /// # Errors
    ///
    /// The bulkhead's refusal.
    #[inline]
    pub(crate) fn enter_slot(
        &self,
        call: &mut Admitting<'_>,
        patience: Patience,
        flow: Option<Flow>,
    ) -> Result<Option<WaiterId>, Rejected> {
        let c = call.call();
        match self.enter_bulkhead(&c.state, c.priority, patience, flow, &c.telemetry)? {
            BulkheadPlace::NoBulkhead => Ok(None),
            BulkheadPlace::Held => {
                call.call_mut().holds_slot = true;
                Ok(None)
            }
            BulkheadPlace::Queued(id) => Ok(Some(id)),
        }
    }
}

impl Wait<'_> {
    /// Whether a caller of `patience` waits this out; otherwise it is
    /// refused at once ([`refused`](Self::refused)).
    fn is_waited_for_by(&self, patience: Patience) -> bool {
        match self {
            Wait::ForRoom(_) => patience.waits_for_room(),
            _ => !matches!(patience, Patience::Never),
        }
    }

    /// For a caller that does not wait for this: the refusal this wait
    /// stands for; what the call took goes back as it is dropped. (Under
    /// [`Patience::Never`] the rate and the bulkhead refuse rather than ask
    /// to wait, and under [`Patience::QueueOnly`] the rate does; a full key
    /// space always asks.)
    #[cold]
    pub(super) fn refused(self, core: &Core, request: &Request) -> Rejected {
        let priority = core.resolve(request.asked).unwrap_or(request.asked);
        match self {
            Wait::ForRoom(retry_at) => {
                let retry_after = Duration::from_nanos(retry_at.saturating_sub(core.now()));
                Rejected::new(RejectReason::KeySpaceFull, priority, Some(retry_after))
            }
            Wait::ForToken(call, token) => {
                let wait = token.slot.start.saturating_sub(call.call().times.scheduled);
                Rejected::rate_limited(wait, priority)
            }
            Wait::InQueue(call, id) => {
                if let Some((bulkhead, _)) = core.bulkhead_of(&call.call().state) {
                    // Dropped at once: leaves the queue.
                    drop(QueuedWait::new(
                        bulkhead,
                        usize::from(call.call().priority.level()),
                        id,
                    ));
                }
                Rejected::new(RejectReason::Full, priority, None)
            }
            // Never asked of a caller that does not wait: the rate refuses
            // it instead (see `Core::reserve_token` and `decide`).
            Wait::InLine(_) | Wait::ForStoreToken(_) => Rejected::rate_limited(0, priority),
        }
    }
}
