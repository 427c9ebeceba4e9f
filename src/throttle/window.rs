//! One key's requests and accepts per priority over the last window, as
//! two buckets read with interpolation.
//!
//! Time is cut into buckets a window long, aligned to multiples of that
//! length since the clock's origin (so a bucket's span never drifts with
//! the times of calls). A priority keeps the counts of the newest bucket
//! and the one before. Read at a time `f` of the way through the newest
//! bucket, the counts are the newest bucket's in full and the older one's
//! weighted `1 - f`: the last `window` of time, taking the older bucket's
//! outcomes as spread evenly over it. So an outcome counts in full until
//! its bucket ends, then fades out over the next window.
//!
//! Each bucket of a priority is one word: requests in the low half,
//! accepts in the high. One more word, `newest`, holds the newest bucket's
//! number and two flags saying which bucket holds a request the backend did
//! not accept. The hot path is short: an outcome is one `fetch_add` on its
//! priority's newest bucket (a failure sets its flag first), and a check
//! on a key with no failure in its window is one load of `newest`. When
//! time crosses into a new bucket, the first call to notice claims the turn
//! (a bit in `newest`), clears the buckets that left the window, and then
//! publishes the new bucket with the flags moved along. A call that
//! meanwhile sees the claim counts into the bucket before, which a turn of
//! one bucket keeps in the window (after a window with no call at all, a
//! turn clears both, and such a call's outcome may go with them).

use std::num::NonZeroU8;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::config::ThrottleSettings;
use super::probability::{self, Counts};
use crate::clock::Nanos;

/// Buckets a priority keeps: the newest and the one before.
pub(crate) const SLOTS: usize = 2;

/// Accepts count in the high half of a bucket's word, requests in the low.
const ACCEPT_SHIFT: u32 = 32;

/// The requests' half of a word.
const REQUESTS: u64 = (1 << ACCEPT_SHIFT) - 1;

/// A bucket whose requests reach this many halves both its counts: the
/// share accepted, which the formula reads, stays. (Three billion outcomes
/// in one bucket; a quarter of the half is left above it, so that a billion
/// adders that all passed the check at once still cannot carry the
/// requests into the accepts.)
const HALVE_AT: u64 = 3 << (ACCEPT_SHIFT - 2);

/// In `newest`: set while a call clears the buckets that left the window.
const TURNING: u64 = 1 << 63;
/// In `newest`: the newest bucket holds a request not accepted.
const FAILED_NEWEST: u64 = 1 << 62;
/// In `newest`: the bucket before it does.
const FAILED_OLDER: u64 = 1 << 61;
/// Either: the window must be read.
const FAILED: u64 = FAILED_NEWEST | FAILED_OLDER;
/// In `newest`: the newest bucket's number (a bucket is at least 10 ms, so
/// 61 bits outlast any clock).
const BUCKET: u64 = FAILED_OLDER - 1;

/// What one outcome adds to a priority's counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Count {
    /// A call attempted and not accepted (failed, or shed locally).
    Request,
    /// A call attempted and accepted (or ended in a way that says nothing
    /// about overload).
    Accepted,
}

impl Count {
    /// What it adds to a bucket's word.
    fn packed(self) -> u64 {
        match self {
            Self::Request => 1,
            Self::Accepted => 1 | 1 << ACCEPT_SHIFT,
        }
    }
}

/// One priority's buckets, by slot (`bucket % SLOTS`).
type Buckets = [AtomicU64; SLOTS];

/// Requests and accepts per priority over the last window: 88 bytes for up
/// to [`NEAR_LEVELS`] priorities.
#[derive(Debug)]
pub(crate) struct ThrottleWindow {
    /// The newest bucket (numbered from the clock's origin) in the low
    /// bits ([`BUCKET`]), with [`FAILED_NEWEST`], [`FAILED_OLDER`] and
    /// [`TURNING`] above. A flag is set before the failure it marks is
    /// counted, so no reader sees a failure as healthy.
    newest: AtomicU64,
    /// By priority, its buckets: the first [`NEAR_LEVELS`] here, any more
    /// (a manager with more levels) in `far`, reached through a thin
    /// pointer that is null for the default levels.
    near: [Buckets; NEAR_LEVELS],
    far: Option<Box<FarLevels>>,
    /// How many priority levels the window counts. Never 0.
    levels: NonZeroU8,
    /// Whether the last decision shed a call: to report the turns only.
    shedding: AtomicBool,
}

