//! The adaptive throttle through the public API, on virtual time with an
//! injected random source; what it promises against a simulated backend
//! (`promises`) and a real one on loopback (`http`).

// A test that measures real time holds `alone()` across its awaits;
// each test's future is driven on its own thread, so the lock blocks no
// other task.
#![allow(clippy::await_holding_lock)]

mod http;
mod promises;

/// Held by a test that measures real time, so that no other such test of
/// this binary runs at once.
pub(crate) fn alone() -> std::sync::MutexGuard<'static, ()> {
    static ALONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ALONE.lock().unwrap_or_else(|e| e.into_inner())
}

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use portcullis::builder::Tier;
use portcullis::clock::ManualClock;
use portcullis::deadline::TimeLimits;
use portcullis::error::RejectReason;
use portcullis::outcome::Outcome;
use portcullis::priority::OutOfRange;
use portcullis::priority::with_priority;
use portcullis::{Priority, RateConfig, ThrottleConfig, ThrottleManager};

/// A deterministic uniform source in `[0, 1)` (xorshift64*).
pub(crate) fn seeded_random(seed: u64) -> impl Fn() -> f64 + Send + Sync + 'static {
    let state = AtomicU64::new(seed.max(1));
    move || {
        let mut x = state.load(Ordering::Relaxed);
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        state.store(x, Ordering::Relaxed);
        (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A rate pinned at 1/s and a throttle that sheds at any probability above 0.
fn one_call_per_second_shedding_eagerly() -> ThrottleManager<String> {
    ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(1.0).bounds(1.0, 1.0))
        .throttle(ThrottleConfig::new())
        .random_source(|| 0.0)
        .build()
        .unwrap()
}

/// A throttle that sheds exactly when the probability is above `draw`.
fn manager_with_draw(draw: f64) -> ThrottleManager<String> {
    ThrottleManager::<String>::builder()
        .throttle(ThrottleConfig::new())
        .random_source(move || draw)
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn the_public_contract_compiles_and_works() -> Result<(), Box<dyn std::error::Error>> {
    let manager = ThrottleManager::<String>::builder()
        .throttle(
            ThrottleConfig::new()
                .ratio(2.0)
                .min_rate(1.0)
                .window(Duration::from_secs(60)),
        )
        .build()?;
    match manager.acquire("db-7", Priority::LOW).await {
        Ok(permit) => {
            // make the call, then report what happened:
            permit.success(); // or permit.overloaded() for a capacity failure (429, 503, timeout);
            // dropping the permit without a report counts as Outcome::Neutral
        }
        Err(rejected) => {
            let _why = rejected.reason();
            let _hint = rejected.retry_after();
            panic!("a healthy key sheds nothing");
        }
    }
    let low = &manager.key("db-7").snapshot().unwrap().priorities[3];
    assert_eq!(
        (low.requests, low.accepts),
        (1, 1),
        "the success was counted at LOW"
    );
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_hundred_failures_give_the_formulas_probability_and_lower_priorities_inherit_them() {
    let manager = manager_with_draw(0.99); // nothing is shed: every call is counted
    for _ in 0..100 {
        manager
            .acquire("db", Priority::HIGH)
            .await
            .unwrap()
            .overloaded();
    }
    // K = 2, window 60 s, min_rate 1/s: 100 / (100 + 60).
    for priority in [Priority::HIGH, Priority::MEDIUM_HIGH, Priority::LOW] {
        assert_eq!(
            manager.key("db").rejection_probability(priority),
            Some(0.625)
        );
    }
    // 10 LOW successes: the backend accepts calls whatever their priority,
    // so they are the budget of every level, K × 10 = 20. HIGH asks 100 of
    // it, (100 - 20) / (100 + 60); LOW is allowed nothing and sees the 80
    // HIGH could not be, (10 + 80) / (10 + 80 + 60): still shed more.
    for _ in 0..10 {
        manager
            .acquire("db", Priority::LOW)
            .await
            .unwrap()
            .success();
    }
    assert_eq!(
        manager.key("db").rejection_probability(Priority::HIGH),
        Some(0.5)
    );
    assert_eq!(
        manager.key("db").rejection_probability(Priority::LOW),
        Some(0.6)
    );
}

#[tokio::test(start_paused = true)]
async fn shedding_follows_the_injected_draw() {
    let shedding = manager_with_draw(0.6);
    let passing = manager_with_draw(0.7);
    for manager in [&shedding, &passing] {
        for _ in 0..100 {
            manager.decrement("db");
        }
    }
    let rejected = shedding.try_acquire("db", Priority::HIGH).unwrap_err();
    assert_eq!(rejected.reason(), RejectReason::Throttled);
    assert_eq!(rejected.retry_after(), None);
    assert!(passing.try_acquire("db", Priority::HIGH).is_ok());
}

/// What `window` means: an outcome counts for at least nine tenths of a
/// window, and no longer than one.
#[tokio::test(start_paused = true)]
async fn an_outcome_counts_for_nine_tenths_of_a_window_at_least_and_never_past_one() {
    let manager = manager_with_draw(0.99);
    // Buckets a tenth of the window (6 s) from the manager's start:
    // failures at 30 s, the start of one, count until 90 s.
    tokio::time::advance(Duration::from_secs(30)).await;
    for _ in 0..100 {
        manager.decrement("db");
    }
    let p = Some(100.0 / 160.0);
    tokio::time::advance(Duration::from_secs(54)).await; // 84 s
    assert_eq!(manager.key("db").rejection_probability(Priority::HIGH), p);
    tokio::time::advance(Duration::from_millis(5_999)).await;
    assert_eq!(manager.key("db").rejection_probability(Priority::HIGH), p);
    tokio::time::advance(Duration::from_millis(1)).await; // 90 s
    for priority in [Priority::HIGH, Priority::LOW] {
        assert_eq!(manager.key("db").rejection_probability(priority), Some(0.0));
    }
}

#[tokio::test(start_paused = true)]
async fn a_recovered_backend_gets_its_traffic_back_at_every_priority() {
    let manager = ThrottleManager::<String>::builder()
        .throttle(ThrottleConfig::new().window(Duration::from_secs(10)))
        .random_source(seeded_random(7))
        .build()
        .unwrap();
    let priorities = [
        Priority::HIGH,
        Priority::MEDIUM_HIGH,
        Priority::MEDIUM,
        Priority::LOW,
    ];
    // 10 s of outage: every call that gets through fails.
    for _ in 0..1_000 {
        for priority in priorities {
            if let Ok(permit) = manager.try_acquire("db", priority) {
                permit.overloaded();
            }
        }
        tokio::time::advance(Duration::from_millis(10)).await;
    }
    assert!(
        manager
            .key("db")
            .rejection_probability(Priority::LOW)
            .unwrap()
            > 0.9
    );
    // Recovery: every call that gets through succeeds. With K = 2 the share
    // let through about doubles per window, and each priority inherits the
    // unanswered calls (shed ones included) of those above it, so priorities
    // recover in order, about two windows apart.
    let mut recovered_at = [None; 4];
    let mut admitted_late = [0u32; 4];
    for step in 0..15_000 {
        for (i, priority) in priorities.into_iter().enumerate() {
            if let Ok(permit) = manager.try_acquire("db", priority) {
                permit.success();
                if step >= 14_000 {
                    admitted_late[i] += 1;
                }
            }
            if recovered_at[i].is_none()
                && manager.key("db").rejection_probability(priority) == Some(0.0)
            {
                recovered_at[i] = Some(step / 100); // seconds since recovery
            }
        }
        tokio::time::advance(Duration::from_millis(10)).await;
    }
    let recovered_at = recovered_at.map(|at| at.expect("every priority recovers"));
    assert!(
        recovered_at.is_sorted(),
        "HIGH first, LOW last: {recovered_at:?}"
    );
    assert!(
        recovered_at[0] <= 30,
        "HIGH back within 3 windows: {recovered_at:?}"
    );
    assert!(
        recovered_at[3] <= 120,
        "LOW back within 12 windows: {recovered_at:?}"
    );
    assert_eq!(
        admitted_late, [1_000; 4],
        "every priority has all its traffic back"
    );
}

#[tokio::test(start_paused = true)]
async fn under_sustained_overload_high_priority_is_shed_far_less_than_low() {
    // A backend that accepts 100 calls per second; demand is HIGH at 30/s and
    // LOW at 270/s: three times capacity in all.
    let manager = ThrottleManager::<String>::builder()
        .throttle(ThrottleConfig::new().window(Duration::from_secs(10)))
        .random_source(seeded_random(11))
        .build()
        .unwrap();
    let mut backend_tokens = 0.0f64;
    let (mut shed, mut sent) = ([0u32; 2], [0u32; 2]);
    for tick in 0..6_000u32 {
        // 10 ms per tick: the backend refills one token per 10 ms.
        backend_tokens = (backend_tokens + 1.0).min(10.0);
        let mut calls = vec![(0, Priority::HIGH); usize::from(tick % 10 < 3)];
        calls.extend(std::iter::repeat_n(
            (1, Priority::LOW),
            if tick % 10 < 7 { 3 } else { 2 },
        ));
        for (i, priority) in calls {
            sent[i] += 1;
            match manager.try_acquire("backend", priority) {
                Ok(permit) if backend_tokens >= 1.0 => {
                    backend_tokens -= 1.0;
                    permit.success();
                }
                Ok(permit) => permit.overloaded(),
                Err(_) => shed[i] += 1,
            }
        }
        tokio::time::advance(Duration::from_millis(10)).await;
    }
    let high = f64::from(shed[0]) / f64::from(sent[0]);
    let low = f64::from(shed[1]) / f64::from(sent[1]);
    // With K = 2 about twice the capacity still reaches the backend (the SRE
    // book's bound), so LOW loses about a third of its calls locally.
    assert!(high < 0.05, "HIGH shed {high}");
    assert!(low > 0.3, "LOW shed {low}");
    assert!(high * 10.0 < low, "HIGH shed {high}, LOW shed {low}");
}

#[tokio::test(start_paused = true)]
async fn dropped_permits_never_cause_shedding() {
    let manager = manager_with_draw(0.0); // sheds at any probability above 0
    for _ in 0..1_000 {
        let permit = manager.acquire("db", Priority::LOW).await.unwrap();
        drop(permit); // cancelled, or a panic unwound through it
    }
    assert_eq!(
        manager.key("db").rejection_probability(Priority::LOW),
        Some(0.0)
    );
}

#[tokio::test(start_paused = true)]
async fn a_neutral_outcome_counts_as_a_request_and_an_accept() {
    // The documented rule (`Outcome::Neutral`, `Permit`): a call that ended
    // in a way that says nothing about load, reported or dropped unreported,
    // counts as accepted. Both halves matter: it is a request (so the
    // window's totals include it), and it is an accept (so it offsets
    // failures and never causes shedding).
    let manager = manager_with_draw(0.99); // nothing is shed: every call counts
    let permit = manager.try_acquire("db", Priority::MEDIUM).unwrap();
    permit.report(Outcome::Neutral);
    let medium = manager.key("db").snapshot().unwrap().priorities[2];
    assert_eq!((medium.requests, medium.accepts), (1, 1));

    drop(manager.try_acquire("db", Priority::MEDIUM).unwrap());
    let medium = manager.key("db").snapshot().unwrap().priorities[2];
    assert_eq!((medium.requests, medium.accepts), (2, 2));

    // 100 failures alone: (100 - 2 * 0) / (100 + 60) = 0.625. With 100
    // neutral outcomes beside them: (200 - 2 * 100) / (200 + 60) = 0.
    for _ in 0..100 {
        manager
            .try_acquire("failing", Priority::HIGH)
            .unwrap()
            .overloaded();
    }
    assert_eq!(
        manager.key("failing").rejection_probability(Priority::HIGH),
        Some(0.625)
    );
    for _ in 0..100 {
        let permit = manager.try_acquire("failing", Priority::HIGH).unwrap();
        permit.report(Outcome::Neutral);
    }
    assert_eq!(
        manager.key("failing").rejection_probability(Priority::HIGH),
        Some(0.0)
    );
}

#[tokio::test(start_paused = true)]
async fn a_call_rejected_by_one_control_leaves_no_trace_in_the_other() {
    let manager = one_call_per_second_shedding_eagerly();
    manager.try_acquire("db", Priority::HIGH).unwrap().success();
    // The rate refuses the next call: the throttle must not count it as an
    // unanswered request (which would look like a failure).
    for _ in 0..50 {
        let rejected = manager.try_acquire("db", Priority::HIGH).unwrap_err();
        assert_eq!(rejected.reason(), RejectReason::RateLimited);
    }
    assert_eq!(
        manager.key("db").rejection_probability(Priority::HIGH),
        Some(0.0)
    );

    // Now the throttle sheds: the rate must keep its token.
    for _ in 0..10 {
        manager.decrement("db"); // counts failures (the rate is pinned at 1/s)
    }
    tokio::time::advance(Duration::from_secs(1)).await;
    let rejected = manager.try_acquire("db", Priority::HIGH).unwrap_err();
    assert_eq!(rejected.reason(), RejectReason::Throttled);
    assert!(
        manager.check("db").is_ok(),
        "the shed call took no rate token"
    );
}

#[tokio::test(start_paused = true)]
async fn a_call_the_rate_would_refuse_anyway_is_not_counted_as_shed() {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(1.0).bounds(1.0, 1.0))
        .throttle(ThrottleConfig::new())
        .random_source(|| 0.0) // shed whenever the probability is above 0
        .time_limits(TimeLimits::new().max_wait(Duration::from_millis(500)))
        .build()
        .unwrap();
    for _ in 0..10 {
        manager.decrement("db"); // failures: the throttle sheds from now on
    }
    let shedding = manager
        .key("db")
        .rejection_probability(Priority::HIGH)
        .unwrap();
    assert!(shedding > 0.0);
    // A token is there: the call is shed, and counted.
    tokio::time::advance(Duration::from_secs(1)).await;
    let rejected = manager.try_acquire("db", Priority::HIGH).unwrap_err();
    assert_eq!(rejected.reason(), RejectReason::Throttled);
    let counted = manager
        .key("db")
        .rejection_probability(Priority::HIGH)
        .unwrap();
    assert!(counted > shedding);
    // The token is gone: calls the throttle would shed go to the rate, which
    // refuses them with its wait; the throttle counts none of them.
    manager.check("db").unwrap();
    for _ in 0..50 {
        let rejected = manager.try_acquire("db", Priority::HIGH).unwrap_err();
        assert_eq!(rejected.reason(), RejectReason::RateLimited);
        assert_eq!(rejected.retry_after(), Some(Duration::from_secs(1)));
        // `acquire` would wait up to its 500 ms: the same.
        let rejected = manager.acquire("db", Priority::HIGH).await.unwrap_err();
        assert_eq!(rejected.reason(), RejectReason::RateLimited);
    }
    assert_eq!(
        manager.key("db").rejection_probability(Priority::HIGH),
        Some(counted)
    );
    // Within its wait, `acquire` is judged by the throttle as before.
    tokio::time::advance(Duration::from_millis(600)).await;
    let rejected = manager.acquire("db", Priority::HIGH).await.unwrap_err();
    assert_eq!(rejected.reason(), RejectReason::Throttled);
}

#[tokio::test(start_paused = true)]
async fn acquire_waits_for_the_rate_after_the_throttle_admits() {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(4.0).bounds(4.0, 4.0))
        .throttle(ThrottleConfig::new())
        .build()
        .unwrap();
    let start = tokio::time::Instant::now();
    for _ in 0..5 {
        manager
            .acquire("db", Priority::MEDIUM)
            .await
            .unwrap()
            .success();
    }
    assert_eq!(start.elapsed(), Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_acquire_counts_nothing() {
    let manager = one_call_per_second_shedding_eagerly();
    manager.try_acquire("db", Priority::HIGH).unwrap().success();
    for _ in 0..20 {
        // Each waits for the next token, then gives up.
        let gave_up = tokio::time::timeout(
            Duration::from_millis(10),
            manager.acquire("db", Priority::HIGH),
        )
        .await;
        assert!(gave_up.is_err());
    }
    assert_eq!(
        manager.key("db").rejection_probability(Priority::HIGH),
        Some(0.0)
    );
    tokio::time::advance(Duration::from_secs(1)).await;
    assert!(
        manager.try_acquire("db", Priority::HIGH).is_ok(),
        "no token was kept"
    );
}

#[tokio::test(start_paused = true)]
async fn the_task_priority_overrides_the_call_site() {
    let manager = manager_with_draw(0.99);
    let permit = with_priority(Priority::HIGH, manager.acquire("db", Priority::LOW))
        .await
        .unwrap();
    assert_eq!(permit.priority(), Priority::HIGH);
    permit.overloaded();
    // The failure was counted at HIGH: HIGH sees it as its own.
    assert_eq!(
        manager.key("db").rejection_probability(Priority::HIGH),
        Some(1.0 / 61.0)
    );
}

#[test]
fn out_of_range_priorities_follow_the_policy() {
    let build = |policy| {
        ThrottleManager::<String>::builder()
            .throttle(ThrottleConfig::new())
            .priority_levels(2)
            .out_of_range(policy)
            .clock(ManualClock::new())
            .build()
            .unwrap()
    };
    let clamped = build(OutOfRange::ClampToLowest);
    assert_eq!(
        clamped.try_acquire("db", Priority::LOW).unwrap().priority(),
        Priority::MEDIUM_HIGH
    );
    let rejecting = build(OutOfRange::Reject);
    let rejected = rejecting.try_acquire("db", Priority::LOW).unwrap_err();
    assert_eq!(rejected.reason(), RejectReason::InvalidPriority);
    assert_eq!(rejected.priority(), Priority::LOW);
    let panicking = build(OutOfRange::Panic);
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = panicking.try_acquire("db", Priority::LOW);
    }));
    assert!(panicked.is_err());
}

