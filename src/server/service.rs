//! [`ThrottleService`]: one request through the key's controls and the
//! inner service.

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::request::Parts;
use http::{Request, Response};
use tokio::time::Instant;
use tower_service::Service;

use super::answer::{self, LayerAnswer, marked, set_rate_limit, set_retry_after};
use super::guard::under;
use super::key::{LayerKey, MissingKey};
use super::settings::LayerSettings;
use crate::ThrottleManager;
use crate::edge::{
    self, AdmitAs, EdgeCall, Judged, Passage, ResponseBody, ResponseFuture, Verdict,
};
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
/// let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(10.0)).build()?;
/// let layer = ThrottleLayer::new(manager, KeyExtractor::peer_ip());
/// let service: ThrottleService<Handler> = layer.layer(Handler);
/// # drop(service);
/// # Ok::<(), portcullis::error::ConfigError>(())
/// ```
#[derive(Debug)]
pub struct ThrottleService<S, K: LayerKey = String> {
    inner: S,
    settings: Arc<LayerSettings<K>>,
}

impl<S: Clone, K: LayerKey> Clone for ThrottleService<S, K> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            settings: Arc::clone(&self.settings),
        }
    }
}

impl<S, K: LayerKey> ThrottleService<S, K> {
    pub(super) fn new(inner: S, settings: Arc<LayerSettings<K>>) -> Self {
        Self { inner, settings }
    }
}

impl<S, K, ReqBody, ResBody> Service<Request<ReqBody>> for ThrottleService<S, K>
where
    K: LayerKey,
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
        let settings = Arc::clone(&self.settings);
        let ready = edge::take_ready(&mut self.inner);
        ResponseFuture::new(Box::pin(
            async move { settings.answer(ready, request).await },
        ))
    }
}

impl<K: LayerKey> LayerSettings<K> {
    /// Answers `request`: the layer's own answer, or the inner service's
    /// once the key's controls admit it.
    async fn answer<S, ReqBody, ResBody>(
        &self,
        mut inner: S,
        request: Request<ReqBody>,
    ) -> Result<Response<ResponseBody<ResBody>>, S::Error>
    where
        S: Service<Request<ReqBody>, Response = Response<ResBody>>,
        ResBody: http_body::Body,
    {
        let (head, body) = request.into_parts();
        let grpc = grpc::is_grpc(&head.headers);
        let key = match self.extractor.key_of(&head) {
            Ok(key) => K::from(key),
            Err(missing) => return Ok(self.missing_key(&missing, grpc)),
        };
        let priority = match self.priority_of(&head) {
            Ok(priority) => priority,
            Err(problem) => {
                let answer = if grpc {
                    grpc::invalid_argument(&problem)
                } else {
                    answer::bad_request(&problem)
                };
                return Ok(marked(answer, None).map(ResponseBody::answer));
            }
        };
        let deadline = match self.deadline_of(&head, grpc) {
            Ok(deadline) => deadline,
            Err(problem) => {
                let answer = marked(answer::bad_request(&problem), None);
                return Ok(answer.map(ResponseBody::answer));
            }
        };
        let path = head.uri.path();
        let manager = self.manager_for(path);
        let mut call = EdgeCall::new(manager, &key)
            .priority(priority)
            .admit_as(AdmitAs::Server)
            .carry_body(!self.release_at_headers)
            .deadline(deadline);
        let guard = self.guard.as_ref();
        if let Some((guard, group)) = guard.and_then(|g| Some((&g.manager, g.key_for(path)?))) {
            call = call.guard(guard, group);
        }
        let passage = call
            .pass_judged(
                || inner.call(Request::from_parts(head, body)),
                |result| match result {
                    // Another layer's answer: counted there; a refusal
                    // there means the request was never served.
                    Ok(response) => match response.extensions().get::<LayerAnswer>() {
                        Some(mark) if mark.refused_for().is_some() => Judged::RefusedElsewhere,
                        Some(_) => Judged::Elsewhere,
                        None => Judged::Counted(Verdict::of(
                            self.outcome_of(response, deadline.is_some()),
                        )),
                    },
                    Err(_) => Judged::Counted(Verdict::of(Outcome::Overloaded)),
                },
            )
            .await;
        let mut response = match passage {
            Passage::Refused(rejected) => return Ok(self.refused(manager, &key, &rejected, grpc)),
            Passage::TimedOut(expiry) => {
                let answer = if grpc {
                    grpc::timed_out(expiry)
                } else {
                    answer::timed_out(expiry)
                };
                return Ok(marked(answer, None).map(ResponseBody::answer));
            }
            Passage::Carried(response, permit) => {
                response.map(|body| ResponseBody::carrying(body, permit))
            }
            Passage::Reported(result, _) => result?.map(ResponseBody::reported),
        };
        if self.rate_limit_headers {
            if let Some(rate) = manager.peek(&key) {
                set_rate_limit(response.headers_mut(), &rate);
            }
        }
        Ok(response)
    }

