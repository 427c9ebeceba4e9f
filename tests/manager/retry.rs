//! `call` under a retry policy, on virtual time: the budget bounds retries
//! during an outage, a rare failure is retried, backoff waits what it
//! draws, a refusal or pause past the deadline gives up at once, and
//! retries go in one priority lower.

use std::cell::{Cell, RefCell};
use std::time::Duration;

use portcullis::deadline::TimeLimits;
use portcullis::error::RejectReason;
use portcullis::retry::RetryPolicy;
use portcullis::{BulkheadConfig, CallError, Priority, RateConfig, ThrottleManager, overloaded};
use tokio::time::Instant;

fn failing() -> Result<(), portcullis::outcome::Failure> {
    Err(overloaded(std::io::Error::other("503")))
}

#[tokio::test(start_paused = true)]
async fn at_full_failure_a_key_retries_no_more_than_its_budget() {
    const CALLS: u32 = 1_000;
    // A bulkhead alone: retries work whatever controls the manager has.
    let manager = ThrottleManager::<String>::builder()
        .bulkhead(BulkheadConfig::new(4))
        .retry(
            RetryPolicy::new()
                .max_retries(3)
                .budget(0.1)
                .min_retries_per_second(0.0)
                .backoff(Duration::ZERO, Duration::ZERO),
        )
        .build()
        .unwrap();
    let attempts = Cell::new(0u32);
    for _ in 0..CALLS {
        let outcome = manager
            .call("api", Priority::HIGH, || {
                attempts.set(attempts.get() + 1);
                async { failing() }
            })
            .await;
        assert!(matches!(outcome, Err(CallError::Inner(_))));
    }
    let retries = attempts.get() - CALLS;
    // A reserve of 10, and a tenth of a retry earned by each call.
    assert!(retries <= 10 + CALLS / 10, "{retries} retries");
    assert!(
        retries >= CALLS / 10,
        "the budget went unused: {retries} retries"
    );
    assert!(manager.key("api").snapshot().unwrap().retry_tokens.unwrap() < 1.0);
}

#[tokio::test(start_paused = true)]
async fn a_healthy_key_retries_a_rare_failure_and_returns_its_answer() {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_second(100))
        .retry(RetryPolicy::new())
        .build()
        .unwrap();
    let attempts = Cell::new(0u32);
    let answer = manager
        .call("api", Priority::HIGH, || {
            attempts.set(attempts.get() + 1);
            let first = attempts.get() == 1;
            async move {
                if first {
                    return Err(overloaded(std::io::Error::other("503")));
                }
                Ok("fine")
            }
        })
        .await
        .unwrap();
    assert_eq!((answer, attempts.get()), ("fine", 2));
    // The bucket was full (10), and the retry took one token.
    let tokens = manager.key("api").snapshot().unwrap().retry_tokens.unwrap();
    assert!((9.0..9.1).contains(&tokens), "{tokens} tokens");
}

#[tokio::test(start_paused = true)]
async fn a_neutral_error_is_never_retried() {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_second(100))
        .retry(RetryPolicy::new())
        .build()
        .unwrap();
    let attempts = Cell::new(0u32);
    let outcome = manager
        .call("api", Priority::HIGH, || {
            attempts.set(attempts.get() + 1);
            async { Err::<(), _>(std::io::Error::other("404")) }
        })
        .await;
    assert!(matches!(outcome, Err(CallError::Inner(_))));
    assert_eq!(attempts.get(), 1);
}

#[tokio::test(start_paused = true)]
async fn each_retry_waits_its_full_jitter_draw_below_a_doubling_ceiling() {
    let manager = ThrottleManager::<String>::builder()
        .bulkhead(BulkheadConfig::new(1))
        .retry(
            RetryPolicy::new()
                .max_retries(4)
                .backoff(Duration::from_millis(100), Duration::from_millis(300)),
        )
        .random_source(|| 0.5)
        .build()
        .unwrap();
    let start = Instant::now();
    let sent = RefCell::new(Vec::new());
    let _ = manager
        .call("api", Priority::HIGH, || {
            sent.borrow_mut().push(start.elapsed());
            async { failing() }
        })
        .await;
    // Half of 100, 200, 300 (the cap) and 300 ms.
    let ms = Duration::from_millis;
    assert_eq!(*sent.borrow(), [ms(0), ms(50), ms(150), ms(300), ms(450)]);
}

