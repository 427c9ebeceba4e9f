//! The part of a manager that does not know the key type: the clock, each
//! control's default settings, the priorities, the classifier, and how one
//! key's controls admit a call and count its outcome.
//!
//! Permits talk to this [`Core`], never to the generic manager, so
//! [`Permit`](crate::Permit) has no key type parameter (tokio's
//! `SemaphorePermit` holds its `batch_semaphore` the same way). The manager
//! (`crate::manager`) finds a key's state and hands it here.

use std::future::Future;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use tracing::Span;

use crate::bulkhead::config::BulkheadSettings;
use crate::bulkhead::limiter::{Admission, Bulkhead, Refusal, Waiting};
use crate::bulkhead::queue::WaiterId;
use crate::clock::{Clock, Nanos, nanos};
use crate::error::{RejectReason, Rejected};
use crate::events;
use crate::key::KeyState;
use crate::metrics;
use crate::outcome::{Classifier, Outcome};
use crate::priority::{Priorities, Priority};
use crate::rate::cell::Reservation;
use crate::rate::config::RateSettings;
use crate::throttle::config::ThrottleSettings;
use crate::throttle::window::{Count, ThrottleWindow};

pub(crate) type RandomSource = dyn Fn() -> f64 + Send + Sync;

/// One control of a manager: present when any key may have it. A key has it
/// with its own settings (kept in its state) or, without them, these.
#[derive(Debug)]
pub(crate) struct Control<S> {
    /// `None`: only keys with their own settings have the control.
    pub(crate) default: Option<Arc<S>>,
}

impl<S> Control<S> {
    /// A key's settings: its own, else the default, if any.
    #[inline]
    pub(crate) fn settings<'s>(&'s self, own: Option<&'s S>) -> Option<&'s S> {
        own.or(self.default.as_deref())
    }
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
    /// for room in the key space or for a rate token. A server answers a
    /// client over its quota at once rather than hold its connection.
    #[cfg_attr(not(feature = "tower"), allow(dead_code))] // the server layer's
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
pub(crate) enum Slot {
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

/// What every clone of a manager, and every permit, shares.
pub(crate) struct Core {
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) rate: Option<Control<RateSettings>>,
    pub(crate) throttle: Option<Control<ThrottleSettings>>,
    pub(crate) bulkhead: Option<Control<BulkheadSettings>>,
    pub(crate) priorities: Priorities,
    /// `None`: the built-in per-thread generator.
    pub(crate) random: Option<Box<RandomSource>>,
    /// Judges unmarked errors of `call`; `None`: all neutral.
    pub(crate) classifier: Option<Box<Classifier>>,
    /// The default timeout of `call`.
    pub(crate) call_timeout: Option<Duration>,
    /// The longest pause `defer` accepts.
    pub(crate) max_defer: Duration,
    /// By priority level, the longest `acquire` and `call` wait for a rate
    /// token; `None`: no limit.
    pub(crate) max_wait: Box<[Option<Duration>]>,
    /// Shared with the key space: a permit whose key it was the last to
    /// hold tells those waiting for room.
    pub(crate) room: Arc<crate::registry::RoomSignal>,
    /// Where every key's rate lives when it is shared across processes.
    #[cfg(feature = "redis")]
    pub(crate) store: Option<Arc<crate::store::RedisStore>>,
}

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Core")
            .field("rate", &self.rate)
            .field("throttle", &self.throttle)
            .field("bulkhead", &self.bulkhead)
            .field("priorities", &self.priorities)
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

/// # Reading a key's controls
impl Core {
    #[inline]
    pub(crate) fn now(&self) -> Nanos {
        self.clock.now_nanos()
    }

    /// The key's rate in force: shared, while a store has answered for it
    /// and answers, else its own.
    #[inline]
    pub(crate) fn rate_in_force(&self, state: &KeyState) -> f64 {
        #[cfg(feature = "redis")]
        if let Some(rate) = self.shared_rate(state) {
            return rate;
        }
        state.rate.rate()
    }

