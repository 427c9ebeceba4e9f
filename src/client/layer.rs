//! [`ThrottleClientLayer`]: any tower HTTP client through a manager; a
//! tonic channel, hyper's client.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::request::Parts;
use http::{HeaderMap, Request, Response, StatusCode};
use tower_layer::Layer;
use tower_service::Service;

use super::RequestTimedOut;
use super::headers::{outcome_of_status, requested_pause};
use super::provider::observe_limits;
use crate::ThrottleManager;
use crate::edge::{self, EdgeCall, Passage, ResponseBody, ResponseFuture, Verdict};
use crate::grpc;
use crate::outcome::Outcome;
use crate::priority::Priority;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type KeyOfParts = dyn Fn(&Parts) -> String + Send + Sync;
type ClassifyHead = dyn Fn(StatusCode, &HeaderMap) -> Outcome + Send + Sync;

/// A tower [`Layer`] for clients: every request of the service it wraps
/// (a tonic `Channel`, hyper's client, any `Service<http::Request<_>>`)
/// goes through a [`ThrottleManager`] first, keyed by host, and its answer
/// is reported; what [`ThrottleMiddleware`](super::ThrottleMiddleware)
/// does for reqwest.
///
/// For each request:
/// 1. its **key** is the URI's authority (`host:port`), else its `Host`
///    header, else the first segment of its path: the gRPC service, for a
///    tonic client whose channel adds the origin only after this layer
///    ([`key_by`](Self::key_by) for anything else,
///    [`key_by_grpc_method`](Self::key_by_grpc_method) for one key per
///    method);
/// 2. its **priority** is a [`Priority`] in its extensions, else the
///    task's ([`with_priority`](crate::priority::with_priority)), else [`priority`](Self::priority);
/// 3. it waits for the key's controls as
///    [`acquire`](crate::ThrottleManager::acquire) does. A refused gRPC
///    call is answered here, without reaching the network, as the server
///    layer answers one ([`grpc::refusal`]: tonic reads
///    `Code::ResourceExhausted` or `Code::Unavailable`, with
///    `grpc-retry-pushback-ms` in its metadata); a refused HTTP request is
///    an error that downcasts to [`Rejected`](crate::Rejected);
/// 4. a request still without an answer after the manager's
///    [`call_timeout`](crate::deadline::TimeLimits::call_timeout) is
///    dropped and counted as overload; one still without an answer at its
///    caller's deadline (its `grpc-timeout`, or the task's
///    [`with_deadline`](crate::deadline::with_deadline)) is dropped and counted as
///    neutral, the caller's budget and not the host's fault (see [whose
///    time ran out](crate::deadline#whose-time-ran-out)); a deadline
///    already passed is refused before anything is sent. A gRPC call is
///    answered `DEADLINE_EXCEEDED` here, an HTTP request is an error that
///    downcasts to [`RequestTimedOut`];
/// 5. the answer is the call's [`Outcome`] ([`classify_head`], or
///    [`classify_by`](Self::classify_by)); an error from the inner service
///    (a refused connection, a timeout) is overload. A call ends when its
///    body ends or is dropped, as [the edges' rule](crate::edge) says,
///    with a gRPC call judged by the `grpc-status` of its trailers;
/// 6. an answer that asks for a pause (`grpc-retry-pushback-ms`, else
///    `Retry-After` on a 429 or 503 or a spent `RateLimit`) defers the key
///    by that long, up to the manager's
///    [`max_defer`](crate::deadline::TimeLimits::max_defer); what a
///    metered API says remains of each limit moves the key's rate and
///    named limits to match
///    ([`observe_remaining`](crate::manager::KeyHandle::observe_remaining)).
///
/// It does not retry: a tonic request's body is a stream, which cannot be
/// sent twice. The manager's [`RetryPolicy`](crate::retry::RetryPolicy)
/// applies to [`call`](crate::ThrottleManager::call) and the reqwest
/// middleware.
///
/// ```
/// use portcullis::client::ThrottleClientLayer;
/// use portcullis::{RateConfig, ThrottleManager};
/// use tower_layer::Layer;
///
/// # #[derive(Clone)] struct Channel;
/// let per_host = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(10.0)).build()?;
/// let channel = ThrottleClientLayer::new(per_host).layer(Channel);
/// # drop(channel);
/// # Ok::<(), portcullis::error::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct ThrottleClientLayer {
    settings: Arc<ClientSettings>,
}

