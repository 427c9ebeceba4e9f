//! The HTTP server layer in a real axum server on loopback, called by a
//! real client (feature `tower`).
//!
//! The server and client talk over real sockets; the manager reads a
//! [`ManualClock`] that each test moves by hand, so what is admitted when
//! is exact, whatever the machine's load.

#![cfg(feature = "axum")]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;
use portcullis::builder::KeySpaceConfig;
use portcullis::builder::Tier;
use portcullis::clock::ManualClock;
use portcullis::deadline::TimeLimits;
use portcullis::server::{KeyExtractor, ThrottleLayer, TrustedProxies};
use portcullis::{BulkheadConfig, Priority, RateConfig, ThrottleManager};
use tokio::sync::Semaphore;

// ---- The public contract of the issue, as written ----

fn app() -> Result<axum::Router, portcullis::error::ConfigError> {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(20.0).burst(5).bounds(20.0, 20.0))
        .bulkhead(BulkheadConfig::new(4))
        .build()?;
    Ok(axum::Router::new()
        .route("/", axum::routing::get(|| async { "hello" }))
        .layer(ThrottleLayer::new(
            manager,
            KeyExtractor::header("x-api-key"),
        )))
}

// ---- A server and a client ----

/// Serves `app` on a loopback port of its own, with the peer address in
/// each request (`ConnectInfo`).
pub(crate) async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap();
    });
    format!("http://{addr}")
}

/// A request's status and the headers a test reads.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) retry_after: Option<String>,
    policy: Option<String>,
    rate_limit: Option<String>,
    pub(crate) body: String,
}

pub(crate) async fn send(client: &reqwest::Client, url: &str, headers: &[(&str, &str)]) -> Answer {
    let mut request = client.get(url);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .map(|value| value.to_str().unwrap().to_owned())
    };
    let (retry_after, policy, rate_limit) = (
        header("retry-after"),
        header("ratelimit-policy"),
        header("ratelimit"),
    );
    Answer {
        status: response.status().as_u16(),
        retry_after,
        policy,
        rate_limit,
        body: response.text().await.unwrap(),
    }
}

fn quota_manager(clock: &ManualClock) -> ThrottleManager<String> {
    ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(20.0).burst(5).bounds(20.0, 20.0))
        .clock(clock.clone())
        .build()
        .unwrap()
}

fn hello() -> Router {
    Router::new().route("/", get(|| async { "hello" }))
}

// ---- Tests ----

#[tokio::test]
async fn the_contract_app_serves_and_limits() {
    let _alone = crate::support::alone();
    let url = serve(app().unwrap()).await;
    let client = reqwest::Client::new();
    let mut statuses = Vec::new();
    for _ in 0..30 {
        statuses.push(send(&client, &url, &[("x-api-key", "k")]).await.status);
    }
    // On real time: the burst of 5 at once, then 20/s, so 30 requests in
    // well under the 1.25 s they would need meet a 429.
    assert_eq!(&statuses[..5], [200; 5]);
    assert!(statuses.contains(&429), "{statuses:?}");
}

/// 20/s with burst 5 admits 5 + 20·t over t seconds, for each of two keys
/// at once, each as if alone.
#[tokio::test]
async fn per_key_quotas_are_exact_and_independent() {
    let _alone = crate::support::alone();
    let clock = ManualClock::new();
    let layer = ThrottleLayer::new(quota_manager(&clock), KeyExtractor::header("x-api-key"));
    let url = serve(hello().layer(layer)).await;
    let client = reqwest::Client::new();

    // Each key sends until refused, every 10 ms of (manual) time, for 2 s.
    let drain = |key: &'static str| {
        let (client, url) = (client.clone(), url.clone());
        async move {
            let mut admitted = 0;
            loop {
                let answer = send(&client, &url, &[("x-api-key", key)]).await;
                match answer.status {
                    200 => admitted += 1,
                    429 => return admitted,
                    other => panic!("unexpected status {other}"),
                }
            }
        }
    };
    let (mut a, mut b) = (0, 0);
    for step in 0..=200 {
        if step > 0 {
            clock.advance(Duration::from_millis(10));
        }
        let (more_a, more_b) = tokio::join!(drain("a"), drain("b"));
        a += more_a;
        b += more_b;
    }
    let expected = 5 + 20 * 2;
    assert!((expected - 1..=expected + 1).contains(&a), "key a: {a}");
    assert!((expected - 1..=expected + 1).contains(&b), "key b: {b}");
}

