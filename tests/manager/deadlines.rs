//! Deadlines that travel with the call (`with_deadline`), on virtual time:
//! every wait the manager would make is refused at once, taking nothing,
//! when it cannot end before the caller's deadline, and waits and admits
//! when it can; a place in the bulkhead's queue, whose wait is unknown,
//! ends at the deadline; `call` ends by it; a retry's backoff past it is
//! not slept.

use std::time::Duration;

use portcullis::builder::KeySpaceConfig;
use portcullis::deadline::TimeLimit;
use portcullis::deadline::TimeLimits;
use portcullis::deadline::with_deadline;
use portcullis::error::RejectReason;
use portcullis::retry::RetryPolicy;
use portcullis::{BulkheadConfig, CallError, Priority, RateConfig, ThrottleManager, overloaded};
use tokio::time::Instant;

const MS: Duration = Duration::from_millis(1);

/// A token every 500 ms, the first one spent.
async fn spent_quota() -> ThrottleManager<String> {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_second(2).burst(1))
        .time_limits(TimeLimits::new().max_wait(Duration::from_secs(10)))
        .build()
        .unwrap();
    manager
        .acquire("api", Priority::HIGH)
        .await
        .unwrap()
        .success();
    manager
}

#[tokio::test(start_paused = true)]
async fn a_token_past_the_deadline_is_refused_at_once_and_takes_nothing() {
    let manager = spent_quota().await;
    let start = Instant::now();
    let refused = with_deadline(start + 499 * MS, manager.acquire("api", Priority::HIGH))
        .await
        .unwrap_err();
    assert_eq!(refused.reason(), RejectReason::Deadline);
    assert_eq!(refused.retry_after(), None);
    assert_eq!(start.elapsed(), Duration::ZERO, "refused without waiting");
    #[cfg(any(feature = "tower", feature = "reqwest"))]
    assert_eq!(portcullis::grpc::code_of(&refused), 4, "DEADLINE_EXCEEDED");
    // A token due at the deadline itself is too late: a call must start
    // before its deadline.
    let refused = with_deadline(start + 500 * MS, manager.acquire("api", Priority::HIGH))
        .await
        .unwrap_err();
    assert_eq!(refused.reason(), RejectReason::Deadline);
    // It took nothing: the next token is still 500 ms away, and a caller
    // whose deadline allows it waits exactly that long.
    let permit = with_deadline(start + 501 * MS, manager.acquire("api", Priority::HIGH))
        .await
        .unwrap();
    assert_eq!(start.elapsed(), 500 * MS);
    permit.success();
}

#[tokio::test(start_paused = true)]
async fn max_wait_still_refuses_as_the_rate_when_it_is_the_tighter_bound() {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_second(2).burst(1))
        .time_limits(TimeLimits::new().max_wait(100 * MS))
        .build()
        .unwrap();
    manager
        .acquire("api", Priority::HIGH)
        .await
        .unwrap()
        .success();
    let deadline = Instant::now() + Duration::from_secs(5);
    let refused = with_deadline(deadline, manager.acquire("api", Priority::HIGH))
        .await
        .unwrap_err();
    assert_eq!(refused.reason(), RejectReason::RateLimited);
    assert_eq!(refused.retry_after(), Some(500 * MS));
}

#[tokio::test(start_paused = true)]
async fn wait_and_wait_n_are_refused_by_the_deadline_and_otherwise_wait() {
    let manager = spent_quota().await;
    let start = Instant::now();
    let refused = with_deadline(start + 100 * MS, manager.wait("api"))
        .await
        .unwrap_err();
    assert_eq!(refused.reason(), RejectReason::Deadline);
    assert_eq!(start.elapsed(), Duration::ZERO);
    with_deadline(start + Duration::from_secs(1), manager.key("api").wait(1))
        .await
        .unwrap();
    assert_eq!(start.elapsed(), 500 * MS);
}