/// The buckets of the levels past [`NEAR_LEVELS`].
#[derive(Debug)]
struct FarLevels(Box<[Buckets]>);

/// Priorities whose buckets a window holds in itself: the default number
/// of levels.
const NEAR_LEVELS: usize = 4;

impl Default for ThrottleWindow {
    /// An empty window of one level: what a key whose manager has no
    /// throttle holds in its place, never counting.
    fn default() -> Self {
        Self {
            newest: AtomicU64::new(0),
            near: Default::default(),
            far: None,
            levels: NonZeroU8::MIN,
            shedding: AtomicBool::new(false),
        }
    }
}

impl ThrottleWindow {
    /// An empty window for `levels` priorities, its newest bucket `now`'s.
    pub(crate) fn new(levels: u8, now: Nanos, settings: &ThrottleSettings) -> Self {
        Self {
            newest: AtomicU64::new(now / settings.bucket),
            near: Default::default(),
            // The manager's levels are validated to be at least one.
            levels: NonZeroU8::new(levels).unwrap_or(NonZeroU8::MIN),
            shedding: AtomicBool::new(false),
            far: (usize::from(levels) > NEAR_LEVELS).then(|| {
                let far = (NEAR_LEVELS..usize::from(levels)).map(|_| Buckets::default());
                Box::new(FarLevels(far.collect()))
            }),
        }
    }

    /// How many priority levels the window counts.
    #[inline]
    fn level_count(&self) -> usize {
        usize::from(self.levels.get())
    }

    /// The buckets of `priority`, if it is one of the levels.
    #[inline]
    fn level(&self, priority: usize) -> Option<&Buckets> {
        if priority >= self.level_count() {
            return None;
        }
        self.near
            .get(priority)
            .or_else(|| self.far.as_ref()?.0.get(priority - NEAR_LEVELS))
    }

    /// Every level's buckets, most important first.
    fn levels(&self) -> impl Iterator<Item = &Buckets> {
        let far = self.far.iter().flat_map(|far| far.0.iter());
        self.near.iter().chain(far).take(self.level_count())
    }

    /// The probability of rejecting a call of `priority` at `now`.
    #[inline]
    pub(crate) fn rejection(
        &self,
        now: Nanos,
        priority: usize,
        settings: &ThrottleSettings,
    ) -> f64 {
        let word = self.word_at(now, settings.bucket);
        if word & FAILED == 0 {
            return 0.0; // nothing failed in the window: the common case
        }
        self.rejection_of(word & BUCKET, now, priority, settings)
    }

    /// [`rejection`](Self::rejection) for a window that holds a failure.
    fn rejection_of(
        &self,
        newest: u64,
        now: Nanos,
        priority: usize,
        settings: &ThrottleSettings,
    ) -> f64 {
        let part = oldest_part(now, newest, settings.bucket);
        let above = self
            .levels()
            .take(priority)
            .map(|b| counts(b, newest, part));
        let own = self
            .level(priority)
            .map_or_else(Counts::default, |b| counts(b, newest, part));
        probability::rejection(probability::seen_by(above, own), settings)
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
        let word = self.word_at(now, settings.bucket);
        let Some(buckets) = self.level(priority) else {
            return; // resolved priorities are within the levels
        };
        if count == Count::Request && word & FAILED_NEWEST == 0 {
            // Flagged before it is counted. (Should the window turn in
            // between, the flag lands on the next bucket and the count on
            // the one before: both are read while either is flagged, and
            // the turn after moves the flag back by one.)
            self.newest.fetch_or(FAILED_NEWEST, Ordering::AcqRel);
        }
        let word = &buckets[slot(word & BUCKET)];
        let before = word.fetch_add(count.packed(), Ordering::AcqRel);
        // Accepts never exceed requests, so the requests' half fills first.
        if before & REQUESTS >= HALVE_AT {
            halve(word);
        }
    }

