//! The adaptive rate through the public API, on tokio's paused clock.

use std::sync::Arc;
use std::time::Duration;

use portcullis::builder::KeySpaceConfig;
use portcullis::builder::Tier;
use portcullis::deadline::TimeLimits;
use portcullis::error::ConfigError;
use portcullis::{RateConfig, ThrottleManager};
use tokio::time::Instant;

use crate::manager;

#[tokio::test(start_paused = true)]
async fn the_public_contract_compiles_and_works() -> Result<(), Box<dyn std::error::Error>> {
    let manager = ThrottleManager::<String>::builder()
        .rate(
            RateConfig::adaptive(10.0)
                .burst(5)
                .bounds(1.0, 200.0)
                .increase_by(2.0)
                .decrease_by(1.0),
        )
        .build()?; // Result<_, portcullis::error::ConfigError>, ConfigError: std::error::Error
    manager.wait("example.com").await.unwrap();
    let may_go_now: bool = manager.check("example.com").is_ok();
    manager.increment("example.com");
    manager.decrement("example.com");
    let current: Option<f64> = manager.key("example.com").rate();

    assert!(may_go_now);
    assert_eq!(current, Some(11.0));
    let _: &dyn std::error::Error = &manager_error();
    Ok(())
}

fn manager_error() -> ConfigError {
    ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(10.0).burst(0))
        .build()
        .unwrap_err()
}

#[tokio::test(start_paused = true)]
async fn concurrent_waiters_are_spaced_exactly_one_interval_apart() {
    const RATE: f64 = 50.0;
    const CALLS: usize = 200;
    let manager = manager(RateConfig::adaptive(RATE).bounds(RATE, RATE));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let manager = manager.clone();
        tasks.push(tokio::spawn(async move {
            let mut finished = Vec::new();
            for _ in 0..CALLS / 8 {
                manager.wait("host").await.unwrap();
                finished.push(start.elapsed());
            }
            finished
        }));
    }
    let mut times = Vec::new();
    for task in tasks {
        times.extend(task.await.unwrap());
    }
    times.sort();
    let expected = Duration::from_secs_f64((CALLS - 1) as f64 / RATE);
    let took = *times.last().unwrap();
    let error = (took.as_secs_f64() - expected.as_secs_f64()).abs() / expected.as_secs_f64();
    assert!(error < 0.01, "took {took:?}, expected {expected:?}");
    // And no two calls started closer than one interval.
    for pair in times.windows(2) {
        assert!(pair[1] - pair[0] >= Duration::from_millis(20) - Duration::from_nanos(1));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_the_real_clock_waiters_never_start_faster_than_the_rate() {
    // The one test on real time (QuantaClock, tokio's real timers): 41 calls
    // at 100/s cannot take less than 400 ms. How much longer they take
    // depends on how loaded the machine is, so the upper bound only catches
    // gross slowness (a late timer that delays every call after it would
    // add up); exact spacing is checked on virtual time above.
    let manager = manager(RateConfig::adaptive(100.0).bounds(100.0, 100.0));
    let start = std::time::Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let manager = manager.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..10 {
                manager.wait("host").await.unwrap();
            }
        }));
    }
    manager.wait("host").await.unwrap();
    for task in tasks {
        task.await.unwrap();
    }
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(400),
        "took {took:?}, at least 400 ms"
    );
    assert!(
        took < Duration::from_secs(2),
        "took {took:?}, expected about 400 ms"
    );
}

#[tokio::test(start_paused = true)]
async fn a_slow_key_never_delays_another() {
    let manager = manager(RateConfig::adaptive(1.0).bounds(0.5, 100.0));
    // Queue up ten seconds of waiters on the slow key.
    let slow = {
        let manager = manager.clone();
        tokio::spawn(async move {
            for _ in 0..10 {
                manager.wait("slow").await.unwrap();
            }
        })
    };
    tokio::task::yield_now().await;
    let start = Instant::now();
    manager.wait("fast").await.unwrap();
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert!(manager.check("other").is_ok());
    slow.abort();
}

