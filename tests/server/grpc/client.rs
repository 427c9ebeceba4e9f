//! The client layer over a real tonic channel: a local refusal a tonic
//! client reads as a gRPC status, a server's pushback honoured, and an
//! adaptive rate that learns a gRPC server's capacity.

use std::convert::Infallible;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use portcullis::client::{ThrottleClientLayer, ThrottleClientService};
use portcullis::deadline::TimeLimits;
use portcullis::server::{KeyExtractor, ThrottleLayer};
use portcullis::{RateConfig, ThrottleManager};
use tonic::Code;
use tonic::transport::Channel;
use tonic::transport::server::TcpIncoming;
use tonic_health::pb::health_client::HealthClient;
use tower::ServiceExt;

use super::{channel, check, listener, status_of};
use crate::support;

/// The key a tonic client's calls get: its channel adds the origin after
/// the layer, so the key is the gRPC service.
const HEALTH: &str = "grpc.health.v1.Health";

/// A health client whose channel goes through `manager`.
async fn through(
    manager: &ThrottleManager<String>,
    addr: std::net::SocketAddr,
) -> HealthClient<ThrottleClientService<Channel>> {
    let channel = tower::ServiceBuilder::new()
        .layer(ThrottleClientLayer::new(manager.clone()))
        .service(channel(addr).await);
    HealthClient::new(channel)
}

/// Serves tonic-health on loopback.
async fn serve() -> std::net::SocketAddr {
    let (listener, addr) = listener().await;
    let (_reporter, health) = tonic_health::server::health_reporter();
    let server = tonic::transport::Server::builder()
        .add_service(health)
        .serve_with_incoming(TcpIncoming::from(listener));
    tokio::spawn(server);
    addr
}

/// Serves tonic-health on loopback with no answer for a minute; `arrived`
/// runs as each call arrives.
async fn serve_unanswering(arrived: impl Fn() + Clone + Send + 'static) -> std::net::SocketAddr {
    let (listener, addr) = listener().await;
    let (_reporter, health) = tonic_health::server::health_reporter();
    let stuck = tower::util::MapFutureLayer::new(move |answer| {
        arrived();
        async move {
            tokio::time::sleep(Duration::from_secs(60)).await;
            answer.await
        }
    });
    let server = tonic::transport::Server::builder()
        .layer(stuck)
        .add_service(health)
        .serve_with_incoming(TcpIncoming::from(listener));
    tokio::spawn(server);
    addr
}

#[tokio::test]
async fn a_local_refusal_is_a_grpc_status_and_reaches_no_server() {
    let per_host = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_hour(1))
        .time_limits(TimeLimits::new().max_wait(Duration::ZERO))
        .build()
        .unwrap();
    let mut client = through(&per_host, serve().await).await;
    assert_eq!(status_of(&mut client).await, Code::Ok);
    let refused = client.check(check()).await.unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted);
    assert_eq!(refused.message(), "rate limited");
    assert!(refused.metadata().get("grpc-retry-pushback-ms").is_some());
    assert!(
        per_host.key(HEALTH).snapshot().is_some(),
        "keyed by the gRPC service"
    );
}

/// A server's `grpc-retry-pushback-ms` defers the key: the next call is
/// refused here, before it is sent.
#[tokio::test]
async fn a_servers_pushback_holds_the_key() {
    // The server: one call an hour per client, behind a layer that counts
    // every call that arrives.
    let server_side = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_hour(1))
        .build()
        .unwrap();
    let arrived = Arc::new(AtomicUsize::new(0));
    let (listener, addr) = listener().await;
    let (_reporter, health) = tonic_health::server::health_reporter();
    let counting = Limited::new(1_000, &arrived, &Arc::new(AtomicUsize::new(0)));
    let server = tonic::transport::Server::builder()
        .layer(tower::layer::layer_fn(move |inner| counting.around(inner)))
        .layer(ThrottleLayer::new(server_side, KeyExtractor::peer_ip()))
        .add_service(health)
        .serve_with_incoming(TcpIncoming::from(listener));
    tokio::spawn(server);
    // Calls wait up to a second for the key: not for an hour's pause.
    let per_host = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(100.0))
        .time_limits(TimeLimits::new().max_wait(Duration::from_secs(1)))
        .build()
        .unwrap();
    let mut client = through(&per_host, addr).await;
    assert_eq!(status_of(&mut client).await, Code::Ok);
    assert_eq!(status_of(&mut client).await, Code::ResourceExhausted);
    let held = per_host.check(HEALTH).unwrap_err();
    assert!(
        held.retry_after().unwrap() > Duration::from_secs(60),
        "{held}"
    );
    assert_eq!(status_of(&mut client).await, Code::ResourceExhausted);
    assert_eq!(arrived.load(Ordering::Relaxed), 2, "the third never left");
}

