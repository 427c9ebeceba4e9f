//! Named limits shared through a real `redis-server` (and a cluster):
//! managers with their own connections, as separate processes would have,
//! take every limit of one key, its rate's requests among them, in one
//! round trip, give back what a refused, unsent or settled call did not
//! use, and fall back to their own limits without Redis.
//!
//! Redis keeps real time, so these tests do too; each asserts what a round
//! trip cannot blur (counts within a few tokens, a give-back within
//! seconds, not milliseconds).

use std::time::Duration;

use portcullis::deadline::TimeLimits;
use portcullis::error::RejectReason;
use portcullis::metered::Cost;
use portcullis::store::RedisStore;
use portcullis::{BulkheadConfig, Priority, RateConfig, ThrottleManager};
use tokio::time::Instant;

use crate::redis_server::{RedisCluster, RedisServer};

/// Tokens: 100 a second, burst 1,000; a call waits for none of them
/// (`max_wait` 0), so each refusal says how long it would have waited.
/// Its requests as `requests` says, and `slots` a bulkhead's.
fn built(store: RedisStore, requests: RateConfig, slots: Option<u32>) -> ThrottleManager<String> {
    let builder = ThrottleManager::<String>::builder()
        .rate(requests)
        .limit("tokens", RateConfig::per_second(100).burst(1_000))
        .time_limits(TimeLimits::new().max_wait(Duration::ZERO))
        .rate_store(store);
    match slots {
        Some(slots) => builder.bulkhead(BulkheadConfig::new(slots)),
        None => builder,
    }
    .build()
    .unwrap()
}

/// Requests that never bind (6,000 a minute, burst 100), through `url`.
async fn manager(url: &str, slots: Option<u32>) -> ThrottleManager<String> {
    let store = RedisStore::connect(url, "metered").await.unwrap();
    built(store, RateConfig::per_minute(6_000).burst(100), slots)
}

/// Requests (one a minute, burst 2) that bind before the tokens.
fn scarce_requests(store: RedisStore, slots: Option<u32>) -> ThrottleManager<String> {
    built(store, RateConfig::per_minute(1).burst(2), slots)
}

/// `tokens` of `key`'s limit through `manager`, without waiting.
async fn call<'m>(
    manager: &'m ThrottleManager<String>,
    key: &str,
    tokens: u32,
) -> Result<portcullis::metered::CostPermit<'m>, portcullis::Rejected> {
    let cost = Cost::of("tokens", tokens);
    manager.acquire_cost(key, Priority::HIGH, cost).await
}

/// How many times Redis ran a script by its hash since its counts were
/// last reset.
fn scripts_run(server: &RedisServer) -> u64 {
    let stats = server.command(&["INFO", "commandstats"]);
    let line = stats
        .lines()
        .find(|line| line.starts_with("cmdstat_evalsha:"));
    line.and_then(|line| line.split("calls=").nth(1))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |calls| calls.parse().unwrap())
}

/// How many scripts Redis ran since its counts were reset, once it has
/// run at least `at_least` (a report is sent without waiting for it, so it
/// lands a little later) and a further half second has passed.
#[cfg(feature = "reqwest")]
async fn scripts_after(server: &RedisServer, at_least: u64) -> u64 {
    let until = Instant::now() + Duration::from_secs(10);
    while scripts_run(server) < at_least && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    scripts_run(server)
}

/// `tokens` of `acct`'s limit through `manager`, without waiting.
async fn take(
    manager: &ThrottleManager<String>,
    tokens: u32,
) -> Result<portcullis::metered::CostPermit<'_>, portcullis::Rejected> {
    call(manager, "acct", tokens).await
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

#[tokio::test]
async fn a_metered_call_takes_its_requests_and_its_tokens_in_one_round_trip() {
    let Some(server) = RedisServer::start("a_metered_call_takes_one_round_trip") else {
        return;
    };
    let a = manager(&server.url(), None).await;
    // The script is loaded (a first call may load it): then counted. A
    // permit dropped without an outcome reports nothing.
    drop(take(&a, 10).await.unwrap());
    server.command(&["CONFIG", "RESETSTAT"]);
    let permit = take(&a, 10).await.unwrap();
    assert_eq!(scripts_run(&server), 1, "one script for every limit");
    // The request was taken in the rate's own bucket, shared as before.
    let shared = RedisStore::connect(&server.url(), "metered").await.unwrap();
    let rate = shared
        .peek("acct")
        .await
        .unwrap()
        .expect("the rate's state");
    assert!(rate.remaining(100) <= 99, "{rate:?}");
    permit.success();
}

