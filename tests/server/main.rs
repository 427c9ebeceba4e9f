//! The server layer on real servers over loopback (HTTP with axum, and
//! gRPC with tonic: `grpc`, which also runs the client layer against a
//! real tonic server), and the per-user database example on a real SQLite
//! file.

// Tests that measure real time or load the CPU hold `support::alone()`
// across their awaits, so they do not run at once; each test's future is
// driven on its own thread, so the lock blocks no other task.
#![allow(clippy::await_holding_lock)]

#[path = "../support/mod.rs"]
mod support;

/// The per-user database example's app, for both database tests.
#[cfg(all(feature = "axum", feature = "sqlx"))]
#[path = "../../examples/per_user_db/app.rs"]
mod app;

mod database;
mod deadlines;
mod flows;
mod goodput;
#[cfg(feature = "tonic")]
mod grpc;
mod guard;
mod guard_load;
mod layer;
mod per_user_db;
mod reload;
mod routes;
mod streams;
