//! The rate on its own, for callers that do not use permits: wait before
//! a call, report its outcome after (`increment`, `decrement`), ask without
//! waiting (`check`), pause a key (`defer`).

use std::hash::Hash;
use std::time::Duration;

use super::ThrottleManager;
use crate::clock::nanos;
use crate::core::{CallTimes, Patience, Request, Scope, Spent};
use crate::error::Rejected;
use crate::outcome::Outcome;
use crate::priority::Priority;
use crate::registry::BorrowedKey;

/// # The rate on its own
impl<K> ThrottleManager<K>
where
    K: Hash + Eq + Send + Sync + 'static,
{
    /// Resolves when one call to `key` may start under the key's current
    /// rate, and counts that call. Applies the rate only; with no rate
    /// configured it resolves at once. [`acquire`](Self::acquire) applies
    /// every control.
    ///
    /// Waiters of one key start in the order they called `wait`, one
    /// interval apart; waiters of other keys are never delayed by it. If the
    /// key is new and the key space is at `max_keys` with no key evictable,
    /// it first waits for room.
    ///
    /// # Errors
    ///
    /// [`RejectReason::Deadline`](crate::error::RejectReason::Deadline) at once, taking nothing, when the call's
    /// token comes at or after its task's deadline
    /// ([`with_deadline`](crate::deadline::with_deadline)), or the deadline has
    /// passed (even with no rate configured). Without a deadline, none:
    /// a cost of 1 always fits the bucket, and `wait` waits as long as it
    /// takes.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe. A `wait` dropped before it resolves takes no token: if no
    /// later call has taken a token since, its token goes back to the bucket;
    /// otherwise its slot stays empty. Waiters already queued keep their
    /// times either way, so a cancelled wait never delays anyone, and it never
    /// cancels anyone else's wait.
    ///
    /// # Panics
    ///
    /// When it has to sleep outside a tokio runtime with the time driver
    /// enabled (as `tokio::time::sleep` does), unless the manager's clock
    /// sleeps some other way ([`ManualClock`](crate::clock::ManualClock) does).
    ///
    /// ```
    /// use portcullis::{RateConfig, ThrottleManager};
    /// use tokio::time::{Duration, Instant};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(4.0)).build()?;
    /// let start = Instant::now();
    /// for _ in 0..5 {
    ///     manager.wait("api").await?;
    /// }
    /// assert_eq!(start.elapsed(), Duration::from_secs(1)); // 4 intervals of 250 ms
    /// # Ok(())
    /// # }
    /// ```
    pub async fn wait<Q: BorrowedKey<K> + ?Sized>(&self, key: &Q) -> Result<(), Rejected> {
        self.key(key).wait(1).await
    }

    /// The work of [`KeyHandle::wait`](super::KeyHandle::wait).
    pub(crate) async fn key_wait_n<Q: BorrowedKey<K> + ?Sized>(
        &self,
        key: &Q,
        cost: u32,
    ) -> Result<(), Rejected> {
        self.rate_alone(key, cost, Patience::Unbounded).await
    }

    /// Takes a token for one call to `key` if one is there now.
    ///
    /// # Errors
    ///
    /// [`Rejected`] when the call may not start yet: it takes nothing, and
    /// says why ([`RejectReason::RateLimited`](crate::error::RejectReason::RateLimited), or
    /// [`RejectReason::KeySpaceFull`](crate::error::RejectReason::KeySpaceFull) for a new key when the key space is
    /// full) and how long until it could ([`Rejected::retry_after`], always
    /// there); or [`RejectReason::Deadline`](crate::error::RejectReason::Deadline) when its task's deadline
    /// ([`with_deadline`](crate::deadline::with_deadline)) has passed. Its priority
    /// is [`Priority::HIGH`], at which the rate-only methods count.
    ///
    /// ```
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(1.0).burst(2)).build()?;
    /// assert!(manager.check("api").is_ok());
    /// assert!(manager.check("api").is_ok()); // the burst
    /// assert!(manager.check("api").is_err());
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn check<Q: BorrowedKey<K> + ?Sized>(&self, key: &Q) -> Result<(), Rejected> {
        self.key(key).check(1)
    }

    /// The work of [`KeyHandle::check`](super::KeyHandle::check).
    pub(crate) fn key_check_n<Q: BorrowedKey<K> + ?Sized>(
        &self,
        key: &Q,
        cost: u32,
    ) -> Result<(), Rejected> {
        let request = Request::new(
            self.core(),
            Priority::HIGH,
            cost,
            Patience::Never,
            Scope::RateOnly,
        );
        if !self.core().controls().rate {
            return self.in_time_without_rate(key, &request);
        }
        match self.core().spend_at_once(&self.lookup(key), &request) {
            Ok(()) => Ok(()),
            Err(rejected) => self
                .refused_unless_shadowed::<Q, Spent>(key, &request, rejected)
                .map(drop),
        }
    }

    /// `wait` and `check`: the driver with the rate alone, at
    /// [`Priority::HIGH`]. Without a rate there is nothing to take, and no
    /// key is made; a deadline already passed is still refused.
    async fn rate_alone<Q: BorrowedKey<K> + ?Sized>(
        &self,
        key: &Q,
        cost: u32,
        patience: Patience,
    ) -> Result<(), Rejected> {
        let request = Request::new(self.core(), Priority::HIGH, cost, patience, Scope::RateOnly);
        if !self.core().controls().rate {
            return self.in_time_without_rate(key, &request);
        }
        self.admit::<Q, Spent>(key, &request).await.map(drop)
    }

    /// A call to a manager without a rate: admitted unless its deadline
    /// has passed.
    fn in_time_without_rate<Q: BorrowedKey<K> + ?Sized>(
        &self,
        key: &Q,
        request: &Request,
    ) -> Result<(), Rejected> {
        let checked = request.in_time(self.core().now(), || 0, Priority::HIGH);
        if let Err(rejected) = &checked {
            self.count_refusal(key, rejected);
        }
        checked
    }

    /// Reports a success: `key`'s rate rises by its increment, up to its
    /// upper bound, and its throttle counts a request and an accept (at the
    /// task's priority, else [`Priority::HIGH`]). For calls made with
    /// [`wait`](Self::wait); a [`Permit`](crate::manager::Permit) reports its own outcome. Returns the new rate, or `None` if the manager has no
    /// rate or the key was not live and the key space had no room for it.
    ///
    /// ```
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::adaptive(10.0).bounds(1.0, 11.0).increase_by(2.0))
    ///     .build()?;
    /// assert_eq!(manager.increment("api"), Some(11.0));
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn increment<Q: BorrowedKey<K> + ?Sized>(&self, key: &Q) -> Option<f64> {
        self.report(key, Outcome::Success)
    }

    /// Reports a capacity failure (a 429, a 503, a timeout): `key`'s rate
    /// falls by its decrement (or factor), down to its lower bound, unless a
    /// decrease happened within the cooldown; its throttle counts a request and
    /// no accept. Returns the new rate, or `None`
    /// if the manager has no rate or the key was not live and the key space
    /// had no room for it.
    ///
    /// ```
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::adaptive(10.0).decrease_factor(0.5))
    ///     .build()?;
    /// assert_eq!(manager.decrement("api"), Some(5.0));
    /// assert_eq!(manager.decrement("api"), Some(5.0)); // within the 500 ms cooldown
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn decrement<Q: BorrowedKey<K> + ?Sized>(&self, key: &Q) -> Option<f64> {
        self.report(key, Outcome::Overloaded)
    }

    /// What `increment` and `decrement` share: the outcome of a call made
    /// after `wait`, counted as a permit's would be.
    fn report<Q: BorrowedKey<K> + ?Sized>(&self, key: &Q, outcome: Outcome) -> Option<f64> {
        let core = self.core();
        let now = core.now();
        let (state, telemetry) = self.key_state(key, now).ok()?;
        let priority = core.outcome_priority();
        let settings = core.settings_of(&state);
        let times = CallTimes::at(now);
        core.record_outcome(&state, settings, priority, times, 1, outcome, &telemetry);
        core.rate_of(&state).map(|_| core.rate_in_force(&state))
    }

    /// The work of [`KeyHandle::rate`](super::KeyHandle::rate).
    pub(crate) fn key_current_rate<Q: BorrowedKey<K> + ?Sized>(&self, key: &Q) -> Option<f64> {
        let state = self.inner.keys.state(key)?;
        let core = self.core();
        core.rate_of(&state).map(|_| core.rate_in_force(&state))
    }

    /// The work of [`KeyHandle::defer`](super::KeyHandle::defer).
    pub(crate) fn key_defer<Q: BorrowedKey<K> + ?Sized>(
        &self,
        key: &Q,
        pause: Duration,
    ) -> Option<Duration> {
        let core = self.core();
        let pause = pause.min(core.max_defer());
        let now = core.now();
        let state = self.entry(key, now).ok()?;
        let settings = core.rate_of(&state)?;
        let until = now.saturating_add(nanos(pause));
        state.rate.learn_from_pause(now, settings);
        state.rate.pause_until(until, settings.burst);
        core.share_pause(&state, pause);
        Some(pause)
    }
}

/// # Names before 0.3
impl<K> ThrottleManager<K>
where
    K: Hash + Eq + Send + Sync + 'static,
{
    /// [`current_rate`](Self::current_rate): `rate` read as the builder's
    /// setter of the same name.
    ///
    /// ```
    /// # #![allow(deprecated)]
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(10.0)).build()?;
    /// manager.increment("api");
    /// assert_eq!(manager.rate("api"), manager.key("api").rate());
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    #[deprecated(since = "0.3.0", note = "a key's rate now is `current_rate(key)`")]
    pub fn rate<Q: BorrowedKey<K> + ?Sized>(&self, key: &Q) -> Option<f64> {
        self.key(key).rate()
    }
}
