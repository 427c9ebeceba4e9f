//! [`ThrottleMiddleware`]: a reqwest-middleware client through a manager.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use http::Extensions;
use reqwest::{Request, Response, ResponseBuilderExt};
use reqwest_middleware::{Middleware, Next};

use super::RequestTimedOut;
use super::headers::{outcome_of_status, requested_pause};
use super::provider::observe_limits;
use crate::ThrottleManager;
use crate::deadline::{Expiry, TimeLimit};
use crate::edge::{BodyPermit, CallBody, EdgeCall, Passage, Verdict};
use crate::error::Rejected;
use crate::outcome::{Outcome, transport_overload};
use crate::priority::Priority;
use crate::retry::RetryCause;

mod metered_call;

type KeyOfRequest = dyn Fn(&Request) -> String + Send + Sync;
type ClassifyResponse = dyn Fn(&reqwest_middleware::Result<Response>) -> Outcome + Send + Sync;

/// A [`reqwest_middleware`] middleware that sends every request through a
/// [`ThrottleManager`], one key per host, and reports each response. A
/// request waits for its host's rate; with a bulkhead, it waits for a slot
/// only in the bulkhead's queue, which is 0 unless configured
/// ([`BulkheadConfig::queue`](crate::BulkheadConfig::queue)): with every
/// slot busy and no queue, the request is not sent, refused with
/// [`Full`](crate::error::RejectReason::Full).
///
/// For each request:
/// 1. its **key** is the URL's authority, [`host_key`] (or what
///    [`key_by`](Self::key_by) says);
/// 2. its **priority** is a [`Priority`] in the request's extensions
///    (`reqwest_middleware::RequestBuilder::with_extension`), else the
///    task's ([`with_priority`](crate::priority::with_priority)), else the middleware's
///    [`priority`](Self::priority) ([`Priority::HIGH`] unless set);
/// 3. it waits for the key's controls as
///    [`acquire`](crate::ThrottleManager::acquire) does. A call they refuse
///    is not sent: the error is `reqwest_middleware::Error::Middleware`,
///    which downcasts to [`Rejected`] (reason,
///    retry-after);
/// 4. the response (or error) is the call's [`Outcome`], by [`classify`]
///    (or what [`classify_by`](Self::classify_by)
///    says). A request still waiting for its response after the manager's
///    [`call_timeout`](crate::deadline::TimeLimits::call_timeout) is
///    dropped and counted as overload, so a host that never answers frees
///    its bulkhead slots; the error downcasts to [`RequestTimedOut`].
///    A request's own `timeout` (reqwest's `RequestBuilder::timeout`) is
///    its caller's deadline for the whole call, waits and retries
///    included: a wait that cannot end before it is refused at once
///    ([`RejectReason::Deadline`](crate::error::RejectReason::Deadline)), and a
///    request still waiting for its response at it is dropped and counted
///    as neutral, since part of the time went on waiting here (see [whose
///    time ran out](crate::deadline#whose-time-ran-out)); so is reqwest's
///    own timer for that timeout, whichever fires first, before any
///    classifier. reqwest's timer, which starts when the request is sent,
///    still bounds the body;
/// 5. under the manager's [`RetryPolicy`](crate::retry::RetryPolicy), an
///    overloaded answer is sent again (see [Retries](#retries) below);
/// 6. a response that asks for a pause defers the key by that long, up to
///    the manager's [`max_defer`](crate::deadline::TimeLimits::max_defer):
///    `Retry-After` on a 429 or 503 ([`retry_after`](super::retry_after)), `RateLimit:
///    "default";r=0;t=30` (the IETF draft's spent quota),
///    `RateLimit-Remaining: 0` or `X-RateLimit-Remaining: 0` with their
///    `-Reset`. A value it cannot read is ignored, with a debug event. The
///    pause holds the key's rate, so a manager without a rate does not
///    pause. What a metered API says remains of each limit (OpenAI's,
///    Anthropic's and the IETF headers: [`limit_readings`](super::limit_readings))
///    moves the key's rate and named limits to match
///    ([`observe_remaining`](crate::manager::KeyHandle::observe_remaining)).
///
/// # Metered calls
///
/// A request with a [`Cost`](crate::metered::Cost) among its extensions
/// (`.with_extension(Cost::of("tokens", 700))`), through a manager with
/// named limits ([`limit`](crate::builder::ThrottleManagerBuilder::limit)), first
/// waits for its part of each named limit, as
/// [`acquire_cost`](crate::ThrottleManager::acquire_cost) does, then goes
/// through its key's controls as above. Answered, its response carries a
/// [`CostSettle`](crate::metered::CostSettle) among its extensions: read the answer's usage and
/// settle it. A call answered 429, or that never reached the backend
/// (refused by its key's controls, its connection refused), gets its parts
/// back at once.
///
/// ```
/// use portcullis::client::ThrottleMiddleware;
/// use portcullis::metered::{Cost, CostSettle};
/// use portcullis::{RateConfig, ThrottleManager};
///
/// # async fn call() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// let manager = ThrottleManager::<String>::builder()
///     .rate(RateConfig::per_minute(500))
///     .limit("tokens", RateConfig::per_minute(30_000).burst(5_000))
///     .build()?;
/// let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
///     .with(ThrottleMiddleware::new(manager))
///     .build();
/// let response = client
///     .post("https://llm.example/v1/complete")
///     .with_extension(Cost::of("tokens", 700)) // the prompt's, and a typical answer's
///     .send()
///     .await?;
/// let settle = response.extensions().get::<CostSettle>().cloned();
/// # let used = 912;
/// // ... the body's usage says `used` tokens ...
/// if let Some(settle) = settle {
///     settle.settle(Cost::of("tokens", used));
/// }
/// # Ok(())
/// # }
/// ```
///
/// Cloning the middleware is cheap; the clones share the manager.
///
/// # The call ends when its body ends
///
/// A successful response's body carries the request's permit: the host's
/// bulkhead slot stays taken while the caller reads it, so a large
/// download or a stream counts against the host's concurrency for as long
/// as it flows. The call is reported when the body ends, or when the
/// response is dropped before that: a 2xx whose body the caller never
/// reads is a success, so code that looks only at the status still teaches
/// the host's rate. A body that fails midway (the connection broke) is
/// reported as overload. A response that fails, is neutral, or asks for a
/// pause is reported at once. The rule is [the same on every
/// edge](crate::edge#a-call-ends-when-its-body-ends).
/// [`release_at_headers`](Self::release_at_headers) ends every call when
/// its headers arrive instead.
///
/// # Retries
///
/// A manager built with a [`RetryPolicy`](crate::retry::RetryPolicy)
/// sends a request again when its outcome is overload (429, 503, a call
/// timeout; refused connections and resets only under
/// [`retry_transport_errors`](crate::retry::RetryPolicy::retry_transport_errors)),
/// within the host's retry budget, after a full-jitter backoff or the
/// `Retry-After` when longer, one priority level lower, and never past the
/// policy's deadline: a pause that would end after it returns the 429 or
/// 503 at once. A local refusal that says when the host is free again is
/// retried then, at no cost to the budget. Only idempotent methods (GET,
/// HEAD, OPTIONS, PUT, DELETE, TRACE) are retried, unless
/// [`retry_non_idempotent`](crate::retry::RetryPolicy::retry_non_idempotent)
/// says otherwise, and only requests whose body can be copied (not a
/// stream). The caller gets the last attempt's response or error.
///
/// Stacking reqwest-retry's `RetryTransientMiddleware` as well is not
/// needed, and amplifies overload: placed before this middleware (its
/// `.with(...)` first, so it runs outside this one), each of
/// its retries is a new logical call with a fresh budget share and its own
/// retries here (up to `(1 + its retries) × (1 + these)` requests a call);
/// placed after, its retries bypass the host's controls entirely (no
/// waiting for the rate, no budget, no throttle), and the outcome reported
/// here is only the last one. If you must keep it, put it before this
/// middleware and give the manager no retry policy, so that every attempt
/// at least waits for the host's controls and is counted by them (and a
/// local refusal, which reqwest-retry treats as fatal, ends its retries).
///
/// # Example
///
/// ```no_run
/// use portcullis::client::ThrottleMiddleware;
/// use portcullis::{BulkheadConfig, Priority, RateConfig, Rejected, ThrottleConfig, ThrottleManager};
///
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// let manager = ThrottleManager::<String>::builder()
///     .rate(RateConfig::adaptive(10.0))
///     .throttle(ThrottleConfig::new())
///     .bulkhead(BulkheadConfig::new(8))
///     .build()?;
/// let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
///     .with(ThrottleMiddleware::new(manager.clone()))
///     .build();
/// let response = client
///     .get("http://example.com/")
///     .with_extension(Priority::LOW) // shed first when example.com struggles
///     .send()
///     .await;
/// match response {
///     Ok(response) => println!("{}", response.status()),
///     Err(error) => match portcullis::client::refusal(&error) {
///         Some(rejected) => println!("not sent: {rejected}"),
///         None => return Err(error.into()),
///     },
/// }
/// println!("example.com's rate: {:?}", manager.key("example.com").rate());
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct ThrottleMiddleware {
    manager: ThrottleManager<String>,
    key_of: Option<Arc<KeyOfRequest>>,
    classify: Option<Arc<ClassifyResponse>>,
    priority: Priority,
    release_at_headers: bool,
}

