//! The 0.4 surface keeps its promises: the wait to be admitted is bounded
//! by default and is one budget with the bulkhead's queue, what a call
//! asks rides on its priority, the builder's groups set only what they
//! name, and one key's settings are a tier of one.

use std::time::Duration;

use portcullis::builder::{KeySpaceConfig, Tier};
use portcullis::deadline::TimeLimits;
use portcullis::error::RejectReason;
use portcullis::{BulkheadConfig, CallError, Priority, RateConfig, ThrottleManager};
use tokio::time::Instant;

use crate::support::bounded;

#[tokio::test(start_paused = true)]
async fn a_call_with_no_settings_waits_at_most_30_s_to_be_admitted() {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_minute(1))
        .build()
        .unwrap();
    manager
        .acquire("api", Priority::HIGH)
        .await
        .unwrap()
        .success();
    let started = Instant::now();
    // The next token is a minute away: beyond the default budget, refused
    // at once with the wait, never queued for a minute.
    let refused = bounded(
        "a call past the default wait",
        manager.acquire("api", Priority::HIGH),
    )
    .await
    .unwrap_err();
    assert_eq!(refused.reason(), RejectReason::RateLimited);
    assert_eq!(started.elapsed(), Duration::ZERO);
    assert!(refused.retry_after().unwrap() > Duration::from_secs(30));
    let refused = manager
        .call("api", Priority::HIGH, || async {
            Ok::<_, std::io::Error>(())
        })
        .await
        .unwrap_err();
    assert!(refused.is_local());

    // One within it waits for its token.
    let patient = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_second(1).burst(1))
        .build()
        .unwrap();
    patient
        .acquire("api", Priority::HIGH)
        .await
        .unwrap()
        .success();
    let started = Instant::now();
    patient
        .acquire("api", Priority::HIGH)
        .await
        .unwrap()
        .success();
    assert_eq!(started.elapsed(), Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn an_unbounded_wait_is_asked_for_by_name() {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_minute(1))
        .time_limits(TimeLimits::new().max_wait(Duration::MAX))
        .build()
        .unwrap();
    manager
        .acquire("api", Priority::HIGH)
        .await
        .unwrap()
        .success();
    let started = Instant::now();
    bounded(
        "a call with an unbounded wait",
        manager.acquire("api", Priority::HIGH),
    )
    .await
    .unwrap()
    .success();
    assert_eq!(started.elapsed(), Duration::from_secs(60));
}

/// A call that waited 400 ms for its token has 100 ms of a 500 ms budget
/// left for the bulkhead's queue, whatever the queue's own timeout.
#[tokio::test(start_paused = true)]
async fn the_wait_for_a_token_is_spent_from_the_queues_budget() {
    for queue_timeout in [None, Some(Duration::from_secs(5))] {
        let bulkhead = BulkheadConfig::new(1).queue(4);
        let bulkhead = match queue_timeout {
            Some(timeout) => bulkhead.queue_timeout(timeout),
            None => bulkhead,
        };
        // 2.5 calls a second, never moving: the second token is 400 ms on.
        let manager = ThrottleManager::<String>::builder()
            .rate(RateConfig::adaptive(2.5).bounds(2.5, 2.5))
            .bulkhead(bulkhead)
            .time_limits(TimeLimits::new().max_wait(Duration::from_millis(500)))
            .build()
            .unwrap();
        let _busy = manager.acquire("db", Priority::HIGH).await.unwrap();
        let started = Instant::now();
        let refused = bounded(
            "a call out of budget in the queue",
            manager.acquire("db", Priority::HIGH),
        )
        .await
        .unwrap_err();
        assert_eq!(
            refused.reason(),
            RejectReason::QueueTimeout,
            "{queue_timeout:?}"
        );
        assert_eq!(
            started.elapsed(),
            Duration::from_millis(500),
            "{queue_timeout:?}"
        );
    }
}

/// The queue's own timeout still ends a wait sooner than the budget.
#[tokio::test(start_paused = true)]
async fn the_queues_timeout_ends_a_wait_before_the_budget_does() {
    let manager = ThrottleManager::<String>::builder()
        .bulkhead(
            BulkheadConfig::new(1)
                .queue(4)
                .queue_timeout(Duration::from_millis(50)),
        )
        .time_limits(TimeLimits::new().max_wait(Duration::from_secs(5)))
        .build()
        .unwrap();
    let _busy = manager.acquire("db", Priority::HIGH).await.unwrap();
    let started = Instant::now();
    let refused = bounded("a queued call", manager.acquire("db", Priority::HIGH))
        .await
        .unwrap_err();
    assert_eq!(refused.reason(), RejectReason::QueueTimeout);
    assert_eq!(started.elapsed(), Duration::from_millis(50));
}

