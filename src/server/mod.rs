//! HTTP servers: [`ThrottleLayer`] limits each client of a tower service
//! (axum 0.8, hyper, tonic) through a manager (feature `tower`).
//!
//! ```
//! use portcullis::server::{KeyExtractor, ThrottleLayer};
//! use portcullis::{BulkheadConfig, RateConfig, ThrottleManager};
//!
//! let manager = ThrottleManager::<String>::builder()
//!     .rate(RateConfig::per_second(20).burst(5)) // a fixed quota
//!     .bulkhead(BulkheadConfig::new(4))
//!     .build()?;
//! let app: axum::Router = axum::Router::new()
//!     .route("/", axum::routing::get(|| async { "hello" }))
//!     .layer(ThrottleLayer::new(manager, KeyExtractor::header("x-api-key")));
//! # drop(app);
//! # Ok::<(), portcullis::error::ConfigError>(())
//! ```
//!
//! Each client (an API key, a user, an address, as the [`KeyExtractor`]
//! says) gets its own controls from the manager's one key space, bounded
//! by [`max_keys`](crate::builder::KeySpaceConfig::max_keys) with idle keys
//! evicted as they are needed: no cleanup task to run. A client over its
//! rate is answered 429, one the throttle sheds or whose bulkhead is full
//! 503, with `Retry-After` and the IETF `RateLimit` headers. Different
//! controls per client tier come from
//! [`tier`](crate::builder::ThrottleManagerBuilder::tier) and
//! [`tier_of`](crate::builder::ThrottleManagerBuilder::tier_of).
//!
//! # The layer's manager is the network's
//!
//! A key the [`KeyExtractor`] reads is whatever the client sent: give the
//! layer a manager of its own, and keep the keys the program names itself
//! (a database, a downstream service) in another. In one key space, a
//! client sending the header `x-user-id: database` is given the limits of
//! the key `database`, and its permit holds that key's slots while the
//! handlers' own calls to it wait (the per-user database chapter of the
//! guide builds the two managers).

mod answer;
mod builder;
mod guard;
mod key;
mod layer;
mod proxies;
mod service;
mod settings;

pub use answer::{LayerAnswer, classify, missing_key, refusal, status_of};
pub use builder::ThrottleLayerBuilder;
pub use key::{KeyExtractor, LayerKey, MissingKey, TrustedProxies};
pub use layer::ThrottleLayer;
pub use service::ThrottleService;
