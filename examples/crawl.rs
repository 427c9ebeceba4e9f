//! The main job: crawl five hosts of different capacity through one
//! `ThrottleManager`, and watch each host's rate settle near what that host
//! can take.
//!
//! The example starts its own HTTP server on loopback. It serves five
//! virtual hosts, each behind a real token bucket (governor); above its
//! capacity a host refuses:
//! - alpha, beta and gamma (20, 50 and 100 requests a second) answer 429
//!   Too Many Requests;
//! - delta (30/s) answers 429 with `Retry-After: 1`;
//! - epsilon (40/s) answers 503 Service Unavailable.
//!
//! The crawler knows none of these numbers. Its HTTP client carries the
//! crate's middleware (`portcullis::client::ThrottleMiddleware`), so each
//! request waits for its host's rate (every host starts at 10/s), each
//! response is reported (429 and 503 slow the host down, successes speed it
//! up), and a `Retry-After` holds the host for as long as it asks. A
//! refused request is sent again under the manager's retry policy, within
//! the host's retry budget (a tenth of its calls), after a jittered
//! backoff or the `Retry-After`, whichever is longer.
//!
//! While it runs, the manager's status page (the hosts refused most, each
//! host's rate over time) is served on a loopback port printed at start,
//! with its metrics for Prometheus at `/metrics`.
//!
//! Run: `cargo run --release --features reqwest,status,metrics --example crawl`
//! (about 20 s; `CRAWL_SECS=N` to change).

#[path = "observe/mod.rs"]
mod observe;

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use portcullis::client::ThrottleMiddleware;
use portcullis::retry::RetryPolicy;
use portcullis::{RateConfig, Rejected, ThrottleManager};

/// The hosts and their true capacities in requests per second.
const HOSTS: [(&str, u32); 5] = [
    ("alpha.test", 20),
    ("beta.test", 50),
    ("gamma.test", 100),
    ("delta.test", 30),
    ("epsilon.test", 40),
];

/// How a host refuses a request beyond its capacity.
fn refusal(host: &str) -> (StatusCode, Option<&'static str>) {
    match host {
        "delta.test" => (StatusCode::TOO_MANY_REQUESTS, Some("1")),
        "epsilon.test" => (StatusCode::SERVICE_UNAVAILABLE, None),
        _ => (StatusCode::TOO_MANY_REQUESTS, None),
    }
}
/// Every host's rate starts here.
const STARTING_RATE: f64 = 10.0;
/// Concurrent crawl workers per host.
const WORKERS_PER_HOST: usize = 8;

/// What the crawler saw of one host: its calls, each the last answer of
/// a request and its retries.
#[derive(Default)]
struct HostStats {
    sent: AtomicU64,
    ok: AtomicU64,
    refused: AtomicU64,
    refused_locally: AtomicU64,
    errors: AtomicU64,
}

