//! One key's bulkhead, enforced: a counter of calls in flight with a
//! lock-free fast path, and a wait queue behind a lock for the rest.
//!
//! The state word holds `active` (calls in flight) in its low half and
//! `queued` in its high half. Taking a free slot when nobody waits, and
//! giving one back when nobody waits, are single compare-and-swaps. Everything
//! that involves the queue happens under the lock, and the lock's holder
//! keeps `queued` equal to the queue's length, so:
//!
//! - a newcomer never overtakes a waiter (the fast path needs `queued == 0`);
//! - a slot given back while someone waits goes to the head of the queue,
//!   with `active` unchanged (a hand-off, not a release and a re-take);
//! - while anyone waits, every slot is taken (`queued > 0` implies
//!   `active >= limit`).
//!
//! The limit is the settings' `max_concurrent`, or, for a learned limit,
//! what [`LearnedLimit`] holds now. A limit that falls below the calls in
//! flight (a learned one, or settings changed at runtime) retires the
//! slots they give back (no hand-off) until they are under it; one that
//! rises hands the new slots to the queue at once
//! ([`Bulkhead::grant_waiters`]).
//!
//! With CoDel ([`super::codel`]), a slot handed on while the queue is
//! overloaded goes to the newest of the most important waiters (adaptive
//! LIFO), and every other waiter that has waited the target is dropped:
//! never one more important than the one served.
//!
//! A waiter's outcome (a slot, or a rejection) is decided under the lock and
//! left for it to collect. A waiter that is dropped removes itself under the
//! same lock; if a slot was handed to it in the meantime, it hands the slot on,
//! so no slot is ever lost.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll, Waker};

use std::sync::Arc;

use super::codel::{CodelSettings, CodelState};
use super::config::BulkheadSettings;
use super::learned::{CallSample, LearnedLimit, LimitChange};
use super::queue::{OnFull, WaitQueue, WaiterId};
use crate::clock::{Clock, Nanos};
use crate::error::{RejectReason, Rejected};
use crate::priority::{Flow, Priority};
use crate::sync::{AtomicU64, Mutex};

const QUEUED: u64 = 1 << 32;

fn active(state: u64) -> u32 {
    state as u32
}

fn queued(state: u64) -> u32 {
    (state >> 32) as u32
}

/// Calls in flight and waiting, at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Load {
    pub(crate) active: u32,
    pub(crate) queued: u32,
}

impl Load {
    fn of(state: u64) -> Self {
        Self {
            active: active(state),
            queued: queued(state),
        }
    }
}

/// Why a call did not get a slot, and the load when it did not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub(crate) reason: RejectReason,
    pub(crate) load: Load,
}

impl Refusal {
    /// The rejection of a call at `priority`, with the load it met.
    pub(crate) fn rejected(self, priority: Priority) -> Rejected {
        Rejected::with_load(self.reason, priority, self.load.active, self.load.queued)
    }
}

/// What was decided for a waiter while it was not looking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decision {
    Granted,
    /// Pushed out (by a newcomer, or by CoDel), with this reason.
    Dropped(Load, RejectReason),
}

#[derive(Debug, Default)]
struct Inner {
    queue: WaitQueue,
    decided: Vec<(WaiterId, Decision)>,
    codel: CodelState,
    /// A fixed limit as the settings in force say: written by each call
    /// that queues and by each change of the key's settings, read at a
    /// hand-off (whose release carries no settings).
    fixed_limit: u32,
}

impl Inner {
    fn take_decision(&mut self, id: WaiterId) -> Option<Decision> {
        let at = self.decided.iter().position(|(d, _)| *d == id)?;
        Some(self.decided.swap_remove(at).1)
    }
}

/// The concurrency limit of one key: 32 bytes until the first call has to
/// queue, when the queue is allocated; a learned limit or CoDel is one
/// more allocation, which holds both.
#[derive(Debug, Default)]
pub(crate) struct Bulkhead {
    inner: Mutex<Option<Box<Inner>>>,
    beyond_plain: Option<Box<BeyondPlain>>,
    state: AtomicU64,
}

/// What a bulkhead beyond a fixed limit and a plain queue holds.
#[derive(Debug)]
struct BeyondPlain {
    learned: Option<LearnedLimit>,
    codel: Option<Codel>,
}

/// A queue under CoDel: its settings and the clock its sojourns are read on.
#[derive(Debug)]
struct Codel {
    settings: CodelSettings,
    clock: Arc<dyn Clock>,
}

impl Codel {
    fn now(&self) -> Nanos {
        self.clock.now_nanos()
    }
}

