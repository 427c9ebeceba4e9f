//! A call through the client middleware ends when its response body ends:
//! a slowly streamed download holds its host's bulkhead slot while the
//! caller reads it, a body that breaks off midway is overload, and one
//! dropped unread reports what its head said. Real sockets and real time;
//! what is asserted are counts, not durations.

use std::sync::Arc;

use portcullis::client::ThrottleMiddleware;
use portcullis::{BulkheadConfig, ThrottleConfig, ThrottleManager};
use reqwest_middleware::ClientWithMiddleware;

use crate::support;
use crate::support::slow_body::{Streams, slow_routes};

/// A server (no layer) with the slow routes; its address.
async fn streaming(streams: &Arc<Streams>) -> std::net::SocketAddr {
    let app = slow_routes(streams);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// A manager with a bulkhead of 2 and room for everyone in its queue, and
/// a throttle that counts outcomes but sheds nothing.
fn two_at_a_time() -> ThrottleManager<String> {
    ThrottleManager::<String>::builder()
        .throttle(ThrottleConfig::new())
        .random_source(|| 0.999)
        .bulkhead(BulkheadConfig::new(2).queue(16))
        .build()
        .unwrap()
}

fn client(middleware: ThrottleMiddleware) -> ClientWithMiddleware {
    reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(middleware)
        .build()
}

/// Eight downloads at once, each read to its end; how many bytes each got.
async fn eight_downloads(client: &ClientWithMiddleware, url: String) -> Vec<usize> {
    let downloads: Vec<_> = (0..8)
        .map(|_| {
            let (client, url) = (client.clone(), url.clone());
            tokio::spawn(async move {
                let response = client.get(url).send().await.unwrap();
                response.bytes().await.unwrap().len()
            })
        })
        .collect();
    let mut sizes = Vec::new();
    for download in downloads {
        sizes.push(download.await.unwrap());
    }
    sizes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_download_holds_its_slot_until_its_body_is_read() {
    let _alone = support::alone();
    let streams = Arc::new(Streams::default());
    let addr = streaming(&streams).await;
    let manager = two_at_a_time();
    let client = client(ThrottleMiddleware::new(manager.clone()));
    let sizes = eight_downloads(&client, format!("http://{addr}/stream")).await;
    assert_eq!(sizes, [1 << 20; 8]);
    assert!(
        streams.most() <= 2,
        "{} bodies streamed at once",
        streams.most()
    );
    // Each download was a success, counted when its body ended.
    let snapshot = manager.key(&addr.to_string()).snapshot().unwrap();
    let high = snapshot.priorities[0];
    assert_eq!((high.requests, high.accepts), (8, 8));
    assert_eq!(snapshot.active, Some(0));
}

/// The option that keeps the old behaviour: the slot is freed when the
/// headers arrive, so the bulkhead no longer bounds the downloads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn released_at_headers_the_downloads_escape_the_bulkhead() {
    let _alone = support::alone();
    let streams = Arc::new(Streams::default());
    let addr = streaming(&streams).await;
    let manager = two_at_a_time();
    let middleware = ThrottleMiddleware::new(manager.clone()).release_at_headers(true);
    let sizes = eight_downloads(&client(middleware), format!("http://{addr}/stream")).await;
    assert_eq!(sizes, [1 << 20; 8]);
    assert!(
        streams.most() > 2,
        "{} bodies streamed at once",
        streams.most()
    );
}

#[tokio::test]
async fn a_body_that_breaks_off_is_overload_and_one_dropped_unread_is_its_heads_outcome() {
    let streams = Arc::new(Streams::default());
    let addr = streaming(&streams).await;
    let manager = two_at_a_time();
    let client = client(ThrottleMiddleware::new(manager.clone()));
    let key = addr.to_string();
    let counted = || {
        let snapshot = manager.key(&key).snapshot().unwrap();
        let high = snapshot.priorities[0];
        (high.requests, high.accepts, snapshot.active)
    };

    let broken = client
        .get(format!("http://{addr}/broken"))
        .send()
        .await
        .unwrap();
    assert_eq!(counted(), (0, 0, Some(1)), "in flight until its body ends");
    assert!(broken.bytes().await.is_err(), "the body broke off");
    assert_eq!(counted(), (1, 0, Some(0)));

    let unread = client
        .get(format!("http://{addr}/stream"))
        .send()
        .await
        .unwrap();
    assert_eq!(counted(), (1, 0, Some(1)));
    // The response that carries the permit is still the one reqwest made.
    assert_eq!(unread.url().as_str(), format!("http://{addr}/stream"));
    assert_eq!(unread.remote_addr(), Some(addr));
    drop(unread);
    assert_eq!(
        counted(),
        (2, 1, Some(0)),
        "its head's success: a request and an accept"
    );
}
