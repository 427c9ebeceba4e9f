//! The whole protocol around one call: acquire through every control, run,
//! classify the outcome, report it.

use std::error::Error;
use std::fmt;

use crate::error::Rejected;
use crate::permit::Outcome;

/// An error from inside a call, boxed, that knows whether it was marked as a
/// capacity failure with [`overloaded`].
///
/// It is what `?` turns any error into inside a [`call`] closure whose
/// failures are marked with [`overloaded`], so one closure can return both.
/// Like `anyhow::Error`, it does not implement `std::error::Error` itself
/// (that would clash with converting from every error); [`CallError`] of it
/// does, so `?` on a `call` still reaches a `Box<dyn Error>`.
///
/// [`call`]: crate::ThrottleManager::call
///
/// # Example
///
/// ```
/// use portcullis::{Failure, overloaded};
///
/// let marked: Failure = overloaded(std::io::Error::other("503 Service Unavailable"));
/// assert!(marked.is_overloaded());
/// let plain: Failure = std::io::Error::other("404 Not Found").into();
/// assert!(!plain.is_overloaded());
/// assert_eq!(plain.to_string(), "404 Not Found");
/// ```
pub struct Failure {
    error: Box<dyn Error + Send + Sync + 'static>,
    overloaded: bool,
}

/// Marks `error` as a capacity failure (a 429, a 503, a timeout, a refused
/// connection), whatever the manager's classifier says: the call's key
/// slows down and its throttle counts no accept.
///
/// ```
/// use portcullis::overloaded;
///
/// #[derive(Debug)]
/// struct TooManyRequests;
/// impl std::fmt::Display for TooManyRequests {
///     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
///         f.write_str("429 Too Many Requests")
///     }
/// }
/// impl std::error::Error for TooManyRequests {}
///
/// let failure = overloaded(TooManyRequests);
/// assert!(failure.is_overloaded());
/// assert!(failure.downcast_ref::<TooManyRequests>().is_some());
/// ```
pub fn overloaded(error: impl Into<Box<dyn Error + Send + Sync + 'static>>) -> Failure {
    Failure {
        error: error.into(),
        overloaded: true,
    }
}

impl Failure {
    /// Whether it was marked with [`overloaded`].
    ///
    /// ```
    /// assert!(portcullis::overloaded(std::io::Error::other("busy")).is_overloaded());
    /// ```
    pub fn is_overloaded(&self) -> bool {
        self.overloaded
    }

    /// The error inside, if it is an `E`.
    ///
    /// ```
    /// let failure: portcullis::Failure = std::io::Error::other("x").into();
    /// assert!(failure.downcast_ref::<std::io::Error>().is_some());
    /// ```
    pub fn downcast_ref<E: Error + 'static>(&self) -> Option<&E> {
        self.error.downcast_ref()
    }

    /// The error inside.
    ///
    /// ```
    /// let failure: portcullis::Failure = std::io::Error::other("x").into();
    /// assert_eq!(failure.into_inner().to_string(), "x");
    /// ```
    pub fn into_inner(self) -> Box<dyn Error + Send + Sync + 'static> {
        self.error
    }

    /// The error inside, as a `dyn Error`.
    ///
    /// ```
    /// let failure: portcullis::Failure = std::io::Error::other("x").into();
    /// assert!(failure.as_error().source().is_none());
    /// ```
    pub fn as_error(&self) -> &(dyn Error + Send + Sync + 'static) {
        &*self.error
    }
}

impl<E: Error + Send + Sync + 'static> From<E> for Failure {
    fn from(error: E) -> Self {
        Self {
            error: Box::new(error),
            overloaded: false,
        }
    }
}

impl fmt::Debug for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Failure")
            .field("error", &self.error)
            .field("overloaded", &self.overloaded)
            .finish()
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.error, f)
    }
}

/// How a call's error is judged. Implemented for [`Failure`] (marked or
/// not) and for every `std::error::Error`; the manager's classifier decides
/// what is not marked.
pub trait CallFailure {
    /// The error as a `dyn Error`, for the classifier.
    fn as_dyn_error(&self) -> &(dyn Error + 'static);

    /// Whether it was marked as a capacity failure whatever the classifier
    /// says.
    fn marked_overloaded(&self) -> bool {
        false
    }
}

impl CallFailure for Failure {
    fn as_dyn_error(&self) -> &(dyn Error + 'static) {
        &*self.error
    }

