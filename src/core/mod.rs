//! The part of a manager that does not know the key type: the clock, each
//! control's default settings, the priorities, the classifier, and how one
//! key's controls admit a call and count its outcome.
//!
//! Permits talk to this [`Core`], never to the generic manager, so
//! [`Permit`](crate::manager::Permit) has no key type parameter (tokio's
//! `SemaphorePermit` holds its `batch_semaphore` the same way). The manager
//! (`crate::manager`) finds a key's state and hands it here.
//!
//! This file holds the types the steps share, the `Core` and how it reads a
//! key's controls. Admitting a call: `request` (what a call asks),
//! `drive` (the one driver, as far as it goes without waiting), `steps`
//! (each control's step, in their one order), `waiting` (the loop that
//! waits where the driver stopped), `admitting` (a call on its way, and
//! what it gives back if dropped), `shared_rate` (a rate kept in a store).
//! Then `outcomes` (how a call's end is counted) and `settings` (where a
//! key finds its settings, and how they change on a live manager).
//!
//! The words used here (debt, fall, news, quiet, room, hold, ticket, ...)
//! are defined once, in [the architecture map](crate::guide::architecture).

mod admitting;
mod drive;
mod outcomes;
mod request;
mod settings;
pub(crate) mod shared_rate;
mod steps;
mod waiting;

pub(crate) use admitting::{Admitted, Admitting, HeldToken, Spent};
pub(crate) use drive::{Lookup, Stop};
pub(crate) use request::{Request, Scope, StartBy};
pub(crate) use settings::{
    KeySettings, MAX_SETTINGS, ResolvedSettings, SettingsId, SettingsTable, SettingsWord,
};

use std::future::Future;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use tracing::Span;

use crate::bulkhead::BulkheadSettings;
use crate::bulkhead::WaiterId;
use crate::bulkhead::{Bulkhead, Refusal};
use crate::clock::{Clock, Nanos};
use crate::error::{RejectReason, Rejected};
use crate::key::KeyState;
use crate::outcome::Classifier;
use crate::priority::{Priorities, Priority};
use crate::rate::RateSettings;
use crate::rate::Reservation;
use crate::throttle::ThrottleSettings;
use crate::throttle::ThrottleWindow;

pub(crate) type RandomSource = dyn Fn() -> f64 + Send + Sync;

/// Which controls a manager has: a control any key may have, by its
/// defaults, a tier or an override. Fixed when the manager is built (a
/// key's state is made for them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct BuiltControls {
    pub(crate) rate: bool,
    pub(crate) throttle: bool,
    pub(crate) bulkhead: bool,
}

/// How long a caller would wait: the one difference between
/// [`try_acquire`](crate::ThrottleManager::try_acquire) and
/// [`acquire`](crate::ThrottleManager::acquire).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Patience {
    /// Not at all: no waiting for room in the key space, for a rate token or
    /// in the bulkhead's queue.
    Never,
    /// For room in the key space, for a rate token up to the priority's
    /// `max_wait`, and in the bulkhead's queue as configured.
    AsConfigured,
    /// As configured, but for a rate token however far ahead it lies:
    /// [`wait`](crate::ThrottleManager::wait).
    Unbounded,
    /// In the bulkhead's queue as configured, and nowhere else: no waiting
    /// for room in the key space or for a rate token
    /// ([`try_acquire_or_queue_owned`](crate::ThrottleManager::try_acquire_or_queue_owned)).
    QueueOnly,
}

impl Patience {
    /// Whether a new key in a full key space waits for room.
    pub(crate) fn waits_for_room(self) -> bool {
        matches!(self, Patience::AsConfigured | Patience::Unbounded)
    }
}

/// A call's rate token, from [`Core::reserve_token`].
#[derive(Debug)]
pub(crate) enum Token {
    /// Due now (`None`: the key has no rate).
    Due(Option<Reservation>),
    /// Taken, but not due until its slot starts: sleep for it.
    Ahead(Reservation),
    /// Not taken: further ahead than a call books, or others are in line
    /// before it. Wait for its turn ([`Core::wait_in_line`]).
    InLine,
}

/// A free slot, from [`Core::take_free_slot`].
#[derive(Debug)]
pub(crate) enum FreeSlot {
    NoBulkhead,
    /// Taken; `filled`: the calls in flight, if it was the last free one.
    Taken {
        filled: Option<u32>,
    },
    /// None free: the refusal of a call that does not queue.
    None(Refusal),
}

/// A call's place in its key's bulkhead, from [`Core::enter_bulkhead`].
#[derive(Debug)]
pub(crate) enum BulkheadPlace {
    NoBulkhead,
    Held,
    /// In the queue: wait for the slot with [`Core::wait_in_queue`].
    Queued(WaiterId),
}