impl ThrottleMiddleware {
    /// A middleware over `manager`: one key per host, [`classify`] for the
    /// outcome, [`Priority::HIGH`] for requests that name none.
    ///
    /// ```
    /// use portcullis::client::ThrottleMiddleware;
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(10.0)).build()?;
    /// let middleware = ThrottleMiddleware::new(manager);
    /// # drop(middleware);
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn new(manager: ThrottleManager<String>) -> Self {
        Self {
            manager,
            key_of: None,
            classify: None,
            priority: Priority::HIGH,
            release_at_headers: false,
        }
    }

    /// Keys requests by `key_of` instead of by host: one key per API token,
    /// per path prefix, per tenant.
    ///
    /// ```
    /// use portcullis::client::ThrottleMiddleware;
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(10.0)).build()?;
    /// // One key per host and first path segment: /v1/search and /v1/users apart.
    /// let middleware = ThrottleMiddleware::new(manager).key_by(|request| {
    ///     let url = request.url();
    ///     let segment = url.path_segments().and_then(|mut s| s.next()).unwrap_or("");
    ///     format!("{}/{segment}", url.host_str().unwrap_or(""))
    /// });
    /// # drop(middleware);
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    #[must_use]
    pub fn key_by<F>(mut self, key_of: F) -> Self
    where
        F: Fn(&Request) -> String + Send + Sync + 'static,
    {
        self.key_of = Some(Arc::new(key_of));
        self
    }

    /// Judges each response (or error) by `classify` instead of by
    /// [`classify`](fn@classify), which it can fall back on.
    ///
    /// ```
    /// use portcullis::client::{ThrottleMiddleware, classify};
    /// use portcullis::outcome::Outcome;
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(10.0)).build()?;
    /// // This backend answers 500 when its database is overloaded.
    /// let middleware = ThrottleMiddleware::new(manager).classify_by(|result| match result {
    ///     Ok(response) if response.status() == 500 => Outcome::Overloaded,
    ///     other => classify(other),
    /// });
    /// # drop(middleware);
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    #[must_use]
    pub fn classify_by<F>(mut self, classify: F) -> Self
    where
        F: Fn(&reqwest_middleware::Result<Response>) -> Outcome + Send + Sync + 'static,
    {
        self.classify = Some(Arc::new(classify));
        self
    }

    /// The priority of requests that carry none in their extensions, outside
    /// [`with_priority`](crate::priority::with_priority). Default: [`Priority::HIGH`], the priority the
    /// manager counts outcomes reported without a permit at.
    ///
    /// ```
    /// use portcullis::client::ThrottleMiddleware;
    /// use portcullis::{Priority, RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(10.0)).build()?;
    /// let background = ThrottleMiddleware::new(manager).priority(Priority::LOW);
    /// # drop(background);
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    #[must_use]
    pub fn priority(mut self, priority: Priority) -> Self {
        self.priority = priority;
        self
    }

    /// Ends each call when its response's headers arrive, not when its
    /// body ends: the host's bulkhead slot is freed while the caller may
    /// still be reading, and a body that fails midway is not counted.
    ///
    /// ```
    /// use portcullis::client::ThrottleMiddleware;
    /// use portcullis::{BulkheadConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder().bulkhead(BulkheadConfig::new(4)).build()?;
    /// let middleware = ThrottleMiddleware::new(manager).release_at_headers(true);
    /// # drop(middleware);
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    #[must_use]
    pub fn release_at_headers(mut self, release: bool) -> Self {
        self.release_at_headers = release;
        self
    }

    fn key_of(&self, request: &Request) -> String {
        match &self.key_of {
            Some(key_of) => key_of(request),
            None => host_key(request),
        }
    }

    fn outcome_of(&self, result: &reqwest_middleware::Result<Response>) -> Outcome {
        match &self.classify {
            Some(judge) => judge(result),
            None => classify(result),
        }
    }
}