    /// Records whether the key is shedding; true if that changed.
    #[inline]
    pub(crate) fn note_shedding(&self, shedding: bool) -> bool {
        self.shedding.load(Ordering::Relaxed) != shedding
            && self.shedding.swap(shedding, Ordering::AcqRel) != shedding
    }

    /// Per priority, its counts and its rejection probability at `now`:
    /// for introspection.
    pub(crate) fn report(&self, now: Nanos, settings: &ThrottleSettings) -> Vec<(Counts, f64)> {
        let newest = self.word_at(now, settings.bucket) & BUCKET;
        let part = oldest_part(now, newest, settings.bucket);
        self.seen_by_each(newest, part)
            .map(|(own, seen)| (own, probability::rejection(seen, settings)))
            .collect()
    }

    /// The time from which forgetting this window loses nothing: while any
    /// priority would be shed, not before the newest bucket has run its
    /// course (then the older bucket has left, and what remains fades);
    /// otherwise from the start of the newest bucket. Every level is
    /// asked: a lower one inherits the failures above it but also counts
    /// its own successes, so it may be healthy while a higher one is shed.
    pub(crate) fn quiet_from(&self, settings: &ThrottleSettings) -> Nanos {
        let word = self.newest.load(Ordering::Acquire);
        let newest = word & BUCKET;
        let shedding = word & FAILED != 0
            && self
                .seen_by_each(newest, 1.0)
                .any(|(_, seen)| probability::rejection(seen, settings) > 0.0);
        let quiet_bucket = if shedding { newest + 1 } else { newest };
        quiet_bucket.saturating_mul(settings.bucket)
    }

    /// Each priority's own counts and the counts it sees, most important
    /// first, in one pass: the calls not accepted above a level are
    /// carried down to it rather than summed again for each.
    fn seen_by_each(&self, newest: u64, part: f64) -> impl Iterator<Item = (Counts, Counts)> + '_ {
        let mut unaccepted_above = 0.0;
        self.levels().map(move |buckets| {
            let own = counts(buckets, newest, part);
            let above = Counts {
                requests: unaccepted_above,
                accepts: 0.0,
            };
            unaccepted_above += probability::unaccepted(own);
            (own, probability::seen_by([above], own))
        })
    }

    /// The window's word (`newest`) at `now`, buckets being `length` long:
    /// moves the window on first if time has crossed into a new bucket.
    /// While it has not, one load and one multiplication (a 64-bit division
    /// costs several times as much).
    #[inline]
    fn word_at(&self, now: Nanos, length: Nanos) -> u64 {
        let word = self.newest.load(Ordering::Acquire);
        // `now / length <= newest`, without dividing.
        if now < ((word & BUCKET) + 1).saturating_mul(length) {
            return word;
        }
        self.turn_to(word, now / length)
    }

    /// Makes `bucket` the newest, clearing the buckets that leave the
    /// window, unless another call is doing so (then the bucket before
    /// stays the newest for this call) or has done it; returns the word.
    #[cold]
    fn turn_to(&self, mut seen: u64, bucket: u64) -> u64 {
        loop {
            if seen & TURNING != 0 || seen & BUCKET >= bucket {
                return seen;
            }
            match self.newest.compare_exchange(
                seen,
                seen | TURNING,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break,
                Err(newer) => seen = newer,
            }
        }
        // The slots of buckets from+1 ..= bucket hold buckets that have
        // now left the window; at most all SLOTS of them. No call counts
        // into them meanwhile: until the turn is published, every call
        // sees `from` as the newest bucket.
        let from = seen & BUCKET;
        let first = (from + 1).max(bucket.saturating_sub(SLOTS as u64 - 1));
        for buckets in self.levels() {
            for expired in first..=bucket {
                buckets[slot(expired)].store(0, Ordering::Release);
            }
        }
        // `from`'s flag, set before the turn or during it (its calls count
        // into `from`), becomes the older bucket's, if `from` stays in the
        // window.
        let turned = |word: u64| {
            let older = bucket == from + 1 && word & FAILED_NEWEST != 0;
            bucket | if older { FAILED_OLDER } else { 0 }
        };
        match self
            .newest
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |word| {
                Some(turned(word))
            }) {
            Ok(word) | Err(word) => turned(word),
        }
    }
}

