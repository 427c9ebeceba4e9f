//! A learned concurrency limit against real HTTP servers on loopback that
//! serve at most N requests at once (N unknown to the client) and answer
//! 503 beyond: after warm-up, few 503s and most of the server's capacity,
//! whether each request takes the same time or their latency varies.
//!
//! Real time, real sockets. `cargo test --test bulkhead adaptive_http:: --
//! --nocapture` prints the figures.

use crate::support;
use crate::support::latency_shape::Shape;

/// The other algorithms the learned limit was chosen against, as the
/// simulator runs them.
#[path = "../../examples/simulate/candidates.rs"]
#[allow(dead_code)]
mod candidates;

use candidates::{Algorithm, CandidateLimiter};

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use portcullis::{BulkheadConfig, Priority, ThrottleManager};

/// What one run counted after its warm-up.
struct Counted {
    ok: u64,
    unavailable: u64,
    limit: Option<u32>,
}

impl Counted {
    fn refused(&self) -> f64 {
        self.unavailable as f64 / (self.ok + self.unavailable).max(1) as f64
    }
}

/// `callers` loops through a bulkhead of `config` against `url` for
/// `length`, counting answers after `warm_up`.
async fn run(
    url: &str,
    config: BulkheadConfig,
    callers: usize,
    warm_up: Duration,
    length: Duration,
) -> Counted {
    let manager = ThrottleManager::<String>::builder()
        .bulkhead(config)
        .build()
        .unwrap();
    let client = reqwest::Client::new();
    let start = Instant::now();
    let (ok, unavailable) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut tasks = Vec::new();
    for _ in 0..callers {
        let (client, url, manager) = (client.clone(), url.to_owned(), manager.clone());
        let (ok, unavailable) = (Arc::clone(&ok), Arc::clone(&unavailable));
        tasks.push(tokio::spawn(async move {
            while start.elapsed() < length {
                let Ok(permit) = manager.acquire("server", Priority::HIGH).await else {
                    continue;
                };
                let status = client.get(&url).send().await.unwrap().status();
                let counted = start.elapsed() > warm_up;
                if status == StatusCode::SERVICE_UNAVAILABLE {
                    permit.overloaded();
                    if counted {
                        unavailable.fetch_add(1, Ordering::Relaxed);
                    }
                } else {
                    permit.success();
                    if counted {
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    Counted {
        ok: ok.load(Ordering::Relaxed),
        unavailable: unavailable.load(Ordering::Relaxed),
        limit: manager.key("server").concurrency_limit(),
    }
}

/// As [`run`], through another algorithm's limit (its own queue of 20 for
/// 200 ms) instead of a bulkhead. A caller it sheds tries again 5 ms
/// later.
async fn run_candidate(
    url: &str,
    algorithm: Algorithm,
    callers: usize,
    warm_up: Duration,
    length: Duration,
) -> Counted {
    let limiter = Arc::new(CandidateLimiter::new(algorithm));
    let client = reqwest::Client::new();
    let start = Instant::now();
    let (ok, unavailable) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut tasks = Vec::new();
    for _ in 0..callers {
        let (client, url, limiter) = (client.clone(), url.to_owned(), Arc::clone(&limiter));
        let (ok, unavailable) = (Arc::clone(&ok), Arc::clone(&unavailable));
        tasks.push(tokio::spawn(async move {
            while start.elapsed() < length {
                if !limiter.acquire().await {
                    // Its queue (20) is full: try again shortly, without
                    // spinning.
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                }
                let admitted = start.elapsed();
                let status = client.get(&url).send().await.unwrap().status();
                let refused = status == StatusCode::SERVICE_UNAVAILABLE;
                let ended = start.elapsed();
                limiter.release(ended, ended - admitted, refused);
                if ended > warm_up {
                    let counter = if refused { &unavailable } else { &ok };
                    counter.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    Counted {
        ok: ok.load(Ordering::Relaxed),
        unavailable: unavailable.load(Ordering::Relaxed),
        limit: Some(limiter.limit()),
    }
}

fn learned(queue_timeout: Duration) -> BulkheadConfig {
    BulkheadConfig::adaptive()
        .bounds(1, 100)
        .queue(64)
        .queue_timeout(queue_timeout)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_learned_limit_finds_what_the_server_takes() {
    let _alone = crate::support::alone();
    // 8 at once, 40 ms each: long enough that the loopback round trip is
    // a few per cent of a request's time.
    let (server_limit, service) = (8, Duration::from_millis(40));
    let url = support::serve_at_most(server_limit, service).await;
    let (warm_up, length) = (Duration::from_secs(3), Duration::from_secs(8));
    let counted = run(&url, learned(Duration::from_secs(1)), 32, warm_up, length).await;
    let capacity = server_limit as f64 / service.as_secs_f64();
    let goodput = counted.ok as f64 / (length - warm_up).as_secs_f64() / capacity;
    println!(
        "learned limit {:?} (server takes {server_limit}); {} ok, {} 503 ({:.1} %); goodput {:.0} % of {capacity:.0}/s",
        counted.limit,
        counted.ok,
        counted.unavailable,
        counted.refused() * 100.0,
        goodput * 100.0
    );
    assert!(
        counted.refused() <= 0.05,
        "{:.1} % answered 503",
        counted.refused() * 100.0
    );
    assert!(goodput >= 0.9, "goodput {:.0} %", goodput * 100.0);
}

/// Issue 30's slow server: 4 at once, 200 ms each, 16 callers for 12 s.
/// From 4 s on, the learned limit serves at least 90 % of what a fixed
/// bulkhead of 4 serves against the same server, with at most 5 % 503s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn against_a_slow_server_the_learned_limit_serves_what_a_fixed_one_does() {
    let _alone = crate::support::alone();
    let url = support::serve_at_most(4, Duration::from_millis(200)).await;
    let (warm_up, length) = (Duration::from_secs(4), Duration::from_secs(12));
    let fixed = run(&url, BulkheadConfig::new(4).queue(64), 16, warm_up, length).await;
    let learned = run(&url, learned(Duration::from_secs(5)), 16, warm_up, length).await;
    let share = learned.ok as f64 / fixed.ok.max(1) as f64;
    println!(
        "slow server: fixed 4 served {}, learned (limit {:?}) {} ({:.0} %), {:.1} % answered 503",
        fixed.ok,
        learned.limit,
        learned.ok,
        share * 100.0,
        learned.refused() * 100.0
    );
    assert!(
        share >= 0.9,
        "{:.0} % of the fixed limit's goodput",
        share * 100.0
    );
    assert!(
        learned.refused() <= 0.05,
        "{:.1} % answered 503",
        learned.refused() * 100.0
    );
}

/// Issue 30's real-server shapes: a server of N = 8 at once (503 beyond)
/// whose latency varies (exponential, and a tenth fast cache hits; mean
/// 40 ms), 32 callers. After 3 s, the learned limit serves at least 90 % of
/// what a fixed bulkhead of 8 serves against the same server, with at
/// most 5 % 503s. With the exponential shape, the other algorithms
/// compared in the simulator are measured too (printed, not asserted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn against_a_server_whose_latency_varies_the_learned_limit_serves_what_a_fixed_one_does() {
    let _alone = crate::support::alone();
    let (warm_up, length) = (Duration::from_secs(3), Duration::from_secs(8));
    let mut failures = Vec::new();
    for shape in [Shape::Exponential, Shape::FastHits] {
        // A server each, drawing the same latencies in the same order.
        let serve = || support::serve_shaped(8, shape, Duration::from_millis(40));
        let fixed = BulkheadConfig::new(8).queue(64);
        let fixed = run(&serve().await, fixed, 32, warm_up, length).await;
        let learned = learned(Duration::from_secs(1));
        let learned = run(&serve().await, learned, 32, warm_up, length).await;
        let share = learned.ok as f64 / fixed.ok.max(1) as f64;
        println!(
            "{shape:?}: fixed 8 served {}, learned (limit {:?}) {} ({:.0} %), {:.1} % answered 503",
            fixed.ok,
            learned.limit,
            learned.ok,
            share * 100.0,
            learned.refused() * 100.0
        );
        if share < 0.9 || learned.refused() > 0.05 {
            failures.push((shape, share, learned.refused()));
        }
        if shape != Shape::Exponential {
            continue;
        }
        for algorithm in [
            Algorithm::ProbeGradient,
            Algorithm::Gradient2,
            Algorithm::Aimd,
        ] {
            let other = run_candidate(&serve().await, algorithm, 32, warm_up, length).await;
            println!(
                "  {algorithm:?}: (limit {:?}) {} ({:.0} %), {:.1} % answered 503",
                other.limit,
                other.ok,
                100.0 * other.ok as f64 / fixed.ok.max(1) as f64,
                other.refused() * 100.0
            );
        }
    }
    assert!(
        failures.is_empty(),
        "shapes below 90 % of the fixed limit's goodput or above 5 % 503s: {failures:?}"
    );
}
