//! The learned concurrency limit against backends whose latency varies,
//! on virtual time: a backend that serves at most N = 8 calls at once
//! (503 beyond), each taking a latency drawn from a shape (constant,
//! uniform, exponential, a tenth fast cache hits, rising with load). Over
//! the second half of a run, the learned limit, the goodput against a
//! fixed limit of N in the same run, and the share of calls refused.
//!
//! `cargo test --all-features --test bulkhead shapes -- --nocapture`
//! prints the table.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use portcullis::{BulkheadConfig, Priority, ThrottleManager};
use tokio::time::Instant;

use crate::support::latency_shape::{Draws, Shape};

/// What the backend serves at once.
const N: u32 = 8;
const MEAN: Duration = Duration::from_millis(10);
const CALLERS: usize = 32;
const LENGTH: Duration = Duration::from_secs(60);

struct Backend {
    shape: Shape,
    in_flight: AtomicU32,
    draws: Mutex<Draws>,
}

impl Backend {
    fn new(shape: Shape) -> Self {
        Self {
            shape,
            in_flight: AtomicU32::new(0),
            draws: Mutex::new(Draws(7)),
        }
    }

    /// One call: `true` if served, `false` for a 503 (more than N at once).
    async fn call(&self) -> bool {
        let in_flight = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        if in_flight > N {
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(1)).await;
            return false;
        }
        let u = self.draws.lock().unwrap().next();
        let latency = self.shape.latency(MEAN, u, in_flight, N);
        tokio::time::sleep(latency).await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        true
    }
}

/// Over the second half of a run: the limit's 5th to 95th percentile,
/// successes a second, and the share of calls refused.
struct Settled {
    limits: (u32, u32),
    goodput: f64,
    refused: f64,
}

async fn run(shape: Shape, config: BulkheadConfig) -> Settled {
    let manager = ThrottleManager::<String>::builder()
        .bulkhead(config)
        .build()
        .unwrap();
    let backend = Arc::new(Backend::new(shape));
    let (ok, no) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let start = Instant::now();
    let half = LENGTH / 2;
    let tasks: Vec<_> = (0..CALLERS)
        .map(|_| {
            let (manager, backend, ok, no) =
                (manager.clone(), backend.clone(), ok.clone(), no.clone());
            tokio::spawn(async move {
                while start.elapsed() < LENGTH {
                    let permit = manager.acquire("api", Priority::HIGH).await.unwrap();
                    let served = backend.call().await;
                    let counter = if served { &ok } else { &no };
                    if start.elapsed() > half {
                        counter.fetch_add(1, Ordering::Relaxed);
                    }
                    if served {
                        permit.success();
                    } else {
                        permit.overloaded();
                    }
                }
            })
        })
        .collect();
    let mut limits = Vec::new();
    while start.elapsed() < LENGTH {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if start.elapsed() > half {
            limits.push(manager.key("api").concurrency_limit().unwrap());
        }
    }
    for task in tasks {
        task.await.unwrap();
    }
    limits.sort();
    let (ok, no) = (ok.load(Ordering::Relaxed), no.load(Ordering::Relaxed));
    Settled {
        limits: (
            limits[limits.len() / 20],
            limits[limits.len() - 1 - limits.len() / 20],
        ),
        goodput: ok as f64 / half.as_secs_f64(),
        refused: no as f64 / (ok + no).max(1) as f64,
    }
}

fn adaptive() -> BulkheadConfig {
    BulkheadConfig::adaptive().bounds(1, 200).queue(1_000)
}

#[tokio::test(start_paused = true)]
async fn the_learned_limit_holds_up_whatever_the_latency_shape() {
    println!(
        "backend of N = {N} at once (503 beyond), {CALLERS} callers, second half of {LENGTH:?}"
    );
    println!("| latency | learned limit (5th..95th) | goodput vs fixed {N} | refused |");
    println!("| --- | --- | --- | --- |");
    let mut failures = Vec::new();
    for shape in Shape::EVERY {
        let fixed = run(shape, BulkheadConfig::new(N).queue(1_000)).await;
        let learned = run(shape, adaptive()).await;
        let ratio = learned.goodput / fixed.goodput;
        println!(
            "| {shape:?} | {}..={} | {:.0} % ({:.0}/s vs {:.0}/s) | {:.1} % |",
            learned.limits.0,
            learned.limits.1,
            100.0 * ratio,
            learned.goodput,
            fixed.goodput,
            100.0 * learned.refused
        );
        let n = N as f64;
        let (low, high) = (learned.limits.0 as f64, learned.limits.1 as f64);
        if low < 0.75 * n || high > 1.5 * n || ratio < 0.9 || learned.refused > 0.05 {
            failures.push(shape);
        }
    }
    assert!(
        failures.is_empty(),
        "shapes that fail the bar: {failures:?}"
    );
}
