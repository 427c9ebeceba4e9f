//! The limits that can end a running call ([`TimeLimit`]), what the
//! expiry of each counts as, and which one bounds a call.

use std::fmt;
use std::time::Duration;

use crate::clock::{Nanos, nanos};
use crate::outcome::Outcome;

/// A limit that can end a running call (see [whose time ran
/// out](crate::deadline#whose-time-ran-out)).
///
/// ```
/// use portcullis::outcome::Outcome;
/// use portcullis::deadline::TimeLimit;
///
/// assert_eq!(TimeLimit::CallTimeout.counts_as(), Outcome::Overloaded);
/// assert_eq!(TimeLimit::Deadline.counts_as(), Outcome::Neutral);
/// assert_eq!(TimeLimit::Deadline.to_string(), "the caller's deadline");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TimeLimit {
    /// The manager's [`call_timeout`](crate::deadline::TimeLimits::call_timeout),
    /// or the call's own timeout: how long the backend may take, from the
    /// call's admission.
    CallTimeout,
    /// The caller's deadline: [`with_deadline`](crate::deadline::with_deadline), a gRPC `grpc-timeout`, a
    /// server's deadline header, a reqwest request's own `timeout`.
    Deadline,
    /// The retry policy's [`deadline`](crate::retry::RetryPolicy::deadline)
    /// for a call's attempts and waits together.
    RetryDeadline,
}

impl TimeLimit {
    /// What a call ended by this limit counts as for its key:
    /// [`Overloaded`](Outcome::Overloaded) for the call timeout,
    /// [`Neutral`](Outcome::Neutral) for a deadline.
    pub fn counts_as(self) -> Outcome {
        match self {
            Self::CallTimeout => Outcome::Overloaded,
            Self::Deadline | Self::RetryDeadline => Outcome::Neutral,
        }
    }
}

impl fmt::Display for TimeLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::CallTimeout => "the call timeout",
            Self::Deadline => "the caller's deadline",
            Self::RetryDeadline => "the retry deadline",
        })
    }
}

/// A call dropped unfinished because a [`TimeLimit`] ran out: which
/// limit, and how long it gave the call (from its admission; for the
/// retry deadline, from the first attempt).
///
/// ```
/// use portcullis::deadline::TimeLimits;
/// use portcullis::deadline::with_deadline;
/// use portcullis::{CallError, Priority, RateConfig, ThrottleManager};
/// use portcullis::deadline::TimeLimit;
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), portcullis::error::ConfigError> {
/// let manager = ThrottleManager::<String>::builder()
///     .rate(RateConfig::adaptive(10.0))
///     .time_limits(TimeLimits::new().call_timeout(Duration::from_secs(5)))
///     .build()?;
/// let deadline = tokio::time::Instant::now() + Duration::from_millis(300);
/// let slow = manager.call("api", Priority::HIGH, || async {
///     tokio::time::sleep(Duration::from_secs(1)).await;
///     Ok::<_, std::io::Error>(())
/// });
/// let Err(CallError::TimedOut(expiry)) = with_deadline(deadline, slow).await else { panic!() };
/// assert_eq!(expiry.limit(), TimeLimit::Deadline);
/// assert_eq!(expiry.after(), Duration::from_millis(300));
/// assert_eq!(expiry.to_string(), "no answer before the caller's deadline, 300ms into the call");
/// assert_eq!(manager.key("api").rate(), Some(10.0)); // the caller's budget: not the backend's fault
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expiry {
    limit: TimeLimit,
    after: Duration,
}

impl Expiry {
    pub(crate) fn new(limit: TimeLimit, after: Duration) -> Self {
        Self { limit, after }
    }

    /// The limit that ran out.
    pub fn limit(&self) -> TimeLimit {
        self.limit
    }

    /// How long the limit gave the call.
    pub fn after(&self) -> Duration {
        self.after
    }
}

impl fmt::Display for Expiry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let after = self.after;
        match self.limit {
            TimeLimit::CallTimeout => write!(f, "no answer within the call timeout of {after:?}"),
            TimeLimit::Deadline => {
                write!(
                    f,
                    "no answer before the caller's deadline, {after:?} into the call"
                )
            }
            TimeLimit::RetryDeadline => {
                write!(f, "no answer within the retry deadline of {after:?}")
            }
        }
    }
}

/// What bounds a call admitted at `now()` with the caller's `deadline` (on
/// the manager's clock): the sooner of its call timeout and the time left
/// before the deadline, and which of the two that is (the call timeout
/// when they are equal: the backend had all of it), with when it ends.
/// The clock is read only when something bounds the call.
pub(crate) fn call_bound(
    call_timeout: Option<Duration>,
    deadline: Option<Nanos>,
    now: impl FnOnce() -> Nanos,
) -> Option<(Expiry, Nanos)> {
    if call_timeout.is_none() && deadline.is_none() {
        return None;
    }
    let now = now();
    let left = deadline.map(|deadline| Duration::from_nanos(deadline.saturating_sub(now)));
    let expiry = match (call_timeout, left) {
        (Some(timeout), Some(left)) if left < timeout => Expiry::new(TimeLimit::Deadline, left),
        (Some(timeout), _) => Expiry::new(TimeLimit::CallTimeout, timeout),
        (None, Some(left)) => Expiry::new(TimeLimit::Deadline, left),
        (None, None) => return None,
    };
    Some((expiry, now.saturating_add(nanos(expiry.after()))))
}
