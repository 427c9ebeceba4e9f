//! Against a real HTTP server on loopback that serves at most N requests at
//! once and answers 503 beyond: with the bulkhead at N, the server never
//! answers 503; without it, the same load gets 503s.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::http::StatusCode;
use portcullis::{BulkheadConfig, Priority, ThrottleManager};

const SERVER_LIMIT: usize = 5;
const REQUESTS: usize = 100;

/// Sends `REQUESTS` requests from 25 concurrent workers; returns how many
/// got 503. With a manager, each request goes through its bulkhead.
async fn send_all(url: &str, manager: Option<ThrottleManager<String>>) -> usize {
    let client = reqwest::Client::new();
    let unavailable = Arc::new(AtomicUsize::new(0));
    let sent = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for _ in 0..25 {
        let (client, url, manager) = (client.clone(), url.to_string(), manager.clone());
        let (unavailable, sent) = (Arc::clone(&unavailable), Arc::clone(&sent));
        workers.push(tokio::spawn(async move {
            while sent.fetch_add(1, Ordering::AcqRel) < REQUESTS {
                let permit = match &manager {
                    Some(manager) => {
                        Some(manager.acquire("server", Priority::MEDIUM).await.unwrap())
                    }
                    None => None,
                };
                let status = client.get(&url).send().await.unwrap().status();
                if status == StatusCode::SERVICE_UNAVAILABLE {
                    unavailable.fetch_add(1, Ordering::AcqRel);
                }
                if let Some(permit) = permit {
                    permit.success();
                }
            }
        }));
    }
    for worker in workers {
        worker.await.unwrap();
    }
    unavailable.load(Ordering::Acquire)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_bulkhead_at_the_servers_limit_nothing_gets_503() {
    let _alone = crate::support::alone();
    let url = support::serve_at_most(SERVER_LIMIT, Duration::from_millis(10)).await;
    let manager = ThrottleManager::<String>::builder()
        .bulkhead(BulkheadConfig::new(SERVER_LIMIT as u32).queue(REQUESTS as u32))
        .build()
        .unwrap();
    assert_eq!(send_all(&url, Some(manager.clone())).await, 0);
    let status = manager.key("server").snapshot().unwrap();
    assert_eq!((status.active, status.queued), (Some(0), Some(0)));
    // The same load without the bulkhead overloads the server.
    assert!(
        send_all(&url, None).await > 0,
        "the load must exceed the server's limit"
    );
}