impl fmt::Debug for ThrottleMiddleware {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThrottleMiddleware")
            .field("manager", &self.manager)
            .field("key_by", &self.key_of.as_ref().map(|_| "custom"))
            .field("classify_by", &self.classify.as_ref().map(|_| "custom"))
            .field("priority", &self.priority)
            .field("release_at_headers", &self.release_at_headers)
            .finish()
    }
}

#[async_trait::async_trait]
impl Middleware for ThrottleMiddleware {
    /// Waits for the request's key, sends the request, reports its outcome;
    /// under the manager's [`RetryPolicy`](crate::retry::RetryPolicy),
    /// sends it again while the policy allows.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe, as [`acquire`](crate::ThrottleManager::acquire): dropped
    /// while waiting, it takes nothing; dropped while the request is in
    /// flight, its permit is released as a neutral outcome; dropped during a
    /// retry's backoff, no retry is sent.
    async fn handle(
        &self,
        request: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        // The request's own timeout is its caller's deadline, for every
        // attempt and wait together; one past what an `Instant` holds is
        // no deadline.
        match request
            .timeout()
            .and_then(|left| crate::deadline::from_now(*left))
        {
            Some(deadline) => {
                let call = self.handle_logical(request, extensions, next);
                crate::with_deadline(deadline, call).await
            }
            None => self.handle_logical(request, extensions, next).await,
        }
    }
}

