//! How important a call is, whom it is for ([`Flow`]), and what happens to
//! priorities out of range.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};

mod flow;
mod options;

use crate::sync::CountedScope;

pub use flow::{Flow, with_flow};
pub use options::{AdmitOptions, CallOptions};

/// How important a call is: 0 is the most important.
///
/// Under overload, the throttle sheds the least important calls first: a
/// priority's rejection probability counts the failures of every more
/// important priority as its own. A manager has
/// [`priority_levels`](crate::builder::ThrottleManagerBuilder::priority_levels)
/// levels (default 4, the constants below); what happens to a priority
/// beyond them is the manager's [`OutOfRange`] policy.
///
/// # Example
///
/// ```
/// use portcullis::Priority;
///
/// assert!(Priority::HIGH < Priority::LOW); // lower number, more important
/// assert_eq!(Priority::new(2), Priority::MEDIUM);
/// assert_eq!(Priority::LOW.level(), 3);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Priority(u8);

impl Priority {
    /// Level 0: calls that must get through (user-facing, interactive).
    pub const HIGH: Self = Self(0);
    /// Level 1: between [`HIGH`](Self::HIGH) and [`MEDIUM`](Self::MEDIUM).
    pub const MEDIUM_HIGH: Self = Self(1);
    /// Level 1, as [`MEDIUM_HIGH`](Self::MEDIUM_HIGH): a name that read as
    /// above `HIGH`.
    #[deprecated(
        since = "0.3.0",
        note = "use Priority::MEDIUM_HIGH: level 1 is below HIGH (level 0)"
    )]
    pub const IMPORTANT: Self = Self(1);
    /// Level 2.
    pub const MEDIUM: Self = Self(2);
    /// Level 3: calls that can wait or be dropped (prefetch, batch work).
    pub const LOW: Self = Self(3);

    /// A priority of `level`; 0 is the most important.
    ///
    /// ```
    /// assert_eq!(portcullis::Priority::new(0), portcullis::Priority::HIGH);
    /// ```
    pub const fn new(level: u8) -> Self {
        Self(level)
    }

    /// The level: 0 is the most important.
    ///
    /// ```
    /// assert_eq!(portcullis::Priority::MEDIUM_HIGH.level(), 1);
    /// ```
    pub const fn level(self) -> u8 {
        self.0
    }

    /// The priority of the current task, if it runs inside
    /// [`with_priority`].
    ///
    /// ```
    /// use portcullis::priority::with_priority;
    /// use portcullis::Priority;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// assert_eq!(Priority::current(), None);
    /// with_priority(Priority::HIGH, async {
    ///     assert_eq!(Priority::current(), Some(Priority::HIGH));
    /// })
    /// .await;
    /// # }
    /// ```
    #[inline]
    pub fn current() -> Option<Self> {
        if PRIORITY_SCOPES.load(Ordering::Relaxed) == 0 {
            return None;
        }
        TASK_PRIORITY.try_with(|priority| *priority).ok()
    }
}

impl fmt::Display for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "priority {}", self.0)
    }
}

tokio::task_local! {
    static TASK_PRIORITY: Priority;
}

/// How many [`with_priority`] scopes are alive in the process (see
/// `CountedScope`).
static PRIORITY_SCOPES: AtomicUsize = AtomicUsize::new(0);

/// Runs `future` with `priority` as its task's priority, which
/// **overrides** the priority passed at each call inside it: every
/// [`acquire`](crate::ThrottleManager::acquire) or
/// [`call`](crate::ThrottleManager::call) inside it, however deep, uses
/// `priority` instead of the one passed at the call site (the request's
/// importance, set once at its edge, outranks what a library deep inside
/// guessed). Rust's
/// stand-in for Go's `context.WithPriority`: a request's priority follows it
/// through every throttle it meets. The innermost `with_priority` wins.
///
/// The priority belongs to the future, not the thread: tasks spawned inside
/// do not inherit it (wrap them too).
///
/// # Example
///
/// ```
/// use portcullis::priority::with_priority;
/// use portcullis::{Priority, ThrottleConfig, ThrottleManager};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let manager = ThrottleManager::<String>::builder().throttle(ThrottleConfig::new()).build()?;
/// // Deep inside a handler, a library call asks for LOW...
/// async fn fetch_profile(manager: &ThrottleManager<String>) -> Result<(), portcullis::Rejected> {
///     let permit = manager.acquire("profiles-db", Priority::LOW).await?;
///     assert_eq!(permit.priority(), Priority::HIGH); // ...but the request is HIGH
///     permit.success();
///     Ok(())
/// }
/// with_priority(Priority::HIGH, fetch_profile(&manager)).await?;
/// # Ok(())
/// # }
/// ```
pub async fn with_priority<F: Future>(priority: Priority, future: F) -> F::Output {
    let _scope = CountedScope::enter(&PRIORITY_SCOPES);
    TASK_PRIORITY.scope(priority, future).await
}

