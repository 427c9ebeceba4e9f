//! A learned concurrency limit against a real HTTP server on loopback that
//! serves at most N requests at once (N unknown to the client) and answers
//! 503 beyond: after warm-up, few 503s and most of the server's capacity.
//!
//! Real time, real sockets. `cargo test --test bulkhead adaptive_http:: --
//! --nocapture` prints the figures.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use portcullis::{BulkheadConfig, Priority, ThrottleManager};

/// What the server takes at once, and how long each request takes.
const SERVER_LIMIT: usize = 8;
/// (Long enough that the client's own share of a request's time, the
/// loopback round trip, is a few per cent of it.)
const SERVICE: Duration = Duration::from_millis(40);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_learned_limit_finds_what_the_server_takes() {
    let _alone = crate::support::alone();
    let url = support::serve_at_most(SERVER_LIMIT, SERVICE).await;
    let manager = ThrottleManager::<String>::builder()
        .bulkhead(
            BulkheadConfig::adaptive()
                .bounds(1, 100)
                .queue(64)
                .queue_timeout(Duration::from_secs(1)),
        )
        .build()
        .unwrap();
    let client = reqwest::Client::new();
    let (warm_up, length) = (Duration::from_secs(3), Duration::from_secs(8));
    let start = Instant::now();
    let (ok, unavailable) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut callers = Vec::new();
    for _ in 0..32 {
        let (client, url, manager) = (client.clone(), url.clone(), manager.clone());
        let (ok, unavailable) = (Arc::clone(&ok), Arc::clone(&unavailable));
        callers.push(tokio::spawn(async move {
            while start.elapsed() < length {
                let Ok(permit) = manager.acquire("server", Priority::HIGH).await else {
                    continue;
                };
                let status = client.get(&url).send().await.unwrap().status();
                let counted = start.elapsed() > warm_up;
                if status == StatusCode::SERVICE_UNAVAILABLE {
                    permit.failure();
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
    for caller in callers {
        caller.await.unwrap();
    }
    let (ok, unavailable) = (
        ok.load(Ordering::Relaxed),
        unavailable.load(Ordering::Relaxed),
    );
    let seconds = (length - warm_up).as_secs_f64();
    let capacity = SERVER_LIMIT as f64 / SERVICE.as_secs_f64();
    let refused = unavailable as f64 / (ok + unavailable).max(1) as f64;
    let goodput = ok as f64 / seconds / capacity;
    println!(
        "learned limit {:?} (server takes {SERVER_LIMIT}); {ok} ok, {unavailable} 503 ({:.1} %); goodput {:.0} % of {capacity:.0}/s",
        manager.concurrency_limit("server"),
        refused * 100.0,
        goodput * 100.0
    );
    assert!(refused <= 0.05, "{:.1} % answered 503", refused * 100.0);
    assert!(goodput >= 0.9, "goodput {:.0} %", goodput * 100.0);
}
