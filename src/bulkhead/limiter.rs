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
//! what [`LearnedLimit`] holds now. A learned limit that falls below the
//! calls in flight retires the slots they give back (no hand-off) until
//! they are under it; one that rises hands the new slots to the queue at
//! once ([`Bulkhead::grant_waiters`]).
//!
//! A waiter's outcome (a slot, or a rejection) is decided under the lock and
//! left for it to collect. A waiter that is dropped removes itself under the
//! same lock; if a slot was handed to it in the meantime, it hands the slot on,
//! so no slot is ever lost.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll, Waker};

use super::config::BulkheadSettings;
use super::learned::{CallSample, LearnedLimit, LimitChange};
use super::queue::{OnFull, WaitQueue, WaiterId};
use crate::clock::Nanos;
use crate::error::{RejectReason, Rejected};
use crate::priority::Priority;
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
    Dropped(Load),
}

#[derive(Debug, Default)]
struct Inner {
    queue: WaitQueue,
    decided: Vec<(WaiterId, Decision)>,
}

impl Inner {
    fn take_decision(&mut self, id: WaiterId) -> Option<Decision> {
        let at = self.decided.iter().position(|(d, _)| *d == id)?;
        Some(self.decided.swap_remove(at).1)
    }
}

/// The concurrency limit of one key: 32 bytes until the first call has to
/// queue, when the queue is allocated; a learned limit is one more
/// allocation.
#[derive(Debug, Default)]
pub(crate) struct Bulkhead {
    inner: Mutex<Option<Box<Inner>>>,
    learned: Option<Box<LearnedLimit>>,
    state: AtomicU64,
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
    pub(crate) fn new(settings: &BulkheadSettings) -> Self {
        Self {
            learned: settings.learned.map(|learned| {
                Box::new(LearnedLimit::new(settings.max_concurrent, learned.tuning))
            }),
            ..Self::default()
        }
    }

    /// Calls in flight and waiting now.
    pub(crate) fn load(&self) -> Load {
        Load::of(self.state.load(Ordering::Acquire))
    }

    /// How many calls may be in flight now.
    #[inline]
    pub(crate) fn limit(&self, settings: &BulkheadSettings) -> u32 {
        match &self.learned {
            None => settings.max_concurrent,
            Some(learned) => learned.whole(),
        }
    }