#[tokio::test(start_paused = true)]
async fn a_rate_change_keeps_the_bucket_state() {
    let manager = manager(
        RateConfig::adaptive(10.0)
            .burst(3)
            .bounds(1.0, 100.0)
            .increase_by(2.5)
            .decrease_by(2.5),
    );
    for _ in 0..3 {
        manager.check("k").unwrap();
    }
    // Empty bucket: an increase (to 12.5/s) shortens the wait for the owed
    // token, but grants no fresh burst.
    manager.increment("k");
    let limited = manager.check("k").unwrap_err();
    assert_eq!(limited.retry_after(), Some(Duration::from_millis(80)));
    // A decrease keeps the debt: now 100 ms away again.
    manager.decrement("k");
    assert_eq!(manager.key("k").rate(), Some(10.0));
    assert_eq!(
        manager.check("k").unwrap_err().retry_after(),
        Some(Duration::from_millis(100))
    );
}

/// Calls whose tokens lie beyond the booking horizon wait in the key's
/// line and take nothing until their turn: one given up there delays
/// nobody, and the call behind it takes its turn.
#[tokio::test(start_paused = true)]
async fn a_cancelled_wait_takes_no_token_and_delays_nobody() {
    let manager = manager(RateConfig::adaptive(10.0).bounds(1.0, 100.0));
    manager.check("k").unwrap(); // the bucket is now empty for 100 ms
    let start = Instant::now();

    // A waits in line for the token at 100 ms, B behind it.
    let a = tokio::spawn({
        let manager = manager.clone();
        async move { manager.wait("k").await }
    });
    tokio::task::yield_now().await;
    let b = tokio::spawn({
        let manager = manager.clone();
        async move {
            manager.wait("k").await.unwrap();
            start.elapsed()
        }
    });
    tokio::task::yield_now().await;

    // Regression (a bug of earlier limiters): cancelling one wait cancelled
    // every later one. Here B takes A's turn and its token.
    a.abort();
    assert!(a.await.unwrap_err().is_cancelled());
    assert_eq!(b.await.unwrap(), Duration::from_millis(100));

    // C waits for the token at 200 ms; given up, it took nothing.
    let c = tokio::spawn({
        let manager = manager.clone();
        async move { manager.wait("k").await }
    });
    tokio::task::yield_now().await;
    c.abort();
    let _ = c.await;
    let waited = Instant::now();
    manager.wait("k").await.unwrap();
    assert_eq!(waited.elapsed(), Duration::from_millis(100)); // the token at 200 ms
}

/// A call whose token lies within the booking horizon takes it at once;
/// cancelled before it is due, it hands it back (while no later call has
/// taken one).
#[tokio::test(start_paused = true)]
async fn a_cancelled_wait_hands_a_booked_token_back() {
    let manager = manager(RateConfig::adaptive(200.0).burst(1).bounds(200.0, 200.0));
    manager.check("k").unwrap(); // the next token is 5 ms away
    let booked = tokio::spawn({
        let manager = manager.clone();
        async move { manager.wait("k").await }
    });
    tokio::task::yield_now().await;
    assert!(manager.check("k").is_err(), "booked by the waiter");
    booked.abort();
    let _ = booked.await;
    tokio::time::advance(Duration::from_millis(5)).await;
    assert!(manager.check("k").is_ok(), "handed back");
}

#[tokio::test(start_paused = true)]
async fn a_wait_timed_out_with_tokio_timeout_leaves_the_rate_intact() {
    let manager = manager(RateConfig::adaptive(1.0).bounds(1.0, 1.0));
    manager.check("k").unwrap();
    let timed_out = tokio::time::timeout(Duration::from_millis(10), manager.wait("k")).await;
    assert!(timed_out.is_err());
    // The token the timed-out wait had reserved is back: a check 1 s after
    // the first call succeeds, and not a moment before.
    tokio::time::advance(Duration::from_millis(989)).await;
    assert!(manager.check("k").is_err());
    tokio::time::advance(Duration::from_millis(1)).await;
    assert!(manager.check("k").is_ok());
}

