//! A quota shared through a store is still the quota: over any interval
//! `T`, the calls admitted by every process together are at most
//! `rate × T + burst`, with a slow store, with processes joining and
//! leaving, and for calls of any cost. Managers (one a process) share a
//! store written against the public trait (`tests/support/memory_store.rs`)
//! on the paused clock; Redis's store holds the same bound across real
//! processes (`fleet.rs`).

use std::sync::Arc;
use std::time::Duration;

use portcullis::deadline::TimeLimits;
use portcullis::store::WhenUnavailable;
use portcullis::{RateConfig, ThrottleManager};
use proptest::prelude::*;
use tokio::time::Instant;

use crate::memory_store::MemoryStore;
use crate::quota_bound::{
    Admitted, Entry, admissions, assert_within_quota, caller, most_over_rate, timer_slack, tokens,
};

/// `processes` managers sharing one store `round_trip` away, each with
/// `quota` as its rate.
fn fleet(
    processes: usize,
    round_trip: Duration,
    quota: &RateConfig,
) -> Vec<ThrottleManager<String>> {
    let store = Arc::new(MemoryStore::new(WhenUnavailable::UseLocalRate).round_trip(round_trip));
    (0..processes)
        .map(|_| {
            ThrottleManager::<String>::builder()
                .rate(quota.clone())
                .rate_store(Arc::clone(&store))
                .time_limits(TimeLimits::new().max_wait(Duration::from_secs(3_600)))
                .build()
                .unwrap()
        })
        .collect()
}

/// Four processes of eight callers on a store 50 ms away: the store's
/// answer comes late, and every call starts late by the same half round
/// trip, so no interval holds more than the quota.
#[tokio::test(start_paused = true)]
async fn four_processes_on_a_slow_store_get_the_quota_and_no_more() {
    let quota = RateConfig::per_second(40).burst(5);
    for entry in Entry::ALL {
        let managers = fleet(4, Duration::from_millis(50), &quota);
        let run_for = Duration::from_secs(120);
        let admitted = admissions(&managers, entry, 8, &[1], run_for).await;
        let what = format!("{entry:?}, 4 processes of 8, 50 ms away");
        assert_within_quota(&what, &admitted, (40.0, 5), run_for, 0.99);
    }
}

/// Calls of several costs from four processes share the quota in tokens.
#[tokio::test(start_paused = true)]
async fn calls_of_any_cost_from_four_processes_get_the_quota_in_tokens() {
    let quota = RateConfig::per_second(40).burst(5);
    for entry in Entry::ALL {
        let managers = fleet(4, Duration::from_millis(10), &quota);
        let run_for = Duration::from_secs(60);
        let admitted = admissions(&managers, entry, 4, &[2, 1, 5, 3], run_for).await;
        let what = format!("{entry:?}, costs 1 to 5, 4 processes");
        assert_within_quota(&what, &admitted, (40.0, 5), run_for, 0.98);
    }
}

/// A process that joins mid-run takes its share of the quota, not more; one
/// that leaves (its callers dropped while they wait, their booked tokens
/// handed back) leaves its share to the others.
#[tokio::test(start_paused = true)]
async fn processes_that_join_and_leave_mid_run_keep_the_quota() {
    let quota = RateConfig::per_second(40).burst(5);
    for entry in Entry::ALL {
        let managers = fleet(3, Duration::from_millis(20), &quota);
        let start = Instant::now();
        let run_for = Duration::from_secs(90);
        let until = start + run_for;
        let admitted = Admitted::default();
        let spawn = |manager: &ThrottleManager<String>| {
            let task = caller(
                manager.clone(),
                entry,
                vec![1],
                start,
                until,
                admitted.clone(),
            );
            tokio::spawn(task)
        };
        // The first two processes from the start; the third joins at 30 s,
        // and the first leaves at 60 s.
        let first: Vec<_> = (0..8).map(|_| spawn(&managers[0])).collect();
        let mut rest: Vec<_> = (0..8).map(|_| spawn(&managers[1])).collect();
        tokio::time::sleep(Duration::from_secs(30)).await;
        rest.extend((0..8).map(|_| spawn(&managers[2])));
        tokio::time::sleep(Duration::from_secs(30)).await;
        for task in &first {
            task.abort();
        }
        for task in rest {
            task.await.unwrap();
        }
        let what = format!("{entry:?}, a process joining at 30 s, one leaving at 60 s");
        assert_within_quota(&what, &admitted.sorted(), (40.0, 5), run_for, 0.98);
    }
}

/// One process on its own, with `quota` as its rate.
fn alone(quota: &RateConfig) -> ThrottleManager<String> {
    ThrottleManager::<String>::builder()
        .rate(quota.clone())
        .time_limits(TimeLimits::new().max_wait(Duration::from_secs(3_600)))
        .build()
        .unwrap()
}

fn entry() -> impl Strategy<Value = Entry> {
    prop_oneof![Just(Entry::Wait), Just(Entry::Acquire), Just(Entry::Call)]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Any quota, any costs it can take, any number of callers in one
    /// process on its own or one to three sharing a store near or far: no interval holds more than
    /// `rate × T + burst` tokens, and the quota is used.
    #[test]
    fn no_interval_holds_more_than_the_quota(
        rate in 1u32..=200,
        burst in 1u32..=10,
        costs in proptest::collection::vec(1u32..=10, 1..=4),
        callers in 1usize..=16,
        processes in 0usize..=3,
        round_trip_ms in prop_oneof![Just(0u64), Just(5), Just(50)],
        entry in entry(),
    ) {
        let costs: Vec<u32> = costs.into_iter().map(|cost| cost.min(burst)).collect();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        let run_for = Duration::from_secs(20);
        let admitted = runtime.block_on(async {
            let quota = RateConfig::per_second(rate).burst(burst);
            let managers = match processes {
                0 => vec![alone(&quota)],
                n => fleet(n, Duration::from_millis(round_trip_ms), &quota),
            };
            admissions(&managers, entry, callers, &costs, run_for).await
        });
        let rate = f64::from(rate);
        let over = most_over_rate(&admitted, rate);
        let allowed = f64::from(burst) + timer_slack(rate) + 1e-6;
        prop_assert!(over <= allowed, "{over} tokens over the rate in one interval");
        let quota = rate * run_for.as_secs_f64() + f64::from(burst);
        let used = tokens(&admitted);
        // The quota is used, but for the last call that would not fit and
        // the first half round trip, as far as the callers can: each of
        // their calls asks the store, so a caller makes at most one call a
        // round trip (here: half that, as a margin).
        let biggest = f64::from(*costs.iter().max().unwrap());
        let late = rate * round_trip_ms as f64 / 1_000.0;
        let smallest = f64::from(*costs.iter().min().unwrap());
        let asking = (callers * processes.max(1)) as f64 * smallest * run_for.as_secs_f64();
        let can_use = match round_trip_ms {
            _ if processes == 0 => quota,
            0 => quota,
            ms => quota.min(asking * 1_000.0 / ms as f64 / 2.0),
        };
        prop_assert!(
            used >= 0.99 * can_use - biggest - late,
            "only {used} tokens of {quota}, where the callers could use {can_use}"
        );
    }
}
