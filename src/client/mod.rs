//! HTTP and gRPC clients: [`ThrottleMiddleware`] puts every request of a
//! [`reqwest_middleware`] client through a manager (feature `reqwest`),
//! and [`ThrottleClientLayer`] every request of a tower HTTP client: a
//! tonic channel, hyper's client (feature `tower`).
//!
//! ```
//! # #[cfg(feature = "reqwest")] {
//! use portcullis::client::ThrottleMiddleware;
//! use portcullis::{RateConfig, ThrottleManager};
//!
//! let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(10.0)).build()?;
//! let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
//!     .with(ThrottleMiddleware::new(manager.clone()))
//!     .build();
//! # drop(client);
//! # }
//! # Ok::<(), portcullis::error::ConfigError>(())
//! ```
//!
//! Each request then waits for its host's controls (throttle, rate,
//! bulkhead, as [`acquire`](crate::ThrottleManager::acquire) does), and its
//! response is reported as the outcome: 429 and 503, a gRPC
//! `RESOURCE_EXHAUSTED` or `UNAVAILABLE`, refused connections and timeouts
//! slow the host down. A response that asks for a pause (`Retry-After` on
//! a 429 or 503, a rate-limit header saying the quota is spent,
//! `grpc-retry-pushback-ms`) [defers](crate::manager::KeyHandle::defer) the
//! host's rate for that long, so no request reaches it before then and
//! other hosts go on. The call ends when the response's body ends or is
//! dropped ([the edges' rule](crate::edge)).

mod headers;
#[cfg(feature = "tower")]
mod layer;
#[cfg(feature = "reqwest")]
mod middleware;
mod provider;
mod timed_out;

pub use headers::{InvalidHeader, retry_after};
#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub use layer::{ThrottleClientLayer, ThrottleClientService, classify_head};
#[cfg(feature = "reqwest")]
#[cfg_attr(docsrs, doc(cfg(feature = "reqwest")))]
pub use middleware::{ThrottleMiddleware, classify, host_key, refusal};
pub use provider::{LimitReading, MAX_RESET, limit_readings};
pub use timed_out::RequestTimedOut;