#[tokio::test(start_paused = true)]
async fn retries_go_in_one_priority_level_lower() {
    let manager = ThrottleManager::<String>::builder()
        .bulkhead(BulkheadConfig::new(1))
        .retry(RetryPolicy::new().max_retries(2))
        .build()
        .unwrap();
    let seen = RefCell::new(Vec::new());
    let _ = manager
        .call("api", Priority::HIGH, || {
            seen.borrow_mut().push(Priority::current());
            async { failing() }
        })
        .await;
    let (high, lower) = (Some(Priority::HIGH), Some(Priority::MEDIUM_HIGH));
    assert_eq!(*seen.borrow(), [high, lower, lower]);
    // Never below the manager's lowest level.
    let lowest = manager.key("api").retries(Priority::LOW);
    assert_eq!(lowest.priority(), Priority::LOW);
}

#[tokio::test(start_paused = true)]
async fn a_refusal_that_ends_past_the_deadline_gives_up_at_once() {
    let manager = |deadline| {
        ThrottleManager::<String>::builder()
            .rate(RateConfig::per_second(1))
            .time_limits(TimeLimits::new().max_wait(Duration::ZERO))
            .retry(RetryPolicy::new().deadline(deadline))
            .build()
            .unwrap()
    };
    let short = manager(Duration::from_millis(500));
    short.check("api").unwrap(); // the next token is 1 s away
    let start = Instant::now();
    let refused = short
        .call("api", Priority::HIGH, || async {
            Ok::<_, std::io::Error>(())
        })
        .await
        .unwrap_err();
    match refused {
        CallError::Rejected(rejected) => assert_eq!(rejected.reason(), RejectReason::RateLimited),
        other => panic!("not the refusal: {other}"),
    }
    assert_eq!(start.elapsed(), Duration::ZERO, "it slept past nothing");
    // With room before the deadline, the call goes when the token is due.
    let long = manager(Duration::from_secs(5));
    long.check("api").unwrap();
    long.call("api", Priority::HIGH, || async {
        Ok::<_, std::io::Error>(())
    })
    .await
    .unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn the_deadline_bounds_attempts_and_waits_together() {
    let manager = ThrottleManager::<String>::builder()
        .bulkhead(BulkheadConfig::new(1))
        .retry(
            RetryPolicy::new()
                .max_retries(10)
                .backoff(Duration::from_millis(500), Duration::from_millis(500))
                .deadline(Duration::from_secs(1)),
        )
        .random_source(|| 0.5)
        .build()
        .unwrap();
    let start = Instant::now();
    let slow = manager
        .call("api", Priority::HIGH, || async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            failing()
        })
        .await;
    // 300 ms, a 250 ms wait, 300 ms; the next wait would end past 1 s.
    assert!(matches!(slow, Err(CallError::Inner(_))));
    assert_eq!(start.elapsed(), Duration::from_millis(850));
    // A call still running at the deadline is dropped there.
    let start = Instant::now();
    let hung = manager
        .call("api", Priority::HIGH, || async {
            tokio::time::sleep(Duration::from_secs(60)).await;
            failing()
        })
        .await;
    assert!(matches!(hung, Err(CallError::TimedOut(_))));
    assert_eq!(start.elapsed(), Duration::from_secs(1));
}

#[test]
fn a_bad_policy_is_named_field_by_field() {
    let error = ThrottleManager::<String>::builder()
        .bulkhead(BulkheadConfig::new(1))
        .retry(
            RetryPolicy::new()
                .backoff(Duration::from_secs(2), Duration::from_secs(1))
                .budget(f64::NAN)
                .min_retries_per_second(-1.0)
                .deadline(Duration::ZERO),
        )
        .build()
        .unwrap_err();
    let fields: Vec<&str> = error
        .problems()
        .iter()
        .map(|problem| problem.field())
        .collect();
    assert_eq!(
        fields,
        [
            "retry.backoff",
            "retry.budget",
            "retry.min_retries_per_second",
            "retry.deadline"
        ]
    );
    assert!(error.to_string().contains("got 2s and 1s"), "{error}");
}
