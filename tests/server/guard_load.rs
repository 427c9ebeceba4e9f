//! The service guard under a real overload, on a real axum server over
//! loopback: a service that does 8 requests at a time of 20 ms each (400
//! a second) is offered three times that for 10 s, by two classes of
//! callers: critical (a fifth of the traffic, 240 a second) and bulk. The
//! guard sheds bulk and serves every critical request; tower's
//! `ConcurrencyLimit` + `LoadShed`, the same run beside it, sheds whoever
//! comes next. Both runs print their figures (`cargo test --all-features
//! --test server guard_load -- --nocapture`); the figures on a quiet
//! machine are in `benches/README.md`. What is asserted is who is served,
//! not how fast.

#![cfg(feature = "axum")]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::error_handling::HandleErrorLayer;
use axum::http::StatusCode;
use axum::routing::get;
use portcullis::server::{KeyExtractor, ThrottleLayer};
use portcullis::{BulkheadConfig, RateConfig, ThrottleManager};
use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::layer::serve;

const WORKERS: usize = 8;
const WORK: Duration = Duration::from_millis(20);
const RUN: Duration = Duration::from_secs(10);
/// Three times the service's 400 a second.
const OFFERED_PER_SECOND: u32 = 1_200;
/// Every fifth request is critical.
const CRITICAL_EVERY: usize = 5;

/// The service: 8 requests at a time, 20 ms each; more wait their turn.
fn service() -> Router {
    let workers = Arc::new(Semaphore::new(WORKERS));
    Router::new().route(
        "/",
        get(move || {
            let workers = Arc::clone(&workers);
            async move {
                let _worker = workers.acquire().await.unwrap();
                tokio::time::sleep(WORK).await;
                "done"
            }
        }),
    )
}

/// One request's class, whether it was served (200), and how long it took.
type Seen = (bool, bool, Duration);

/// What one run saw.
#[derive(Debug)]
struct Figures {
    critical_sent: usize,
    critical_served: usize,
    bulk_sent: usize,
    bulk_served: usize,
    critical_p99: Duration,
}

impl Figures {
    fn of(seen: &[Seen]) -> Self {
        let count = |critical: bool, served: bool| {
            seen.iter()
                .filter(|(c, s, _)| *c == critical && (!served || *s))
                .count()
        };
        let mut critical: Vec<Duration> = seen
            .iter()
            .filter(|(c, s, _)| *c && *s)
            .map(|(_, _, took)| *took)
            .collect();
        Self {
            critical_sent: count(true, false),
            critical_served: count(true, true),
            bulk_sent: count(false, false),
            bulk_served: count(false, true),
            critical_p99: p99(&mut critical),
        }
    }

    fn critical_share(&self) -> f64 {
        100.0 * self.critical_served as f64 / self.critical_sent.max(1) as f64
    }

    fn goodput(&self) -> f64 {
        let capacity = RUN.as_secs_f64() * WORKERS as f64 / WORK.as_secs_f64();
        100.0 * (self.critical_served + self.bulk_served) as f64 / capacity
    }
}

fn p99(took: &mut [Duration]) -> Duration {
    took.sort();
    took.get(took.len() * 99 / 100)
        .or(took.last())
        .copied()
        .unwrap_or_default()
}