/// An inner service that answers over `limit` calls a second
/// `RESOURCE_EXHAUSTED` (trailers-only, no pushback: the client must learn
/// the capacity), counting what it served and refused.
#[derive(Clone)]
struct Limited<S> {
    inner: S,
    limit: Arc<DefaultDirectRateLimiter>,
    served: Arc<AtomicUsize>,
    refused: Arc<AtomicUsize>,
}

impl Limited<()> {
    /// Limits to `per_second` calls (burst 5), counting into `served` and
    /// `refused`.
    fn new(per_second: u32, served: &Arc<AtomicUsize>, refused: &Arc<AtomicUsize>) -> Self {
        let quota = Quota::per_second(NonZeroU32::new(per_second).unwrap())
            .allow_burst(NonZeroU32::new(5).unwrap());
        Self {
            inner: (),
            limit: Arc::new(RateLimiter::direct(quota)),
            served: Arc::clone(served),
            refused: Arc::clone(refused),
        }
    }

    /// The same limit and counters around `inner`.
    fn around<S>(&self, inner: S) -> Limited<S> {
        Limited {
            inner,
            limit: Arc::clone(&self.limit),
            served: Arc::clone(&self.served),
            refused: Arc::clone(&self.refused),
        }
    }
}

impl<S, B, RB> tower::Service<http::Request<B>> for Limited<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<RB>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
    B: Send + 'static,
    RB: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    RB::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, Infallible>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        if self.limit.check().is_err() {
            self.refused.fetch_add(1, Ordering::Relaxed);
            let response = http::Response::builder()
                .header("content-type", "application/grpc")
                .header("grpc-status", "8")
                .body(tonic::body::Body::empty())
                .unwrap();
            return Box::pin(std::future::ready(Ok(response)));
        }
        self.served.fetch_add(1, Ordering::Relaxed);
        let answered = self.inner.clone().oneshot(request);
        Box::pin(async move { Ok(answered.await?.map(tonic::body::Body::new)) })
    }
}

/// The figures of the issue: a gRPC server that takes 50 calls a second
/// (burst 5, `RESOURCE_EXHAUSTED` beyond, no pushback), 16 callers through
/// the client layer for 12 s, counted at the server over the second half.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn against_a_50_per_second_grpc_server_the_client_layer_converges() {
    let _alone = support::alone();
    let (served, refused) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let limited = Limited::new(50, &served, &refused);
    let (listener, addr) = listener().await;
    let (_reporter, health) = tonic_health::server::health_reporter();
    let server = tonic::transport::Server::builder()
        .layer(tower::layer::layer_fn(move |inner| limited.around(inner)))
        .add_service(health)
        .serve_with_incoming(TcpIncoming::from(listener));
    tokio::spawn(server);

    let per_host = ThrottleManager::<String>::builder()
        .rate(
            RateConfig::adaptive(10.0)
                .bounds(1.0, 1_000.0)
                .increase_by(0.3)
                .decrease_factor(0.7),
        )
        .build()
        .unwrap();
    let client = through(&per_host, addr).await;
    let run_for = Duration::from_secs(12);
    let started = Instant::now();
    let until = started + run_for;
    let callers: Vec<_> = (0..16)
        .map(|_| {
            let mut client = client.clone();
            tokio::spawn(async move {
                while Instant::now() < until {
                    let _ = client.check(super::check()).await;
                }
            })
        })
        .collect();
    tokio::time::sleep(run_for / 2).await;
    let at_half = (
        served.load(Ordering::Relaxed),
        refused.load(Ordering::Relaxed),
    );
    for caller in callers {
        caller.await.unwrap();
    }
    let settled_secs = (Instant::now() - started - run_for / 2).as_secs_f64();
    let ok = served.load(Ordering::Relaxed) - at_half.0;
    let no = refused.load(Ordering::Relaxed) - at_half.1;
    let refused_share = no as f64 / (ok + no).max(1) as f64;
    let goodput = ok as f64 / settled_secs / 50.0;
    println!(
        "gRPC, second half ({settled_secs:.1} s): {ok} served, {no} refused by the server \
         ({:.1} %), goodput {:.1} % of 50/s, learned rate {:.1}/s",
        100.0 * refused_share,
        100.0 * goodput,
        per_host.key(HEALTH).rate().unwrap()
    );
    assert!(refused_share <= 0.05, "refused {refused_share:.3}");
    assert!(goodput >= 0.8, "goodput {goodput:.3}");
}