/// Offers `per_second` calls a second to one key for `secs` seconds, each
/// giving up after 1 s (by `max_wait`, or by a timeout around `acquire`),
/// and counts the calls admitted and the time they took.
async fn admitted_under_overload(
    manager: ThrottleManager<String>,
    per_second: u64,
    secs: u64,
    timeout: bool,
) -> (u64, Duration) {
    let start = Instant::now();
    let admitted = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..per_second * secs {
        let (manager, admitted) = (manager.clone(), Arc::clone(&admitted));
        tasks.push(tokio::spawn(async move {
            let acquire = manager.acquire("k", portcullis::Priority::MEDIUM);
            let permit = if timeout {
                tokio::time::timeout(Duration::from_secs(1), acquire)
                    .await
                    .ok()
                    .and_then(Result::ok)
            } else {
                acquire.await.ok()
            };
            if let Some(permit) = permit {
                admitted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                permit.report(portcullis::outcome::Outcome::Neutral);
            }
        }));
        tokio::time::sleep(Duration::from_nanos(1_000_000_000 / per_second)).await;
    }
    for task in tasks {
        task.await.unwrap();
    }
    (
        admitted.load(std::sync::atomic::Ordering::Relaxed),
        start.elapsed(),
    )
}

#[tokio::test(start_paused = true)]
async fn under_sustained_overload_max_wait_keeps_every_token_in_use() {
    // 30 calls a second against a rate of 10, for 20 s.
    let bounded = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(10.0).bounds(10.0, 10.0))
        .time_limits(TimeLimits::new().max_wait(Duration::from_secs(1)))
        .build()
        .unwrap();
    let (admitted, took) = admitted_under_overload(bounded, 30, 20, false).await;
    // One token at once, then one every 100 ms for as long as calls came.
    let tokens = 1 + (took.as_secs_f64() * 10.0) as u64;
    assert!(
        (tokens - 1..=tokens).contains(&admitted),
        "max_wait admitted {admitted} in {took:?}: {tokens} tokens"
    );

    // The same with a timeout around `acquire`: waiters in line take
    // nothing until their turn, so those that give up leave no slot empty
    // either. (When each took its token on arrival, a timeout left the
    // tokens of those who gave up unused: under a quarter were admitted.)
    let timed_out = manager(RateConfig::adaptive(10.0).bounds(10.0, 10.0));
    let (admitted, took) = admitted_under_overload(timed_out, 30, 20, true).await;
    let tokens = 1 + (took.as_secs_f64() * 10.0) as u64;
    assert!(
        admitted * 100 >= tokens * 95,
        "a timeout around acquire admitted {admitted} in {took:?}: {tokens} tokens"
    );
}

#[test]
fn the_go_seeds_worked_example() {
    let manager = manager(
        RateConfig::adaptive(10.0)
            .burst(1)
            .bounds(1.0, 20.0)
            .increase_by(2.0)
            .decrease_by(1.0),
    );
    let key = "example.com";
    let rates: Vec<f64> = [
        manager.increment(key),
        manager.increment(key),
        manager.decrement(key),
    ]
    .into_iter()
    .flatten()
    .collect();
    assert_eq!(rates, [12.0, 14.0, 13.0]);
    for _ in 0..4 {
        manager.increment(key);
    }
    assert_eq!(manager.key(key).rate(), Some(20.0));
    for _ in 0..20 {
        manager.decrement(key);
    }
    assert_eq!(manager.key(key).rate(), Some(1.0));
}

#[test]
fn burst_zero_is_an_error_not_an_unlimited_rate() {
    // Regression (a bug of earlier limiters): burst 0 silently disabled throttling.
    let err = manager_error();
    assert_eq!(
        err.to_string(),
        "invalid configuration: rate.burst: must be at least 1, got 0"
    );
}

