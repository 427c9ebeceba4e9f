//! The right to make one call, and how its outcome is reported.

use std::fmt;
use std::hash::Hash;

use crate::Priority;
use crate::clock::Nanos;
use crate::key::KeyState;
use crate::manager::ThrottleManager;
use crate::metrics;

/// The span of a permit without telemetry.
static NO_SPAN: tracing::Span = tracing::Span::none();

/// How a call ended, as far as the controls of its key care.
///
/// # Example
///
/// ```
/// use portcullis::{Outcome, Priority, ThrottleConfig, ThrottleManager};
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
    /// counts it as accepted, so it never causes shedding; the rate is left
    /// alone.
    Neutral,
}

/// The right to make one call to a key, from
/// [`acquire`](ThrottleManager::acquire) or
/// [`try_acquire`](ThrottleManager::try_acquire).
///
/// Report the call's outcome with [`success`](Permit::success),
/// [`failure`](Permit::failure) or [`report`](Permit::report). A permit
/// dropped without a report (the caller gave up, a panic unwound through it)
/// counts as [`Outcome::Neutral`]: it never causes shedding and leaves the
/// rate alone. Either way the permit's bulkhead slot is freed, and goes
/// straight to the head of the key's queue if anyone waits: also when a
/// panic unwinds through the permit.
///
/// The permit borrows its manager, like tokio's `SemaphorePermit`; to move
/// one into a spawned task, move a clone of the manager in with it.
///
/// # Example
///
/// ```
/// use portcullis::{Priority, ThrottleConfig, ThrottleManager};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let manager = ThrottleManager::<String>::builder().throttle(ThrottleConfig::new()).build()?;
/// let task = tokio::spawn({
///     let manager = manager.clone();
///     async move {
///         let permit = manager.acquire("api", Priority::LOW).await?;
///         // ... the call ...
///         permit.success();
///         Ok::<(), portcullis::Rejected>(())
///     }
/// });
/// task.await??;
/// # Ok(())
/// # }
/// ```
#[must_use = "a permit is released when dropped; report the call's outcome with success() or failure()"]
pub struct Permit<'a, K>
where
    K: Hash + Eq + fmt::Debug + Send + Sync + 'static,
{
    manager: &'a ThrottleManager<K>,
    state: triomphe::Arc<KeyState>,
    priority: Priority,
    times: CallTimes,
    /// Whether the call holds a slot of the key's bulkhead.
    holds_slot: bool,
    reported: bool,
    /// What names the key in events and metrics; allocated only when debug
    /// events or per-key metrics are on, so a plain permit stays small.
    telemetry: Option<Box<Telemetry>>,
}

/// When a permitted call was scheduled by the rate and when it was let go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CallTimes {
    /// When the call took its place in the rate's queue: its outcome moves
    /// the rate only if that was after the rate's last decrease.
    pub(crate) scheduled: Nanos,
    /// When the call was admitted: its outcome counts in the throttle's
    /// bucket of that time.
    pub(crate) started: Nanos,
}

impl CallTimes {
    /// A call scheduled and admitted at the same moment.
    pub(crate) fn at(now: Nanos) -> Self {
        Self {
            scheduled: now,
            started: now,
        }
    }
}

/// How a permit names its key outside: a span for events, a label for
/// metrics.
#[derive(Debug)]
struct Telemetry {
    span: tracing::Span,
    label: Option<String>,
}

