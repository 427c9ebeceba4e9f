//! The steps of admitting one call, in the one order they run.

use std::time::Duration;

use tracing::Span;

use super::request::{Request, StartBy};
use super::{BulkheadPlace, Core, FreeSlot, KeySettings, KeyTelemetry, Patience, Token};
use crate::bulkhead::WaiterId;
use crate::bulkhead::{QueuedWait, Refusal, SlotAnswer, Waiter};
use crate::clock::{Nanos, nanos};
use crate::error::{RejectReason, Rejected};
use crate::events;
use crate::key::KeyState;
use crate::metrics;
use crate::priority::{Flow, Priority};
use crate::rate::Reservation;
use crate::rate::{self, HORIZON};
use crate::throttle::Count;

/// # Admission: the steps of one call, in the one order they run
///
/// The driver (`drive.rs`, `waiting.rs`) calls these in turn,
/// numbered as [`acquire`](crate::ThrottleManager::acquire) documents them
/// (step 1, the key's state, is the key space's): 2 the throttle, 3 room in
/// the bulkhead, 4 the rate token, 5 the bulkhead's slot. Each step takes the
/// caller's [`Patience`] and decides at once; the two that may have to
/// wait say so, and their waiting half (`sleep_for_token`,
/// `wait_in_queue`) is a separate async function, so a call that waits for
/// nothing runs no async machinery. None waits under [`Patience::Never`].
impl Core {
    /// Step 2: whether the throttle lets a call through; a shed call is
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
    #[inline(always)]
    pub(crate) fn throttle_admits(
        &self,
        state: &KeyState,
        settings: &KeySettings,
        now: Nanos,
        priority: Priority,
        request: &Request,
        span: &Span,
    ) -> Result<(), Rejected> {
        let Some((window, settings)) = settings.throttle_of(state) else {
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
        self.maybe_shed(state, now, priority, request, span, probability)
    }

    /// Step 2 for a key whose throttle may shed: draws, and sheds or not.
    fn maybe_shed(
        &self,
        state: &KeyState,
        now: Nanos,
        priority: Priority,
        request: &Request,
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
            let wait = state.rate.wait(now, rate.burst, request.cost);
            if wait > self.patience_for_token(state, now, priority, request) {
                return Err(self.token_too_far(wait, priority, request.patience));
            }
        }
        let level = usize::from(priority.level());
        window.record(
            now,
            level,
            Count::Request,
            self.calls.priorities.levels,
            settings,
        );
        if window.note_shedding(true) {
            events::shedding(span, priority, probability, true);
        }
        Err(Rejected::new(RejectReason::Throttled, priority, None))
    }

    /// Before step 2: a call costing more tokens than the key's burst
    /// could never be admitted (no wait makes room for it), so it is
    /// refused at once, counted by no control. Without a rate, a cost is
    /// nothing to fit.
    #[inline]
    pub(crate) fn cost_fits(
        &self,
        settings: &KeySettings,
        priority: Priority,
        cost: u32,
    ) -> Result<(), Rejected> {
        // Every burst holds one token: the common call looks no further.
        if cost <= 1 {
            return Ok(());
        }
        match &settings.rate {
            Some(settings) if cost > settings.burst => {
                Err(Rejected::cost_above_burst(cost, settings.burst, priority))
            }
            _ => Ok(()),
        }
    }

    /// Step 3: a call the bulkhead would turn away anyway is refused before
    /// it takes a rate token. A single-key caller that never waits meets
    /// the bulkhead's free slot first (`Core::free_slot_then_rate`), which
    /// admits or refuses it; one key of a call charged to several takes its
    /// slot once every key's token is due, and is asked here first.
    #[inline]
    pub(crate) fn bulkhead_has_room(
        &self,
        state: &KeyState,
        priority: Priority,
        request: &Request,
    ) -> Result<(), Rejected> {
        if !self.controls.bulkhead {
            return Ok(());
        }
        self.bulkhead_room(state, priority, request)
    }

