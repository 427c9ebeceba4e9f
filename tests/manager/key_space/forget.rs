//! A key forgotten on demand (`forget`): its next call starts afresh, calls
//! in flight end on the state they started with, and its room in the key
//! space is free at once.

use std::time::Duration;

use portcullis::builder::KeySpaceConfig;
use portcullis::clock::ManualClock;
use portcullis::error::RejectReason;
use portcullis::outcome::Outcome;
use portcullis::{BulkheadConfig, Priority, RateConfig, ThrottleConfig, ThrottleManager};

fn manager(clock: &ManualClock) -> ThrottleManager<String> {
    ThrottleManager::<String>::builder()
        .rate(
            RateConfig::adaptive(10.0)
                .burst(2)
                .bounds(1.0, 100.0)
                .decrease_factor(0.5),
        )
        .throttle(ThrottleConfig::new())
        // Never shed: a failure in the window would otherwise refuse a
        // next call by chance (1 in 61 after one failure).
        .random_source(|| 0.999_999)
        .bulkhead(BulkheadConfig::new(1))
        .clock(clock.clone())
        .build()
        .unwrap()
}

#[test]
fn a_forgotten_key_starts_afresh() {
    let clock = ManualClock::new();
    let manager = manager(&clock);
    for _ in 0..2 {
        manager
            .try_acquire("acme", Priority::HIGH)
            .unwrap()
            .overloaded();
    }
    assert_eq!(
        manager.key("acme").rate(),
        Some(5.0),
        "halved once in its cooldown"
    );
    let refused = manager.try_acquire("acme", Priority::HIGH).unwrap_err();
    assert_eq!(
        refused.reason(),
        RejectReason::RateLimited,
        "the burst spent"
    );

    assert!(manager.key("acme").forget());
    assert_eq!(
        manager.key("acme").rate(),
        None,
        "not live until its next call"
    );
    let permit = manager.try_acquire("acme", Priority::HIGH).unwrap();
    assert_eq!(manager.key("acme").rate(), Some(10.0), "its starting rate");
    permit.success();
    assert!(
        manager.try_acquire("acme", Priority::HIGH).is_ok(),
        "a full bucket"
    );
    assert!(!manager.key("nobody").forget(), "a key that is not live");
}

#[test]
fn a_call_in_flight_ends_on_the_state_it_started_with() {
    let clock = ManualClock::new();
    let manager = manager(&clock);
    let before = manager.try_acquire("acme", Priority::HIGH).unwrap();
    assert!(manager.key("acme").forget());
    // The new state has a bulkhead of its own: its one slot is free.
    let after = manager.try_acquire("acme", Priority::HIGH).unwrap();
    assert_eq!(manager.key("acme").snapshot().unwrap().active, Some(1));
    // The old call's overload counts on the old state, not the new one.
    before.report(Outcome::Overloaded);
    assert_eq!(manager.key("acme").rate(), Some(10.0));
    assert_eq!(
        manager.key("acme").snapshot().unwrap().active,
        Some(1),
        "the new call's slot"
    );
    after.success();
    assert_eq!(manager.key("acme").snapshot().unwrap().active, Some(0));
}

#[tokio::test(start_paused = true)]
async fn a_waiter_of_a_forgotten_key_is_served_by_the_state_it_waits_on() {
    let manager = ThrottleManager::<String>::builder()
        .bulkhead(BulkheadConfig::new(1).queue(1))
        .build()
        .unwrap();
    let held = manager.acquire("acme", Priority::HIGH).await.unwrap();
    let waiting = {
        let manager = manager.clone();
        tokio::spawn(async move { manager.acquire("acme", Priority::HIGH).await.map(drop) })
    };
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(manager.key("acme").forget());
    drop(held);
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(1), waiting)
            .await
            .expect("the waiter is handed the freed slot")
            .unwrap(),
        Ok(())
    );
}

#[test]
fn forgetting_a_key_gives_its_room_at_once() {
    let clock = ManualClock::new();
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_minute(1))
        .key_space(KeySpaceConfig::new().max_keys(1))
        .clock(clock.clone())
        .build()
        .unwrap();
    manager.check("a").unwrap();
    // "a" owes a minute: it cannot be evicted, and the key space is full.
    let full = manager.check("b").unwrap_err();
    assert_eq!(full.reason(), RejectReason::KeySpaceFull);
    assert!(manager.key("a").forget());
    assert!(manager.check("b").is_ok());
    assert_eq!(manager.keys().len(), 1);
}

/// Keys forgotten while calls hold them, then made again, many times over
/// at the cap: the count stays within the cap, and the room of every
/// forgotten key comes back (eviction drops their old entries as it meets
/// them).
#[test]
fn forgetting_at_the_cap_again_and_again_keeps_the_count() {
    let clock = ManualClock::new();
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_second(1_000))
        .bulkhead(BulkheadConfig::new(4))
        .key_space(
            KeySpaceConfig::new()
                .max_keys(3)
                .idle_ttl(Duration::from_secs(1)),
        )
        .clock(clock.clone())
        .build()
        .unwrap();
    let mut held = Vec::new();
    for round in 0..300 {
        let key = format!("k{}", round % 5);
        if let Ok(permit) = manager.try_acquire(&key, Priority::HIGH) {
            held.push(permit);
        }
        if round % 2 == 0 {
            manager.key(&key).forget();
        }
        if held.len() > 4 {
            held.remove(0).success();
        }
        clock.advance(Duration::from_millis(700));
        assert!(
            manager.keys().len() <= 3,
            "round {round}: {} live",
            manager.keys().len()
        );
    }
    drop(held);
    clock.advance(Duration::from_secs(2));
    manager.keys().evict_idle();
    for key in ["x", "y", "z"] {
        assert!(manager.check(key).is_ok(), "room for {key}");
    }
}
