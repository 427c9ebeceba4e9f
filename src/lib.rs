//! Keep a program from overloading the things it calls.
//!
//! A [`ThrottleManager`] guards calls to many remote things at once (hosts,
//! users, tenants, database shards), one **key** each. For every key it sees,
//! it lazily creates the controls you configure, which learn from the
//! outcomes of the calls:
//!
//! - an adaptive **rate** ([`RateConfig`]): a token bucket whose rate rises a
//!   step on each success and falls on each failure, within bounds;
//! - an adaptive **throttle** ([`ThrottleConfig`]): Google SRE client-side
//!   throttling, shedding calls locally, by [`Priority`], while a key's
//!   backend keeps failing;
//! - a **bulkhead** ([`BulkheadConfig`]): a concurrency limit with a small
//!   priority queue.
//!
//! # Quick start: `call`
//!
//! ```
//! use portcullis::{BulkheadConfig, Priority, RateConfig, ThrottleConfig, ThrottleManager, overloaded};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let manager = ThrottleManager::<String>::builder()
//!     .rate(RateConfig::adaptive(10.0).bounds(1.0, 200.0).increase_by(0.3).decrease_factor(0.7))
//!     .throttle(ThrottleConfig::new())
//!     .bulkhead(BulkheadConfig::new(8).queue(32))
//!     .build()?;
//! # async fn get(_url: &str) -> Result<(u16, String), std::io::Error> { Ok((200, "<html>".into())) }
//! let body = manager
//!     .call("example.com", Priority::MEDIUM, || async {
//!         let (status, body) = get("https://example.com/").await?;
//!         if status == 429 || status == 503 {
//!             return Err(overloaded(std::io::Error::other(format!("status {status}"))));
//!         }
//!         Ok(body)
//!     })
//!     .await?;
//! # assert_eq!(body, "<html>");
//! # Ok(())
//! # }
//! ```
//!
//! # The rate on its own
//!
//! For code that reports outcomes itself (a loop that waits, calls, and
//! says how it went), the rate alone: these skip the throttle and the
//! bulkhead, and return at once for a manager without a rate. `wait` takes
//! a token, waiting for it; `check` takes one only if it is due now;
//! [`peek`](ThrottleManager::peek) only looks.
//!
//! ```
//! use portcullis::{RateConfig, ThrottleManager};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let manager = ThrottleManager::<String>::builder()
//!     .rate(RateConfig::adaptive(10.0).burst(5).bounds(1.0, 200.0).decrease_factor(0.5))
//!     .build()?; // Result<_, portcullis::error::ConfigError>
//! manager.wait("example.com").await?;
//! let took_one: bool = manager.check("example.com").is_ok();
//! manager.increment("example.com"); // the call succeeded
//! manager.decrement("example.com"); // the backend was overloaded
//! let current: Option<f64> = manager.key("example.com").rate();
//! # assert!(took_one);
//! # assert_eq!(current, Some(5.5));
//! # Ok(())
//! # }
//! ```
//!
//! # Time
//!
//! Every control of a manager reads one [`Clock`](clock::Clock). By default that is
//! [`QuantaClock`](clock::QuantaClock) (the CPU's time-stamp counter, as in governor), or
//! [`TokioClock`](clock::TokioClock) when the manager is built inside paused tokio time, so
//! tests run on virtual time with `#[tokio::test(start_paused = true)]` and
//! nothing else ([`default_clock`](clock::default_clock)). [`ManualClock`](clock::ManualClock) is moved by hand.
//!
//! # Why not governor's limiter
//!
//! governor's `Quota` is fixed for the life of a limiter, and its
//! `until_ready` sleeps on a timer that ignores tokio's paused clock. The rate
//! here must change on every outcome without granting a fresh burst or
//! forgiving debt, so each key holds its own GCRA state with a mutable rate
//! (see the `rate` module). governor serves as an input type
//! (`RateConfig::from_quota`, feature `governor`) and as the baseline in
//! the benchmarks.
//!
//! # Where things are
//!
//! The crate root holds what the examples above name. The rest is in
//! modules: [`clock`] (time sources), [`config`] (configuration files),
//! [`error`] (every error and rejection), [`outcome`] (outcomes and how
//! errors are classified), [`priority`], [`snapshot`] (what a key's controls
//! know), and one module per control ([`rate`], [`throttle`], [`bulkhead`]).
//! With feature `reqwest`, `client` holds the HTTP client middleware; with
//! feature `tower`, `server` holds the HTTP server layer (feature `axum`
//! adds axum's `ConnectInfo` to it); with feature
//! `sqlx`, `database` says which database errors are overload; [`store`]
//! shares each key's rate across processes (through Redis with feature
//! `redis`, or any [`RateStore`](store::RateStore)).
//!
//! [`guide::architecture`] is the map of the code: its layers, the steps of
//! admission, the words it uses, and how to add a control, an edge or a store.

#![forbid(unsafe_code)]
// docs.rs builds with `--cfg docsrs` on nightly: each item says which
// feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]
// Docs show the names of today: a doctest on a deprecated name fails.
#![doc(test(attr(deny(deprecated))))]

