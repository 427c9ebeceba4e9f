//! What the server layer costs an axum service, next to tower_governor and
//! to no layer at all, in the same run.
//!
//! ```text
//! cargo bench --features axum --bench server_overhead
//! ```
//!
//! A hello-world axum app is served three times on loopback: bare; behind
//! `tower_governor` (keyed by API key, a quota so high it refuses
//! nothing); behind `ThrottleLayer` (keyed by API key, a fixed rate and a
//! bulkhead, both far from their limits). A hyper client keeps
//! `CONNECTIONS` connections busy (each sends its next request when the
//! last is answered), spread over `KEYS` API keys. Rounds alternate the
//! three, so the machine's noise falls on all of them alike; the report is
//! each one's median requests/s and its p99 latency over all rounds, and
//! their ratios. The server has one worker thread, the load generator
//! another.
//!
//! `SERVER_BENCH_SECONDS` (default 2) sets each round's length,
//! `SERVER_BENCH_ROUNDS` (default 5) the number of rounds.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use portcullis::server::{KeyExtractor, ThrottleLayer};
use portcullis::{BulkheadConfig, RateConfig, ThrottleManager};
use tower_governor::GovernorError;
use tower_governor::governor::GovernorConfigBuilder;

const CONNECTIONS: usize = 32;
const KEYS: usize = 64;

/// tower_governor keyed by the `x-api-key` header, as ThrottleLayer is.
#[derive(Debug, Clone, Copy)]
struct ApiKey;

impl tower_governor::key_extractor::KeyExtractor for ApiKey {
    type Key = String;

    fn extract<T>(&self, request: &http::Request<T>) -> Result<String, GovernorError> {
        request
            .headers()
            .get("x-api-key")
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned)
            .ok_or(GovernorError::UnableToExtractKey)
    }
}

fn hello() -> Router {
    Router::new().route("/", get(|| async { "hello" }))
}

fn apps() -> Vec<(&'static str, Router)> {
    let governor = GovernorConfigBuilder::default()
        .per_nanosecond(1)
        .burst_size(1_000_000)
        .key_extractor(ApiKey)
        .finish()
        .expect("a valid tower_governor config");
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(1e8).burst(1_000_000).bounds(1e8, 1e8))
        .bulkhead(BulkheadConfig::new(1_024))
        .build()
        .expect("a valid manager");
    vec![
        ("no layer", hello()),
        (
            "tower_governor",
            hello().layer(tower_governor::GovernorLayer::new(governor)),
        ),
        (
            "ThrottleLayer",
            hello().layer(ThrottleLayer::new(
                manager,
                KeyExtractor::header("x-api-key"),
            )),
        ),
    ]
}

/// Requests answered and their latencies in microseconds, over `length`.
async fn load(addr: SocketAddr, length: Duration) -> (u64, Vec<u32>) {
    let deadline = Instant::now() + length;
    let mut connections = Vec::new();
    for connection in 0..CONNECTIONS {
        connections.push(tokio::spawn(async move {
            let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
            stream.set_nodelay(true).expect("nodelay");
            let (mut sender, driver) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .expect("handshake");
            tokio::spawn(driver);
            let mut latencies = Vec::new();
            let mut n = connection;
            while Instant::now() < deadline {
                let key = format!("key-{}", n % KEYS);
                n += CONNECTIONS;
                let request = http::Request::get("/")
                    .header("host", "localhost")
                    .header("x-api-key", key)
                    .body(Empty::<Bytes>::new())
                    .expect("a request");
                let start = Instant::now();
                sender.ready().await.expect("ready");
                let response = sender.send_request(request).await.expect("answered");
                assert_eq!(response.status(), 200, "nothing is refused");
                response.into_body().collect().await.expect("a body");
                latencies.push(u32::try_from(start.elapsed().as_micros()).unwrap_or(u32::MAX));
            }
            latencies
        }));
    }
    let mut all = Vec::new();
    for connection in connections {
        all.extend(connection.await.expect("a connection"));
    }
    (all.len() as u64, all)
}

fn percentile(sorted: &[u32], p: f64) -> u32 {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index]
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` runs this
    // with no such flag: one short round then, as a smoke test.
    let benching = std::env::args().any(|arg| arg == "--bench");
    let seconds = if benching {
        env_number("SERVER_BENCH_SECONDS", 2)
    } else {
        0
    };
    let rounds = if benching {
        env_number("SERVER_BENCH_ROUNDS", 5)
    } else {
        1
    };
    let length = if benching {
        Duration::from_secs(seconds)
    } else {
        Duration::from_millis(200)
    };

    let server = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a server runtime");
    let addresses: Vec<(&str, SocketAddr)> = apps()
        .into_iter()
        .map(|(name, app)| {
            let listener = server
                .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
                .expect("a port");
            let addr = listener.local_addr().expect("an address");
            server.spawn(async move {
                axum::serve(
                    listener,
                    app.into_make_service_with_connect_info::<SocketAddr>(),
                )
                .await
            });
            (name, addr)
        })
        .collect();
    let client = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a client runtime");

    let names: Vec<&str> = addresses.iter().map(|(name, _)| *name).collect();
    let mut throughput: Vec<Vec<f64>> = vec![Vec::new(); addresses.len()];
    let mut latencies: Vec<Vec<u32>> = vec![Vec::new(); addresses.len()];
    // A warm-up round, not counted.
    for (_, addr) in &addresses {
        client.block_on(load(*addr, Duration::from_millis(200)));
    }
    for round in 0..rounds {
        // Rotate who goes first, so no one always runs on a warmer machine.
        for i in 0..addresses.len() {
            let which = (i + round as usize) % addresses.len();
            let (done, measured) = client.block_on(load(addresses[which].1, length));
            throughput[which].push(done as f64 / length.as_secs_f64());
            latencies[which].extend(measured);
        }
    }
    let summary: Vec<(f64, u32)> = throughput
        .iter_mut()
        .zip(latencies.iter_mut())
        .map(|(rates, latencies)| {
            latencies.sort_unstable();
            (median(rates), percentile(latencies, 0.99))
        })
        .collect();
    let (governor_rate, governor_p99) = summary[1];
    println!(
        "{CONNECTIONS} connections, {KEYS} keys, {rounds} rounds of {:?} each",
        length
    );
    println!(
        "{:<16} {:>12} {:>9} {:>22} {:>18}",
        "layer", "requests/s", "p99 µs", "req/s vs governor", "p99 vs governor"
    );
    for (name, (rate, p99)) in names.iter().zip(&summary) {
        println!(
            "{:<16} {:>12.0} {:>9} {:>21.3}x {:>17.3}x",
            name,
            rate,
            p99,
            rate / governor_rate,
            f64::from(*p99) / f64::from(governor_p99)
        );
    }
}
