//! The service guard on a real axum server over loopback, called by a real
//! client: who it sheds, what a refusal takes from the client's own
//! controls (nothing), and two portcullis layers stacked, each counting
//! only its own answers.
//!
//! A gated handler holds each request until the test lets it go, so which
//! request holds the guard's slot and which waits is set by the test, not
//! by timing; the managers read a [`ManualClock`] where rates are read.

#![cfg(feature = "axum")]

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use portcullis::clock::ManualClock;
use portcullis::server::{KeyExtractor, ThrottleLayer};
use portcullis::{BulkheadConfig, RateConfig, ThrottleConfig, ThrottleManager};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

use crate::layer::{Answer, send, serve};

/// A service whose every request waits for a permit of `gate`.
fn gated(gate: &Arc<Semaphore>) -> Router {
    let gate = Arc::clone(gate);
    Router::new().route(
        "/",
        get(move || {
            let gate = Arc::clone(&gate);
            async move {
                gate.acquire().await.unwrap().forget();
                "done"
            }
        }),
    )
}

/// A gated service behind a layer of `clients` (priorities from
/// `x-priority`) with a service guard of `limit`: its URL, the guard's
/// manager, and the gate that lets its requests go.
async fn behind_guard(
    clients: ThrottleManager<String>,
    limit: BulkheadConfig,
) -> (String, ThrottleManager<String>, Arc<Semaphore>) {
    let layer = ThrottleLayer::builder(clients, KeyExtractor::header("x-api-key"))
        .priority_header("x-priority")
        .service_guard(limit)
        .build()
        .unwrap();
    let guard = layer.service_guard().unwrap().clone();
    let gate = Arc::new(Semaphore::new(0));
    let url = serve(gated(&gate).layer(layer)).await;
    (url, guard, gate)
}

/// Waits (on real time, at most 10 s) until `ready` holds.
async fn until(what: &str, mut ready: impl FnMut() -> bool) {
    for _ in 0..10_000 {
        if ready() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("waited 10 s for {what}");
}

/// Sends a request from client `key` at priority `level` in a task.
fn sent(url: &str, key: &'static str, level: &'static str) -> JoinHandle<Answer> {
    let url = url.to_owned();
    tokio::spawn(async move {
        let client = reqwest::Client::new();
        send(&client, &url, &[("x-api-key", key), ("x-priority", level)]).await
    })
}

/// `request`'s answer, which must come within 10 s (a request left
/// waiting forever fails the test rather than hanging it).
async fn within(request: JoinHandle<Answer>) -> Answer {
    let answer = tokio::time::timeout(Duration::from_secs(10), request).await;
    answer.expect("an answer within 10 s").unwrap()
}

/// The guard's figures for the whole service: (in flight, queued).
fn load(guard: &ThrottleManager<String>) -> (Option<u32>, Option<u32>) {
    let snapshot = guard.key("/").snapshot();
    snapshot.map_or((None, None), |s| (s.active, s.queued))
}

/// Clients' controls: a quota of `per_second`, `burst` at once, on a
/// clock that stands still.
fn quota(per_second: u32, burst: u32) -> ThrottleManager<String> {
    ThrottleManager::<String>::builder()
        .rate(RateConfig::per_second(per_second).burst(burst))
        .clock(ManualClock::new())
        .build()
        .unwrap()
}

/// Clients' controls that never refuse here: for a layer that is there
/// for its guard.
fn roomy() -> ThrottleManager<String> {
    ThrottleManager::<String>::builder()
        .rate(RateConfig::per_second(10_000).burst(1_000))
        .build()
        .unwrap()
}

// ---- The public contract of the issue, as written ----

fn contract() -> Result<(), portcullis::error::ConfigError> {
    let clients = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_second(20).burst(5))
        .build()?;
    let layer = ThrottleLayer::builder(clients, KeyExtractor::header("x-api-key"))
        .priority_header("x-priority")
        .service_guard(BulkheadConfig::adaptive().queue(64))
        .build()?;
    let _app: axum::Router = axum::Router::new()
        .route("/", axum::routing::get(|| async { "ok" }))
        .layer(layer);
    Ok(())
}

#[test]
fn the_service_guard_contract_builds() {
    contract().unwrap();
}

// ---- Who is shed ----

