//! A learned rate behind `Retry-After`, against a real server: 50
//! requests a second on loopback, 429 with `Retry-After: 2` beyond, 8
//! callers through the middleware from the README's start of 10/s for 30 s
//! of real time. Every pause is honoured (no request reaches the server
//! inside one, but those already on their way). A pause also marks the
//! fall it came with: the rate resumes at 90 % of the rate the refused
//! call was sent at, for 15 s, and probes gently; the share of
//! the capacity served over the last 15 s is printed, not asserted (a
//! real-time ratio; `cargo test --features reqwest --test client paused --
//! --nocapture`).

#[path = "../support/limited_server.rs"]
mod limited_server;

use std::time::{Duration, Instant};

use limited_server::CAPACITY;
use portcullis::{RateConfig, ThrottleManager};

use crate::client;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_pauses_us_is_still_served_near_its_capacity() {
    let _alone = crate::support::alone();
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(10.0).bounds(1.0, 200.0))
        .build()
        .unwrap();
    let (addr, seen) = limited_server::start_server_asking_pauses(Duration::from_secs(2))
        .await
        .unwrap();
    let http = client(&manager);
    let url = format!("http://{addr}/");
    let start = Instant::now();
    let until = start + Duration::from_secs(30);
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (http, url) = (http.clone(), url.clone());
        tasks.push(tokio::spawn(async move {
            while Instant::now() < until {
                if let Ok(response) = http.get(&url).send().await {
                    let _ = response.bytes().await;
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let late = seen.between(start + Duration::from_secs(15), 15.0);
    let pauses = seen.pauses.lock().unwrap().len();
    let inside = seen.inside_pauses(Duration::from_millis(100));
    println!(
        "Retry-After: 2: {pauses} pauses in 30 s, {inside} requests inside one; over the \
         last 15 s {:.1} % of {CAPACITY}/s served, {:.1} % refused",
        100.0 * late.goodput(),
        100.0 * late.refused()
    );
    assert_eq!(inside, 0, "requests inside a pause the server asked for");
}