/// What every clone of a client layer and its services share.
#[derive(Clone)]
struct ClientSettings {
    manager: ThrottleManager<String>,
    key_of: Option<Arc<KeyOfParts>>,
    classify: Option<Arc<ClassifyHead>>,
    priority: Priority,
}

impl ThrottleClientLayer {
    /// A layer over `manager`: one key per host, [`classify_head`] for the
    /// outcome, [`Priority::HIGH`] for requests that name none.
    ///
    /// ```
    /// use portcullis::client::ThrottleClientLayer;
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(10.0)).build()?;
    /// let layer = ThrottleClientLayer::new(manager);
    /// # drop(layer);
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn new(manager: ThrottleManager<String>) -> Self {
        Self {
            settings: Arc::new(ClientSettings {
                manager,
                key_of: None,
                classify: None,
                priority: Priority::HIGH,
            }),
        }
    }

    /// Keys requests by `key_of` instead of by host.
    ///
    /// ```
    /// use portcullis::client::ThrottleClientLayer;
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(10.0)).build()?;
    /// // One key per tenant, from a header an earlier layer set.
    /// let layer = ThrottleClientLayer::new(manager).key_by(|request| {
    ///     let tenant = request.headers.get("x-tenant").and_then(|v| v.to_str().ok());
    ///     tenant.unwrap_or("anonymous").to_owned()
    /// });
    /// # drop(layer);
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    #[must_use]
    pub fn key_by<F>(self, key_of: F) -> Self
    where
        F: Fn(&Parts) -> String + Send + Sync + 'static,
    {
        self.with(|settings| settings.key_of = Some(Arc::new(key_of)))
    }

    /// Keys requests by their gRPC method, the whole path
    /// (`/grpc.health.v1.Health/Check`): each method of a backend learns
    /// its own rate.
    ///
    /// ```
    /// use portcullis::client::ThrottleClientLayer;
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(10.0)).build()?;
    /// let layer = ThrottleClientLayer::new(manager).key_by_grpc_method();
    /// # drop(layer);
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    #[must_use]
    pub fn key_by_grpc_method(self) -> Self {
        self.key_by(|request| request.uri.path().to_owned())
    }

    /// Judges each answer's head by `classify` instead of by
    /// [`classify_head`], which it can fall back on. A gRPC call's
    /// trailers are still judged by their `grpc-status`.
    ///
    /// ```
    /// use portcullis::client::{ThrottleClientLayer, classify_head};
    /// use portcullis::outcome::Outcome;
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(10.0)).build()?;
    /// // This backend answers 500 when its database is overloaded.
    /// let layer = ThrottleClientLayer::new(manager).classify_by(|status, headers| match status.as_u16() {
    ///     500 => Outcome::Overloaded,
    ///     _ => classify_head(status, headers),
    /// });
    /// # drop(layer);
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    #[must_use]
    pub fn classify_by<F>(self, classify: F) -> Self
    where
        F: Fn(StatusCode, &HeaderMap) -> Outcome + Send + Sync + 'static,
    {
        self.with(|settings| settings.classify = Some(Arc::new(classify)))
    }

    /// The priority of requests that carry none (default
    /// [`Priority::HIGH`]).
    ///
    /// ```
    /// use portcullis::client::ThrottleClientLayer;
    /// use portcullis::{Priority, RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(10.0)).build()?;
    /// let background = ThrottleClientLayer::new(manager).priority(Priority::LOW);
    /// # drop(background);
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    #[must_use]
    pub fn priority(self, priority: Priority) -> Self {
        self.with(|settings| settings.priority = priority)
    }

    /// The layer with its settings changed by `change`.
    fn with(mut self, change: impl FnOnce(&mut ClientSettings)) -> Self {
        change(Arc::make_mut(&mut self.settings));
        self
    }
}