/// The service at its limit (one slot, one place in the queue): a LOW
/// request waits; a HIGH one (level 0) arrives, pushes it out (503) and takes
/// the next free slot.
#[tokio::test]
async fn a_lower_priority_is_refused_before_a_higher_one_waits() {
    let _alone = crate::support::alone();
    let clients = quota(100, 10);
    let (url, guard, gate) = behind_guard(clients.clone(), BulkheadConfig::new(1).queue(1)).await;

    let first = sent(&url, "a", "0");
    until("the first request in flight", || {
        load(&guard) == (Some(1), Some(0))
    })
    .await;
    let low = sent(&url, "b", "3");
    until("the LOW request queued", || {
        load(&guard) == (Some(1), Some(1))
    })
    .await;
    let high = sent(&url, "c", "0");
    let low = within(low).await;
    assert_eq!(low.status, 503, "{low:?}");
    assert!(low.body.contains("dropped"), "{low:?}");
    // The refusal took nothing from its client: its rate token is back.
    assert_eq!(clients.peek("b").unwrap().remaining, 10);
    assert_eq!(load(&guard), (Some(1), Some(1))); // the HIGH one waits
    gate.add_permits(2);
    assert_eq!(within(first).await.status, 200);
    assert_eq!(within(high).await.status, 200);
}

/// With room in its queue, the guard gives its next free slot to the
/// more important waiter, whoever came first.
#[tokio::test]
async fn the_guards_queue_serves_the_more_important_first() {
    let _alone = crate::support::alone();
    let clients = quota(100, 10);
    let (url, guard, gate) = behind_guard(clients, BulkheadConfig::new(1).queue(4)).await;

    let first = sent(&url, "a", "1");
    until("the first request in flight", || {
        load(&guard) == (Some(1), Some(0))
    })
    .await;
    let low = sent(&url, "b", "3");
    until("the LOW request queued", || load(&guard).1 == Some(1)).await;
    let high = sent(&url, "c", "1");
    until("the HIGH request queued", || load(&guard).1 == Some(2)).await;
    gate.add_permits(1); // the first ends; the HIGH one has the slot
    assert_eq!(within(first).await.status, 200);
    until("the HIGH request in flight", || load(&guard).1 == Some(1)).await;
    assert!(!low.is_finished());
    gate.add_permits(2);
    assert_eq!(within(high).await.status, 200);
    assert_eq!(within(low).await.status, 200);
}

// ---- A refusal takes nothing from the other control ----

/// A request the guard refuses gives its client's key back what it took
/// (its rate token) and counts in none of its client's figures; admitted,
/// both learn its outcome.
#[tokio::test]
async fn a_request_the_guard_refuses_takes_nothing_from_its_client() {
    let _alone = crate::support::alone();
    let clients = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_second(10).burst(10))
        .throttle(ThrottleConfig::new())
        .clock(ManualClock::new())
        .build()
        .unwrap();
    let (url, guard, gate) = behind_guard(clients.clone(), BulkheadConfig::new(1)).await;
    let client = reqwest::Client::new();

    let busy = sent(&url, "x", "1");
    until("the guard's slot taken", || load(&guard).0 == Some(1)).await;
    for _ in 0..3 {
        let refused = send(&client, &url, &[("x-api-key", "a")]).await;
        assert_eq!(refused.status, 503, "{refused:?}");
        assert!(refused.body.contains("bulkhead full"), "{refused:?}");
    }
    let a = clients.key("a").snapshot().unwrap();
    assert_eq!(clients.peek("a").unwrap().remaining, 10);
    assert!(
        a.priorities
            .iter()
            .all(|p| p.requests == 0 && p.accepts == 0)
    );

    gate.add_permits(2);
    assert_eq!(within(busy).await.status, 200);
    let served = send(&client, &url, &[("x-api-key", "a")]).await;
    assert_eq!(served.status, 200);
    assert_eq!(clients.peek("a").unwrap().remaining, 9);
    let a = clients.key("a").snapshot().unwrap();
    assert_eq!(a.priorities.iter().map(|p| p.accepts).sum::<u64>(), 1);
    assert_eq!(load(&guard), (Some(0), Some(0)));
}

