//! [`RequestTimedOut`]: the error of a request a client edge dropped.

use std::fmt;
use std::time::Duration;

use crate::deadline::{Expiry, TimeLimit};

/// A request a client edge dropped unfinished because a time limit ran
/// out: the manager's [`call_timeout`](crate::deadline::TimeLimits::call_timeout)
/// from its admission (counted as overload for its host), the caller's
/// deadline (the request's own timeout in the reqwest middleware, a
/// [`with_deadline`](crate::deadline::with_deadline) or `grpc-timeout` in the client
/// layer), or the retry policy's
/// [`deadline`](crate::retry::RetryPolicy::deadline) for its attempts and
/// waits together (both neutral: see [whose time ran
/// out](crate::deadline#whose-time-ran-out)).
///
/// The reqwest middleware's error is `reqwest_middleware::Error::Middleware`,
/// and the client layer's its `Box<dyn Error>`; both downcast to it. A gRPC
/// call through the client layer is answered `DEADLINE_EXCEEDED` instead.
///
/// ```
/// use portcullis::client::RequestTimedOut;
/// use portcullis::deadline::TimeLimit;
///
/// /// Whether a client edge dropped a request because its host was slow
/// /// (rather than because the caller's own time ran out).
/// fn host_too_slow(error: &(dyn std::error::Error + 'static)) -> bool {
///     error
///         .downcast_ref::<RequestTimedOut>()
///         .is_some_and(|timed_out| timed_out.limit() == TimeLimit::CallTimeout)
/// }
/// # let _ = host_too_slow;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestTimedOut {
    expiry: Expiry,
}

impl RequestTimedOut {
    pub(super) fn new(expiry: Expiry) -> Self {
        Self { expiry }
    }

    /// How long the limit that ran out gave the request.
    pub fn after(&self) -> Duration {
        self.expiry.after()
    }

    /// The limit that ran out.
    pub fn limit(&self) -> TimeLimit {
        self.expiry.limit()
    }
}

impl fmt::Display for RequestTimedOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.expiry.fmt(f)
    }
}

impl std::error::Error for RequestTimedOut {}
