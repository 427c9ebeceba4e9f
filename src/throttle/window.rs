//! One key's sliding window of requests and accepts per priority, in
//! atomics.
//!
//! The window is [`BUCKETS`] buckets, each `window / BUCKETS` long and
//! aligned to multiples of that length since the clock's origin, so a
//! bucket's span never drifts with the times of calls (a counter aligned to
//! the last call would).
//!
//! The hot path is cheap: a call's outcome is one `fetch_add` on the newest
//! bucket (requests and accepts of a priority share one word), and a
//! healthy key's probability is two loads (see `clean_from`); a key with
//! failures in its window sums its buckets. When time crosses into a new
//! bucket, the first call to notice rotates the window under a lock (once
//! per bucket length per key): it clears the expired buckets.
//!
//! A priority's counters are allocated when it first counts an outcome:
//! most keys see one or two of a manager's priorities, and a key that has
//! counted nothing yet (one only `check`ed) holds no counters at all.

use std::num::NonZeroU8;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use once_cell::race::OnceBox;

use super::config::ThrottleSettings;
use super::probability::{self, Counts};
use crate::clock::Nanos;

/// Buckets per window.
pub(crate) const BUCKETS: usize = 10;

/// Requests count in the low half of a bucket's word, accepts in the high.
const ACCEPT_SHIFT: u32 = 16;

/// The requests' half of a bucket's word.
const REQUESTS: u32 = (1 << ACCEPT_SHIFT) - 1;

/// A bucket whose requests reach this many halves both its counts before
/// it counts more: its share accepted, which is what the formula reads,
/// stays, and it still weighs at least 24,576 outcomes in the window
/// (against which `min_rate`'s floor, 60 in a minute's window by default,
/// is little). A priority of a key past 8,000 outcomes a second in a
/// minute's window gets there. A quarter of the half-word is left above
/// it, so that 16,383 adders that all passed the check at once still
/// cannot carry the requests into the accepts (a failing key would then
/// read as healthy).
const HALVE_AT: u32 = 3 << (ACCEPT_SHIFT - 2);

/// What one outcome adds to a bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Count {
    /// A call attempted and not accepted (failed, or shed locally).
    Request,
    /// A call attempted and accepted (or ended in a way that says nothing
    /// about overload).
    Accepted,
}

impl Count {
    /// What it adds to a bucket's packed word.
    fn packed(self) -> u32 {
        match self {
            Self::Request => 1,
            Self::Accepted => 1 | 1 << ACCEPT_SHIFT,
        }
    }
}

/// Requests and accepts per priority over the last window.
///
/// `repr(C)`, in this order: what every call reads (from `head` to the end
/// of `near`) comes first, in the first 56 bytes, so that the key's
/// bulkhead, which every call writes, can be kept off its cache line (see
/// the key's `Extras`).
#[derive(Debug)]
#[repr(C)]
pub(crate) struct ThrottleWindow {
    /// The newest bucket (numbered from the clock's origin) rotated in.
    head: AtomicU64,
    /// The first bucket whose window holds no unaccepted request. Before
    /// it, the counts must be read; from it on, every priority has
    /// `requests == accepts`, so (`ratio >= 1`) the probability is 0 and a
    /// healthy key's check is two loads.
    clean_from: AtomicU64,
    /// How many priority levels the window counts. Never 0, which leaves
    /// `Option<ThrottleWindow>` a niche: 8 bytes a key less.
    levels: NonZeroU8,
    /// Whether the last decision shed a call: to report the turns only.
    shedding: AtomicBool,
    /// By priority, its counters once it has counted an outcome: one
    /// pointer each, the first [`NEAR_LEVELS`] here and any more (a manager
    /// with more levels) in `far`. An outcome reaches its counters in two
    /// steps from the key, not three, and a key with the default levels
    /// holds no table: one null pointer (a thin one, 8 bytes a key less
    /// than a slice's).
    near: [OnceBox<Counters>; NEAR_LEVELS],
    far: Option<Box<FarLevels>>,
    rotating: Mutex<()>,
}