/// A client over its quota is answered 429 by its own controls and never
/// reaches the guard.
#[tokio::test]
async fn a_client_over_its_quota_takes_nothing_from_the_guard() {
    let _alone = crate::support::alone();
    let clients = quota(1, 1);
    let layer = ThrottleLayer::builder(clients, KeyExtractor::header("x-api-key"))
        .service_guard(BulkheadConfig::adaptive().queue(8))
        .build()
        .unwrap();
    let guard = layer.service_guard().unwrap().clone();
    let url = serve(
        Router::new()
            .route("/", get(|| async { "ok" }))
            .layer(layer),
    )
    .await;
    let client = reqwest::Client::new();
    assert_eq!(send(&client, &url, &[("x-api-key", "a")]).await.status, 200);
    let before = guard.key("/").snapshot().unwrap();
    for _ in 0..5 {
        assert_eq!(send(&client, &url, &[("x-api-key", "a")]).await.status, 429);
    }
    let after = guard.key("/").snapshot().unwrap();
    assert_eq!(after.concurrency_limit, before.concurrency_limit);
    assert_eq!((after.active, after.queued), (Some(0), Some(0)));
}

// ---- Two layers stacked: each counts its own answers once ----

/// A gated service behind a service guard of one slot in a layer of its
/// own, inside a per-client layer of `outer`; the guard's slot taken by a
/// request held at the gate. Its URL, the gate, and the held request.
async fn around_a_busy_guard(
    outer: &ThrottleManager<String>,
) -> (String, Arc<Semaphore>, JoinHandle<Answer>) {
    let inner = ThrottleLayer::builder(roomy(), KeyExtractor::header("x-api-key"))
        .service_guard(BulkheadConfig::new(1))
        .build()
        .unwrap();
    let guard = inner.service_guard().unwrap().clone();
    let gate = Arc::new(Semaphore::new(0));
    let app = gated(&gate).layer(inner).layer(ThrottleLayer::new(
        outer.clone(),
        KeyExtractor::header("x-api-key"),
    ));
    let url = serve(app).await;
    let busy = sent(&url, "x", "1");
    until("the guard's slot taken", || load(&guard).0 == Some(1)).await;
    (url, gate, busy)
}

/// A per-client layer around a service guard in a layer of its own: the
/// guard's 503s teach the outer layer nothing (its adaptive rate and its
/// throttle's counts stay as they were). Without the mark on the inner
/// layer's answers, each 503 would count as the handler's overload.
#[tokio::test]
async fn an_outer_layer_learns_nothing_from_an_inner_guards_refusals() {
    let _alone = crate::support::alone();
    let outer = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(10.0).burst(10).bounds(1.0, 100.0))
        .throttle(ThrottleConfig::new())
        .clock(ManualClock::new())
        .build()
        .unwrap();
    let (url, gate, busy) = around_a_busy_guard(&outer).await;
    let client = reqwest::Client::new();
    for _ in 0..5 {
        assert_eq!(send(&client, &url, &[("x-api-key", "a")]).await.status, 503);
    }
    let a = outer.key("a").snapshot().unwrap();
    assert_eq!(a.rate, Some(10.0));
    assert!(
        a.priorities
            .iter()
            .all(|p| p.requests == 0 && p.accepts == 0),
        "{a:?}"
    );
    gate.add_permits(1);
    assert_eq!(within(busy).await.status, 200);
}

/// Issue 80: two layers work as one. A per-client quota around a service
/// guard in a layer of its own: the 30 requests the guard refuses give
/// back the rate tokens the outer layer took for them (the one layer with
/// its guard takes none), so the client still has its whole burst of 40.
/// Before, its tokens went 40 -> 10 for requests the service never served.
#[tokio::test]
async fn an_inner_guards_refusals_spend_no_token_of_the_outer_layer() {
    let _alone = crate::support::alone();
    let outer = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_second(1).burst(40))
        .clock(ManualClock::new())
        .build()
        .unwrap();
    let (url, gate, busy) = around_a_busy_guard(&outer).await;
    let client = reqwest::Client::new();
    for _ in 0..30 {
        assert_eq!(send(&client, &url, &[("x-api-key", "a")]).await.status, 503);
    }
    let mut left = 0;
    while outer.try_acquire("a", portcullis::Priority::HIGH).is_ok() {
        left += 1;
    }
    assert_eq!(left, 40, "the client's burst after the guard's refusals");
    gate.add_permits(1);
    assert_eq!(within(busy).await.status, 200);
}

