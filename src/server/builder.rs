//! [`ThrottleLayerBuilder`]: a layer's options, every one checked at
//! [`build`](ThrottleLayerBuilder::build).

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName};
use http::{Response, StatusCode};

use super::guard::{ServiceGuard, WHOLE_SERVICE};
use super::key::{KeyExtractor, LayerKey, MissingKey, not_a_header_name};
use super::layer::ThrottleLayer;
use super::settings::LayerSettings;
use crate::ThrottleManager;
use crate::bulkhead::BulkheadConfig;
use crate::error::{ConfigError, ConfigProblem, Rejected};
use crate::outcome::Outcome;
use crate::priority::Priority;

/// A [`ThrottleLayer`] being set up: its options, none of which can fail
/// on its own, and [`build`](Self::build), which reports every problem at
/// once with its field's name, as the manager's builder does.
///
/// ```
/// use portcullis::server::{KeyExtractor, ThrottleLayer};
/// use portcullis::{Priority, RateConfig, ThrottleManager};
///
/// let manager = ThrottleManager::<String>::builder().rate(RateConfig::per_second(20)).build()?;
/// let login = ThrottleManager::<String>::builder().rate(RateConfig::per_minute(5)).build()?;
/// let layer = ThrottleLayer::builder(manager.clone(), KeyExtractor::header("x-api-key"))
///     .priority(Priority::MEDIUM)
///     .route("/login", login.clone())
///     .build()?;
/// # drop(layer);
///
/// let error = ThrottleLayer::builder(manager, KeyExtractor::header("x api key").ipv6_prefix(48))
///     .priority_header("x priority")
///     .route("login", login)
///     .build()
///     .unwrap_err();
/// assert_eq!(error.problems().len(), 4);
/// assert_eq!(
///     error.to_string(),
///     "invalid configuration: extractor.header: `x api key` is not a header name; \
///      extractor.ipv6_prefix: applies to keys made from addresses, not to header `x api key`; \
///      priority_header: `x priority` is not a header name; \
///      route: must start with '/', got \"login\""
/// );
/// # Ok::<(), portcullis::error::ConfigError>(())
/// ```
#[must_use = "a builder does nothing until `build`"]
pub struct ThrottleLayerBuilder<K: LayerKey = String> {
    settings: LayerSettings<K>,
    /// The service guard's limits: each route group's (`/` the whole
    /// service's), built into the guard's manager by `build`.
    guards: Vec<(String, BulkheadConfig)>,
    /// The options' problems, in the order they were set.
    problems: Vec<ConfigProblem>,
}

impl<K: LayerKey> ThrottleLayer<K> {
    /// A layer over `manager`, keying requests by `extractor`, with options:
    /// see [`ThrottleLayerBuilder`]. [`new`](Self::new) is the layer with
    /// none.
    ///
    /// ```
    /// use portcullis::server::{KeyExtractor, ThrottleLayer};
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(10.0)).build()?;
    /// let layer = ThrottleLayer::builder(manager, KeyExtractor::peer_ip())
    ///     .rate_limit_headers(true)
    ///     .build()?;
    /// # drop(layer);
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn builder(
        manager: ThrottleManager<K>,
        extractor: KeyExtractor,
    ) -> ThrottleLayerBuilder<K> {
        ThrottleLayerBuilder {
            settings: LayerSettings::new(manager, extractor),
            guards: Vec::new(),
            problems: Vec::new(),
        }
    }
}

impl<K: LayerKey> ThrottleLayerBuilder<K> {
    /// The priority of requests that carry none (default
    /// [`Priority::HIGH`]): the throttle sheds lower priorities first.
    ///
    /// ```
    /// # use portcullis::server::{KeyExtractor, ThrottleLayer};
    /// # use portcullis::{Priority, ThrottleConfig, ThrottleManager};
    /// let manager = ThrottleManager::<String>::builder().throttle(ThrottleConfig::new()).build()?;
    /// let layer = ThrottleLayer::builder(manager, KeyExtractor::peer_ip()).priority(Priority::MEDIUM).build()?;
    /// # drop(layer);
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn priority(mut self, priority: Priority) -> Self {
        self.settings.priority = priority;
        self
    }