/// The counters' places of the levels past [`NEAR_LEVELS`].
#[derive(Debug)]
struct FarLevels(Box<[OnceBox<Counters>]>);

/// Priorities whose counters a window finds from itself: the default
/// number of levels.
const NEAR_LEVELS: usize = 4;

/// One priority's counts over the window: 40 bytes.
#[derive(Debug, Default)]
struct Counters {
    /// By slot (`bucket % BUCKETS`): requests and accepts, 16 bits each,
    /// halved at [`HALVE_AT`]. Summed when read: sums kept beside them
    /// would cost 16 bytes a priority on every key, for reads that only a
    /// key with failures makes.
    buckets: [AtomicU32; BUCKETS],
}

impl ThrottleWindow {
    /// An empty window for `levels` priorities, its newest bucket `now`'s.
    pub(crate) fn new(levels: u8, now: Nanos, settings: &ThrottleSettings) -> Self {
        Self {
            head: AtomicU64::new(now / settings.bucket),
            clean_from: AtomicU64::new(0),
            shedding: AtomicBool::new(false),
            rotating: Mutex::new(()),
            // The manager's levels are validated to be at least one.
            levels: NonZeroU8::new(levels).unwrap_or(NonZeroU8::MIN),
            near: Default::default(),
            far: (usize::from(levels) > NEAR_LEVELS).then(|| {
                let far = (NEAR_LEVELS..usize::from(levels)).map(|_| OnceBox::new());
                Box::new(FarLevels(far.collect()))
            }),
        }
    }

    /// The addresses of the fields every call reads (the newest bucket, the
    /// clean mark, the levels, the shedding flag and the counters' places),
    /// from the first byte to past the last: for the key's layout test.
    #[cfg(test)]
    pub(crate) fn read_by_every_call(&self) -> std::ops::Range<usize> {
        let fields = [
            crate::sync::bytes_of(&self.head),
            crate::sync::bytes_of(&self.clean_from),
            crate::sync::bytes_of(&self.levels),
            crate::sync::bytes_of(&self.shedding),
            crate::sync::bytes_of(&self.near),
        ];
        let start = fields.iter().map(|f| f.start).min().unwrap_or(0);
        let end = fields.iter().map(|f| f.end).max().unwrap_or(0);
        start..end
    }

    /// The counters of `priority`, if it has counted anything.
    fn counters(&self, priority: usize) -> Option<&Counters> {
        self.level(priority)?.get()
    }

    /// How many priority levels the window counts.
    #[inline]
    fn level_count(&self) -> usize {
        usize::from(self.levels.get())
    }

    /// The place of `priority`'s counters, if it is one of the levels.
    #[inline]
    fn level(&self, priority: usize) -> Option<&OnceBox<Counters>> {
        if priority >= self.level_count() {
            return None;
        }
        self.near
            .get(priority)
            .or_else(|| self.far.as_ref()?.0.get(priority - NEAR_LEVELS))
    }

    /// The counters of every priority that has counted an outcome.
    fn counted(&self) -> impl Iterator<Item = &Counters> {
        let far = self.far.iter().flat_map(|far| far.0.iter());
        let levels = self.near.iter().chain(far);
        levels.take(self.level_count()).filter_map(OnceBox::get)
    }

    /// The probability of rejecting a call of `priority` at `now`.
    #[inline]
    pub(crate) fn rejection(
        &self,
        now: Nanos,
        priority: usize,
        settings: &ThrottleSettings,
    ) -> f64 {
        let head = self.head_at(now, settings.bucket);
        if head >= self.clean_from.load(Ordering::Acquire) {
            return 0.0;
        }
        probability::rejection(self.seen_by(priority), settings)
    }