#[tokio::test]
async fn a_429_says_when_to_retry_and_what_the_quota_is() {
    let _alone = crate::support::alone();
    let clock = ManualClock::new();
    let layer = ThrottleLayer::builder(quota_manager(&clock), KeyExtractor::header("x-api-key"))
        .rate_limit_headers(true)
        .build()
        .unwrap();
    let url = serve(hello().layer(layer)).await;
    let client = reqwest::Client::new();
    let key = [("x-api-key", "k")];

    let first = send(&client, &url, &key).await;
    assert_eq!(first.status, 200);
    assert_eq!(first.body, "hello");
    // Asked for: the headers on an admitted answer too. Four of the burst
    // left; one more 50 ms from now (rounded up to 1 s).
    assert_eq!(
        first.policy.as_deref(),
        Some("\"default\";q=20;w=1;portcullis-burst=5")
    );
    assert_eq!(first.rate_limit.as_deref(), Some("\"default\";r=4;t=1"));
    assert_eq!(first.retry_after, None);
    for _ in 0..4 {
        assert_eq!(send(&client, &url, &key).await.status, 200);
    }
    let refused = send(&client, &url, &key).await;
    assert_eq!(refused.status, 429);
    assert_eq!(refused.retry_after.as_deref(), Some("1"));
    assert_eq!(
        refused.policy.as_deref(),
        Some("\"default\";q=20;w=1;portcullis-burst=5")
    );
    assert_eq!(refused.rate_limit.as_deref(), Some("\"default\";r=0;t=1"));
    assert_eq!(refused.body, "429 Too Many Requests: rate limited\n");
    // The 50 ms it was told (rounded up to whole seconds, which over-waits).
    clock.advance(Duration::from_millis(50));
    assert_eq!(send(&client, &url, &key).await.status, 200);
}

#[tokio::test]
async fn a_slow_quota_gives_its_wait_in_whole_seconds() {
    let _alone = crate::support::alone();
    let clock = ManualClock::new();
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(0.4).burst(1).bounds(0.4, 0.4)) // one call per 2.5 s
        .clock(clock.clone())
        .build()
        .unwrap();
    let url = serve(hello().layer(ThrottleLayer::new(
        manager,
        KeyExtractor::header("x-api-key"),
    )))
    .await;
    let client = reqwest::Client::new();
    let key = [("x-api-key", "k")];
    assert_eq!(send(&client, &url, &key).await.status, 200);
    let refused = send(&client, &url, &key).await;
    assert_eq!(refused.status, 429);
    assert_eq!(refused.retry_after.as_deref(), Some("3"));
    assert_eq!(
        refused.policy.as_deref(),
        Some("\"default\";q=24;w=60;portcullis-burst=1")
    );
    assert_eq!(refused.rate_limit.as_deref(), Some("\"default\";r=0;t=3"));
    clock.advance(Duration::from_millis(2_499));
    assert_eq!(send(&client, &url, &key).await.status, 429);
    clock.advance(Duration::from_millis(1));
    assert_eq!(send(&client, &url, &key).await.status, 200);
}

