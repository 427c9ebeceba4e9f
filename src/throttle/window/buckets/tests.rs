//! The bucket window against its meaning, its model and its races.

use super::*;
use crate::ThrottleConfig;
use crate::throttle::window::ROTATING;
use std::time::Duration;

const SECOND: Nanos = 1_000_000_000;

fn settings() -> ThrottleSettings {
    ThrottleSettings::for_test(ThrottleConfig::new().window(Duration::from_secs(60)))
}

/// A priority's counts over the window, for the tests.
fn counts(window: &BucketWindow, priority: usize) -> Counts {
    window
        .level(priority)
        .map_or_else(Counts::default, super::counts)
}

/// A bucket full of failures stays a bucket of failures: its counts
/// halve instead of carrying the requests into the accepts.
#[test]
fn a_full_bucket_halves_instead_of_carrying() {
    let s = settings();
    let window = BucketWindow::new(4, 0, &s);
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
    let window = BucketWindow::new(1, 0, &s);
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
    let window = BucketWindow::new(4, 0, &s);
    for _ in 0..100 {
        window.record(SECOND, 0, Count::Request, &s);
    }
    assert_eq!(window.rejection(2 * SECOND, 0, &s), 0.625);
    // Priority 1 inherits priority 0's failures.
    assert_eq!(window.rejection(2 * SECOND, 1, &s), 0.625);
}

/// Past the levels a window keeps in itself: every level counts apart,
/// moves on with the others and reads its own counts, and the levels below
/// one that fails see what it could not be allowed.
#[test]
fn levels_beyond_the_near_ones_count_like_the_others() {
    let s = settings(); // buckets of 6 s
    let levels = 7;
    let window = BucketWindow::new(levels, 0, &s);
    for level in 0..usize::from(levels) {
        for _ in 0..=level {
            window.record(SECOND, level, Count::Accepted, &s);
        }
    }
    for _ in 0..100 {
        window.record(SECOND, 5, Count::Request, &s);
    }
    // Into the next bucket: the counts stay in the window.
    let next = 6 * SECOND;
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
    // A budget of 2 × 28 accepts: levels 0 to 4 ask 15 of it; level 5
    // is allowed the 41 left of its 106, level 6 nothing, and sees the 65
    // level 5 was not allowed.
    assert_eq!(window.rejection(next, 4, &s), 0.0);
    assert_eq!(window.rejection(next, 5, &s), 65.0 / 166.0);
    assert_eq!(window.rejection(next, 6, &s), 72.0 / 132.0);
    assert_eq!(window.report(next, &s).len(), usize::from(levels));
    // A level out of range counts nothing and reads as empty.
    window.record(SECOND, 7, Count::Request, &s);
    assert!(window.level(7).is_none());
    // A window after the first bucket began: every level forgotten.
    let later = 60 * SECOND;
    for level in 0..usize::from(levels) {
        assert_eq!(window.rejection(later, level, &s), 0.0);
        assert_eq!(counts(&window, level), Counts::default());
    }
}

/// The meaning of `window`: an outcome counts in full for at least nine
/// tenths of a window after it, and not once a window has passed (ten
/// buckets of a tenth, aligned to the clock's origin).
#[test]
fn an_outcome_counts_for_nine_tenths_of_a_window_at_least_and_one_at_most() {
    let s = settings(); // buckets of 6 s
    let window = BucketWindow::new(1, 0, &s);
    // Failures at the end of the bucket from 30 s to 36 s count in full
    // until it leaves the window at 90 s: 54 s later, nine tenths of it.
    let at = 36 * SECOND - 1;
    for _ in 0..100 {
        window.record(at, 0, Count::Request, &s);
    }
    assert_eq!(window.rejection(at + 54 * SECOND - 1, 0, &s), 0.625);
    assert_eq!(window.rejection(90 * SECOND, 0, &s), 0.0);
    assert_eq!(counts(&window, 0), Counts::default());
    // Failures at the start of a bucket count until a window after it.
    let at = 96 * SECOND;
    for _ in 0..100 {
        window.record(at, 0, Count::Request, &s);
    }
    assert_eq!(window.rejection(at + 60 * SECOND - 1, 0, &s), 0.625);
    assert_eq!(window.rejection(at + 60 * SECOND, 0, &s), 0.0);
}