    /// Counts one outcome of `priority` at `now`, into the newest bucket
    /// (an outcome timed before it counts as of now).
    #[inline]
    pub(crate) fn record(
        &self,
        now: Nanos,
        priority: usize,
        count: Count,
        settings: &ThrottleSettings,
    ) {
        let head = self.head_at(now, settings.bucket);
        if count == Count::Request {
            // Set before counting, so no reader sees the count as clean.
            self.clean_from
                .fetch_max(head + BUCKETS as u64, Ordering::AcqRel);
        }
        let Some(counters) = self.level(priority) else {
            return; // resolved priorities are within the levels
        };
        let counters = counters.get_or_init(Box::default);
        let bucket = &counters.buckets[slot(head)];
        // Accepts never exceed requests, so the requests' half fills
        // first.
        if bucket.load(Ordering::Relaxed) & REQUESTS >= HALVE_AT {
            halve(bucket);
        }
        bucket.fetch_add(count.packed(), Ordering::AcqRel);
    }

    /// Records whether the key is shedding; true if that changed.
    #[inline]
    pub(crate) fn note_shedding(&self, shedding: bool) -> bool {
        self.shedding.load(Ordering::Relaxed) != shedding
            && self.shedding.swap(shedding, Ordering::AcqRel) != shedding
    }

    /// Per priority, the requests and accepts over the window and the
    /// rejection probability, at `now`: for introspection.
    pub(crate) fn report(&self, now: Nanos, settings: &ThrottleSettings) -> Vec<(Counts, f64)> {
        let head = self.head_at(now, settings.bucket);
        let clean = head >= self.clean_from.load(Ordering::Acquire);
        self.seen_by_each()
            .map(|(own, seen)| {
                let probability = if clean {
                    0.0
                } else {
                    probability::rejection(seen, settings)
                };
                (own, probability)
            })
            .collect()
    }

    /// The time from which forgetting this window loses nothing: while any
    /// priority would be shed, not before its last bucket expires;
    /// otherwise from the start of its newest bucket. Every level is asked:
    /// a lower one inherits the failures above it but also counts its own
    /// successes, so it may be healthy while a higher one is shed.
    pub(crate) fn quiet_from(&self, settings: &ThrottleSettings) -> Nanos {
        let head = self.head.load(Ordering::Acquire);
        let shedding = head < self.clean_from.load(Ordering::Acquire)
            && self
                .seen_by_each()
                .any(|(_, seen)| probability::rejection(seen, settings) > 0.0);
        let quiet_bucket = if shedding {
            head + BUCKETS as u64
        } else {
            head
        };
        quiet_bucket.saturating_mul(settings.bucket)
    }

    /// The window's counts as `priority` sees them, `head` being the newest
    /// bucket.
    fn seen_by(&self, priority: usize) -> Counts {
        let above = (0..priority).map(|p| self.counts(p));
        probability::seen_by(above, self.counts(priority))
    }

