//! The bulkhead: fixed and adaptive limits on virtual time, against real
//! servers, and under randomized stress.

// Tests that measure real time or load the CPU hold `support::alone()`
// across their awaits, so they do not run at once; each test's future is
// driven on its own thread, so the lock blocks no other task.
#![allow(clippy::await_holding_lock)]

#[path = "../support/mod.rs"]
mod support;

mod adaptive;
mod adaptive_http;
mod codel;
mod fair;
mod fixed;
mod http;
mod shapes;
mod stress;
