//! The rate on its own, for callers that do not use permits: wait before
//! a call, report its outcome after (`increment`, `decrement`), ask without
//! waiting (`check`), pause a key (`defer`).

use std::borrow::Borrow;
use std::hash::Hash;
use std::time::Duration;

use super::ThrottleManager;
use crate::clock::nanos;
use crate::core::{CallTimes, Patience, Token};
use crate::error::{RejectReason, Rejected};
use crate::outcome::Outcome;
use crate::priority::Priority;

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
    /// # async fn main() -> Result<(), portcullis::ConfigError> {
    /// let manager = ThrottleManager::<String>::builder().rate(RateConfig::new(4.0)).build()?;
    /// let start = Instant::now();
    /// for _ in 0..5 {
    ///     manager.wait("api").await;
    /// }
    /// assert_eq!(start.elapsed(), Duration::from_secs(1)); // 4 intervals of 250 ms
    /// # Ok(())
    /// # }
    /// ```
    pub async fn wait<Q>(&self, key: &Q)
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        let core = self.core();
        if core.rate.is_none() {
            return;
        }
        // The pipeline's first and rate steps, waiting without limit.
        let state = self.key_state_waiting(key).await;
        if core.wait_for_store_token(&state).await {
            return;
        }
        if let Ok(Token::Ahead(token)) =
            core.reserve_token(&state, core.now(), Priority::HIGH, Patience::Unbounded)
        {
            core.sleep_for_token(&state, token).await;
        }
    }

    /// Takes a token for one call to `key` if one is there now.
    ///
    /// # Errors
    ///
    /// [`Rejected`] when the call may not start yet: it takes nothing, and
    /// says why ([`RejectReason::RateLimited`], or
    /// [`RejectReason::KeySpaceFull`] for a new key when the key space is
    /// full) and how long until it could ([`Rejected::retry_after`], always
    /// there). Its priority is [`Priority::HIGH`], at which the rate-only
    /// methods count.
    ///
    /// ```
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder().rate(RateConfig::new(1.0).burst(2)).build()?;
    /// assert!(manager.check("api").is_ok());
    /// assert!(manager.check("api").is_ok()); // the burst
    /// assert!(manager.check("api").is_err());
    /// # Ok::<(), portcullis::ConfigError>(())
    /// ```
    pub fn check<Q>(&self, key: &Q) -> Result<(), Rejected>
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        let core = self.core();
        if core.rate.is_none() {
            return Ok(());
        }
        let now = core.now();
        let state = self.entry(key, now).map_err(|full| {
            let retry_after = Some(Duration::from_nanos(full.retry_after));
            Rejected::new(RejectReason::KeySpaceFull, Priority::HIGH, retry_after)
        })?;
        let Some(settings) = core.rate_of(&state) else {
            return Ok(());
        };
        state
            .rate
            .check(now, settings.burst)
            .map_err(|wait| Rejected::rate_limited(wait, Priority::HIGH))
    }

    /// Reports a success: `key`'s rate rises by its increment, up to its
    /// upper bound, and its throttle counts a request and an accept (at the
    /// task's priority, else [`Priority::HIGH`]). For calls made with
    /// [`wait`](Self::wait); a [`Permit`](crate::Permit) reports its own outcome. Returns the new rate, or `None` if the manager has no
    /// rate or the key was not live and the key space had no room for it.
    ///
    /// ```
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::new(10.0).bounds(1.0, 11.0).increment(2.0))
    ///     .build()?;
    /// assert_eq!(manager.increment("api"), Some(11.0));
    /// # Ok::<(), portcullis::ConfigError>(())
    /// ```
    pub fn increment<Q>(&self, key: &Q) -> Option<f64>
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
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
    ///     .rate(RateConfig::new(10.0).decrease_factor(0.5))
    ///     .build()?;
    /// assert_eq!(manager.decrement("api"), Some(5.0));
    /// assert_eq!(manager.decrement("api"), Some(5.0)); // within the 500 ms cooldown
    /// # Ok::<(), portcullis::ConfigError>(())
    /// ```
    pub fn decrement<Q>(&self, key: &Q) -> Option<f64>
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        self.report(key, Outcome::Overloaded)
    }

    /// What `increment` and `decrement` share: the outcome of a call made
    /// after `wait`, counted as a permit's would be.
    fn report<Q>(&self, key: &Q, outcome: Outcome) -> Option<f64>
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        let core = self.core();
        let now = core.now();
        let entry = self.entry(key, now).ok()?;
        let telemetry = self.telemetry_of(entry.key());
        let priority = core.outcome_priority();
        let state = entry.value();
        core.record_outcome(state, priority, CallTimes::at(now), outcome, &telemetry);
        core.rate_of(state).map(|_| core.rate_in_force(state))
    }

    /// `key`'s current rate in calls per second, or `None` if the key is not
    /// live (never seen, or evicted). Does not create the key.
    ///
    /// ```
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder().rate(RateConfig::new(10.0)).build()?;
    /// assert_eq!(manager.rate("api"), None);
    /// manager.increment("api");
    /// assert_eq!(manager.rate("api"), Some(10.3));
    /// # Ok::<(), portcullis::ConfigError>(())
    /// ```
    pub fn rate<Q>(&self, key: &Q) -> Option<f64>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let state = self.inner.keys.get(key)?;
        let core = self.core();
        core.rate_of(&state).map(|_| core.rate_in_force(&state))
    }

    /// Pauses `key`'s rate for `pause`, as a server's `Retry-After` asks:
    /// no call of the key starts before then (`wait` and `acquire` wait,
    /// `check` and `try_acquire` are refused with that `retry_after`), and
    /// the rate resumes after it with an empty bucket. Pauses longer than
    /// the manager's [maximum](crate::ThrottleManagerBuilder::max_defer) are
    /// cut to it. Returns the pause applied, or `None` if the manager has no
    /// rate or the key space had no room for the key.
    ///
    /// ```
    /// use portcullis::{RateConfig, ThrottleManager};
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), portcullis::ConfigError> {
    /// let manager = ThrottleManager::<String>::builder().rate(RateConfig::new(100.0)).build()?;
    /// // The server answered 429 with `Retry-After: 30`.
    /// assert_eq!(manager.defer("api", Duration::from_secs(30)), Some(Duration::from_secs(30)));
    /// assert_eq!(manager.check("api").unwrap_err().retry_after(), Some(Duration::from_secs(30)));
    /// let start = tokio::time::Instant::now();
    /// manager.wait("api").await;
    /// assert_eq!(start.elapsed(), Duration::from_secs(30));
    /// # Ok(())
    /// # }
    /// ```
    pub fn defer<Q>(&self, key: &Q, pause: Duration) -> Option<Duration>
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        let core = self.core();
        let pause = pause.min(core.max_defer);
        let now = core.now();
        let state = self.entry(key, now).ok()?;
        let settings = core.rate_of(&state)?;
        let until = now.saturating_add(nanos(pause));
        state.rate.pause_until(until, settings.burst);
        core.share_pause(&state, pause);
        Some(pause)
    }
}
