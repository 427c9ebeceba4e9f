//! A key's requests and accepts per priority over the last window, in ten
//! buckets a tenth of a window long: what a key holds while a failure is
//! in its window ([`super`] says when).
//!
//! Time is cut into buckets of `window / 10`, aligned to multiples of that
//! length since the clock's origin (so a bucket's span never drifts with
//! the times of calls). A priority keeps the counts of the newest bucket
//! and the nine before it, and the window read at any time is those ten
//! whole buckets: the outcomes of the last nine tenths of a window at
//! least, of the last window at most. So an outcome counts in full for at
//! least nine tenths of a window after it, and not at all once a window
//! has passed: that is what `window` means.
//!
//! Each bucket of a priority is one word: requests in the low half,
//! accepts in the high. One more word, `newest`, holds the newest bucket's
//! number and a mask of ten flags, one per bucket, saying which holds a
//! request the backend did not accept. The hot path is short: an outcome
//! is one `fetch_add` on its priority's newest bucket (a failure sets its
//! flag first), and a check on a key with no failure in its window is one
//! load of `newest`. When time crosses into a new bucket, the first call
//! to notice claims the rotation (a bit in `newest`), clears the buckets that
//! left the window, and then publishes the new bucket with the flags moved
//! along. A call that meanwhile sees the claim counts into the bucket
//! before, which a rotation of one bucket keeps in the window (after a window
//! with no call at all, a rotation clears them all, and such a call's outcome
//! may go with them).

use std::num::NonZeroU8;
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{Count, NEAR_LEVELS, claim_rotation};
use crate::clock::Nanos;
use crate::throttle::config::ThrottleSettings;
use crate::throttle::probability::{self, Counts};

/// Buckets a priority keeps, each a tenth of the window: the newest and
/// the nine before it.
pub(crate) const SLOTS: usize = 10;

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

/// In `newest`: where the failure flags begin. Flag `i` (from this bit
/// up) says the bucket `i` before the newest holds a request not accepted.
const FAILED_SHIFT: u32 = 63 - SLOTS as u32;
/// In `newest`: the newest bucket holds a request not accepted.
const FAILED_NEWEST: u64 = 1 << FAILED_SHIFT;
/// In `newest`: every bucket's flag. Any: the window must be read.
const FAILED: u64 = ((1 << SLOTS) - 1) << FAILED_SHIFT;
/// In `newest`: the newest bucket's number (a bucket is at least 1 ms, so
/// 53 bits outlast any clock).
const BUCKET: u64 = FAILED_NEWEST - 1;

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

/// Requests and accepts per priority over the last window: 344 bytes for
/// up to [`NEAR_LEVELS`] priorities.
#[derive(Debug)]
pub(super) struct BucketWindow {
    /// The newest bucket (numbered from the clock's origin) in the low
    /// bits ([`BUCKET`]), with the buckets' failure flags ([`FAILED`]) and
    /// [`ROTATING`](super::ROTATING) above. A flag is set before the
    /// failure it marks is counted, so no reader sees a failure as healthy.
    newest: AtomicU64,
    /// By priority, its buckets: the first [`NEAR_LEVELS`] here, any more
    /// (a manager with more levels) in `far`, reached through a thin
    /// pointer that is null for the default levels.
    near: [Buckets; NEAR_LEVELS],
    far: Option<Box<FarLevels>>,
    /// How many priority levels the window counts. Never 0.
    levels: NonZeroU8,
}

/// The buckets of the levels past [`NEAR_LEVELS`].
#[derive(Debug)]
struct FarLevels(Box<[Buckets]>);