#[test]
fn a_long_silence_empties_the_window() {
    let s = settings();
    let window = BucketWindow::new(2, 0, &s);
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
    let window = BucketWindow::new(1, 0, &s);
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
/// failure, moved along by each rotation, gone when its bucket leaves.
/// Successes alone never set it, so a healthy key's check is one load.
#[test]
fn the_failure_flags_follow_the_failure_through_the_window() {
    let s = settings(); // buckets of 6 s
    let window = BucketWindow::new(2, 0, &s);
    let flags = |now| window.word_at(now, s.bucket) & FAILED;
    for _ in 0..1_000 {
        window.record(SECOND, 1, Count::Accepted, &s);
    }
    assert_eq!(flags(SECOND), 0);
    window.record(2 * SECOND, 1, Count::Request, &s);
    assert_eq!(flags(2 * SECOND), FAILED_NEWEST);
    assert_eq!(flags(6 * SECOND), FAILED_NEWEST << 1);
    assert!(
        window.rejection(6 * SECOND, 1, &s) == 0.0,
        "1 in 1,001 failed"
    );
    window.record(7 * SECOND, 0, Count::Request, &s);
    assert_eq!(flags(7 * SECOND), FAILED_NEWEST | FAILED_NEWEST << 1);
    assert_eq!(flags(54 * SECOND), FAILED_NEWEST << 8 | FAILED_NEWEST << 9);
    assert_eq!(flags(60 * SECOND), FAILED_NEWEST << 9);
    assert_eq!(flags(66 * SECOND), 0);
    // Many buckets at once: nothing stays flagged.
    window.record(67 * SECOND, 0, Count::Request, &s);
    assert_eq!(flags(300 * SECOND), 0);
}

/// While one call rotates the window, another sees the bucket before as
/// the newest and counts into it: nothing waits, nothing is lost.
#[test]
fn a_call_during_a_rotation_counts_into_the_bucket_before() {
    let s = settings();
    let window = BucketWindow::new(1, 0, &s);
    window.newest.store(ROTATING, Ordering::Release); // rotating from 0
    assert_eq!(window.word_at(61 * SECOND, s.bucket) & BUCKET, 0);
    window.record(61 * SECOND, 0, Count::Request, &s);
    window.newest.store(1, Ordering::Release); // the rotation is done
    assert_eq!(counts(&window, 0).requests, 1.0);
    assert_eq!(unpack(window.near[0][0].load(Ordering::Acquire)), (1, 0));
}

#[test]
fn concurrent_counts_are_not_lost() {
    let s = settings();
    let window = BucketWindow::new(2, 0, &s);
    std::thread::scope(|scope| {
        for thread in 0..4u64 {
            let (window, s) = (&window, &s);
            scope.spawn(move || {
                for i in 0..10_000u64 {
                    // Spread over 30 s, within the window.
                    let now = (i * 3_000_000) + thread;
                    window.record(now, (i % 2) as usize, Count::Request, s);
                }
            });
        }
    });
    assert_eq!(counts(&window, 0).requests, 20_000.0);
    assert_eq!(counts(&window, 1).requests, 20_000.0);
}

/// Threads counting through fourteen buckets, all in the same bucket at a
/// time: at the start of the next, the window holds at most the last ten
/// buckets' outcomes (the older ones were cleared, even while calls
/// counted) and at least the last eight's (a call during a rotation counts
/// into the bucket before, so the oldest bucket in the window may have
/// lent some of its calls to the one that has left).
#[test]
fn concurrent_rotations_clear_what_left_and_keep_what_came() {
    let s = ThrottleSettings::for_test(ThrottleConfig::new().window(Duration::from_millis(10)));
    let window = BucketWindow::new(1, 0, &s);
    let in_bucket = std::sync::Barrier::new(4);
    std::thread::scope(|scope| {
        for thread in 0..4u64 {
            let (window, s, in_bucket) = (&window, &s, &in_bucket);
            scope.spawn(move || {
                for bucket in 0..14 {
                    in_bucket.wait();
                    for i in 0..1_000 {
                        let now = bucket * s.bucket + i * 100 + thread;
                        window.record(now, 0, Count::Request, s);
                    }
                }
            });
        }
    });
    let requests = window.report(14 * s.bucket, &s)[0].0.requests;
    assert!((32_000.0..=40_000.0).contains(&requests), "{requests}");
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
        let window = BucketWindow::new(1, 0, &s);
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
    /// its bucket, those of the newest bucket and the nine before it
    /// counted. Times only move forward, by steps that cross zero, one or
    /// many buckets, so every path of the rotation (nothing to do, some
    /// buckets leave, all leave) is taken.
    #[test]
    fn the_window_holds_the_last_window_of_outcomes(
        window_ms in 10u64..120_000,
        ops in proptest::collection::vec((0u64..3_000_000_000, 0usize..4, proptest::bool::ANY), 1..200),
    ) {
        let s = ThrottleSettings::for_test(
            ThrottleConfig::new().window(Duration::from_millis(window_ms)),
        );
        let window = BucketWindow::new(4, 0, &s);
        let mut recorded: Vec<(u64, usize, Count)> = Vec::new();
        let mut now = 0;
        for (advance, priority, accept) in ops {
            now += if advance % 4 == 0 { 0 } else { advance }; // some steps are 0
            let count = if accept { Count::Accepted } else { Count::Request };
            window.record(now, priority, count, &s);
            recorded.push((now / s.bucket, priority, count));
            let newest = now / s.bucket;
            let model: [Counts; 4] = std::array::from_fn(|p| {
                let (mut requests, mut accepts) = (0u64, 0u64);
                for &(bucket, _, count) in recorded.iter().filter(|(_, q, _)| *q == p) {
                    if bucket + SLOTS as u64 > newest {
                        requests += 1;
                        accepts += u64::from(count == Count::Accepted);
                    }
                }
                Counts { requests: requests as f64, accepts: accepts as f64 }
            });
            let report = window.report(now, &s);
            let want: Vec<f64> = probability::rejections(model.iter().copied(), &s).collect();
            for p in 0..4 {
                proptest::prop_assert_eq!(report[p].0, model[p], "priority {}", p);
                proptest::prop_assert_eq!(window.rejection(now, p, &s), want[p]);
                proptest::prop_assert_eq!(report[p].1, want[p]);
            }
        }
    }
}