#[test]
fn bad_configs_are_reported_with_field_and_value() {
    let cases: [(RateConfig, &str); 6] = [
        (
            RateConfig::adaptive(f64::NAN),
            "rate.starting_rate: must be a finite number, got NaN",
        ),
        (
            RateConfig::adaptive(f64::INFINITY),
            "rate.starting_rate: must be a finite number, got inf",
        ),
        (
            RateConfig::adaptive(-5.0).bounds(1.0, 10.0),
            "rate.starting_rate: must be above 0, got -5",
        ),
        (
            RateConfig::adaptive(5.0).bounds(10.0, 1.0),
            "rate.bounds: lower bound must not exceed upper bound, got [10, 1]",
        ),
        (
            RateConfig::adaptive(50.0).bounds(1.0, 10.0),
            "rate.starting_rate: must lie within the bounds [1, 10], got 50",
        ),
        (
            RateConfig::adaptive(5.0).decrease_by(f64::NEG_INFINITY),
            "rate.decrease_by: must be a finite number of at least 0, got -inf",
        ),
    ];
    for (config, expected) in cases {
        let err = ThrottleManager::<String>::builder()
            .rate(config)
            .build()
            .unwrap_err();
        assert_eq!(err.problems()[0].to_string(), expected);
    }
    let err = ThrottleManager::<String>::builder().build().unwrap_err();
    assert_eq!(err.problems()[0].field(), "controls");
    let err = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(1.0))
        .key_space(KeySpaceConfig::new().max_keys(0))
        .build()
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid configuration: max_keys: must be at least 1, got 0"
    );
    let err = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(1.0))
        .key_override("api", Tier::new().rate(RateConfig::adaptive(1.0).burst(0)))
        .build()
        .unwrap_err();
    assert_eq!(
        err.problems()[0].to_string(),
        r#"rate_override["api"].burst: must be at least 1, got 0"#
    );
}

#[test]
fn per_key_settings_from_overrides_and_a_tier() {
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let premium = RateConfig::adaptive(100.0).bounds(10.0, 1000.0);
    let manager = ThrottleManager::<String>::builder()
        .rate(
            RateConfig::adaptive(10.0)
                .bounds(1.0, 100.0)
                .increase_by(1.0),
        )
        .key_override(
            "slow.example",
            Tier::new().rate(RateConfig::adaptive(2.0).bounds(1.0, 4.0).increase_by(1.0)),
        )
        .tier("premium", Tier::new().rate(premium))
        .tier_of({
            let calls = Arc::clone(&calls);
            move |key: &String| {
                calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                key.starts_with("premium-").then_some("premium")
            }
        })
        .build()
        .unwrap();
    assert_eq!(manager.increment("slow.example"), Some(3.0));
    assert_eq!(manager.increment("premium-1"), Some(101.0));
    assert_eq!(manager.increment("anyone"), Some(11.0));
    assert_eq!(manager.increment("anyone"), Some(12.0));
    // The closure is asked once per new key, never for overridden keys.
    assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 2);
}

#[tokio::test(start_paused = true)]
async fn multiplicative_decrease_with_cooldown_survives_a_burst_of_failures() {
    let manager = manager(
        RateConfig::adaptive(64.0)
            .bounds(1.0, 64.0)
            .decrease_factor(0.5)
            .decrease_cooldown(Duration::from_millis(500)),
    );
    // Thirty failures of calls that were all in flight together.
    for _ in 0..30 {
        manager.decrement("k");
    }
    assert_eq!(manager.key("k").rate(), Some(32.0));
    tokio::time::advance(Duration::from_millis(500)).await;
    manager.decrement("k");
    assert_eq!(manager.key("k").rate(), Some(16.0));
}

#[tokio::test(start_paused = true)]
async fn outcomes_of_calls_scheduled_before_a_decrease_do_not_move_the_rate_again() {
    let manager = manager(
        RateConfig::adaptive(10.0)
            .bounds(1.0, 100.0)
            .increase_by(1.0)
            .decrease_factor(0.5)
            .decrease_cooldown(Duration::ZERO),
    );
    let priority = portcullis::Priority::MEDIUM;
    // Three calls scheduled at once: the first goes now, the others wait
    // for their tokens at 100 and 200 ms.
    let (a, b, c) = tokio::join!(
        manager.acquire("k", priority),
        manager.acquire("k", priority),
        manager.acquire("k", priority)
    );
    let (a, b, c) = (a.unwrap(), b.unwrap(), c.unwrap());
    a.overloaded();
    assert_eq!(manager.key("k").rate(), Some(5.0));
    // Paced at 10/s like the first: old news.
    b.overloaded();
    c.success();
    assert_eq!(manager.key("k").rate(), Some(5.0));
    // A call scheduled since the decrease is news, either way.
    manager.acquire("k", priority).await.unwrap().success();
    assert_eq!(manager.key("k").rate(), Some(6.0));
    manager.acquire("k", priority).await.unwrap().overloaded();
    assert_eq!(manager.key("k").rate(), Some(3.0));
    // `decrement` carries no schedule: it always counts.
    manager.decrement("k");
    assert_eq!(manager.key("k").rate(), Some(1.5));
}