/// What one host saw: the requests that reached it, and those it refused
/// (429 or 503).
#[derive(Default)]
struct HostLoad {
    requests: AtomicU64,
    refused: AtomicU64,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let crawl_for = Duration::from_secs(
        std::env::var("CRAWL_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(20),
    );
    let loads: Arc<HashMap<&str, HostLoad>> = Arc::new(
        HOSTS
            .iter()
            .map(|(h, _)| (*h, HostLoad::default()))
            .collect(),
    );
    let metrics = observe::install_metrics()?;
    let addr = start_server(Arc::clone(&loads)).await?;
    println!("server on {addr}: {}", describe_hosts());

    // Every host starts at 10/s. A success adds 0.3/s (so the rate grows by
    // 30 % a second while it is what limits the crawl); a 429 or 503 takes
    // 30 % off, at most once per 500 ms, so the refusals of requests already
    // in flight count once. The crate's defaults for a start of 10/s, and the
    // README's quick start: the rate saws just below each host's capacity.
    // A refused page is fetched again, up to 3 times, within the host's
    // retry budget and 10 s.
    let manager = ThrottleManager::<String>::builder()
        .rate(
            RateConfig::adaptive(STARTING_RATE)
                .bounds(1.0, 1_000.0)
                .increase_by(0.3)
                .decrease_factor(0.7),
        )
        .retry(
            RetryPolicy::new()
                .max_retries(3)
                .deadline(Duration::from_secs(10)),
        )
        .name("crawler")
        .key_names(|host: &String| host.clone()) // hosts are fine to show
        .build()?;
    let page = observe::serve(&manager, metrics).await?;
    println!("status page: http://{page}/status   metrics: http://{page}/metrics");
    let mut client = reqwest::Client::builder().timeout(Duration::from_secs(5));
    for (host, _) in HOSTS {
        client = client.resolve(host, addr); // the virtual hosts all live on loopback
    }
    // The middleware keys each request by its host (here "alpha.test:PORT"),
    // waits for that host's rate, reports the response, honours
    // Retry-After and retries a refusal as the policy allows.
    let client = reqwest_middleware::ClientBuilder::new(client.build()?)
        .with(ThrottleMiddleware::new(manager.clone()))
        .build();
    let key = |host: &str| format!("{host}:{}", addr.port());

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
            let (client, stats) = (client.clone(), Arc::clone(&stats));
            workers.push(tokio::spawn(async move {
                let host_stats = &stats[host];
                let mut page = worker;
                while started.elapsed() < crawl_for {
                    let url = format!("http://{host}:{}/page/{page}", addr.port());
                    page += WORKERS_PER_HOST;
                    let counter = match client.get(&url).send().await {
                        // Not sent: the manager refused it (with this
                        // manager's settings, only a full key space would).
                        Err(reqwest_middleware::Error::Middleware(e))
                            if e.downcast_ref::<Rejected>().is_some() =>
                        {
                            host_stats.refused_locally.fetch_add(1, Ordering::Relaxed);
                            continue;
                        }
                        // The last answer, after any retries. The call ends
                        // when its page has been read: a success counts then.
                        Ok(response) => {
                            let status = response.status();
                            match (response.bytes().await, status) {
                                (Err(_), _) => &host_stats.errors,
                                (Ok(_), status) if status.is_success() => &host_stats.ok,
                                (Ok(_), StatusCode::TOO_MANY_REQUESTS)
                                | (Ok(_), StatusCode::SERVICE_UNAVAILABLE) => &host_stats.refused,
                                (Ok(_), _) => &host_stats.errors,
                            }
                        }
                        Err(_) => &host_stats.errors,
                    };
                    host_stats.sent.fetch_add(1, Ordering::Relaxed);
                    counter.fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
    }

    // Progress, once a second; the learned rate is averaged over the second
    // half of the run, once it has settled.
    let mut learned: HashMap<&str, (f64, u32)> = HashMap::new();
    let mut ok_at_half: Option<(Instant, HashMap<&str, u64>)> = None;
    let mut last_ok: HashMap<&str, u64> = HashMap::new();
    // How far each rate ever rose above what its host was used at: the rate
    // over the successes per second of the last 2 s (20 ticks), while the
    // rate was above its start.
    let mut ok_history: HashMap<&str, VecDeque<u64>> = HashMap::new();
    let mut above_use: HashMap<&str, f64> = HashMap::new();
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let mut ticks = 0u64;
    while started.elapsed() < crawl_for {
        tick.tick().await;
        ticks += 1;
        for (host, _) in HOSTS {
            let history = ok_history.entry(host).or_default();
            history.push_back(stats[host].ok.load(Ordering::Relaxed));
            if history.len() > 21 {
                history.pop_front();
            }
            let rate = manager.key(&key(host)).rate().unwrap_or(0.0);
            let used = (history[history.len() - 1] - history[0]) as f64 / 2.0;
            if history.len() == 21 && rate > STARTING_RATE && used > 0.0 {
                let peak = above_use.entry(host).or_default();
                *peak = peak.max(rate / used);
            }
        }
        if started.elapsed() > crawl_for / 2 {
            ok_at_half.get_or_insert_with(|| {
                let ok = HOSTS
                    .iter()
                    .map(|(h, _)| (*h, stats[h].ok.load(Ordering::Relaxed)));
                (Instant::now(), ok.collect())
            });
            for (host, _) in HOSTS {
                let rate = manager.key(&key(host)).rate().unwrap_or(0.0);
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
                    let name = host.trim_end_matches(".test");
                    let rate = manager.key(&key(host)).rate().unwrap_or(0.0);
                    format!("{name} {rate:>5.1}/s ok {per_second:>3}/s")
                })
                .collect();
            println!("{:>3}s  {}", started.elapsed().as_secs(), line.join(" | "));
        }
    }
    // Goodput counts the successes up to the end of the run, not those of
    // the calls still queued then, which finish after it.
    let ended = Instant::now();
    let ok_at_end: HashMap<&str, u64> = HOSTS
        .iter()
        .map(|(h, _)| (*h, stats[h].ok.load(Ordering::Relaxed)))
        .collect();
    for worker in workers {
        worker.await?;
    }

    println!();
    println!("learned rate and goodput: averages over the second half of the run, once settled");
    println!("(requests and refused: what each host saw, 429s and 503s; calls: the crawler's,");
    println!(" each one request and its retries; failed: calls whose last answer was a refusal;");
    println!(" not sent: refused locally by the manager; delta asks for Retry-After: 1)");
    println!(
        "(rate/used: the highest rate over the host's successes per second in the 2 s before)"
    );
    println!(
        "{:<13} {:>9} {:>9} {:>8} {:>7} {:>9} {:>7} {:>9} {:>6} {:>13} {:>11} {:>11} {:>10}",
        "host",
        "capacity",
        "requests",
        "refused",
        "calls",
        "successes",
        "failed",
        "not sent",
        "errors",
        "learned rate",
        "learned/cap",
        "goodput/cap",
        "rate/used"
    );
    let (half_time, ok_half) = ok_at_half.unwrap_or_else(|| (started, HashMap::new()));
    let secs = ended.duration_since(half_time).as_secs_f64();
    for (host, capacity) in HOSTS {
        let (s, load) = (&stats[host], &loads[host]);
        let (sum, n) = learned.get(host).copied().unwrap_or((0.0, 1));
        let learned_rate = sum / f64::from(n.max(1));
        let ok = s.ok.load(Ordering::Relaxed);
        let ok_settled = ok_at_end[host] - ok_half.get(host).copied().unwrap_or(0);
        println!(
            "{:<13} {:>7}/s {:>9} {:>8} {:>7} {:>9} {:>7} {:>9} {:>6} {:>11.1}/s {:>10.0}% {:>10.0}% {:>9.1}x",
            host,
            capacity,
            load.requests.load(Ordering::Relaxed),
            load.refused.load(Ordering::Relaxed),
            s.sent.load(Ordering::Relaxed),
            ok,
            s.refused.load(Ordering::Relaxed),
            s.refused_locally.load(Ordering::Relaxed),
            s.errors.load(Ordering::Relaxed),
            learned_rate,
            100.0 * learned_rate / f64::from(capacity),
            100.0 * ok_settled as f64 / secs / f64::from(capacity),
            above_use.get(host).copied().unwrap_or(1.0),
        );
    }
    observe::hold().await;
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
/// refuses beyond, as [`refusal`] says, and counts in `loads` what it
/// answered.
async fn start_server(loads: Arc<HashMap<&'static str, HostLoad>>) -> std::io::Result<SocketAddr> {
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
        .with_state(Arc::new(Hosts { limits, loads }));
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(addr)
}

/// The virtual hosts: each one's token bucket, and what it answered.
struct Hosts {
    limits: HashMap<&'static str, DefaultDirectRateLimiter>,
    loads: Arc<HashMap<&'static str, HostLoad>>,
}

async fn page(State(hosts): State<Arc<Hosts>>, headers: HeaderMap) -> axum::response::Response {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.split(':').next())
        .unwrap_or_default();
    let (Some(limit), Some(load)) = (hosts.limits.get(host), hosts.loads.get(host)) else {
        return (StatusCode::NOT_FOUND, "no such host\n").into_response();
    };
    load.requests.fetch_add(1, Ordering::Relaxed);
    if limit.check().is_ok() {
        return (StatusCode::OK, "<html>a page</html>\n").into_response();
    }
    load.refused.fetch_add(1, Ordering::Relaxed);
    match refusal(host) {
        (status, Some(seconds)) => {
            (status, [(header::RETRY_AFTER, seconds)], "slow down\n").into_response()
        }
        (status, None) => (status, "slow down\n").into_response(),
    }
}
