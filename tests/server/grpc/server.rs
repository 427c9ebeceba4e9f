//! The server layer in front of a real tonic server: refusals a tonic
//! client reads as gRPC statuses, a stream that holds its slot, and an
//! inner service's `UNAVAILABLE` counted as overload.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use portcullis::server::{KeyExtractor, ThrottleLayer};
use portcullis::{BulkheadConfig, RateConfig, ThrottleConfig, ThrottleManager};
use tonic::Code;
use tonic::transport::server::TcpIncoming;
use tonic_health::pb::health_client::HealthClient;

use super::{channel, check, listener, status_of};

/// Serves tonic-health behind `layer` on loopback, each client keyed by
/// its address (tonic's `TcpConnectInfo`); its address.
async fn serve(layer: ThrottleLayer) -> SocketAddr {
    let (listener, addr) = listener().await;
    let (_reporter, health) = tonic_health::server::health_reporter();
    let server = tonic::transport::Server::builder()
        .layer(layer)
        .add_service(health)
        .serve_with_incoming(TcpIncoming::from(listener));
    tokio::spawn(server);
    addr
}

fn per_client(manager: &ThrottleManager<String>) -> ThrottleLayer {
    ThrottleLayer::new(manager.clone(), KeyExtractor::peer_ip())
}

#[tokio::test]
async fn a_call_over_the_rate_is_resource_exhausted_with_a_pushback() {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_hour(1))
        .build()
        .unwrap();
    let mut client = HealthClient::new(channel(serve(per_client(&manager)).await).await);
    client.check(check()).await.unwrap();
    let refused = client.check(check()).await.unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted);
    assert_eq!(refused.message(), "rate limited");
    let pushback: u64 = refused
        .metadata()
        .get("grpc-retry-pushback-ms")
        .unwrap()
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    // The next token is about an hour away.
    assert!((3_500_000..=3_600_000).contains(&pushback), "{pushback} ms");
    // Keyed by the peer's address, from tonic's TcpConnectInfo.
    assert!(manager.key("127.0.0.1").snapshot().is_some());
}

/// A `Watch` is a stream that stays open: it holds the client's one slot
/// while it flows, so a `Check` meanwhile is refused as `UNAVAILABLE`; once
/// the stream is dropped, the slot is free again.
#[tokio::test]
async fn an_open_stream_holds_its_slot_and_a_full_bulkhead_is_unavailable() {
    let manager = ThrottleManager::<String>::builder()
        .bulkhead(BulkheadConfig::new(1))
        .build()
        .unwrap();
    let mut client = HealthClient::new(channel(serve(per_client(&manager)).await).await);
    let mut watch = client.watch(check()).await.unwrap().into_inner();
    assert!(watch.message().await.unwrap().is_some(), "the first status");
    assert_eq!(status_of(&mut client).await, Code::Unavailable);
    assert_eq!(manager.key("127.0.0.1").snapshot().unwrap().active, Some(1));
    drop(watch);
    // The server learns that the stream was dropped when the client's
    // reset arrives: bounded polling, not a fixed sleep.
    for _ in 0..500 {
        if manager.key("127.0.0.1").snapshot().unwrap().active == Some(0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(status_of(&mut client).await, Code::Ok);
}

/// An inner service that answers every call `UNAVAILABLE` (trailers-only,
/// as tonic sends an error before any message).
#[derive(Clone)]
struct Unavailable;

impl<B> tower::Service<http::Request<B>> for Unavailable {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Self::Response, Infallible>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: http::Request<B>) -> Self::Future {
        let response = http::Response::builder()
            .header("content-type", "application/grpc")
            .header("grpc-status", "14")
            .body(tonic::body::Body::empty())
            .unwrap();
        std::future::ready(Ok(response))
    }
}

#[tokio::test]
async fn an_inner_unavailable_lowers_the_clients_rate_and_counts_as_a_failure() {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(10.0))
        .throttle(ThrottleConfig::new())
        .random_source(|| 0.999) // counts, sheds nothing
        .build()
        .unwrap();
    let (listener, addr) = listener().await;
    let (_reporter, health) = tonic_health::server::health_reporter();
    let server = tonic::transport::Server::builder()
        .layer(per_client(&manager))
        .layer(tower::layer::layer_fn(|_| Unavailable))
        .add_service(health)
        .serve_with_incoming(TcpIncoming::from(listener));
    tokio::spawn(server);
    let mut client = HealthClient::new(channel(addr).await);
    assert_eq!(status_of(&mut client).await, Code::Unavailable);
    assert!(manager.key("127.0.0.1").rate().unwrap() < 10.0);
    let high = manager.key("127.0.0.1").snapshot().unwrap().priorities[0];
    assert_eq!((high.requests, high.accepts), (1, 0));
}

/// A successful call's status arrives in its trailers; it counts when they
/// do.
#[tokio::test]
async fn a_successful_call_counts_as_a_success() {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(10.0).increase_by(1.0))
        .build()
        .unwrap();
    let mut client = HealthClient::new(channel(serve(per_client(&manager)).await).await);
    assert_eq!(status_of(&mut client).await, Code::Ok);
    assert_eq!(manager.key("127.0.0.1").rate(), Some(11.0));
}

/// One client's calls with a 1 ms `grpc-timeout`, against a service that
/// takes 5 ms: each ends at its deadline (the server's `DEADLINE_EXCEEDED`,
/// or the client's own cancellation), counted as neutral either way, so
/// the client's key never sheds the calls without one.
#[tokio::test]
async fn short_grpc_timeouts_never_make_a_key_shed() {
    let manager = ThrottleManager::<String>::builder()
        .throttle(ThrottleConfig::new())
        .build()
        .unwrap();
    let (listener, addr) = listener().await;
    let (_reporter, health) = tonic_health::server::health_reporter();
    let server = tonic::transport::Server::builder()
        .layer(per_client(&manager))
        .layer(tower::layer::layer_fn(|inner| Slow { inner }))
        .add_service(health)
        .serve_with_incoming(TcpIncoming::from(listener));
    tokio::spawn(server);
    let mut client = HealthClient::new(channel(addr).await);
    for _ in 0..40 {
        let mut request = tonic::Request::new(check());
        request.set_timeout(Duration::from_millis(1));
        // The server's `DEADLINE_EXCEEDED`, or tonic's own timer first.
        let status = client.check(request).await.unwrap_err();
        assert!(
            matches!(status.code(), Code::DeadlineExceeded | Code::Cancelled),
            "{status:?}"
        );
    }
    let key = manager.key("127.0.0.1").snapshot().unwrap();
    for level in &key.priorities {
        assert_eq!(level.rejection_probability, 0.0, "{key:?}");
        assert_eq!(level.requests, level.accepts, "nothing counted as overload");
    }
    for _ in 0..40 {
        assert_eq!(status_of(&mut client).await, Code::Ok);
    }
}

/// An inner service that takes 5 ms before `inner` answers.
#[derive(Clone)]
struct Slow<S> {
    inner: S,
}

impl<S, B> tower::Service<http::Request<B>> for Slow<S>
where
    S: tower::Service<http::Request<B>> + Clone + Send + 'static,
    S::Future: Send,
    B: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future =
        std::pin::Pin<Box<dyn std::future::Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let answered = self.inner.call(request);
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(5)).await;
            answered.await
        })
    }
}
