//! gRPC on both sides: a tonic server behind the server layer, which gives
//! each client 20 calls a second, and a tonic client through the client
//! layer, whose adaptive rate starts at 10 a second and has to find that
//! limit. Both on loopback; each side prints what it saw.
//!
//! The server answers a call over a client's quota as gRPC expects
//! (`RESOURCE_EXHAUSTED`, with `grpc-retry-pushback-ms`); the client layer
//! reads that status, lowers its rate, and holds its calls for the
//! pushback. Then a `Watch` stream shows a call that lasts as long as its
//! stream: it holds one of the client's two server-side slots while open.
//!
//! Run: `cargo run --release --features tonic --example grpc` (about 11 s).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use portcullis::client::ThrottleClientLayer;
use portcullis::server::{KeyExtractor, ThrottleLayer};
use portcullis::{BulkheadConfig, RateConfig, ThrottleManager};
use tonic::Code;
use tonic::transport::server::TcpIncoming;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

const CALLERS: usize = 8;
const RUN: Duration = Duration::from_secs(10);

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // The server: 20 calls a second per client address (bursts of 5), 2
    // at a time.
    let per_client = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_second(20).burst(5))
        .bulkhead(BulkheadConfig::new(2))
        .build()?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let (_reporter, health) = tonic_health::server::health_reporter();
    let server = tonic::transport::Server::builder()
        .layer(ThrottleLayer::new(
            per_client.clone(),
            KeyExtractor::peer_ip(),
        ))
        .add_service(health)
        .serve_with_incoming(TcpIncoming::from(listener));
    tokio::spawn(server);
    println!("gRPC server on {addr}: 20 calls/s and 2 at a time per client");

    // The client: an adaptive rate per backend, from 10/s.
    let per_host = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(10.0))
        .build()?;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))?
        .connect()
        .await?;
    let channel = tower::ServiceBuilder::new()
        .layer(ThrottleClientLayer::new(per_host.clone()))
        .service(channel);
    let client = HealthClient::new(channel);
    let key = "grpc.health.v1.Health"; // a tonic client's calls are keyed by service

    let (ok, exhausted, other) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let started = Instant::now();
    for _ in 0..CALLERS {
        let (mut client, ok, exhausted, other) =
            (client.clone(), ok.clone(), exhausted.clone(), other.clone());
        tokio::spawn(async move {
            while started.elapsed() < RUN {
                let counter = match client.check(HealthCheckRequest::default()).await {
                    Ok(_) => &ok,
                    Err(status) if status.code() == Code::ResourceExhausted => &exhausted,
                    Err(_) => &other,
                };
                counter.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    println!("\n{CALLERS} callers for {} s:", RUN.as_secs());
    println!(" time | client's rate | ok/s | RESOURCE_EXHAUSTED/s (server's or held here) | other");
    let mut last = (0, 0, 0);
    while started.elapsed() < RUN {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = (
            ok.load(Ordering::Relaxed),
            exhausted.load(Ordering::Relaxed),
            other.load(Ordering::Relaxed),
        );
        println!(
            " {:>3} s | {:>9.1}/s | {:>4} | {:>4} | {:>4}",
            started.elapsed().as_secs(),
            per_host.key(key).rate().unwrap_or(0.0),
            now.0 - last.0,
            now.1 - last.1,
            now.2 - last.2,
        );
        last = now;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;

    // A stream holds its slot for as long as it is open.
    let mut watcher = client.clone();
    let mut watch = watcher
        .watch(HealthCheckRequest::default())
        .await?
        .into_inner();
    watch.message().await?;
    let server_side = per_client.key("127.0.0.1").snapshot();
    println!(
        "\nwith a Watch stream open, the server's bulkhead for this client holds {:?} of 2",
        server_side.and_then(|s| s.active).unwrap_or(0)
    );
    drop(watch);
    Ok(())
}
