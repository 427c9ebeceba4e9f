//! [`ThrottleLayer`]: what the layer is made from, and its options.

use std::fmt;
use std::sync::Arc;

use super::key::{KeyExtractor, LayerKey};
use super::service::ThrottleService;
use super::settings::LayerSettings;
use crate::ThrottleManager;

/// A tower [`Layer`](tower_layer::Layer) that puts every request through a
/// [`ThrottleManager`], keyed by client ([`KeyExtractor`]).
///
/// For each request:
/// 1. its **key** is what the extractor finds; a request without one is
///    answered 400 ([`on_missing_key`](super::ThrottleLayerBuilder::on_missing_key));
/// 2. its **priority** is a [`Priority`](crate::Priority) in its extensions (set by an
///    earlier layer), else the [`priority_header`](super::ThrottleLayerBuilder::priority_header),
///    else [`priority`](super::ThrottleLayerBuilder::priority) (default [`Priority::HIGH`](crate::Priority::HIGH));
/// 3. it passes the key's controls in the manager's one order. A server
///    does not hold a connection for a rate token or for room in the key
///    space: a request over its key's rate is answered **429** at once,
///    whatever the manager's `max_wait`. It does wait in the bulkhead's
///    queue, as the [`BulkheadConfig`](crate::BulkheadConfig) says. A shed
///    call, a full bulkhead or a full key space is answered **503**. Both
///    carry `Retry-After` (whole seconds, rounded up) when the wait is
///    known, and, when the key has a rate, the IETF `RateLimit-Policy` and
///    `RateLimit` headers (see [`rate_limit_headers`](super::ThrottleLayerBuilder::rate_limit_headers));
///    [`on_refusal`](super::ThrottleLayerBuilder::on_refusal) replaces the status and body;
/// 4. a gRPC call's `grpc-timeout` (or, for HTTP, the
///    [`deadline_header`](super::ThrottleLayerBuilder::deadline_header))
///    is its deadline ([`with_deadline`](crate::deadline::with_deadline)): a call
///    that cannot start before it (or whose deadline is already past) is
///    answered at once (gRPC `DEADLINE_EXCEEDED`, HTTP **408**: the
///    client's own limit, which no client reads as the server's
///    overload), one in the bulkhead's queue leaves it then, and the
///    handler has until then to answer. A handler the deadline cuts short
///    is dropped and answered the same way, and counted as **neutral**:
///    the deadline is the client's budget, not the service's failure, so
///    one client's short deadlines never make its key shed (see [whose
///    time ran out](crate::deadline#whose-time-ran-out));
/// 5. the inner service has until the manager's
///    [`call_timeout`](crate::deadline::TimeLimits::call_timeout) to
///    answer: a handler still without an answer's head then is dropped,
///    counted as overload and answered **503** (a gRPC call
///    `DEADLINE_EXCEEDED`);
/// 6. the inner service's answer is the call's [`Outcome`](crate::outcome::Outcome) ([`classify`](super::classify),
///    or [`classify_by`](super::ThrottleLayerBuilder::classify_by)): 5xx and timeouts lower an
///    adaptive key's rate, 4xx leave it alone;
/// 7. **the call ends when its body ends**: a successful answer's body
///    carries the key's bulkhead slot until its last frame is sent, so a
///    stream (a download, server-sent events) counts against the key's
///    concurrency for as long as it flows. A body that fails midway is
///    overload; one the client stops reading (it went away) reports what
///    its head said, a success ([the edges' rule](crate::edge)). An answer
///    judged a failure or neutral by its head is reported at once.
///    [`release_at_headers`](super::ThrottleLayerBuilder::release_at_headers) ends every call at
///    its head instead.
///
/// Clones are cheap and share the manager; the layer's types are nameable
/// ([`ThrottleService<S>`](super::ThrottleService), and the
/// [`ResponseFuture`](crate::edge::ResponseFuture) and
/// [`ResponseBody<B>`](crate::edge::ResponseBody) every tower edge answers
/// with).
///
/// # Example
///
/// ```
/// use portcullis::server::{KeyExtractor, ThrottleLayer};
/// use portcullis::{BulkheadConfig, RateConfig, ThrottleManager};
///
/// fn app() -> Result<axum::Router, portcullis::error::ConfigError> {
///     let manager = ThrottleManager::<String>::builder()
///         .rate(RateConfig::per_second(20).burst(5))
///         .bulkhead(BulkheadConfig::new(4))
///         .build()?;
///     Ok(axum::Router::new()
///         .route("/", axum::routing::get(|| async { "hello" }))
///         .layer(ThrottleLayer::new(manager, KeyExtractor::header("x-api-key"))))
/// }
/// # app().unwrap();
/// ```
pub struct ThrottleLayer<K: LayerKey = String> {
    pub(super) settings: Arc<LayerSettings<K>>,
}

