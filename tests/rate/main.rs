//! The adaptive rate: the cell and the manager on virtual time
//! (`adaptive`), fixed quotas and costs (`quotas`), and against a real
//! rate-limited server (`http`).

// Tests that measure real time or load the CPU hold `support::alone()`
// across their awaits, so they do not run at once; each test's future is
// driven on its own thread, so the lock blocks no other task.
#![allow(clippy::await_holding_lock)]

#[path = "../support/quota_bound.rs"]
mod quota_bound;
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