/// A gRPC server that gives no answer within the client manager's call
/// timeout: each call is dropped when the timeout ends and read by tonic as
/// `DEADLINE_EXCEEDED`, the key's slot is free for the next call, and the
/// key's rate counts the timeout as overload.
#[tokio::test]
async fn the_call_timeout_ends_a_call_the_server_does_not_answer() {
    let arrived = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&arrived);
    let addr = serve_unanswering(move || {
        counted.fetch_add(1, Ordering::Relaxed);
    })
    .await;
    let per_host = ThrottleManager::<String>::builder()
        .rate(
            RateConfig::adaptive(100.0)
                .bounds(1.0, 100.0)
                .decrease_factor(0.5),
        )
        .bulkhead(portcullis::BulkheadConfig::new(1))
        .time_limits(TimeLimits::new().call_timeout(Duration::from_millis(200)))
        .build()
        .unwrap();
    let mut client = through(&per_host, addr).await;
    for attempt in 0..2 {
        let status = client.check(check()).await.unwrap_err();
        assert_eq!(status.code(), Code::DeadlineExceeded, "attempt {attempt}");
        assert_eq!(
            status.message(),
            "no answer within the call timeout of 200ms"
        );
        let active = per_host.key(HEALTH).snapshot().unwrap().active;
        assert_eq!(active, Some(0), "attempt {attempt}: the slot is free");
    }
    assert_eq!(arrived.load(Ordering::Relaxed), 2, "both calls were sent");
    assert!(
        per_host.key(HEALTH).rate().unwrap() < 100.0,
        "a timeout is overload"
    );
}

/// The client layer's call timeout runs on the manager's clock: with a
/// `ManualClock`, a call the server does not answer ends
/// (`DEADLINE_EXCEEDED`) when that clock passes the timeout, and not
/// before, however much real time passes.
#[tokio::test]
async fn the_call_timeout_runs_on_the_managers_clock() {
    let arrived = Arc::new(tokio::sync::Notify::new());
    let seen = Arc::clone(&arrived);
    let addr = serve_unanswering(move || seen.notify_one()).await;
    let clock = portcullis::clock::ManualClock::new();
    let per_host = ThrottleManager::<String>::builder()
        .bulkhead(portcullis::BulkheadConfig::new(1))
        .time_limits(TimeLimits::new().call_timeout(Duration::from_secs(30)))
        .clock(clock.clone())
        .build()
        .unwrap();
    let mut client = through(&per_host, addr).await;
    let call = tokio::spawn(async move { client.check(check()).await });
    arrived.notified().await;
    clock.advance(Duration::from_secs(29));
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !call.is_finished(),
        "ended before the manager's clock passed the timeout"
    );
    clock.advance(Duration::from_secs(1));
    let status = tokio::time::timeout(Duration::from_secs(20), call)
        .await
        .expect("ended once the manager's clock passed the timeout")
        .unwrap()
        .unwrap_err();
    assert_eq!(status.code(), Code::DeadlineExceeded);
    assert_eq!(per_host.key(HEALTH).snapshot().unwrap().active, Some(0));
}

