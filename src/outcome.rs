//! How a call ended, and how its error is judged: [`Outcome`], the
//! [`overloaded`] mark, and the classifiers.
//!
//! A leaf: it knows nothing of keys, permits or the manager, so everything
//! that names an outcome can use it.

use std::error::Error;
use std::fmt;

/// How a call ended, as far as the controls of its key care.
///
/// # Example
///
/// ```
/// use portcullis::outcome::Outcome;
/// use portcullis::{Priority, ThrottleConfig, ThrottleManager};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let manager = ThrottleManager::<String>::builder().throttle(ThrottleConfig::new()).build()?;
/// let permit = manager.acquire("api", Priority::MEDIUM).await?;
/// let status = 404; // ... the call ...
/// permit.report(match status {
///     200..=299 => Outcome::Success,
///     429 | 503 => Outcome::Overloaded,
///     _ => Outcome::Neutral, // the backend answered; its load is not the problem
/// });
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The backend accepted the call: the throttle counts an accept, the
    /// rate rises by its increment.
    Success,
    /// The backend was over capacity (429, 503, a timeout, a refused
    /// connection): the throttle counts no accept, the rate falls.
    Overloaded,
    /// The call ended in a way that says nothing about the backend's load (a
    /// 404, bad input, an auth error, the caller gave up): the throttle
    /// counts it as a request and an accept, so it never causes shedding;
    /// the rate is left alone.
    Neutral,
}

/// An error from inside a call, boxed, that knows whether it was marked as a
/// capacity failure with [`overloaded`].
///
/// It is what `?` turns any error into inside a [`call`] closure whose
/// failures are marked with [`overloaded`], so one closure can return both.
/// Like `anyhow::Error`, it does not implement `std::error::Error` itself
/// (that would clash with converting from every error);
/// [`CallError`](crate::CallError) of it does, so `?` on a `call` still
/// reaches a `Box<dyn Error>`.
///
/// [`call`]: crate::ThrottleManager::call
///
/// # Example
///
/// ```
/// use portcullis::outcome::Failure;
/// use portcullis::overloaded;
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
    /// let failure: portcullis::outcome::Failure = std::io::Error::other("x").into();
    /// assert!(failure.downcast_ref::<std::io::Error>().is_some());
    /// ```
    pub fn downcast_ref<E: Error + 'static>(&self) -> Option<&E> {
        self.error.downcast_ref()
    }

    /// The error inside.
    ///
    /// ```
    /// let failure: portcullis::outcome::Failure = std::io::Error::other("x").into();
    /// assert_eq!(failure.into_inner().to_string(), "x");
    /// ```
    pub fn into_inner(self) -> Box<dyn Error + Send + Sync + 'static> {
        self.error
    }

    /// The error inside, as a `dyn Error`.
    ///
    /// ```
    /// let failure: portcullis::outcome::Failure = std::io::Error::other("x").into();
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

/// How the error type of a [`call`](crate::ThrottleManager::call) is judged:
/// as a `dyn Error` for the classifier, and whether it was marked
/// [`overloaded`].
///
/// Implemented for every `std::error::Error`, for [`Failure`], and for the
/// error types that carry a `dyn Error` without being one themselves:
/// `anyhow::Error`, `Box<dyn Error + Send + Sync>` (anything that is
/// `AsRef<dyn Error + Send + Sync>`). `Via` tells those impls apart; it is
/// inferred, never written. Sealed: the three kinds above are all there is.
///
/// ```
/// use portcullis::{Priority, RateConfig, ThrottleManager};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(10.0)).build()?;
/// let text = manager
///     .call("disk", Priority::HIGH, || async {
///         let text = std::fs::read_to_string("/definitely/not/here").unwrap_or_default();
///         Ok::<_, Box<dyn std::error::Error + Send + Sync>>(text)
///     })
///     .await?;
/// # let _ = text;
/// # Ok(())
/// # }
/// ```
pub trait CallFailure<Via>: sealed::SealedFailure<Via> {
    /// The error as a `dyn Error`, for the classifier.
    fn as_dyn_error(&self) -> &(dyn Error + 'static);

    /// Whether it was marked as a capacity failure whatever the classifier
    /// says.
    fn marked_overloaded(&self) -> bool {
        false
    }
}

/// The `Via` markers of [`CallFailure`]: public types in a private module,
/// so nobody outside can name them or add an impl.
mod sealed {
    use std::error::Error;

    pub trait SealedFailure<Via> {}

    /// Through `std::error::Error`.
    #[derive(Debug)]
    pub struct IsError;
    /// Through `AsRef<dyn Error + Send + Sync>` (anyhow, boxed errors).
    #[derive(Debug)]
    pub struct HoldsError;
    /// [`Failure`](super::Failure) itself.
    #[derive(Debug)]
    pub struct Marked;

    impl<E: Error + 'static> SealedFailure<IsError> for E {}
    impl<E: AsRef<dyn Error + Send + Sync + 'static>> SealedFailure<HoldsError> for E {}
    impl SealedFailure<Marked> for super::Failure {}
}

impl<E: Error + 'static> CallFailure<sealed::IsError> for E {
    fn as_dyn_error(&self) -> &(dyn Error + 'static) {
        self
    }
}

impl<E: AsRef<dyn Error + Send + Sync + 'static>> CallFailure<sealed::HoldsError> for E {
    fn as_dyn_error(&self) -> &(dyn Error + 'static) {
        self.as_ref()
    }
}

impl CallFailure<sealed::Marked> for Failure {
    fn as_dyn_error(&self) -> &(dyn Error + 'static) {
        &*self.error
    }

    fn marked_overloaded(&self) -> bool {
        self.overloaded
    }
}

/// Judges errors that were not marked with [`overloaded`].
pub(crate) type Classifier = dyn Fn(&(dyn Error + 'static)) -> Outcome + Send + Sync;

/// The outcome of a call that returned `error`.
pub(crate) fn outcome_of<E: CallFailure<Via>, Via>(
    error: &E,
    classifier: Option<&Classifier>,
) -> Outcome {
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
/// [`ThrottleManagerBuilder::classifier`]: crate::builder::ThrottleManagerBuilder::classifier
///
/// ```
/// use portcullis::outcome::transport_overload;
/// use portcullis::outcome::Outcome;
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