#[tokio::test(start_paused = true)]
async fn a_shorter_max_wait_for_low_priority_keeps_room_for_high() {
    use portcullis::Priority;
    use std::sync::atomic::{AtomicU64, Ordering};
    // 30 calls a second against a rate of 10 for 20 s; every tenth is HIGH.
    let run = |low_wait: Duration| async move {
        let manager = ThrottleManager::<String>::builder()
            .rate(RateConfig::adaptive(10.0).bounds(10.0, 10.0))
            .time_limits(TimeLimits::new().max_wait(Duration::from_secs(1)))
            .time_limits(TimeLimits::new().max_wait_for(Priority::LOW, low_wait))
            .build()
            .unwrap();
        let admitted = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
        let mut tasks = Vec::new();
        for i in 0..600 {
            let high = i % 10 == 0;
            let (manager, admitted) = (manager.clone(), Arc::clone(&admitted));
            tasks.push(tokio::spawn(async move {
                let priority = if high { Priority::HIGH } else { Priority::LOW };
                if manager.acquire("k", priority).await.is_ok() {
                    admitted[usize::from(!high)].fetch_add(1, Ordering::Relaxed);
                }
            }));
            tokio::time::sleep(Duration::from_nanos(1_000_000_000 / 30)).await;
        }
        for task in tasks {
            task.await.unwrap();
        }
        [0, 1].map(|i| admitted[i].load(Ordering::Relaxed))
    };
    // The same wait for all: HIGH gives up about as often as LOW.
    let [high, low] = run(Duration::from_secs(1)).await;
    assert!(high < 40, "HIGH admitted {high} of 60");
    assert!(high + low >= 200, "{high} + {low}");
    // LOW waits at most 150 ms: every HIGH call gets in, LOW takes the rest.
    let [high, low] = run(Duration::from_millis(150)).await;
    assert_eq!(high, 60);
    assert!(high + low >= 200, "{high} + {low}");
}

#[test]
fn failures_at_the_same_instant_lower_the_rate_once() {
    // The cooldown's point is one cut per congestion event: threads released
    // together by a barrier report failures at one instant, and exactly one
    // of them may move the rate. Many rounds, since a lost race is rare.
    const THREADS: usize = 4;
    let clock = portcullis::clock::ManualClock::new();
    let manager = ThrottleManager::<String>::builder()
        .rate(
            RateConfig::adaptive(64.0)
                .bounds(1.0, 64.0)
                .decrease_factor(0.5)
                .decrease_cooldown(Duration::from_secs(1)),
        )
        .clock(clock.clone())
        .build()
        .unwrap();
    for round in 0..2_000 {
        let key = format!("key-{round}");
        let barrier = std::sync::Barrier::new(THREADS);
        std::thread::scope(|scope| {
            for _ in 0..THREADS {
                scope.spawn(|| {
                    barrier.wait();
                    manager.decrement(&key);
                });
            }
        });
        assert_eq!(
            manager.key(&key).rate(),
            Some(32.0),
            "round {round}: {THREADS} simultaneous failures must halve the rate once"
        );
    }
}

