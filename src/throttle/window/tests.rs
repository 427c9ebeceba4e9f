//! The window's two forms: a healthy key's few words, the buckets while a
//! failure is in the window, and the moves between them.

use std::time::Duration;

use super::*;
use crate::ThrottleConfig;

const SECOND: Nanos = 1_000_000_000;

/// A minute's window: buckets of 6 s, epochs of 30 s.
fn settings() -> ThrottleSettings {
    ThrottleSettings::for_test(ThrottleConfig::new().window(Duration::from_secs(60)))
}

/// `priority`'s (requests, accepts) as reported at `now`.
fn counts(window: &ThrottleWindow, now: Nanos, priority: usize) -> (f64, f64) {
    let (counts, _) = window.report(now, 4, &settings())[priority];
    (counts.requests, counts.accepts)
}

#[test]
fn a_healthy_key_counts_its_accepts_in_a_few_words_and_never_sheds() {
    let s = settings();
    let window = ThrottleWindow::new(0, &s);
    for _ in 0..1_000 {
        window.record(SECOND, 1, Count::Accepted, 4, &s);
    }
    assert!(!window.is_failing());
    assert_eq!(window.rejection(SECOND, 1, &s), 0.0);
    assert_eq!(counts(&window, SECOND, 1), (1_000.0, 1_000.0));
    // Half a window on, the epoch before still counts; a whole one on, not.
    assert_eq!(counts(&window, 30 * SECOND, 1), (1_000.0, 1_000.0));
    assert_eq!(counts(&window, 60 * SECOND, 1), (0.0, 0.0));
    assert_eq!(std::mem::size_of::<ThrottleWindow>(), 48);
}

/// The first failure meets the healthy accepts as its budget: 100 of them
/// and 100 failures shed nothing (100 requests over 2 × 100 accepts),
/// where 100 failures alone would shed 0.625.
#[test]
fn the_first_failure_is_judged_against_the_healthy_accepts() {
    let s = settings();
    let window = ThrottleWindow::new(0, &s);
    for _ in 0..100 {
        window.record(SECOND, 0, Count::Accepted, 4, &s);
    }
    for _ in 0..100 {
        window.record(2 * SECOND, 0, Count::Request, 4, &s);
    }
    assert!(window.is_failing());
    assert_eq!(counts(&window, 2 * SECOND, 0), (200.0, 100.0));
    assert_eq!(window.rejection(2 * SECOND, 0, &s), 0.0);
    let alone = ThrottleWindow::new(0, &s);
    for _ in 0..100 {
        alone.record(2 * SECOND, 0, Count::Request, 4, &s);
    }
    assert_eq!(alone.rejection(2 * SECOND, 0, &s), 0.625);
}

/// Healthy accepts seeded into the buckets leave the window with the
/// epoch they came in: spread over its buckets (the failure's epoch's up
/// to the failure's bucket), they leave as those buckets do.
#[test]
fn seeded_accepts_leave_the_window_with_their_epoch() {
    let s = settings();
    let window = ThrottleWindow::new(0, &s);
    // 50 accepts in the epoch of 0 s to 30 s, 50 in the next.
    for at in [10, 40] {
        for _ in 0..50 {
            window.record(at * SECOND, 0, Count::Accepted, 4, &s);
        }
    }
    window.record(45 * SECOND, 0, Count::Request, 4, &s);
    assert_eq!(counts(&window, 45 * SECOND, 0), (101.0, 100.0));
    // The first epoch's 50 went to its five buckets (0 s to 30 s), ten
    // each; the second's 50 to its buckets up to the failure's (30 s to
    // 48 s), 16, 17 and 17. At 60 s the bucket of 0 s has left.
    assert_eq!(counts(&window, 60 * SECOND, 0), (91.0, 90.0));
    // At 90 s the whole first epoch, and the bucket of 30 s.
    assert_eq!(counts(&window, 90 * SECOND, 0), (35.0, 34.0));
}

/// A key that failed once is back to its few words a window after the
/// failure, at its next call, with the accepts of that window kept.
#[test]
fn a_key_that_recovered_gives_its_buckets_back_and_keeps_its_accepts() {
    let s = settings();
    let window = ThrottleWindow::new(0, &s);
    window.record(SECOND, 0, Count::Request, 4, &s);
    assert!(window.is_failing());
    assert!(window.rejection(SECOND, 0, &s) > 0.0);
    for at in (10..66).step_by(8) {
        window.record(at * SECOND, 2, Count::Accepted, 4, &s);
        assert!(
            window.is_failing(),
            "the failure is still in the window at {at} s"
        );
    }
    // At 66 s the failure's bucket (0 s to 6 s) has left the window.
    window.record(66 * SECOND, 2, Count::Accepted, 4, &s);
    assert!(!window.is_failing());
    assert_eq!(window.rejection(66 * SECOND, 0, &s), 0.0);
    // The accepts of the last window, from 10 s on: the 4 of 34 s to 66 s
    // in this epoch or the one before (60 s to 90 s, 30 s to 60 s).
    let (requests, accepts) = counts(&window, 66 * SECOND, 2);
    assert_eq!((requests, accepts), (5.0, 5.0));
    // A failure now makes the buckets again.
    window.record(67 * SECOND, 2, Count::Request, 4, &s);
    assert!(window.is_failing());
    assert_eq!(counts(&window, 67 * SECOND, 2), (6.0, 5.0));
}