    fn bulkhead_room(
        &self,
        state: &KeyState,
        priority: Priority,
        request: &Request,
    ) -> Result<(), Rejected> {
        let Some((bulkhead, settings)) = self.bulkhead_of(state) else {
            return Ok(());
        };
        let level = usize::from(priority.level());
        let refusal = bulkhead.would_refuse(settings, level, || request.flow());
        refusal.map_or(Ok(()), |refusal| Err(refusal.rejected(priority)))
    }

    /// Step 4: the key's next `cost` rate tokens, if the caller waits as
    /// long as they lie ahead. Tokens further ahead than that are not
    /// taken: the rejection says how far ahead they were. Tokens within
    /// the caller's patience but beyond the booking horizon, or behind
    /// calls already in the key's line, are not taken either: the call
    /// joins the line (`rate/line.rs`). Without a rate,
    /// no token. (A cost above the burst never gets here: see
    /// [`Core::cost_fits`].)
    #[inline(always)]
    pub(crate) fn reserve_token(
        &self,
        state: &KeyState,
        settings: &KeySettings,
        now: Nanos,
        priority: Priority,
        request: &Request,
        cost: u32,
    ) -> Result<Token, Rejected> {
        let Some(settings) = &settings.rate else {
            return Ok(Token::Due(None));
        };
        let caller = request.patience;
        let patience = self.patience_for_token(state, now, priority, request);
        let in_line = state.rate.waiting_in_line();
        if in_line == 0 {
            return match state
                .rate
                .reserve(now, settings.burst, cost, patience.min(HORIZON))
            {
                Ok(reservation) if reservation.slot.start <= now => {
                    Ok(Token::Due(Some(reservation)))
                }
                Ok(reservation) => Ok(Token::Ahead(reservation)),
                Err(wait) if wait > patience => Err(self.token_too_far(wait, priority, caller)),
                // Within the caller's patience, beyond the horizon.
                Err(_) => Ok(Token::InLine),
            };
        }
        // Behind the calls in line: expected at the rate now.
        let wait = state.rate.wait(now, settings.burst, cost);
        let interval = rate::interval(state.rate.rate());
        let expected = rate::expected_wait(wait, in_line, cost, interval);
        if expected > patience {
            return Err(self.token_too_far(expected, priority, caller));
        }
        Ok(Token::InLine)
    }

    /// Step 4, in the key's line: waits for this call's turn, then for its
    /// token to come within the booking horizon, and takes it (the line's
    /// next call then has its turn). Returns the token and when it was
    /// taken. Refused if the token would start later than `patience` after
    /// `arrived` (the rate fell while the call was in line).
    ///
    /// Dropped before it returns, the call leaves the line with nothing
    /// taken.
    pub(crate) async fn wait_in_line(
        &self,
        state: &KeyState,
        priority: Priority,
        request: &Request,
        cost: u32,
        arrived: Nanos,
    ) -> Result<(Token, Nanos), Rejected> {
        let Some(settings) = self.rate_of(state) else {
            return Ok((Token::Due(None), arrived));
        };
        let until = self.token_deadline(priority, request, arrived, state.quickest_answer());
        let mut place = state.rate.line().join();
        place.head().await;
        loop {
            let now = self.now();
            match state.rate.reserve(now, settings.burst, cost, HORIZON) {
                Ok(reservation) if reservation.slot.start <= now => {
                    return Ok((Token::Due(Some(reservation)), now));
                }
                Ok(reservation) => return Ok((Token::Ahead(reservation), now)),
                Err(wait) if now.saturating_add(wait) > until.latest() => {
                    return Err(until.refusal(now.saturating_add(wait), wait, priority));
                }
                Err(wait) => {
                    let look = rate::next_look(now, wait, HORIZON);
                    self.clock.sleep_until(Duration::from_nanos(look)).await;
                }
            }
        }
    }

