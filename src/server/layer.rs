//! [`ThrottleLayer`]: what the layer is made from, and its options.

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName};
use http::{Response, StatusCode};

use super::key::{KeyExtractor, MissingKey};
use super::service::ThrottleService;
use crate::ThrottleManager;
use crate::error::{ConfigError, ConfigProblem, Rejected};
use crate::outcome::Outcome;
use crate::priority::Priority;

type ClassifyStatus = dyn Fn(StatusCode, &HeaderMap) -> Outcome + Send + Sync;
type OnRefusal = dyn Fn(&Rejected) -> Response<Bytes> + Send + Sync;
type OnMissingKey = dyn Fn(&MissingKey) -> Response<Bytes> + Send + Sync;

/// A tower [`Layer`](tower_layer::Layer) that puts every request through a
/// [`ThrottleManager`], keyed by client ([`KeyExtractor`]).
///
/// For each request:
/// 1. its **key** is what the extractor finds; a request without one is
///    answered 400 ([`on_missing_key`](Self::on_missing_key));
/// 2. its **priority** is a [`Priority`] in its extensions (set by an
///    earlier layer), else the [`priority_header`](Self::priority_header),
///    else [`priority`](Self::priority) (default [`Priority::HIGH`]);
/// 3. it passes the key's controls in the manager's one order. A server
///    does not hold a connection for a rate token or for room in the key
///    space: a request over its key's rate is answered **429** at once,
///    whatever the manager's `max_wait`. It does wait in the bulkhead's
///    queue, as the [`BulkheadConfig`](crate::BulkheadConfig) says. A shed
///    call, a full bulkhead or a full key space is answered **503**. Both
///    carry `Retry-After` (whole seconds, rounded up) when the wait is
///    known, and, when the key has a rate, the IETF `RateLimit-Policy` and
///    `RateLimit` headers (see [`rate_limit_headers`](Self::rate_limit_headers));
///    [`on_refusal`](Self::on_refusal) replaces the status and body;
/// 4. the inner service has until the manager's
///    [`call_timeout`](crate::ThrottleManagerBuilder::call_timeout) to
///    answer: a handler still without an answer's head then is dropped,
///    counted as overload and answered **503** (a gRPC call
///    `DEADLINE_EXCEEDED`);
/// 5. the inner service's answer is the call's [`Outcome`] ([`classify`](super::classify),
///    or [`classify_by`](Self::classify_by)): 5xx and timeouts lower an
///    adaptive key's rate, 4xx leave it alone;
/// 6. **the call ends when its body ends**: a successful answer's body
///    carries the key's bulkhead slot until its last frame is sent, so a
///    stream (a download, server-sent events) counts against the key's
///    concurrency for as long as it flows. A body that fails midway is
///    overload; one the client stops reading (it went away) reports what
///    its head said, a success ([the edges' rule](crate::edge)). An answer
///    judged a failure or neutral by its head is reported at once.
///    [`release_at_headers`](Self::release_at_headers) ends every call at
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
/// fn app() -> Result<axum::Router, portcullis::ConfigError> {
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
#[derive(Clone)]
pub struct ThrottleLayer {
    pub(super) settings: Arc<Settings>,
}

/// What every clone of a layer and its services share.
#[derive(Clone)]
pub(super) struct Settings {
    pub(super) manager: ThrottleManager<String>,
    /// Path prefixes with controls of their own, longest first.
    pub(super) routes: Vec<(String, ThrottleManager<String>)>,
    pub(super) extractor: KeyExtractor,
    pub(super) priority: Priority,
    pub(super) priority_header: Option<HeaderName>,
    pub(super) classify: Option<Arc<ClassifyStatus>>,
    pub(super) on_refusal: Option<Arc<OnRefusal>>,
    pub(super) on_missing_key: Option<Arc<OnMissingKey>>,
    pub(super) rate_limit_headers: bool,
    /// Whether a call ends when its answer's head is sent (`true`) rather
    /// than when its body ends.
    pub(super) release_at_headers: bool,
}

