//! The key space is bounded: idle keys go, the cap holds, and no key that
//! still limits someone is ever forgotten.

use std::time::Duration;

use portcullis::{ManualClock, RateConfig, ThrottleManager};

fn manager(
    clock: &ManualClock,
    max_keys: usize,
    idle_ttl: Option<Duration>,
) -> ThrottleManager<String> {
    let builder = ThrottleManager::<String>::builder()
        .rate(RateConfig::new(10.0).bounds(0.01, 100.0).decrement(1.0))
        .max_keys(max_keys)
        .clock(clock.clone());
    match idle_ttl {
        Some(ttl) => builder.idle_ttl(ttl),
        None => builder.keep_idle_keys(),
    }
    .build()
    .unwrap()
}

#[test]
fn idle_keys_are_swept_when_new_keys_arrive() {
    let clock = ManualClock::new();
    let manager = manager(&clock, 1_000, Some(Duration::from_secs(60)));
    for i in 0..100 {
        manager.check(&format!("old-{i}")).unwrap();
    }
    assert_eq!(manager.len(), 100);
    clock.advance(Duration::from_secs(61));
    manager.check("new").unwrap();
    assert_eq!(manager.len(), 1);
    assert_eq!(manager.rate("old-0"), None);
}

#[test]
fn a_key_that_still_owes_tokens_is_not_idle() {
    let clock = ManualClock::new();
    let manager = manager(&clock, 1_000, Some(Duration::from_secs(60)));
    // Ten calls at 0.1/s leave 100 s of debt.
    manager.decrement("busy"); // 10 -> 9 per second
    for _ in 0..9 {
        manager.decrement("busy");
    }
    assert_eq!(manager.rate("busy"), Some(0.01));
    manager.check("busy").unwrap(); // owes 100 s now
    manager.check("quiet").unwrap();
    clock.advance(Duration::from_secs(90));
    assert_eq!(manager.evict_idle(), 1); // "quiet", not "busy"
    assert_eq!(manager.rate("busy"), Some(0.01));
    assert!(manager.check("busy").is_err());
    clock.advance(Duration::from_secs(60)); // 150 s: the debt was paid at 100 s
    assert_eq!(manager.evict_idle(), 0); // idle from 160 s on
    clock.advance(Duration::from_secs(10));
    assert_eq!(manager.evict_idle(), 1);
}

#[test]
fn at_the_cap_least_recently_used_quiet_keys_make_room() {
    let clock = ManualClock::new();
    let manager = manager(&clock, 32, None);
    for i in 0..32 {
        manager.check(&format!("k{i}")).unwrap();
        clock.advance(Duration::from_millis(1));
    }
    clock.advance(Duration::from_secs(1)); // every bucket full again
    manager.check("k0").unwrap(); // k0 is now the most recently used
    manager.check("newcomer").unwrap();
    assert_eq!(manager.len(), 31); // two went, one came
    // The batch (a sixteenth of the cap, at least one) came from the oldest.
    assert_eq!(manager.rate("k1"), None);
    assert_eq!(manager.rate("k2"), None);
    assert_eq!(manager.rate("k0"), Some(10.0));
    assert_eq!(manager.rate("k3"), Some(10.0));
    assert_eq!(manager.rate("newcomer"), Some(10.0));
}

#[tokio::test(start_paused = true)]
async fn at_the_cap_with_every_key_in_use_a_new_key_waits_for_room() {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::new(10.0).bounds(1.0, 100.0))
        .max_keys(2)
        .keep_idle_keys()
        .build()
        .unwrap();
    manager.check("a").unwrap(); // owes a token until 100 ms
    tokio::time::advance(Duration::from_millis(30)).await;
    manager.check("b").unwrap(); // until 130 ms
    let refused = manager.check("c").unwrap_err();
    assert!(refused.key_space_full());
    assert_eq!(refused.retry_after(), Duration::from_millis(70));
    assert_eq!(manager.len(), 2);

    let start = tokio::time::Instant::now();
    manager.wait("c").await;
    assert_eq!(start.elapsed(), Duration::from_millis(70));
    assert_eq!(manager.rate("a"), None); // "a" made room
    assert_eq!(manager.rate("b"), Some(10.0));
    assert_eq!(manager.rate("c"), Some(10.0));
}

#[test]
fn outcomes_for_a_new_key_at_a_full_cap_report_none() {
    let clock = ManualClock::new();
    let manager = manager(&clock, 1, None);
    manager.check("a").unwrap();
    assert_eq!(manager.increment("b"), None);
    assert_eq!(manager.len(), 1);
}
