//! The bulkhead: a per-key concurrency limit with a small priority queue.
//!
//! `config` is what users set, `queue` the wait queue as plain data (its
//! flows' rounds in `queue/rounds`), `limiter` the lock-free counter and
//! (in `limiter/hand_off`) the queue's hand-off, `adaptive` a
//! learned limit's maths, `learned` its state in atomics, and `codel`
//! what the queue's sojourn times say about overload.
//!
//! # The contract (what the facade below promises the core)
//!
//! - **State**: a key's `Bulkhead` holds its calls in flight and its
//!   queued calls in one word, the queue behind a lock, and for a learned
//!   limit its estimate; `BulkheadSettings` are the validated rules.
//! - **Invariants**: calls in flight never exceed the limit, except while
//!   a learned limit falls below them (then no slot is handed on until they
//!   are under it); queued calls never exceed the queue's size; while any
//!   call waits, every slot is taken; a waiter is served by priority, then
//!   first come first served (newest first while CoDel finds the queue
//!   overloaded, with adaptive LIFO; at a fair queue, by its flow's round,
//!   CoDel judging each flow apart); no slot is lost, even to a waiter
//!   dropped the moment it was granted one.
//! - **What a caller may assume**: `try_acquire` and a slot's `release`
//!   never block when nobody waits; a call that would be refused anyway is
//!   told so by `would_refuse` before it takes anything; a `QueuedWait`
//!   is cancel safe (dropping it unlinks it and hands on a slot it was
//!   given); a refusal is a `Refusal` that becomes the user's `Rejected`.
//!
//! The words used here (debt, fall, news, quiet, room, hold, ticket, ...)
//! are defined once, in [the architecture map](crate::guide::architecture).

mod adaptive;
mod codel;
mod config;
mod learned;
mod limiter;
mod queue;

pub use config::{BulkheadConfig, Overflow};

// The facade: all the core uses of the bulkhead.
pub(crate) use config::BulkheadSettings;
pub(crate) use limiter::{Bulkhead, Load, QueuedWait, Refusal, SlotAnswer, Waiter};
pub(crate) use queue::WaiterId;