    /// The key's rate settings, if the key has a rate.
    #[inline]
    pub(crate) fn rate_of<'s>(&'s self, state: &'s KeyState) -> Option<&'s RateSettings> {
        self.rate.as_ref()?.settings(state.rate_settings())
    }

    /// The key's throttle window and its settings, if the key has a
    /// throttle.
    #[inline]
    pub(crate) fn throttle_of<'s>(
        &'s self,
        state: &'s KeyState,
    ) -> Option<(&'s ThrottleWindow, &'s ThrottleSettings)> {
        let control = self.throttle.as_ref()?;
        let (window, own) = state.throttle_with_settings()?;
        Some((window, control.settings(own)?))
    }

    /// The key's bulkhead and its settings, if the key has a bulkhead.
    #[inline]
    pub(crate) fn bulkhead_of<'s>(
        &'s self,
        state: &'s KeyState,
    ) -> Option<(&'s Bulkhead, &'s BulkheadSettings)> {
        let control = self.bulkhead.as_ref()?;
        let (bulkhead, own) = state.bulkhead_with_settings()?;
        Some((bulkhead, control.settings(own)?))
    }

    /// The priority a call is judged at, or the rejection for it.
    #[inline]
    pub(crate) fn resolve(&self, asked: Priority) -> Result<Priority, Rejected> {
        self.priorities
            .resolve(asked)
            .ok_or_else(|| Rejected::new(RejectReason::InvalidPriority, asked, None))
    }

    /// The longest a call at `priority` (resolved) waits for its token.
    #[inline]
    pub(crate) fn max_wait(&self, priority: Priority) -> Option<Duration> {
        let levels = &self.max_wait;
        levels[usize::from(priority.level()).min(levels.len() - 1)]
    }

    /// The priority that outcomes reported without a permit count at: the
    /// task's, else [`Priority::HIGH`].
    #[inline]
    pub(crate) fn outcome_priority(&self) -> Priority {
        let asked = Priority::current().unwrap_or(Priority::HIGH);
        self.priorities.clamp(asked)
    }

    #[inline]
    fn draw(&self) -> f64 {
        match &self.random {
            Some(random) => random(),
            None => crate::throttle::random_unit(),
        }
    }

    /// `future`'s output, or `None` if the clock reaches `deadline` first
    /// (then `future` is dropped unfinished).
    pub(crate) async fn before<F: Future>(&self, deadline: Nanos, future: F) -> Option<F::Output> {
        let mut timer = self.clock.sleep_until(Duration::from_nanos(deadline));
        let mut future = std::pin::pin!(future);
        std::future::poll_fn(|cx| {
            if let Poll::Ready(output) = future.as_mut().poll(cx) {
                return Poll::Ready(Some(output));
            }
            timer.as_mut().poll(cx).map(|()| None)
        })
        .await
    }
}

/// # Admission: the steps of one call, in the one order they run
///
/// The manager's pipeline (`manager/admission.rs`) calls these in turn:
/// throttle, bulkhead room, rate token, bulkhead slot. Each step takes the
/// caller's [`Patience`] and decides at once; the two that may have to
/// wait say so, and their waiting half (`sleep_for_token`,
/// `wait_in_queue`) is a separate async function, so a call that waits for
/// nothing runs no async machinery. None waits under [`Patience::Never`].
impl Core {
    /// Step 1: whether the throttle lets a call through; a shed call is
    /// counted as a request, as in the SRE book.
    ///
    /// A call the throttle would shed, but whose rate token lies further
    /// ahead than the caller would wait, is refused by the rate instead and
    /// not counted: the throttle counts the calls that would otherwise have
    /// gone to the backend. Otherwise, while a rate at its lower bound turns
    /// most calls away, every one the throttle shed first would count as a
    /// request the backend did not accept, and keep the throttle shedding
    /// long after the backend has recovered. Only the shedding path reads
    /// the rate.
    #[inline]
    pub(crate) fn throttle_admits(
        &self,
        state: &KeyState,
        now: Nanos,
        priority: Priority,
        patience: Patience,
        span: &Span,
    ) -> Result<(), Rejected> {
        let Some((window, settings)) = self.throttle_of(state) else {
            return Ok(());
        };
        let level = usize::from(priority.level());
        let probability = window.rejection(now, level, settings);
        if probability == 0.0 {
            if window.note_shedding(false) {
                events::shedding(span, priority, probability, false);
            }
            return Ok(());
        }
        self.maybe_shed(state, now, priority, patience, span, probability)
    }