impl<'a, K> Permit<'a, K>
where
    K: Hash + Eq + fmt::Debug + Send + Sync + 'static,
{
    #[inline]
    pub(crate) fn new(
        manager: &'a ThrottleManager<K>,
        state: triomphe::Arc<KeyState>,
        priority: Priority,
        times: CallTimes,
        holds_slot: bool,
        span: Option<tracing::Span>,
    ) -> Self {
        Self {
            manager,
            state,
            priority,
            times,
            holds_slot,
            reported: false,
            telemetry: span.map(|span| Box::new(Telemetry { span, label: None })),
        }
    }

    /// Counted in the metrics: takes the key's label, and counts its slot.
    #[inline]
    pub(crate) fn counted(mut self, label: Option<String>) -> Self {
        if self.holds_slot {
            metrics::active(label.as_deref(), 1.0);
        }
        if label.is_some() {
            let telemetry = self.telemetry.get_or_insert_with(|| {
                Box::new(Telemetry {
                    span: tracing::Span::none(),
                    label: None,
                })
            });
            telemetry.label = label;
        }
        self
    }

    fn label(&self) -> Option<&str> {
        self.telemetry.as_ref()?.label.as_deref()
    }

    /// The call succeeded: [`Outcome::Success`].
    ///
    /// ```
    /// # use portcullis::*;
    /// # let manager = ThrottleManager::<String>::builder().rate(RateConfig::new(10.0).increment(1.0)).clock(ManualClock::new()).build()?;
    /// manager.try_acquire("api", Priority::HIGH).unwrap().success();
    /// assert_eq!(manager.rate("api"), Some(11.0));
    /// # Ok::<(), ConfigError>(())
    /// ```
    #[inline]
    pub fn success(self) {
        self.report(Outcome::Success);
    }

    /// The backend was over capacity: [`Outcome::Overloaded`].
    ///
    /// ```
    /// # use portcullis::*;
    /// # let manager = ThrottleManager::<String>::builder().rate(RateConfig::new(10.0).decrement(1.0)).clock(ManualClock::new()).build()?;
    /// manager.try_acquire("api", Priority::HIGH).unwrap().failure();
    /// assert_eq!(manager.rate("api"), Some(9.0));
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn failure(self) {
        self.report(Outcome::Overloaded);
    }

    /// Reports how the call ended.
    ///
    /// ```
    /// # use portcullis::*;
    /// # let manager = ThrottleManager::<String>::builder().rate(RateConfig::new(10.0)).clock(ManualClock::new()).build()?;
    /// manager.try_acquire("api", Priority::HIGH).unwrap().report(Outcome::Neutral);
    /// assert_eq!(manager.rate("api"), Some(10.0));
    /// # Ok::<(), ConfigError>(())
    /// ```
    #[inline]
    pub fn report(mut self, outcome: Outcome) {
        self.finish(outcome);
    }

    /// Counts the outcome, then frees the bulkhead slot (which may hand it to
    /// the head of the queue).
    fn finish(&mut self, outcome: Outcome) {
        self.reported = true;
        self.manager.record_outcome(
            &self.state,
            self.priority,
            self.times,
            outcome,
            self.telemetry
                .as_ref()
                .map_or(&NO_SPAN, |telemetry| &telemetry.span),
            self.label(),
        );
        if let (true, Some(bulkhead)) = (self.holds_slot, self.state.bulkhead()) {
            self.holds_slot = false;
            bulkhead.release();
            metrics::active(self.label(), -1.0);
        }
    }

    /// The priority the call was admitted at (after the task-local priority
    /// and the out-of-range policy).
    ///
    /// ```
    /// # use portcullis::*;
    /// # let manager = ThrottleManager::<String>::builder().throttle(ThrottleConfig::new()).build()?;
    /// let permit = manager.try_acquire("api", Priority::new(9)).unwrap();
    /// assert_eq!(permit.priority(), Priority::LOW); // clamped to the lowest of 4 levels
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn priority(&self) -> Priority {
        self.priority
    }
}

impl<K> Drop for Permit<'_, K>
where
    K: Hash + Eq + fmt::Debug + Send + Sync + 'static,
{
    fn drop(&mut self) {
        if !self.reported {
            self.finish(Outcome::Neutral);
        }
    }
}

impl<K> fmt::Debug for Permit<'_, K>
where
    K: Hash + Eq + fmt::Debug + Send + Sync + 'static,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit")
            .field("priority", &self.priority)
            .field("reported", &self.reported)
            .finish_non_exhaustive()
    }
}