/// A full bulkhead answers 503, with no Retry-After: nobody knows when a
/// call in flight ends. A full key space answers 503 with one: when the
/// first key may be forgotten.
#[tokio::test]
async fn capacity_refusals_are_503_with_retry_after_only_when_known() {
    let _alone = crate::support::alone();
    let clock = ManualClock::new();
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(1.0).bounds(1.0, 1.0))
        .bulkhead(BulkheadConfig::new(1))
        .key_space(KeySpaceConfig::new().max_keys(1))
        .clock(clock.clone())
        .build()
        .unwrap();
    let gate = Arc::new(Semaphore::new(0));
    let held = Arc::clone(&gate);
    let app = Router::new()
        .route(
            "/",
            get(move || {
                let held = Arc::clone(&held);
                async move {
                    held.acquire().await.unwrap().forget();
                    "done"
                }
            }),
        )
        .layer(ThrottleLayer::new(
            manager.clone(),
            KeyExtractor::header("x-api-key"),
        ));
    let url = serve(app).await;
    let client = reqwest::Client::new();

    let in_flight = tokio::spawn({
        let (client, url) = (client.clone(), url.clone());
        async move { send(&client, &url, &[("x-api-key", "a")]).await.status }
    });
    while manager.key("a").snapshot().and_then(|s| s.active) != Some(1) {
        tokio::task::yield_now().await;
    }
    clock.advance(Duration::from_secs(1)); // a token again: only the slot is missing
    let full = send(&client, &url, &[("x-api-key", "a")]).await;
    assert_eq!(full.status, 503);
    assert_eq!(full.retry_after, None);
    assert_eq!(full.body, "503 Service Unavailable: bulkhead full\n");

    // Key "a" is in flight: the one place in the key space is taken.
    let no_room = send(&client, &url, &[("x-api-key", "b")]).await;
    assert_eq!(no_room.status, 503);
    assert_eq!(no_room.body, "503 Service Unavailable: key space full\n");
    assert!(no_room.retry_after.is_some());

    gate.add_permits(1);
    assert_eq!(in_flight.await.unwrap(), 200);
}

/// Behind one trusted proxy (the test's client, on loopback), the client is
/// the address the proxy appended; what the client wrote to the left does
/// not move the key. A peer that is not trusted is its own key.
#[tokio::test]
async fn forwarded_addresses_are_believed_only_from_trusted_proxies() {
    let _alone = crate::support::alone();
    let clock = ManualClock::new();
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(1.0).bounds(1.0, 1.0))
        .clock(clock.clone())
        .build()
        .unwrap();
    let loopback = TrustedProxies::new(["127.0.0.1", "::1"]).unwrap();
    let layer = ThrottleLayer::new(manager.clone(), KeyExtractor::forwarded_ip(loopback));
    let url = serve(hello().layer(layer)).await;
    let client = reqwest::Client::new();
    let xff = |value: &'static str| [("x-forwarded-for", value)];

    assert_eq!(
        send(&client, &url, &xff("6.6.6.6, 198.51.100.2"))
            .await
            .status,
        200
    );
    // A new forged leftmost entry: still 198.51.100.2, whose token is spent.
    assert_eq!(
        send(&client, &url, &xff("7.7.7.7, 198.51.100.2"))
            .await
            .status,
        429
    );
    assert_eq!(send(&client, &url, &xff("198.51.100.2")).await.status, 429);
    // Another client behind the same proxy has its own quota.
    assert_eq!(send(&client, &url, &xff("198.51.100.3")).await.status, 200);
    assert!(manager.key("6.6.6.6").snapshot().is_none());
    assert!(manager.key("7.7.7.7").snapshot().is_none());

    // The same client, seen by a server that trusts no proxy on loopback:
    // the header is ignored, and every request is the peer's.
    let untrusting = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(1.0).bounds(1.0, 1.0))
        .clock(clock.clone())
        .build()
        .unwrap();
    let elsewhere = TrustedProxies::new(["10.0.0.0/8"]).unwrap();
    let layer = ThrottleLayer::new(untrusting.clone(), KeyExtractor::forwarded_ip(elsewhere));
    let url = serve(hello().layer(layer)).await;
    assert_eq!(send(&client, &url, &xff("198.51.100.4")).await.status, 200);
    assert_eq!(send(&client, &url, &xff("198.51.100.5")).await.status, 429);
    assert!(untrusting.key("127.0.0.1").snapshot().is_some());
    assert!(untrusting.key("198.51.100.4").snapshot().is_none());
}

