//! Per-route quotas in one layer, on a real axum server on loopback with
//! a real client: the same client has other numbers on `/login` and
//! `/search` than on the rest (feature `tower`). The managers read a
//! [`ManualClock`] that does not move, so each quota's count is exact.

#![cfg(feature = "axum")]

use axum::Router;
use axum::routing::get;
use portcullis::clock::ManualClock;
use portcullis::server::{KeyExtractor, ThrottleLayer};
use portcullis::{RateConfig, ThrottleManager};

use crate::layer::serve;

fn quota(clock: &ManualClock, config: RateConfig) -> ThrottleManager<String> {
    ThrottleManager::<String>::builder()
        .rate(config)
        .clock(clock.clone())
        .build()
        .unwrap()
}

/// How many of `tries` requests to `path` as client `key` are answered 200
/// before the first 429, and the `RateLimit-Policy` of the last answer.
async fn admitted(url: &str, path: &str, key: &str, tries: usize) -> (usize, String) {
    let client = reqwest::Client::new();
    let (mut ok, mut policy) = (0, String::new());
    for _ in 0..tries {
        let response = client
            .get(format!("{url}{path}"))
            .header("x-api-key", key)
            .send()
            .await
            .unwrap();
        policy = response.headers()["ratelimit-policy"]
            .to_str()
            .unwrap()
            .to_owned();
        match response.status().as_u16() {
            200 => ok += 1,
            429 => break,
            other => panic!("{path}: status {other}"),
        }
    }
    (ok, policy)
}

#[tokio::test]
async fn each_route_has_its_own_quota_for_the_same_client() {
    let _alone = crate::support::alone();
    let clock = ManualClock::new();
    let layer = ThrottleLayer::builder(
        quota(&clock, RateConfig::per_second(50).burst(10)),
        KeyExtractor::header("x-api-key"),
    )
    .rate_limit_headers(true)
    .route("/login", quota(&clock, RateConfig::per_minute(5).burst(3)))
    .route(
        "/search/",
        quota(&clock, RateConfig::per_second(2).burst(2)),
    )
    .route(
        "/login/sso",
        quota(&clock, RateConfig::per_second(1).burst(1)),
    )
    .build()
    .unwrap();
    let ok = || async { "ok" };
    let app = Router::new()
        .route("/", get(ok))
        .route("/login", get(ok))
        .route("/login/sso", get(ok))
        .route("/login/x", get(ok))
        .route("/logins", get(ok))
        .route("/search", get(ok))
        .route("/search/deep", get(ok))
        .layer(layer);
    let url = serve(app).await;

    // /login and what is under it share the login quota: 3 at once...
    let (login, policy) = admitted(&url, "/login", "alice", 10).await;
    assert_eq!(login, 3);
    assert!(policy.contains("q=5;w=60"), "{policy}"); // the route's own policy
    assert_eq!(admitted(&url, "/login/x", "alice", 10).await.0, 0);
    // ...but the longest prefix wins: /login/sso has one of its own.
    assert_eq!(admitted(&url, "/login/sso", "alice", 10).await.0, 1);
    // /logins is not under /login: the layer's own quota, 10 at once.
    assert_eq!(admitted(&url, "/logins", "alice", 20).await.0, 10);
    // /search (written with a trailing slash) has 2 at once, its subtree too.
    assert_eq!(admitted(&url, "/search", "alice", 10).await.0, 2);
    assert_eq!(admitted(&url, "/search/deep", "alice", 10).await.0, 0);
    // Another client has every quota whole.
    assert_eq!(admitted(&url, "/login", "bob", 10).await.0, 3);
    assert_eq!(admitted(&url, "/", "bob", 20).await.0, 10);
}