    /// Each priority's own counts and the counts it sees, most important
    /// first, in one pass: the calls not accepted above a level are
    /// carried down to it rather than summed again for each.
    fn seen_by_each(&self) -> impl Iterator<Item = (Counts, Counts)> + '_ {
        let mut unaccepted_above = 0.0;
        (0..self.level_count()).map(move |p| {
            let own = self.counts(p);
            let above = Counts {
                requests: unaccepted_above,
                accepts: 0.0,
            };
            unaccepted_above += probability::unaccepted(own);
            (own, probability::seen_by([above], own))
        })
    }

    /// The counts of `priority` over the window. (Every bucket in it is
    /// counted: a rotation clears those that left the window.)
    fn counts(&self, priority: usize) -> Counts {
        let Some(counters) = self.counters(priority) else {
            return Counts::default();
        };
        let (mut requests, mut accepts) = (0, 0);
        for bucket in &counters.buckets {
            let packed = bucket.load(Ordering::Acquire);
            requests += u64::from(packed & REQUESTS);
            accepts += u64::from(packed >> ACCEPT_SHIFT);
        }
        Counts {
            requests: requests as f64,
            accepts: accepts as f64,
        }
    }

    /// The newest bucket at `now`, buckets being `length` long: rotates
    /// to `now`'s bucket if time has crossed into it. While it has not, one
    /// load and one multiplication (a healthy call does this twice, and a
    /// 64-bit division costs several times as much).
    #[inline]
    fn head_at(&self, now: Nanos, length: Nanos) -> u64 {
        let head = self.head.load(Ordering::Acquire);
        // `now / length <= head`, without dividing.
        if now < head.saturating_add(1).saturating_mul(length) {
            return head;
        }
        self.rotate_to(now / length)
    }

    /// Makes `bucket` the newest, expiring the buckets that fall out of the
    /// window; returns the newest bucket. One load when nothing changes.
    #[inline]
    fn rotate_to(&self, bucket: u64) -> u64 {
        let head = self.head.load(Ordering::Acquire);
        if head >= bucket {
            return head;
        }
        self.rotate(bucket)
    }

    /// [`rotate_to`](Self::rotate_to) when time has crossed into a new
    /// bucket: once per bucket length.
    #[cold]
    fn rotate(&self, bucket: u64) -> u64 {
        let _rotating = self.rotating.lock().unwrap_or_else(|e| e.into_inner());
        let head = self.head.load(Ordering::Acquire);
        if head >= bucket {
            return head; // rotated while we waited for the lock
        }
        // The slots of buckets head+1 ..= bucket hold buckets that have now
        // left the window; at most all BUCKETS of them.
        let first = (head + 1).max(bucket.saturating_sub(BUCKETS as u64 - 1));
        for counters in self.counted() {
            for expired in first..=bucket {
                counters.buckets[slot(expired)].store(0, Ordering::Release);
            }
        }
        self.head.store(bucket, Ordering::Release);
        bucket
    }
}

/// Halves both counts of a bucket whose requests reached [`HALVE_AT`]
/// (once, however many callers find it there: the others see it below).
/// Rounding down keeps accepts at most requests.
#[cold]
fn halve(bucket: &AtomicU32) {
    let _ = bucket.fetch_update(Ordering::AcqRel, Ordering::Acquire, |packed| {
        let (requests, accepts) = (packed & REQUESTS, packed >> ACCEPT_SHIFT);
        let halved = (requests / 2) | (accepts / 2) << ACCEPT_SHIFT;
        (requests >= HALVE_AT).then_some(halved)
    });
}