/// A priority's counts, `newest` being the newest bucket and `part` the
/// share of the older one in the window.
#[inline]
fn counts(buckets: &Buckets, newest: u64, part: f64) -> Counts {
    let (older, newer) = (slot(newest + 1), slot(newest));
    let (older, newer) = (
        unpack(buckets[older].load(Ordering::Acquire)),
        unpack(buckets[newer].load(Ordering::Acquire)),
    );
    Counts {
        requests: older.0 as f64 * part + newer.0 as f64,
        accepts: older.1 as f64 * part + newer.1 as f64,
    }
}

/// The share of the older bucket still in the window at `now`: 1 at the
/// start of the newest bucket, 0 at its end.
#[inline]
fn oldest_part(now: Nanos, newest: u64, length: Nanos) -> f64 {
    let into_newest = now.saturating_sub(newest.saturating_mul(length));
    (1.0 - into_newest as f64 / length as f64).clamp(0.0, 1.0)
}

/// A word's requests and accepts.
#[inline]
fn unpack(packed: u64) -> (u64, u64) {
    (packed & REQUESTS, packed >> ACCEPT_SHIFT)
}

/// The slot of `bucket` in a priority's buckets.
#[inline]
fn slot(bucket: u64) -> usize {
    (bucket % SLOTS as u64) as usize
}