impl BucketWindow {
    /// An empty window for `levels` priorities, its newest bucket `now`'s.
    pub(super) fn new(levels: u8, now: Nanos, settings: &ThrottleSettings) -> Self {
        Self {
            newest: AtomicU64::new(now / settings.bucket),
            near: Default::default(),
            // The manager's levels are validated to be at least one.
            levels: NonZeroU8::new(levels).unwrap_or(NonZeroU8::MIN),
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
    fn levels(&self) -> impl Iterator<Item = &Buckets> + Clone {
        let far = self.far.iter().flat_map(|far| far.0.iter());
        self.near.iter().chain(far).take(self.level_count())
    }

    /// The probability of rejecting a call of `priority` at `now`.
    #[inline]
    pub(super) fn rejection(
        &self,
        now: Nanos,
        priority: usize,
        settings: &ThrottleSettings,
    ) -> f64 {
        let word = self.word_at(now, settings.bucket);
        if word & FAILED == 0 {
            return 0.0; // nothing failed in the window: the common case
        }
        self.rejection_of(priority, settings)
    }

    /// [`rejection`](Self::rejection) for a window that holds a failure.
    fn rejection_of(&self, priority: usize, settings: &ThrottleSettings) -> f64 {
        probability::rejections(self.levels().map(counts), settings)
            .nth(priority)
            .unwrap_or(0.0)
    }

    /// Counts one outcome of `priority` at `now`, into the newest bucket
    /// (an outcome timed before it counts as of now).
    #[inline]
    pub(super) fn record(
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
            // Flagged before it is counted. (Should the window rotate in
            // between, the flag lands on the next bucket and the count on
            // the one before, which leaves the window first: the count is
            // read while it is in the window, and the flag stays with it
            // or after it.)
            self.newest.fetch_or(FAILED_NEWEST, Ordering::AcqRel);
        }
        let word = &buckets[slot(word & BUCKET)];
        let before = word.fetch_add(count.packed(), Ordering::AcqRel);
        // Accepts never exceed requests, so the requests' half fills first.
        if before & REQUESTS >= HALVE_AT {
            halve(word);
        }
    }

    /// Per priority, its counts and its rejection probability at `now`:
    /// for introspection.
    pub(super) fn report(&self, now: Nanos, settings: &ThrottleSettings) -> Vec<(Counts, f64)> {
        self.word_at(now, settings.bucket); // the window moved on to now
        let own: Vec<Counts> = self.levels().map(counts).collect();
        let rejections = probability::rejections(own.iter().copied(), settings);
        own.iter().copied().zip(rejections).collect()
    }

    /// The time from which forgetting this window loses nothing: while any
    /// priority would be shed, not before the newest bucket holding a
    /// failure has left the window (then nothing can be shed); otherwise
    /// from the start of the newest bucket. Every level is asked: a lower
    /// one carries the shedding first, so it may be shed while a higher
    /// one is not.
    pub(super) fn quiet_from(&self, settings: &ThrottleSettings) -> Nanos {
        let word = self.newest.load(Ordering::Acquire);
        let newest = word & BUCKET;
        let shedding = word & FAILED != 0
            && probability::rejections(self.levels().map(counts), settings)
                .any(|rejection| rejection > 0.0);
        let quiet_bucket = if shedding {
            // Flag `i` is the bucket `i` before the newest; the lowest set
            // is the latest failure's.
            let latest_failure =
                newest.saturating_sub(u64::from((word >> FAILED_SHIFT).trailing_zeros()));
            latest_failure + SLOTS as u64
        } else {
            newest
        };
        quiet_bucket.saturating_mul(settings.bucket)
    }

    /// Whether no bucket in the window at `now` holds a request the backend
    /// did not accept: a window has passed since the key's last failure.
    #[inline]
    pub(super) fn is_clean(&self, now: Nanos, settings: &ThrottleSettings) -> bool {
        self.word_at(now, settings.bucket) & FAILED == 0
    }

    /// Counts `accepts` calls of `level`, each requested and accepted,
    /// spread evenly over `buckets` (the later ones taking what does not
    /// divide), as if they had come then: how a window made for a key's
    /// first failure takes in what the key's healthy counts knew. Buckets
    /// outside the window at the newest are left out.
    pub(super) fn seed(&self, level: usize, buckets: RangeInclusive<u64>, accepts: u64) {
        let Some(slots) = self.level(level) else {
            return;
        };
        let newest = self.newest.load(Ordering::Acquire) & BUCKET;
        let oldest = newest.saturating_sub(SLOTS as u64 - 1);
        let (first, last) = ((*buckets.start()).max(oldest), (*buckets.end()).min(newest));
        if first > last || accepts == 0 {
            return;
        }
        let spread = last - first + 1;
        for (at, bucket) in (first..=last).enumerate() {
            let share = accepts / spread + u64::from((at as u64) >= spread - accepts % spread);
            let share = share.min(HALVE_AT - 1);
            slots[slot(bucket)].fetch_add(share | share << ACCEPT_SHIFT, Ordering::AcqRel);
        }
    }

    /// The calls of `level` accepted in `buckets`, of those in the window.
    pub(super) fn accepts_in(&self, level: usize, buckets: RangeInclusive<u64>) -> u64 {
        let Some(slots) = self.level(level) else {
            return 0;
        };
        let newest = self.newest.load(Ordering::Acquire) & BUCKET;
        let oldest = newest.saturating_sub(SLOTS as u64 - 1);
        let (first, last) = ((*buckets.start()).max(oldest), (*buckets.end()).min(newest));
        (first..=last)
            .map(|bucket| unpack(slots[slot(bucket)].load(Ordering::Acquire)).1)
            .sum()
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
        self.rotate_to(word, now / length)
    }

    /// Makes `bucket` the newest, clearing the buckets that leave the
    /// window, unless another call is doing so (then the bucket before
    /// stays the newest for this call) or has done it; returns the word.
    #[cold]
    fn rotate_to(&self, seen: u64, bucket: u64) -> u64 {
        let seen = match claim_rotation(&self.newest, seen, BUCKET, bucket) {
            Ok(claimed) => claimed,
            Err(seen) => return seen,
        };
        // The slots of buckets from+1 ..= bucket hold buckets that have
        // now left the window; at most all SLOTS of them. No call counts
        // into them meanwhile: until the rotation is published, every call
        // sees `from` as the newest bucket.
        let from = seen & BUCKET;
        let first = (from + 1).max(bucket.saturating_sub(SLOTS as u64 - 1));
        for buckets in self.levels() {
            for expired in first..=bucket {
                buckets[slot(expired)].store(0, Ordering::Release);
            }
        }
        // The flags, `from`'s set before the rotation or during it (its calls
        // count into `from`), move along with their buckets; those of the
        // buckets that left the window go.
        let rotated = |word: u64| {
            let moved = (word & FAILED)
                .checked_shl(u32::try_from(bucket - from).unwrap_or(u32::MAX))
                .unwrap_or(0);
            bucket | (moved & FAILED)
        };
        match self
            .newest
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |word| {
                Some(rotated(word))
            }) {
            Ok(word) | Err(word) => rotated(word),
        }
    }
}

/// A priority's counts over the window: every bucket it keeps (those that
/// left the window were cleared when the newest came).
#[inline]
fn counts(buckets: &Buckets) -> Counts {
    let (mut requests, mut accepts) = (0u64, 0u64);
    for bucket in buckets {
        let (r, a) = unpack(bucket.load(Ordering::Acquire));
        requests += r;
        accepts += a;
    }
    Counts {
        requests: requests as f64,
        accepts: accepts as f64,
    }
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
mod tests;