impl ThrottleMiddleware {
    /// One logical request, its attempts under the manager's retry policy
    /// and its task's deadline.
    async fn handle_logical(
        &self,
        request: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        let key = self.key_of(&request);
        let first = extensions
            .get::<Priority>()
            .copied()
            .or_else(Priority::current)
            .unwrap_or(self.priority);
        let mut retries = self.manager.key(key.as_str()).retries(first);
        let may_retry = retries.may_retry(is_idempotent(request.method()));
        let mut request = request;
        loop {
            // A copy kept for the next attempt, made only while there may
            // be one; a streamed body cannot be copied, so it is sent once.
            let spare = if may_retry { request.try_clone() } else { None };
            let attempt = self.attempt(&key, retries.priority(), request, extensions, next.clone());
            let Some((result, cause)) = retries.within(attempt).await else {
                let timed_out = RequestTimedOut::new(retries.expired());
                return Err(reqwest_middleware::Error::middleware(timed_out));
            };
            let (Some(cause), Some(again)) = (cause, spare) else {
                return result;
            };
            if retries.after(cause).await.is_err() {
                return result;
            }
            request = again;
        }
    }

    /// One attempt through the key's controls, as `attempt` (a metered
    /// call's first takes its named limits' parts: `metered_call.rs`);
    /// `rate_taken`: the requests of its key's rate the store took with the
    /// call's named limits, which the controls do not take again; `sent`,
    /// set when the request is handed on to be sent.
    #[expect(
        clippy::too_many_arguments,
        reason = "the attempt's parts, each from a different place of `attempt`"
    )]
    async fn attempt_call(
        &self,
        key: &str,
        priority: Priority,
        rate_taken: Option<u32>,
        sent: Option<&AtomicBool>,
        request: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> (reqwest_middleware::Result<Response>, Option<RetryCause>) {
        // The request's own timeout is the task's deadline already
        // (`handle`).
        let call = EdgeCall::new(&self.manager, key)
            .rate_taken(rate_taken)
            .priority(priority)
            .carry_body(!self.release_at_headers);
        let own_timeout = request.timeout().copied();
        let passage = call
            .pass(
                || {
                    if let Some(sent) = sent {
                        sent.store(true, Ordering::Release);
                    }
                    next.run(request, extensions)
                },
                |result| match own_timeout {
                    // reqwest's own timer for the request's timeout, which
                    // may fire at the deadline's instant: the caller's
                    // budget, as the deadline is.
                    Some(_) if is_own_timeout(result) => Verdict::of(Outcome::Neutral),
                    _ => Verdict {
                        outcome: self.outcome_of(result),
                        pause: result.as_ref().ok().and_then(|response| {
                            observe_limits(&self.manager, key, response.headers());
                            let named = |name: &str| self.manager.limit(name).is_some();
                            requested_pause(key, response.status(), response.headers(), &named)
                        }),
                    },
                },
            )
            .await;
        match passage {
            Passage::Reported(result, _) if own_timeout.is_some() && is_own_timeout(&result) => {
                let after = own_timeout.unwrap_or_default();
                let expiry = Expiry::new(TimeLimit::Deadline, after);
                let timed_out = RequestTimedOut::new(expiry);
                (Err(reqwest_middleware::Error::middleware(timed_out)), None)
            }
            Passage::Refused(rejected) => refused(rejected),
            Passage::TimedOut(expiry) => {
                // Past its call timeout the host was too slow, and the
                // request may go again; past its caller's deadline it may
                // not.
                let cause = (expiry.limit() == TimeLimit::CallTimeout)
                    .then_some(RetryCause::Overloaded { pause: None });
                let timed_out = RequestTimedOut::new(expiry);
                (Err(reqwest_middleware::Error::middleware(timed_out)), cause)
            }
            Passage::Carried(response, permit) => (Ok(carrying(response, permit)), None),
            Passage::Reported(result, Verdict { outcome, pause }) => {
                let cause = match (outcome, &result) {
                    (Outcome::Overloaded, Err(reqwest_middleware::Error::Reqwest(_))) => {
                        Some(RetryCause::Transport)
                    }
                    (Outcome::Overloaded, _) => Some(RetryCause::Overloaded { pause }),
                    _ => None,
                };
                (result, cause)
            }
        }
    }
}