/// When a permitted call was scheduled by the rate and when it was let go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CallTimes {
    /// When the call took its place in the rate's queue: its outcome moves
    /// the rate only if that was after the rate's last decrease.
    pub(crate) scheduled: Nanos,
    /// When the call was admitted: its outcome counts in the throttle's
    /// bucket of that time.
    pub(crate) started: Nanos,
}

impl CallTimes {
    /// Whether the call waited between its place in the queue and its
    /// start: for its rate token (the rate was what limited it, so its
    /// success may raise the rate further above the key's measured use; see
    /// `rate::aimd::validated_ceiling`), in the bulkhead's queue, or for a
    /// shared rate's answer. Told from the two times, not kept beside them:
    /// 8 bytes more in every permit made a healthy `try_acquire` about a
    /// fifth slower.
    pub(crate) fn waited(&self) -> bool {
        self.started > self.scheduled
    }
}

impl CallTimes {
    /// A call scheduled and admitted at the same moment.
    pub(crate) fn at(now: Nanos) -> Self {
        Self {
            scheduled: now,
            started: now,
        }
    }
}

/// How events and metrics name a key: a span (only while debug events are
/// enabled) and a metrics label (only with per-key metrics). One pointer,
/// null on the hot path of a manager with neither.
#[derive(Debug, Default)]
pub(crate) struct KeyTelemetry(Option<Box<Names>>);

#[derive(Debug)]
struct Names {
    span: Option<Span>,
    label: Option<String>,
}

impl KeyTelemetry {
    pub(crate) fn new(span: Option<Span>, label: Option<String>) -> Self {
        if span.is_none() && label.is_none() {
            return Self(None);
        }
        Self(Some(Box::new(Names { span, label })))
    }

    #[inline]
    pub(crate) fn span(&self) -> &Span {
        static NO_SPAN: Span = Span::none();
        let names = self.0.as_deref();
        names.and_then(|n| n.span.as_ref()).unwrap_or(&NO_SPAN)
    }

    #[inline]
    pub(crate) fn label(&self) -> Option<&str> {
        self.0.as_deref()?.label.as_deref()
    }
}

/// How a manager's calls are judged and how long they may wait, as the
/// builder checked them: fixed for the manager's life.
pub(crate) struct CallRules {
    pub(crate) priorities: Priorities,
    /// `None`: the built-in per-thread generator.
    pub(crate) random: Option<Box<RandomSource>>,
    /// How calls are retried; `None`: they are not.
    pub(crate) retry: Option<crate::retry_budget::RetrySettings>,
    /// Judges unmarked errors of `call`; `None`: all neutral.
    pub(crate) classifier: Option<Box<Classifier>>,
    /// The default timeout of `call`.
    pub(crate) call_timeout: Option<Duration>,
    /// The longest pause `defer` accepts.
    pub(crate) max_defer: Duration,
    /// By priority level, the longest `acquire` and `call` wait for a rate
    /// token; `None`: no limit.
    pub(crate) max_wait: Box<[Option<Duration>]>,
}

impl std::fmt::Debug for CallRules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallRules")
            .field("priorities", &self.priorities)
            .field("call_timeout", &self.call_timeout)
            .field("max_defer", &self.max_defer)
            .finish_non_exhaustive()
    }
}

/// What every clone of a manager, and every permit, shares. Its state is
/// private to `core`: the manager and the edges read it through the
/// methods below and change it through `settings`' and `outcomes`'.
pub(crate) struct Core {
    clock: Arc<dyn Clock>,
    controls: BuiltControls,
    /// Every key's settings, by the number its state holds.
    settings: SettingsTable,
    calls: CallRules,
    /// Shared with the key space: a permit whose key it was the last to
    /// hold tells those waiting for room.
    room: Arc<crate::registry::RoomSignal>,
    /// Where every key's rate lives when it is shared across processes.
    store: Option<Arc<crate::store::StoreHandle>>,
    /// The manager's series, labelled with its name.
    metrics: crate::metrics::ManagerMetrics,
}

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Core")
            .field("controls", &self.controls)
            .field("calls", &self.calls)
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

/// # What a manager was built with
impl Core {
    pub(crate) fn new(
        clock: Arc<dyn Clock>,
        controls: BuiltControls,
        calls: CallRules,
        room: Arc<crate::registry::RoomSignal>,
        store: Option<Arc<crate::store::StoreHandle>>,
        metrics: crate::metrics::ManagerMetrics,
    ) -> Self {
        Self {
            clock,
            controls,
            settings: SettingsTable::new(),
            calls,
            room,
            store,
            metrics,
        }
    }

    /// The manager's clock: every time the crate reads is read from it.
    pub(crate) fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    pub(crate) fn controls(&self) -> BuiltControls {
        self.controls
    }