impl<S> Layer<S> for ThrottleClientLayer {
    type Service = ThrottleClientService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ThrottleClientService {
            inner,
            settings: Arc::clone(&self.settings),
        }
    }
}

impl fmt::Debug for ThrottleClientLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThrottleClientLayer")
            .field("manager", &self.settings.manager)
            .field("key_by", &self.settings.key_of.as_ref().map(|_| "custom"))
            .field(
                "classify_by",
                &self.settings.classify.as_ref().map(|_| "custom"),
            )
            .field("priority", &self.settings.priority)
            .finish()
    }
}

/// The service a [`ThrottleClientLayer`] wraps around `S`.
///
/// ```
/// use portcullis::client::{ThrottleClientLayer, ThrottleClientService};
/// use portcullis::{RateConfig, ThrottleManager};
/// use tower_layer::Layer;
///
/// # #[derive(Clone)] struct Channel;
/// let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(10.0)).build()?;
/// let service: ThrottleClientService<Channel> = ThrottleClientLayer::new(manager).layer(Channel);
/// # drop(service);
/// # Ok::<(), portcullis::error::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct ThrottleClientService<S> {
    inner: S,
    settings: Arc<ClientSettings>,
}

impl<S: fmt::Debug> fmt::Debug for ThrottleClientService<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThrottleClientService")
            .field("inner", &self.inner)
            .field("manager", &self.settings.manager)
            .finish_non_exhaustive()
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for ThrottleClientService<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    ReqBody: Send + 'static,
    ResBody: http_body::Body + 'static,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = BoxError;
    type Future = ResponseFuture<Self::Response, BoxError>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    /// Waits for the request's key, sends it, reports its answer.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future while it waits takes nothing from the key; while
    /// the request is in flight, it drops the request and frees the key's
    /// slot, counting a neutral outcome.
    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let ready = edge::take_ready(&mut self.inner);
        let settings = Arc::clone(&self.settings);
        ResponseFuture::new(Box::pin(send(settings, ready, request)))
    }
}

async fn send<S, ReqBody, ResBody>(
    settings: Arc<ClientSettings>,
    mut inner: S,
    request: Request<ReqBody>,
) -> Result<Response<ResponseBody<ResBody>>, BoxError>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    S::Error: Into<BoxError>,
    ResBody: http_body::Body,
{
    let (mut head, body) = request.into_parts();
    let key = settings.key_of(&head);
    let grpc = grpc::is_grpc(&head.headers);
    // The call's deadline: its own `grpc-timeout`, else its caller's,
    // which the server then hears as `grpc-timeout`.
    let deadline = match grpc::timeout_in(&head.headers) {
        Some(left) => crate::deadline::from_now(left),
        None => {
            let deadline = crate::deadline::current();
            // The time left is read only for a gRPC call that has a
            // deadline to send on.
            if let Some(left) = deadline
                .filter(|_| grpc)
                .and_then(|_| crate::deadline::remaining())
            {
                head.headers
                    .insert("grpc-timeout", grpc::timeout_value(left));
            }
            deadline
        }
    };
    let priority = head
        .extensions
        .get::<Priority>()
        .copied()
        .or_else(Priority::current)
        .unwrap_or(settings.priority);
    let call = EdgeCall::new(&settings.manager, &key)
        .priority(priority)
        .carry_body(true)
        .deadline(deadline);
    let passage = call
        .pass(
            || inner.call(Request::from_parts(head, body)),
            |result| match result {
                Ok(response) => {
                    observe_limits(&settings.manager, &key, response.headers());
                    Verdict {
                        outcome: settings.outcome_of(response, deadline.is_some()),
                        pause: requested_pause(
                            &key,
                            response.status(),
                            response.headers(),
                            &|name| settings.manager.limit(name).is_some(),
                        ),
                    }
                }
                Err(_) => Verdict::of(Outcome::Overloaded),
            },
        )
        .await;
    match passage {
        // A refused or timed-out gRPC call is answered as a server would,
        // so that a tonic client reads its status.
        Passage::Refused(rejected) if grpc => {
            Ok(grpc::refusal(&rejected).map(ResponseBody::answer))
        }
        Passage::Refused(rejected) => Err(Box::new(rejected)),
        Passage::TimedOut(expiry) if grpc => Ok(grpc::timed_out(expiry).map(ResponseBody::answer)),
        Passage::TimedOut(expiry) => Err(Box::new(RequestTimedOut::new(expiry))),
        Passage::Carried(response, permit) => {
            Ok(response.map(|body| ResponseBody::carrying(body, permit)))
        }
        Passage::Reported(result, _) => match result {
            Ok(response) => Ok(response.map(ResponseBody::reported)),
            Err(error) => Err(error.into()),
        },
    }
}