#[tokio::test(start_paused = true)]
async fn callers_in_line_are_refused_once_the_line_reaches_past_their_deadline() {
    let manager = spent_quota().await;
    let start = Instant::now();
    let deadline = start + 1_200 * MS;
    // Ten callers at once: tokens at 0.5 s, 1 s, 1.5 s, ... Those whose
    // token comes after 1.2 s are refused at once.
    let callers: Vec<_> = (0..10)
        .map(|_| {
            let manager = manager.clone();
            tokio::spawn(with_deadline(deadline, async move {
                let outcome = manager.acquire_owned("api", Priority::HIGH).await;
                let at = start.elapsed();
                match outcome {
                    Ok(permit) => {
                        permit.success();
                        Ok(at)
                    }
                    Err(refused) => Err((refused.reason(), at)),
                }
            }))
        })
        .collect();
    let mut admitted = Vec::new();
    for caller in callers {
        match caller.await.unwrap() {
            Ok(at) => admitted.push(at),
            Err((reason, at)) => {
                assert_eq!(reason, RejectReason::Deadline);
                assert_eq!(at, Duration::ZERO, "refused without waiting");
            }
        }
    }
    admitted.sort();
    assert_eq!(admitted, [500 * MS, 1_000 * MS]);
}

#[tokio::test(start_paused = true)]
async fn room_in_the_key_space_past_the_deadline_is_refused_at_once() {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_second(1).burst(1))
        .key_space(KeySpaceConfig::new().max_keys(1))
        .time_limits(TimeLimits::new().max_wait(Duration::from_secs(10)))
        .build()
        .unwrap();
    manager
        .acquire("first", Priority::HIGH)
        .await
        .unwrap()
        .success(); // owes 1 s
    let start = Instant::now();
    let refused = with_deadline(start + 300 * MS, manager.acquire("second", Priority::HIGH))
        .await
        .unwrap_err();
    assert_eq!(refused.reason(), RejectReason::Deadline);
    assert_eq!(start.elapsed(), Duration::ZERO);
    let refused = with_deadline(start + 300 * MS, manager.wait("second"))
        .await
        .unwrap_err();
    assert_eq!(refused.reason(), RejectReason::Deadline);
    assert_eq!(start.elapsed(), Duration::ZERO);
    // With time for the first key to be evicted, the second gets its place.
    with_deadline(
        start + Duration::from_secs(2),
        manager.acquire("second", Priority::HIGH),
    )
    .await
    .unwrap()
    .success();
    assert_eq!(start.elapsed(), Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn a_place_in_the_queue_ends_at_the_deadline_or_the_queue_timeout_whichever_is_first() {
    let manager = ThrottleManager::<String>::builder()
        .bulkhead(
            BulkheadConfig::new(1)
                .queue(4)
                .queue_timeout(Duration::from_secs(2)),
        )
        .build()
        .unwrap();
    let busy = manager.acquire("db", Priority::HIGH).await.unwrap();
    let start = Instant::now();
    let refused = with_deadline(start + 250 * MS, manager.acquire("db", Priority::HIGH))
        .await
        .unwrap_err();
    assert_eq!(refused.reason(), RejectReason::Deadline);
    assert_eq!(
        start.elapsed(),
        250 * MS,
        "it waited in the queue until its deadline"
    );
    assert_eq!(
        manager.key("db").snapshot().unwrap().queued,
        Some(0),
        "and left it"
    );
    let start = Instant::now();
    let refused = with_deadline(
        start + Duration::from_secs(5),
        manager.acquire("db", Priority::HIGH),
    )
    .await
    .unwrap_err();
    assert_eq!(refused.reason(), RejectReason::QueueTimeout);
    assert_eq!(start.elapsed(), Duration::from_secs(2));
    // A slot freed before the deadline is taken.
    let start = Instant::now();
    let waiter = tokio::spawn({
        let manager = manager.clone();
        async move {
            with_deadline(
                Instant::now() + Duration::from_secs(1),
                manager.acquire_owned("db", Priority::HIGH),
            )
            .await
            .map(|permit| permit.success())
        }
    });
    tokio::time::sleep(100 * MS).await;
    busy.success();
    waiter.await.unwrap().unwrap();
    assert_eq!(start.elapsed(), 100 * MS);
}

/// A call that never answers, under a deadline 300 ms away, on a manager
/// whose call timeout is `call_timeout`: how it ended, when, and the rate
/// it left (from 10/s, 5 less for an overload).
async fn hung_call_under_a_deadline(
    call_timeout: Option<Duration>,
) -> (CallError<std::io::Error>, Duration, f64) {
    let mut builder =
        ThrottleManager::<String>::builder().rate(RateConfig::adaptive(10.0).decrease_by(5.0));
    if let Some(timeout) = call_timeout {
        builder = builder.time_limits(TimeLimits::new().call_timeout(timeout));
    }
    let manager = builder.build().unwrap();
    let start = Instant::now();
    let hung = with_deadline(
        start + 300 * MS,
        manager.call("db", Priority::HIGH, || async {
            std::future::pending::<Result<(), std::io::Error>>().await
        }),
    )
    .await;
    let rate = manager.key("db").rate().unwrap();
    (hung.unwrap_err(), start.elapsed(), rate)
}

#[tokio::test(start_paused = true)]
async fn a_call_ended_by_its_callers_deadline_is_neutral_and_by_its_call_timeout_overload() {
    for call_timeout in [None, Some(Duration::from_secs(1))] {
        let (error, took, rate) = hung_call_under_a_deadline(call_timeout).await;
        let CallError::TimedOut(expiry) = error else {
            panic!("{error:?}");
        };
        assert_eq!(expiry.limit(), TimeLimit::Deadline);
        assert_eq!(expiry.after(), 300 * MS);
        assert_eq!(took, 300 * MS, "it ended at the deadline");
        assert_eq!(
            rate, 10.0,
            "the caller's budget, not the backend's overload"
        );
        assert!(error.to_string().contains("caller's deadline"), "{error}");
    }
    // A call timeout sooner than the deadline (or at it) is the backend's
    // whole allowance: overload.
    for timeout in [200 * MS, 300 * MS] {
        let (error, took, rate) = hung_call_under_a_deadline(Some(timeout)).await;
        let CallError::TimedOut(expiry) = error else {
            panic!("{error:?}");
        };
        assert_eq!(
            (expiry.limit(), expiry.after()),
            (TimeLimit::CallTimeout, timeout)
        );
        assert_eq!(took, timeout);
        assert_eq!(rate, 5.0, "counted as overload");
        assert!(error.to_string().contains("call timeout"), "{error}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_retry_whose_backoff_ends_past_the_deadline_is_not_slept() {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(100.0))
        .retry(
            RetryPolicy::new()
                .max_retries(3)
                .min_retries_per_second(100.0)
                .backoff(Duration::from_secs(1), Duration::from_secs(1)),
        )
        .random_source(|| 0.999)
        .build()
        .unwrap();
    let start = Instant::now();
    let attempts = std::cell::Cell::new(0);
    let failed = with_deadline(
        start + 500 * MS,
        manager.call("api", Priority::HIGH, || {
            attempts.set(attempts.get() + 1);
            async { Err::<(), _>(overloaded(std::io::Error::other("503"))) }
        }),
    )
    .await;
    assert!(matches!(failed, Err(CallError::Inner(_))));
    assert_eq!(
        attempts.get(),
        1,
        "no retry: its backoff ends past the deadline"
    );
    assert_eq!(start.elapsed(), Duration::ZERO);
}

/// 1000 callers at 100 a second against a backend that answers OK in
/// 30 ms, on an adaptive rate that starts at 50/s and waits 100 ms at
/// most: each caller with `deadline` around its call, if given. Returns
/// how many succeeded and the rate learned.
async fn healthy_backend_run(deadline: Option<Duration>) -> (usize, f64) {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(50.0))
        .time_limits(TimeLimits::new().max_wait(100 * MS))
        .build()
        .unwrap();
    let mut calls = Vec::new();
    for _ in 0..1_000 {
        let manager = manager.clone();
        calls.push(tokio::spawn(async move {
            let call = manager.call("api", Priority::HIGH, || async {
                tokio::time::sleep(30 * MS).await;
                Ok::<_, std::io::Error>(())
            });
            match deadline {
                Some(deadline) => with_deadline(Instant::now() + deadline, call).await,
                None => call.await,
            }
            .is_ok()
        }));
        tokio::time::sleep(10 * MS).await;
    }
    let mut succeeded = 0;
    for call in calls {
        succeeded += usize::from(call.await.unwrap());
    }
    (succeeded, manager.key("api").rate().unwrap())
}

#[tokio::test(start_paused = true)]
async fn a_callers_deadline_spent_waiting_locally_never_slows_a_healthy_backends_key() {
    let (free, free_rate) = healthy_backend_run(None).await;
    let (bounded, bounded_rate) = healthy_backend_run(Some(100 * MS)).await;
    eprintln!(
        "without deadlines {free} ok at {free_rate}/s; with 100 ms deadlines {bounded} ok at {bounded_rate}/s"
    );
    assert!(
        bounded * 5 >= free * 4,
        "{bounded} succeeded with deadlines, {free} without"
    );
    assert!(
        bounded_rate >= free_rate * 0.8,
        "the rate learned {bounded_rate}/s with deadlines, {free_rate}/s without"
    );
}

#[tokio::test(start_paused = true)]
async fn a_deadline_already_past_is_refused_by_every_entry_point_taking_and_running_nothing() {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_second(1).burst(1))
        .bulkhead(BulkheadConfig::new(1))
        .build()
        .unwrap();
    let past = Instant::now() - Duration::from_secs(1);
    let now = Instant::now();
    for deadline in [past, now] {
        let refused = with_deadline(deadline, async {
            manager.try_acquire("api", Priority::HIGH).unwrap_err()
        })
        .await;
        assert_eq!(refused.reason(), RejectReason::Deadline);
        let refused = with_deadline(deadline, manager.acquire("api", Priority::HIGH))
            .await
            .unwrap_err();
        assert_eq!(refused.reason(), RejectReason::Deadline);
        let ran = std::cell::Cell::new(false);
        let called = with_deadline(
            deadline,
            manager.call("api", Priority::HIGH, || {
                ran.set(true);
                async { Ok::<_, std::io::Error>(()) }
            }),
        )
        .await;
        assert!(
            matches!(&called, Err(CallError::Rejected(r)) if r.reason() == RejectReason::Deadline),
            "{called:?}"
        );
        assert!(!ran.get(), "the closure never ran");
        for refused in [
            with_deadline(deadline, manager.wait("api")).await,
            with_deadline(deadline, async { manager.check("api") }).await,
            with_deadline(deadline, manager.acquire_all(&["api", "b"], Priority::HIGH))
                .await
                .map(drop),
        ] {
            assert_eq!(refused.unwrap_err().reason(), RejectReason::Deadline);
        }
    }
    // Nothing was taken: the one token and the one slot are still there.
    assert_eq!(manager.peek("api").unwrap().remaining, 1);
    manager
        .try_acquire("api", Priority::HIGH)
        .unwrap()
        .success();
}

/// A key whose backend answers in 30 ms, learned from a call with a
/// deadline; its next token 200 ms away.
async fn answers_in_30_ms() -> ThrottleManager<String> {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_second(5).burst(1))
        .time_limits(TimeLimits::new().max_wait(Duration::from_secs(10)))
        .build()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(1);
    with_deadline(
        deadline,
        manager.call("api", Priority::HIGH, || async {
            tokio::time::sleep(30 * MS).await;
            Ok::<_, std::io::Error>(())
        }),
    )
    .await
    .unwrap();
    manager
}

