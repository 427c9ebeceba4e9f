//! The bulkhead: a per-key concurrency limit with a small priority queue.
//!
//! `config` is what users set, `queue` the wait queue as plain data,
//! `limiter` the lock-free counter and the queue's hand-off, `adaptive` a
//! learned limit's maths and `learned` its state in atomics.
//!
//! The words used here (debt, fall, news, quiet, room, hold, ticket, ...)
//! are defined once, in [the architecture map](crate::architecture).

pub(crate) mod adaptive;
pub(crate) mod config;
pub(crate) mod learned;
pub(crate) mod limiter;
pub(crate) mod queue;

pub use config::{BulkheadConfig, Overflow};
