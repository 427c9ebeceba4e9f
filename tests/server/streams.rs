//! A call through the server layer ends when its response body ends: a
//! slowly streamed body holds its client's bulkhead slot while it flows,
//! and a body that breaks off midway is overload. On real sockets and
//! real time; what is asserted are counts, not durations.

#![cfg(feature = "axum")]

use std::sync::Arc;

use portcullis::server::{KeyExtractor, ThrottleLayer};
use portcullis::{BulkheadConfig, ThrottleConfig, ThrottleManager};

use crate::layer::serve;
use crate::support;
use crate::support::slow_body::{Streams, slow_routes};

/// A manager with a bulkhead of 2 (no queue: a third call is refused) and
/// a throttle that counts outcomes but sheds nothing.
fn two_at_a_time() -> ThrottleManager<String> {
    ThrottleManager::<String>::builder()
        .throttle(ThrottleConfig::new())
        .random_source(|| 0.999)
        .bulkhead(BulkheadConfig::new(2))
        .build()
        .unwrap()
}

/// A server with the slow routes behind `layer`; its base URL.
async fn streaming(layer: ThrottleLayer, streams: &Arc<Streams>) -> String {
    serve(slow_routes(streams).layer(layer)).await
}

/// Eight clients ask for a stream at once; how many were served it whole
/// and how many were refused.
async fn eight_at_once(url: &str) -> (usize, usize) {
    let client = reqwest::Client::new();
    let calls: Vec<_> = (0..8)
        .map(|_| {
            let request = client.get(format!("{url}/stream")).header("x-api-key", "k");
            tokio::spawn(async move {
                let response = request.send().await.unwrap();
                let status = response.status().as_u16();
                let body = response.bytes().await.unwrap();
                (status, body.len())
            })
        })
        .collect();
    let (mut whole, mut refused) = (0, 0);
    for call in calls {
        match call.await.unwrap() {
            (200, len) => {
                assert_eq!(len, 1 << 20);
                whole += 1;
            }
            (503, _) => refused += 1,
            other => panic!("unexpected answer {other:?}"),
        }
    }
    (whole, refused)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_body_holds_its_slot_until_it_ends() {
    let _alone = support::alone();
    let streams = Arc::new(Streams::default());
    let manager = two_at_a_time();
    let layer = ThrottleLayer::new(manager.clone(), KeyExtractor::header("x-api-key"));
    let url = streaming(layer, &streams).await;
    let (whole, refused) = eight_at_once(&url).await;
    assert_eq!(whole + refused, 8);
    assert!(whole >= 2, "{whole} served");
    assert!(
        streams.most() <= 2,
        "{} bodies streamed at once",
        streams.most()
    );
    // Every stream that ended was a success, and its slot is free again.
    let snapshot = manager.key("k").snapshot().unwrap();
    assert_eq!(snapshot.active, Some(0));
    let high = snapshot.priorities[0];
    assert_eq!((high.requests, high.accepts), (whole as u64, whole as u64));
}

/// The option that keeps the old behaviour: the slot is freed when the
/// head is sent, so the bulkhead no longer bounds the streams.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn released_at_headers_the_streams_escape_the_bulkhead() {
    let _alone = support::alone();
    let streams = Arc::new(Streams::default());
    let layer = ThrottleLayer::builder(two_at_a_time(), KeyExtractor::header("x-api-key"))
        .release_at_headers(true)
        .build()
        .unwrap();
    let url = streaming(layer, &streams).await;
    eight_at_once(&url).await;
    assert!(
        streams.most() > 2,
        "{} bodies streamed at once",
        streams.most()
    );
}

#[tokio::test]
async fn a_body_that_breaks_off_midway_is_overload() {
    let streams = Arc::new(Streams::default());
    let manager = two_at_a_time();
    let layer = ThrottleLayer::new(manager.clone(), KeyExtractor::header("x-api-key"));
    let url = streaming(layer, &streams).await;
    let response = reqwest::Client::new()
        .get(format!("{url}/broken"))
        .header("x-api-key", "k")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.bytes().await.is_err(), "the body broke off");
    let snapshot = manager.key("k").snapshot().unwrap();
    let high = snapshot.priorities[0];
    assert_eq!((high.requests, high.accepts), (1, 0));
    assert_eq!(snapshot.active, Some(0));
}