#[tokio::test]
async fn the_requests_are_shared_and_wait_as_the_keys_rate() {
    let Some(server) = RedisServer::start("the_requests_are_shared_and_wait") else {
        return;
    };
    let url = server.url();
    let connect = || RedisStore::connect(&url, "metered");
    let a = scarce_requests(connect().await.unwrap(), None);
    let b = scarce_requests(connect().await.unwrap(), None);
    take(&a, 10).await.unwrap().success();
    take(&b, 10).await.unwrap().success();
    // Two requests of a burst of two, in two processes: the third waits
    // for the key's rate (no named limit), about a minute.
    let refused = take(&a, 10).await.unwrap_err();
    assert_eq!(
        (refused.reason(), refused.limit_index()),
        (RejectReason::RateLimited, None)
    );
    let wait = refused.retry_after().unwrap();
    assert!(wait > Duration::from_secs(50), "{wait:?}");
}

#[tokio::test]
async fn a_call_its_key_refuses_gives_back_the_requests_the_store_took() {
    let Some(server) = RedisServer::start("a_call_its_key_refuses_gives_back_requests") else {
        return;
    };
    let url = server.url();
    let connect = || RedisStore::connect(&url, "metered");
    let a = scarce_requests(connect().await.unwrap(), Some(1));
    let b = scarce_requests(connect().await.unwrap(), None);
    let busy = take(&a, 10).await.unwrap();
    // The key's one slot is taken: refused after the store took a request.
    let refused = take(&a, 10).await.unwrap_err();
    assert_eq!(refused.reason(), RejectReason::Full);
    // It went back: the burst's second request is there (a minute's
    // refill is not).
    assert!(fits_soon(&b, 10).await, "the refused call's request back");
    let refused = take(&b, 10).await.unwrap_err();
    assert_eq!(refused.limit_index(), None, "the burst of two is spent");
    busy.success();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_keys_limits_and_requests_share_one_slot() {
    let Some(cluster) = RedisCluster::start("on_a_cluster_a_keys_limits_share_one_slot") else {
        return;
    };
    let urls = cluster.urls();
    let nodes: Vec<&str> = urls.iter().map(String::as_str).collect();
    let connect = || RedisStore::connect_cluster(&nodes, "metered");
    let a = scarce_requests(connect().await.unwrap(), None);
    let b = scarce_requests(connect().await.unwrap(), None);
    // Keys on every node: each one's limits and requests decided in one
    // script there, and shared.
    for i in 0..12 {
        let key = format!("acct-{i}");
        call(&a, &key, 900).await.unwrap().success();
        let refused = call(&b, &key, 900).await.unwrap_err();
        assert_eq!(refused.limit_index(), Some(0), "{key}: the tokens shared");
        call(&b, &key, 50).await.unwrap().success();
        let refused = call(&a, &key, 10).await.unwrap_err();
        assert_eq!(refused.limit_index(), None, "{key}: the requests shared");
    }
}

/// Through the reqwest middleware: a request's `Cost` takes its named
/// limits and its request in one script, and a call its key refuses gives
/// back the request with them.
#[cfg(feature = "reqwest")]
mod through_the_middleware {
    use std::time::Duration;

    use portcullis::client::ThrottleMiddleware;
    use portcullis::error::RejectReason;
    use portcullis::metered::Cost;
    use portcullis::store::RedisStore;
    use portcullis::{Priority, Rejected, ThrottleManager};
    use tokio::time::Instant;

    use super::{scarce_requests, scripts_after};
    use crate::llm_provider::Provider;
    use crate::redis_server::RedisServer;

    fn client(manager: &ThrottleManager<String>) -> reqwest_middleware::ClientWithMiddleware {
        let middleware = ThrottleMiddleware::new(manager.clone()).key_by(|_| "acct".to_owned());
        reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
            .with(middleware)
            .build()
    }

    async fn send(
        manager: &ThrottleManager<String>,
        url: &str,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        let body = serde_json::json!({ "prompt": "word ".repeat(20), "max_tokens": 20 });
        client(manager)
            .post(url)
            .bearer_auth("acct")
            .body(body.to_string())
            .with_extension(Cost::of("tokens", 50))
            .send()
            .await
    }

    #[tokio::test]
    async fn a_call_takes_its_request_with_its_tokens_in_one_script() {
        let Some(server) = RedisServer::start("through_the_middleware_one_script") else {
            return;
        };
        let provider = Provider::start(5).await.unwrap();
        let url = format!("http://{}/v1/complete", provider.address);
        let store = RedisStore::connect(&server.url(), "metered").await.unwrap();
        let manager = scarce_requests(store, None);
        // The scripts are loaded, and the first call's report has landed.
        send(&manager, &url).await.unwrap().bytes().await.unwrap();
        scripts_after(&server, 2).await;
        server.command(&["CONFIG", "RESETSTAT"]);
        send(&manager, &url).await.unwrap().bytes().await.unwrap();
        // Its limits and request, then its outcome's report: no script for
        // its request alone (which would run before the report).
        assert_eq!(scripts_after(&server, 2).await, 2);
        // The burst of two requests is spent, in the store.
        let refused = send(&manager, &url).await.unwrap_err();
        let reqwest_middleware::Error::Middleware(error) = refused else {
            panic!("refused by the middleware: {refused:?}");
        };
        let rejected = error.downcast_ref::<Rejected>().unwrap();
        assert_eq!(
            (rejected.reason(), rejected.limit_index()),
            (RejectReason::RateLimited, None)
        );
    }

    #[tokio::test]
    async fn a_call_its_key_refuses_gives_its_request_back() {
        let Some(server) = RedisServer::start("through_the_middleware_refused") else {
            return;
        };
        let store = RedisStore::connect(&server.url(), "metered").await.unwrap();
        let manager = scarce_requests(store, Some(1));
        let busy = manager.acquire("acct", Priority::HIGH).await.unwrap();
        // Its one slot is busy: refused after the store took its request.
        // Nothing listens at the address: nothing is sent either way.
        let closed = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let refused = send(&manager, &format!("http://{closed}/"))
            .await
            .unwrap_err();
        assert!(format!("{refused}").contains("bulkhead"), "{refused}");
        busy.success();
        // The burst's second request came back (a minute's refill would
        // not be in time).
        let until = Instant::now() + Duration::from_secs(10);
        let mut admitted = false;
        while !admitted && Instant::now() < until {
            admitted = manager.acquire("acct", Priority::HIGH).await.is_ok();
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(admitted, "the refused call's request back");
    }
}

#[tokio::test]
async fn an_adaptive_limit_learns_from_its_calls_in_the_store() {
    let Some(server) = RedisServer::start("an_adaptive_limit_learns_in_the_store") else {
        return;
    };
    let store = RedisStore::connect(&server.url(), "metered").await.unwrap();
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_minute(6_000).burst(100))
        .limit("tokens", RateConfig::adaptive(1_000.0).burst(1_000))
        .time_limits(TimeLimits::new().max_wait(Duration::ZERO))
        .rate_store(store)
        .build()
        .unwrap();
    let shared_rate = || {
        // A bulk string: `$4`, then the value.
        let rate = server.command(&["HGET", "{metered:acct}#tokens", "r"]);
        rate.lines()
            .nth(1)
            .and_then(|rate| rate.parse::<f64>().ok())
    };
    take(&manager, 100).await.unwrap().overloaded();
    // The report is sent without waiting: it lands a little later.
    let until = Instant::now() + Duration::from_secs(10);
    while shared_rate() == Some(1_000.0) && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let fallen = shared_rate().unwrap();
    assert!(fallen < 1_000.0, "the shared limit fell: {fallen}");
    // A success of a call that waited for nothing moves it no further up
    // than its use validates; it never rises past its starting rate here.
    take(&manager, 100).await.unwrap().success();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(shared_rate().unwrap() <= 1_000.0);
}
