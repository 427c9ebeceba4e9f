//! A request's own timeout through the middleware is its caller's
//! deadline: time spent waiting here never slows the host, a deadline that
//! leaves no time is refused without sending anything, and no timeout
//! value panics. Real servers and a real reqwest client on loopback.

use std::time::{Duration, Instant};

use axum::http::StatusCode;
use portcullis::client::{RequestTimedOut, ThrottleMiddleware};
use portcullis::deadline::TimeLimit;
use portcullis::deadline::TimeLimits;
use portcullis::deadline::with_deadline;
use portcullis::error::RejectReason;
use portcullis::{RateConfig, Rejected, ThrottleManager};

use crate::{Server, support};

/// 400 requests at 100 a second to `server`, each with `timeout` if
/// given, through a host rate that starts at 50/s and waits 100 ms at
/// most: how many were answered 200, and the rate the host learned.
async fn healthy_host_run(server: &Server, timeout: Option<Duration>) -> (usize, f64) {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(50.0))
        .time_limits(TimeLimits::new().max_wait(Duration::from_millis(100)))
        .build()
        .unwrap();
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(ThrottleMiddleware::new(manager.clone()))
        .build();
    let mut every = tokio::time::interval(Duration::from_millis(10));
    let mut requests = Vec::new();
    for _ in 0..400 {
        every.tick().await;
        let mut request = client.get(server.url());
        if let Some(timeout) = timeout {
            request = request.timeout(timeout);
        }
        requests.push(tokio::spawn(async move {
            match request.send().await {
                Ok(response) => response.status() == 200 && response.bytes().await.is_ok(),
                Err(_) => false,
            }
        }));
    }
    let mut answered = 0;
    for request in requests {
        answered += usize::from(request.await.unwrap());
    }
    (answered, manager.key(&server.key()).rate().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_requests_own_timeout_spent_waiting_here_never_slows_a_healthy_host() {
    let _alone = support::alone();
    let server = Server::start(|_| (StatusCode::OK, vec![], Duration::from_millis(30))).await;
    let (free, free_rate) = healthy_host_run(&server, None).await;
    let (bounded, bounded_rate) = healthy_host_run(&server, Some(Duration::from_millis(100))).await;
    eprintln!(
        "without a timeout {free} answered, {free_rate:.1}/s learned; \
         with 100 ms: {bounded}, {bounded_rate:.1}/s"
    );
    assert!(
        bounded * 5 >= free * 4,
        "{bounded} answered, {free} without a timeout"
    );
    assert!(
        bounded_rate >= free_rate * 0.8,
        "{bounded_rate}/s learned, {free_rate}/s without a timeout"
    );
}

/// The middleware's error, as the edge's own type.
fn middleware_error<T: std::error::Error + Send + Sync + 'static>(
    error: &reqwest_middleware::Error,
) -> &T {
    match error {
        reqwest_middleware::Error::Middleware(e) => e.downcast_ref::<T>().unwrap(),
        other => panic!("not the middleware's: {other}"),
    }
}

#[tokio::test]
async fn a_request_whose_deadline_leaves_no_time_is_refused_and_nothing_is_sent() {
    let server = Server::always(StatusCode::OK).await;
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(50.0))
        .build()
        .unwrap();
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(ThrottleMiddleware::new(manager.clone()))
        .build();
    let error = client
        .get(server.url())
        .timeout(Duration::ZERO)
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        middleware_error::<Rejected>(&error).reason(),
        RejectReason::Deadline
    );
    let past = tokio::time::Instant::now() - Duration::from_secs(1);
    let error = with_deadline(past, client.get(server.url()).send())
        .await
        .unwrap_err();
    assert_eq!(
        middleware_error::<Rejected>(&error).reason(),
        RejectReason::Deadline
    );
    assert!(server.arrivals().is_empty(), "nothing was sent");
}

#[tokio::test]
async fn a_timeout_past_what_an_instant_holds_is_no_deadline() {
    let server = Server::always(StatusCode::OK).await;
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(50.0))
        .build()
        .unwrap();
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(ThrottleMiddleware::new(manager))
        .build();
    for timeout in [Duration::MAX, Duration::from_secs(u64::MAX / 2)] {
        let response = client
            .get(server.url())
            .timeout(timeout)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
    }
}

#[tokio::test]
async fn a_request_cut_short_by_its_own_timeout_is_neutral_and_says_so() {
    let server = Server::start(|_| (StatusCode::OK, vec![], Duration::from_secs(60))).await;
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(50.0).decrease_by(10.0))
        .time_limits(TimeLimits::new().call_timeout(Duration::from_secs(10)))
        .build()
        .unwrap();
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(ThrottleMiddleware::new(manager.clone()))
        .build();
    let start = Instant::now();
    let error = client
        .get(server.url())
        .timeout(Duration::from_millis(200))
        .send()
        .await
        .unwrap_err();
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "ended by the timeout"
    );
    let timed_out = middleware_error::<RequestTimedOut>(&error);
    assert_eq!(timed_out.limit(), TimeLimit::Deadline);
    assert!(
        timed_out
            .to_string()
            .starts_with("no answer before the caller's deadline"),
        "{timed_out}"
    );
    assert_eq!(
        manager.key(&server.key()).rate(),
        Some(50.0),
        "not overload"
    );
}
