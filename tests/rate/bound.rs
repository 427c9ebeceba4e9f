//! A quota is a bound a user can check: over any interval `T`, the calls
//! admitted are at most `rate × T + burst`, whoever waits, however many
//! wait and whatever their calls cost. On tokio's paused clock, so the
//! instants are exact. (Several processes sharing one quota through a
//! store: `tests/rate/store/quota.rs`.)

use std::time::Duration;

use portcullis::deadline::TimeLimits;
use portcullis::{RateConfig, ThrottleManager};

use crate::quota_bound::{Entry, admissions, assert_within_quota};

async fn holds(entry: Entry, callers: usize) {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_second(40).burst(5))
        .time_limits(TimeLimits::new().max_wait(Duration::from_secs(3_600)))
        .build()
        .unwrap();
    let run_for = Duration::from_secs(600);
    let admitted = admissions(&[manager], entry, callers, &[1], run_for).await;
    let what = format!("{entry:?}, {callers} callers");
    assert_within_quota(&what, &admitted, (40.0, 5), run_for, 0.99);
}

#[tokio::test(start_paused = true)]
async fn eight_waiters_get_the_quota_and_no_more() {
    for entry in Entry::ALL {
        holds(entry, 8).await;
    }
}

#[tokio::test(start_paused = true)]
async fn sixty_four_waiters_get_the_quota_and_no_more() {
    for entry in Entry::ALL {
        holds(entry, 64).await;
    }
}

#[tokio::test(start_paused = true)]
async fn five_hundred_and_twelve_waiters_get_the_quota_and_no_more() {
    for entry in Entry::ALL {
        holds(entry, 512).await;
    }
}

/// Calls of several costs take their tokens from the same bound.
#[tokio::test(start_paused = true)]
async fn calls_of_any_cost_get_the_quota_in_tokens_and_no_more() {
    for entry in Entry::ALL {
        let manager = ThrottleManager::<String>::builder()
            .rate(RateConfig::per_second(40).burst(5))
            .time_limits(TimeLimits::new().max_wait(Duration::from_secs(3_600)))
            .build()
            .unwrap();
        let run_for = Duration::from_secs(120);
        let admitted = admissions(&[manager], entry, 16, &[1, 5, 2, 3], run_for).await;
        let what = format!("{entry:?}, costs 1 to 5");
        assert_within_quota(&what, &admitted, (40.0, 5), run_for, 0.99);
    }
}