pub mod builder;
pub mod bulkhead;
#[cfg(any(feature = "reqwest", feature = "tower"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "reqwest", feature = "tower"))))]
pub mod client;
pub mod clock;
// Shown as `builder`, with the builder it configures; the path is 0.3's,
// kept one release.
#[doc(hidden)]
pub mod config;
mod core;
// Shown as `edge::database`; the root path is 0.3's, kept one release.
#[cfg(feature = "sqlx")]
#[doc(hidden)]
pub mod database;
pub mod deadline;
pub mod edge;
pub mod error;
mod events;
// Shown as `edge::grpc`; the root path is 0.3's, kept one release.
#[cfg(any(feature = "reqwest", feature = "tower"))]
#[doc(hidden)]
pub mod grpc;
mod key;
pub mod manager;
pub mod metered;
mod metrics;
pub mod outcome;
mod permit;
pub mod priority;
pub mod rate;
mod registry;
pub mod retry;
mod retry_budget;
#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub mod server;
#[cfg(feature = "status")]
#[cfg_attr(docsrs, doc(cfg(feature = "status")))]
pub mod status;
pub mod store;
mod sync;
#[cfg(test)]
mod test_warnings;
pub mod throttle;

/// The guide: each edge and each control in depth, with the measurements
/// behind the defaults. Every example in it compiles as a doctest.
///
/// - [Getting started](guide::getting_started): the two commands, the main
///   job's output, and `call`.
/// - Edges: [HTTP clients](guide::clients), [HTTP servers](guide::servers),
///   [gRPC](guide::grpc), [per-user database throttling](guide::database),
///   [shared rates across processes](guide::shared_rates).
/// - What a call may do: [quotas and costs](guide::quotas),
///   [metered APIs](guide::metered) (several limits a key, costs settled
///   after the call), [retries](guide::retries).
/// - The controls: [the adaptive rate](guide::rate),
///   [the throttle](guide::throttle), [the bulkhead and adaptive
///   concurrency](guide::bulkhead), and [what they do under
///   overload](guide::simulation), simulated.
/// - Running it: [configuration files](guide::configuration),
///   [changing limits at runtime](guide::runtime_changes) (and shadow mode),
///   [what it tells you](guide::observability) (the status page, metrics,
///   tracing).
///
/// How the code is built: [`guide::architecture`]. What it costs:
/// [benches/README.md](https://github.com/portcullis-rs/portcullis/blob/main/benches/README.md).
pub mod guide {
    #[doc = include_str!("../docs/architecture.md")]
    pub mod architecture {}
    #[doc = include_str!("../docs/guide/getting_started.md")]
    pub mod getting_started {}
    #[doc = include_str!("../docs/guide/clients.md")]
    pub mod clients {}
    #[doc = include_str!("../docs/guide/servers.md")]
    pub mod servers {}
    #[doc = include_str!("../docs/guide/grpc.md")]
    pub mod grpc {}
    #[doc = include_str!("../docs/guide/database.md")]
    pub mod database {}
    #[doc = include_str!("../docs/guide/shared_rates.md")]
    pub mod shared_rates {}
    #[doc = include_str!("../docs/guide/quotas.md")]
    pub mod quotas {}
    #[doc = include_str!("../docs/guide/metered.md")]
    pub mod metered {}
    #[doc = include_str!("../docs/guide/retries.md")]
    pub mod retries {}
    #[doc = include_str!("../docs/guide/rate.md")]
    pub mod rate {}
    #[doc = include_str!("../docs/guide/throttle.md")]
    pub mod throttle {}
    #[doc = include_str!("../docs/guide/bulkhead.md")]
    pub mod bulkhead {}
    #[doc = include_str!("../docs/guide/simulation.md")]
    pub mod simulation {}
    #[doc = include_str!("../docs/guide/configuration.md")]
    pub mod configuration {}
    #[doc = include_str!("../docs/guide/runtime_changes.md")]
    pub mod runtime_changes {}
    #[doc = include_str!("../docs/guide/observability.md")]
    pub mod observability {}
}

/// The README's examples, compiled (and run, where they need no network)
/// as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

// 0.3's home of the snapshots, kept one release: `manager` holds them now.
#[doc(hidden)]
pub mod snapshot {
    pub use crate::manager::{
        KeyHandle, KeySnapshot, KeySpace, ManagerSettings, PrioritySnapshot, RateRemaining,
    };
}

pub use bulkhead::BulkheadConfig;
pub use error::{CallError, Rejected};
pub use manager::ThrottleManager;
pub use outcome::overloaded;
pub use priority::Priority;
pub use rate::RateConfig;
pub use throttle::ThrottleConfig;

// 0.3's paths at the root, kept one release (removed in 0.5); each name's
// home is the module after `pub use`.
#[doc(hidden)]
pub use builder::{ThrottleManagerBuilder, Tier};
#[doc(hidden)]
pub use bulkhead::Overflow;
#[doc(hidden)]
pub use config::ManagerConfig;
#[doc(hidden)]
pub use deadline::with_deadline;
#[doc(hidden)]
pub use error::{ConfigError, RejectReason};
#[doc(hidden)]
pub use metered::{Cost, CostPermit, CostSettle};
#[doc(hidden)]
pub use outcome::Outcome;
#[doc(hidden)]
pub use permit::{JointPermit, OwnedPermit, Permit};
#[doc(hidden)]
pub use priority::with_priority;
#[doc(hidden)]
pub use registry::BorrowedKey;
#[doc(hidden)]
pub use retry::RetryPolicy;
