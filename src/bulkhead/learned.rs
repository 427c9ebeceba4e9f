//! A key's learned concurrency limit, enforced: the state of
//! [`super::adaptive`] in atomics, and what one call's end does
//! to it.

use std::sync::atomic::Ordering;

use super::adaptive::{self, LimitEstimate, LimitTuning, Window};
use crate::clock::Nanos;
use crate::sync::{AtomicU32, AtomicU64, Mutex};

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
    tuning: LimitTuning,
    state: Mutex<LimitEstimate>,
}

/// One call's end, as a learned limit sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CallSample {
    /// When it ended.
    pub(crate) at: Nanos,
    /// From its admission to its outcome.
    pub(crate) latency: Nanos,
    /// Calls in flight when it ended, itself included.
    pub(crate) in_flight: u32,
    /// Whether the limit was holding calls back then (some queued, or
    /// every slot taken).
    pub(crate) limiting: bool,
    pub(crate) overloaded: bool,
}

/// What one sample did to a learned limit, in whole calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LimitChange {
    pub(crate) before: u32,
    pub(crate) after: u32,
    /// Whether it moved the other way than its last move (or for the
    /// first time).
    pub(crate) reversed: bool,
}

impl LimitChange {
    /// The limit stayed at `whole` calls.
    fn none(whole: u32) -> Self {
        Self {
            before: whole,
            after: whole,
            reversed: false,
        }
    }
}

impl LearnedLimit {
    /// A fresh limit of `initial` calls (after its first probe), learned
    /// as `tuning` says.
    pub(crate) fn new(initial: u32, tuning: LimitTuning) -> Self {
        let fresh = LimitEstimate::new(initial, tuning);
        Self {
            whole: AtomicU32::new(fresh.whole(tuning)),
            window_calls: AtomicU32::new(0),
            window_latency: AtomicU64::new(0),
            window_limiting: AtomicU32::new(0),
            window_size: AtomicU32::new(fresh.window_size()),
            probing: AtomicU32::new(u32::from(fresh.probe_left > 0)),
            last_move: AtomicU32::new(0),
            tuning,
            state: Mutex::new(fresh),
        }
    }

    /// The limit in whole calls now.
    #[inline]
    pub(crate) fn whole(&self) -> u32 {
        self.whole.load(Ordering::Acquire)
    }

    /// Sets the whole limit (for tests); returns the one before.
    #[cfg(all(test, not(portcullis_loom)))]
    pub(crate) fn force(&self, whole: u32) -> u32 {
        self.whole.swap(whole, Ordering::AcqRel)
    }

    /// Learns from one call's sample.
    pub(crate) fn learn(&self, sample: CallSample) -> LimitChange {
        let before = self.whole();
        let tuning = self.tuning;
        if sample.overloaded {
            return self.update(before, |learned| {
                adaptive::overloaded(learned, sample.at, tuning)
            });
        }
        if self.probing.load(Ordering::Acquire) == 1 {
            return self.update(before, |learned| {
                adaptive::probed(learned, sample.at, sample.latency, sample.in_flight, tuning)
            });
        }
        if sample.limiting {
            self.window_limiting.store(1, Ordering::Relaxed);
        }
        self.window_latency
            .fetch_add(sample.latency, Ordering::AcqRel);
        let calls = self.window_calls.fetch_add(1, Ordering::AcqRel) + 1;
        if calls < self.window_size.load(Ordering::Acquire) {
            return LimitChange::none(before);
        }
        self.update(before, |learned| {
            let window = Window {
                end: sample.at,
                calls: self.window_calls.swap(0, Ordering::AcqRel),
                latency: self.window_latency.swap(0, Ordering::AcqRel),
                limiting: self.window_limiting.swap(0, Ordering::AcqRel) == 1,
            };
            adaptive::learn(learned, window, tuning)
        })
    }

    /// Moves the state by `step` under its lock, if the lock is free, and
    /// publishes the new whole limit.
    fn update(
        &self,
        before: u32,
        step: impl FnOnce(LimitEstimate) -> LimitEstimate,
    ) -> LimitChange {
        let Ok(mut state) = self.state.try_lock() else {
            return LimitChange::none(before);
        };
        let next = step(*state);
        *state = next;
        drop(state);
        self.publish(before, next)
    }

