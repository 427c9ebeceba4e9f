//! A real rate-limited HTTP server on loopback: it takes [`CAPACITY`]
//! requests a second (burst 5) and answers 429 beyond, as nginx's
//! `limit_req` does, and records when each request arrived and whether it
//! was served. For the tests of the learned rate (`tests/rate/http.rs`)
//! and the fleet sharing one rate (`examples/fleet`, `tests/rate/store/fleet.rs`).

#![allow(dead_code)] // each includer reads its own part

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};

/// What the server takes: requests a second, with a burst of 5, and 429
/// beyond (as nginx's `limit_req` answers).
pub(crate) const CAPACITY: u32 = 50;

/// When each request reached the server, and whether it was served; for
/// a server that asks for pauses, when each pause it asked for ends.
#[derive(Default)]
pub(crate) struct Seen {
    pub(crate) arrivals: Mutex<Vec<(Instant, bool)>>,
    pub(crate) pauses: Mutex<Vec<(Instant, Instant)>>,
}

/// What the server saw over a span.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ServerFigures {
    pub(crate) requests: usize,
    pub(crate) served: usize,
    pub(crate) seconds: f64,
}

impl ServerFigures {
    /// The share of requests the server refused.
    pub(crate) fn refused(&self) -> f64 {
        1.0 - self.served as f64 / self.requests.max(1) as f64
    }

    /// Requests a second that reached the server.
    pub(crate) fn sent_per_second(&self) -> f64 {
        self.requests as f64 / self.seconds
    }

    /// Served requests a second, over the server's capacity.
    pub(crate) fn goodput(&self) -> f64 {
        self.served as f64 / self.seconds / f64::from(CAPACITY)
    }
}

impl Seen {
    /// What arrived from `from` until `seconds` later.
    pub(crate) fn between(&self, from: Instant, seconds: f64) -> ServerFigures {
        let to = from + Duration::from_secs_f64(seconds);
        let arrivals = self.arrivals.lock().unwrap();
        let late = arrivals.iter().filter(|(at, _)| (from..to).contains(at));
        let (requests, served) = late.fold((0, 0), |(n, s), &(_, ok)| (n + 1, s + usize::from(ok)));
        ServerFigures {
            requests,
            served,
            seconds,
        }
    }
}

/// Starts the rate-limited server on a loopback port.
pub(crate) async fn start_server() -> std::io::Result<(SocketAddr, Arc<Seen>)> {
    start(None).await
}

/// The same server, answering each 429 with `Retry-After: pause` (whole
/// seconds) and recording the pause it asked for.
pub(crate) async fn start_server_asking_pauses(
    pause: Duration,
) -> std::io::Result<(SocketAddr, Arc<Seen>)> {
    start(Some(pause)).await
}

impl Seen {
    /// Requests that arrived inside a pause the server had asked for, at
    /// least `grace` after it was asked (a request already on its way when
    /// the 429 left is no impoliteness).
    pub(crate) fn inside_pauses(&self, grace: Duration) -> usize {
        let pauses = self.pauses.lock().unwrap().clone();
        let arrivals = self.arrivals.lock().unwrap();
        arrivals
            .iter()
            .filter(|(at, _)| {
                pauses
                    .iter()
                    .any(|&(asked, ends)| *at >= asked + grace && *at < ends)
            })
            .count()
    }
}

async fn start(pause: Option<Duration>) -> std::io::Result<(SocketAddr, Arc<Seen>)> {
    let limit: DefaultDirectRateLimiter = RateLimiter::direct(
        Quota::per_second(NonZeroU32::new(CAPACITY).unwrap())
            .allow_burst(NonZeroU32::new(5).unwrap()),
    );
    let seen = Arc::new(Seen::default());
    let state = (Arc::new(limit), Arc::clone(&seen));
    let app = Router::new().fallback(
        move |State((limit, seen)): State<(Arc<DefaultDirectRateLimiter>, Arc<Seen>)>| async move {
            let served = limit.check().is_ok();
            let now = Instant::now();
            seen.arrivals.lock().unwrap().push((now, served));
            if served {
                return (StatusCode::OK, HeaderMap::new());
            }
            let mut headers = HeaderMap::new();
            if let Some(pause) = pause {
                seen.pauses.lock().unwrap().push((now, now + pause));
                let seconds = HeaderValue::from(pause.as_secs());
                headers.insert(axum::http::header::RETRY_AFTER, seconds);
            }
            (StatusCode::TOO_MANY_REQUESTS, headers)
        },
    );
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app.with_state(state)).await });
    Ok((addr, seen))
}
