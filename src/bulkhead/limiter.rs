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

use super::adaptive::{self, Bounds, Learned, Window};
use super::config::BulkheadSettings;
use super::queue::{OnFull, WaitQueue, WaiterId};
use crate::clock::Nanos;
use crate::error::{RejectReason, Rejected};
use crate::priority::Priority;
use crate::sync::{AtomicU32, AtomicU64, Mutex};

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
    state: AtomicU64,
    inner: Mutex<Option<Box<Inner>>>,
    learned: Option<Box<LearnedLimit>>,
}

/// A key's learned limit ([`adaptive`]'s state). A call's sample adds to
/// the window in atomics; only the call that completes a window (one in
/// `window_size`), an overload and a probe's calls take the state's lock,
/// and with `try_lock`: a sample that finds it taken is dropped, and the
/// next one learns what it would have. No caller ever waits for it.
#[derive(Debug)]
pub(crate) struct LearnedLimit {
    /// The limit in whole calls: what admission reads.
    whole: AtomicU32,
    /// The current window: calls, their latencies summed, and whether the
    /// limit held calls back (0 or 1).
    window_calls: AtomicU32,
    window_latency: AtomicU64,
    window_limiting: AtomicU32,
    /// Calls that end the current window.
    window_size: AtomicU32,
    /// Whether a probe is on (0 or 1): its calls go to the state.
    probing: AtomicU32,
    /// Which way the whole limit last moved: 0 never, 1 up, 2 down.
    last_move: AtomicU32,
    bounds: Bounds,
    state: Mutex<Learned>,
}

/// One call's end, as a learned limit sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Sample {
    /// When it ended.
    at: Nanos,
    /// From its admission to its outcome.
    latency: Nanos,
    /// Calls in flight when it ended, itself included.
    in_flight: u32,
    /// Whether the limit was holding calls back then (some queued, or
    /// every slot taken).
    limiting: bool,
    overloaded: bool,
}

/// What one sample did to a learned limit, in whole calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LimitChange {
    pub(crate) before: u32,
    pub(crate) after: u32,
    /// Whether it moved the other way than its last move (or for the
    /// first time).
    pub(crate) turned: bool,
}

impl LearnedLimit {
    fn new(initial: u32, bounds: Bounds) -> Self {
        let fresh = Learned::new(initial);
        Self {
            whole: AtomicU32::new(fresh.whole(bounds)),
            window_calls: AtomicU32::new(0),
            window_latency: AtomicU64::new(0),
            window_limiting: AtomicU32::new(0),
            window_size: AtomicU32::new(fresh.window_size()),
            probing: AtomicU32::new(u32::from(fresh.probe_left > 0)),
            last_move: AtomicU32::new(0),
            bounds,
            state: Mutex::new(fresh),
        }
    }

    /// Learns from one call's sample.
    fn learn(&self, sample: Sample) -> LimitChange {
        let before = self.whole.load(Ordering::Acquire);
        let bounds = self.bounds;
        let unchanged = LimitChange {
            before,
            after: before,
            turned: false,
        };
        if sample.overloaded {
            return self.update(before, |learned| {
                adaptive::overloaded(learned, sample.at, bounds)
            });
        }
        if self.probing.load(Ordering::Acquire) == 1 {
            return self.update(before, |learned| {
                adaptive::probed(learned, sample.at, sample.latency, sample.in_flight, bounds)
            });
        }
        if sample.limiting {
            self.window_limiting.store(1, Ordering::Relaxed);
        }
        self.window_latency
            .fetch_add(sample.latency, Ordering::AcqRel);
        let calls = self.window_calls.fetch_add(1, Ordering::AcqRel) + 1;
        if calls < self.window_size.load(Ordering::Acquire) {
            return unchanged;
        }
        self.update(before, |learned| {
            let window = Window {
                end: sample.at,
                calls: self.window_calls.swap(0, Ordering::AcqRel),
                latency: self.window_latency.swap(0, Ordering::AcqRel),
                limiting: self.window_limiting.swap(0, Ordering::AcqRel) == 1,
            };
            adaptive::learn(learned, window, bounds)
        })
    }

    /// Moves the state by `step` under its lock, if the lock is free, and
    /// publishes the new whole limit.
    fn update(&self, before: u32, step: impl FnOnce(Learned) -> Learned) -> LimitChange {
        let unchanged = LimitChange {
            before,
            after: before,
            turned: false,
        };
        let Ok(mut state) = self.state.try_lock() else {
            return unchanged;
        };
        let next = step(*state);
        *state = next;
        drop(state);
        self.publish(before, next)
    }