/// A call that asks for a slot, and may wait for one: its priority's
/// level (of `levels`) and its flow.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Waiter {
    pub(crate) priority: usize,
    pub(crate) levels: usize,
    pub(crate) flow: Option<Flow>,
}

#[cfg(test)]
impl Waiter {
    /// A waiter of one level and no flow.
    pub(crate) fn first_level() -> Self {
        Self {
            priority: 0,
            levels: 1,
            flow: None,
        }
    }
}

/// Where a call stands after asking for a slot.
#[derive(Debug)]
pub(crate) enum SlotAnswer {
    /// It has a slot; this many calls are in flight with it.
    Granted(u32),
    /// It waits in the queue as this waiter.
    Queued(WaiterId),
}

impl Bulkhead {
    /// A bulkhead for `settings`: with a learned limit, starting at its
    /// lower bound, if the settings say so.
    /// With CoDel, its sojourns are read on `clock`.
    pub(crate) fn new(settings: &BulkheadSettings, clock: &Arc<dyn Clock>) -> Self {
        let learned = settings
            .learned
            .map(|learned| LearnedLimit::new(settings.max_concurrent, learned.tuning));
        let codel = settings.codel.map(|codel| Codel {
            settings: codel,
            clock: Arc::clone(clock),
        });
        let plain = learned.is_none() && codel.is_none();
        Self {
            beyond_plain: (!plain).then(|| Box::new(BeyondPlain { learned, codel })),
            ..Self::default()
        }
    }

    /// The learned limit, if the limit is learned.
    #[inline]
    fn learned(&self) -> Option<&LearnedLimit> {
        self.beyond_plain.as_deref()?.learned.as_ref()
    }

    /// CoDel on the queue, if configured.
    #[inline]
    fn codel(&self) -> Option<&Codel> {
        self.beyond_plain.as_deref()?.codel.as_ref()
    }

    /// How long a call joining the queue now may wait: CoDel's target
    /// while the queue is overloaded, else `None` (the queue timeout).
    pub(crate) fn overloaded_wait(&self) -> Option<Nanos> {
        let codel = self.codel()?;
        let mut guard = self.lock();
        let inner = guard.get_or_insert_with(Box::default);
        if inner.queue.is_fair() {
            // Judged per flow, at each hand-off.
            return None;
        }
        inner.codel.look(&codel.settings, codel.now());
        inner.codel.overloaded().then_some(codel.settings.target)
    }

    /// Calls in flight and waiting now.
    pub(crate) fn load(&self) -> Load {
        Load::of(self.state.load(Ordering::Acquire))
    }

    /// How many calls may be in flight now.
    #[inline]
    pub(crate) fn limit(&self, settings: &BulkheadSettings) -> u32 {
        match self.learned() {
            None => settings.max_concurrent,
            Some(learned) => learned.whole(),
        }
    }

    /// Whether the limit is learned.
    pub(crate) fn is_learned(&self) -> bool {
        self.learned().is_some()
    }

    /// A call of this key ended at `at`, `latency` after its admission,
    /// overloaded or not: its sample for a learned limit (before its slot
    /// is released, so that it counts itself in flight). Returns what it
    /// did to the limit, if the limit is learned.
    pub(crate) fn learn(
        &self,
        settings: &BulkheadSettings,
        at: Nanos,
        latency: Nanos,
        overloaded: bool,
    ) -> Option<LimitChange> {
        let learned = self.learned()?;
        let load = self.load();
        let sample = CallSample {
            at,
            latency,
            in_flight: load.active,
            limiting: load.queued > 0 || load.active >= self.limit(settings),
            overloaded,
        };
        Some(learned.learn(sample))
    }

    /// Takes a free slot if there is one and nobody waits for it; returns
    /// the calls in flight with it.
    #[inline]
    pub(crate) fn try_acquire(&self, settings: &BulkheadSettings) -> Result<u32, Refusal> {
        let mut state = self.state.load(Ordering::Acquire);
        loop {
            if queued(state) > 0 || active(state) >= self.limit(settings) {
                return Err(Refusal {
                    reason: RejectReason::Full,
                    load: Load::of(state),
                });
            }
            match self.state.compare_exchange_weak(
                state,
                state + 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Ok(active(state) + 1),
                Err(actual) => state = actual,
            }
        }
    }

