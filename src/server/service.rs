//! [`ThrottleService`]: one request through the key's controls and the
//! inner service.

use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::request::Parts;
use http::{Request, Response};
use tower_service::Service;

use super::answer::{self, set_rate_limit, set_retry_after};
use super::future::{ResponseBody, ResponseFuture};
use super::key::MissingKey;
use super::layer::Settings;
use crate::ThrottleManager;
use crate::error::Rejected;
use crate::grpc;
use crate::outcome::Outcome;
use crate::priority::Priority;

/// The service a [`ThrottleLayer`](super::ThrottleLayer) wraps around
/// `S`: every request through its client's controls first.
///
/// ```
/// use portcullis::server::{KeyExtractor, ThrottleLayer, ThrottleService};
/// use portcullis::{RateConfig, ThrottleManager};
/// use tower_layer::Layer;
///
/// # #[derive(Clone)] struct Handler;
/// let manager = ThrottleManager::<String>::builder().rate(RateConfig::new(10.0)).build()?;
/// let layer = ThrottleLayer::new(manager, KeyExtractor::peer_ip());
/// let service: ThrottleService<Handler> = layer.layer(Handler);
/// # drop(service);
/// # Ok::<(), portcullis::ConfigError>(())
/// ```
#[derive(Debug, Clone)]
pub struct ThrottleService<S> {
    inner: S,
    settings: Arc<Settings>,
}

impl<S> ThrottleService<S> {
    pub(super) fn new(inner: S, settings: Arc<Settings>) -> Self {
        Self { inner, settings }
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for ThrottleService<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    ReqBody: Send + 'static,
    ResBody: http_body::Body + 'static,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<Self::Response, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    /// Answers the request: refused at once, or passed to the inner
    /// service once the key's controls admit it.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future (the client went away) while the request waits
    /// in the bulkhead's queue leaves the queue; while the inner service
    /// runs, it drops that call and frees the key's slot, counting a
    /// neutral outcome.
    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        // The clone that was polled ready serves this request.
        let clone = self.inner.clone();
        let ready = std::mem::replace(&mut self.inner, clone);
        let settings = Arc::clone(&self.settings);
        ResponseFuture::new(Box::pin(handle(settings, ready, request)))
    }
}

async fn handle<S, ReqBody, ResBody>(
    settings: Arc<Settings>,
    mut inner: S,
    request: Request<ReqBody>,
) -> Result<Response<ResponseBody<ResBody>>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    ResBody: http_body::Body,
{
    let (head, body) = request.into_parts();
    let grpc = grpc::is_grpc(&head.headers);
    let key = match settings.extractor.key_of(&head) {
        Ok(key) => key,
        Err(missing) => return Ok(settings.missing_key(&missing, grpc)),
    };
    let priority = match settings.priority_of(&head) {
        Ok(priority) => priority,
        Err(problem) => {
            let answer = if grpc {
                grpc::invalid_argument(&problem)
            } else {
                answer::bad_request(&problem)
            };
            return Ok(answer.map(ResponseBody::answer));
        }
    };
    let manager = settings.manager_for(head.uri.path());
    let permit = match manager
        .try_acquire_or_queue_owned(key.as_str(), priority)
        .await
    {
        Ok(permit) => permit,
        Err(rejected) => return Ok(settings.refused(manager, &key, &rejected, grpc)),
    };
    let mut response = match inner.call(Request::from_parts(head, body)).await {
        Ok(response) => response,
        Err(error) => {
            permit.report(Outcome::Overloaded);
            return Err(error);
        }
    };
    let outcome = settings.outcome_of(&response);
    // A successful answer's body carries the permit to its end; any other
    // is judged by its head alone.
    let permit = if outcome == Outcome::Success && !settings.release_at_headers {
        Some(permit)
    } else {
        permit.report(outcome);
        None
    };
    if settings.rate_limit_headers {
        if let Some(rate) = manager.peek(key.as_str()) {
            set_rate_limit(response.headers_mut(), &rate);
        }
    }
    Ok(response.map(|body| ResponseBody::inner(body, permit)))
}

impl Settings {
    /// The controls of a request to `path`: its route's (the longest
    /// prefix it is at or under), else the layer's own.
    fn manager_for(&self, path: &str) -> &ThrottleManager<String> {
        let under = |prefix: &str| {
            prefix == "/"
                || path
                    .strip_prefix(prefix)
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        };
        self.routes
            .iter()
            .find(|(prefix, _)| under(prefix))
            .map_or(&self.manager, |(_, manager)| manager)
    }

    /// The request's priority: an extension an earlier layer set, the
    /// priority header, or the default. A header that is not one of the
    /// manager's levels is the client's mistake, answered 400 whatever the
    /// manager's [`OutOfRange`](crate::priority::OutOfRange) policy says
    /// for programmatic callers.
    fn priority_of(&self, head: &Parts) -> Result<Priority, String> {
        if let Some(priority) = head.extensions.get::<Priority>() {
            return Ok(*priority);
        }
        let Some(name) = &self.priority_header else {
            return Ok(self.priority);
        };
        let Some(value) = head.headers.get(name) else {
            return Ok(self.priority);
        };
        let levels = self.manager.priority_levels();
        value
            .to_str()
            .ok()
            .and_then(|level| level.trim().parse::<u8>().ok())
            .filter(|&level| level < levels)
            .map(Priority::new)
            .ok_or_else(|| {
                let highest = levels - 1;
                let value = String::from_utf8_lossy(value.as_bytes());
                format!(
                    "header `{name}` must be a priority level from 0 to {highest}, got {}",
                    answer::quoted(&value)
                )
            })
    }

    fn outcome_of<B>(&self, response: &Response<B>) -> Outcome {
        let (status, headers) = (response.status(), response.headers());
        match &self.classify {
            Some(classify) => classify(status, headers),
            None => answer::classify(status, headers),
        }
    }

    /// The answer to a refused request: [`on_refusal`](super::ThrottleLayer::on_refusal)'s,
    /// else a trailers-only gRPC answer to a gRPC request, else
    /// [`refusal`](answer::refusal); with the wait and the rate's headers.
    fn refused<B>(
        &self,
        manager: &ThrottleManager<String>,
        key: &str,
        rejected: &Rejected,
        grpc: bool,
    ) -> Response<ResponseBody<B>> {
        let mut answer = match &self.on_refusal {
            Some(answer) => answer(rejected),
            None if grpc => grpc::refusal(rejected),
            None => answer::refusal(rejected),
        };
        let headers = answer.headers_mut();
        if let Some(after) = rejected.retry_after() {
            set_retry_after(headers, after);
        }
        if let Some(rate) = manager.peek(key) {
            set_rate_limit(headers, &rate);
        }
        answer.map(ResponseBody::answer)
    }

    fn missing_key<B>(&self, missing: &MissingKey, grpc: bool) -> Response<ResponseBody<B>> {
        let answer: Response<Bytes> = match &self.on_missing_key {
            Some(answer) => answer(missing),
            None if grpc => grpc::invalid_argument(&missing.to_string()),
            None => answer::missing_key(missing),
        };
        answer.map(ResponseBody::answer)
    }
}