impl<K: LayerKey> ThrottleLayer<K> {
    /// A layer over `manager`, keying requests by `extractor`, with no
    /// options: [`builder`](Self::builder) sets them.
    ///
    /// An extractor made wrong ([`KeyExtractor::header`] given a name that
    /// is no header name, or a bad [`ipv6_prefix`](KeyExtractor::ipv6_prefix))
    /// cannot be refused here, since `new` returns the layer: it is logged
    /// once, at `error`, and requests are answered 400 naming it. Build
    /// with [`builder`](Self::builder) (or check with
    /// [`KeyExtractor::validate`]) to have it refused.
    ///
    /// ```
    /// use portcullis::server::{KeyExtractor, ThrottleLayer};
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(10.0)).build()?;
    /// let layer = ThrottleLayer::new(manager, KeyExtractor::peer_ip());
    /// # drop(layer);
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn new(manager: ThrottleManager<K>, extractor: KeyExtractor) -> Self {
        if let Err(error) = extractor.validate() {
            tracing::error!(%error, "ThrottleLayer::new: the key extractor was made wrong");
        }
        Self {
            settings: Arc::new(LayerSettings::new(manager, extractor)),
        }
    }
}

impl<K: LayerKey> ThrottleLayer<K> {
    /// The manager of the layer's service guard, if it has one
    /// ([`service_guard`](super::ThrottleLayerBuilder::service_guard)): its
    /// keys are the route groups, `/` for the whole service. Its figures
    /// are the guard's own (a status page, snapshots, and metrics labelled
    /// `manager="service_guard"`): each request it refused counts there,
    /// and in no client's figures.
    ///
    /// ```
    /// use portcullis::server::{KeyExtractor, ThrottleLayer};
    /// use portcullis::{BulkheadConfig, RateConfig, ThrottleManager};
    ///
    /// let clients = ThrottleManager::<String>::builder().rate(RateConfig::per_second(20)).build()?;
    /// let layer = ThrottleLayer::builder(clients, KeyExtractor::peer_ip())
    ///     .service_guard(BulkheadConfig::new(64).queue(128))
    ///     .build()?;
    /// let guard = layer.service_guard().unwrap();
    /// assert_eq!(guard.settings().name(), Some("service_guard"));
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn service_guard(&self) -> Option<&ThrottleManager<String>> {
        self.settings.guard.as_ref().map(|guard| &guard.manager)
    }
}

impl<K: LayerKey> Clone for ThrottleLayer<K> {
    fn clone(&self) -> Self {
        Self {
            settings: Arc::clone(&self.settings),
        }
    }
}

impl<S, K: LayerKey> tower_layer::Layer<S> for ThrottleLayer<K> {
    type Service = ThrottleService<S, K>;

    fn layer(&self, inner: S) -> Self::Service {
        ThrottleService::new(inner, Arc::clone(&self.settings))
    }
}

impl<K: LayerKey> fmt::Debug for ThrottleLayer<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.settings.fmt(f)
    }
}