#[tokio::test(start_paused = true)]
async fn a_call_waits_only_while_it_would_keep_the_time_its_backend_takes_to_answer() {
    let manager = answers_in_30_ms().await;
    // The next token comes in 170 ms: a caller with 190 ms left would
    // have 20 ms for an answer that takes 30: refused at once, taking
    // nothing.
    let start = Instant::now();
    let refused = with_deadline(start + 190 * MS, manager.acquire("api", Priority::HIGH))
        .await
        .unwrap_err();
    assert_eq!(refused.reason(), RejectReason::Deadline);
    assert_eq!(start.elapsed(), Duration::ZERO);
    // One with 201 ms left waits for it, keeping 31 ms.
    let permit = with_deadline(start + 201 * MS, manager.acquire("api", Priority::HIGH))
        .await
        .unwrap();
    assert_eq!(start.elapsed(), 170 * MS);
    permit.success();
    // A caller with less time left than any answer takes is refused even
    // when its token is free.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let start = Instant::now();
    let refused = with_deadline(start + 30 * MS, manager.acquire("api", Priority::HIGH))
        .await
        .unwrap_err();
    assert_eq!(refused.reason(), RejectReason::Deadline);
    assert_eq!(manager.peek("api").unwrap().remaining, 1, "took nothing");
    // Without a deadline, nothing changes.
    manager
        .acquire("api", Priority::HIGH)
        .await
        .unwrap()
        .success();
}