    /// Step 1 for a key whose throttle may shed: draws, and sheds or not.
    fn maybe_shed(
        &self,
        state: &KeyState,
        now: Nanos,
        priority: Priority,
        patience: Patience,
        span: &Span,
        probability: f64,
    ) -> Result<(), Rejected> {
        if self.draw() >= probability {
            return Ok(());
        }
        let Some((window, settings)) = self.throttle_of(state) else {
            return Ok(());
        };
        if let Some(rate) = self.rate_of(state) {
            let wait = state.rate.wait(now, rate.burst);
            if wait > self.patience_for_token(priority, patience) {
                return Err(Rejected::rate_limited(wait, priority));
            }
        }
        let level = usize::from(priority.level());
        window.record(now, level, Count::Request, settings);
        if window.note_shedding(true) {
            events::shedding(span, priority, probability, true);
        }
        Err(Rejected::new(RejectReason::Throttled, priority, None))
    }

    /// Step 2: a call the bulkhead would turn away anyway is refused before
    /// it takes a rate token.
    #[inline]
    pub(crate) fn bulkhead_has_room(
        &self,
        state: &KeyState,
        priority: Priority,
        patience: Patience,
    ) -> Result<(), Rejected> {
        if self.bulkhead.is_none() {
            return Ok(());
        }
        self.bulkhead_room(state, priority, patience)
    }

    fn bulkhead_room(
        &self,
        state: &KeyState,
        priority: Priority,
        patience: Patience,
    ) -> Result<(), Rejected> {
        let Some((bulkhead, settings)) = self.bulkhead_of(state) else {
            return Ok(());
        };
        let refusal = match patience {
            Patience::Never => bulkhead.has_no_free_slot(settings),
            _ => bulkhead.would_refuse(settings, usize::from(priority.level())),
        };
        refusal.map_or(Ok(()), |refusal| Err(refusal.rejected(priority)))
    }

    /// Step 3: the key's next rate token, if the caller waits as long as
    /// it lies ahead. A token further ahead than that is not taken: the
    /// rejection says how far ahead it was. Without a rate, no token.
    #[inline]
    pub(crate) fn reserve_token(
        &self,
        state: &KeyState,
        now: Nanos,
        priority: Priority,
        patience: Patience,
    ) -> Result<Token, Rejected> {
        let Some(settings) = self.rate_of(state) else {
            return Ok(Token::Due(None));
        };
        let patience = self.patience_for_token(priority, patience);
        let reservation = state
            .rate
            .reserve(now, settings.burst, patience)
            .map_err(|wait| Rejected::rate_limited(wait, priority))?;
        Ok(if reservation.slot.start <= now {
            Token::Due(Some(reservation))
        } else {
            Token::Ahead(reservation)
        })
    }

    /// Step 3, when the token lies ahead: sleeps until it is due, and
    /// returns that time. Dropped before then, it hands the token back.
    pub(crate) async fn sleep_for_token(
        &self,
        state: &KeyState,
        reservation: Reservation,
    ) -> Nanos {
        let pending = PendingToken {
            state,
            reservation: Some(reservation),
        };
        self.clock
            .sleep_until(Duration::from_nanos(reservation.slot.start))
            .await;
        pending.started();
        reservation.slot.start
    }

    /// Step 4: a slot of the key's bulkhead, or (if the caller waits) a
    /// place in its queue. Reports the bulkhead filling up.
    #[inline]
    pub(crate) fn enter_bulkhead(
        &self,
        state: &KeyState,
        priority: Priority,
        patience: Patience,
        telemetry: &KeyTelemetry,
    ) -> Result<Slot, Rejected> {
        if self.bulkhead.is_none() {
            return Ok(Slot::NoBulkhead);
        }
        self.take_bulkhead_slot(state, priority, patience, telemetry)
    }

