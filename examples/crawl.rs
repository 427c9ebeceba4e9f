//! The main job: crawl three hosts of different capacity through one
//! `ThrottleManager`, and watch each host's rate settle near what that host
//! can take.
//!
//! The example starts its own HTTP server on loopback. It serves three
//! virtual hosts, each behind a real token bucket (governor) of 20, 50 and
//! 100 requests per second; above that a host answers 429 Too Many Requests.
//! The crawler knows none of these numbers: it starts every host at 10/s,
//! waits on the manager before each request, and reports each response
//! (`increment` on success, `decrement` on 429).
//!
//! Run: `cargo run --release --example crawl` (about 20 s; `CRAWL_SECS=N` to
//! change).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::routing::get;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use portcullis::{RateConfig, ThrottleManager};

/// The hosts and their true capacities in requests per second.
const HOSTS: [(&str, u32); 3] = [("alpha.test", 20), ("beta.test", 50), ("gamma.test", 100)];
/// Concurrent crawl workers per host.
const WORKERS_PER_HOST: usize = 8;

#[derive(Default)]
struct HostStats {
    sent: AtomicU64,
    ok: AtomicU64,
    too_many: AtomicU64,
    errors: AtomicU64,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let crawl_for = Duration::from_secs(
        std::env::var("CRAWL_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(20),
    );
    let addr = start_server().await?;
    println!("server on {addr}: {}", describe_hosts());

    // Every host starts at 10/s. A success adds 0.3/s (so the rate grows by
    // 30 % a second while all goes well); a 429 takes a fifth off, at most
    // once per 100 ms, so the 429s of requests already in flight count once.
    // The rate saws just around each host's capacity.
    let manager = ThrottleManager::<String>::builder()
        .rate(
            RateConfig::new(10.0)
                .bounds(1.0, 1_000.0)
                .increment(0.3)
                .decrease_factor(0.8)
                .decrease_cooldown(Duration::from_millis(100)),
        )
        .build()?;
    let mut client = reqwest::Client::builder().timeout(Duration::from_secs(5));
    for (host, _) in HOSTS {
        client = client.resolve(host, addr); // the virtual hosts all live on loopback
    }
    let client = client.build()?;

    let stats: Arc<HashMap<&str, HostStats>> = Arc::new(
        HOSTS
            .iter()
            .map(|(h, _)| (*h, HostStats::default()))
            .collect(),
    );
    let started = Instant::now();
    let mut workers = Vec::new();
    for (host, _) in HOSTS {
        for worker in 0..WORKERS_PER_HOST {
            let (manager, client, stats) = (manager.clone(), client.clone(), Arc::clone(&stats));
            workers.push(tokio::spawn(async move {
                let host_stats = &stats[host];
                let mut page = worker;
                while started.elapsed() < crawl_for {
                    manager.wait(host).await;
                    host_stats.sent.fetch_add(1, Ordering::Relaxed);
                    let url = format!("http://{host}:{}/page/{page}", addr.port());
                    page += WORKERS_PER_HOST;
                    match client.get(&url).send().await.map(|r| r.status()) {
                        Ok(status) if status.is_success() => {
                            host_stats.ok.fetch_add(1, Ordering::Relaxed);
                            manager.increment(host);
                        }
                        Ok(StatusCode::TOO_MANY_REQUESTS) => {
                            host_stats.too_many.fetch_add(1, Ordering::Relaxed);
                            manager.decrement(host);
                        }
                        Ok(_) | Err(_) => {
                            host_stats.errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            }));
        }
    }

    // Progress, once a second; the learned rate is averaged over the second
    // half of the run, once it has settled.
    let mut learned: HashMap<&str, (f64, u32)> = HashMap::new();
    let mut ok_at_half: Option<(Instant, HashMap<&str, u64>)> = None;
    let mut last_ok: HashMap<&str, u64> = HashMap::new();
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let mut ticks = 0u64;
    while started.elapsed() < crawl_for {
        tick.tick().await;
        ticks += 1;
        if started.elapsed() > crawl_for / 2 {
            ok_at_half.get_or_insert_with(|| {
                let ok = HOSTS
                    .iter()
                    .map(|(h, _)| (*h, stats[h].ok.load(Ordering::Relaxed)));
                (Instant::now(), ok.collect())
            });
            for (host, _) in HOSTS {
                let rate = manager.rate(host).unwrap_or(0.0);
                let entry = learned.entry(host).or_default();
                *entry = (entry.0 + rate, entry.1 + 1);
            }
        }
        if ticks % 10 == 0 {
            let line: Vec<String> = HOSTS
                .iter()
                .map(|(host, _)| {
                    let ok = stats[host].ok.load(Ordering::Relaxed);
                    let per_second = ok - last_ok.insert(host, ok).unwrap_or(0);
                    format!(
                        "{host} rate {:>6.1}/s ok {per_second:>3}/s",
                        manager.rate(*host).unwrap_or(0.0)
                    )
                })
                .collect();
            println!(
                "{:>3}s  {}",
                started.elapsed().as_secs(),
                line.join("  |  ")
            );
        }
    }
    for worker in workers {
        worker.await?;
    }

    println!();
    println!("learned rate and goodput: averages over the second half of the run, once settled");
    println!(
        "{:<12} {:>9} {:>9} {:>9} {:>6} {:>6} {:>13} {:>11} {:>11}",
        "host",
        "capacity",
        "requests",
        "successes",
        "429s",
        "errors",
        "learned rate",
        "learned/cap",
        "goodput/cap"
    );
    let (half_time, ok_half) = ok_at_half.unwrap_or_else(|| (started, HashMap::new()));
    let secs = half_time.elapsed().as_secs_f64();
    for (host, capacity) in HOSTS {
        let s = &stats[host];
        let (sum, n) = learned.get(host).copied().unwrap_or((0.0, 1));
        let learned_rate = sum / f64::from(n.max(1));
        let ok = s.ok.load(Ordering::Relaxed);
        let ok_settled = ok - ok_half.get(host).copied().unwrap_or(0);
        println!(
            "{:<12} {:>7}/s {:>9} {:>9} {:>6} {:>6} {:>11.1}/s {:>10.0}% {:>10.0}%",
            host,
            capacity,
            s.sent.load(Ordering::Relaxed),
            ok,
            s.too_many.load(Ordering::Relaxed),
            s.errors.load(Ordering::Relaxed),
            learned_rate,
            100.0 * learned_rate / f64::from(capacity),
            100.0 * ok_settled as f64 / secs / f64::from(capacity),
        );
    }
    Ok(())
}

fn describe_hosts() -> String {
    HOSTS
        .iter()
        .map(|(host, capacity)| format!("{host} takes {capacity}/s"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Serves the virtual hosts on an ephemeral loopback port. Each host admits
/// `capacity` requests per second (burst: a tenth of a second's worth) and
/// answers 429 beyond.
async fn start_server() -> std::io::Result<SocketAddr> {
    let limits: HashMap<&'static str, DefaultDirectRateLimiter> = HOSTS
        .iter()
        .map(|&(host, capacity)| {
            let per_second = NonZeroU32::new(capacity).expect("capacity above 0");
            let burst = NonZeroU32::new((capacity / 10).max(1)).expect("above 0");
            (
                host,
                RateLimiter::direct(Quota::per_second(per_second).allow_burst(burst)),
            )
        })
        .collect();
    let app = Router::new()
        .route("/page/{n}", get(page))
        .with_state(Arc::new(limits));
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(addr)
}

async fn page(
    State(limits): State<Arc<HashMap<&'static str, DefaultDirectRateLimiter>>>,
    headers: HeaderMap,
) -> (StatusCode, &'static str) {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.split(':').next())
        .unwrap_or_default();
    match limits.get(host) {
        None => (StatusCode::NOT_FOUND, "no such host\n"),
        Some(limit) if limit.check().is_ok() => (StatusCode::OK, "<html>a page</html>\n"),
        Some(_) => (StatusCode::TOO_MANY_REQUESTS, "slow down\n"),
    }
}