#[test]
fn a_rejection_check_alone_gives_the_buckets_back_too() {
    let s = settings();
    let window = ThrottleWindow::new(0, &s);
    window.record(SECOND, 0, Count::Request, 4, &s);
    assert!(window.rejection(30 * SECOND, 0, &s) > 0.0);
    assert!(window.is_failing());
    assert_eq!(window.rejection(60 * SECOND, 0, &s), 0.0);
    assert!(!window.is_failing());
}

#[test]
fn a_healthy_count_saturates_instead_of_carrying() {
    let s = settings();
    let window = ThrottleWindow::new(0, &s);
    for _ in 0..70_000 {
        window.record(SECOND, 0, Count::Accepted, 4, &s);
    }
    let (_, accepts) = counts(&window, SECOND, 0);
    assert!((60_000.0..=65_535.0).contains(&accepts), "{accepts}");
    // The next epoch's slot was not touched.
    assert_eq!(counts(&window, 60 * SECOND, 0), (0.0, 0.0));
}

#[test]
fn concurrent_failures_are_counted_whatever_form_the_window_is_in() {
    let s = ThrottleSettings::for_test(ThrottleConfig::new().window(Duration::from_millis(100)));
    let window = ThrottleWindow::new(0, &s);
    let (threads, each) = (4u64, 20_000u64);
    std::thread::scope(|scope| {
        for thread in 0..threads {
            let (window, s) = (&window, &s);
            scope.spawn(move || {
                for i in 0..each {
                    // All within one bucket, so every outcome stays in the
                    // window: one in eight a failure.
                    let count = if (i + thread) % 8 == 0 {
                        Count::Request
                    } else {
                        Count::Accepted
                    };
                    window.record(i % 1_000, (i % 4) as usize, count, 4, s);
                }
            });
        }
    });
    let failures: f64 = (0..4)
        .map(|p| {
            let (requests, accepts) = counts(&window, 999, p);
            requests - accepts
        })
        .sum();
    assert_eq!(failures, (threads * each / 8) as f64);
}

proptest::proptest! {
    /// Against a model of every outcome: while the last window holds a
    /// failure, each priority's requests beyond its accepts are exactly
    /// the failures in it; while it holds none, nothing is shed.
    #[test]
    fn failures_are_counted_exactly_and_a_healthy_window_sheds_nothing(
        window_ms in 10u64..120_000,
        ops in proptest::collection::vec((0u64..3_000_000_000, 0usize..4, 0u8..8), 1..200),
    ) {
        let s = ThrottleSettings::for_test(
            ThrottleConfig::new().window(Duration::from_millis(window_ms)),
        );
        let window = ThrottleWindow::new(0, &s);
        let mut failures: Vec<(u64, usize)> = Vec::new();
        let mut now = 0;
        for (advance, priority, kind) in ops {
            now += if advance % 4 == 0 { 0 } else { advance };
            let count = if kind == 0 { Count::Request } else { Count::Accepted };
            window.record(now, priority, count, 4, &s);
            if count == Count::Request {
                failures.push((now / s.bucket, priority));
            }
            let newest = now / s.bucket;
            let in_window = |bucket: u64| bucket + SLOTS as u64 > newest;
            let report = window.report(now, 4, &s);
            for (p, (counts, rejection)) in report.iter().enumerate() {
                let failed = failures.iter().filter(|(b, q)| *q == p && in_window(*b)).count();
                proptest::prop_assert_eq!(counts.requests - counts.accepts, failed as f64);
                if !failures.iter().any(|(b, _)| in_window(*b)) {
                    proptest::prop_assert_eq!(*rejection, 0.0);
                    proptest::prop_assert_eq!(window.rejection(now, p, &s), 0.0);
                }
            }
        }
    }
}

/// In the first epoch there is no epoch before it: buckets given back
/// there, and made again, count each accept once. (The range of "the epoch
/// before" saturated to bucket 0, which then counted in both epochs: a
/// key whose buckets were made and given back in its first seconds, as a
/// stress test's racing threads did, doubled its accepts.)
#[test]
fn buckets_given_back_and_made_again_in_the_first_epoch_count_each_accept_once() {
    let s = settings();
    let window = ThrottleWindow::new(0, &s);
    for _ in 0..10 {
        window.record(0, 0, Count::Accepted, 4, &s);
    }
    window.start_failing(0, 4, &s);
    window.recover(0, &s); // no failure yet: the buckets go back
    assert!(!window.is_failing());
    assert_eq!(counts(&window, 0, 0), (10.0, 10.0));
    window.record(0, 0, Count::Request, 4, &s);
    assert_eq!(counts(&window, 0, 0), (11.0, 10.0));
}
