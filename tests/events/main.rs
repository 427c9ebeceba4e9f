//! What the manager reports: metrics, tracing events and spans.
//!
//! One subscriber serves the whole binary (tracing caches each callsite's
//! interest globally, so per-thread subscribers miss events from other
//! threads): every test here holds `support::capture()`, which clears the
//! buffer and keeps the other tests out until it ends.

#![allow(clippy::await_holding_lock)]

#[path = "../support/mod.rs"]
mod support;

mod admission;
mod callbacks;
mod full_key_space;
mod metrics;
mod spans;
