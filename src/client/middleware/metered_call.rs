//! A metered request's attempt through the middleware: its named limits'
//! parts first, then its key's controls; the parts go back if the request
//! never reached the backend, and are the caller's to settle otherwise.

use std::sync::atomic::{AtomicBool, Ordering};

use http::{Extensions, StatusCode};
use reqwest::{Request, Response};
use reqwest_middleware::Next;

use super::{ThrottleMiddleware, refused};
use crate::metered::{Cost, CostSettle, NamedParts};
use crate::priority::Priority;
use crate::retry::RetryCause;

impl ThrottleMiddleware {
    /// One attempt at `priority`: admitted, sent, reported. Its result, and
    /// why it failed as [`Retries::after`](crate::retry::Retries::after)
    /// judges it (`None`: nothing to retry).
    pub(super) async fn attempt(
        &self,
        key: &str,
        priority: Priority,
        request: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> (reqwest_middleware::Result<Response>, Option<RetryCause>) {
        let cost = extensions.get::<Cost>().cloned();
        let Some(cost) = cost.filter(|_| self.manager.settings().limit_names().next().is_some())
        else {
            return self
                .attempt_call(key, priority, None, None, request, extensions, next)
                .await;
        };
        // A metered call: its named limits' parts first, then its key's
        // controls; the parts go back if the call never reached the
        // backend or was answered 429, and are the caller's to settle
        // (`CostSettle`, among the response's extensions) otherwise.
        let parts = match self.manager.take_named_parts(key, priority, &cost).await {
            Ok(parts) => parts,
            Err(rejected) => return refused(rejected),
        };
        let rate_taken = parts.requests_taken();
        // Dropped before the request is sent (waiting for its key's
        // controls), the call gives its parts back: it never reached the
        // backend.
        let sent = AtomicBool::new(false);
        let mut unsent_if_dropped = UnsentIfDropped {
            parts: Some(parts),
            sent: &sent,
        };
        let (result, cause) = self
            .attempt_call(
                key,
                priority,
                rate_taken,
                Some(&sent),
                request,
                extensions,
                next,
            )
            .await;
        let parts = unsent_if_dropped.parts.take().expect("taken once");
        match result {
            Ok(response) if response.status() == StatusCode::TOO_MANY_REQUESTS => {
                parts.unsent();
                (Ok(response), cause)
            }
            Ok(mut response) => {
                response.extensions_mut().insert(CostSettle::new(parts));
                (Ok(response), cause)
            }
            Err(error) => {
                if is_refusal(&error) {
                    parts.refused();
                } else if never_sent(&error) {
                    parts.unsent();
                }
                (Err(error), cause)
            }
        }
    }
}

/// A metered call's parts while its request is on its way to be sent:
/// dropped before it was (the caller gave up while the key's controls made
/// it wait), they go back, as for a request that never reached the
/// backend; once sent, they are the answer's to settle.
struct UnsentIfDropped<'s> {
    parts: Option<NamedParts<'static>>,
    sent: &'s AtomicBool,
}

impl Drop for UnsentIfDropped<'_> {
    fn drop(&mut self) {
        if let Some(parts) = self.parts.take() {
            if !self.sent.load(Ordering::Acquire) {
                parts.unsent();
            }
        }
    }
}

/// Whether `error` is the refusal of a call's key's controls.
fn is_refusal(error: &reqwest_middleware::Error) -> bool {
    super::refusal(error).is_some()
}

/// Whether a call that ended in `error` never reached its backend: its
/// key's controls refused it, or its connection failed.
fn never_sent(error: &reqwest_middleware::Error) -> bool {
    is_refusal(error)
        || matches!(error, reqwest_middleware::Error::Reqwest(error) if error.is_connect())
}
