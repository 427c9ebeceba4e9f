//! Rates shared through a real `redis-server` (feature `redis`): managers
//! with their own connections, as separate processes would have, share one
//! bucket and one learned rate; Redis killed, restarted or frozen mid-run.
//!
//! Redis keeps real time, so these tests do too; each asserts what a
//! round trip cannot blur (counts within one token, a deadline not a hang).
//! Real separate processes are in `tests/rate/store/fleet.rs`.

use crate::redis_server;

use crate::support;

use std::time::Duration;

use portcullis::deadline::TimeLimits;
use portcullis::error::RejectReason;
use portcullis::store::{RedisStore, WhenUnavailable};
use portcullis::{Priority, RateConfig, ThrottleManager};
use redis_server::RedisServer;
use tokio::time::Instant;

async fn manager(url: &str, config: RateConfig) -> ThrottleManager<String> {
    manager_with(url, config, |store| store).await
}

async fn manager_with(
    url: &str,
    config: RateConfig,
    store: impl FnOnce(RedisStore) -> RedisStore,
) -> ThrottleManager<String> {
    let connected = RedisStore::connect(url, "test").await.unwrap();
    ThrottleManager::<String>::builder()
        .rate(config)
        .rate_store(store(connected))
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_managers_share_one_fixed_quota() {
    let _alone = crate::support::alone();
    let Some(server) = RedisServer::start("four_managers_share_one_fixed_quota") else {
        return;
    };
    let quota = RateConfig::adaptive(20.0).burst(2).bounds(20.0, 20.0);
    let until = Instant::now() + Duration::from_secs(2);
    let mut loops = Vec::new();
    for _ in 0..4 {
        let manager = manager(&server.url(), quota.clone()).await;
        loops.push(tokio::spawn(super::calls_until(manager, "api", until)));
    }
    let mut total = 0;
    for calls in loops {
        total += calls.await.unwrap();
    }
    // 2 s at 20/s plus the burst: 42, where four unshared quotas let 168 go.
    assert!((36..=43).contains(&total), "{total} calls in 2 s");
}

#[tokio::test]
async fn a_failure_one_manager_sees_lowers_the_rate_for_all() {
    let _alone = crate::support::alone();
    let Some(server) = RedisServer::start("a_failure_one_manager_sees_lowers_the_rate_for_all")
    else {
        return;
    };
    let config = RateConfig::adaptive(40.0)
        .bounds(1.0, 40.0)
        .decrease_factor(0.5);
    let seeing = manager(&server.url(), config.clone()).await;
    let other = manager(&server.url(), config).await;
    seeing.wait("host").await.unwrap();
    other.wait("host").await.unwrap();
    assert_eq!(other.key("host").rate(), Some(40.0));
    seeing.decrement("host"); // sent in the background
    let deadline = Instant::now() + Duration::from_secs(2);
    while other.key("host").rate() != Some(20.0) {
        assert!(
            Instant::now() < deadline,
            "rate {:?}",
            other.key("host").rate()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
        other.wait("host").await.unwrap(); // each decision brings the shared rate back
    }
    assert_eq!(seeing.key("host").rate(), Some(20.0));
}

#[tokio::test]
async fn a_cancelled_wait_hands_its_shared_token_back() {
    let _alone = crate::support::alone();
    let Some(server) = RedisServer::start("a_cancelled_wait_hands_its_shared_token_back") else {
        return;
    };
    let one_a_second = RateConfig::adaptive(1.0).burst(1).bounds(1.0, 1.0);
    let manager = manager(&server.url(), one_a_second).await;
    let (start, _first) = super::take_then_give_up(&manager).await;
    tokio::time::sleep(Duration::from_millis(50)).await; // the hand-back's round trip
    let _second = manager.acquire("api", Priority::HIGH).await.unwrap();
    // Its token was the one given back: one second after the first, not two.
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(950) && waited < Duration::from_millis(1_500),
        "{waited:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_mid_run_falls_back_then_rejoins() {
    let _alone = crate::support::alone();
    let Some(mut server) = RedisServer::start("redis_killed_mid_run_falls_back_then_rejoins")
    else {
        return;
    };
    let config = RateConfig::adaptive(50.0).bounds(1.0, 100.0);
    let manager = manager_with(&server.url(), config, |store| {
        store
            .deadline(Duration::from_millis(50))
            .recheck_every(Duration::from_millis(200))
    })
    .await;
    for _ in 0..5 {
        manager
            .acquire("host", Priority::HIGH)
            .await
            .unwrap()
            .success();
    }
    assert!(server.command(&["EXISTS", "test:host"]).starts_with(":1"));
    // Once the reports on their way have landed, the shared rate stays.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let shared = manager.key("host").rate().unwrap();

    server.kill();
    // Calls go on, paced by the local rate, and no error reaches them.
    let start = Instant::now();
    for _ in 0..20 {
        let permit = manager.acquire("host", Priority::HIGH).await;
        permit.expect("the local fallback admits").success();
    }
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    let local = manager.key("host").rate().unwrap();
    assert!(
        local > 50.0,
        "the local rate learned from the successes: {local}"
    );
    // The rate shown is the local one, in force while Redis is away, not
    // the shared one it last answered.
    assert!(local > shared, "shown {local}, shared {shared}");

    server.restart();
    assert!(server.command(&["EXISTS", "test:host"]).starts_with(":0"));
    tokio::time::sleep(Duration::from_millis(300)).await; // past recheck_every
    let deadline = Instant::now() + Duration::from_secs(5);
    while !server.command(&["EXISTS", "test:host"]).starts_with(":1") {
        assert!(Instant::now() < deadline, "never rejoined the shared rate");
        manager
            .acquire("host", Priority::HIGH)
            .await
            .unwrap()
            .success();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_refusing_mode_refuses_with_its_own_reason() {
    let _alone = crate::support::alone();
    let Some(mut server) = RedisServer::start("the_refusing_mode_refuses_with_its_own_reason")
    else {
        return;
    };
    let manager = manager_with(&server.url(), RateConfig::adaptive(50.0), |store| {
        store
            .when_unavailable(WhenUnavailable::Refuse)
            .recheck_every(Duration::from_millis(300))
    })
    .await;
    let _before = manager.acquire("quota", Priority::HIGH).await.unwrap();
    server.kill();
    for _ in 0..3 {
        let refused = manager.acquire("quota", Priority::HIGH).await.unwrap_err();
        assert_eq!(refused.reason(), RejectReason::StoreUnavailable);
        assert_eq!(refused.retry_after(), Some(Duration::from_millis(300)));
    }
    server.restart();
    tokio::time::sleep(Duration::from_millis(350)).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while manager.acquire("quota", Priority::HIGH).await.is_err() {
        assert!(Instant::now() < deadline, "never admitted again");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_redis_costs_one_deadline_not_a_hang() {
    let _alone = crate::support::alone();
    let Some(server) = RedisServer::start("a_frozen_redis_costs_one_deadline_not_a_hang") else {
        return;
    };
    let manager = manager_with(&server.url(), RateConfig::adaptive(100.0), |store| {
        store
            .deadline(Duration::from_millis(50))
            .recheck_every(Duration::from_secs(60))
    })
    .await;
    manager.wait("host").await.unwrap();
    server.freeze(true);
    let start = Instant::now();
    manager.wait("host").await.unwrap(); // asks, misses the deadline, falls back
    let first = start.elapsed();
    let start = Instant::now();
    for _ in 0..10 {
        manager.wait("host").await.unwrap(); // marked down: does not ask again
    }
    let next = start.elapsed();
    server.freeze(false);
    assert!(
        first >= Duration::from_millis(50) && first < Duration::from_millis(500),
        "{first:?}"
    );
    // Ten calls at the local 100/s: about 100 ms, with no deadline paid.
    assert!(next < Duration::from_millis(300), "{next:?}");
}

#[tokio::test]
async fn calls_that_never_wait_decide_locally() {
    let _alone = crate::support::alone();
    let Some(server) = RedisServer::start("calls_that_never_wait_decide_locally") else {
        return;
    };
    let manager = manager(&server.url(), RateConfig::adaptive(10.0).burst(2)).await;
    assert!(manager.check("api").is_ok());
    assert!(manager.try_acquire("api", Priority::HIGH).is_ok());
    assert!(
        manager.check("api").is_err(),
        "the local bucket's burst is spent"
    );
    assert!(
        server.command(&["EXISTS", "test:api"]).starts_with(":0"),
        "no round trip was made"
    );
}

/// Redis keeps a key's shared state until its debt has run out, plus the
/// idle time, both when a call takes a token and when an outcome rescales
/// the debt: a key deep in debt must not be forgotten by Redis early, and
/// so forgiven (ten calls at 0.01/s owe 1,000 s; the idle time is 60 s).
/// A decision moves the expiry only when it falls short, and then half the
/// idle time further; an outcome sets it exactly.
#[tokio::test]
async fn a_key_in_debt_outlives_the_idle_time_in_redis() {
    let _alone = crate::support::alone();
    let Some(server) = RedisServer::start("a_key_in_debt_outlives_the_idle_time_in_redis") else {
        return;
    };
    let kept_ms = || -> i64 {
        let reply = server.command(&["PTTL", "test:api"]);
        reply.trim().trim_start_matches(':').parse().unwrap()
    };
    let rate = RateConfig::adaptive(0.01)
        .burst(10)
        .bounds(0.001, 0.01)
        .decrease_factor(0.5);
    let manager = manager_with(&server.url(), rate, |store| {
        store.idle_ttl(Duration::from_secs(60))
    })
    .await;
    for _ in 0..10 {
        // Dropped: neutral, reported to no one; only the tokens count.
        drop(manager.acquire("api", Priority::HIGH).await.unwrap());
    }
    let kept = kept_ms();
    assert!(
        (1_060_000..=1_091_000).contains(&kept),
        "Redis keeps the key {kept} ms, not the debt's 1,000 s plus 60 s to 90 s idle"
    );

    // A failure halves the rate: the debt doubles, and so does its hold.
    manager.decrement("api");
    let deadline = Instant::now() + Duration::from_secs(5);
    while kept_ms() < 1_500_000 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let kept = kept_ms();
    assert!(
        (2_000_000..=2_061_000).contains(&kept),
        "after the failure Redis keeps the key {kept} ms, not 2,000 s plus 60 s"
    );
}

#[tokio::test]
async fn the_builder_names_what_a_store_lacks() {
    let _alone = crate::support::alone();
    let Some(server) = RedisServer::start("the_builder_names_what_a_store_lacks") else {
        return;
    };
    let store = RedisStore::connect(&server.url(), "test").await.unwrap();
    let error = ThrottleManager::<String>::builder()
        .bulkhead(portcullis::BulkheadConfig::new(4))
        .rate_store(store.deadline(Duration::ZERO))
        .build()
        .unwrap_err();
    let fields: Vec<_> = error.problems().iter().map(|p| p.field()).collect();
    assert_eq!(fields, ["rate_store", "rate_store.deadline"], "{error}");
    // Behind an `Arc` (managers sharing one store), the same.
    let store = RedisStore::connect(&server.url(), "shared").await.unwrap();
    assert_eq!(store.prefix(), "shared");
    let error = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_second(10))
        .rate_store(std::sync::Arc::new(
            store.idle_ttl(Duration::from_millis(10)),
        ))
        .build()
        .unwrap_err();
    let fields: Vec<_> = error.problems().iter().map(|p| p.field()).collect();
    assert_eq!(fields, ["rate_store.idle_ttl"], "{error}");
    // One second is the shortest idle time that works, and it does.
    let store = RedisStore::connect(&server.url(), "shared").await.unwrap();
    let built = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_second(10))
        .rate_store(store.idle_ttl(Duration::from_secs(1)))
        .build();
    assert!(built.is_ok(), "{:?}", built.err());
}

#[tokio::test]
async fn connecting_to_nothing_says_so() {
    let _alone = crate::support::alone();
    let free = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("redis://127.0.0.1:{free}/");
    let error = RedisStore::connect(&url, "test").await.unwrap_err();
    assert_eq!(error.field(), "url");
    assert!(
        error.to_string().contains("no Redis server answered"),
        "{error}"
    );
    // The driver's own error is the source, for error reporters to chain.
    let source = std::error::Error::source(&error).expect("the redis error");
    assert!(source.is::<redis::RedisError>(), "{source}");
}

/// Two replicas of an API, each with its own manager and server layer,
/// hold one tenant to one quota: a burst of 5 between them, then 429s
/// with `Retry-After`.
#[cfg(feature = "tower")]
#[tokio::test]
async fn two_server_replicas_hold_a_tenant_to_one_quota() {
    let _alone = crate::support::alone();
    use portcullis::server::{KeyExtractor, ThrottleLayer};
    use tower::ServiceExt;

    let Some(server) = RedisServer::start("two_server_replicas_hold_a_tenant_to_one_quota") else {
        return;
    };
    // One call every 5 s: the ten calls take far less than that.
    let quota = RateConfig::adaptive(0.2).burst(5).bounds(0.2, 0.2);
    let mut replicas = Vec::new();
    for _ in 0..2 {
        let manager = manager(&server.url(), quota.clone()).await;
        let app = axum::Router::new()
            .route("/", axum::routing::get(|| async { "hello" }))
            .layer(ThrottleLayer::new(
                manager,
                KeyExtractor::header("x-api-key"),
            ));
        replicas.push(app);
    }
    let mut statuses = Vec::new();
    for call in 0..10 {
        let request = axum::http::Request::get("/")
            .header("x-api-key", "tenant-1")
            .body(axum::body::Body::empty())
            .unwrap();
        let answer = replicas[call % 2].clone().oneshot(request).await.unwrap();
        if answer.status() == 429 {
            assert!(answer.headers().contains_key("retry-after"));
        }
        statuses.push(answer.status().as_u16());
    }
    assert_eq!(statuses, [200, 200, 200, 200, 200, 429, 429, 429, 429, 429]);
}

#[tokio::test]
async fn scripts_the_server_forgot_are_loaded_again() {
    let _alone = crate::support::alone();
    let Some(server) = RedisServer::start("scripts_the_server_forgot_are_loaded_again") else {
        return;
    };
    let config = RateConfig::adaptive(10.0).bounds(1.0, 100.0);
    let manager = manager(&server.url(), config).await;
    manager.wait("host").await.unwrap();
    assert!(server.command(&["SCRIPT", "FLUSH"]).starts_with("+OK"));
    assert!(server.command(&["DEL", "test:host"]).starts_with(":1"));
    manager.wait("host").await.unwrap(); // EVALSHA answers NOSCRIPT; the script is sent again
    assert!(server.command(&["EXISTS", "test:host"]).starts_with(":1"));
}

#[tokio::test]
async fn losing_and_regaining_redis_is_reported() {
    let _alone = crate::support::alone();
    let Some(mut server) = RedisServer::start("losing_and_regaining_redis_is_reported") else {
        return;
    };
    let (events, _guard) = support::Captured::on_this_thread();
    let manager = manager_with(&server.url(), RateConfig::adaptive(100.0), |store| {
        store
            .deadline(Duration::from_millis(50))
            .recheck_every(Duration::from_millis(100))
    })
    .await;
    manager.wait("host").await.unwrap();
    server.kill();
    manager.wait("host").await.unwrap();
    manager.wait("host").await.unwrap(); // marked down: no second report
    server.restart();
    tokio::time::sleep(Duration::from_millis(150)).await;
    manager.wait("host").await.unwrap();
    let lines = events.lines();
    let count = |text: &str| lines.iter().filter(|line| line.contains(text)).count();
    let lost = "rate store unavailable: each key falls back to its local rate";
    assert_eq!(count(lost), 1, "{lines:#?}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains(lost) && l.contains("WARN") && l.contains("prefix=\"test\"")),
        "{lines:#?}"
    );
    assert_eq!(count("rate store available again"), 1, "{lines:#?}");
}

#[tokio::test]
async fn a_call_takes_its_cost_from_the_shared_bucket() {
    let _alone = crate::support::alone();
    let Some(server) = RedisServer::start("a_call_takes_its_cost_from_the_shared_bucket") else {
        return;
    };
    let connected = RedisStore::connect(&server.url(), "test").await.unwrap();
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_minute(6).burst(10))
        .rate_store(connected)
        .time_limits(TimeLimits::new().max_wait(Duration::ZERO)) // refused at once, with the wait
        .build()
        .unwrap();
    let other = manager_with(&server.url(), RateConfig::per_minute(6).burst(10), |s| s).await;
    manager
        .acquire("api", Priority::HIGH.cost(8))
        .await
        .unwrap()
        .success();
    // Two tokens are left in Redis, for every manager: three are 10 s
    // away (one token each 10 s, so no slow machine sees one come back).
    let refused = manager
        .acquire("api", Priority::HIGH.cost(3))
        .await
        .unwrap_err();
    assert_eq!(refused.reason(), RejectReason::RateLimited);
    let wait = refused.retry_after().unwrap();
    assert!(
        wait <= Duration::from_secs(10) && wait > Duration::from_secs(9),
        "{wait:?}"
    );
    other
        .acquire("api", Priority::HIGH.cost(2))
        .await
        .unwrap()
        .success();
    let refused = manager
        .acquire("api", Priority::HIGH.cost(1))
        .await
        .unwrap_err();
    assert_eq!(refused.reason(), RejectReason::RateLimited);
}

/// A fleet's quota changed by reloading the same file in every process:
/// each process's next call decides by the new quota against the one
/// shared bucket, so the fleet moves to it together, keeping the bucket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quota_reloaded_in_every_process_moves_the_fleet_to_it() {
    let _alone = crate::support::alone();
    let Some(server) =
        RedisServer::start("a_quota_reloaded_in_every_process_moves_the_fleet_to_it")
    else {
        return;
    };
    let quota = |per_second| RateConfig::per_second(per_second).burst(2);
    let mut managers = Vec::new();
    for _ in 0..2 {
        managers.push(manager(&server.url(), quota(10)).await);
    }
    let run = |until| {
        let loops: Vec<_> = managers
            .iter()
            .map(|manager| tokio::spawn(super::calls_until(manager.clone(), "api", until)))
            .collect();
        async move {
            let mut total = 0;
            for calls in loops {
                total += calls.await.unwrap();
            }
            total
        }
    };
    let before = run(Instant::now() + Duration::from_secs(1)).await;
    // 1 s at 10/s plus the burst, between both processes.
    assert!((9..=13).contains(&before), "{before} calls at 10/s");

    let file: portcullis::builder::ManagerConfig =
        toml::from_str("[default.rate]\nquota = \"40/s\"\nburst = 2\n").unwrap();
    for manager in &managers {
        manager.reload(file.clone()).unwrap();
    }
    let after = run(Instant::now() + Duration::from_secs(1)).await;
    // At most 1 s at 40/s and the burst (what the calls booked before the
    // reload is still owed); far above the 12 that 10/s allows.
    assert!((28..=42).contains(&after), "{after} calls at 40/s");
}

