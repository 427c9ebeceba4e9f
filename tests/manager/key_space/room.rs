//! Every way room comes back to a full key space makes it visible to the
//! next new key at once, even after a refusal that remembered "no room
//! until …": a key space that looked at every key and found none it could
//! evict refuses new keys without looking until the first of them can go,
//! and anything that frees a place before then must end that memory.
//!
//! The tests that panic take `support::alone()`: a panic's backtrace loads
//! the binary's debug information, which the flood test's measure of
//! resident memory would count.

// The lock is held across the awaits of one test, whose future runs on
// its own thread.
#![allow(clippy::await_holding_lock)]

use std::time::Duration;

use portcullis::builder::KeySpaceConfig;
use portcullis::builder::Tier;
use portcullis::clock::ManualClock;
use portcullis::error::RejectReason;
use portcullis::{BulkheadConfig, Priority, RateConfig, ThrottleManager};

/// Two keys, both held: "in-use" by a call in flight (its end unknown),
/// "paused" by a server's pause of 30 s. A new key is refused, and the
/// refusal remembers that no key can go before 30 s.
fn full_and_remembered(manager: &ThrottleManager<String>, clock: &ManualClock) {
    manager.key("paused").defer(Duration::from_secs(30));
    clock.advance(Duration::from_millis(500)); // "in-use"'s token is paid for
    let refused = manager.check("refused").unwrap_err();
    assert_eq!(refused.reason(), RejectReason::KeySpaceFull);
    let refused = manager.check("refused-again").unwrap_err();
    assert!(
        refused.retry_after().unwrap() > Duration::from_secs(29),
        "the refusal remembers when the first key can go: {refused}"
    );
}

fn manager(clock: &ManualClock) -> ThrottleManager<String> {
    ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(10.0))
        .bulkhead(BulkheadConfig::new(4))
        .key_space(
            KeySpaceConfig::new()
                .max_keys(2)
                .idle_ttl(Duration::from_secs(1))
                .max_hold(Duration::from_secs(60)),
        )
        .clock(clock.clone())
        .build()
        .unwrap()
}

/// The next new key is let in now, in "in-use"'s place.
fn a_new_key_is_let_in(manager: &ThrottleManager<String>) {
    manager.check("new").expect("room was given back");
    assert!(
        manager.key("in-use").snapshot().is_none(),
        "the quiet key made room"
    );
    assert!(
        manager.key("paused").snapshot().is_some(),
        "the paused key kept its place"
    );
}

#[test]
fn a_permit_dropped_gives_its_keys_place_back_at_once() {
    let clock = ManualClock::new();
    let manager = manager(&clock);
    let permit = manager.try_acquire("in-use", Priority::HIGH).unwrap();
    full_and_remembered(&manager, &clock);
    drop(permit);
    a_new_key_is_let_in(&manager);
}

#[test]
fn a_permit_reported_gives_its_keys_place_back_at_once() {
    let clock = ManualClock::new();
    let manager = manager(&clock);
    let permit = manager.try_acquire("in-use", Priority::HIGH).unwrap();
    full_and_remembered(&manager, &clock);
    permit.success();
    a_new_key_is_let_in(&manager);
}

#[test]
fn a_key_evicted_as_idle_gives_its_place_back_at_once() {
    let clock = ManualClock::new();
    let manager = manager(&clock);
    let permit = manager.try_acquire("in-use", Priority::HIGH).unwrap();
    full_and_remembered(&manager, &clock);
    drop(permit);
    clock.advance(Duration::from_secs(2));
    assert_eq!(manager.keys().evict_idle(), 1);
    manager.check("new").expect("room was given back");
    assert_eq!(manager.keys().len(), 2);
}

