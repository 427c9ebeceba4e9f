//! A rate changed on a live key keeps its bucket: no fresh burst, its debt
//! kept (rescaled to the new rate), and a quota's bound `rate × T + burst`
//! holds on each side of the change.

use std::time::Duration;

use portcullis::clock::ManualClock;
use portcullis::{Priority, RateConfig, ThrottleManager};
use proptest::prelude::*;

fn quota(per_second: u32, burst: u32, clock: &ManualClock) -> ThrottleManager<String> {
    ThrottleManager::<String>::builder()
        .rate(RateConfig::per_second(per_second).burst(burst))
        .clock(clock.clone())
        .build()
        .unwrap()
}

/// Every call `key` admits at once now, as a caller in steady overload
/// makes them.
fn drain(manager: &ThrottleManager<String>, key: &str) -> u32 {
    let mut admitted = 0;
    while manager.try_acquire(key, Priority::HIGH).is_ok() {
        admitted += 1;
    }
    admitted
}

#[test]
fn a_rate_raised_under_overload_gives_no_fresh_burst_and_keeps_both_bounds() {
    let clock = ManualClock::new();
    let manager = quota(10, 5, &clock);
    let step = Duration::from_millis(1);
    let mut admitted = drain(&manager, "acme");
    for _ in 0..2_000 {
        clock.advance(step);
        admitted += drain(&manager, "acme");
    }
    // [0, t1 = 2 s]: 10/s and a burst of 5.
    assert!((24..=25).contains(&admitted), "{admitted} by t1");

    manager
        .key("acme")
        .set_rate(RateConfig::per_second(50).burst(5))
        .unwrap();
    assert_eq!(manager.key("acme").rate(), Some(50.0));
    assert_eq!(drain(&manager, "acme"), 0, "no fresh burst at the change");

    for _ in 0..2_000 {
        clock.advance(step);
        admitted += drain(&manager, "acme");
    }
    // [0, t2 = 4 s]: at most 10 · 2 + 50 · 2 + 5, and the new rate used.
    assert!(admitted <= 10 * 2 + 50 * 2 + 5, "{admitted} by t2");
    assert!(admitted >= 10 * 2 + 50 * 2 - 1, "{admitted} by t2");
}

#[test]
fn a_rate_lowered_keeps_the_debt_it_owes_rescaled() {
    let clock = ManualClock::new();
    let manager = quota(50, 10, &clock);
    assert_eq!(drain(&manager, "acme"), 10, "the burst");
    // Ten calls owed at 50/s (200 ms) are owed at 10/s (a second): the
    // bucket refills a call every 100 ms from the change on.
    manager
        .key("acme")
        .set_rate(RateConfig::per_second(10).burst(10))
        .unwrap();
    assert_eq!(drain(&manager, "acme"), 0, "no fresh burst");
    for _ in 0..5 {
        clock.advance(Duration::from_millis(100));
        assert_eq!(drain(&manager, "acme"), 1, "one a tenth of a second");
    }
}

#[test]
fn an_adaptive_rate_keeps_what_it_learned_unless_the_new_bounds_exclude_it() {
    let manager = ThrottleManager::<String>::builder()
        .rate(
            RateConfig::adaptive(10.0)
                .bounds(1.0, 100.0)
                .increase_by(1.0),
        )
        .clock(ManualClock::new())
        .build()
        .unwrap();
    for _ in 0..3 {
        manager.increment("acme");
    }
    assert_eq!(manager.key("acme").rate(), Some(13.0));
    // A live key's rate is what it learned: the new starting rate is for
    // keys made from now on.
    let adaptive = |lower: f64, upper| RateConfig::adaptive(lower).bounds(lower, upper);
    manager.key("acme").set_rate(adaptive(1.0, 50.0)).unwrap();
    assert_eq!(manager.key("acme").rate(), Some(13.0), "kept");
    manager.key("acme").set_rate(adaptive(20.0, 50.0)).unwrap();
    assert_eq!(manager.key("acme").rate(), Some(20.0), "clamped up");
    manager.key("acme").set_rate(adaptive(1.0, 5.0)).unwrap();
    assert_eq!(manager.key("acme").rate(), Some(5.0), "clamped down");
    manager.key("acme").remove_overrides();
    assert_eq!(
        manager.key("acme").rate(),
        Some(5.0),
        "inside the default bounds again: kept"
    );
}

#[test]
fn an_override_set_before_the_key_is_made_applies_when_it_is() {
    let clock = ManualClock::new();
    let manager = quota(10, 1, &clock);
    manager
        .key("acme")
        .set_rate(RateConfig::per_second(50).burst(3))
        .unwrap();
    assert_eq!(manager.key("acme").rate(), None, "not live yet");
    assert_eq!(drain(&manager, "acme"), 3, "its own burst");
    assert_eq!(drain(&manager, "other"), 1);
}

