//! The manager's shape and `call`: the public contract as written, calls
//! end to end, the key space (its bounds, eviction, floods of new keys),
//! stress on real threads, and the manager built from configuration files
//! (`config`).

// Tests that measure real time or load the CPU hold `support::alone()`
// across their awaits, so they do not run at once; each test's future is
// driven on its own thread, so the lock blocks no other task.
#![allow(clippy::await_holding_lock)]

#[path = "../support/mod.rs"]
mod support;

mod before_0_3;
mod before_0_4;
mod call;
mod changes;
mod config;
mod contract;
mod deadlines;
mod edge_kit;
mod joint;
mod key_space;
mod retry;
mod stress;
mod surface;