    fn publish(&self, before: u32, next: Learned) -> LimitChange {
        self.window_size
            .store(next.window_size(), Ordering::Release);
        self.probing
            .store(u32::from(next.probe_left > 0), Ordering::Release);
        let after = next.whole(self.bounds);
        self.whole.store(after, Ordering::Release);
        if after == before {
            return LimitChange {
                before,
                after,
                turned: false,
            };
        }
        let direction = if after > before { 1 } else { 2 };
        let turned = self.last_move.swap(direction, Ordering::AcqRel) != direction;
        LimitChange {
            before,
            after,
            turned,
        }
    }
}

/// Where a call stands after asking for a slot./// Where a call stands after asking for a slot.
#[derive(Debug)]
pub(crate) enum Admission {
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
                Box::new(LearnedLimit::new(settings.max_concurrent, learned.bounds))
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
            Some(learned) => learned.whole.load(Ordering::Acquire),
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
        let sample = Sample {
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

    /// The refusal a call that will not queue meets now: no free slot, or
    /// someone already waiting for the next one. A hint: the answer may
    /// change at once.
    #[inline]
    pub(crate) fn has_no_free_slot(&self, settings: &BulkheadSettings) -> Option<Refusal> {
        let state = self.state.load(Ordering::Acquire);
        (queued(state) > 0 || active(state) >= self.limit(settings)).then(|| Refusal {
            reason: RejectReason::Full,
            load: Load::of(state),
        })
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
    /// must then be driven by [`wait`](Self::wait) or given up with
    /// [`leave`](Self::leave).
    pub(crate) fn enter(
        &self,
        settings: &BulkheadSettings,
        priority: usize,
        levels: usize,
    ) -> Result<Admission, Refusal> {
        if let Ok(active) = self.try_acquire(settings) {
            return Ok(Admission::Granted(active));
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
                Ok(_) if next == state + 1 => return Ok(Admission::Granted(active(next))),
                Ok(_) => return Ok(Admission::Queued(inner.queue.push(priority, levels))),
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
                Ok(Admission::Queued(id))
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
    /// free.
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
            if active(state) > learned.whole.load(Ordering::Acquire) {
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

    fn lock(&self) -> crate::sync::MutexGuard<'_, Option<Box<Inner>>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A queued call's wait for its slot, as a future: resolves with the slot
/// or the rejection. Dropped before it resolves, it leaves the queue (and
/// hands on a slot it was given meanwhile).
pub(crate) struct Waiting<'a> {
    bulkhead: &'a Bulkhead,
    priority: usize,
    id: WaiterId,
    done: bool,
}

impl<'a> Waiting<'a> {
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

impl Future for Waiting<'_> {
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

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.bulkhead.leave(self.priority, self.id);
        }
    }
}

impl std::fmt::Debug for Waiting<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waiting")
            .field("priority", &self.priority)
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

/// A learned limit moved at random while calls come, queue, give up and
/// go: no waiter is stranded (each gets its slot or gives up by itself), and
/// no call is admitted beyond the limit of its moment (never more in flight
/// than the highest limit set).
#[cfg(all(test, not(portcullis_loom)))]
mod learned_limit_tests {
    use super::*;
    use crate::bulkhead::config::{BulkheadConfig, Overflow};
    use crate::error::Problems;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32 as StdAtomicU32, AtomicUsize};
    use std::time::Duration;

    impl Bulkhead {
        /// Sets a learned limit to `whole` calls, as a sample would.
        fn force_limit(&self, settings: &BulkheadSettings, whole: u32) {
            let learned = self.learned.as_deref().expect("a learned limit");
            let before = learned.whole.swap(whole, Ordering::AcqRel);
            if whole > before {
                self.grant_waiters(settings);
            }
        }
    }

    fn learned_bulkhead(queue: u32) -> (Bulkhead, BulkheadSettings) {
        let config = BulkheadConfig::adaptive().bounds(1, 8).queue(queue);
        let mut found = Vec::new();
        let settings = config.check(&mut Problems::new("", &mut found)).unwrap();
        (Bulkhead::new(&settings), settings)
    }

    fn granted(admission: Admission) -> bool {
        matches!(admission, Admission::Granted(_))
    }

    #[test]
    fn a_lowered_limit_retires_slots_and_a_raised_one_fills_them_from_the_queue() {
        let (bulkhead, settings) = learned_bulkhead(8);
        bulkhead.force_limit(&settings, 4);
        for _ in 0..4 {
            assert!(granted(bulkhead.enter(&settings, 0, 1).unwrap()));
        }
        let mut waiters = Vec::new();
        for _ in 0..3 {
            match bulkhead.enter(&settings, 0, 1).unwrap() {
                Admission::Queued(id) => waiters.push(id),
                Admission::Granted(_) => panic!("past the limit"),
            }
        }
        // Down to 2: the next two slots given back are retired, not handed on.
        bulkhead.force_limit(&settings, 2);
        bulkhead.release();
        bulkhead.release();
        assert_eq!(
            bulkhead.load(),
            Load {
                active: 2,
                queued: 3
            }
        );
        // At the limit, a slot given back goes to the queue's head.
        bulkhead.release();
        assert_eq!(
            bulkhead.load(),
            Load {
                active: 2,
                queued: 2
            }
        );
        // Up to 5: three new slots, two waiters: both in at once.
        bulkhead.force_limit(&settings, 5);
        assert_eq!(
            bulkhead.load(),
            Load {
                active: 4,
                queued: 0
            }
        );
        let waker = std::task::Waker::noop();
        for id in waiters {
            assert!(bulkhead.poll_waiter(0, id, waker).is_ready());
        }
        // One slot left for a newcomer, then none.
        assert!(granted(bulkhead.enter(&settings, 0, 1).unwrap()));
        assert!(!granted(bulkhead.enter(&settings, 0, 1).unwrap()));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn limit_changes_never_strand_a_waiter_or_overfill() {
        const HIGHEST: u32 = 8;
        let config = BulkheadConfig::adaptive()
            .bounds(1, HIGHEST)
            .queue(1_000)
            .overflow(Overflow::RejectNew);
        let mut found = Vec::new();
        let settings = Arc::new(config.check(&mut Problems::new("", &mut found)).unwrap());
        let bulkhead = Arc::new(Bulkhead::new(&settings));
        let in_flight = Arc::new(StdAtomicU32::new(0));
        let done = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for task in 0..16 {
            let (bulkhead, settings) = (Arc::clone(&bulkhead), Arc::clone(&settings));
            let (in_flight, done) = (Arc::clone(&in_flight), Arc::clone(&done));
            tasks.push(tokio::spawn(async move {
                for round in 0..300 {
                    let admitted = match bulkhead.enter(&settings, 0, 1).unwrap() {
                        Admission::Granted(_) => true,
                        Admission::Queued(id) => {
                            let waiting = Waiting::new(&bulkhead, 0, id);
                            // Some give up early (dropped in the queue);
                            // the rest must get their slot.
                            let patience = if (task + round) % 7 == 0 {
                                Duration::from_micros(50)
                            } else {
                                Duration::from_secs(10)
                            };
                            match tokio::time::timeout(patience, waiting).await {
                                Ok(granted) => granted.is_ok(),
                                Err(_) if patience < Duration::from_secs(1) => false,
                                Err(_) => panic!("a waiter was stranded"),
                            }
                        }
                    };
                    if admitted {
                        let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                        assert!(now <= HIGHEST, "{now} in flight");
                        tokio::task::yield_now().await;
                        in_flight.fetch_sub(1, Ordering::SeqCst);
                        bulkhead.release();
                    }
                }
                done.fetch_add(1, Ordering::SeqCst);
            }));
        }
        let chaos = {
            let (bulkhead, settings, done) = (
                Arc::clone(&bulkhead),
                Arc::clone(&settings),
                Arc::clone(&done),
            );
            tokio::spawn(async move {
                let mut n: u32 = 1;
                while done.load(Ordering::SeqCst) < 16 {
                    n = n.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                    bulkhead.force_limit(&settings, 1 + (n >> 16) % HIGHEST);
                    tokio::task::yield_now().await;
                }
            })
        };
        for task in tasks {
            task.await.unwrap();
        }
        chaos.await.unwrap();
        let load = bulkhead.load();
        assert_eq!((load.active, load.queued), (0, 0));
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
            Admission::Granted(_) => {}
            Admission::Queued(id) => {
                loom::future::block_on(Waiting::new(bulkhead, 0, id)).expect("granted")
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
                    Admission::Granted(_) => bulkhead.release(),
                    // Cancelled at once: the future is dropped unpolled.
                    Admission::Queued(id) => drop(Waiting::new(&bulkhead, 0, id)),
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
            let Admission::Queued(first) = bulkhead.enter(&settings(), 0, 1).unwrap() else {
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
                thread::spawn(move || drop(Waiting::new(&bulkhead, 0, first)))
            };
            bulkhead.release();
            quitter.join().unwrap();
            patient.join().unwrap();
            assert_eq!(bulkhead.load(), Load::default());
        });
    }
}