/// `response` with its body carrying `permit` to its end (see
/// [when a call ends](crate::edge#a-call-ends-when-its-body-ends)).
fn carrying(response: Response, permit: BodyPermit) -> Response {
    let url = response.url().clone();
    let (mut parts, body) = http::Response::<reqwest::Body>::from(response).into_parts();
    // reqwest keeps a response's URL in an extension only its builder sets.
    let mut with_url = http::Response::builder().url(url);
    if let Some(extensions) = with_url.extensions_mut() {
        parts.extensions.extend(std::mem::take(extensions));
    }
    let body = reqwest::Body::wrap(CallBody::new(body, permit));
    Response::from(http::Response::from_parts(parts, body))
}

/// An attempt refused locally: the refusal, which downcasts to
/// [`Rejected`], and its wait for the retries.
fn refused(rejected: Rejected) -> (reqwest_middleware::Result<Response>, Option<RetryCause>) {
    let cause = RetryCause::Refused {
        retry_after: rejected.retry_after(),
    };
    (
        Err(reqwest_middleware::Error::middleware(rejected)),
        Some(cause),
    )
}

/// Whether `result` is reqwest's own timeout of the request (not of its
/// connection, which says the host is unreachable).
fn is_own_timeout(result: &reqwest_middleware::Result<Response>) -> bool {
    matches!(result, Err(reqwest_middleware::Error::Reqwest(error)) if error.is_timeout() && !error.is_connect())
}

/// Whether a request with this method may be sent twice: GET, HEAD,
/// OPTIONS, PUT, DELETE and TRACE (RFC 9110, 9.2.2).
fn is_idempotent(method: &reqwest::Method) -> bool {
    use reqwest::Method;
    [
        Method::GET,
        Method::HEAD,
        Method::OPTIONS,
        Method::PUT,
        Method::DELETE,
        Method::TRACE,
    ]
    .contains(method)
}

/// The default key of a request: its URL's authority, the host with the
/// port when the port is not the scheme's default (`example.com`,
/// `127.0.0.1:8080`, `[::1]:8443`).
///
/// ```
/// use portcullis::client::host_key;
///
/// let key = |url: &str| host_key(&reqwest::Request::new(reqwest::Method::GET, url.parse().unwrap()));
/// assert_eq!(key("https://example.com/a?b"), "example.com");
/// assert_eq!(key("https://example.com:443/"), "example.com");
/// assert_eq!(key("http://127.0.0.1:8080/"), "127.0.0.1:8080");
/// assert_eq!(key("http://[::1]:8443/"), "[::1]:8443");
/// ```
pub fn host_key(request: &Request) -> String {
    let url = request.url();
    let host = url.host_str().unwrap_or_default();
    match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_owned(),
    }
}

