//! A provider's count of what remains, read from its headers by the
//! middleware, holds a host to it.

use std::time::Duration;

use axum::http::StatusCode;
use portcullis::RateConfig;

use crate::{Server, client, manager};

/// A provider's count of what remains, lower than the key's own, holds the
/// key to it: told 2 of 10 remain, the key sends two more at once and the
/// next only once its rate (1 a second) has refilled one.
#[tokio::test]
async fn a_providers_count_of_what_remains_holds_the_host_to_it() {
    let manager = manager(RateConfig::per_second(1).burst(10));
    let server = Server::first(
        StatusCode::OK,
        vec![("x-ratelimit-remaining-requests", "2".into())],
    )
    .await;
    let client = client(&manager);
    for _ in 0..4 {
        let response = client.get(server.url()).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    let arrivals = server.arrivals();
    assert!(arrivals[2] - arrivals[0] < Duration::from_millis(500));
    let next = arrivals[3] - arrivals[2];
    assert!(
        next >= Duration::from_millis(900),
        "asked again after {next:?}"
    );
}