/// Issue 80: shadow mode through a store decides as enforcement would.
/// A fresh key at 10/s with a burst of 3 through Redis: the first three
/// calls would go (the store is asked; none is counted a would-refuse),
/// the fourth at once would be refused, by the store's bucket. Before, every shadowed call through a store was counted a would-refuse
/// before the store was asked.
#[tokio::test]
async fn shadow_mode_through_the_store_counts_what_enforcement_would_refuse() {
    let _alone = crate::support::alone();
    let Some(server) = RedisServer::start("shadow_mode_through_the_store") else {
        return;
    };
    let quota = RateConfig::per_second(10).burst(3);
    let connected = RedisStore::connect(&server.url(), "test").await.unwrap();
    let shadowed = ThrottleManager::<String>::builder()
        .rate(quota.clone())
        .rate_store(connected)
        .shadow(true)
        .build()
        .unwrap();
    let mut judged = Vec::new();
    for _ in 0..4 {
        let permit = shadowed.acquire("api", Priority::HIGH).await.unwrap();
        judged.push(permit.would_refuse());
        permit.success();
    }
    assert_eq!(judged[..3], [None, None, None], "{judged:?}");
    assert_eq!(judged[3], Some(RejectReason::RateLimited), "{judged:?}");
    assert!(
        server.command(&["EXISTS", "test:api"]).starts_with(":1"),
        "the store was asked"
    );
}
