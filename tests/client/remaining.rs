//! A provider's count of what remains, read from its headers by the
//! middleware, holds a host to it.

use std::time::{Duration, Instant};

use axum::http::StatusCode;
use portcullis::RateConfig;

use crate::{Server, client, manager};

/// When four requests in turn reached a host whose first answer carried
/// `headers`, through a key at 1 a second with a burst of 10.
async fn four_requests_after(headers: Vec<(&'static str, String)>) -> Vec<Instant> {
    let manager = manager(RateConfig::per_second(1).burst(10));
    let server = Server::first(StatusCode::OK, headers).await;
    let client = client(&manager);
    for _ in 0..4 {
        let response = client.get(server.url()).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    server.arrivals()
}

/// A provider's count of what remains, lower than the key's own, holds the
/// key to it: told 2 of 10 remain, the key sends two more at once and the
/// next only once its rate (1 a second) has refilled one.
#[tokio::test]
async fn a_providers_count_of_what_remains_holds_the_host_to_it() {
    let told = vec![("x-ratelimit-remaining-requests", "2".into())];
    let arrivals = four_requests_after(told).await;
    assert!(arrivals[2] - arrivals[0] < Duration::from_millis(500));
    let next = arrivals[3] - arrivals[2];
    assert!(
        next >= Duration::from_millis(900),
        "asked again after {next:?}"
    );
}

/// Issue 80: a reset already in the past means the limit is whole again.
/// An Anthropic answer saying 1 request of 50 remains until a time gone by
/// holds nothing back: the next three go at once, from the key's burst of
/// 10. (Before, the key owed 9 of its 10 and stalled.)
#[tokio::test]
async fn a_reset_in_the_past_means_the_limit_is_whole_again() {
    let past = "2001-01-01T00:00:00Z".to_owned();
    let told = vec![
        ("anthropic-ratelimit-requests-remaining", "1".into()),
        ("anthropic-ratelimit-requests-limit", "50".into()),
        ("anthropic-ratelimit-requests-reset", past),
    ];
    let arrivals = four_requests_after(told).await;
    let took = arrivals[3] - arrivals[0];
    assert!(
        took < Duration::from_millis(500),
        "four requests in {took:?}"
    );
}

/// Issue 80: a spent IETF `RateLimit` quota named as one of the manager's
/// limits moves that limit only: the key's requests go on at their rate,
/// while the limit itself is spent until the quota's reset.
#[tokio::test]
async fn a_spent_named_ietf_quota_moves_its_limit_not_the_requests() {
    let manager = portcullis::ThrottleManager::<String>::builder()
        .rate(RateConfig::per_second(1).burst(10))
        .limit("tokens", RateConfig::per_second(100).burst(1_000))
        .build()
        .unwrap();
    let server = Server::first(
        StatusCode::OK,
        vec![("ratelimit", "\"tokens\";r=0;t=300".into())],
    )
    .await;
    let client = client(&manager);
    for _ in 0..2 {
        // Paused for the quota's 300 s, a request would not come back.
        let sent = client.get(server.url()).send();
        let response = tokio::time::timeout(Duration::from_secs(5), sent)
            .await
            .expect("the requests paused for the tokens' reset")
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    let tokens = manager.limit("tokens").unwrap();
    let left = tokens.peek(&server.key()).map(|left| left.remaining);
    assert_eq!(left, Some(0), "the tokens limit is spent until its reset");
}
