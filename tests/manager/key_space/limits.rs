//! The key space is bounded: idle keys go, the cap holds, and no key that
//! still limits someone is ever forgotten.

use std::time::Duration;

use portcullis::builder::KeySpaceConfig;
use portcullis::builder::ThrottleManagerBuilder;
use portcullis::clock::ManualClock;
use portcullis::deadline::TimeLimits;
use portcullis::error::RejectReason;
use portcullis::{BulkheadConfig, Priority, RateConfig, ThrottleConfig, ThrottleManager};

fn manager(
    clock: &ManualClock,
    max_keys: usize,
    idle_ttl: Option<Duration>,
) -> ThrottleManager<String> {
    let builder = builder(clock, max_keys);
    match idle_ttl {
        Some(ttl) => builder.key_space(KeySpaceConfig::new().idle_ttl(ttl)),
        None => builder.key_space(KeySpaceConfig::new().keep_idle_keys()),
    }
    .build()
    .unwrap()
}

/// The key space's tests' manager, before its key-space settings.
fn builder(clock: &ManualClock, max_keys: usize) -> ThrottleManagerBuilder<String> {
    ThrottleManager::<String>::builder()
        .rate(
            RateConfig::adaptive(10.0)
                .bounds(0.01, 100.0)
                .decrease_by(1.0),
        )
        .key_space(KeySpaceConfig::new().max_keys(max_keys))
        .clock(clock.clone())
}

/// Each new key evicts, in passing, up to 64 keys idle for the TTL: a
/// manager that sees new keys does not grow with idle ones, and no new key
/// pays for more than that.
#[test]
fn idle_keys_are_swept_when_new_keys_arrive() {
    let clock = ManualClock::new();
    let manager = manager(&clock, 1_000, Some(Duration::from_secs(60)));
    for i in 0..100 {
        manager.check(&format!("old-{i}")).unwrap();
    }
    assert_eq!(manager.keys().len(), 100);
    clock.advance(Duration::from_secs(61));
    manager.check("new").unwrap();
    assert_eq!(manager.keys().len(), 100 - 64 + 1, "the oldest 64 went");
    assert_eq!(manager.key("old-0").rate(), None);
    assert_eq!(manager.key("old-63").rate(), None);
    assert_eq!(manager.key("old-64").rate(), Some(10.0));
    manager.check("newer").unwrap();
    assert_eq!(manager.keys().len(), 2, "the other 36 went");
}

/// The sweep moves on past keys that are not idle, so a key in constant
/// use at the front of the queue does not keep the idle ones behind it.
#[test]
fn the_idle_sweep_moves_past_keys_in_use() {
    let clock = ManualClock::new();
    let manager = manager(&clock, 1_000, Some(Duration::from_secs(60)));
    manager.check("busy").unwrap();
    for i in 0..10 {
        manager.check(&format!("old-{i}")).unwrap();
    }
    clock.advance(Duration::from_secs(61));
    manager.check("busy").unwrap(); // used again: not idle
    for i in 0..2 {
        manager.check(&format!("new-{i}")).unwrap();
    }
    assert_eq!(manager.key("busy").rate(), Some(10.0));
    assert_eq!(
        manager.keys().len(),
        3,
        "every idle key went, the busy one stayed"
    );
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
    assert_eq!(manager.key("busy").rate(), Some(0.01));
    manager.check("busy").unwrap(); // owes 100 s now
    manager.check("quiet").unwrap();
    clock.advance(Duration::from_secs(90));
    assert_eq!(manager.keys().evict_idle(), 1); // "quiet", not "busy"
    assert_eq!(manager.key("busy").rate(), Some(0.01));
    assert!(manager.check("busy").is_err());
    clock.advance(Duration::from_secs(60)); // 150 s: the debt was paid at 100 s
    assert_eq!(manager.keys().evict_idle(), 0); // idle from 160 s on
    clock.advance(Duration::from_secs(10));
    assert_eq!(manager.keys().evict_idle(), 1);
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
    assert_eq!(manager.keys().len(), 32); // one went, one came
    // The least recently quiet of the oldest keys went, not k0.
    assert_eq!(manager.key("k1").rate(), None);
    assert_eq!(manager.key("k0").rate(), Some(10.0));
    assert_eq!(manager.key("k2").rate(), Some(10.0));
    assert_eq!(manager.key("newcomer").rate(), Some(10.0));
    manager.check("second").unwrap();
    assert_eq!(manager.key("k2").rate(), None, "the next oldest went next");
    assert_eq!(manager.key("k0").rate(), Some(10.0));
}