/// A 400 says what was wrong by quoting what the client sent, but only its
/// first characters: a header of 60 kB comes back as 32 of them and its
/// length, not as 60 kB of body.
#[tokio::test]
async fn a_bad_header_is_quoted_short() {
    let _alone = crate::support::alone();
    let clock = ManualClock::new();
    let loopback = TrustedProxies::new(["127.0.0.1", "::1"]).unwrap();
    let layer = ThrottleLayer::builder(quota_manager(&clock), KeyExtractor::forwarded_ip(loopback))
        .priority_header("x-priority")
        .build()
        .unwrap();
    let url = serve(hello().layer(layer)).await;
    let client = reqwest::Client::new();
    let huge = "9".repeat(60_000);

    let bad = send(&client, &url, &[("x-forwarded-for", huge.as_str())]).await;
    assert_eq!(bad.status, 400);
    assert_eq!(
        bad.body,
        format!(
            "400 Bad Request: missing client key: \"{}\"... (60000 bytes) in header \
             `x-forwarded-for` is not an address\n",
            "9".repeat(32)
        )
    );
    let bad = send(&client, &url, &[("x-priority", huge.as_str())]).await;
    assert_eq!(bad.status, 400);
    assert!(bad.body.len() < 200, "{} bytes", bad.body.len());
    assert!(bad.body.ends_with("... (60000 bytes)\n"), "{}", bad.body);
}

#[tokio::test]
async fn a_request_without_a_key_gets_the_configured_answer() {
    let _alone = crate::support::alone();
    let clock = ManualClock::new();
    let url = serve(hello().layer(ThrottleLayer::new(
        quota_manager(&clock),
        KeyExtractor::header("x-api-key"),
    )))
    .await;
    let client = reqwest::Client::new();
    let missing = send(&client, &url, &[]).await;
    assert_eq!(missing.status, 400);
    // A key longer than the extractor takes (256 bytes by default) is no
    // key either: keys from clients must not grow the key space's memory
    // without bound.
    let long = "k".repeat(10_000);
    let too_long = send(&client, &url, &[("x-api-key", &long)]).await;
    assert_eq!(too_long.status, 400);
    assert!(
        too_long.body.contains("10000 bytes, over the limit of 256"),
        "{}",
        too_long.body
    );
    assert_eq!(
        missing.body,
        "400 Bad Request: missing client key: header `x-api-key`\n"
    );

    let custom = ThrottleLayer::builder(quota_manager(&clock), KeyExtractor::header("x-api-key"))
        .on_missing_key(|missing| {
            let mut answer =
                axum::http::Response::new(format!("sign in first ({})", missing.what()).into());
            *answer.status_mut() = axum::http::StatusCode::UNAUTHORIZED;
            answer
        })
        .build()
        .unwrap();
    let url = serve(hello().layer(custom)).await;
    let answer = send(&client, &url, &[]).await;
    assert_eq!(answer.status, 401);
    assert_eq!(answer.body, "sign in first (header `x-api-key`)");
}