#[tokio::test(start_paused = true)]
async fn a_cost_and_a_timeout_ride_on_the_priority() {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_second(10).burst(10))
        .bulkhead(BulkheadConfig::new(4))
        .time_limits(TimeLimits::new().call_timeout(Duration::from_secs(10)))
        .build()
        .unwrap();
    manager
        .call("api", Priority::HIGH.cost(3), || async {
            Ok::<_, std::io::Error>(())
        })
        .await
        .unwrap();
    assert_eq!(manager.peek("api").unwrap().remaining, 7);
    manager
        .try_acquire("api", Priority::LOW.cost(4))
        .unwrap()
        .success();
    assert_eq!(manager.peek("api").unwrap().remaining, 3);
    let too_dear = manager
        .try_acquire("api", Priority::LOW.cost(11))
        .unwrap_err();
    assert_eq!(too_dear.reason(), RejectReason::CostAboveBurst);

    // The call's own timeout replaces the manager's for that call.
    let started = Instant::now();
    let hung = manager
        .call(
            "api",
            Priority::HIGH.timeout(Duration::from_secs(1)),
            || async {
                tokio::time::sleep(Duration::from_secs(5)).await;
                Ok::<_, std::io::Error>(())
            },
        )
        .await;
    assert!(matches!(hung, Err(CallError::TimedOut(_))));
    assert_eq!(started.elapsed(), Duration::from_secs(1));
    let started = Instant::now();
    manager
        .call("api", Priority::HIGH, || async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Ok::<_, std::io::Error>(())
        })
        .await
        .unwrap();
    assert_eq!(started.elapsed(), Duration::from_secs(5));
}

#[tokio::test(start_paused = true)]
async fn a_group_of_settings_sets_only_what_it_names() {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_minute(1))
        .key_space(
            KeySpaceConfig::new()
                .max_keys(1)
                .idle_ttl(Duration::from_secs(60)),
        )
        .time_limits(
            TimeLimits::new()
                .max_wait(Duration::ZERO)
                .call_timeout(Duration::from_secs(3)),
        )
        .build()
        .unwrap();
    assert_eq!(
        manager.settings().call_timeout(),
        Some(Duration::from_secs(3))
    );
    manager
        .acquire("a", Priority::HIGH)
        .await
        .unwrap()
        .success();
    // max_wait 0 still holds: a call that would wait is refused at once.
    let refused = manager.acquire("a", Priority::HIGH).await.unwrap_err();
    assert_eq!(refused.reason(), RejectReason::RateLimited);
    // max_keys 1 still holds: "a" owes its token, so "b" finds no room.
    let refused = manager.try_acquire("b", Priority::HIGH).unwrap_err();
    assert_eq!(refused.reason(), RejectReason::KeySpaceFull);
    assert_eq!(manager.keys().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn one_keys_settings_are_a_tier_of_one() {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(10.0))
        .bulkhead(BulkheadConfig::new(2))
        .limit("tokens", RateConfig::per_minute(600).burst(100))
        .key_override(
            "partner",
            Tier::new()
                .rate(RateConfig::adaptive(100.0))
                .limit("tokens", RateConfig::per_minute(6_000).burst(1_000)),
        )
        .build()
        .unwrap();
    manager.check("partner").unwrap();
    manager.check("other").unwrap();
    let partner = manager.key("partner");
    assert_eq!(partner.rate(), Some(100.0));
    // What the override leaves alone is the defaults'.
    assert_eq!(partner.concurrency_limit(), Some(2));
    assert_eq!(manager.key("other").rate(), Some(10.0));
    let tokens = manager.limit("tokens").unwrap();
    tokens.check("partner").unwrap();
    tokens.check("other").unwrap();
    assert_eq!(tokens.peek("partner").unwrap().burst, 1_000);
    assert_eq!(tokens.peek("other").unwrap().burst, 100);

    // A bad override is named by its key, as the 0.3 setters named it.
    let error = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(10.0))
        .key_override("partner", Tier::new().rate(RateConfig::adaptive(-1.0)))
        .build()
        .unwrap_err();
    assert!(
        error.to_string().contains("rate_override[\"partner\"]"),
        "{error}"
    );
}

/// A server's admission waits for nothing but the bulkhead's queue, and
/// there no longer than the wait to be admitted: with no setting at all, a
/// request cannot hold its connection for ever behind a stuck slot.
#[tokio::test(start_paused = true)]
async fn a_servers_request_queues_no_longer_than_the_default_wait() {
    let manager = ThrottleManager::<String>::builder()
        .bulkhead(BulkheadConfig::new(1).queue(4))
        .build()
        .unwrap();
    let _stuck = manager
        .try_acquire_or_queue_owned("api", Priority::HIGH)
        .await
        .unwrap();
    let started = Instant::now();
    let refused = bounded(
        "a request behind a stuck slot",
        manager.try_acquire_or_queue_owned("api", Priority::HIGH),
    )
    .await
    .unwrap_err();
    assert_eq!(refused.reason(), RejectReason::QueueTimeout);
    assert_eq!(started.elapsed(), Duration::from_secs(30));
}