    pub(crate) fn settings_table(&self) -> &SettingsTable {
        &self.settings
    }

    pub(crate) fn priorities(&self) -> Priorities {
        self.calls.priorities
    }

    pub(crate) fn retry_settings(&self) -> Option<&crate::retry_budget::RetrySettings> {
        self.calls.retry.as_ref()
    }

    pub(crate) fn classifier(&self) -> Option<&Classifier> {
        self.calls.classifier.as_deref()
    }

    pub(crate) fn call_timeout(&self) -> Option<Duration> {
        self.calls.call_timeout
    }

    pub(crate) fn max_defer(&self) -> Duration {
        self.calls.max_defer
    }

    /// By priority level, the longest wait for a rate token.
    pub(crate) fn max_waits(&self) -> &[Option<Duration>] {
        &self.calls.max_wait
    }

    pub(crate) fn room(&self) -> &crate::registry::RoomSignal {
        &self.room
    }

    pub(crate) fn store(&self) -> Option<&Arc<crate::store::StoreHandle>> {
        self.store.as_ref()
    }

    pub(crate) fn metrics(&self) -> &crate::metrics::ManagerMetrics {
        &self.metrics
    }
}

/// # Reading a key's controls
impl Core {
    #[inline]
    pub(crate) fn now(&self) -> Nanos {
        self.clock.now_nanos()
    }

    /// The time from `then` to now.
    pub(crate) fn since(&self, then: Nanos) -> Duration {
        Duration::from_nanos(self.now().saturating_sub(then))
    }

    /// The key's rate in force: shared, while a store has answered for it
    /// and answers, else its own.
    #[inline]
    pub(crate) fn rate_in_force(&self, state: &KeyState) -> f64 {
        if let Some(rate) = self.shared_rate(state) {
            return rate;
        }
        state.rate.rate()
    }

    /// The key's rate settings, if the key has a rate.
    #[inline]
    pub(crate) fn rate_of(&self, state: &KeyState) -> Option<&RateSettings> {
        self.settings_of(state).rate.as_ref()
    }

    /// The key's throttle window and its settings, if the key has a
    /// throttle.
    #[inline]
    pub(crate) fn throttle_of<'s>(
        &'s self,
        state: &'s KeyState,
    ) -> Option<(&'s ThrottleWindow, &'s ThrottleSettings)> {
        self.settings_of(state).throttle_of(state)
    }

    /// The key's bulkhead and its settings, if the key has a bulkhead.
    #[inline]
    pub(crate) fn bulkhead_of<'s>(
        &'s self,
        state: &'s KeyState,
    ) -> Option<(&'s Bulkhead, &'s BulkheadSettings)> {
        self.settings_of(state).bulkhead_of(state)
    }

    /// The priority a call is judged at, or the rejection for it.
    #[inline]
    pub(crate) fn resolve(&self, asked: Priority) -> Result<Priority, Rejected> {
        self.calls
            .priorities
            .resolve(asked)
            .ok_or_else(|| Rejected::new(RejectReason::InvalidPriority, asked, None))
    }

    /// The longest a call at `priority` (resolved) waits for its token.
    #[inline]
    pub(crate) fn max_wait(&self, priority: Priority) -> Option<Duration> {
        let levels = &self.calls.max_wait;
        levels[usize::from(priority.level()).min(levels.len() - 1)]
    }

    /// The priority that outcomes reported without a permit count at: the
    /// task's, else [`Priority::HIGH`].
    #[inline]
    pub(crate) fn outcome_priority(&self) -> Priority {
        let asked = Priority::current().unwrap_or(Priority::HIGH);
        self.calls.priorities.clamp(asked)
    }

    /// A uniform draw in `[0, 1)`, from the manager's random source.
    #[inline]
    pub(crate) fn draw(&self) -> f64 {
        match &self.calls.random {
            Some(random) => random(),
            None => crate::throttle::random_unit(),
        }
    }

    /// `future`'s output, or `None` if the clock reaches `deadline` first
    /// (then the caller drops `future` unfinished). `Unpin`: the caller
    /// passes its future pinned where it lives (`pin!(f)`, `&mut f`), so
    /// the caller's state machine holds it once, not once more in this
    /// one's.
    pub(crate) async fn before<F: Future + Unpin>(
        &self,
        deadline: Nanos,
        mut future: F,
    ) -> Option<F::Output> {
        let mut timer = self.clock.sleep_until(Duration::from_nanos(deadline));
        std::future::poll_fn(|cx| {
            if let Poll::Ready(output) = std::pin::Pin::new(&mut future).poll(cx) {
                return Poll::Ready(Some(output));
            }
            timer.as_mut().poll(cx).map(|()| None)
        })
        .await
    }
}