    fn publish(&self, before: u32, next: LimitEstimate) -> LimitChange {
        self.window_size
            .store(next.window_size(), Ordering::Release);
        self.probing
            .store(u32::from(next.probe_left > 0), Ordering::Release);
        let after = next.whole(self.tuning);
        self.whole.store(after, Ordering::Release);
        if after == before {
            return LimitChange::none(before);
        }
        let direction = if after > before { 1 } else { 2 };
        let reversed = self.last_move.swap(direction, Ordering::AcqRel) != direction;
        LimitChange {
            before,
            after,
            reversed,
        }
    }
}

/// A learned limit moved at random while calls come, queue, give up and
/// go: no waiter is stranded (each gets its slot or gives up by itself), and
/// no call is admitted beyond the limit of its moment (never more in flight
/// than the highest limit set).
#[cfg(all(test, not(portcullis_loom)))]
mod tests {
    use crate::bulkhead::config::{BulkheadConfig, BulkheadSettings, Overflow};
    use crate::bulkhead::limiter::{Bulkhead, Load, QueuedWait, SlotAnswer, Waiter};
    use crate::error::Problems;
    use std::sync::Arc;
    use std::sync::atomic::Ordering;
    use std::sync::atomic::{AtomicU32 as StdAtomicU32, AtomicUsize};
    use std::time::Duration;

    /// A clock for a bulkhead without CoDel, which never reads it.
    fn no_clock() -> Arc<dyn crate::clock::Clock> {
        Arc::new(crate::clock::ManualClock::new())
    }

    fn learned_bulkhead(queue: u32) -> (Bulkhead, BulkheadSettings) {
        let config = BulkheadConfig::adaptive().bounds(1, 8).queue(queue);
        let mut found = Vec::new();
        let settings = config.check(&mut Problems::new("", &mut found)).unwrap();
        (Bulkhead::new(&settings, &no_clock()), settings)
    }

    fn granted(admission: SlotAnswer) -> bool {
        matches!(admission, SlotAnswer::Granted(_))
    }

    #[test]
    fn a_lowered_limit_retires_slots_and_a_raised_one_fills_them_from_the_queue() {
        let (bulkhead, settings) = learned_bulkhead(8);
        bulkhead.force_limit(&settings, 4);
        for _ in 0..4 {
            assert!(granted(
                bulkhead.enter(&settings, Waiter::first_level()).unwrap()
            ));
        }
        let mut waiters = Vec::new();
        for _ in 0..3 {
            match bulkhead.enter(&settings, Waiter::first_level()).unwrap() {
                SlotAnswer::Queued(id) => waiters.push(id),
                SlotAnswer::Granted(_) => panic!("past the limit"),
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
        assert!(granted(
            bulkhead.enter(&settings, Waiter::first_level()).unwrap()
        ));
        assert!(!granted(
            bulkhead.enter(&settings, Waiter::first_level()).unwrap()
        ));
    }

    #[test]
    fn a_call_past_a_lowered_limit_queues_even_with_nobody_waiting() {
        let (bulkhead, settings) = learned_bulkhead(8);
        bulkhead.force_limit(&settings, 4);
        for _ in 0..4 {
            assert!(granted(
                bulkhead.enter(&settings, Waiter::first_level()).unwrap()
            ));
        }
        // Down to 2 with 4 in flight and nobody queued: a newcomer waits
        // until the calls in flight are below the new limit.
        bulkhead.force_limit(&settings, 2);
        assert!(!granted(
            bulkhead.enter(&settings, Waiter::first_level()).unwrap()
        ));
        assert!(bulkhead.try_acquire(&settings).is_err());
        assert_eq!(
            bulkhead.load(),
            Load {
                active: 4,
                queued: 1
            }
        );
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
        let bulkhead = Arc::new(Bulkhead::new(&settings, &no_clock()));
        let in_flight = Arc::new(StdAtomicU32::new(0));
        let done = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for task in 0..16 {
            let (bulkhead, settings) = (Arc::clone(&bulkhead), Arc::clone(&settings));
            let (in_flight, done) = (Arc::clone(&in_flight), Arc::clone(&done));
            tasks.push(tokio::spawn(async move {
                for round in 0..300 {
                    let admitted = match bulkhead.enter(&settings, Waiter::first_level()).unwrap() {
                        SlotAnswer::Granted(_) => true,
                        SlotAnswer::Queued(id) => {
                            let waiting = QueuedWait::new(&bulkhead, 0, id);
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
