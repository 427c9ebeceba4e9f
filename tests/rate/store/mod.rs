//! Rates shared through a store: a store written against the public
//! [`RateStore`](portcullis::store::RateStore) trait alone, on virtual time
//! (`memory`), and Redis's store on a real `redis-server` (`on_redis`,
//! feature `redis`).

#[cfg(feature = "redis")]
mod cluster;
#[cfg(feature = "redis")]
mod fleet;
#[cfg(feature = "redis")]
mod hostile;
mod memory;
#[cfg(feature = "redis")]
mod on_redis;
mod quota;

use std::time::Duration;

use portcullis::manager::Permit;
use portcullis::{Priority, ThrottleManager};
use tokio::time::Instant;

/// Calls `wait` on `key` in a loop until `until`; how many calls it let go.
pub(crate) async fn calls_until(
    manager: ThrottleManager<String>,
    key: &str,
    until: Instant,
) -> u32 {
    let mut calls = 0;
    loop {
        manager.wait(key).await.unwrap();
        if Instant::now() >= until {
            return calls;
        }
        calls += 1;
    }
}

/// On a key of one call a second: takes the one token of `"api"` (the
/// permit returned), then starts a second call, whose token is a second
/// away, and gives it up after 100 ms. Returns when the first started.
pub(crate) async fn take_then_give_up(manager: &ThrottleManager<String>) -> (Instant, Permit<'_>) {
    let start = Instant::now();
    let first = manager.acquire("api", Priority::HIGH).await.unwrap();
    let gave_up = tokio::time::timeout(
        Duration::from_millis(10),
        manager.acquire("api", Priority::HIGH),
    )
    .await;
    assert!(gave_up.is_err());
    (start, first)
}
