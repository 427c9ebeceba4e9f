//! [`RequestTimedOut`]: the error of a request a client edge dropped.

use std::fmt;
use std::time::Duration;

/// A request a client edge dropped because it had no answer within the
/// manager's [`call_timeout`](crate::ThrottleManagerBuilder::call_timeout)
/// of its admission (counted as overload for its host), or, in the reqwest
/// middleware, because it ran past the retry policy's
/// [`deadline`](crate::retry::RetryPolicy::deadline) with its attempts and
/// waits together (counted as neutral).
///
/// The reqwest middleware's error is `reqwest_middleware::Error::Middleware`,
/// and the client layer's its `Box<dyn Error>`; both downcast to it. A gRPC
/// call through the client layer is answered `DEADLINE_EXCEEDED` instead.
///
/// ```
/// use portcullis::client::RequestTimedOut;
///
/// /// How long a request ran before a client edge dropped it, if it did.
/// fn timed_out(error: &(dyn std::error::Error + 'static)) -> Option<std::time::Duration> {
///     error.downcast_ref::<RequestTimedOut>().map(RequestTimedOut::after)
/// }
/// # let _ = timed_out;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestTimedOut {
    after: Duration,
}

impl RequestTimedOut {
    pub(super) fn new(after: Duration) -> Self {
        Self { after }
    }

    /// The timeout it ran past.
    pub fn after(&self) -> Duration {
        self.after
    }
}

impl fmt::Display for RequestTimedOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "no response within the call timeout of {:?}", self.after)
    }
}

impl std::error::Error for RequestTimedOut {}