#[tokio::test(start_paused = true)]
async fn a_place_in_the_queue_ends_when_an_answer_would_no_longer_fit_before_the_deadline() {
    let manager = ThrottleManager::<String>::builder()
        .bulkhead(BulkheadConfig::new(1).queue(4))
        .build()
        .unwrap();
    with_deadline(
        Instant::now() + Duration::from_secs(1),
        manager.call("db", Priority::HIGH, || async {
            tokio::time::sleep(30 * MS).await;
            Ok::<_, std::io::Error>(())
        }),
    )
    .await
    .unwrap();
    let busy = manager.acquire("db", Priority::HIGH).await.unwrap();
    let start = Instant::now();
    let refused = with_deadline(start + 250 * MS, manager.acquire("db", Priority::HIGH))
        .await
        .unwrap_err();
    assert_eq!(refused.reason(), RejectReason::Deadline);
    // It left the queue 30 ms (the quickest answer) before its deadline
    // (less a tick, which tokio's millisecond timer rounds up).
    assert_eq!(start.elapsed(), 220 * MS);
    assert_eq!(manager.key("db").snapshot().unwrap().queued, Some(0));
    busy.success();
}

#[tokio::test(start_paused = true)]
async fn a_call_ended_by_its_callers_deadline_is_not_retried() {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(100.0))
        .retry(
            RetryPolicy::new()
                .max_retries(3)
                .min_retries_per_second(100.0),
        )
        .build()
        .unwrap();
    let attempts = std::cell::Cell::new(0);
    let start = Instant::now();
    let ended = with_deadline(
        start + 300 * MS,
        manager.call("api", Priority::HIGH, || {
            attempts.set(attempts.get() + 1);
            std::future::pending::<Result<(), std::io::Error>>()
        }),
    )
    .await;
    let Err(CallError::TimedOut(expiry)) = ended else {
        panic!("{ended:?}");
    };
    assert_eq!(expiry.limit(), TimeLimit::Deadline);
    assert_eq!(attempts.get(), 1);
    assert_eq!(start.elapsed(), 300 * MS);
    assert_eq!(manager.key("api").rate(), Some(100.0));
}