/// An HTTP request through the client layer that has no answer within the
/// call timeout: the error downcasts to `RequestTimedOut`, when the timeout
/// ends (on virtual time), and the slot is free.
#[tokio::test(start_paused = true)]
async fn an_http_request_past_the_call_timeout_is_a_request_timed_out_error() {
    use portcullis::client::RequestTimedOut;
    use tower::Layer;
    let per_host = ThrottleManager::<String>::builder()
        .bulkhead(portcullis::BulkheadConfig::new(1))
        .time_limits(TimeLimits::new().call_timeout(Duration::from_secs(2)))
        .build()
        .unwrap();
    let stuck = tower::service_fn(|_: http::Request<String>| async {
        tokio::time::sleep(Duration::from_secs(60)).await;
        Ok::<_, Infallible>(http::Response::new(String::from("late")))
    });
    let client = ThrottleClientLayer::new(per_host.clone()).layer(stuck);
    let request = http::Request::get("http://backend.test/")
        .body(String::new())
        .unwrap();
    let started = tokio::time::Instant::now();
    let error = client.oneshot(request).await.unwrap_err();
    assert_eq!(started.elapsed(), Duration::from_secs(2));
    let timed_out = error.downcast_ref::<RequestTimedOut>().expect("a timeout");
    assert_eq!(timed_out.after(), Duration::from_secs(2));
    assert_eq!(
        per_host.key("backend.test").snapshot().unwrap().active,
        Some(0)
    );
}

/// A caller's deadline (`with_deadline`) goes on to the server as the
/// call's `grpc-timeout`, with the time left.
#[tokio::test]
async fn a_caller_s_deadline_reaches_the_server_as_grpc_timeout() {
    let seen = Arc::new(std::sync::Mutex::new(None));
    let (listener, addr) = listener().await;
    let (_reporter, health) = tonic_health::server::health_reporter();
    let record = {
        let seen = Arc::clone(&seen);
        tower::util::MapRequestLayer::new(move |request: http::Request<tonic::body::Body>| {
            *seen.lock().unwrap() = request.headers().get("grpc-timeout").cloned();
            request
        })
    };
    let server = tonic::transport::Server::builder()
        .layer(record)
        .add_service(health)
        .serve_with_incoming(TcpIncoming::from(listener));
    tokio::spawn(server);
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(100.0))
        .build()
        .unwrap();
    let mut client = through(&manager, addr).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    portcullis::deadline::with_deadline(deadline, client.check(check()))
        .await
        .unwrap();
    let header = seen.lock().unwrap().clone().expect("a grpc-timeout header");
    let mut headers = http::HeaderMap::new();
    headers.insert("grpc-timeout", header);
    let left = portcullis::grpc::timeout_in(&headers).unwrap();
    assert!(
        left <= Duration::from_secs(60) && left > Duration::from_secs(50),
        "{left:?}"
    );
    // Without a deadline, none is sent.
    client.check(check()).await.unwrap();
    assert_eq!(*seen.lock().unwrap(), None);
}

/// A call whose deadline has passed is answered `DEADLINE_EXCEEDED` by the
/// client layer, and nothing is sent; one with time left is sent.
#[tokio::test]
async fn a_call_whose_deadline_has_passed_is_answered_here_and_reaches_no_server() {
    let arrived = Arc::new(AtomicUsize::new(0));
    let (listener, addr) = listener().await;
    let (_reporter, health) = tonic_health::server::health_reporter();
    let counting = Limited::new(1_000, &arrived, &Arc::new(AtomicUsize::new(0)));
    let server = tonic::transport::Server::builder()
        .layer(tower::layer::layer_fn(move |inner| counting.around(inner)))
        .add_service(health)
        .serve_with_incoming(TcpIncoming::from(listener));
    tokio::spawn(server);
    let per_host = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(100.0))
        .build()
        .unwrap();
    let mut client = through(&per_host, addr).await;
    let past = tokio::time::Instant::now() - Duration::from_secs(1);
    let refused = portcullis::deadline::with_deadline(past, client.check(check()))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::DeadlineExceeded);
    assert_eq!(arrived.load(Ordering::Relaxed), 0, "nothing was sent");
    let later = tokio::time::Instant::now() + Duration::from_secs(5);
    portcullis::deadline::with_deadline(later, client.check(check()))
        .await
        .unwrap();
    assert_eq!(arrived.load(Ordering::Relaxed), 1);
}