    /// Whether the limit is learned.
    pub(crate) fn is_learned(&self) -> bool {
        self.learned.is_some()
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
        let learned = self.learned.as_deref()?;
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
    /// favours those already waiting. A hint: the answer may change at once.
    pub(crate) fn would_refuse(
        &self,
        settings: &BulkheadSettings,
        priority: usize,
    ) -> Option<Refusal> {
        let state = self.state.load(Ordering::Acquire);
        let full = active(state) >= self.limit(settings) && queued(state) >= settings.max_queued;
        if !full {
            return None;
        }
        let mut guard = self.lock();
        let inner = guard.get_or_insert_with(Box::default);
        (inner.queue.on_full(settings.overflow, priority) == OnFull::RejectNewcomer).then(|| {
            Refusal {
                reason: RejectReason::Full,
                load: self.load(),
            }
        })
    }

    /// Takes a free slot, or a place in the queue, or is refused (queue
    /// full); may displace a waiter, per the overflow policy. A queued call
    /// must then be waited for through a [`QueuedWait`], or given up.
    pub(crate) fn enter(
        &self,
        settings: &BulkheadSettings,
        priority: usize,
        levels: usize,
    ) -> Result<SlotAnswer, Refusal> {
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
                Ok(_) => return Ok(SlotAnswer::Queued(inner.queue.push(priority, levels))),
                Err(actual) => state = actual,
            }
        }
        // The queue is full (and the lock keeps it so).
        let load = Load::of(state);
        match inner.queue.on_full(settings.overflow, priority) {
            OnFull::RejectNewcomer => Err(Refusal {
                reason: RejectReason::Full,
                load,
            }),
            OnFull::Drop(victim_priority, victim) => {
                let waker = inner.queue.remove(victim_priority, victim).flatten();
                inner.decided.push((victim, Decision::Dropped(load)));
                let id = inner.queue.push(priority, levels);
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
            Some(Decision::Dropped(load)) => Poll::Ready(Err(Refusal {
                reason: RejectReason::Dropped,
                load,
            })),
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
            Some(Decision::Dropped(load)) => {
                return Err(Refusal {
                    reason: RejectReason::Dropped,
                    load,
                });
            }
            None => {}
        }
        let load = self.load();
        if inner.queue.remove(priority, id).is_some() {
            self.state.fetch_sub(QUEUED, Ordering::AcqRel);
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
            return;
        }
        if inner.take_decision(id) == Some(Decision::Granted) {
            let waker = self.hand_off_or_free(inner);
            drop(guard);
            if let Some(waker) = waker {
                waker.wake();
            }
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
        let waker = self.hand_off_or_free(inner);
        drop(guard);
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// A learned limit rose: hands the new slots to the queue's head, as
    /// many as the limit now allows.
    pub(crate) fn grant_waiters(&self, settings: &BulkheadSettings) {
        let state = self.state.load(Ordering::Acquire);
        if queued(state) == 0 || active(state) >= self.limit(settings) {
            return;
        }
        let mut wakers = Vec::new();
        {
            let mut guard = self.lock();
            let inner = guard.get_or_insert_with(Box::default);
            while active(self.state.load(Ordering::Acquire)) < self.limit(settings) {
                let Some((id, waker)) = inner.queue.pop_head() else {
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

    /// Under the lock: the slot in hand goes to the head of the queue
    /// (returns its waker), or becomes free if nobody waits, or if a learned
    /// limit fell below the calls in flight (the slot is retired).
    fn hand_off_or_free(&self, inner: &mut Inner) -> Option<Waker> {
        if let Some(learned) = &self.learned {
            let state = self.state.load(Ordering::Acquire);
            if active(state) > learned.whole() {
                self.state.fetch_sub(1, Ordering::AcqRel);
                return None;
            }
        }
        debug_assert_eq!(
            inner.queue.len(),
            queued(self.state.load(Ordering::Acquire)) as usize,
            "the lock's holder keeps `queued` equal to the queue's length"
        );
        match inner.queue.pop_head() {
            Some((id, waker)) => {
                inner.decided.push((id, Decision::Granted));
                self.state.fetch_sub(QUEUED, Ordering::AcqRel);
                waker
            }
            None => {
                self.state.fetch_sub(1, Ordering::AcqRel);
                None
            }
        }
    }

    /// Sets a learned limit to `whole` calls, as a sample would.
    #[cfg(all(test, not(portcullis_loom)))]
    pub(super) fn force_limit(&self, settings: &BulkheadSettings, whole: u32) {
        let learned = self.learned.as_deref().expect("a learned limit");
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
#[cfg(all(test, portcullis_loom))]
mod loom_tests {
    use super::*;
    use crate::bulkhead::config::Overflow;
    use loom::sync::Arc;
    use loom::thread;

    fn settings() -> BulkheadSettings {
        BulkheadSettings {
            max_concurrent: 1,
            learned: None,
            max_queued: 2,
            queue_timeout: None,
            overflow: Overflow::RejectNew,
        }
    }

    /// Gets a slot, waiting if queued; returns with it held.
    fn acquire(bulkhead: &Bulkhead) {
        match bulkhead
            .enter(&settings(), 0, 1)
            .expect("room in the queue")
        {
            SlotAnswer::Granted(_) => {}
            SlotAnswer::Queued(id) => {
                loom::future::block_on(QueuedWait::new(bulkhead, 0, id)).expect("granted")
            }
        }
    }

    #[test]
    fn a_released_slot_reaches_the_waiter() {
        loom::model(|| {
            let bulkhead = Arc::new(Bulkhead::default());
            bulkhead.try_acquire(&settings()).unwrap();
            let waiter = {
                let bulkhead = Arc::clone(&bulkhead);
                thread::spawn(move || {
                    acquire(&bulkhead);
                    assert_eq!(bulkhead.load().active, 1);
                    bulkhead.release();
                })
            };
            bulkhead.release();
            waiter.join().unwrap();
            assert_eq!(bulkhead.load(), Load::default());
        });
    }

    #[test]
    fn a_waiter_cancelled_while_the_slot_is_released_never_keeps_it() {
        loom::model(|| {
            let bulkhead = Arc::new(Bulkhead::default());
            bulkhead.try_acquire(&settings()).unwrap();
            let quitter = {
                let bulkhead = Arc::clone(&bulkhead);
                thread::spawn(move || match bulkhead.enter(&settings(), 0, 1).unwrap() {
                    SlotAnswer::Granted(_) => bulkhead.release(),
                    // Cancelled at once: the future is dropped unpolled.
                    SlotAnswer::Queued(id) => drop(QueuedWait::new(&bulkhead, 0, id)),
                })
            };
            bulkhead.release();
            quitter.join().unwrap();
            assert_eq!(bulkhead.load(), Load::default());
        });
    }

    #[test]
    fn a_slot_handed_to_a_cancelled_waiter_reaches_the_next() {
        loom::model(|| {
            let bulkhead = Arc::new(Bulkhead::default());
            bulkhead.try_acquire(&settings()).unwrap();
            let SlotAnswer::Queued(first) = bulkhead.enter(&settings(), 0, 1).unwrap() else {
                panic!("the slot is taken");
            };
            let patient = {
                let bulkhead = Arc::clone(&bulkhead);
                thread::spawn(move || {
                    acquire(&bulkhead);
                    bulkhead.release();
                })
            };
            let quitter = {
                let bulkhead = Arc::clone(&bulkhead);
                thread::spawn(move || drop(QueuedWait::new(&bulkhead, 0, first)))
            };
            bulkhead.release();
            quitter.join().unwrap();
            patient.join().unwrap();
            assert_eq!(bulkhead.load(), Load::default());
        });
    }
}
