//! One time source for every control of a manager.
//!
//! All per-key state stores time as nanoseconds since the clock's origin (a
//! `u64`, enough for 584 years), so the pure maths in [`crate::rate`] works on
//! plain integers and tests can drive it with any numbers they like.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// A future that resolves once a clock has reached a deadline.
///
/// ```
/// use portcullis::clock::{Clock, ManualClock, Sleep};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let sleep: Sleep = clock.sleep_until(Duration::from_secs(1));
/// drop(sleep); // a Sleep is an ordinary boxed future
/// ```
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// Where a [`ThrottleManager`](crate::ThrottleManager) gets the time from, and
/// how it sleeps until a later time.
///
/// - [`QuantaClock`] reads the CPU's time-stamp counter (through governor's
///   quanta clock), cheaper to read than the system's monotonic clock.
/// - [`TokioClock`] follows tokio's clock, so
///   `#[tokio::test(start_paused = true)]` and `tokio::time::advance` drive
///   every control of a manager on virtual time.
/// - [`ManualClock`] is moved only by the test that owns it.
///
/// Unless told otherwise, a manager uses [`QuantaClock`], or [`TokioClock`]
/// when it is built inside a tokio runtime whose time is paused (see
/// [`default_clock`]).
///
/// # Example
///
/// ```
/// use portcullis::clock::{Clock, ManualClock};
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

    /// [`now`](Clock::now) in nanoseconds, saturating. Override it when the
    /// clock counts nanoseconds anyway: it is read once per call.
    fn now_nanos(&self) -> u64 {
        nanos(self.now())
    }

    /// A future that resolves once [`now`](Clock::now) has reached `deadline`.
    fn sleep_until(&self, deadline: Duration) -> Sleep;
}

/// Nanoseconds since a clock's origin: the unit every per-key state stores.
pub(crate) type Nanos = u64;

/// `d` in nanoseconds, saturating at `u64::MAX` (584 years).
pub(crate) fn nanos(d: Duration) -> Nanos {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The time left until `at`, zero once it has passed. Deadlines reach the
/// crate as instants on tokio's clock ([`with_deadline`](crate::deadline::with_deadline),
/// a request's `grpc-timeout`); a call converts its deadline to its
/// manager's clock once, when it asks, through this function, and the edges
/// that pass a deadline on convert it here too: the one place the crate
/// reads tokio's instant.
pub(crate) fn left_until(at: tokio::time::Instant) -> Duration {
    at.saturating_duration_since(tokio::time::Instant::now())
}

/// The instant `left` from now on tokio's clock, as a deadline: `None` (no
/// deadline) when it lies past what an instant can hold, as `Duration::MAX`
/// does.
pub(crate) fn instant_after(left: Duration) -> Option<tokio::time::Instant> {
    tokio::time::Instant::now().checked_add(left)
}

/// The clock a manager uses unless given one: [`TokioClock`] inside a tokio
/// runtime whose time is paused (so tests on virtual time just work), else
/// [`QuantaClock`].
///
/// Paused time is recognised by two consecutive reads of tokio's clock giving
/// the same instant, which real time never does at nanosecond resolution. A
/// platform with a coarser clock may pick [`TokioClock`] in a running
/// runtime too: slower, equally correct. A manager built *before* time is
/// paused (a test fixture made outside the test's runtime, a `static`)
/// keeps [`QuantaClock`], which paused time does not move: its waits take
/// real time, and its first wait says so once as a `tracing` warning. Give
/// such a manager a [`TokioClock`] explicitly.
///
/// ```
/// use portcullis::clock::{Clock, default_clock};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let clock = default_clock(); // inside paused time: a TokioClock
/// let before = clock.now();
/// tokio::time::advance(std::time::Duration::from_secs(3)).await;
/// assert_eq!(clock.now() - before, std::time::Duration::from_secs(3));
/// # }
/// ```
pub fn default_clock() -> Arc<dyn Clock> {
    if paused() {
        Arc::new(TokioClock::new())
    } else {
        Arc::new(QuantaClock::new())
    }
}

/// A shared clock is a clock: a manager built with
/// [`ManagerSettings::clock`](crate::manager::ManagerSettings::clock) of
/// another keeps time with it.
impl Clock for Arc<dyn Clock> {
    fn now(&self) -> Duration {
        (**self).now()
    }

    fn now_nanos(&self) -> u64 {
        (**self).now_nanos()
    }

    fn sleep_until(&self, deadline: Duration) -> Sleep {
        (**self).sleep_until(deadline)
    }
}

/// A fast real-time clock: the CPU's time-stamp counter, calibrated, through
/// governor's [`QuantaClock`](governor::clock::QuantaClock) (the clock
/// governor's own limiters use). Falls back to the monotonic system clock on
/// machines without a stable counter.
///
/// It does not follow tokio's paused time; sleeping uses tokio's timer for
/// the remaining real time, so it needs a tokio runtime with time enabled.
///
/// # Example
///
/// ```
/// use portcullis::clock::{Clock, QuantaClock};
///
/// let clock = QuantaClock::new();
/// let a = clock.now();
/// assert!(clock.now() >= a);
/// ```
#[derive(Debug, Clone)]
pub struct QuantaClock {
    clock: governor::clock::QuantaClock,
    origin: governor::clock::QuantaInstant,
}

impl QuantaClock {
    /// A clock whose origin is now.
    ///
    /// ```
    /// use portcullis::clock::{Clock, QuantaClock};
    ///
    /// let clock = QuantaClock::new();
    /// assert!(clock.now() < std::time::Duration::from_secs(1));
    /// ```
    pub fn new() -> Self {
        use governor::clock::Clock as _;
        let clock = governor::clock::QuantaClock::default();
        let origin = clock.now();
        Self { clock, origin }
    }
}

impl Default for QuantaClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for QuantaClock {
    fn now(&self) -> Duration {
        Duration::from_nanos(self.now_nanos())
    }

    fn now_nanos(&self) -> u64 {
        use governor::clock::{Clock as _, Reference as _};
        self.clock.now().duration_since(self.origin).as_u64()
    }

    fn sleep_until(&self, deadline: Duration) -> Sleep {
        warn_if_paused();
        let remaining = deadline.saturating_sub(self.now());
        Box::pin(tokio::time::sleep(remaining))
    }
}

/// Says once, as a `tracing` warning, that a manager on the real clock
/// sleeps while tokio's time is paused: it was built before the pause (see
/// [`default_clock`]), and paused time does not move it, so its waits take
/// real time. Only a sleep asks, never a healthy call.
fn warn_if_paused() {
    static WARNED: AtomicBool = AtomicBool::new(false);
    warn_once(&WARNED, paused);
}

/// The warning of [`warn_if_paused`], said once for `warned`.
fn warn_once(warned: &AtomicBool, paused: impl FnOnce() -> bool) {
    if warned.load(Ordering::Relaxed) || !paused() {
        return;
    }
    if !warned.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            "portcullis: a manager on the QuantaClock waits while tokio's time is paused; \
             it was built before time was paused, so paused time does not move it: \
             give it `.clock(TokioClock::new())`"
        );
    }
}