#[test]
fn bad_throttle_configs_are_named() {
    let err = ThrottleManager::<String>::builder()
        .throttle(ThrottleConfig::new().min_rate(0.0))
        .priority_levels(0)
        .build()
        .unwrap_err();
    let problems: Vec<String> = err.problems().iter().map(|p| p.to_string()).collect();
    assert_eq!(
        problems,
        [
            "throttle.min_rate: must be above 0 (at 0 a failing key never recovers), got 0",
            "priority_levels: must be from 1 to 16, got 0"
        ]
    );
}

#[test]
fn concurrent_acquires_and_reports_lose_no_counts() {
    let manager = ThrottleManager::<String>::builder()
        .throttle(ThrottleConfig::new())
        .random_source(|| 0.999_999) // never shed: every attempt is counted
        .clock(ManualClock::new())
        .build()
        .unwrap();
    let admitted = AtomicU64::new(0);
    std::thread::scope(|scope| {
        for _ in 0..4 {
            let (manager, admitted) = (&manager, &admitted);
            scope.spawn(move || {
                for i in 0..2_500 {
                    let permit = manager.try_acquire("db", Priority::HIGH).unwrap();
                    admitted.fetch_add(1, Ordering::Relaxed);
                    if i % 5 == 0 {
                        permit.success();
                    } else {
                        permit.overloaded();
                    }
                }
            });
        }
    });
    assert_eq!(admitted.load(Ordering::Relaxed), 10_000);
    // 10,000 requests, 2,000 accepts: (10,000 - 4,000) / (10,000 + 60).
    assert_eq!(
        manager.key("db").rejection_probability(Priority::HIGH),
        Some(6_000.0 / 10_060.0)
    );
}

