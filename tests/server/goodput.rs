//! Overload without bufferbloat, on a real axum server over loopback: 8
//! workers of 20 ms (400 requests a second) offered twice that for 10 s by
//! callers who give up after 250 ms, in front of a queue of 512. Behind a
//! plain first-come-first-served queue, a request waits most of the queue
//! and is answered too late; with CoDel and the callers' deadlines (the
//! layer's deadline header), the requests served are those still wanted,
//! and no handler starts for a caller who has given up. Both runs print
//! their figures (`cargo test --all-features --test server goodput --
//! --nocapture`).

#![cfg(feature = "axum")]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::routing::get;
use portcullis::server::{KeyExtractor, ThrottleLayer};
use portcullis::{BulkheadConfig, ThrottleManager, deadline};
use tokio::time::Instant;

use crate::layer::serve;

const WORKERS: u32 = 8;
const WORK: Duration = Duration::from_millis(20);
const PATIENCE: Duration = Duration::from_millis(250);
const RUN: Duration = Duration::from_secs(10);

/// What one run saw.
#[derive(Debug)]
struct Run {
    /// Answered 200 within the caller's patience.
    in_time: usize,
    /// Handlers started for a request whose deadline had passed.
    started_late: usize,
}

async fn run(codel_and_deadlines: bool) -> Run {
    let mut bulkhead = BulkheadConfig::new(WORKERS)
        .queue(512)
        .queue_timeout(Duration::from_secs(2));
    if codel_and_deadlines {
        bulkhead = bulkhead.codel(Duration::from_millis(5), Duration::from_millis(100));
    }
    let manager = ThrottleManager::<String>::builder()
        .bulkhead(bulkhead)
        .build()
        .unwrap();
    let started_late = Arc::new(AtomicUsize::new(0));
    let handler = {
        let started_late = Arc::clone(&started_late);
        move || {
            let started_late = Arc::clone(&started_late);
            async move {
                // The layer runs the handler under the request's deadline.
                if deadline::current().is_some_and(|at| at <= Instant::now()) {
                    started_late.fetch_add(1, Ordering::SeqCst);
                }
                tokio::time::sleep(WORK).await;
                "done"
            }
        }
    };
    let layer = ThrottleLayer::builder(manager, KeyExtractor::header("x-api-key"))
        .deadline_header("x-request-timeout-ms")
        .build()
        .unwrap();
    let url = serve(axum::Router::new().route("/", get(handler)).layer(layer)).await;
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(512)
        .build()
        .unwrap();
    let in_time = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut calls = Vec::new();
    let mut every = tokio::time::interval(Duration::from_secs(1) / (4 * WORKERS * 25)); // 800/s
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    while start.elapsed() < RUN {
        every.tick().await;
        let (client, url, in_time) = (client.clone(), url.clone(), Arc::clone(&in_time));
        calls.push(tokio::spawn(async move {
            let mut request = client
                .get(&url)
                .header("x-api-key", "tenant")
                .timeout(PATIENCE);
            if codel_and_deadlines {
                request = request.header("x-request-timeout-ms", PATIENCE.as_millis().to_string());
            }
            let sent = Instant::now();
            if let Ok(response) = request.send().await {
                if response.status() == 200
                    && response.bytes().await.is_ok()
                    && sent.elapsed() <= PATIENCE
                {
                    in_time.fetch_add(1, Ordering::SeqCst);
                }
            }
        }));
    }
    for call in calls {
        call.await.unwrap();
    }
    Run {
        in_time: in_time.load(Ordering::SeqCst),
        started_late: started_late.load(Ordering::SeqCst),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_codel_and_deadlines_the_requests_served_are_those_still_wanted() {
    let _alone = crate::support::alone();
    let capacity = (RUN.as_secs_f64() * f64::from(WORKERS) / WORK.as_secs_f64()) as usize;
    let fifo = run(false).await;
    let codel = run(true).await;
    let share = |run: &Run| 100.0 * run.in_time as f64 / capacity as f64;
    println!(
        "served within 250 ms, of a capacity of {capacity}: FIFO {} ({:.1} %), CoDel + deadlines {} ({:.1} %); started past the deadline: {}",
        fifo.in_time,
        share(&fifo),
        codel.in_time,
        share(&codel),
        codel.started_late
    );
    assert_eq!(
        codel.started_late, 0,
        "a handler started for a caller who had given up"
    );
    assert!(codel.in_time > fifo.in_time, "{codel:?} vs {fifo:?}");
}