#[test]
fn an_override_names_its_key_as_the_manager_names_keys() {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_second(10))
        .key_names(|key: &String| key.clone())
        .build()
        .unwrap();
    let error = manager
        .key("acme")
        .set_rate(RateConfig::per_second(10).burst(0))
        .unwrap_err();
    assert_eq!(
        error.problems()[0].field(),
        r#"rate_override["acme"].burst"#
    );
}

#[test]
fn a_bad_override_or_a_control_the_manager_lacks_is_refused_by_name() {
    let manager = quota(10, 1, &ManualClock::new());
    let error = manager
        .key("acme")
        .set_rate(RateConfig::per_second(10).burst(0))
        .unwrap_err();
    assert_eq!(error.problems()[0].field(), "rate_override.burst");
    let error = manager
        .key("acme")
        .set_bulkhead(portcullis::BulkheadConfig::new(2))
        .unwrap_err();
    assert_eq!(error.problems()[0].field(), "bulkhead_override");
    assert!(
        error.problems()[0].message().contains("without a bulkhead"),
        "{error}"
    );
    assert!(manager.try_acquire("acme", Priority::HIGH).is_ok());
    assert!(
        manager.try_acquire("acme", Priority::HIGH).is_err(),
        "still the default's burst of 1"
    );
}

/// One change of a quota, `at` milliseconds after the one before.
#[derive(Debug, Clone)]
struct Change {
    at: u64,
    per_second: u32,
    burst: u32,
}

fn changes() -> impl Strategy<Value = Vec<Change>> {
    let change = (1u64..1_500, 1u32..200, 1u32..20).prop_map(|(at, per_second, burst)| Change {
        at,
        per_second,
        burst,
    });
    prop::collection::vec(change, 1..6)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// From each change on, until the next, the calls admitted over any
    /// interval starting at the change stay within the new quota's
    /// `rate × T + burst`, whatever the old quota, the demand (calls at
    /// random, idle spells included) or the times of the changes.
    #[test]
    fn a_quota_changed_at_random_times_keeps_the_new_bound_from_each_change_on(
        changes in changes(),
        demand in prop::collection::vec(0u32..4, 64),
    ) {
        let clock = ManualClock::new();
        let manager = quota(20, 5, &clock);
        let step = Duration::from_millis(1);
        let mut now = 0u64;
        for (index, change) in changes.iter().enumerate() {
            let before = if index == 0 { change.at } else { 0 };
            for _ in 0..before {
                clock.advance(step);
                now += 1;
                for _ in 0..demand[(now as usize) % demand.len()] {
                    let _ = manager.try_acquire("acme", Priority::HIGH);
                }
            }
            let config = RateConfig::per_second(change.per_second).burst(change.burst);
            manager.key("acme").set_rate(config).unwrap();
            let next = changes.get(index + 1).map_or(1_000, |next| next.at);
            let mut admitted = 0u64;
            for elapsed in 0..=next {
                if elapsed > 0 {
                    clock.advance(step);
                    now += 1;
                }
                for _ in 0..demand[(now as usize) % demand.len()] {
                    if manager.try_acquire("acme", Priority::HIGH).is_ok() {
                        admitted += 1;
                    }
                }
                let bound = u64::from(change.per_second) * elapsed / 1_000 + u64::from(change.burst);
                prop_assert!(
                    admitted <= bound,
                    "{} admitted {} ms after change {}: bound {}", admitted, elapsed, index, bound
                );
            }
        }
    }
}

/// `callers` calls of `key` waiting for their tokens; each answers how long
/// after the start it was admitted.
fn waiting_callers(
    manager: &std::sync::Arc<ThrottleManager<String>>,
    callers: usize,
) -> Vec<tokio::task::JoinHandle<Duration>> {
    let start = tokio::time::Instant::now();
    (0..callers)
        .map(|_| {
            let manager = std::sync::Arc::clone(manager);
            tokio::spawn(async move {
                let permit = manager.acquire("api", Priority::HIGH).await.unwrap();
                permit.success();
                start.elapsed()
            })
        })
        .collect()
}

/// Issue 80: a dip in the rate strands no waiter. Twenty callers wait at
/// 1000/s (burst 1); the rate is set to 10/s and back within the same
/// instant: they are admitted as 1000/s would admit them, the last within
/// about 20 ms (a fall moved the booked ones later; the rise moves them
/// back). Before, the last waited 466 ms.
#[tokio::test(start_paused = true)]
async fn a_dip_in_the_rate_strands_no_waiter() {
    let manager = std::sync::Arc::new(
        ThrottleManager::<String>::builder()
            .rate(RateConfig::per_second(1000).burst(1))
            .build()
            .unwrap(),
    );
    let callers = waiting_callers(&manager, 20);
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
    manager
        .key("api")
        .set_rate(RateConfig::per_second(10).burst(1))
        .unwrap();
    manager
        .key("api")
        .set_rate(RateConfig::per_second(1000).burst(1))
        .unwrap();
    let mut last = Duration::ZERO;
    for caller in callers {
        let admitted = crate::support::bounded("a waiter", caller).await.unwrap();
        last = last.max(admitted);
    }
    assert!(last <= Duration::from_millis(21), "the last at {last:?}");
}
