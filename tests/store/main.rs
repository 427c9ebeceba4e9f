//! Rates shared through a store: a store written against the public
//! [`RateStore`](portcullis::store::RateStore) trait alone, on virtual time
//! (`memory`), and Redis's store on a real `redis-server` (`on_redis`,
//! feature `redis`).

// Tests that measure real time or load the CPU hold `support::alone()`
// across their awaits, so they do not run at once; each test's future is
// driven on its own thread, so the lock blocks no other task.
#![allow(clippy::await_holding_lock)]

#[path = "../support/memory_store.rs"]
mod memory_store;
#[path = "../support/mod.rs"]
mod support;

/// A `redis-server` of the test's own, for both Redis modules.
#[cfg(feature = "redis")]
#[path = "../support/redis.rs"]
mod redis_server;

#[cfg(feature = "redis")]
mod fleet;
mod memory;
#[cfg(feature = "redis")]
mod on_redis;