#[tokio::test(start_paused = true)]
async fn at_the_cap_with_every_key_in_use_a_new_key_waits_for_room() {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(10.0).bounds(1.0, 100.0))
        .key_space(KeySpaceConfig::new().max_keys(2).keep_idle_keys())
        .build()
        .unwrap();
    manager.check("a").unwrap(); // owes a token until 100 ms
    tokio::time::advance(Duration::from_millis(30)).await;
    manager.check("b").unwrap(); // until 130 ms
    let refused = manager.check("c").unwrap_err();
    assert_eq!(
        refused.reason(),
        portcullis::error::RejectReason::KeySpaceFull
    );
    assert_eq!(refused.retry_after(), Some(Duration::from_millis(70)));
    assert_eq!(manager.keys().len(), 2);

    let start = tokio::time::Instant::now();
    manager.wait("c").await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_millis(70));
    assert_eq!(manager.key("a").rate(), None); // "a" made room
    assert_eq!(manager.key("b").rate(), Some(10.0));
    assert_eq!(manager.key("c").rate(), Some(10.0));
}

#[test]
fn outcomes_for_a_new_key_at_a_full_cap_report_none() {
    let clock = ManualClock::new();
    let manager = manager(&clock, 1, None);
    manager.check("a").unwrap();
    assert_eq!(manager.increment("b"), None);
    assert_eq!(manager.keys().len(), 1);
}

#[test]
fn the_least_recently_used_key_is_not_evicted_while_it_owes_tokens() {
    // The LRU choice must not override the debt: "victim" is the key whose
    // debt ends first (so an LRU that ignored debt would take it), yet while
    // it owes, a new key is refused, not given its room.
    let clock = ManualClock::new();
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(1.0).bounds(0.1, 1.0).decrease_by(0.9))
        .key_space(KeySpaceConfig::new().max_keys(3).keep_idle_keys())
        .clock(clock.clone())
        .build()
        .unwrap();
    manager.check("victim").unwrap(); // owes 1 s
    for other in ["b", "c"] {
        manager.decrement(other); // 0.1/s
        manager.check(other).unwrap(); // owes 10 s
    }
    clock.advance(Duration::from_millis(500));
    let refused = manager.check("newcomer").unwrap_err();
    assert_eq!(
        refused.reason(),
        portcullis::error::RejectReason::KeySpaceFull
    );
    assert_eq!(refused.retry_after(), Some(Duration::from_millis(500)));
    assert_eq!(manager.key("newcomer").rate(), None);
    let still_limited = manager.check("victim").unwrap_err();
    assert_ne!(
        still_limited.reason(),
        portcullis::error::RejectReason::KeySpaceFull
    );
    assert_eq!(
        still_limited.retry_after(),
        Some(Duration::from_millis(500))
    );
    // Once its debt is paid, it is the one that makes room.
    clock.advance(Duration::from_millis(500));
    manager.check("newcomer").unwrap();
    assert_eq!(manager.key("victim").rate(), None);
    assert_eq!(manager.key("b").rate(), Some(0.1));
}

#[test]
fn a_key_with_a_call_in_flight_is_never_evicted() {
    let manager = ThrottleManager::<String>::builder()
        .bulkhead(BulkheadConfig::new(1))
        .key_space(KeySpaceConfig::new().max_keys(1))
        .clock(ManualClock::new())
        .build()
        .unwrap();
    let in_flight = manager.try_acquire("a", Priority::HIGH).unwrap();
    let refused = manager.try_acquire("b", Priority::HIGH).unwrap_err();
    assert_eq!(refused.reason(), RejectReason::KeySpaceFull);
    // "a" kept its state: its one slot is still taken.
    let busy = manager.try_acquire("a", Priority::HIGH).unwrap_err();
    assert_eq!(busy.reason(), RejectReason::Full);
    assert_eq!(manager.key("a").snapshot().unwrap().active, Some(1));
    // Once the call ends, "a" can make room.
    drop(in_flight);
    assert!(manager.try_acquire("b", Priority::HIGH).is_ok());
    assert!(manager.key("a").snapshot().is_none());
}