    /// Step 4, when the token lies ahead: sleeps until it is due, and
    /// returns that time. A change of the rate meanwhile moves it: a fall
    /// later (the calls queued at the old pace leave at the new one), a
    /// rise back toward where it was booked, waking it (see `rate::falls`).
    /// (The call holds its token in its `Admitting`, which gives it back if
    /// the call is dropped meanwhile.)
    pub(crate) async fn sleep_for_token(
        &self,
        state: &KeyState,
        reservation: Reservation,
    ) -> Nanos {
        let (mut start, mut moves_seen) = (reservation.slot.start, reservation.moves_seen);
        let moved_back = state.rate.moved_back();
        loop {
            let mut woken = std::pin::pin!(moved_back.notified());
            woken.as_mut().enable();
            let moved = state.rate.moved_start(start, &mut moves_seen);
            if moved != start {
                start = moved;
                continue;
            }
            if self.now() >= start {
                return start;
            }
            let mut due = self.clock.sleep_until(Duration::from_nanos(start));
            std::future::poll_fn(|cx| {
                let woken = woken.as_mut().poll(cx).is_ready();
                match woken || due.as_mut().poll(cx).is_ready() {
                    true => std::task::Poll::Ready(()),
                    false => std::task::Poll::Pending,
                }
            })
            .await;
        }
    }

    /// Step 5: a slot of the key's bulkhead, or (if the caller waits) a
    /// place in its queue. Reports the bulkhead filling up.
    #[inline]
    pub(crate) fn enter_bulkhead(
        &self,
        state: &KeyState,
        priority: Priority,
        patience: Patience,
        flow: Option<Flow>,
        telemetry: &KeyTelemetry,
    ) -> Result<BulkheadPlace, Rejected> {
        if !self.controls.bulkhead {
            return Ok(BulkheadPlace::NoBulkhead);
        }
        self.take_bulkhead_slot(state, priority, patience, flow, telemetry)
    }

    fn take_bulkhead_slot(
        &self,
        state: &KeyState,
        priority: Priority,
        patience: Patience,
        flow: Option<Flow>,
        telemetry: &KeyTelemetry,
    ) -> Result<BulkheadPlace, Rejected> {
        let Some((bulkhead, settings)) = self.bulkhead_of(state) else {
            return Ok(BulkheadPlace::NoBulkhead);
        };
        let admission = match patience {
            Patience::Never => bulkhead.try_acquire(settings).map(SlotAnswer::Granted),
            _ => {
                let waiter = Waiter {
                    priority: usize::from(priority.level()),
                    levels: usize::from(self.calls.priorities.levels),
                    flow,
                };
                bulkhead.enter(settings, waiter)
            }
        };
        match admission.map_err(|refusal| refusal.rejected(priority))? {
            SlotAnswer::Granted(active) => {
                if active == bulkhead.limit(settings) {
                    events::bulkhead_filled(telemetry.span(), priority, active);
                }
                Ok(BulkheadPlace::Held)
            }
            SlotAnswer::Queued(id) => Ok(BulkheadPlace::Queued(id)),
        }
    }