    /// Whether a call of `priority` would be turned away at once, without
    /// queueing or displacing anyone: the queue is full and the policy
    /// favours those already waiting (its `flow`, read only then, is the
    /// newcomer's at a fair queue). A hint: the answer may change at once.
    pub(crate) fn would_refuse(
        &self,
        settings: &BulkheadSettings,
        priority: usize,
        flow: impl FnOnce() -> Option<Flow>,
    ) -> Option<Refusal> {
        let state = self.state.load(Ordering::Acquire);
        let full = active(state) >= self.limit(settings) && queued(state) >= settings.max_queued;
        if !full {
            return None;
        }
        let mut guard = self.lock();
        let inner = guard.get_or_insert_with(Box::default);
        let flow = settings.flow_of(flow());
        (inner.queue.on_full(settings.overflow, priority, flow) == OnFull::RejectNewcomer).then(
            || Refusal {
                reason: RejectReason::Full,
                load: self.load(),
            },
        )
    }

    /// Takes a free slot, or a place in the queue, or is refused (queue
    /// full); may displace a waiter, per the overflow policy. A queued call
    /// must then be waited for through a [`QueuedWait`], or given up.
    pub(crate) fn enter(
        &self,
        settings: &BulkheadSettings,
        waiter: Waiter,
    ) -> Result<SlotAnswer, Refusal> {
        let Waiter {
            priority,
            levels,
            flow,
        } = waiter;
        let flow = settings.flow_of(flow);
        if let Ok(active) = self.try_acquire(settings) {
            return Ok(SlotAnswer::Granted(active));
        }
        let mut guard = self.lock();
        let inner = guard.get_or_insert_with(Box::default);
        let mut state = self.state.load(Ordering::Acquire);
        loop {
            // A slot may have come free, with nobody waiting, since the fast
            // path looked.
            let next = if queued(state) == 0 && active(state) < self.limit(settings) {
                state + 1
            } else if queued(state) < settings.max_queued {
                state + QUEUED
            } else {
                break;
            };
            match self
                .state
                .compare_exchange(state, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) if next == state + 1 => return Ok(SlotAnswer::Granted(active(next))),
                Ok(_) => {
                    inner.fixed_limit = settings.max_concurrent;
                    let since = self.joined_at(inner, flow);
                    let id = inner.queue.push(priority, levels, since, flow);
                    return Ok(SlotAnswer::Queued(id));
                }
                Err(actual) => state = actual,
            }
        }
        // The queue is full (and the lock keeps it so).
        let load = Load::of(state);
        match inner.queue.on_full(settings.overflow, priority, flow) {
            OnFull::RejectNewcomer => Err(Refusal {
                reason: RejectReason::Full,
                load,
            }),
            OnFull::Drop(victim_priority, victim) => {
                let waker = inner.queue.remove(victim_priority, victim).flatten();
                inner
                    .decided
                    .push((victim, Decision::Dropped(load, RejectReason::Dropped)));
                inner.fixed_limit = settings.max_concurrent;
                let since = self.joined_at(inner, flow);
                let id = inner.queue.push(priority, levels, since, flow);
                drop(guard);
                if let Some(waker) = waker {
                    waker.wake();
                }
                Ok(SlotAnswer::Queued(id))
            }
        }
    }

    /// Polls waiter `id` of `priority`: ready with its slot or its
    /// rejection, else remembers the waker.
    pub(crate) fn poll_waiter(
        &self,
        priority: usize,
        id: WaiterId,
        waker: &Waker,
    ) -> Poll<Result<(), Refusal>> {
        let mut guard = self.lock();
        let inner = guard.get_or_insert_with(Box::default);
        match inner.take_decision(id) {
            Some(Decision::Granted) => Poll::Ready(Ok(())),
            Some(Decision::Dropped(load, reason)) => Poll::Ready(Err(Refusal { reason, load })),
            None => {
                inner.queue.set_waker(priority, id, waker);
                Poll::Pending
            }
        }
    }

    /// Waiter `id` gives up, as `reason` (a queue timeout), unless it was
    /// decided first. Returns what it ends with: its slot if one was handed
    /// to it meanwhile, else the refusal.
    pub(crate) fn give_up(
        &self,
        priority: usize,
        id: WaiterId,
        reason: RejectReason,
    ) -> Result<(), Refusal> {
        let mut guard = self.lock();
        let inner = guard.get_or_insert_with(Box::default);
        match inner.take_decision(id) {
            Some(Decision::Granted) => return Ok(()),
            Some(Decision::Dropped(load, reason)) => return Err(Refusal { reason, load }),
            None => {}
        }
        let load = self.load();
        if inner.queue.remove(priority, id).is_some() {
            self.state.fetch_sub(QUEUED, Ordering::AcqRel);
            self.left(inner);
        }
        Err(Refusal { reason, load })
    }

    /// Waiter `id` is gone (its future was dropped): out of the queue, and
    /// any slot handed to it meanwhile goes to the next.
    pub(crate) fn leave(&self, priority: usize, id: WaiterId) {
        let mut guard = self.lock();
        let inner = guard.get_or_insert_with(Box::default);
        if inner.queue.remove(priority, id).is_some() {
            self.state.fetch_sub(QUEUED, Ordering::AcqRel);
            self.left(inner);
            return;
        }
        if inner.take_decision(id) == Some(Decision::Granted) {
            let wakers = self.hand_off_or_free(inner);
            drop(guard);
            wakers.into_iter().for_each(Waker::wake);
        }
    }

    /// Gives a slot back: to the head of the queue if anyone waits, else
    /// free. Inlined: with no one queued, one compare-and-swap.
    #[inline]
    pub(crate) fn release(&self) {
        let mut state = self.state.load(Ordering::Acquire);
        while queued(state) == 0 {
            debug_assert!(active(state) > 0, "a slot released twice");
            match self.state.compare_exchange_weak(
                state,
                state - 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return,
                Err(actual) => state = actual,
            }
        }
        self.release_to_queue();
    }

    /// [`release`](Self::release) with someone queued: under the lock, to
    /// the head of the queue.
    #[cold]
    fn release_to_queue(&self) {
        let mut guard = self.lock();
        let inner = guard.get_or_insert_with(Box::default);
        let wakers = self.hand_off_or_free(inner);
        drop(guard);
        wakers.into_iter().for_each(Waker::wake);
    }

    /// The limit may have changed (a learned limit rose, or the key's
    /// settings changed): the queue is served under `settings` from now
    /// on, and the head of the queue gets the new slots, as many as the
    /// limit now allows.
    pub(crate) fn grant_waiters(&self, settings: &BulkheadSettings) {
        if queued(self.state.load(Ordering::Acquire)) == 0 {
            return;
        }
        let mut wakers = Vec::new();
        {
            let mut guard = self.lock();
            let inner = guard.get_or_insert_with(Box::default);
            inner.fixed_limit = settings.max_concurrent;
            while active(self.state.load(Ordering::Acquire)) < self.limit(settings) {
                let Some((id, waker)) = self.next_waiter(inner) else {
                    break;
                };
                inner.decided.push((id, Decision::Granted));
                // One fewer waiting, one more in flight, in one step.
                self.state.fetch_sub(QUEUED - 1, Ordering::AcqRel);
                wakers.extend(waker);
            }
        }
        for waker in wakers {
            waker.wake();
        }
    }

    /// Sets a learned limit to `whole` calls, as a sample would.
    #[cfg(all(test, not(portcullis_loom)))]
    pub(super) fn force_limit(&self, settings: &BulkheadSettings, whole: u32) {
        let learned = self.learned().expect("a learned limit");
        if whole > learned.force(whole) {
            self.grant_waiters(settings);
        }
    }

    fn lock(&self) -> crate::sync::MutexGuard<'_, Option<Box<Inner>>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A queued call's wait for its slot, as a future: resolves with the slot