/// The default classification of a response or error:
///
/// | what came back | outcome |
/// |---|---|
/// | 429, 502, 503, 504 (the one table: [`status_outcome`](crate::edge::status_outcome)) | [`Overloaded`](Outcome::Overloaded) |
/// | a connect error, a timeout, a connection reset or refused | [`Overloaded`](Outcome::Overloaded) |
/// | 1xx, 2xx, 3xx | [`Success`](Outcome::Success) |
/// | any other 4xx or 5xx (a 404 or a 500 says nothing about capacity) | [`Neutral`](Outcome::Neutral) |
/// | any other error (a later middleware's, a body that would not build) | [`Neutral`](Outcome::Neutral) |
///
/// ```
/// use portcullis::outcome::Outcome;
/// use portcullis::client::classify;
///
/// let answered = |status: u16| {
///     let response = http::Response::builder().status(status).body("").unwrap();
///     classify(&Ok(reqwest::Response::from(response)))
/// };
/// assert_eq!(answered(200), Outcome::Success);
/// assert_eq!(answered(429), Outcome::Overloaded);
/// assert_eq!(answered(503), Outcome::Overloaded);
/// assert_eq!(answered(404), Outcome::Neutral);
/// ```
pub fn classify(result: &reqwest_middleware::Result<Response>) -> Outcome {
    match result {
        Ok(response) => outcome_of_status(response.status()),
        Err(reqwest_middleware::Error::Reqwest(error)) => {
            if error.is_connect() || error.is_timeout() {
                Outcome::Overloaded
            } else {
                transport_overload(error)
            }
        }
        Err(reqwest_middleware::Error::Middleware(_)) => Outcome::Neutral,
    }
}

/// A refusal of the middleware, as the client returns it; for tests.
#[cfg(test)]
fn rejected(error: &reqwest_middleware::Error) -> Option<&crate::Rejected> {
    match error {
        reqwest_middleware::Error::Middleware(e) => e.downcast_ref::<crate::Rejected>(),
        reqwest_middleware::Error::Reqwest(_) => None,
    }
}

/// The refusal in a middleware's error, if [`ThrottleMiddleware`] refused
/// the request locally (it was never sent): its reason and when to come
/// back, without downcasting the middleware's `anyhow::Error` by hand.
/// `None` for a request that was sent, or that another middleware failed.
///
/// ```
/// use portcullis::client::{ThrottleMiddleware, refusal};
/// use portcullis::error::RejectReason;
/// use portcullis::{BulkheadConfig, ThrottleManager};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let manager = ThrottleManager::<String>::builder()
///     .bulkhead(BulkheadConfig::new(1))
///     .build()?;
/// let _busy = manager.try_acquire("127.0.0.1:9", portcullis::Priority::HIGH)?;
/// let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
///     .with(ThrottleMiddleware::new(manager.clone()))
///     .build();
/// let error = client.get("http://127.0.0.1:9/").send().await.unwrap_err();
/// assert_eq!(refusal(&error).map(|r| r.reason()), Some(RejectReason::Full));
/// # Ok(())
/// # }
/// ```
pub fn refusal(error: &reqwest_middleware::Error) -> Option<&Rejected> {
    match error {
        reqwest_middleware::Error::Middleware(error) => error.downcast_ref::<Rejected>(),
        reqwest_middleware::Error::Reqwest(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RateConfig;
    use crate::deadline::TimeLimits;
    use crate::error::RejectReason;
    use std::time::Duration;

    fn request(url: &str) -> Request {
        Request::new(reqwest::Method::GET, url.parse().unwrap())
    }

    #[test]
    fn the_host_key_keeps_a_port_only_when_it_is_not_the_default() {
        assert_eq!(host_key(&request("http://example.com:80/x")), "example.com");
        assert_eq!(
            host_key(&request("http://example.com:443/x")),
            "example.com:443"
        );
        assert_eq!(host_key(&request("https://EXAMPLE.com/")), "example.com");
    }

    /// A refusal before any request is sent: the error downcasts to the
    /// rejection, with its reason and retry-after.
    #[tokio::test(start_paused = true)]
    async fn a_refused_request_is_a_middleware_error_holding_the_rejection() {
        let manager = ThrottleManager::<String>::builder()
            .rate(RateConfig::adaptive(1.0))
            .time_limits(TimeLimits::new().max_wait(Duration::ZERO))
            .build()
            .unwrap();
        manager.check("127.0.0.1:9").unwrap(); // the one token
        let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
            .with(ThrottleMiddleware::new(manager))
            .build();
        let error = client.get("http://127.0.0.1:9/").send().await.unwrap_err();
        let rejected = rejected(&error).expect("a local refusal");
        assert_eq!(rejected.reason(), RejectReason::RateLimited);
        assert_eq!(rejected.retry_after(), Some(Duration::from_secs(1)));
    }
}