/// The slot of `bucket` in a priority's ring of buckets.
fn slot(bucket: u64) -> usize {
    (bucket % BUCKETS as u64) as usize
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

    /// A bucket full of failures stays a bucket of failures: its counts
    /// halve instead of carrying the requests into the accepts (once, a
    /// key failing 100 % read as healthy after 2^32 outcomes in one
    /// bucket).
    #[test]
    fn a_full_bucket_halves_instead_of_carrying() {
        let s = settings();
        let window = ThrottleWindow::new(4, 0, &s);
        window.record(SECOND, 0, Count::Request, &s);
        let slot = slot(window.head.load(Ordering::Acquire));
        // As if 65,535 calls had failed in this bucket.
        window.counters(0).unwrap().buckets[slot].store(REQUESTS, Ordering::Release);
        for _ in 0..10 {
            window.record(SECOND, 0, Count::Request, &s);
            window.record(SECOND, 0, Count::Accepted, &s);
        }
        let counts = window.counts(0);
        assert_eq!(counts.requests, f64::from(REQUESTS / 2 + 20));
        assert_eq!(counts.accepts, 10.0, "requests carried into accepts");
        assert!(window.rejection(SECOND, 0, &s) > 0.99);
    }

    /// A busy bucket halves its counts at [`HALVE_AT`] requests and goes
    /// on counting: the share accepted, which the formula reads, stays.
    #[test]
    fn a_busy_bucket_keeps_its_share_accepted_past_sixteen_bits() {
        let s = settings();
        let window = ThrottleWindow::new(1, 0, &s);
        // 200,000 outcomes in one bucket, three in four failed.
        for i in 0..200_000 {
            let count = if i % 4 == 0 {
                Count::Accepted
            } else {
                Count::Request
            };
            window.record(SECOND, 0, count, &s);
        }
        let counts = window.counts(0);
        assert!(counts.requests >= f64::from(HALVE_AT / 2), "{counts:?}");
        assert!(counts.requests < f64::from(HALVE_AT), "{counts:?}");
        let accepted = counts.accepts / counts.requests;
        assert!((accepted - 0.25).abs() < 0.001, "{counts:?}");
        // K = 2, min_rate 1 over 60 s, exact counts: 0.49985. The floor
        // of 60 weighs a little more against halved counts.
        let exact = (200_000.0 - 2.0 * 50_000.0) / (200_000.0 + 60.0);
        let rejection = window.rejection(2 * SECOND, 0, &s);
        assert!((rejection - exact).abs() < 0.002, "{rejection} {counts:?}");
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

    /// Past the levels a window keeps by itself: every level counts apart,
    /// expires with the window and reads its own counts, and the least
    /// important inherits the failures of all above it.
    #[test]
    fn levels_beyond_the_near_ones_count_like_the_others() {
        let s = settings(); // buckets of 6 s
        let levels = 7;
        let window = ThrottleWindow::new(levels, 0, &s);
        for level in 0..usize::from(levels) {
            for _ in 0..=level {
                window.record(SECOND, level, Count::Accepted, &s);
            }
        }
        for _ in 0..100 {
            window.record(SECOND, 5, Count::Request, &s);
        }
        // Into the next bucket: the counts stay in the window.
        window.head_at(7 * SECOND, s.bucket);
        for level in 0..usize::from(levels) {
            let accepts = (level + 1) as f64;
            let failures = if level == 5 { 100.0 } else { 0.0 };
            let counts = window.counts(level);
            assert_eq!(
                (counts.requests, counts.accepts),
                (accepts + failures, accepts)
            );
        }
        assert_eq!(window.rejection(7 * SECOND, 4, &s), 0.0);
        let five = window.rejection(7 * SECOND, 5, &s);
        assert!(five > 0.5, "{five}");
        let six = window.rejection(7 * SECOND, 6, &s);
        assert!(
            six > 0.5,
            "level 6, which failed nothing, sees level 5's failures: {six}"
        );
        assert_eq!(window.report(7 * SECOND, &s).len(), usize::from(levels));
        // A level out of range counts nothing and reads as empty.
        window.record(SECOND, 7, Count::Request, &s);
        assert!(window.counters(7).is_none());
        // The whole window later: every level forgotten.
        let later = 70 * SECOND;
        for level in 0..usize::from(levels) {
            assert_eq!(window.rejection(later, level, &s), 0.0);
            window.head_at(later, s.bucket);
            let counts = window.counts(level);
            assert_eq!((counts.requests, counts.accepts), (0.0, 0.0));
        }
    }

    #[test]
    fn buckets_expire_on_boundaries_aligned_to_the_origin() {
        let s = settings(); // buckets of 6 s
        let window = ThrottleWindow::new(1, 0, &s);
        // Requests late in bucket 0 (at 5.9 s) leave the window when bucket
        // 10 starts (60 s), not 60 s after they were made. One more request
        // in bucket 5 (30 s) keeps the window unclean past 60 s, so the
        // answer at 60 s comes from clearing bucket 0, not from the
        // shortcut for a window with nothing left in it.
        for _ in 0..100 {
            window.record(5_900_000_000, 0, Count::Request, &s);
        }
        window.record(30 * SECOND, 0, Count::Request, &s);
        // (101 - 0) / (101 + 60), then (1 - 0) / (1 + 60).
        assert_eq!(window.rejection(59_999_999_999, 0, &s), 101.0 / 161.0);
        assert_eq!(window.rejection(60 * SECOND, 0, &s), 1.0 / 61.0);
        assert_eq!(window.counts(0).requests, 1.0);
        // And bucket 5's request leaves when bucket 15 starts.
        assert_eq!(window.rejection(89_999_999_999, 0, &s), 1.0 / 61.0);
        assert_eq!(window.rejection(90 * SECOND, 0, &s), 0.0);
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
            window.record(SECOND, 0, Count::Accepted, &s);
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
        // Nothing has expired yet (all within the first 30 s), and a count
        // made with a stale time still lands in a bucket of the window.
        assert_eq!(window.counts(0).requests, 20_000.0);
        assert_eq!(window.counts(1).requests, 20_000.0);
    }

    proptest::proptest! {
        /// The newest bucket found without dividing is the bucket of the
        /// latest time seen, `now / length` (a stale time leaves it), at
        /// every distance from a bucket's edge and for times far from the
        /// clock's origin.
        #[test]
        fn the_newest_bucket_is_the_bucket_of_the_latest_time(
            length in 1u64..1 << 40,
            start in 0u64..1 << 62,
            steps in proptest::collection::vec((0u64..4, -2i64..=2), 1..50),
        ) {
            let s = ThrottleSettings::for_test(ThrottleConfig::new());
            let window = ThrottleWindow::new(1, 0, &s);
            window.head.store(start / length, Ordering::Relaxed);
            let (mut now, mut latest) = (start, start);
            for (buckets, nudge) in steps {
                // On, just before or just after a bucket's edge, or a
                // little back in time.
                let edge = (now / length + buckets).saturating_mul(length);
                now = edge.saturating_add_signed(nudge).min(u64::MAX / 2);
                latest = latest.max(now);
                proptest::prop_assert_eq!(window.head_at(now, length), latest / length);
            }
        }

        /// The window against a plain model: a list of every outcome with
        /// its bucket, summed over the last `BUCKETS` buckets. Times only move
        /// forward, by steps that cross zero, one or many buckets, so every
        /// path of the rotation (nothing to do, a few buckets expire, the
        /// whole window expires) is taken.
        #[test]
        fn the_window_holds_exactly_the_outcomes_of_its_last_buckets(
            window_ms in 10u64..120_000,
            ops in proptest::collection::vec((0u64..3_000_000_000, 0usize..4, proptest::bool::ANY), 1..200),
        ) {
            let s = ThrottleSettings::for_test(
                ThrottleConfig::new().window(Duration::from_millis(window_ms)),
            );
            let window = ThrottleWindow::new(4, 0, &s);
            let mut recorded: Vec<(u64, usize, Count)> = Vec::new();
            let mut now = 0;
            for (advance, priority, accept) in ops {
                now += if advance % 4 == 0 { 0 } else { advance }; // some steps are 0
                let count = if accept { Count::Accepted } else { Count::Request };
                window.record(now, priority, count, &s);
                recorded.push((now / s.bucket, priority, count));
                let head = now / s.bucket;
                let oldest = head.saturating_sub(BUCKETS as u64 - 1);
                for p in 0..4 {
                    let mut expected = Counts::default();
                    for &(_, _, count) in recorded
                        .iter()
                        .filter(|(bucket, q, _)| *q == p && *bucket >= oldest)
                    {
                        expected.requests += 1.0;
                        expected.accepts += f64::from(u8::from(count == Count::Accepted));
                    }
                    proptest::prop_assert_eq!(window.counts(p), expected, "priority {}", p);
                    let above = (0..p).map(|q| window.counts(q));
                    let want = probability::rejection(probability::seen_by(above, expected), &s);
                    proptest::prop_assert_eq!(window.rejection(now, p, &s), want);
                }
            }
        }
    }
}