/// The p99 latency of critical requests alone, 40 a second for 2 s.
async fn unloaded_p99(url: &str) -> Duration {
    let client = reqwest::Client::new();
    let mut took = Vec::new();
    for _ in 0..80 {
        let sent = Instant::now();
        let answer = client
            .get(url)
            .header("x-api-key", "warm")
            .header("x-priority", "0");
        assert_eq!(answer.send().await.unwrap().status(), 200);
        took.push(sent.elapsed());
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    p99(&mut took)
}

/// Offers the overload to `url` for the run, and what it saw.
async fn offer(url: &str) -> Figures {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(1_024)
        .build()
        .unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let start = Instant::now();
    let mut every = tokio::time::interval(Duration::from_secs(1) / OFFERED_PER_SECOND);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut calls = Vec::new();
    let mut sent = 0;
    while start.elapsed() < RUN {
        every.tick().await;
        sent += 1;
        let critical = sent % CRITICAL_EVERY == 0;
        let (client, url, seen) = (client.clone(), url.to_owned(), Arc::clone(&seen));
        calls.push(tokio::spawn(async move {
            let request = client
                .get(&url)
                .header("x-api-key", format!("client-{}", sent % 20))
                .header("x-priority", if critical { "0" } else { "3" });
            let at = Instant::now();
            let served = match request.send().await {
                Ok(answer) => answer.status() == 200 && answer.bytes().await.is_ok(),
                Err(_) => false,
            };
            seen.lock().unwrap().push((critical, served, at.elapsed()));
        }));
    }
    for call in calls {
        call.await.unwrap();
    }
    let seen = seen.lock().unwrap();
    Figures::of(&seen)
}

fn print(name: &str, figures: &Figures, unloaded: Duration) {
    println!(
        "{name}: critical served {}/{} ({:.1} %), bulk served {}/{} ({:.1} %), goodput {:.1} % of capacity, critical p99 {:?} ({:.1}x the unloaded {:?})",
        figures.critical_served,
        figures.critical_sent,
        figures.critical_share(),
        figures.bulk_served,
        figures.bulk_sent,
        100.0 * figures.bulk_served as f64 / figures.bulk_sent.max(1) as f64,
        figures.goodput(),
        figures.critical_p99,
        figures.critical_p99.as_secs_f64() / unloaded.as_secs_f64(),
        unloaded,
    );
}

/// The service behind a layer with each client's quota (generous here:
/// the guard does the shedding) and a service guard of `limit`; its URL
/// and the guard's manager.
async fn guarded(limit: BulkheadConfig) -> (String, ThrottleManager<String>) {
    let clients = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_second(1_000).burst(100))
        .build()
        .unwrap();
    let layer = ThrottleLayer::builder(clients, KeyExtractor::header("x-api-key"))
        .priority_header("x-priority")
        .service_guard(limit)
        .build()
        .unwrap();
    let guard = layer.service_guard().unwrap().clone();
    (serve(service().layer(layer)).await, guard)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_three_times_its_capacity_the_guard_serves_every_critical_request() {
    let _alone = crate::support::alone();
    let (fixed, _) = guarded(BulkheadConfig::new(WORKERS as u32).queue(64)).await;
    let unloaded = unloaded_p99(&fixed).await;
    let guard = offer(&fixed).await;
    // The same with a limit the guard learns, printed beside it.
    let (url, learning) = guarded(BulkheadConfig::adaptive().queue(64)).await;
    let learned = offer(&url).await;
    let limit = learning.key("/").concurrency_limit();

    let shed = tower::ServiceBuilder::new()
        .layer(HandleErrorLayer::new(|_: tower::BoxError| async {
            StatusCode::SERVICE_UNAVAILABLE
        }))
        .load_shed()
        .concurrency_limit(WORKERS);
    let tower_run = offer(&serve(service().layer(shed)).await).await;

    print("service guard, limit 8", &guard, unloaded);
    print("service guard, learned limit", &learned, unloaded);
    println!("the learned limit at the end: {limit:?}");
    print("tower ConcurrencyLimit + LoadShed", &tower_run, unloaded);
    assert!(
        guard.critical_share() >= 99.0,
        "critical served: {:.1} % ({guard:?})",
        guard.critical_share()
    );
    assert!(
        guard.bulk_served < guard.bulk_sent,
        "bulk carries the refusals: {guard:?}"
    );
    assert!(
        guard.critical_share() > tower_run.critical_share(),
        "{guard:?} vs {tower_run:?}"
    );
}
