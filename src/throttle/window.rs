//! One key's sliding window of requests and accepts per priority, in
//! atomics.
//!
//! The window is [`BUCKETS`] buckets, each `window / BUCKETS` long and
//! aligned to multiples of that length since the clock's origin, so a
//! bucket's span never drifts with the times of calls (Bulwark's counter
//! aligns to the last call and drifts). Running totals per priority make the
//! hot path a handful of loads and two adds; when time crosses into a new
//! bucket, the first call to notice rotates the window under a lock (once
//! per bucket length per key) and subtracts the expired buckets from the
//! totals.

use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};

use super::config::ThrottleSettings;
use super::probability::{self, Counts};
use crate::clock::Nanos;

/// Buckets per window.
pub(crate) const BUCKETS: usize = 10;

/// What a count records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Count {
    /// A call was attempted (let through, or rejected locally).
    Request = 0,
    /// The backend accepted a call (or the call ended in a way that says
    /// nothing about overload).
    Accept = 1,
}

/// Requests and accepts per priority over the last window.
#[derive(Debug)]
pub(crate) struct ThrottleWindow {
    /// The newest bucket (numbered from the clock's origin) rotated in.
    head: AtomicU64,
    rotating: Mutex<()>,
    levels: usize,
    /// `[priority * 2 + count]`: sums of the live buckets. Signed, because a
    /// rotation may subtract a bucket's count before a racing call has added
    /// its share to the total; readers clamp at 0.
    totals: Box<[AtomicI64]>,
    /// `[(slot * levels + priority) * 2 + count]`.
    buckets: Box<[AtomicU32]>,
}

impl ThrottleWindow {
    /// An empty window for `levels` priorities, its newest bucket `now`'s.
    pub(crate) fn new(levels: u8, now: Nanos, settings: &ThrottleSettings) -> Self {
        let levels = usize::from(levels);
        Self {
            head: AtomicU64::new(now / settings.bucket),
            rotating: Mutex::new(()),
            levels,
            totals: (0..levels * 2).map(|_| AtomicI64::new(0)).collect(),
            buckets: (0..BUCKETS * levels * 2)
                .map(|_| AtomicU32::new(0))
                .collect(),
        }
    }

    /// The probability of rejecting a call of `priority` at `now`.
    pub(crate) fn rejection(
        &self,
        now: Nanos,
        priority: usize,
        settings: &ThrottleSettings,
    ) -> f64 {
        self.rotate_to(now / settings.bucket);
        probability::rejection(self.seen_by(priority), settings)
    }

    /// Counts one `count` of `priority` at `now`.
    pub(crate) fn record(
        &self,
        now: Nanos,
        priority: usize,
        count: Count,
        settings: &ThrottleSettings,
    ) {
        let bucket = now / settings.bucket;
        self.rotate_to(bucket);
        let slot = (bucket % BUCKETS as u64) as usize;
        let index = priority * 2 + count as usize;
        self.buckets[slot * self.levels * 2 + index].fetch_add(1, Ordering::AcqRel);
        self.totals[index].fetch_add(1, Ordering::AcqRel);
    }

    /// The time from which forgetting this window loses nothing: while the
    /// least important priority would be shed, not before its last bucket
    /// expires; otherwise from the start of its newest bucket.
    pub(crate) fn quiet_from(&self, settings: &ThrottleSettings) -> Nanos {
        let head = self.head.load(Ordering::Acquire);
        let shedding = probability::rejection(self.seen_by(self.levels - 1), settings) > 0.0;
        let quiet_bucket = if shedding {
            head + BUCKETS as u64
        } else {
            head
        };
        quiet_bucket.saturating_mul(settings.bucket)
    }

    /// The window's counts as `priority` sees them.
    fn seen_by(&self, priority: usize) -> Counts {
        let above = (0..priority).map(|p| self.counts(p));
        probability::seen_by(above, self.counts(priority))
    }

    fn counts(&self, priority: usize) -> Counts {
        let total = |count: Count| {
            self.totals[priority * 2 + count as usize]
                .load(Ordering::Acquire)
                .max(0) as f64
        };
        Counts {
            requests: total(Count::Request),
            accepts: total(Count::Accept),
        }
    }