/// Whether tokio's time is paused here: two reads of its clock give the
/// same instant, which real time never does at nanosecond resolution.
fn paused() -> bool {
    tokio::runtime::Handle::try_current().is_ok()
        && tokio::time::Instant::now() == tokio::time::Instant::now()
}

/// Tokio's clock (`tokio::time::Instant`): follows paused time, so tests on
/// virtual time need nothing else. The default inside paused tokio time
/// ([`default_clock`]).
///
/// Outside a paused runtime this is the monotonic system clock. Sleeping needs
/// a tokio runtime with the time driver enabled.
///
/// # Example
///
/// ```
/// use portcullis::clock::{Clock, TokioClock};
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
    /// A clock whose origin is now: tokio's `Instant::now()`, paused or not.
    ///
    /// ```
    /// use portcullis::clock::{Clock, TokioClock};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let clock = TokioClock::new();
    /// assert_eq!(clock.now(), std::time::Duration::ZERO); // paused: no time passes by itself
    /// # }
    /// ```
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
/// use portcullis::clock::{Clock, ManualClock};
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
    ///
    /// ```
    /// use portcullis::clock::{Clock, ManualClock};
    ///
    /// assert_eq!(ManualClock::new().now(), std::time::Duration::ZERO);
    /// ```
    pub fn new() -> Self {
        Self {
            time: Arc::new(tokio::sync::watch::Sender::new(Duration::ZERO)),
        }
    }

    /// Moves the clock forward by `by` and wakes every sleeper whose deadline
    /// has come.
    ///
    /// ```
    /// use portcullis::clock::{Clock, ManualClock};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let shared = clock.clone();
    /// clock.advance(Duration::from_millis(5));
    /// assert_eq!(shared.now(), Duration::from_millis(5)); // clones share one time
    /// ```
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outside_paused_time_the_default_is_the_fast_clock() {
        assert!(format!("{:?}", default_clock()).starts_with("QuantaClock"));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let _inside = runtime.enter();
        assert!(format!("{:?}", default_clock()).starts_with("QuantaClock"));
    }

    #[tokio::test(start_paused = true)]
    async fn inside_paused_time_the_default_follows_tokio() {
        let clock = default_clock();
        assert!(format!("{clock:?}").starts_with("TokioClock"));
        tokio::time::advance(Duration::from_secs(7)).await;
        assert_eq!(clock.now(), Duration::from_secs(7));
    }

    #[test]
    fn a_manager_built_before_the_pause_says_so_once_when_it_waits() {
        let warned = AtomicBool::new(false);
        let ((), said) = crate::test_warnings::warnings_of(|| {
            warn_once(&warned, || false);
            warn_once(&warned, || true);
            warn_once(&warned, || true);
        });
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(said[0].contains("TokioClock::new()"), "{said:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn quanta_sleeps_for_the_remaining_real_time() {
        // Paused tokio time auto-advances through the sleep: what it slept
        // is what QuantaClock asked for, the time left until the deadline.
        // The real time that passes before the sleep reads the clock (tiny,
        // but unbounded on a loaded machine) is measured, not guessed.
        let clock = QuantaClock::new();
        let start = tokio::time::Instant::now();
        let asked_at = clock.now();
        let sleep = clock.sleep_until(asked_at + Duration::from_secs(2));
        let real_before_sleep = clock.now() - asked_at;
        sleep.await;
        let slept = start.elapsed();
        assert!(slept <= Duration::from_secs(2), "slept {slept:?}");
        assert!(
            slept >= Duration::from_secs(2) - real_before_sleep,
            "slept {slept:?}, {real_before_sleep:?} of real time had passed"
        );
    }
}