    fn marked_overloaded(&self) -> bool {
        self.overloaded
    }
}

impl<E: Error + 'static> CallFailure for E {
    fn as_dyn_error(&self) -> &(dyn Error + 'static) {
        self
    }
}

/// Why a [`call`](crate::ThrottleManager::call) did not return a value.
///
/// # Example
///
/// ```
/// use portcullis::{CallError, RejectReason};
///
/// fn describe(error: &CallError<std::io::Error>) -> String {
///     match error {
///         CallError::Rejected(rejected) if rejected.reason() == RejectReason::Throttled => "shed locally".into(),
///         CallError::Rejected(rejected) => format!("not sent: {rejected}"),
///         CallError::TimedOut(after) => format!("gave up after {after:?}"),
///         CallError::Inner(error) => format!("the call failed: {error}"),
///     }
/// }
/// ```
#[derive(Debug)]
pub enum CallError<E> {
    /// Refused locally by a control; the call was never made.
    Rejected(Rejected),
    /// The call ran past its timeout and was dropped (counted as a capacity
    /// failure).
    TimedOut(std::time::Duration),
    /// The call ran and returned this error.
    Inner(E),
}

impl<E> CallError<E> {
    /// True when the call never left this process: rejected locally, as
    /// Bulwark's fallback is told (`local`).
    ///
    /// ```
    /// use portcullis::CallError;
    /// let failed: CallError<std::io::Error> = CallError::Inner(std::io::Error::other("x"));
    /// assert!(!failed.is_local());
    /// ```
    pub fn is_local(&self) -> bool {
        matches!(self, Self::Rejected(_))
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
            Self::TimedOut(after) => write!(f, "call timed out after {after:?}"),
            Self::Inner(error) => write!(f, "{error}"),
        }
    }
}

impl<E: Error + 'static> Error for CallError<E> {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            Self::Rejected(rejected) => Some(rejected),
            Self::TimedOut(_) => None,
            Self::Inner(error) => Some(error),
        }
    }
}

impl Error for CallError<Failure> {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            Self::Rejected(rejected) => Some(rejected),
            Self::TimedOut(_) => None,
            Self::Inner(failure) => Some(failure.as_dyn_error()),
        }
    }
}

/// Judges errors that were not marked with [`overloaded`].
pub(crate) type Classifier = dyn Fn(&(dyn Error + 'static)) -> Outcome + Send + Sync;

/// The outcome of a call that returned `error`.
pub(crate) fn outcome_of<E: CallFailure>(error: &E, classifier: Option<&Classifier>) -> Outcome {
    if error.marked_overloaded() {
        return Outcome::Overloaded;
    }
    match classifier {
        Some(classify) => classify(error.as_dyn_error()),
        None => Outcome::Neutral,
    }
}

/// A classifier for errors of the transport that signal overload: somewhere
/// in the error's `source()` chain, an `std::io::Error` of kind
/// `TimedOut`, `ConnectionRefused`, `ConnectionReset` or
/// `ConnectionAborted`, or tokio's `Elapsed`. Everything else is neutral.
///
/// reqwest's connect errors carry the `io::Error` in their chain; for its
/// own timeouts, check `reqwest::Error::is_timeout()` in a classifier of
/// your own (see [`ThrottleManagerBuilder::classifier`]).
///
/// [`ThrottleManagerBuilder::classifier`]: crate::ThrottleManagerBuilder::classifier
///
/// ```
/// use portcullis::{Outcome, transport_overload};
/// use std::io::{Error, ErrorKind};
///
/// assert_eq!(transport_overload(&Error::from(ErrorKind::ConnectionRefused)), Outcome::Overloaded);
/// assert_eq!(transport_overload(&Error::from(ErrorKind::NotFound)), Outcome::Neutral);
/// ```
pub fn transport_overload(error: &(dyn Error + 'static)) -> Outcome {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset, TimedOut};
    let mut next = Some(error);
    while let Some(error) = next {
        if let Some(io) = error.downcast_ref::<std::io::Error>() {
            if matches!(
                io.kind(),
                TimedOut | ConnectionRefused | ConnectionReset | ConnectionAborted
            ) {
                return Outcome::Overloaded;
            }
        }
        if error.is::<tokio::time::error::Elapsed>() {
            return Outcome::Overloaded;
        }
        next = error.source();
    }
    Outcome::Neutral
}