/// An adaptive key's rate falls when its requests end in 503, and a 404
/// or a 500 leaves it alone; a fixed quota moves for neither.
#[tokio::test]
async fn overload_answers_lower_an_adaptive_rate_and_bugs_and_client_errors_do_not() {
    let _alone = crate::support::alone();
    let clock = ManualClock::new();
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(10.0).burst(5).bounds(1.0, 100.0))
        .tier(
            "fixed",
            Tier::new().rate(RateConfig::adaptive(10.0).bounds(10.0, 10.0)),
        )
        .tier_of(|key: &String| (key == "fixed").then_some("fixed"))
        .clock(clock.clone())
        .build()
        .unwrap();
    let app = Router::new()
        .route(
            "/fail",
            get(|| async { (StatusCode::SERVICE_UNAVAILABLE, "busy") }),
        )
        .route(
            "/bug",
            get(|| async { (StatusCode::INTERNAL_SERVER_ERROR, "broken") }),
        )
        .route("/ok", get(|| async { "fine" }))
        .layer(ThrottleLayer::new(
            manager.clone(),
            KeyExtractor::header("x-api-key"),
        ));
    let url = serve(app).await;
    let client = reqwest::Client::new();

    let missing = send(&client, &format!("{url}/nowhere"), &[("x-api-key", "k")]).await;
    assert_eq!(missing.status, 404);
    assert_eq!(manager.key("k").rate(), Some(10.0));
    // A 500 is a bug, not a capacity problem (the one table, as a client
    // reads it too).
    let bug = send(&client, &format!("{url}/bug"), &[("x-api-key", "k")]).await;
    assert_eq!(bug.status, 500);
    assert_eq!(manager.key("k").rate(), Some(10.0));
    let failed = send(&client, &format!("{url}/fail"), &[("x-api-key", "k")]).await;
    assert_eq!(failed.status, 503);
    let lowered = manager.key("k").rate().unwrap();
    assert!(lowered < 10.0, "{lowered}");
    clock.advance(Duration::from_secs(1));
    assert_eq!(
        send(&client, &format!("{url}/ok"), &[("x-api-key", "k")])
            .await
            .status,
        200
    );
    assert!(manager.key("k").rate().unwrap() >= lowered);

    assert_eq!(
        send(&client, &format!("{url}/fail"), &[("x-api-key", "fixed")])
            .await
            .status,
        503
    );
    assert_eq!(manager.key("fixed").rate(), Some(10.0));
}

#[tokio::test]
async fn the_priority_comes_from_the_named_header_and_a_bad_one_is_400() {
    let _alone = crate::support::alone();
    let clock = ManualClock::new();
    let layer = ThrottleLayer::builder(quota_manager(&clock), KeyExtractor::header("x-api-key"))
        .priority_header("x-priority")
        .build()
        .unwrap();
    let url = serve(hello().layer(layer)).await;
    let client = reqwest::Client::new();
    let ok = send(&client, &url, &[("x-api-key", "k"), ("x-priority", "2")]).await;
    assert_eq!(ok.status, 200);
    let bad = send(
        &client,
        &url,
        &[("x-api-key", "k"), ("x-priority", "urgent")],
    )
    .await;
    assert_eq!(bad.status, 400);
    assert_eq!(
        bad.body,
        "400 Bad Request: header `x-priority` must be a priority level from 0 to 3, got \"urgent\"\n"
    );
}

/// A client's priority beyond the manager's levels is the client's
/// mistake: 400, whatever the manager's policy for programmatic callers
/// says (`Reject` would answer 500, `Panic` would drop the connection).
#[tokio::test]
async fn a_priority_header_beyond_the_levels_is_400_whatever_the_policy() {
    let _alone = crate::support::alone();
    use portcullis::priority::OutOfRange;
    for policy in [
        OutOfRange::ClampToLowest,
        OutOfRange::Reject,
        OutOfRange::Panic,
    ] {
        let manager = ThrottleManager::<String>::builder()
            .rate(RateConfig::adaptive(20.0).burst(5))
            .out_of_range(policy)
            .build()
            .unwrap();
        let layer = ThrottleLayer::builder(manager, KeyExtractor::header("x-api-key"))
            .priority_header("x-priority")
            .build()
            .unwrap();
        let url = serve(hello().layer(layer)).await;
        let client = reqwest::Client::new();
        for (level, status) in [("3", 200), ("4", 400), ("9", 400)] {
            let answer = send(&client, &url, &[("x-api-key", "k"), ("x-priority", level)]).await;
            assert_eq!(answer.status, status, "{policy:?}, priority {level}");
        }
    }
}