    /// Takes each request's priority level from header `name`: a number,
    /// 0 for the most important ([`Priority::new`]). A request whose value
    /// is not a number is answered 400.
    ///
    /// **Only trusted callers may set it.** Strip the header at your edge
    /// (or set the priority in an earlier layer, as a [`Priority`]
    /// extension, from what authentication found): a client that sets its
    /// own priority is shed last.
    ///
    /// A `name` that is not a header name is refused by
    /// [`build`](Self::build), naming `priority_header`.
    ///
    /// ```
    /// # use portcullis::server::{KeyExtractor, ThrottleLayer};
    /// # use portcullis::{ThrottleConfig, ThrottleManager};
    /// let manager = ThrottleManager::<String>::builder().throttle(ThrottleConfig::new()).build()?;
    /// let layer = ThrottleLayer::builder(manager, KeyExtractor::header("x-api-key"))
    ///     .priority_header("x-internal-priority")
    ///     .build()?;
    /// # drop(layer);
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn priority_header(mut self, name: &str) -> Self {
        match HeaderName::from_bytes(name.as_bytes()) {
            Ok(name) => self.settings.priority_header = Some(name),
            Err(_) => self
                .problems
                .push(not_a_header_name("priority_header", name)),
        }
        self
    }

    /// Takes each HTTP request's deadline from header `name`: a whole
    /// number of milliseconds from its arrival (as Envoy's
    /// `x-envoy-expected-rq-timeout-ms`). A call that cannot start before
    /// it is answered 503 at once, one in the bulkhead's queue leaves it
    /// then, and the handler has until then to answer. A value that is not
    /// a number is answered 400. gRPC calls always bring theirs, as
    /// `grpc-timeout`. Only trusted callers should set it: strip it at your
    /// edge otherwise. A `name` that is not a header name is refused by
    /// [`build`](Self::build), naming `deadline_header`.
    ///
    /// ```
    /// # use portcullis::server::{KeyExtractor, ThrottleLayer};
    /// # use portcullis::{BulkheadConfig, ThrottleManager};
    /// let manager = ThrottleManager::<String>::builder().bulkhead(BulkheadConfig::new(8).queue(64)).build()?;
    /// let layer = ThrottleLayer::builder(manager, KeyExtractor::peer_ip())
    ///     .deadline_header("x-request-timeout-ms")
    ///     .build()?;
    /// # drop(layer);
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn deadline_header(mut self, name: &str) -> Self {
        match HeaderName::from_bytes(name.as_bytes()) {
            Ok(name) => self.settings.deadline_header = Some(name),
            Err(_) => self
                .problems
                .push(not_a_header_name("deadline_header", name)),
        }
        self
    }