/// Rate validation: successes raise a rate only while it is what limits the
/// key's calls. A key called at 4/s under a rate of 10/s learns nothing
/// from its successes; a key whose calls queue for their tokens does.
#[tokio::test(start_paused = true)]
async fn a_rate_rises_only_while_it_limits_the_calls() {
    let manager = manager(
        RateConfig::adaptive(10.0)
            .bounds(1.0, 1_000.0)
            .increase_by(1.0),
    );
    for _ in 0..120 {
        manager.wait("quiet").await.unwrap();
        manager.increment("quiet");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // A new key's first success has no history and counts as use at the
    // rate, so it raises the rate one step; the successes after it show 4/s
    // used, which validates no more than the starting rate, and bring the
    // rate back to it.
    assert_eq!(manager.key("quiet").rate(), Some(10.0));

    // Calls back to back: each waits for its token, so the rate limits them,
    // and rises with every success (never above 1.5x the use).
    let start = Instant::now();
    let mut calls = 0u32;
    while start.elapsed() < Duration::from_secs(5) {
        manager.wait("busy").await.unwrap();
        manager.increment("busy");
        calls += 1;
    }
    let rate = manager.key("busy").rate().unwrap();
    let used = f64::from(calls) / 5.0;
    assert!(rate > 50.0, "rate {rate}/s after 5 s of back-to-back calls");
    assert!(rate <= 1.5 * used * 2.0, "rate {rate}/s for {used}/s used");
}

/// A rate follows its use down as well as up: a key that learned a fast rate
/// and is then called slowly keeps no more than 1.5x what it uses (or its
/// starting rate), so the next burst starts from what was last tested.
#[tokio::test(start_paused = true)]
async fn a_rate_falls_back_to_what_its_calls_use() {
    let manager = manager(
        RateConfig::adaptive(10.0)
            .bounds(1.0, 1_000.0)
            .increase_by(1.0),
    );
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(5) {
        manager.wait("host").await.unwrap();
        manager.increment("host");
    }
    let learned = manager.key("host").rate().unwrap();
    assert!(learned > 50.0, "learned {learned}/s");

    // Five seconds at 20/s: at most 1.5x that, and still above it.
    for _ in 0..100 {
        manager.wait("host").await.unwrap();
        manager.increment("host");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let rate = manager.key("host").rate().unwrap();
    assert!(
        (20.0..=1.5 * 20.0 * 1.1).contains(&rate),
        "rate {rate}/s at 20/s used"
    );

    // Five seconds at 2/s: the starting rate, not below it.
    for _ in 0..10 {
        manager.wait("host").await.unwrap();
        manager.increment("host");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(manager.key("host").rate(), Some(10.0));
}

/// Calls waiting in line when the rate falls leave at the new pace: a
/// backend that just said "too fast" does not get the line at the pace it
/// refused. When the rate rises again, the rest of the line leaves at the
/// risen pace.
#[tokio::test(start_paused = true)]
async fn the_calls_in_line_leave_at_the_pace_of_the_moment() {
    let manager = manager(
        RateConfig::adaptive(10.0)
            .burst(1)
            .bounds(1.0, 100.0)
            .increase_by(5.0)
            .decrease_factor(0.5)
            .decrease_cooldown(Duration::ZERO),
    );
    manager.wait("host").await.unwrap(); // the burst's one token, at 0
    let start = Instant::now();
    let mut waiters = Vec::new();
    for _ in 0..4 {
        let manager = manager.clone();
        waiters.push(tokio::spawn(async move {
            manager.wait("host").await.unwrap();
            start.elapsed().as_millis()
        }));
    }
    // In line for the tokens at 100, 200, 300 and 400 ms, when the rate
    // halves: 200 ms apart.
    tokio::task::yield_now().await;
    assert_eq!(manager.decrement("host"), Some(5.0));
    let mut waiters = waiters.into_iter();
    let mut started = Vec::new();
    for waiter in waiters.by_ref().take(2) {
        started.push(waiter.await.unwrap());
    }
    assert_eq!(started, [200, 400]);
    // Back to 10/s: the other two go 100 ms apart from there.
    assert_eq!(manager.increment("host"), Some(10.0));
    for waiter in waiters {
        started.push(waiter.await.unwrap());
    }
    assert_eq!(started, [200, 400, 500, 600]);
    // The next call goes one interval at 10/s after the last of them.
    manager.wait("host").await.unwrap();
    assert_eq!(start.elapsed().as_millis(), 700);
}

/// A fall moves a call that booked its token (within the horizon) halfway
/// to the new pace, as it moves the bucket's debt; the call in line behind
/// it goes at the new pace from there.
#[tokio::test(start_paused = true)]
async fn a_fall_moves_a_booked_call_halfway_to_the_new_pace() {
    let manager = manager(
        RateConfig::adaptive(100.0)
            .burst(1)
            .bounds(1.0, 100.0)
            .decrease_factor(0.5)
            .decrease_cooldown(Duration::ZERO),
    );
    manager.wait("host").await.unwrap(); // the burst's one token, at 0
    let start = Instant::now();
    let mut waiters = Vec::new();
    for _ in 0..2 {
        let manager = manager.clone();
        waiters.push(tokio::spawn(async move {
            manager.wait("host").await.unwrap();
            start.elapsed().as_millis()
        }));
        tokio::task::yield_now().await;
    }
    // The first booked the token at 10 ms; the second is in line.
    assert_eq!(manager.decrement("host"), Some(50.0));
    let mut started = Vec::new();
    for waiter in waiters {
        started.push(waiter.await.unwrap());
    }
    // 10 ms at 100/s, 20 ms at 50/s: the booked call goes at 15 ms, the
    // next one interval at 50/s later.
    assert_eq!(started, [15, 35]);
}

/// A call that waited for its token was limited by the rate: its success
/// may raise the rate to twice the key's measured use (a measure that lags
/// a climb by a second or two), where a call that took a token at once
/// holds it to 1.5 times.
#[tokio::test(start_paused = true)]
async fn a_call_that_waited_for_its_token_lets_the_rate_climb_further() {
    let config = RateConfig::adaptive(10.0)
        .burst(1)
        .bounds(1.0, 1_000.0)
        .increase_by(2.0);
    let limited = manager(config.clone());
    let measured = manager(config);
    for _ in 0..30 {
        let permit = limited.acquire("host", portcullis::Priority::MEDIUM).await;
        permit.unwrap().success();
    }
    // The same calls back to back, but nothing tells the rate they waited.
    for _ in 0..30 {
        measured.wait("host").await.unwrap();
        measured.increment("host");
    }
    let (limited, measured) = (
        limited.key("host").rate().unwrap(),
        measured.key("host").rate().unwrap(),
    );
    assert!(limited > 1.25 * measured, "{limited}/s and {measured}/s");
}

/// The key's line under a moving rate, on a multi-threaded runtime: calls
/// join, give up and take their turns while the rate jumps about. No call
/// is stranded in line (each patient one gets its token), and the calls
/// admitted never outrun the fastest rate the key had, plus its burst.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_line_strands_no_one_and_admits_no_more_than_the_rate() {
    const FASTEST: f64 = 4_000.0;
    let manager = ThrottleManager::<String>::builder()
        .rate(
            RateConfig::adaptive(2_000.0)
                .burst(1)
                .bounds(500.0, FASTEST)
                .increase_by(500.0)
                .decrease_factor(0.5)
                .decrease_cooldown(Duration::ZERO),
        )
        .build()
        .unwrap();
    let admitted = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let start = std::time::Instant::now();
    let chaos = {
        let (manager, done) = (manager.clone(), Arc::clone(&done));
        tokio::spawn(async move {
            let mut n: u32 = 7;
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                n = n.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                if n >> 31 == 0 {
                    manager.increment("k");
                } else {
                    manager.decrement("k");
                }
                tokio::time::sleep(Duration::from_micros(300)).await;
            }
        })
    };
    let callers: Vec<_> = (0..64u32)
        .map(|caller| {
            let (manager, admitted) = (manager.clone(), Arc::clone(&admitted));
            tokio::spawn(async move {
                for round in 0..20u32 {
                    // One call in five gives up at once, in line or not.
                    let patience = if (caller + round) % 5 == 0 {
                        Duration::from_micros(200)
                    } else {
                        Duration::from_secs(10)
                    };
                    match tokio::time::timeout(patience, manager.wait("k")).await {
                        Ok(waited) => {
                            waited.unwrap();
                            admitted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        }
                        Err(_) if patience < Duration::from_secs(1) => {}
                        Err(_) => panic!("a call was stranded in line"),
                    }
                }
            })
        })
        .collect();
    for caller in callers {
        caller.await.unwrap();
    }
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    chaos.await.unwrap();
    let elapsed = start.elapsed().as_secs_f64();
    let admitted = admitted.load(std::sync::atomic::Ordering::SeqCst);
    assert!(admitted >= 64 * 16, "every patient call got in: {admitted}");
    assert!(
        admitted as f64 <= FASTEST * elapsed + 2.0,
        "{admitted} admitted in {elapsed:.3} s"
    );
}