/// A million distinct clients through a key space of 10,000: the cap
/// holds throughout, and a client in debt is never forgotten (which would
/// forgive its debt). In-process, through the real router and layer.
#[tokio::test]
async fn a_million_clients_stay_within_the_key_space_and_debt_is_kept() {
    let _alone = crate::support::alone();
    use tower::ServiceExt;

    const CAP: usize = 10_000;
    let clock = ManualClock::new();
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(1.0).bounds(1.0, 1.0))
        // One call per 1,000 s: in debt for the whole flood.
        .tier(
            "debtor",
            Tier::new().rate(RateConfig::adaptive(0.001).bounds(0.001, 0.001)),
        )
        .tier_of(|key: &String| (key == "debtor").then_some("debtor"))
        .key_space(KeySpaceConfig::new().max_keys(CAP))
        .clock(clock.clone())
        .build()
        .unwrap();
    let app = hello().layer(ThrottleLayer::new(
        manager.clone(),
        KeyExtractor::header("x-api-key"),
    ));
    let call = |key: String| {
        let app = app.clone();
        async move {
            let request = axum::http::Request::get("/")
                .header("x-api-key", key)
                .body(axum::body::Body::empty())
                .unwrap();
            app.oneshot(request).await.unwrap().status().as_u16()
        }
    };

    assert_eq!(call("debtor".into()).await, 200);
    let (mut admitted, mut no_room) = (0, 0);
    for i in 0..1_000_000 {
        if i % CAP == 0 {
            clock.advance(Duration::from_secs(1)); // the last batch is debt-free now
        }
        match call(format!("client-{i}")).await {
            200 => admitted += 1,
            503 => no_room += 1,
            other => panic!("unexpected status {other}"),
        }
        if i % 1_000 == 0 {
            assert!(manager.keys().len() <= CAP, "{} keys", manager.keys().len());
        }
    }
    assert!(manager.keys().len() <= CAP);
    assert!(
        admitted >= 990_000,
        "{admitted} admitted, {no_room} refused"
    );
    // 100 s of the debtor's 1,000 s have passed: still refused.
    assert_eq!(call("debtor".into()).await, 429);
}

/// A handler whose future fails (the inner service's error, not an HTTP
/// status) is overload for the key: its adaptive rate falls, and the
/// error reaches the caller unchanged.
#[tokio::test]
async fn an_inner_service_error_is_overload_for_the_key() {
    use tower::{Layer, ServiceExt};
    let _alone = crate::support::alone();
    let manager = ThrottleManager::<String>::builder()
        .rate(
            RateConfig::adaptive(10.0)
                .bounds(1.0, 100.0)
                .decrease_factor(0.5),
        )
        .build()
        .unwrap();
    let failing = tower::service_fn(|_: http::Request<axum::body::Body>| async {
        Err::<http::Response<axum::body::Body>, _>(std::io::Error::other("backend gone"))
    });
    let service =
        ThrottleLayer::new(manager.clone(), KeyExtractor::header("x-api-key")).layer(failing);
    let request = http::Request::builder()
        .header("x-api-key", "k")
        .body(axum::body::Body::empty())
        .unwrap();
    let error = service.oneshot(request).await.unwrap_err();
    assert_eq!(error.to_string(), "backend gone");
    assert_eq!(manager.key("k").rate(), Some(5.0));
}

/// The layer is ready when the service it wraps is: a server (or a
/// load balancer in front of it) that waits on readiness sees the inner
/// service's back-pressure through it.
#[tokio::test]
async fn the_layer_is_ready_only_when_the_inner_service_is() {
    use std::task::Poll;
    use tower::{Layer, Service, ServiceExt};
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(100.0))
        .build()
        .unwrap();
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    let released = Arc::new(tokio::sync::Mutex::new(Some(released)));
    let handler = tower::service_fn(move |_: http::Request<axum::body::Body>| {
        let released = released.clone();
        async move {
            if let Some(released) = released.lock().await.take() {
                let _ = released.await;
            }
            Ok::<_, std::convert::Infallible>(http::Response::new(axum::body::Body::empty()))
        }
    });
    let one_at_a_time = tower::limit::ConcurrencyLimit::new(handler, 1);
    let mut service =
        ThrottleLayer::new(manager, KeyExtractor::header("x-api-key")).layer(one_at_a_time);
    let request = || {
        http::Request::builder()
            .header("x-api-key", "k")
            .body(axum::body::Body::empty())
            .unwrap()
    };
    let first = service.ready().await.unwrap().call(request());
    let first = tokio::spawn(first);
    let pending = std::future::poll_fn(|cx| Poll::Ready(service.poll_ready(cx).is_pending())).await;
    assert!(pending, "ready while the inner service has no room");
    release.send(()).unwrap();
    first.await.unwrap().unwrap();
    service.ready().await.unwrap();
}