/// What a manager does with a priority beyond its levels.
///
/// # Example
///
/// ```
/// use portcullis::priority::OutOfRange;
/// use portcullis::error::RejectReason;
/// use portcullis::{Priority, ThrottleConfig, ThrottleManager};
///
/// let manager = ThrottleManager::<String>::builder()
///     .throttle(ThrottleConfig::new())
///     .priority_levels(2)
///     .out_of_range(OutOfRange::Reject)
///     .build()?;
/// let rejected = manager.try_acquire("api", Priority::LOW).unwrap_err();
/// assert_eq!(rejected.reason(), RejectReason::InvalidPriority);
/// # Ok::<(), portcullis::error::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OutOfRange {
    /// Treat it as the least important level (the default).
    #[default]
    ClampToLowest,
    /// Reject the call with [`RejectReason::InvalidPriority`](crate::error::RejectReason::InvalidPriority).
    Reject,
    /// Panic, naming the priority and the number of levels: for programs
    /// that treat a bad priority as a bug to find in testing.
    Panic,
}

/// The manager's priority levels and policy.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Priorities {
    pub(crate) levels: u8,
    pub(crate) out_of_range: OutOfRange,
}

impl Priorities {
    /// `priority`, or the least important level if it is beyond the levels,
    /// whatever the policy: for counting and introspection, never for
    /// admitting a call.
    pub(crate) fn clamp(&self, priority: Priority) -> Priority {
        Priority(priority.0.min(self.levels - 1))
    }

    /// The level to use for a call made with `asked`: the task's priority if
    /// set, else `asked`; out of range per the policy. `None`: reject.
    ///
    /// # Panics
    ///
    /// Under [`OutOfRange::Panic`], for a priority out of range.
    #[inline]
    pub(crate) fn resolve(&self, asked: Priority) -> Option<Priority> {
        let priority = Priority::current().unwrap_or(asked);
        if priority.0 < self.levels {
            return Some(priority);
        }
        self.out_of_range(priority)
    }

    #[cold]
    fn out_of_range(&self, priority: Priority) -> Option<Priority> {
        match self.out_of_range {
            OutOfRange::ClampToLowest => Some(Priority(self.levels - 1)),
            OutOfRange::Reject => None,
            OutOfRange::Panic => panic!(
                "{priority} is out of range: this manager has {} priority levels (0 to {})",
                self.levels,
                self.levels - 1
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn levels(out_of_range: OutOfRange) -> Priorities {
        Priorities {
            levels: 3,
            out_of_range,
        }
    }

    #[test]
    fn in_range_priorities_pass_unchanged() {
        assert_eq!(
            levels(OutOfRange::Reject).resolve(Priority::MEDIUM),
            Some(Priority::MEDIUM)
        );
    }

    #[test]
    fn out_of_range_follows_the_policy() {
        assert_eq!(
            levels(OutOfRange::ClampToLowest).resolve(Priority::new(200)),
            Some(Priority::MEDIUM)
        );
        assert_eq!(levels(OutOfRange::Reject).resolve(Priority::LOW), None);
    }

    #[test]
    #[should_panic(
        expected = "priority 3 is out of range: this manager has 3 priority levels (0 to 2)"
    )]
    fn the_panic_policy_names_the_priority() {
        levels(OutOfRange::Panic).resolve(Priority::LOW);
    }

    #[tokio::test]
    async fn the_task_priority_overrides_the_argument_and_nests() {
        let p = levels(OutOfRange::Reject);
        with_priority(Priority::MEDIUM_HIGH, async {
            assert_eq!(p.resolve(Priority::MEDIUM), Some(Priority::MEDIUM_HIGH));
            with_priority(Priority::HIGH, async {
                assert_eq!(p.resolve(Priority::MEDIUM), Some(Priority::HIGH));
            })
            .await;
            assert_eq!(p.resolve(Priority::MEDIUM), Some(Priority::MEDIUM_HIGH));
        })
        .await;
        assert_eq!(p.resolve(Priority::MEDIUM), Some(Priority::MEDIUM));
    }
}
