//! Shadow mode: every decision made and counted, none enforced. The same
//! run enforced and shadowed counts the same refusals, by reason.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use portcullis::builder::Tier;
use portcullis::clock::ManualClock;
use portcullis::error::RejectReason;
use portcullis::{BulkheadConfig, Priority, RateConfig, ThrottleConfig, ThrottleManager};

use crate::support::bounded;

fn manager(shadow: bool, clock: &ManualClock) -> ThrottleManager<String> {
    let draws = AtomicU64::new(7);
    ThrottleManager::<String>::builder()
        .rate(RateConfig::per_second(200).burst(5))
        .throttle(ThrottleConfig::new().min_rate(0.5))
        .bulkhead(BulkheadConfig::new(2))
        .shadow(shadow)
        .random_source(move || {
            let next = draws
                .fetch_add(1, Ordering::Relaxed)
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (next >> 11) as f64 / (1u64 << 53) as f64
        })
        .clock(clock.clone())
        .build()
        .unwrap()
}

/// A scripted overload of three keys: bursts of calls, some held across
/// steps, two thirds of them failing. Returns the refusals by reason, as
/// enforced or as shadow mode counts them.
fn run(shadow: bool) -> HashMap<RejectReason, u32> {
    let clock = ManualClock::new();
    let manager = manager(shadow, &clock);
    let mut refusals = HashMap::new();
    let mut held = Vec::new();
    let mut script = 1u64;
    for step in 0..3_000u64 {
        clock.advance(Duration::from_millis(5));
        if step % 3 == 0 {
            held.clear();
        }
        for call in 0..4 {
            script = script
                .wrapping_mul(2_862_933_555_777_941_757)
                .wrapping_add(3);
            let key = ["a", "b", "c"][(script >> 60) as usize % 3];
            let priority = Priority::new((script >> 40) as u8 % 4);
            match manager.try_acquire(key, priority) {
                Ok(permit) => match permit.would_refuse() {
                    Some(reason) => *refusals.entry(reason).or_insert(0) += 1,
                    None if call == 0 => held.push(permit),
                    None if (script >> 20) % 3 != 0 => permit.overloaded(),
                    None => permit.success(),
                },
                Err(rejected) => {
                    assert!(!shadow, "shadow mode refused a call: {rejected}");
                    *refusals.entry(rejected.reason()).or_insert(0) += 1;
                }
            }
        }
    }
    refusals
}

#[test]
fn the_same_run_shadowed_refuses_nothing_and_counts_what_enforcement_refused() {
    let enforced = run(false);
    for reason in [
        RejectReason::RateLimited,
        RejectReason::Throttled,
        RejectReason::Full,
    ] {
        assert!(
            enforced.contains_key(&reason),
            "{reason:?} never refused: {enforced:?}"
        );
    }
    assert_eq!(run(true), enforced);
}

#[test]
fn shadow_mode_turned_off_enforces_the_next_call() {
    let clock = ManualClock::new();
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_second(1))
        .clock(clock.clone())
        .build()
        .unwrap();
    manager.set_shadow(true);
    for _ in 0..3 {
        assert!(manager.try_acquire("api", Priority::HIGH).is_ok());
    }
    assert!(manager.check("api").is_ok(), "the rate alone, shadowed too");
    manager.set_shadow(false);
    assert_eq!(
        manager
            .try_acquire("api", Priority::HIGH)
            .unwrap_err()
            .reason(),
        RejectReason::RateLimited
    );
}

#[tokio::test(start_paused = true)]
async fn a_shadowed_call_never_waits() {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_second(1))
        .bulkhead(BulkheadConfig::new(1).queue(4))
        .key_override("trial", Tier::new().shadow(true))
        .build()
        .unwrap();
    let started = tokio::time::Instant::now();
    let acquire = |key| bounded(key, manager.acquire(key, Priority::HIGH));
    let first = acquire("trial").await.unwrap();
    assert_eq!(first.would_refuse(), None);
    // It would wait for its token (then for the slot): let through now.
    let second = acquire("trial").await.unwrap();
    assert_eq!(second.would_refuse(), Some(RejectReason::RateLimited));
    bounded("wait", manager.wait("trial")).await.unwrap();
    assert_eq!(started.elapsed(), Duration::ZERO);
    // An enforced key waits for its token.
    drop(acquire("other").await.unwrap());
    drop(acquire("other").await.unwrap());
    assert_eq!(started.elapsed(), Duration::from_secs(1));
}

#[test]
fn a_tier_and_a_key_may_be_shadowed_apart_from_the_manager() {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_second(1))
        .tier("trial", Tier::new().shadow(true))
        .tier_of(|key: &String| key.starts_with("trial-").then_some("trial"))
        .key_override("trial-strict", Tier::new().shadow(false))
        .clock(ManualClock::new())
        .build()
        .unwrap();
    let second_call = |key: &str| {
        let _ = manager.try_acquire(key, Priority::HIGH);
        manager.try_acquire(key, Priority::HIGH).is_ok()
    };
    assert!(second_call("trial-1"), "the tier's keys are shadowed");
    assert!(!second_call("trial-strict"), "a key's own setting wins");
    assert!(!second_call("paying"), "the manager enforces");
    manager.key("paying").set_shadow(true);
    assert!(second_call("paying"));
}