/// A key space of one key, whose throttle sheds at any probability above
/// 0, and which keeps idle keys: only shedding can keep a key.
fn one_key_that_sheds_at_any_probability(clock: &ManualClock) -> ThrottleManager<String> {
    ThrottleManager::<String>::builder()
        .throttle(ThrottleConfig::new())
        .random_source(|| 0.0)
        .key_space(KeySpaceConfig::new().max_keys(1).keep_idle_keys())
        .clock(clock.clone())
        .build()
        .unwrap()
}

#[test]
fn a_key_that_is_shedding_is_never_evicted() {
    let clock = ManualClock::new();
    let manager = one_key_that_sheds_at_any_probability(&clock);
    for _ in 0..100 {
        manager.decrement("a"); // the backend keeps failing
    }
    let shed = manager.try_acquire("a", Priority::LOW).unwrap_err();
    assert_eq!(shed.reason(), RejectReason::Throttled);
    clock.advance(Duration::from_secs(30)); // well inside the 60 s window
    let refused = manager.try_acquire("b", Priority::LOW).unwrap_err();
    assert_eq!(refused.reason(), RejectReason::KeySpaceFull);
    // "a" kept its window: it still sheds.
    let shed = manager.try_acquire("a", Priority::LOW).unwrap_err();
    assert_eq!(shed.reason(), RejectReason::Throttled);
    assert!(
        manager
            .key("a")
            .rejection_probability(Priority::LOW)
            .unwrap()
            > 0.5
    );
}

/// Shedding at any priority keeps the key: a healthy highest priority
/// (its demand fits in what the backend accepts) does not make a key
/// whose least important calls are being shed forgettable.
#[test]
fn a_key_shedding_only_its_least_important_calls_is_never_evicted() {
    let clock = ManualClock::new();
    let manager = one_key_that_sheds_at_any_probability(&clock);
    for _ in 0..20 {
        manager.try_acquire("a", Priority::HIGH).unwrap().success();
    }
    for _ in 0..100 {
        // Failures, then calls shed: LOW asks far more than the budget
        // HIGH's accepts leave it.
        if let Ok(permit) = manager.try_acquire("a", Priority::LOW) {
            permit.overloaded();
        }
    }
    assert_eq!(
        manager.key("a").rejection_probability(Priority::HIGH),
        Some(0.0)
    );
    let shed = manager.try_acquire("a", Priority::LOW).unwrap_err();
    assert_eq!(shed.reason(), RejectReason::Throttled);
    clock.advance(Duration::from_secs(30)); // well inside the 60 s window
    let refused = manager.try_acquire("b", Priority::LOW).unwrap_err();
    assert_eq!(refused.reason(), RejectReason::KeySpaceFull);
    let shed = manager.try_acquire("a", Priority::LOW).unwrap_err();
    assert_eq!(shed.reason(), RejectReason::Throttled);
}

/// `idle_ttl(0)` once swept the whole key space on every new key (20,000
/// new keys took 1.2 s instead of 5 ms); a too-short TTL is now refused,
/// naming the field.
#[test]
fn an_idle_ttl_below_a_second_is_refused() {
    for ttl in [Duration::ZERO, Duration::from_millis(999)] {
        let error = ThrottleManager::<String>::builder()
            .rate(RateConfig::adaptive(10.0))
            .key_space(KeySpaceConfig::new().idle_ttl(ttl))
            .build()
            .unwrap_err();
        assert_eq!(error.problems()[0].field(), "idle_ttl", "{error}");
    }
    assert!(
        ThrottleManager::<String>::builder()
            .rate(RateConfig::adaptive(10.0))
            .key_space(KeySpaceConfig::new().idle_ttl(Duration::from_secs(1)))
            .build()
            .is_ok()
    );
}