    /// Makes `bucket` the newest, expiring the buckets that fall out of the
    /// window. Cheap when `bucket` is already in: one load.
    fn rotate_to(&self, bucket: u64) {
        if self.head.load(Ordering::Acquire) >= bucket {
            return;
        }
        let _rotating = self.rotating.lock().unwrap_or_else(|e| e.into_inner());
        let head = self.head.load(Ordering::Acquire);
        if head >= bucket {
            return; // rotated while we waited for the lock
        }
        // The slots of buckets head+1 ..= bucket hold buckets that have now
        // left the window; at most all BUCKETS of them.
        let first = (head + 1).max(bucket.saturating_sub(BUCKETS as u64 - 1));
        for expired in first..=bucket {
            let slot = (expired % BUCKETS as u64) as usize;
            for index in 0..self.levels * 2 {
                let count = self.buckets[slot * self.levels * 2 + index].swap(0, Ordering::AcqRel);
                self.totals[index].fetch_sub(i64::from(count), Ordering::AcqRel);
            }
        }
        self.head.store(bucket, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ThrottleConfig;
    use std::time::Duration;

    const SECOND: Nanos = 1_000_000_000;

    fn settings() -> ThrottleSettings {
        ThrottleSettings::for_test(ThrottleConfig::new().window(Duration::from_secs(60)))
    }

    #[test]
    fn a_hundred_failures_give_the_formulas_probability() {
        let s = settings();
        let window = ThrottleWindow::new(4, 0, &s);
        for _ in 0..100 {
            window.record(SECOND, 0, Count::Request, &s);
        }
        assert_eq!(window.rejection(2 * SECOND, 0, &s), 0.625);
        // Priority 1 inherits priority 0's failures.
        assert_eq!(window.rejection(2 * SECOND, 1, &s), 0.625);
    }

    #[test]
    fn buckets_expire_on_boundaries_aligned_to_the_origin() {
        let s = settings(); // buckets of 6 s
        let window = ThrottleWindow::new(1, 0, &s);
        // Requests late in bucket 0 (at 5.9 s) leave the window when bucket
        // 10 starts (60 s), not 60 s after they were made.
        for _ in 0..100 {
            window.record(5_900_000_000, 0, Count::Request, &s);
        }
        assert!(window.rejection(59_999_999_999, 0, &s) > 0.6);
        assert_eq!(window.rejection(60 * SECOND, 0, &s), 0.0);
    }

    #[test]
    fn a_long_silence_empties_the_window() {
        let s = settings();
        let window = ThrottleWindow::new(2, 0, &s);
        for _ in 0..50 {
            window.record(0, 1, Count::Request, &s);
        }
        assert!(window.rejection(0, 1, &s) > 0.0);
        assert_eq!(window.rejection(3_600 * SECOND, 1, &s), 0.0);
        assert_eq!(window.counts(1), Counts::default());
    }

    #[test]
    fn accepts_bring_the_probability_back_down() {
        let s = settings();
        let window = ThrottleWindow::new(1, 0, &s);
        for _ in 0..100 {
            window.record(0, 0, Count::Request, &s);
        }
        let failing = window.rejection(0, 0, &s);
        for _ in 0..40 {
            window.record(SECOND, 0, Count::Request, &s);
            window.record(SECOND, 0, Count::Accept, &s);
        }
        let recovering = window.rejection(SECOND, 0, &s);
        assert!(recovering < failing, "{recovering} < {failing}");
        // 140 requests, 40 accepts: (140 - 80) / (140 + 60).
        assert_eq!(recovering, 0.3);
    }

    #[test]
    fn concurrent_counts_are_not_lost() {
        let s = settings();
        let window = ThrottleWindow::new(2, 0, &s);
        std::thread::scope(|scope| {
            for thread in 0..4u64 {
                let (window, s) = (&window, &s);
                scope.spawn(move || {
                    for i in 0..10_000u64 {
                        // Spread over 30 s, crossing bucket boundaries.
                        let now = (i * 3_000_000) + thread;
                        window.record(now, (i % 2) as usize, Count::Request, s);
                    }
                });
            }
        });
        // Nothing has expired yet (all within the first 30 s).
        assert_eq!(window.counts(0).requests, 20_000.0);
        assert_eq!(window.counts(1).requests, 20_000.0);
    }

    proptest::proptest! {
        #[test]
        fn the_probability_is_always_a_probability(
            ratio in 1.0f64..10.0,
            min_rate in 0.001f64..100.0,
            window_ms in 10u64..120_000,
            ops in proptest::collection::vec((0u64..5_000_000_000, 0usize..4, proptest::bool::ANY), 1..300),
        ) {
            let s = ThrottleSettings::for_test(
                ThrottleConfig::new()
                    .ratio(ratio)
                    .min_rate(min_rate)
                    .window(Duration::from_millis(window_ms)),
            );
            let window = ThrottleWindow::new(4, 0, &s);
            let mut now = 0;
            for (advance, priority, accept) in ops {
                now += advance;
                let count = if accept { Count::Accept } else { Count::Request };
                window.record(now, priority, count, &s);
                for p in 0..4 {
                    let probability = window.rejection(now, p, &s);
                    proptest::prop_assert!(probability.is_finite());
                    proptest::prop_assert!((0.0..=1.0).contains(&probability));
                }
            }
        }
    }
}