/// Halves both counts of a word whose requests reached [`HALVE_AT`]
/// (once, however many callers find it there: the others see it below).
/// Rounding down keeps accepts at most requests.
#[cold]
fn halve(word: &AtomicU64) {
    let _ = word.fetch_update(Ordering::AcqRel, Ordering::Acquire, |packed| {
        let (requests, accepts) = unpack(packed);
        (requests >= HALVE_AT).then_some((requests / 2) | ((accepts / 2) << ACCEPT_SHIFT))
    });
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

    /// A priority's counts in full (both buckets), for the tests.
    fn counts(window: &ThrottleWindow, priority: usize) -> Counts {
        let newest = window.newest.load(Ordering::Acquire) & BUCKET;
        window
            .level(priority)
            .map_or_else(Counts::default, |b| super::counts(b, newest, 1.0))
    }

    /// A bucket full of failures stays a bucket of failures: its counts
    /// halve instead of carrying the requests into the accepts.
    #[test]
    fn a_full_bucket_halves_instead_of_carrying() {
        let s = settings();
        let window = ThrottleWindow::new(4, 0, &s);
        // As if four billion calls had failed in this bucket.
        window.near[0][0].store(REQUESTS - 1, Ordering::Release);
        for _ in 0..10 {
            window.record(SECOND, 0, Count::Request, &s);
            window.record(SECOND, 0, Count::Accepted, &s);
        }
        let counts = counts(&window, 0);
        assert_eq!(counts.requests, (REQUESTS / 2 + 19) as f64);
        assert_eq!(counts.accepts, 10.0, "requests carried into accepts");
        assert!(window.rejection(SECOND, 0, &s) > 0.99);
    }

    /// A busy bucket halves its counts at [`HALVE_AT`] requests and goes
    /// on counting: the share accepted, which the formula reads, stays.
    #[test]
    fn a_busy_bucket_keeps_its_share_accepted_past_its_word() {
        let s = settings();
        let window = ThrottleWindow::new(1, 0, &s);
        // Just below the mark, one in four accepted; then 200,000 more
        // outcomes, three in four failed.
        let start = HALVE_AT - 1_000;
        window.near[0][0].store(start | (start / 4) << ACCEPT_SHIFT, Ordering::Release);
        for i in 0..200_000 {
            let count = if i % 4 == 0 {
                Count::Accepted
            } else {
                Count::Request
            };
            window.record(SECOND, 0, count, &s);
        }
        let counts = counts(&window, 0);
        assert!(counts.requests < HALVE_AT as f64, "{counts:?}");
        let accepted = counts.accepts / counts.requests;
        assert!((accepted - 0.25).abs() < 0.001, "{counts:?}");
        let rejection = window.rejection(SECOND, 0, &s);
        assert!((rejection - 0.5).abs() < 0.001, "{rejection} {counts:?}");
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

    /// Past the levels a window keeps in itself: every level counts apart,
    /// moves on with the others and reads its own counts, and the least
    /// important inherits the failures of all above it.
    #[test]
    fn levels_beyond_the_near_ones_count_like_the_others() {
        let s = settings(); // buckets of 60 s
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
        let next = 60 * SECOND;
        window.word_at(next, s.bucket);
        for level in 0..usize::from(levels) {
            let accepts = (level + 1) as f64;
            let failures = if level == 5 { 100.0 } else { 0.0 };
            let counts = counts(&window, level);
            assert_eq!(
                (counts.requests, counts.accepts),
                (accepts + failures, accepts)
            );
        }
        assert_eq!(window.rejection(next, 4, &s), 0.0);
        let five = window.rejection(next, 5, &s);
        assert!(five > 0.5, "{five}");
        let six = window.rejection(next, 6, &s);
        assert!(
            six > 0.5,
            "level 6, which failed nothing, sees level 5's failures: {six}"
        );
        assert_eq!(window.report(next, &s).len(), usize::from(levels));
        // A level out of range counts nothing and reads as empty.
        window.record(SECOND, 7, Count::Request, &s);
        assert!(window.level(7).is_none());
        // Two buckets later: every level forgotten.
        let later = 120 * SECOND;
        for level in 0..usize::from(levels) {
            assert_eq!(window.rejection(later, level, &s), 0.0);
            assert_eq!(counts(&window, level), Counts::default());
        }
    }

    /// The meaning of `window`: an outcome counts in full until a window
    /// after its bucket began, then fades out over one bucket, evenly
    /// (buckets aligned to the clock's origin).
    #[test]
    fn outcomes_fade_out_over_the_bucket_after_the_window() {
        let s = settings(); // buckets of 60 s
        let window = ThrottleWindow::new(1, 0, &s);
        // Failures at 30 s count in full to 60 s, then fade until 120 s.
        for _ in 0..100 {
            window.record(30 * SECOND, 0, Count::Request, &s);
        }
        let p = |requests: f64| requests / (requests + 60.0);
        assert_eq!(window.rejection(59_999_999_999, 0, &s), 0.625);
        assert_eq!(window.rejection(60 * SECOND, 0, &s), 0.625);
        assert_eq!(window.rejection(75 * SECOND, 0, &s), p(75.0));
        assert_eq!(window.rejection(90 * SECOND, 0, &s), p(50.0));
        let last = window.rejection(119_999_999_999, 0, &s);
        assert!(last > 0.0 && last < 1e-9, "{last}");
        assert_eq!(window.rejection(120 * SECOND, 0, &s), 0.0);
        assert_eq!(counts(&window, 0), Counts::default());
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
        assert_eq!(counts(&window, 1), Counts::default());
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

    /// Which bucket holds a failure is in the window's word: set by the
    /// failure, moved to the older bucket by a turn, gone when that bucket
    /// leaves. Successes alone never set it, so a healthy key's check is
    /// one load.
    #[test]
    fn the_failure_flags_follow_the_failure_through_the_window() {
        let s = settings(); // buckets of 60 s
        let window = ThrottleWindow::new(2, 0, &s);
        let flags = |now| window.word_at(now, s.bucket) & FAILED;
        for _ in 0..1_000 {
            window.record(SECOND, 1, Count::Accepted, &s);
        }
        assert_eq!(flags(SECOND), 0);
        window.record(2 * SECOND, 1, Count::Request, &s);
        assert_eq!(flags(2 * SECOND), FAILED_NEWEST);
        assert_eq!(flags(60 * SECOND), FAILED_OLDER);
        assert!(
            window.rejection(60 * SECOND, 1, &s) == 0.0,
            "1 in 1,001 failed"
        );
        window.record(61 * SECOND, 0, Count::Request, &s);
        assert_eq!(flags(61 * SECOND), FAILED);
        assert_eq!(flags(120 * SECOND), FAILED_OLDER);
        assert_eq!(flags(180 * SECOND), 0);
        // Two buckets at once: nothing stays flagged.
        window.record(181 * SECOND, 0, Count::Request, &s);
        assert_eq!(flags(300 * SECOND), 0);
    }

    /// While one call turns the window, another sees the bucket before as
    /// the newest and counts into it: nothing waits, nothing is lost.
    #[test]
    fn a_call_during_a_turn_counts_into_the_bucket_before() {
        let s = settings();
        let window = ThrottleWindow::new(1, 0, &s);
        window.newest.store(TURNING, Ordering::Release); // turning from 0
        assert_eq!(window.word_at(61 * SECOND, s.bucket) & BUCKET, 0);
        window.record(61 * SECOND, 0, Count::Request, &s);
        window.newest.store(1, Ordering::Release); // the turn is done
        assert_eq!(counts(&window, 0).requests, 1.0);
        assert_eq!(unpack(window.near[0][0].load(Ordering::Acquire)), (1, 0));
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
                        // Spread over 30 s, within the first bucket.
                        let now = (i * 3_000_000) + thread;
                        window.record(now, (i % 2) as usize, Count::Request, s);
                    }
                });
            }
        });
        assert_eq!(counts(&window, 0).requests, 20_000.0);
        assert_eq!(counts(&window, 1).requests, 20_000.0);
    }

    /// Threads counting through eight buckets, all in the same bucket at a
    /// time: at the start of the last, the window holds at most the last
    /// two buckets' outcomes (the older ones were cleared, even while
    /// calls counted) and at least the last one's (none lost to a turn).
    #[test]
    fn concurrent_turns_clear_what_left_and_keep_what_came() {
        let s = ThrottleSettings::for_test(ThrottleConfig::new().window(Duration::from_millis(10)));
        let window = ThrottleWindow::new(1, 0, &s);
        let in_bucket = std::sync::Barrier::new(4);
        std::thread::scope(|scope| {
            for thread in 0..4u64 {
                let (window, s, in_bucket) = (&window, &s, &in_bucket);
                scope.spawn(move || {
                    for bucket in 0..8 {
                        in_bucket.wait();
                        for i in 0..1_000 {
                            let now = bucket * s.bucket + i * 1_000 + thread;
                            window.record(now, 0, Count::Request, s);
                        }
                    }
                });
            }
        });
        let requests = window.report(7 * s.bucket, &s)[0].0.requests;
        assert!((4_000.0..=8_000.0).contains(&requests), "{requests}");
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
            window.newest.store(start / length, Ordering::Relaxed);
            let (mut now, mut latest) = (start, start);
            for (buckets, nudge) in steps {
                // On, just before or just after a bucket's edge, or a
                // little back in time.
                let edge = (now / length + buckets).saturating_mul(length);
                now = edge.saturating_add_signed(nudge).min(u64::MAX / 2);
                latest = latest.max(now);
                proptest::prop_assert_eq!(window.word_at(now, length) & BUCKET, latest / length);
            }
        }

        /// The window against a plain model: a list of every outcome with
        /// its bucket; the newest bucket's count in full and the one before
        /// in the share of it still within `window` of now. Times only move
        /// forward, by steps that cross zero, one or many buckets, so every
        /// path of the turn (nothing to do, one bucket leaves, both leave)
        /// is taken.
        #[test]
        fn the_window_holds_the_last_window_of_outcomes(
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
                let newest = now / s.bucket;
                let part = 1.0 - (now - newest * s.bucket) as f64 / s.bucket as f64;
                let model: [Counts; 4] = std::array::from_fn(|p| {
                    let (mut old, mut new) = ((0u64, 0u64), (0u64, 0u64));
                    for &(bucket, _, count) in recorded.iter().filter(|(_, q, _)| *q == p) {
                        let into = if bucket == newest { &mut new } else if bucket + 1 == newest { &mut old } else { continue };
                        into.0 += 1;
                        into.1 += u64::from(count == Count::Accepted);
                    }
                    Counts {
                        requests: old.0 as f64 * part + new.0 as f64,
                        accepts: old.1 as f64 * part + new.1 as f64,
                    }
                });
                let report = window.report(now, &s);
                for p in 0..4 {
                    proptest::prop_assert_eq!(report[p].0, model[p], "priority {}", p);
                    let seen = probability::seen_by(model[..p].iter().copied(), model[p]);
                    let want = probability::rejection(seen, &s);
                    proptest::prop_assert_eq!(window.rejection(now, p, &s), want);
                    proptest::prop_assert_eq!(report[p].1, want);
                }
            }
        }
    }
}
