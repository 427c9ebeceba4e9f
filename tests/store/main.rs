//! Rates shared through a store: a store written against the public
//! [`RateStore`](portcullis::store::RateStore) trait alone, on virtual time
//! (`memory`), and Redis's store on a real `redis-server` (`on_redis`,
//! feature `redis`).

#[path = "../support/memory_store.rs"]
mod memory_store;
#[path = "../support/mod.rs"]
mod support;

mod memory;
#[cfg(feature = "redis")]
mod on_redis;
