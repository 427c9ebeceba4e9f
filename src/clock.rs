//! One time source for every control of a manager.
//!
//! All per-key state stores time as nanoseconds since the clock's origin (a
//! `u64`, enough for 584 years), so the pure maths in [`crate::rate`] works on
//! plain integers and tests can drive it with any numbers they like.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

/// A future that resolves once a clock has reached a deadline.
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// Where a [`ThrottleManager`](crate::ThrottleManager) gets the time from, and
/// how it sleeps until a later time.
///
/// The default, [`TokioClock`], follows tokio's clock, so
/// `#[tokio::test(start_paused = true)]` and `tokio::time::advance` drive every
/// control of a manager on virtual time. [`ManualClock`] is moved only by the
/// test that owns it.
///
/// # Example
///
/// ```
/// use portcullis::{Clock, ManualClock};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// assert_eq!(clock.now(), Duration::ZERO);
/// clock.advance(Duration::from_millis(250));
/// assert_eq!(clock.now(), Duration::from_millis(250));
/// ```
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// Time elapsed since this clock's origin. Never goes backwards.
    fn now(&self) -> Duration;

    /// A future that resolves once [`now`](Clock::now) has reached `deadline`.
    fn sleep_until(&self, deadline: Duration) -> Sleep;
}

/// Nanoseconds since a clock's origin: the unit every per-key state stores.
pub(crate) type Nanos = u64;

/// `d` in nanoseconds, saturating at `u64::MAX` (584 years).
pub(crate) fn nanos(d: Duration) -> Nanos {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The time of `clock` in nanoseconds since its origin.
pub(crate) fn now_nanos(clock: &dyn Clock) -> Nanos {
    nanos(clock.now())
}

/// The default clock: tokio's `Instant`, so paused time in tests is respected.
///
/// Outside a paused runtime this is the monotonic system clock. Sleeping needs
/// a tokio runtime with the time driver enabled.
///
/// # Example
///
/// ```
/// use portcullis::{Clock, TokioClock};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let clock = TokioClock::new();
/// let before = clock.now();
/// tokio::time::advance(std::time::Duration::from_secs(1)).await;
/// assert_eq!(clock.now() - before, std::time::Duration::from_secs(1));
/// # }
/// ```
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    origin: tokio::time::Instant,
}

impl TokioClock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        Self {
            origin: tokio::time::Instant::now(),
        }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for TokioClock {
    fn now(&self) -> Duration {
        tokio::time::Instant::now().saturating_duration_since(self.origin)
    }

    fn sleep_until(&self, deadline: Duration) -> Sleep {
        // A deadline past what `Instant` can hold is as good as never.
        const FAR_FUTURE: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
        let at = self
            .origin
            .checked_add(deadline)
            .unwrap_or_else(|| tokio::time::Instant::now() + FAR_FUTURE);
        Box::pin(tokio::time::sleep_until(at))
    }
}

/// A clock that moves only when told to: for deterministic tests.
///
/// Clones share one time. Sleepers wake when [`advance`](ManualClock::advance)
/// reaches their deadline; no tokio timer is involved.
///
/// # Example
///
/// ```
/// use portcullis::{Clock, ManualClock};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let clock = ManualClock::new();
/// let sleeper = tokio::spawn(clock.sleep_until(Duration::from_secs(5)));
/// clock.advance(Duration::from_secs(5));
/// sleeper.await.unwrap(); // woken by the advance
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct ManualClock {
    time: Arc<tokio::sync::watch::Sender<Duration>>,
}

impl ManualClock {
    /// A clock standing at zero.
    pub fn new() -> Self {
        Self {
            time: Arc::new(tokio::sync::watch::Sender::new(Duration::ZERO)),
        }
    }

    /// Moves the clock forward by `by` and wakes every sleeper whose deadline
    /// has come.
    pub fn advance(&self, by: Duration) {
        self.time.send_modify(|now| *now = now.saturating_add(by));
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Duration {
        *self.time.borrow()
    }

    fn sleep_until(&self, deadline: Duration) -> Sleep {
        let mut time = self.time.subscribe();
        Box::pin(async move {
            // The sender lives as long as this clock's clones; if every clone is
            // gone, time can never reach the deadline, so wait forever.
            if time.wait_for(|now| *now >= deadline).await.is_err() {
                std::future::pending::<()>().await;
            }
        })
    }
}