    fn take_bulkhead_slot(
        &self,
        state: &KeyState,
        priority: Priority,
        patience: Patience,
        telemetry: &KeyTelemetry,
    ) -> Result<Slot, Rejected> {
        let Some((bulkhead, settings)) = self.bulkhead_of(state) else {
            return Ok(Slot::NoBulkhead);
        };
        let admission = match patience {
            Patience::Never => bulkhead.try_acquire(settings).map(Admission::Granted),
            _ => {
                let levels = usize::from(self.priorities.levels);
                bulkhead.enter(settings, usize::from(priority.level()), levels)
            }
        };
        match admission.map_err(|refusal| refusal.rejected(priority))? {
            Admission::Granted(active) => {
                if active == bulkhead.limit(settings) {
                    events::bulkhead_filled(telemetry.span(), priority, active);
                }
                Ok(Slot::Held)
            }
            Admission::Queued(id) => Ok(Slot::Queued(id)),
        }
    }

    /// Steps 3 and 5 at once, for a call that goes on now or not at all:
    /// a free slot of the key's bulkhead, taken without queueing (no slot
    /// is free while anyone waits for one). The `bulkhead full` event is
    /// left to [`Core::slot_taken`], once the call is admitted.
    #[inline]
    pub(crate) fn take_free_slot(&self, state: &KeyState) -> FreeSlot {
        if self.bulkhead.is_none() {
            return FreeSlot::NoBulkhead;
        }
        let Some((bulkhead, settings)) = self.bulkhead_of(state) else {
            return FreeSlot::NoBulkhead;
        };
        match bulkhead.try_acquire(settings) {
            Ok(active) => FreeSlot::Taken {
                filled: (active == bulkhead.limit(settings)).then_some(active),
            },
            Err(refusal) => FreeSlot::None(refusal),
        }
    }

    /// A call admitted with a slot from [`Core::take_free_slot`]: reports
    /// the bulkhead filling up if the slot was the last (`filled`: the
    /// calls then in flight).
    #[inline]
    pub(crate) fn slot_taken(
        &self,
        priority: Priority,
        filled: Option<u32>,
        telemetry: &KeyTelemetry,
    ) {
        if let Some(active) = filled {
            events::bulkhead_filled(telemetry.span(), priority, active);
        }
    }

    /// Step 4, for a call in the bulkhead's queue: waits for its slot, up
    /// to the queue timeout (counted from `since`). Dropped while waiting,
    /// it leaves the queue, handing on a slot it was given meanwhile.
    pub(crate) async fn wait_in_queue(
        &self,
        state: &KeyState,
        priority: Priority,
        id: WaiterId,
        since: Nanos,
        telemetry: &KeyTelemetry,
    ) -> Result<(), Rejected> {
        let Some((bulkhead, settings)) = self.bulkhead_of(state) else {
            return Ok(()); // unreachable: only a bulkhead queues
        };
        let refused = |refusal: Refusal| refusal.rejected(priority);
        let _queued = metrics::Queued::enter(telemetry.label());
        let mut waiting = Waiting::new(bulkhead, usize::from(priority.level()), id);
        let Some(timeout) = settings.queue_timeout else {
            return (&mut waiting).await.map_err(refused);
        };
        match self
            .before(since.saturating_add(timeout), &mut waiting)
            .await
        {
            Some(outcome) => outcome.map_err(refused),
            None => waiting
                .give_up(RejectReason::QueueTimeout)
                .map_err(|refusal| {
                    events::queue_timed_out(telemetry.span(), priority, refusal.load);
                    refused(refusal)
                }),
        }
    }

    /// How far ahead a rate token may lie for a caller of `patience`.
    #[inline]
    pub(crate) fn patience_for_token(&self, priority: Priority, patience: Patience) -> Nanos {
        match patience {
            Patience::Never | Patience::QueueOnly => 0,
            Patience::AsConfigured => self.max_wait(priority).map_or(Nanos::MAX, nanos),
            Patience::Unbounded => Nanos::MAX,
        }
    }
}