/// A handler that gives no answer within the manager's call timeout is
/// dropped: the request is answered 503 (a gRPC one `DEADLINE_EXCEEDED`)
/// when the timeout ends, its slot is free, and the key's rate counts it
/// as overload.
#[tokio::test(start_paused = true)]
async fn the_call_timeout_bounds_the_handler_and_frees_its_slot() {
    use tower::{Layer, ServiceExt};
    let manager = ThrottleManager::<String>::builder()
        .rate(
            RateConfig::adaptive(10.0)
                .burst(5)
                .bounds(1.0, 100.0)
                .decrease_factor(0.5),
        )
        .bulkhead(BulkheadConfig::new(1))
        .time_limits(TimeLimits::new().call_timeout(Duration::from_millis(200)))
        .build()
        .unwrap();
    let stuck = tower::service_fn(|_: http::Request<axum::body::Body>| async {
        tokio::time::sleep(Duration::from_secs(60)).await;
        Ok::<_, std::convert::Infallible>(http::Response::new(axum::body::Body::from("late")))
    });
    let service =
        ThrottleLayer::new(manager.clone(), KeyExtractor::header("x-api-key")).layer(stuck);
    let request = |content_type: &str| {
        http::Request::builder()
            .header("x-api-key", "k")
            .header("content-type", content_type)
            .body(axum::body::Body::empty())
            .unwrap()
    };
    let started = tokio::time::Instant::now();
    let answer = service
        .clone()
        .oneshot(request("text/plain"))
        .await
        .unwrap();
    assert_eq!(started.elapsed(), Duration::from_millis(200));
    assert_eq!(answer.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body = http_body_util::BodyExt::collect(answer.into_body())
        .await
        .unwrap()
        .to_bytes();
    assert_eq!(
        body,
        "503 Service Unavailable: no answer within the call timeout of 200ms\n"
    );
    assert_eq!(manager.key("k").snapshot().unwrap().active, Some(0));
    assert_eq!(manager.key("k").rate(), Some(5.0), "a timeout is overload");

    let answer = service.oneshot(request("application/grpc")).await.unwrap();
    assert_eq!(started.elapsed(), Duration::from_millis(400));
    assert_eq!(answer.status(), StatusCode::OK);
    assert_eq!(answer.headers()["grpc-status"], "4");
    assert_eq!(
        answer.headers()["grpc-message"],
        "no answer within the call timeout of 200ms"
    );
}

/// Every misconfiguration of a layer is refused at `build()`, each named:
/// a key header that is no header name, an IPv6 prefix on a header key,
/// a priority header that is no header name, a route that is no path.
/// Nothing is left to log lines or to 400s at run time.
#[test]
fn every_problem_of_a_layer_is_refused_at_build_with_its_name() {
    let clock = ManualClock::new();
    let error = ThrottleLayer::builder(
        quota_manager(&clock),
        KeyExtractor::header("bad name").ipv6_prefix(56),
    )
    .priority_header("bad header")
    .route("login", quota_manager(&clock))
    .route("/search?q", quota_manager(&clock))
    .build()
    .unwrap_err();
    let fields: Vec<&str> = error.problems().iter().map(|p| p.field()).collect();
    assert_eq!(
        fields,
        [
            "extractor.header",
            "extractor.ipv6_prefix",
            "priority_header",
            "route",
            "route"
        ]
    );
    assert_eq!(
        error.problems()[4].message(),
        r#"must be a path, without '?' or '#', got "/search?q""#
    );
    // A prefix of 0 bits on an address key, alone.
    let error = ThrottleLayer::builder(
        quota_manager(&clock),
        KeyExtractor::peer_ip().ipv6_prefix(0),
    )
    .build()
    .unwrap_err();
    assert_eq!(
        error.to_string(),
        "invalid configuration: extractor.ipv6_prefix: must be from 1 to 128 bits, got 0"
    );
    // The same options, made right, build.
    ThrottleLayer::builder(
        quota_manager(&clock),
        KeyExtractor::peer_ip().ipv6_prefix(56),
    )
    .priority_header("x-priority")
    .route("/login", quota_manager(&clock))
    .build()
    .unwrap();
}

/// An HTTP request's deadline comes from the layer's deadline header: one
/// that waits in the bulkhead's queue past it is answered 408 then (the
/// client's own limit), saying why; a value that is no number of
/// milliseconds is the client's mistake.
#[tokio::test]
async fn the_deadline_header_bounds_a_request_s_wait_in_the_queue() {
    let _alone = crate::support::alone();
    let manager = ThrottleManager::<String>::builder()
        .bulkhead(
            BulkheadConfig::new(1)
                .queue(4)
                .queue_timeout(Duration::from_secs(30)),
        )
        .build()
        .unwrap();
    let layer = ThrottleLayer::builder(manager.clone(), KeyExtractor::header("x-api-key"))
        .deadline_header("x-request-timeout-ms")
        .build()
        .unwrap();
    let url = serve(hello().layer(layer)).await;
    let client = reqwest::Client::new();
    let busy = manager.acquire("k", Priority::HIGH).await.unwrap(); // the one slot
    let late = send(
        &client,
        &url,
        &[("x-api-key", "k"), ("x-request-timeout-ms", "100")],
    )
    .await;
    assert_eq!(late.status, 408);
    assert_eq!(
        late.body,
        "408 Request Timeout: past the caller's deadline\n"
    );
    assert_eq!(manager.key("k").snapshot().unwrap().queued, Some(0));
    let bad = send(
        &client,
        &url,
        &[("x-api-key", "k"), ("x-request-timeout-ms", "soon")],
    )
    .await;
    assert_eq!(bad.status, 400);
    assert_eq!(
        bad.body,
        "400 Bad Request: header `x-request-timeout-ms` must be a whole number of milliseconds, got \"soon\"\n"
    );
    busy.success();
    let served = send(
        &client,
        &url,
        &[("x-api-key", "k"), ("x-request-timeout-ms", "1000")],
    )
    .await;
    assert_eq!(served.status, 200);
}

/// The server layer's call timeout runs on the manager's clock: with a
/// `ManualClock`, a handler that never answers is cut off, and the request
/// answered 503, when that clock passes the timeout, and not before,
/// however much real time passes.
#[tokio::test]
async fn the_call_timeout_runs_on_the_managers_clock() {
    let clock = ManualClock::new();
    let manager = ThrottleManager::<String>::builder()
        .bulkhead(BulkheadConfig::new(1))
        .time_limits(TimeLimits::new().call_timeout(Duration::from_secs(30)))
        .clock(clock.clone())
        .build()
        .unwrap();
    let entered = Arc::new(tokio::sync::Notify::new());
    let handler_entered = Arc::clone(&entered);
    let app = Router::new()
        .route(
            "/",
            get(move || {
                handler_entered.notify_one();
                std::future::pending::<&'static str>()
            }),
        )
        .layer(ThrottleLayer::new(
            manager.clone(),
            KeyExtractor::header("x-api-key"),
        ));
    let base = serve(app).await;
    let answer = tokio::spawn(async move {
        let client = reqwest::Client::new();
        let response = client.get(&base).header("x-api-key", "k").send().await;
        response.unwrap().status()
    });
    entered.notified().await;
    clock.advance(Duration::from_secs(29));
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !answer.is_finished(),
        "answered before the manager's clock passed the timeout"
    );
    assert_eq!(manager.key("k").snapshot().unwrap().active, Some(1));
    clock.advance(Duration::from_secs(1));
    let status = tokio::time::timeout(Duration::from_secs(20), answer)
        .await
        .expect("answered once the manager's clock passed the timeout")
        .unwrap();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(manager.key("k").snapshot().unwrap().active, Some(0));
}