impl ClientSettings {
    fn key_of(&self, head: &Parts) -> String {
        if let Some(key_of) = &self.key_of {
            return key_of(head);
        }
        if let Some(authority) = head.uri.authority() {
            return authority.as_str().to_owned();
        }
        if let Some(host) = head
            .headers
            .get(http::header::HOST)
            .and_then(|h| h.to_str().ok())
        {
            return host.to_owned();
        }
        let path = head.uri.path().trim_start_matches('/');
        path.split('/').next().unwrap_or_default().to_owned()
    }

    /// The outcome of `response`, to a call that carried a deadline if
    /// `under_deadline`: its `DEADLINE_EXCEEDED` is then its caller's, not
    /// overload ([`grpc::outcome_under_deadline`]).
    fn outcome_of<B>(&self, response: &Response<B>, under_deadline: bool) -> Outcome {
        let (status, headers) = (response.status(), response.headers());
        match (&self.classify, grpc::status_in(headers)) {
            (Some(judge), _) => judge(status, headers),
            (None, Some(code)) if under_deadline => grpc::outcome_under_deadline(code),
            (None, _) => classify_head(status, headers),
        }
    }
}

/// The default classification of an answer's head, for the client layer:
///
/// | answer | outcome |
/// |---|---|
/// | a `grpc-status` in the head | by [`grpc::outcome_of`]; for a call that carried a deadline, by [`grpc::outcome_under_deadline`] |
/// | any other | by its status, as [`status_outcome`](crate::edge::status_outcome) reads it for a client: 429, 502, 503, 504 are [`Overloaded`](Outcome::Overloaded), a 500, a 408 or any other 4xx or 5xx [`Neutral`](Outcome::Neutral), 1xx to 3xx [`Success`](Outcome::Success) (a gRPC call: judged again by its trailers) |
///
/// ```
/// use http::{HeaderMap, HeaderValue, StatusCode};
/// use portcullis::outcome::Outcome;
/// use portcullis::client::classify_head;
///
/// assert_eq!(classify_head(StatusCode::OK, &HeaderMap::new()), Outcome::Success);
/// assert_eq!(classify_head(StatusCode::SERVICE_UNAVAILABLE, &HeaderMap::new()), Outcome::Overloaded);
/// let mut grpc = HeaderMap::new();
/// grpc.insert("grpc-status", HeaderValue::from_static("8"));
/// assert_eq!(classify_head(StatusCode::OK, &grpc), Outcome::Overloaded);
/// ```
pub fn classify_head(status: StatusCode, headers: &HeaderMap) -> Outcome {
    match grpc::status_in(headers) {
        Some(code) => grpc::outcome_of(code),
        None => outcome_of_status(status),
    }
}