/// Hosts that answer every request with `Retry-After: 300` once held a full
/// key space for five minutes. A pause longer than `max_hold` (60 s by
/// default) no longer holds a place under pressure; one within it does,
/// and a new key then waits at most that long.
#[test]
fn a_pause_longer_than_max_hold_does_not_hold_a_full_key_space() {
    let clock = ManualClock::new();
    let manager = manager(&clock, 2, None);
    manager.key("a").defer(Duration::from_secs(300));
    manager.key("b").defer(Duration::from_secs(300));
    manager.check("c").unwrap();
    assert_eq!(manager.keys().len(), 2);
    assert_eq!(
        [manager.key("a").rate(), manager.key("b").rate()]
            .iter()
            .flatten()
            .count(),
        1,
        "one of the paused keys made room"
    );

    // Within the bound, a pause holds its place until it ends.
    let manager = manager_with_hold(&clock, 1, Duration::from_secs(60));
    manager.key("a").defer(Duration::from_secs(45));
    let refused = manager.check("b").unwrap_err();
    assert_eq!(
        refused.reason(),
        portcullis::error::RejectReason::KeySpaceFull
    );
    assert!(refused.retry_after().unwrap() <= Duration::from_secs(45));
    assert_eq!(manager.key("a").rate(), Some(10.0));

    // "Longer than `max_hold`": a pause of exactly `max_hold` still holds.
    let manager = manager_with_hold(&clock, 1, Duration::from_secs(60));
    manager.key("a").defer(Duration::from_secs(60));
    let refused = manager.check("b").unwrap_err();
    assert_eq!(
        refused.reason(),
        portcullis::error::RejectReason::KeySpaceFull
    );
    assert_eq!(manager.key("a").rate(), Some(10.0));

    // Never forgiving is a choice: then the pause holds for all its 300 s.
    let manager = manager_with_hold(&clock, 1, Duration::MAX);
    manager.key("a").defer(Duration::from_secs(300));
    let refused = manager.check("b").unwrap_err();
    assert_eq!(
        refused.reason(),
        portcullis::error::RejectReason::KeySpaceFull
    );
    assert!(refused.retry_after().unwrap() > Duration::from_secs(290));
}

fn manager_with_hold(
    clock: &ManualClock,
    max_keys: usize,
    hold: Duration,
) -> ThrottleManager<String> {
    builder(clock, max_keys)
        .key_space(KeySpaceConfig::new().keep_idle_keys().max_hold(hold))
        .build()
        .unwrap()
}

/// At the cap, keys that carry nothing a fresh key would not (their rate
/// never moved) make room before keys that learned a rate, even when the
/// learned ones have been quiet longer.
#[test]
fn keys_that_learned_a_rate_are_evicted_last() {
    let clock = ManualClock::new();
    let manager = manager(&clock, 32, None);
    for i in 0..32 {
        let key = format!("k{i}");
        manager.check(&key).unwrap();
        if i < 4 {
            manager.increment(&key); // the four oldest learned something
        }
        clock.advance(Duration::from_millis(1));
    }
    clock.advance(Duration::from_secs(1)); // every bucket full again
    manager.check("newcomer").unwrap();
    // One went: the oldest of those that learned nothing.
    assert_eq!(manager.keys().len(), 32);
    for learned in ["k0", "k1", "k2", "k3"] {
        assert!(
            manager.key(learned).rate().unwrap() > 10.0,
            "{learned} was evicted"
        );
    }
    assert_eq!(manager.key("k4").rate(), None);
    assert_eq!(manager.key("k5").rate(), Some(10.0));
}

/// Shedding holds a key's place as a pause does: within `max_hold`, until
/// the window forgets the failures; beyond it, not under pressure.
#[test]
fn shedding_longer_than_max_hold_does_not_hold_a_full_key_space() {
    let clock = ManualClock::new();
    let manager = ThrottleManager::<String>::builder()
        .throttle(ThrottleConfig::new().window(Duration::from_secs(600)))
        .random_source(|| 0.0)
        .key_space(KeySpaceConfig::new().max_keys(1).keep_idle_keys())
        .clock(clock.clone())
        .build()
        .unwrap();
    for _ in 0..100 {
        manager.decrement("failing");
    }
    assert_eq!(
        manager
            .try_acquire("failing", Priority::LOW)
            .unwrap_err()
            .reason(),
        RejectReason::Throttled
    );
    // A ten-minute window of failures: far beyond the 60 s bound.
    assert!(manager.try_acquire("other", Priority::LOW).is_ok());
    assert!(manager.key("failing").snapshot().is_none());
}