/// # Outcomes
impl Core {
    /// A call admitted at `started` that held a slot of its key's bulkhead
    /// ended as `outcome`: a learned limit learns from it (reading the
    /// clock; a fixed limit does not), then the slot goes back, to the head
    /// of the queue if anyone waits; a limit that rose hands its new slots
    /// to the queue too.
    #[inline]
    pub(crate) fn release_slot(
        &self,
        state: &KeyState,
        started: Nanos,
        outcome: Outcome,
        telemetry: &KeyTelemetry,
    ) {
        let Some(bulkhead) = state.bulkhead() else {
            return;
        };
        if bulkhead.is_learned() {
            return self.release_learned_slot(state, started, outcome, telemetry);
        }
        bulkhead.release();
        metrics::active(telemetry.label(), -1.0);
    }

    fn release_learned_slot(
        &self,
        state: &KeyState,
        started: Nanos,
        outcome: Outcome,
        telemetry: &KeyTelemetry,
    ) {
        let Some((bulkhead, settings)) = self.bulkhead_of(state) else {
            return;
        };
        let changed = match outcome {
            Outcome::Neutral => None, // says nothing about capacity
            Outcome::Success | Outcome::Overloaded => {
                let now = self.now();
                let overloaded = outcome == Outcome::Overloaded;
                bulkhead.learn(settings, now, now.saturating_sub(started), overloaded)
            }
        };
        bulkhead.release();
        metrics::active(telemetry.label(), -1.0);
        if let Some(change) = changed {
            if change.after != change.before {
                metrics::concurrency_limit(telemetry.label(), change.after);
            }
            if change.turned {
                events::concurrency_limit_turned(telemetry.span(), change.before, change.after);
            }
            if change.after > change.before {
                bulkhead.grant_waiters(settings);
            }
        }
    }

    /// Counts the outcome of a call scheduled and admitted at `times`. The
    /// throttle counts a call when its outcome is known: a call still in
    /// flight is not yet a request, so a healthy call costs it one
    /// `fetch_add`.
    #[inline]
    pub(crate) fn record_outcome(
        &self,
        state: &KeyState,
        priority: Priority,
        times: CallTimes,
        outcome: Outcome,
        telemetry: &KeyTelemetry,
    ) {
        let label = telemetry.label();
        metrics::outcome(label, outcome);
        match outcome {
            Outcome::Success => {
                // The window puts the count in its newest bucket, and a rate
                // at its upper bound does not change: a healthy key's success
                // reads no clock.
                self.count(state, times.started, priority, Count::Accepted);
                if let Some(settings) = self.rate_of(state) {
                    let change = state.rate.increase(
                        || self.now(),
                        times.scheduled,
                        times.started,
                        settings,
                    );
                    events::rate_changed(telemetry.span(), change);
                    if change.from != change.to {
                        metrics::rate(label, change.to);
                    }
                }
            }
            Outcome::Overloaded => {
                let now = self.now();
                self.count(state, now, priority, Count::Request);
                if let Some(settings) = self.rate_of(state) {
                    let change = state.rate.decrease(now, times.scheduled, settings);
                    events::rate_changed(telemetry.span(), change);
                    metrics::rate(label, change.to);
                }
            }
            Outcome::Neutral => self.count(state, times.started, priority, Count::Accepted),
        }
        #[cfg(feature = "redis")]
        self.share_outcome(state, times, outcome);
    }

    #[inline]
    fn count(&self, state: &KeyState, now: Nanos, priority: Priority, count: Count) {
        if let Some((window, settings)) = self.throttle_of(state) {
            window.record(now, usize::from(priority.level()), count, settings);
        }
    }
}

/// A token taken for a call that has not started: if dropped before it
/// starts, hands the token back.
struct PendingToken<'a> {
    state: &'a KeyState,
    reservation: Option<Reservation>,
}

impl PendingToken<'_> {
    fn started(mut self) {
        self.reservation = None;
    }
}

impl Drop for PendingToken<'_> {
    fn drop(&mut self) {
        if let Some(reservation) = self.reservation.take() {
            self.state.rate.cancel(reservation);
        }
    }
}
