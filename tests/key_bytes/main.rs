//! What a key holds, counted by the allocator: a key that failed once holds
//! its throttle's buckets while the failure is in its window, and is back
//! to a healthy key's bytes a window later. On virtual time (a manual
//! clock), alone in its binary and without the test harness (its own
//! `main`, on the only thread), so that nothing else's allocations count.

use std::alloc::System;
use std::time::Duration;

use portcullis::clock::ManualClock;
use portcullis::outcome::Outcome;
use portcullis::{BulkheadConfig, Priority, RateConfig, ThrottleConfig, ThrottleManager};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static ALLOCATOR: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Live bytes allocated since `region` began.
fn live(region: &Region<'_, System>) -> isize {
    let change = region.change();
    change.bytes_allocated as isize - change.bytes_deallocated as isize
}

fn main() {
    a_key_that_failed_once_is_back_to_a_healthy_keys_bytes_a_window_later();
    println!(
        "key_bytes: a key that failed once is back to a healthy key's bytes a window later: ok"
    );
}

fn a_key_that_failed_once_is_back_to_a_healthy_keys_bytes_a_window_later() {
    let clock = ManualClock::new();
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(100.0))
        .throttle(ThrottleConfig::new().window(Duration::from_secs(60)))
        .bulkhead(BulkheadConfig::new(8))
        .clock(clock.clone())
        .build()
        .unwrap();
    let keys: Vec<String> = (0..100).map(|i| format!("tenant-{i}")).collect();
    let call = |outcome: Outcome| {
        for key in &keys {
            manager
                .try_acquire(key.as_str(), Priority::MEDIUM)
                .unwrap()
                .report(outcome);
        }
        clock.advance(Duration::from_secs(1));
    };
    let region = Region::new(ALLOCATOR);
    call(Outcome::Success);
    let healthy = live(&region);
    call(Outcome::Success);
    assert_eq!(
        live(&region),
        healthy,
        "a healthy key's outcomes allocate nothing"
    );
    call(Outcome::Overloaded);
    let failing = live(&region);
    assert!(
        failing > healthy + 100 * 300,
        "a failure in the window holds the buckets: {healthy} then {failing}"
    );
    // The failure is in the window for a minute: the buckets stay.
    clock.advance(Duration::from_secs(30));
    call(Outcome::Success);
    assert_eq!(live(&region), failing);
    // A window after it, the next call gives them back.
    clock.advance(Duration::from_secs(30));
    call(Outcome::Success);
    // The throttle's buckets are given back; the learned rate keeps its
    // last fall (the rate it fell from, when, and how it ends, with the
    // pace a fall set its waiters to and their wake for a rise: under 176
    // bytes a key), which its growth is timed from.
    let after = live(&region);
    assert!(
        after >= healthy && after <= healthy + 100 * 176,
        "back to a healthy key's bytes and the rate's last fall: {healthy} then {after}"
    );
}