    /// Steps 4 and 5 at once, for a call that goes on now or not at all:
    /// a free slot of the key's bulkhead, taken without queueing (no slot
    /// is free while anyone waits for one). The `bulkhead full` event is
    /// left to [`Core::slot_taken`], once the call is admitted.
    #[inline(always)]
    pub(crate) fn take_free_slot(&self, state: &KeyState, settings: &KeySettings) -> FreeSlot {
        if !self.controls.bulkhead {
            return FreeSlot::NoBulkhead;
        }
        let Some((bulkhead, settings)) = settings.bulkhead_of(state) else {
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

    /// Step 5, for a call in the bulkhead's queue: waits for its slot, up
    /// to the queue timeout (counted from `since`). Dropped while waiting,
    /// it leaves the queue, handing on a slot it was given meanwhile.
    pub(crate) async fn wait_in_queue(
        &self,
        state: &KeyState,
        priority: Priority,
        id: WaiterId,
        (arrived, since): (Nanos, Nanos),
        request: &Request,
        telemetry: &KeyTelemetry,
    ) -> Result<(), Rejected> {
        let Some((bulkhead, settings)) = self.bulkhead_of(state) else {
            return Ok(()); // unreachable: only a bulkhead queues
        };
        let refused = |refusal: Refusal| refusal.rejected(priority);
        let _queued = metrics::QueuedGauge::enter(&self.metrics, telemetry.label());
        let mut waiting = QueuedWait::new(bulkhead, usize::from(priority.level()), id);
        // The queue has no known wait: the call waits until its queue
        // timeout or its caller's deadline, whichever comes first.
        // While CoDel finds the queue overloaded, a newcomer waits its
        // target at most.
        let (bound, mut bound_reason) = match bulkhead.overloaded_wait() {
            Some(target) => (Some(target), RejectReason::QueueOverloaded),
            None => (settings.queue_timeout, RejectReason::QueueTimeout),
        };
        let mut timed_out = bound.map(|bound| since.saturating_add(bound));
        // The wait to be admitted is one budget: what the call waited for
        // its token is spent from it, and the queue has the rest. A
        // server's call, which waits for nothing but the queue, has it all
        // there; only `wait`, the rate alone, never queues.
        let budget = match request.patience {
            Patience::AsConfigured | Patience::QueueOnly => self.max_wait(priority),
            Patience::Never | Patience::Unbounded => None,
        };
        if let Some(budget) = budget.map(nanos).filter(|&budget| budget < Nanos::MAX) {
            let budget_end = arrived.saturating_add(budget);
            if timed_out.is_none_or(|end| budget_end < end) {
                timed_out = Some(budget_end);
                bound_reason = RejectReason::QueueTimeout;
            }
        }
        let now = self.now();
        let caller = match request.start_by(now, || state.quickest_answer()) {
            StartBy::Whenever => None,
            StartBy::Until(latest) => Some(latest),
            StartBy::TooLate => Some(now),
        };
        let (until, reason) = match (timed_out, caller) {
            (None, None) => return (&mut waiting).await.map_err(refused),
            (Some(timed_out), Some(caller)) if caller < timed_out => {
                (caller, RejectReason::Deadline)
            }
            (Some(timed_out), _) => (timed_out, bound_reason),
            (None, Some(caller)) => (caller, RejectReason::Deadline),
        };
        match self.before(until, &mut waiting).await {
            Some(outcome) => outcome.map_err(refused),
            None => waiting.give_up(reason).map_err(|refusal| {
                if reason == RejectReason::QueueTimeout {
                    events::queue_timed_out(telemetry.span(), priority, refusal.load);
                }
                refused(refusal)
            }),
        }
    }

    /// How far ahead a rate token of `state` may lie for a caller of
    /// `patience`: as configured, and, for a caller that waits, early
    /// enough to start before its task's deadline ([`crate::deadline::with_deadline`])
    /// with time left for the key's quickest recent answer
    /// ([`Request::start_by`](super::Request::start_by)).
    #[inline(always)]
    pub(crate) fn patience_for_token(
        &self,
        state: &KeyState,
        now: Nanos,
        priority: Priority,
        request: &Request,
    ) -> Nanos {
        let configured = self.configured_patience(priority, request.patience);
        match request.patience {
            Patience::Never | Patience::QueueOnly => configured,
            Patience::AsConfigured | Patience::Unbounded => {
                match request.start_by(now, || state.quickest_answer()) {
                    StartBy::Whenever => configured,
                    StartBy::Until(latest) => configured.min(latest.saturating_sub(now)),
                    StartBy::TooLate => 0,
                }
            }
        }
    }

    /// How far ahead a rate token may lie for a caller of `patience`, by
    /// the manager's settings alone.
    #[inline]
    pub(crate) fn configured_patience(&self, priority: Priority, patience: Patience) -> Nanos {
        match patience {
            Patience::Never | Patience::QueueOnly => 0,
            Patience::AsConfigured => self.max_wait(priority).map_or(Nanos::MAX, nanos),
            Patience::Unbounded => Nanos::MAX,
        }
    }

    /// The refusal of a call whose token lies `wait` ahead, beyond its
    /// patience: the rate's, with the wait, when the settings would not
    /// wait that long either; else the caller's deadline's.
    #[cold]
    pub(crate) fn token_too_far(
        &self,
        wait: Nanos,
        priority: Priority,
        patience: Patience,
    ) -> Rejected {
        if wait > self.configured_patience(priority, patience) {
            Rejected::rate_limited(wait, priority)
        } else {
            Rejected::new(RejectReason::Deadline, priority, None)
        }
    }
}