/// or the rejection. Dropped before it resolves, it leaves the queue (and
/// hands on a slot it was given meanwhile).
pub(crate) struct QueuedWait<'a> {
    bulkhead: &'a Bulkhead,
    priority: usize,
    id: WaiterId,
    done: bool,
}

impl<'a> QueuedWait<'a> {
    pub(crate) fn new(bulkhead: &'a Bulkhead, priority: usize, id: WaiterId) -> Self {
        Self {
            bulkhead,
            priority,
            id,
            done: false,
        }
    }

    /// Stops waiting for `reason`, unless the outcome was decided already.
    pub(crate) fn give_up(mut self, reason: RejectReason) -> Result<(), Refusal> {
        self.done = true;
        self.bulkhead.give_up(self.priority, self.id, reason)
    }
}

impl Future for QueuedWait<'_> {
    type Output = Result<(), Refusal>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let poll = self
            .bulkhead
            .poll_waiter(self.priority, self.id, cx.waker());
        if poll.is_ready() {
            self.done = true;
        }
        poll
    }
}

impl Drop for QueuedWait<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.bulkhead.leave(self.priority, self.id);
        }
    }
}

impl std::fmt::Debug for QueuedWait<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueuedWait")
            .field("priority", &self.priority)
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

/// Model checks of the hand-off and of cancellation, every interleaving
/// loom can find: `RUSTFLAGS="--cfg portcullis_loom" cargo test --release
/// --lib loom`.
mod hand_off;
#[cfg(all(test, portcullis_loom))]
mod loom_tests;