#[tokio::test(start_paused = true)]
async fn one_key_can_have_its_own_throttle() {
    let manager = ThrottleManager::<String>::builder()
        .throttle(ThrottleConfig::new())
        .key_override(
            "strict",
            Tier::new().throttle(ThrottleConfig::new().ratio(1.0).min_rate(0.5)),
        )
        .random_source(|| 0.99)
        .build()
        .unwrap();
    for key in ["strict", "default"] {
        for _ in 0..10 {
            manager.increment(key);
            manager.decrement(key);
        }
    }
    // 20 requests, 10 accepts. Default (K = 2, m = 60): 0. Strict (K = 1,
    // m = 30): (20 - 10) / (20 + 30).
    assert_eq!(
        manager.key("default").rejection_probability(Priority::HIGH),
        Some(0.0)
    );
    assert_eq!(
        manager.key("strict").rejection_probability(Priority::HIGH),
        Some(0.2)
    );
}

#[test]
fn a_window_beyond_a_day_is_refused() {
    let error = ThrottleManager::<String>::builder()
        .throttle(ThrottleConfig::new().window(std::time::Duration::from_secs(2 * 24 * 60 * 60)))
        .build()
        .unwrap_err();
    assert_eq!(error.problems()[0].field(), "throttle.window", "{error}");
}