    /// The controls of a request to `path`: its route's (the longest
    /// prefix it is at or under), else the layer's own.
    fn manager_for(&self, path: &str) -> &ThrottleManager<K> {
        self.routes
            .iter()
            .find(|(prefix, _)| under(path, prefix))
            .map_or(&self.manager, |(_, manager)| manager)
    }

    /// The request's priority: an extension an earlier layer set, the
    /// layer's `priority_by`, the priority header, or the default. A header that is not one of the
    /// manager's levels is the client's mistake, answered 400 whatever the
    /// manager's [`OutOfRange`](crate::priority::OutOfRange) policy says
    /// for programmatic callers.
    fn priority_of(&self, head: &Parts) -> Result<Priority, String> {
        if let Some(priority) = head.extensions.get::<Priority>() {
            return Ok(*priority);
        }
        if let Some(priority) = self.priority_by.as_ref().and_then(|of| of(head)) {
            return Ok(priority);
        }
        let Some(name) = &self.priority_header else {
            return Ok(self.priority);
        };
        let Some(value) = head.headers.get(name) else {
            return Ok(self.priority);
        };
        let levels = self.manager.settings().priority_levels();
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

    /// The request's deadline: a gRPC call's `grpc-timeout`, or the
    /// layer's deadline header, from now. A deadline header that is no
    /// number of milliseconds is the client's mistake.
    fn deadline_of(&self, head: &Parts, grpc: bool) -> Result<Option<Instant>, String> {
        if grpc {
            return Ok(grpc::timeout_in(&head.headers).and_then(crate::deadline::from_now));
        }
        let Some(name) = &self.deadline_header else {
            return Ok(None);
        };
        let Some(value) = head.headers.get(name) else {
            return Ok(None);
        };
        value
            .to_str()
            .ok()
            .map(str::trim)
            .filter(|ms| !ms.is_empty() && ms.len() <= 12 && ms.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|ms| ms.parse::<u64>().ok())
            .map(|ms| crate::deadline::from_now(Duration::from_millis(ms)))
            .ok_or_else(|| {
                let value = String::from_utf8_lossy(value.as_bytes());
                format!(
                    "header `{name}` must be a whole number of milliseconds, got {}",
                    answer::quoted(&value)
                )
            })
    }

    /// The outcome of the inner service's `response` to a request that
    /// carried a deadline if `under_deadline`: a gRPC `DEADLINE_EXCEEDED`
    /// is then its caller's, not overload ([`grpc::outcome_under_deadline`]).
    fn outcome_of<B>(&self, response: &Response<B>, under_deadline: bool) -> Outcome {
        let (status, headers) = (response.status(), response.headers());
        match (&self.classify, grpc::status_in(headers)) {
            (Some(judge), _) => judge(status, headers),
            (None, Some(code)) if under_deadline => grpc::outcome_under_deadline(code),
            (None, _) => answer::classify(status, headers),
        }
    }

    /// The answer to a refused request: [`on_refusal`](super::ThrottleLayerBuilder::on_refusal)'s,
    /// else a trailers-only gRPC answer to a gRPC request, else
    /// [`refusal`](answer::refusal); with the wait and the rate's headers.
    fn refused<B>(
        &self,
        manager: &ThrottleManager<K>,
        key: &K,
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
        marked(answer, Some(rejected.reason())).map(ResponseBody::answer)
    }

    fn missing_key<B>(&self, missing: &MissingKey, grpc: bool) -> Response<ResponseBody<B>> {
        let answer: Response<Bytes> = match &self.on_missing_key {
            Some(answer) => answer(missing),
            None if grpc => grpc::invalid_argument(&missing.to_string()),
            None => answer::missing_key(missing),
        };
        marked(answer, None).map(ResponseBody::answer)
    }
}
