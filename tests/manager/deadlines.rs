//! Deadlines that travel with the call (`with_deadline`), on virtual time:
//! every wait the manager would make is refused at once, taking nothing,
//! when it cannot end before the caller's deadline, and waits and admits
//! when it can; a place in the bulkhead's queue, whose wait is unknown,
//! ends at the deadline; `call` ends by it; a retry's backoff past it is
//! not slept.

use std::time::Duration;

use portcullis::{
    BulkheadConfig, CallError, Priority, RateConfig, RejectReason, RetryPolicy, ThrottleManager,
    overloaded, with_deadline,
};
use tokio::time::Instant;

const MS: Duration = Duration::from_millis(1);

/// A token every 500 ms, the first one spent.
async fn spent_quota() -> ThrottleManager<String> {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_second(2).burst(1))
        .max_wait(Duration::from_secs(10))
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
    // It took nothing: the next token is still 500 ms away, and a caller
    // whose deadline allows it waits exactly that long.
    let permit = with_deadline(start + 500 * MS, manager.acquire("api", Priority::HIGH))
        .await
        .unwrap();
    assert_eq!(start.elapsed(), 500 * MS);
    permit.success();
}

#[tokio::test(start_paused = true)]
async fn max_wait_still_refuses_as_the_rate_when_it_is_the_tighter_bound() {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_second(2).burst(1))
        .max_wait(100 * MS)
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
    with_deadline(start + Duration::from_secs(1), manager.wait_n("api", 1))
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
        .max_keys(1)
        .max_wait(Duration::from_secs(10))
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
        manager.snapshot("db").unwrap().queued,
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

#[tokio::test(start_paused = true)]
async fn a_call_admitted_with_a_deadline_ends_by_it_as_overload() {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(10.0).decrease_by(5.0))
        .build()
        .unwrap();
    let start = Instant::now();
    let hung = with_deadline(
        start + 300 * MS,
        manager.call("db", Priority::HIGH, || async {
            std::future::pending::<Result<(), std::io::Error>>().await
        }),
    )
    .await;
    assert!(matches!(hung, Err(CallError::TimedOut(_))), "{hung:?}");
    assert_eq!(start.elapsed(), 300 * MS);
    assert_eq!(manager.current_rate("db"), Some(5.0), "counted as overload");
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