/// The reverse: a service guard that learns its limit around a per-client
/// quota in a layer of its own: the quota's 429s (overload, by the one
/// table) leave the guard's learned limit where it was.
#[tokio::test]
async fn an_outer_guard_learns_nothing_from_an_inner_quotas_refusals() {
    let _alone = crate::support::alone();
    let quota = quota(1, 1);
    let outer = ThrottleLayer::builder(roomy(), KeyExtractor::header("x-api-key"))
        .service_guard(BulkheadConfig::adaptive().bounds(2, 100))
        .build()
        .unwrap();
    let guard = outer.service_guard().unwrap().clone();
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(ThrottleLayer::new(quota, KeyExtractor::header("x-api-key")))
        .layer(outer);
    let url = serve(app).await;
    let client = reqwest::Client::new();
    assert_eq!(send(&client, &url, &[("x-api-key", "a")]).await.status, 200);
    let before = guard.key("/").snapshot().unwrap().concurrency_limit;
    for _ in 0..20 {
        assert_eq!(send(&client, &url, &[("x-api-key", "a")]).await.status, 429);
    }
    assert_eq!(guard.key("/").snapshot().unwrap().concurrency_limit, before);
}

// ---- Across the wire ----

/// A client of a portcullis server reads the guard's 503 as any other: as
/// overload, its rate for the server falls.
#[cfg(feature = "reqwest")]
#[tokio::test]
async fn a_client_slows_down_on_the_guards_503() {
    use portcullis::client::ThrottleMiddleware;

    let _alone = crate::support::alone();
    let (url, guard, gate) = behind_guard(roomy(), BulkheadConfig::new(1)).await;
    let busy = sent(&url, "x", "1");
    until("the guard's slot taken", || load(&guard).0 == Some(1)).await;

    let hosts = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(10.0).bounds(1.0, 100.0))
        .build()
        .unwrap();
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(ThrottleMiddleware::new(hosts.clone()))
        .build();
    let answer = client
        .get(&url)
        .header("x-api-key", "a")
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 503);
    let host = url.trim_start_matches("http://");
    assert!(hosts.key(host).rate().unwrap() < 10.0);
    gate.add_permits(1);
    assert_eq!(within(busy).await.status, 200);
}

// ---- Each refusal counted once ----

/// The guard's refusals count in the guard's metrics (`manager =
/// "service_guard"`), by reason, and nowhere in the clients' manager's:
/// not as a refusal, not as an outcome. The recorder is this thread's, and
/// the server runs on this test's one thread.
#[cfg(feature = "metrics")]
#[tokio::test]
async fn the_guards_refusals_count_in_its_own_metrics_alone() {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    let _alone = crate::support::alone();
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    // Before the managers: each builds its series once, at build.
    let _recording = metrics::set_default_local_recorder(&recorder);
    let clients = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_second(100).burst(10))
        .name("clients")
        .clock(ManualClock::new())
        .build()
        .unwrap();
    let (url, guard, gate) = behind_guard(clients, BulkheadConfig::new(1)).await;
    let client = reqwest::Client::new();
    let busy = sent(&url, "x", "1");
    until("the guard's slot taken", || load(&guard).0 == Some(1)).await;
    for _ in 0..3 {
        assert_eq!(send(&client, &url, &[("x-api-key", "a")]).await.status, 503);
    }

    let counted = |name: &str, manager: &str, label: Option<(&str, &str)>| -> u64 {
        snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .filter(|(key, _, _, _)| {
                let key = key.key();
                let has = |k: &str, v: &str| key.labels().any(|l| l.key() == k && l.value() == v);
                key.name() == name
                    && has("manager", manager)
                    && label.is_none_or(|(k, v)| has(k, v))
            })
            .map(|(_, _, _, value)| match value {
                DebugValue::Counter(n) => n,
                other => panic!("{name}: {other:?}"),
            })
            .sum()
    };
    let rejected = "portcullis_rejected_total";
    assert_eq!(
        counted(rejected, "service_guard", Some(("reason", "full"))),
        3
    );
    assert_eq!(counted(rejected, "clients", None), 0);
    assert_eq!(counted("portcullis_outcomes_total", "clients", None), 0);
    gate.add_permits(1);
    assert_eq!(within(busy).await.status, 200);
}