    /// Judges the inner service's answers by `classify` instead of by
    /// [`classify`](super::classify), which it can fall back on.
    ///
    /// ```
    /// use portcullis::server::{KeyExtractor, ThrottleLayer, classify};
    /// use portcullis::outcome::Outcome;
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(10.0)).build()?;
    /// // Only 503 means overload here; a 500 is a bug, not a capacity problem.
    /// let layer = ThrottleLayer::builder(manager, KeyExtractor::peer_ip()).classify_by(|status, headers| {
    ///     match status.as_u16() {
    ///         500 => Outcome::Neutral,
    ///         _ => classify(status, headers),
    ///     }
    /// }).build()?;
    /// # drop(layer);
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn classify_by<F>(mut self, classify: F) -> Self
    where
        F: Fn(StatusCode, &HeaderMap) -> Outcome + Send + Sync + 'static,
    {
        self.settings.classify = Some(Arc::new(classify));
        self
    }

    /// Ends each call when its answer's head is sent, not when its body
    /// ends: the key's bulkhead slot is freed while the body may still be
    /// streaming, and a body that fails midway is not counted. For
    /// services whose long bodies should not count against a client's
    /// concurrency.
    ///
    /// ```
    /// use portcullis::server::{KeyExtractor, ThrottleLayer};
    /// use portcullis::{BulkheadConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder().bulkhead(BulkheadConfig::new(4)).build()?;
    /// let layer = ThrottleLayer::builder(manager, KeyExtractor::peer_ip()).release_at_headers(true).build()?;
    /// # drop(layer);
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn release_at_headers(mut self, release: bool) -> Self {
        self.settings.release_at_headers = release;
        self
    }

    /// Answers refused requests with what `answer` makes instead of
    /// [`refusal`](super::refusal). The layer still adds `Retry-After` and
    /// the rate-limit headers, where `answer` did not set them.
    ///
    /// ```
    /// use portcullis::server::{KeyExtractor, ThrottleLayer, status_of};
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(10.0)).build()?;
    /// let layer = ThrottleLayer::builder(manager, KeyExtractor::peer_ip()).on_refusal(|rejected| {
    ///     let body = format!(r#"{{"error":"{}"}}"#, rejected.reason());
    ///     http::Response::builder()
    ///         .status(status_of(rejected))
    ///         .header("content-type", "application/json")
    ///         .body(body.into())
    ///         .expect("a valid response")
    /// }).build()?;
    /// # drop(layer);
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn on_refusal<F>(mut self, answer: F) -> Self
    where
        F: Fn(&Rejected) -> Response<Bytes> + Send + Sync + 'static,
    {
        self.settings.on_refusal = Some(Arc::new(answer));
        self
    }

    /// Answers requests without a key with what `answer` makes instead of
    /// [`missing_key`](super::missing_key) (400).
    ///
    /// ```
    /// use portcullis::server::{KeyExtractor, ThrottleLayer};
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(10.0)).build()?;
    /// let layer = ThrottleLayer::builder(manager, KeyExtractor::header("x-api-key"))
    ///     .on_missing_key(|_| {
    ///         let mut answer = http::Response::new("an API key is required\n".into());
    ///         *answer.status_mut() = http::StatusCode::UNAUTHORIZED;
    ///         answer
    ///     })
    ///     .build()?;
    /// # drop(layer);
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn on_missing_key<F>(mut self, answer: F) -> Self
    where
        F: Fn(&MissingKey) -> Response<Bytes> + Send + Sync + 'static,
    {
        self.settings.on_missing_key = Some(Arc::new(answer));
        self
    }

    /// Also sends `RateLimit-Policy` and `RateLimit` on the answers of
    /// admitted requests, so clients can pace themselves before they are
    /// refused (refusals always carry them). Off by default: two headers
    /// on every answer.
    ///
    /// The headers follow draft-ietf-httpapi-ratelimit-headers:
    /// `RateLimit-Policy: "default";q=20;w=1;portcullis-burst=5` (20 calls a
    /// second, 5 at once) and `RateLimit: "default";r=3;t=1` (3 would be
    /// admitted now; one more in 1 s, rounded up). Slow rates are given per
    /// minute, hour or day (`q=30;w=60`). A key whose manager has no rate
    /// gets neither.
    ///
    /// ```
    /// # use portcullis::server::{KeyExtractor, ThrottleLayer};
    /// # use portcullis::{RateConfig, ThrottleManager};
    /// let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(10.0)).build()?;
    /// let layer = ThrottleLayer::builder(manager, KeyExtractor::peer_ip()).rate_limit_headers(true).build()?;
    /// # drop(layer);
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn rate_limit_headers(mut self, on_success: bool) -> Self {
        self.settings.rate_limit_headers = on_success;
        self
    }

    /// Requests whose path is `prefix` or under it (`/login` takes
    /// `/login` and `/login/sso`, not `/logins`) go through `manager`
    /// instead of the layer's own: per-route quotas for the same client,
    /// keyed by the same extractor, in one layer. The longest matching
    /// prefix wins. Each manager bounds its own key space (`max_keys`), so
    /// the layer holds at most the sum of theirs. Its `RateLimit` headers
    /// are the route's.
    ///
    /// A prefix that does not start with `/`, or that a path cannot hold
    /// (a `?` or `#`), is refused by [`build`](Self::build), naming `route`.
    ///
    /// ```
    /// use portcullis::server::{KeyExtractor, ThrottleLayer};
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let everything = ThrottleManager::<String>::builder().rate(RateConfig::per_second(50)).build()?;
    /// let login = ThrottleManager::<String>::builder().rate(RateConfig::per_minute(5)).build()?;
    /// let search = ThrottleManager::<String>::builder().rate(RateConfig::per_second(2)).build()?;
    /// let layer = ThrottleLayer::builder(everything, KeyExtractor::peer_ip())
    ///     .route("/login", login)
    ///     .route("/search", search)
    ///     .build()?;
    /// # drop(layer);
    /// let nowhere = ThrottleManager::<String>::builder().rate(RateConfig::per_second(1)).build()?;
    /// let err = ThrottleLayer::builder(nowhere.clone(), KeyExtractor::peer_ip()).route("login", nowhere).build();
    /// assert_eq!(err.unwrap_err().to_string(), r#"invalid configuration: route: must start with '/', got "login""#);
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn route(mut self, prefix: &str, manager: ThrottleManager<K>) -> Self {
        let Some(prefix) = self.path_prefix("route", prefix) else {
            return self;
        };
        let routes = &mut self.settings.routes;
        routes.retain(|(known, _)| *known != prefix);
        routes.push((prefix, manager));
        routes.sort_by_key(|(known, _)| std::cmp::Reverse(known.len()));
        self
    }

    /// Takes each request's priority from `priority_of` (its route, its
    /// method, what authentication put in its extensions), where it gives
    /// one; else from the [`priority_header`](Self::priority_header), else
    /// the default [`priority`](Self::priority). A [`Priority`] an earlier
    /// layer put in the request's extensions comes first. A level beyond
    /// the manager's is judged by its [`out_of_range`](crate::builder::ThrottleManagerBuilder::out_of_range) policy.
    ///
    /// ```
    /// use portcullis::server::{KeyExtractor, ThrottleLayer};
    /// use portcullis::{BulkheadConfig, Priority, RateConfig, ThrottleManager};
    ///
    /// let clients = ThrottleManager::<String>::builder().rate(RateConfig::per_second(20)).build()?;
    /// let layer = ThrottleLayer::builder(clients, KeyExtractor::header("x-api-key"))
    ///     // Checkout is what the service is for; reports can wait.
    ///     .priority_by(|request| match request.uri.path() {
    ///         path if path.starts_with("/checkout") => Some(Priority::HIGH),
    ///         path if path.starts_with("/reports") => Some(Priority::LOW),
    ///         _ => None,
    ///     })
    ///     .service_guard(BulkheadConfig::adaptive().queue(64))
    ///     .build()?;
    /// # drop(layer);
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn priority_by<F>(mut self, priority_of: F) -> Self
    where
        F: Fn(&http::request::Parts) -> Option<Priority> + Send + Sync + 'static,
    {
        self.settings.priority_by = Some(Arc::new(priority_of));
        self
    }

    /// Guards the whole service with one concurrency limit, `limit`, fixed
    /// or learned ([`BulkheadConfig::adaptive`]), with its queue, queue
    /// timeout and CoDel as a bulkhead has them: the database pool and the
    /// CPU are protected from the sum of all clients, where each client's
    /// own controls protect them from one client.
    ///
    /// **Who is shed.** A request's priority ([`priority_header`](Self::priority_header),
    /// [`priority_by`](Self::priority_by)) decides it when the service is
    /// at its limit: a more important request takes the next free slot
    /// (the queue is in priority order), and a full queue makes room for
    /// it by refusing its least important waiter, so a lower priority is
    /// refused before a higher one waits ([`Overflow::DropLowestPriority`](crate::bulkhead::Overflow::DropLowestPriority),
    /// which the guard applies unless `limit` asks for
    /// [`DropOldest`](crate::bulkhead::Overflow::DropOldest)). A request whose
    /// deadline (a `grpc-timeout`, the [`deadline_header`](Self::deadline_header))
    /// cannot be met is refused at once. The guard's refusals are answered
    /// 503 (gRPC `UNAVAILABLE`), with `Retry-After` where the wait is known.
    ///
    /// **In what order.** A request passes its client's controls first
    /// (a client over its quota is answered 429 and takes nothing from the
    /// guard), then the guard. A request the guard refuses takes nothing
    /// from its client: its client's key gets back its slot and its rate
    /// token (while no later request of that client has taken one) and
    /// counts nothing. Admitted, the request's outcome teaches both. Its
    /// client's slot is held while it waits in the guard's queue.
    ///
    /// The guard's figures are its own manager's ([`ThrottleLayer::service_guard`]).
    /// Its priority levels are the clients' manager's. Invalid limits are
    /// refused by [`build`](Self::build), named `service_guard.<field>`.
    ///
    /// ```
    /// use portcullis::server::{KeyExtractor, ThrottleLayer};
    /// use portcullis::{BulkheadConfig, RateConfig, ThrottleManager};
    ///
    /// let clients = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::per_second(20).burst(5))
    ///     .build()?;
    /// let layer = ThrottleLayer::builder(clients.clone(), KeyExtractor::header("x-api-key"))
    ///     .priority_header("x-priority")
    ///     .service_guard(BulkheadConfig::adaptive().queue(64))
    ///     .build()?;
    /// # drop(layer);
    /// let error = ThrottleLayer::builder(clients, KeyExtractor::header("x-api-key"))
    ///     .service_guard(BulkheadConfig::new(0))
    ///     .build()
    ///     .unwrap_err();
    /// assert_eq!(error.problems()[0].field(), "service_guard.max_concurrent");
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn service_guard(self, limit: BulkheadConfig) -> Self {
        self.guard_group(WHOLE_SERVICE, limit)
    }

    /// A service guard of its own for the requests whose path is `prefix`
    /// or under it (a route group: `/search` takes `/search` and
    /// `/search/advanced`), as [`service_guard`](Self::service_guard)
    /// guards the whole service; the longest matching prefix wins, and a
    /// request under no group is guarded by the whole service's guard, if
    /// the layer has one. One group's load never takes another's slots. A
    /// prefix is refused by [`build`](Self::build) as a
    /// [`route`](Self::route)'s, named `service_guard_for`.
    ///
    /// ```
    /// use portcullis::server::{KeyExtractor, ThrottleLayer};
    /// use portcullis::{BulkheadConfig, RateConfig, ThrottleManager};
    ///
    /// let clients = ThrottleManager::<String>::builder().rate(RateConfig::per_second(20)).build()?;
    /// let layer = ThrottleLayer::builder(clients, KeyExtractor::header("x-api-key"))
    ///     .service_guard(BulkheadConfig::adaptive().queue(64))
    ///     // Search is heavy: 8 at a time, whatever the rest does.
    ///     .service_guard_for("/search", BulkheadConfig::new(8).queue(16))
    ///     .build()?;
    /// let guard = layer.service_guard().unwrap();
    /// # drop(guard);
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn service_guard_for(mut self, prefix: &str, limit: BulkheadConfig) -> Self {
        let Some(prefix) = self.path_prefix("service_guard_for", prefix) else {
            return self;
        };
        self.guard_group(&prefix, limit)
    }

    fn guard_group(mut self, prefix: &str, limit: BulkheadConfig) -> Self {
        self.guards.retain(|(known, _)| known != prefix);
        self.guards.push((prefix.to_owned(), limit));
        self
    }

    /// `prefix` as a path prefix (without a trailing `/`, `/` for the
    /// root), or `None` with its problem named `field`.
    fn path_prefix(&mut self, field: &str, prefix: &str) -> Option<String> {
        let problem = if !prefix.starts_with('/') {
            format!("must start with '/', got {prefix:?}")
        } else if prefix.contains(['?', '#']) {
            format!("must be a path, without '?' or '#', got {prefix:?}")
        } else {
            let trimmed = match prefix.trim_end_matches('/') {
                "" => "/",
                trimmed => trimmed,
            };
            return Some(trimmed.to_owned());
        };
        self.problems.push(ConfigProblem::new(field, problem));
        None
    }

    /// The layer, or every problem of its options and its extractor, each
    /// named (`extractor.header`, `extractor.ipv6_prefix`,
    /// `priority_header`, `route`, `service_guard.<field>`,
    /// `service_guard_for`).
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] listing them; see the [type's example](Self).
    pub fn build(mut self) -> Result<ThrottleLayer<K>, ConfigError> {
        let mut problems = self.settings.extractor.problems().to_vec();
        problems.append(&mut self.problems);
        self.settings.guard =
            ServiceGuard::build(&self.guards, &self.settings.manager, &mut problems);
        match ConfigError::from_problems(problems) {
            Some(error) => Err(error),
            None => Ok(ThrottleLayer {
                settings: Arc::new(self.settings),
            }),
        }
    }
}

impl<K: LayerKey> fmt::Debug for ThrottleLayerBuilder<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThrottleLayerBuilder")
            .field("settings", &self.settings)
            .field("guards", &self.guards)
            .field("problems", &self.problems)
            .finish()
    }
}