impl ThrottleLayer {
    /// A layer over `manager`, keying requests by `extractor`.
    ///
    /// ```
    /// use portcullis::server::{KeyExtractor, ThrottleLayer};
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(10.0)).build()?;
    /// let layer = ThrottleLayer::new(manager, KeyExtractor::peer_ip());
    /// # drop(layer);
    /// # Ok::<(), portcullis::ConfigError>(())
    /// ```
    pub fn new(manager: ThrottleManager<String>, extractor: KeyExtractor) -> Self {
        Self {
            settings: Arc::new(Settings {
                manager,
                routes: Vec::new(),
                extractor,
                priority: Priority::HIGH,
                priority_header: None,
                classify: None,
                on_refusal: None,
                on_missing_key: None,
                rate_limit_headers: false,
                release_at_headers: false,
            }),
        }
    }

    /// The priority of requests that carry none (default
    /// [`Priority::HIGH`]): the throttle sheds lower priorities first.
    ///
    /// ```
    /// # use portcullis::server::{KeyExtractor, ThrottleLayer};
    /// # use portcullis::{Priority, ThrottleConfig, ThrottleManager};
    /// let manager = ThrottleManager::<String>::builder().throttle(ThrottleConfig::new()).build()?;
    /// let layer = ThrottleLayer::new(manager, KeyExtractor::peer_ip()).priority(Priority::MEDIUM);
    /// # drop(layer);
    /// # Ok::<(), portcullis::ConfigError>(())
    /// ```
    #[must_use]
    pub fn priority(mut self, priority: Priority) -> Self {
        self.settings_mut().priority = priority;
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
    /// # Errors
    ///
    /// A [`ConfigError`] for a `name` that is not a header name.
    ///
    /// ```
    /// # use portcullis::server::{KeyExtractor, ThrottleLayer};
    /// # use portcullis::{ThrottleConfig, ThrottleManager};
    /// let manager = ThrottleManager::<String>::builder().throttle(ThrottleConfig::new()).build()?;
    /// let layer = ThrottleLayer::new(manager, KeyExtractor::header("x-api-key"))
    ///     .priority_header("x-internal-priority")?;
    /// # drop(layer);
    /// # Ok::<(), portcullis::ConfigError>(())
    /// ```
    pub fn priority_header(mut self, name: &str) -> Result<Self, ConfigError> {
        let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
            ConfigError::from(ConfigProblem::new(
                "priority_header",
                format!("`{name}` is not a header name"),
            ))
        })?;
        self.settings_mut().priority_header = Some(name);
        Ok(self)
    }

    /// Judges the inner service's answers by `classify` instead of by
    /// [`classify`](super::classify), which it can fall back on.
    ///
    /// ```
    /// use portcullis::server::{KeyExtractor, ThrottleLayer, classify};
    /// use portcullis::{Outcome, RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(10.0)).build()?;
    /// // Only 503 means overload here; a 500 is a bug, not a capacity problem.
    /// let layer = ThrottleLayer::new(manager, KeyExtractor::peer_ip()).classify_by(|status, headers| {
    ///     match status.as_u16() {
    ///         500 => Outcome::Neutral,
    ///         _ => classify(status, headers),
    ///     }
    /// });
    /// # drop(layer);
    /// # Ok::<(), portcullis::ConfigError>(())
    /// ```
    #[must_use]
    pub fn classify_by<F>(mut self, classify: F) -> Self
    where
        F: Fn(StatusCode, &HeaderMap) -> Outcome + Send + Sync + 'static,
    {
        self.settings_mut().classify = Some(Arc::new(classify));
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
    /// let layer = ThrottleLayer::new(manager, KeyExtractor::peer_ip()).release_at_headers(true);
    /// # drop(layer);
    /// # Ok::<(), portcullis::ConfigError>(())
    /// ```
    #[must_use]
    pub fn release_at_headers(mut self, release: bool) -> Self {
        self.settings_mut().release_at_headers = release;
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
    /// let layer = ThrottleLayer::new(manager, KeyExtractor::peer_ip()).on_refusal(|rejected| {
    ///     let body = format!(r#"{{"error":"{}"}}"#, rejected.reason());
    ///     http::Response::builder()
    ///         .status(status_of(rejected))
    ///         .header("content-type", "application/json")
    ///         .body(body.into())
    ///         .expect("a valid response")
    /// });
    /// # drop(layer);
    /// # Ok::<(), portcullis::ConfigError>(())
    /// ```
    #[must_use]
    pub fn on_refusal<F>(mut self, answer: F) -> Self
    where
        F: Fn(&Rejected) -> Response<Bytes> + Send + Sync + 'static,
    {
        self.settings_mut().on_refusal = Some(Arc::new(answer));
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
    /// let layer = ThrottleLayer::new(manager, KeyExtractor::header("x-api-key"))
    ///     .on_missing_key(|_| {
    ///         let mut answer = http::Response::new("an API key is required\n".into());
    ///         *answer.status_mut() = http::StatusCode::UNAUTHORIZED;
    ///         answer
    ///     });
    /// # drop(layer);
    /// # Ok::<(), portcullis::ConfigError>(())
    /// ```
    #[must_use]
    pub fn on_missing_key<F>(mut self, answer: F) -> Self
    where
        F: Fn(&MissingKey) -> Response<Bytes> + Send + Sync + 'static,
    {
        self.settings_mut().on_missing_key = Some(Arc::new(answer));
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
    /// let layer = ThrottleLayer::new(manager, KeyExtractor::peer_ip()).rate_limit_headers(true);
    /// # drop(layer);
    /// # Ok::<(), portcullis::ConfigError>(())
    /// ```
    #[must_use]
    pub fn rate_limit_headers(mut self, on_success: bool) -> Self {
        self.settings_mut().rate_limit_headers = on_success;
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
    /// # Errors
    ///
    /// A [`ConfigError`] naming `route` for a prefix that does not start
    /// with `/`, or that a path cannot hold (a `?` or `#`).
    ///
    /// ```
    /// use portcullis::server::{KeyExtractor, ThrottleLayer};
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let everything = ThrottleManager::<String>::builder().rate(RateConfig::per_second(50)).build()?;
    /// let login = ThrottleManager::<String>::builder().rate(RateConfig::per_minute(5)).build()?;
    /// let search = ThrottleManager::<String>::builder().rate(RateConfig::per_second(2)).build()?;
    /// let layer = ThrottleLayer::new(everything, KeyExtractor::peer_ip())
    ///     .route("/login", login)?
    ///     .route("/search", search)?;
    /// # drop(layer);
    /// let nowhere = ThrottleManager::<String>::builder().rate(RateConfig::per_second(1)).build()?;
    /// let err = ThrottleLayer::new(nowhere.clone(), KeyExtractor::peer_ip()).route("login", nowhere);
    /// assert_eq!(err.unwrap_err().to_string(), r#"invalid configuration: route: must start with '/', got "login""#);
    /// # Ok::<(), portcullis::ConfigError>(())
    /// ```
    pub fn route(
        mut self,
        prefix: &str,
        manager: ThrottleManager<String>,
    ) -> Result<Self, ConfigError> {
        let problem = if !prefix.starts_with('/') {
            Some(format!("must start with '/', got {prefix:?}"))
        } else if prefix.contains(['?', '#']) {
            Some(format!(
                "must be a path, without '?' or '#', got {prefix:?}"
            ))
        } else {
            None
        };
        if let Some(problem) = problem {
            return Err(ConfigProblem::new("route", problem).into());
        }
        let prefix = match prefix.trim_end_matches('/') {
            "" => "/",
            trimmed => trimmed,
        };
        let routes = &mut self.settings_mut().routes;
        routes.retain(|(known, _)| known != prefix);
        routes.push((prefix.to_owned(), manager));
        routes.sort_by_key(|(known, _)| std::cmp::Reverse(known.len()));
        Ok(self)
    }

    fn settings_mut(&mut self) -> &mut Settings {
        Arc::make_mut(&mut self.settings)
    }
}

impl<S> tower_layer::Layer<S> for ThrottleLayer {
    type Service = ThrottleService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ThrottleService::new(inner, Arc::clone(&self.settings))
    }
}

impl fmt::Debug for ThrottleLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.settings.fmt(f)
    }
}

impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let custom = |set: bool| if set { "custom" } else { "default" };
        f.debug_struct("ThrottleLayer")
            .field("manager", &self.manager)
            .field("routes", &self.routes)
            .field("extractor", &self.extractor)
            .field("priority", &self.priority)
            .field("priority_header", &self.priority_header)
            .field("classify", &custom(self.classify.is_some()))
            .field("on_refusal", &custom(self.on_refusal.is_some()))
            .field("on_missing_key", &custom(self.on_missing_key.is_some()))
            .field("rate_limit_headers", &self.rate_limit_headers)
            .finish()
    }
}