/// A call whose future panics drops its permit while unwinding.
#[tokio::test(start_paused = true)]
async fn a_call_that_panics_gives_its_keys_place_back_at_once() {
    let _alone = crate::support::alone();
    let clock = ManualClock::new();
    let manager = manager(&clock);
    let started = std::sync::Arc::new(tokio::sync::Notify::new());
    let panic_now = std::sync::Arc::new(tokio::sync::Notify::new());
    let calling = tokio::spawn({
        let (manager, started, panic_now) = (manager.clone(), started.clone(), panic_now.clone());
        async move {
            let _ = manager
                .call("in-use", Priority::HIGH, || {
                    let (started, panic_now) = (started.clone(), panic_now.clone());
                    async move {
                        started.notify_one();
                        panic_now.notified().await;
                        panic!("the call's own bug");
                        #[allow(unreachable_code)]
                        Ok::<(), std::io::Error>(())
                    }
                })
                .await;
        }
    });
    started.notified().await;
    full_and_remembered(&manager, &clock);
    panic_now.notify_one();
    assert!(calling.await.unwrap_err().is_panic());
    a_new_key_is_let_in(&manager);
}

/// A call still waiting for its bulkhead slot holds its key; cancelled,
/// it no longer does, and once the call it waited behind ends the key's
/// place is free at once.
#[tokio::test(start_paused = true)]
async fn a_cancelled_waiter_holds_no_place() {
    let clock = ManualClock::new();
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(10.0).burst(10))
        .bulkhead(
            BulkheadConfig::new(1)
                .queue(4)
                .queue_timeout(Duration::from_secs(3_600)),
        )
        .key_space(KeySpaceConfig::new().max_keys(2).keep_idle_keys())
        .clock(clock.clone())
        .build()
        .unwrap();
    let permit = manager.try_acquire("in-use", Priority::HIGH).unwrap();
    let waiting = tokio::spawn({
        let manager = manager.clone();
        async move { manager.acquire("in-use", Priority::HIGH).await.map(drop) }
    });
    tokio::task::yield_now().await;
    assert_eq!(manager.key("in-use").snapshot().unwrap().queued, Some(1));
    full_and_remembered(&manager, &clock);
    waiting.abort();
    let _ = waiting.await;
    drop(permit);
    a_new_key_is_let_in(&manager);
}

/// A key whose creation panics (here in the tier rule, a user callback)
/// takes no place: its room goes back as the panic unwinds.
#[test]
fn a_key_whose_creation_panics_takes_no_place() {
    let _alone = crate::support::alone();
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(10.0))
        .tier("vip", Tier::new().rate(RateConfig::adaptive(100.0)))
        .tier_of(tier_of)
        .key_space(KeySpaceConfig::new().max_keys(1).keep_idle_keys())
        .build()
        .unwrap();
    let panicked =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| manager.check("broken")));
    assert!(panicked.is_err());
    assert_eq!(manager.keys().len(), 0);
    manager.check("next").expect("the broken key took no place");
}

/// A tier rule with a bug: it panics on one key.
fn tier_of(key: &String) -> Option<&str> {
    assert!(key != "broken", "the rule's own bug");
    None
}

/// A refusal's memory of what it saw starts afresh after an eviction: a
/// key space that once saw every key held until 1 s, then evicted, judges
/// its next refusal by the keys it holds now (free at 2 s), not by the
/// earlier round's 1 s, which would tell the caller to come back at once.
#[test]
fn a_refusal_after_an_eviction_judges_the_keys_held_now() {
    let clock = ManualClock::new();
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_second(1).burst(1))
        .key_space(
            KeySpaceConfig::new()
                .max_keys(2)
                .idle_ttl(Duration::from_secs(60)),
        )
        .clock(clock.clone())
        .build()
        .unwrap();
    // Each key's token is paid for a second after it was taken.
    manager.check("a").unwrap();
    manager.check("b").unwrap();
    let refused = manager.check("c").unwrap_err();
    assert_eq!(refused.reason(), RejectReason::KeySpaceFull);
    assert_eq!(refused.retry_after(), Some(Duration::from_secs(1)));

    clock.advance(Duration::from_secs(1));
    manager
        .check("c")
        .expect("a and b are quiet: one makes room");
    manager.check("d").expect("the other makes room");
    let refused = manager.check("e").unwrap_err();
    assert_eq!(refused.reason(), RejectReason::KeySpaceFull);
    assert_eq!(
        refused.retry_after(),
        Some(Duration::from_secs(1)),
        "c and d are held until 2 s: {refused}"
    );
}
