//! The adaptive rate: the cell and the manager on virtual time
//! (`adaptive`), fixed quotas and costs (`quotas`), against a real
//! rate-limited server (`http`), and shared through a store (`store`: one
//! written against the public trait alone, and Redis's on a real
//! `redis-server`).

// Tests that measure real time or load the CPU hold `support::alone()`
// across their awaits, so they do not run at once; each test's future is
// driven on its own thread, so the lock blocks no other task.
#![allow(clippy::await_holding_lock)]

/// A rate-limited HTTP server on loopback, for `http` and the store's
/// fleet.
#[path = "../support/limited_server.rs"]
mod limited_server;
#[path = "../support/memory_store.rs"]
mod memory_store;
#[path = "../support/quota_bound.rs"]
mod quota_bound;
/// A `redis-server` of the test's own, for the store's Redis modules.
#[cfg(feature = "redis")]
#[path = "../support/redis.rs"]
mod redis_server;
#[path = "../support/mod.rs"]
mod support;

/// A manager with `config` as every key's rate, on tokio's clock.
fn manager(config: portcullis::RateConfig) -> portcullis::ThrottleManager<String> {
    portcullis::ThrottleManager::<String>::builder()
        .rate(config)
        .build()
        .expect("valid config")
}

mod adaptive;
mod bound;
mod converge;
mod http;
mod quotas;
mod store;
