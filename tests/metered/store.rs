//! Named limits shared through a real `redis-server`: managers with their
//! own connections, as separate processes would have, take one key's
//! limits in one round trip, give back what a refused, unsent or settled
//! call did not use, and fall back to their own limits without Redis.
//!
//! Redis keeps real time, so these tests do too; each asserts what a round
//! trip cannot blur (counts within a few tokens, a give-back within
//! seconds, not milliseconds).

use std::time::Duration;

use portcullis::store::RedisStore;
use portcullis::{BulkheadConfig, Cost, Priority, RateConfig, RejectReason, ThrottleManager};
use tokio::time::Instant;

use crate::redis_server::RedisServer;

/// Tokens: 100 a second, burst 1,000; a call waits for none of them
/// (`max_wait` 0), so each refusal says how long it would have waited.
async fn manager(url: &str, slots: Option<u32>) -> ThrottleManager<String> {
    let store = RedisStore::connect(url, "metered").await.unwrap();
    let builder = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_minute(6_000).burst(100))
        .limit("tokens", RateConfig::per_second(100).burst(1_000))
        .max_wait(Duration::ZERO)
        .rate_store(store);
    match slots {
        Some(slots) => builder.bulkhead(BulkheadConfig::new(slots)),
        None => builder,
    }
    .build()
    .unwrap()
}

/// `tokens` of `acct`'s limit through `manager`, without waiting.
async fn take(
    manager: &ThrottleManager<String>,
    tokens: u32,
) -> Result<portcullis::CostPermit<'_>, portcullis::Rejected> {
    manager
        .acquire_cost("acct", Priority::HIGH, Cost::of("tokens", tokens))
        .await
}

/// Whether `manager` is let `tokens` in for `acct` within ten seconds: a
/// give-back is sent without waiting, so it lands a little later.
async fn fits_soon(manager: &ThrottleManager<String>, tokens: u32) -> bool {
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until {
        if let Ok(permit) = take(manager, tokens).await {
            permit.success();
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

#[tokio::test]
async fn two_managers_share_a_keys_named_limits_and_settled_tokens_go_back() {
    let Some(server) = RedisServer::start("two_managers_share_a_keys_named_limits") else {
        return;
    };
    let (a, b) = (
        manager(&server.url(), None).await,
        manager(&server.url(), None).await,
    );
    let first = take(&a, 900).await.unwrap();
    // The other process sees the 900 taken: 300 more wait about 2 s.
    let refused = take(&b, 300).await.unwrap_err();
    assert_eq!(
        (refused.reason(), refused.limit_index()),
        (RejectReason::RateLimited, Some(0))
    );
    let wait = refused.retry_after().unwrap();
    assert!(
        wait > Duration::from_millis(1_500) && wait <= Duration::from_secs(2),
        "{wait:?}"
    );
    // Settled at 400: 500 go back, and the other fits at once.
    first.settle(Cost::of("tokens", 400));
    first.success();
    assert!(fits_soon(&b, 550).await);
    let refused = take(&b, 300).await.unwrap_err();
    assert_eq!(
        refused.limit_index(),
        Some(0),
        "the shared bucket holds the settled costs"
    );
}

#[tokio::test]
async fn a_call_its_key_refuses_or_never_sends_gives_back_what_the_store_took() {
    let Some(server) = RedisServer::start("a_call_its_key_refuses_gives_back") else {
        return;
    };
    let (a, b) = (
        manager(&server.url(), Some(1)).await,
        manager(&server.url(), None).await,
    );
    let busy = take(&a, 100).await.unwrap();
    // The key's one slot is taken: refused after the store took 600.
    let refused = take(&a, 600).await.unwrap_err();
    assert_eq!(refused.reason(), RejectReason::Full);
    busy.unsent(); // never sent: its 100 go back too
    assert!(fits_soon(&b, 1_000).await, "every token back");
}

#[tokio::test]
async fn without_redis_each_process_keeps_its_own_limits() {
    let Some(mut server) = RedisServer::start("without_redis_each_process_keeps_its_own") else {
        return;
    };
    let a = manager(&server.url(), None).await;
    server.kill();
    let permit = take(&a, 900).await.unwrap();
    permit.success();
    let refused = take(&a, 300).await.unwrap_err();
    assert_eq!(
        (refused.reason(), refused.limit_index()),
        (RejectReason::RateLimited, Some(0))
    );
}

#[tokio::test]
async fn what_another_client_wrote_in_a_limits_key_never_opens_it() {
    let Some(server) = RedisServer::start("what_another_client_wrote_in_a_limits_key") else {
        return;
    };
    let a = manager(&server.url(), None).await;
    let key = "{metered:acct}#tokens";
    // Not a hash: deleted and read as a full bucket, which holds its burst.
    server.command(&["RPUSH", key, "x"]);
    take(&a, 1_000).await.unwrap().success();
    let refused = take(&a, 100).await.unwrap_err();
    assert_eq!(refused.limit_index(), Some(0));
    // A debt far ahead is cut to what a bucket can owe, not forgiven; a
    // rate above the limit's is clamped to it; garbage is missing.
    server.command(&["HSET", key, "t", "1e300", "r", "1e9", "g", "nan"]);
    let refused = take(&a, 1).await.unwrap_err();
    assert_eq!(refused.limit_index(), Some(0));
    server.command(&["HSET", key, "t", "nan", "r", "-5", "g", "-1"]);
    take(&a, 1_000).await.unwrap().success();
    let refused = take(&a, 100).await.unwrap_err();
    assert!(
        refused.retry_after().unwrap() > Duration::from_millis(900),
        "{refused}"
    );
}
