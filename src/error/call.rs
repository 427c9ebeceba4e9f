//! [`CallError`]: why a [`call`](crate::ThrottleManager::call) did not
//! return a value.

use std::error::Error;
use std::fmt;
use std::time::Duration;

use crate::deadline::Expiry;
use crate::error::Rejected;

/// Why a [`call`](crate::ThrottleManager::call) did not return a value.
///
/// # Example
///
/// ```
/// use portcullis::error::RejectReason;
/// use portcullis::CallError;
///
/// fn describe(error: &CallError<std::io::Error>) -> String {
///     match error {
///         CallError::Rejected(rejected) if rejected.reason() == RejectReason::Throttled => "shed locally".into(),
///         CallError::Rejected(rejected) => format!("not sent: {rejected}"),
///         CallError::TimedOut(expiry) => format!("gave up: {expiry}"),
///         CallError::Inner(error) => format!("the call failed: {error}"),
///         other => format!("{other}"),
///     }
/// }
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum CallError<E> {
    /// Refused locally by a control; the call was never made.
    Rejected(Rejected),
    /// The call ran out of time and was dropped: [`Expiry::limit`] says
    /// whose. Past the [call timeout](crate::deadline::TimeLimits::call_timeout)
    /// it counts as a capacity failure; past the caller's deadline or the
    /// retry deadline it is neutral (see [whose time ran
    /// out](crate::deadline#whose-time-ran-out)).
    TimedOut(Expiry),
    /// The call ran and returned this error.
    Inner(E),
}

impl<E> CallError<E> {
    /// True when the call never left this process: it was rejected locally
    /// (a fallback can then tell "not sent" from "failed").
    ///
    /// ```
    /// use portcullis::CallError;
    /// let failed: CallError<std::io::Error> = CallError::Inner(std::io::Error::other("x"));
    /// assert!(!failed.is_local());
    /// ```
    pub fn is_local(&self) -> bool {
        matches!(self, Self::Rejected(_))
    }

    /// When the call could go again, where that is known: the refusal's
    /// [`retry_after`](Rejected::retry_after); `None` for a call that ran.
    ///
    /// ```
    /// use portcullis::deadline::TimeLimits;
    /// use portcullis::{CallError, Priority, RateConfig, ThrottleManager};
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), portcullis::error::ConfigError> {
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::adaptive(2.0))
    ///     .time_limits(TimeLimits::new().max_wait(Duration::ZERO))
    ///     .build()?;
    /// manager.check("api").unwrap(); // the one token
    /// let refused = manager
    ///     .call("api", Priority::HIGH, || async { Ok::<_, std::io::Error>(()) })
    ///     .await
    ///     .unwrap_err();
    /// assert_eq!(refused.retry_after(), Some(Duration::from_millis(500)));
    /// # Ok(())
    /// # }
    /// ```
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Rejected(rejected) => rejected.retry_after(),
            Self::TimedOut(_) | Self::Inner(_) => None,
        }
    }

    /// The inner error, if the call ran and failed.
    ///
    /// ```
    /// use portcullis::CallError;
    /// let failed: CallError<std::io::Error> = CallError::Inner(std::io::Error::other("x"));
    /// assert_eq!(failed.into_inner().unwrap().to_string(), "x");
    /// ```
    pub fn into_inner(self) -> Option<E> {
        match self {
            Self::Inner(error) => Some(error),
            _ => None,
        }
    }
}

impl<E> From<Rejected> for CallError<E> {
    fn from(rejected: Rejected) -> Self {
        Self::Rejected(rejected)
    }
}

impl<E: fmt::Display> fmt::Display for CallError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Rejected(rejected) => write!(f, "{rejected}"),
            Self::TimedOut(expiry) => write!(f, "{expiry}"),
            Self::Inner(error) => write!(f, "{error}"),
        }
    }
}

/// `CallError` is an error whatever the call's error type (`io::Error`,
/// `anyhow::Error`, a boxed error, [`Failure`](crate::outcome::Failure)), so `?`
/// takes it into `anyhow::Result` or `Box<dyn Error>`. It displays as the
/// call's own error; its `source` is the local rejection, if that is what
/// it was (the call's own error is [`into_inner`](CallError::into_inner)).
impl<E: fmt::Debug + fmt::Display> Error for CallError<E> {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            Self::Rejected(rejected) => Some(rejected),
            Self::TimedOut(_) | Self::Inner(_) => None,
        }
    }
}