/// A new key waiting for room wakes when the call that held the only
/// other key ends, not at its next retry: room appears then.
#[tokio::test(start_paused = true)]
async fn a_waiter_for_room_wakes_when_the_last_call_of_a_key_ends() {
    let manager = ThrottleManager::<String>::builder()
        .bulkhead(BulkheadConfig::new(1))
        .key_space(KeySpaceConfig::new().max_keys(1).keep_idle_keys())
        .build()
        .unwrap();
    let in_flight = manager.try_acquire("a", Priority::HIGH).unwrap();
    let start = tokio::time::Instant::now();
    let (admitted, ()) = tokio::join!(manager.acquire("b", Priority::HIGH), async {
        tokio::time::sleep(Duration::from_millis(3)).await;
        drop(in_flight);
    });
    assert!(admitted.is_ok());
    // Without the wake-up it waited for its retry (10 ms when no key's end
    // is known).
    assert_eq!(start.elapsed(), Duration::from_millis(3));
    assert!(manager.key("a").snapshot().is_none());
}

/// `max_wait` bounds the wait for room in a full key space, as it bounds
/// the wait for a token: ten hosts paused for 3 s hold the key space, and
/// a new host is refused as the key space's after 100 ms, with the time
/// until room, instead of waiting the 3 s out.
#[tokio::test(start_paused = true)]
async fn max_wait_bounds_the_wait_for_room_in_a_full_key_space() {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(10.0))
        .key_space(KeySpaceConfig::new().max_keys(10))
        .time_limits(TimeLimits::new().max_wait(Duration::from_millis(100)))
        .build()
        .unwrap();
    for host in 0..10 {
        manager
            .key(&format!("host-{host}"))
            .defer(Duration::from_secs(3));
    }
    let start = tokio::time::Instant::now();
    let refused = manager
        .acquire("new-host", portcullis::Priority::HIGH)
        .await
        .unwrap_err();
    assert!(
        start.elapsed() <= Duration::from_millis(100),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(refused.reason(), RejectReason::KeySpaceFull);
    let retry_after = refused.retry_after().unwrap();
    assert!(
        retry_after > Duration::from_millis(2_800),
        "{retry_after:?}"
    );
    // `wait` cannot refuse: it waits the pauses out.
    manager.wait("new-host").await.unwrap();
    assert!(start.elapsed() >= Duration::from_secs(3));
}

/// At the cap, a new key makes room from keys idle for the TTL as it meets
/// them, not only from keys that may go under pressure.
#[test]
fn at_the_cap_idle_keys_make_room() {
    let clock = ManualClock::new();
    let manager = manager(&clock, 2, Some(Duration::from_secs(60)));
    manager.check("a").unwrap();
    manager.check("b").unwrap();
    clock.advance(Duration::from_secs(61));
    manager.check("c").unwrap();
    manager.check("d").unwrap();
    assert_eq!(manager.keys().len(), 2);
    assert_eq!(
        (manager.key("a").rate(), manager.key("b").rate()),
        (None, None)
    );
}

/// A refused new key has seen only the front of a large key space (at
/// most 256 keys): while some keys are unseen it retries within a
/// millisecond, since one of them may go sooner. Once refusals have seen
/// every key, they say when the first can go, and it then makes room.
#[test]
fn a_refusal_that_saw_only_part_of_the_key_space_retries_soon() {
    let clock = ManualClock::new();
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(1.0).bounds(0.1, 1.0).decrease_by(0.9))
        .key_space(KeySpaceConfig::new().max_keys(600).keep_idle_keys())
        .clock(clock.clone())
        .build()
        .unwrap();
    for i in 0..300 {
        let key = format!("slow-{i}");
        manager.decrement(&key); // 0.1/s
        manager.check(&key).unwrap(); // owes 10 s, at the front
    }
    for i in 0..300 {
        manager.check(&format!("fast-{i}")).unwrap(); // owes 1 s
    }
    let first = manager.check("new-0").unwrap_err();
    assert_eq!(first.reason(), RejectReason::KeySpaceFull);
    assert!(
        first.retry_after().unwrap() <= Duration::from_millis(1),
        "retry after {:?} with most keys unseen",
        first.retry_after()
    );
    // Three refusals of 256 have seen all 600: the first can go in 1 s.
    let _ = manager.check("new-1");
    let third = manager.check("new-2").unwrap_err();
    assert_eq!(third.retry_after(), Some(Duration::from_secs(1)));
    clock.advance(Duration::from_secs(1));
    manager.check("new-3").unwrap();
    assert_eq!(
        manager.key("slow-0").rate(),
        Some(0.1),
        "a key in debt stayed"
    );
}
