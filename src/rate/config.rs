//! What a user sets for a key's rate, and its validation.

use std::time::Duration;

mod check;

pub(crate) use check::RateSettings;

/// The fastest rate a key may have: one call per nanosecond. The bucket counts
/// time in whole nanoseconds, so anything faster could not be enforced.
///
/// ```
/// use portcullis::rate::MAX_RATE;
/// use portcullis::RateConfig;
///
/// assert!(RateConfig::adaptive(MAX_RATE).validate().is_ok());
/// assert!(RateConfig::adaptive(MAX_RATE * 2.0).validate().is_err());
/// ```
pub const MAX_RATE: f64 = 1e9;

/// The cooldown of the default decrease: short, so that a rate far above a
/// host's capacity comes down within a fraction of a second. Calls through
/// permits fall at most once per round trip besides ("old news"); the
/// cooldown guards [`decrement`](crate::ThrottleManager::decrement), which
/// carries no schedule.
const DEFAULT_COOLDOWN: Duration = Duration::from_millis(50);

/// The slowest rate a key with `burst` may have: its whole burst is owed
/// over at most 2^62 ns (146 years). The bucket counts time in 64-bit
/// nanoseconds, and a debt beyond that could not be counted: every call
/// would look due. Tiny for any real use (`burst` times 2.2e-10 calls a
/// second, one call every 146 years at burst 1), but a bound, so that no
/// setting can turn limiting off.
///
/// ```
/// use portcullis::RateConfig;
/// use portcullis::rate::slowest_rate;
///
/// assert!(slowest_rate(20) < 1e-8);
/// assert!(RateConfig::adaptive(1e-9).burst(20).validate().is_err());
/// assert!(RateConfig::adaptive(slowest_rate(20) * 10.0).burst(20).validate().is_ok());
/// ```
pub fn slowest_rate(burst: u32) -> f64 {
    f64::from(burst.max(1)) * 1e9 / (1u64 << 62) as f64
}

/// How a failure lowers a key's rate: set by [`RateConfig::decrease_by`] or
/// [`RateConfig::decrease_factor`]; a [store](crate::store) reads it in
/// [`RateRules`](crate::store::RateRules).
///
/// ```
/// use portcullis::rate::Decrease;
///
/// let halve = Decrease::Multiply(0.5);
/// assert_ne!(halve, Decrease::Subtract(0.5));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum Decrease {
    /// `rate -= step`: additive decrease.
    Subtract(f64),
    /// `rate *= factor`, with `0 < factor <= 1` (TCP-style AIMD).
    Multiply(f64),
}

/// The adaptive rate of a key: a token bucket whose rate moves with outcomes.
///
/// Rates are calls per second. Every change is clamped into
/// `[lower_bound, upper_bound]`. Setters take any value; the manager's
/// `build()` (or [`validate`](RateConfig::validate)) checks them all at once.
///
/// Defaults for `RateConfig::adaptive(r)`: burst 1, bounds
/// `[min(r / 10, 1), MAX_RATE]`, and a rate that is *learned*: it
/// converges on a host's capacity from any start.
///
/// - **Slow start.** Until its first overload, each success adds one call
///   a second, so a rate that limits its calls grows `e`-fold a second (as
///   TCP's window doubles each round trip): from 1/s, a host taking 50/s
///   is found in about five seconds.
/// - **A fall.** An overload multiplies the rate by 0.7, at most once per
///   50 ms and once per round trip ("old news" below); a fall with no call
///   served since the last one multiplies it by 0.49, so a start ten times
///   above a host's capacity is down within a fraction of a second.
/// - **After a fall, growth by time.** The rate that earned the fall is
///   the host's measured successes a second (a host that refuses beyond
///   its capacity serves about its capacity meanwhile), within what the
///   rate's history allows. The rate climbs back to 95 % of it within
///   1.5 s, holds there for 5.5 s (or as long as 50 calls take, if
///   longer), then probes beyond it, `e`-fold a second. More successes a second do not climb faster, so no success
///   rate can outrun the decrease.
/// - **After a pause.** A fall the host marks with a pause
///   ([`defer`](crate::manager::KeyHandle::defer), which the client layer
///   calls for `Retry-After`) resumes at 90 % of the rate the refused call
///   was sent at, holds 15 s, then probes gently (2 % of that a second,
///   added), so that pauses stay rare.
///
/// Against a host of capacity `C` that refuses beyond it, the rate settles
/// in cycles of about 7 s spent mostly at 95 % of `C`, with about one
/// refused call a cycle (`tests/rate/converge.rs` checks `C` of 5, 50 and 500/s from starts of
/// `C / 50` to `10 C`; the figures are in `benches/README.md`).
///
/// Steps set by hand keep their meaning: with
/// [`increase_by`](Self::increase_by), each success adds that step (the Go
/// seed's additive increase); with [`decrease_by`](Self::decrease_by) or
/// [`decrease_factor`](Self::decrease_factor), each fall is that step, at
/// most once per cooldown. Through a [store](crate::store), a rate without
/// `increase_by` adds 3 % of its starting rate per success, in the store's
/// script.
///
/// # The bound a quota keeps
///
/// Over any interval of length `T`, the calls a key with a fixed quota
/// ([`per`](Self::per), [`per_second`](Self::per_second), ...) lets in
/// take at most `rate × T + burst` tokens: a quota of
/// `per_second(40).burst(5)` lets at most 40 × 600 + 5 calls in over ten
/// minutes, and at most 5 + 40 × 0.1 in any tenth of a second. It holds
/// for every way in ([`check`], [`wait`], [`acquire`], [`call`] and their
/// `_n` forms, the client and server edges), for calls of any cost and for
/// any number of callers waiting, since every token comes from one
/// bucket. Through a [store](crate::store), the bucket is the store's,
/// and the bound holds for any number of processes sharing it (a slow
/// store included, and processes joining and leaving) for the ways in
/// that use the store: all but [`check`] and
/// [`try_acquire`](crate::ThrottleManager::try_acquire), which never wait
/// for a round trip and decide on the process's own bucket. The instants are those the tokens were due: a call that waited
/// starts when the runtime's timer wakes it, up to a millisecond later
/// with tokio's, so start times measured exactly may hold `rate × 1 ms`
/// more over a short interval. While a store cannot answer (a round trip
/// past the store's deadline counts as no answer: give
/// [`RedisStore::deadline`](crate::store::RedisStore::deadline) room above
/// the round trip), each process falls back to its own bucket
/// ([`WhenUnavailable::UseLocalRate`](crate::store::WhenUnavailable::UseLocalRate),
/// the default): N processes then let in up to N times the quota, and
/// [`WhenUnavailable::Refuse`](crate::store::WhenUnavailable::Refuse) is
/// the mode for a quota that must never be exceeded.
///
/// [`check`]: crate::ThrottleManager::check
/// [`wait`]: crate::ThrottleManager::wait
///
/// # A rate rises only while it limits
///
/// A success raises the rate only while the rate is what limits the key's
/// calls: never above 1.5 times the key's successes per second over the
/// last one to two seconds, or above the starting rate if that is higher
/// (TCP's congestion-window validation, RFC 7661, does the same for a
/// window). A key called at 5/s under a rate of 10/s learns nothing from
/// its successes; a key whose calls wait for their tokens runs at its
/// rate, and rises. A new key's first success counts as use at its rate.
///
/// # Where additive steps settle
///
/// With additive steps and a caller that always has work, a rate `r` above a
/// backend's true capacity `c` settles where successes and failures balance:
/// `c * increase_by = (r - c) * decrease_by`, so
/// `r = c * (1 + increase_by / decrease_by)`. Choose `decrease_by` well above
/// `increase_by` (e.g. 10x) to settle within 10 % of capacity: steps of
/// increase 2 and decrease 1, for instance, settle at three times capacity.
/// A multiplicative decrease ([`decrease_factor`](Self::decrease_factor))
/// settles closer still.
///
/// # Outcomes that are old news
///
/// A call made through a permit ([`acquire`], [`try_acquire`], [`call`])
/// moves the rate only if it was scheduled after the rate's last decrease.
/// A call scheduled before was paced at the old rate: the decrease already
/// answered its failure, and its success says nothing about the new rate
/// (TCP's NewReno reduces once per window of data for the same reason).
/// This matters when calls queue for their tokens: waiters already
/// scheduled keep their start times, so a decrease reaches the backend only
/// once they have gone. Without the rule, each of their failures would lower
/// the rate again (`cargo run --release --example simulate` shows the
/// difference). [`increment`] and [`decrement`] carry no such
/// time: every one of them counts, within the cooldown.
///
/// [`acquire`]: crate::ThrottleManager::acquire
/// [`try_acquire`]: crate::ThrottleManager::try_acquire
/// [`call`]: crate::ThrottleManager::call
/// [`increment`]: crate::ThrottleManager::increment
/// [`decrement`]: crate::ThrottleManager::decrement
///
/// # Example
///
/// A worked example:
///
/// ```
/// use portcullis::{RateConfig, ThrottleManager};
///
/// # fn main() -> Result<(), portcullis::error::ConfigError> {
/// let manager = ThrottleManager::<String>::builder()
///     .rate(RateConfig::adaptive(10.0).burst(1).bounds(1.0, 20.0).increase_by(1.0).decrease_by(10.0))
///     .build()?;
/// let key = "example.com";
/// manager.increment(key);
/// manager.increment(key);
/// assert_eq!(manager.key(key).rate(), Some(12.0));
/// manager.decrement(key);
/// assert_eq!(manager.key(key).rate(), Some(2.0));
/// for _ in 0..20 {
///     manager.increment(key);
/// }
/// assert_eq!(manager.key(key).rate(), Some(20.0)); // capped at the upper bound
/// for _ in 0..20 {
///     manager.decrement(key);
/// }
/// assert_eq!(manager.key(key).rate(), Some(1.0)); // floored at the lower bound
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct RateConfig {
    starting_rate: f64,
    /// Set for a fixed quota: the calls and the period the user gave,
    /// for its errors to name. A fixed quota's rate never moves.
    quota: Option<(u32, Duration)>,
    burst: u32,
    lower_bound: Option<f64>,
    upper_bound: Option<f64>,
    increase_by: Option<f64>,
    decrease_by: Option<f64>,
    decrease_factor: Option<f64>,
    decrease_cooldown: Option<Duration>,
}

impl RateConfig {
    /// An adaptive rate: a key starts at `starting_rate` calls per second,
    /// and its rate moves with outcomes within its bounds. A rate that
    /// never moves is a quota: [`per_second`](Self::per_second) and its kin.
    ///
    /// ```
    /// # use portcullis::{RateConfig, ThrottleManager};
    /// # fn manager(config: RateConfig) -> ThrottleManager<String> {
    /// #     let clock = portcullis::clock::ManualClock::new();
    /// #     ThrottleManager::builder().rate(config).clock(clock).build().unwrap()
    /// # }
    /// let manager = manager(RateConfig::adaptive(10.0)); // bounds 1/s to MAX_RATE
    /// // Slow start: a success adds one call a second.
    /// assert_eq!(manager.increment("api"), Some(11.0));
    /// // A failure: x 0.7 (and after it, growth by time, not by successes).
    /// let fallen = manager.decrement("api").unwrap();
    /// assert!((fallen - 7.7).abs() < 1e-9);
    /// ```
    pub fn adaptive(starting_rate: f64) -> Self {
        Self {
            starting_rate,
            quota: None,
            burst: 1,
            lower_bound: None,
            upper_bound: None,
            increase_by: None,
            decrease_by: None,
            decrease_factor: None,
            decrease_cooldown: None,
        }
    }

    /// A fixed quota: `calls` per `period`, with a burst of `calls`
    /// unless [`burst`](Self::burst) says otherwise (as governor's
    /// `Quota` and redis_rate's `PerMinute` do). The rate never moves:
    /// [`increment`](crate::ThrottleManager::increment),
    /// [`decrement`](crate::ThrottleManager::decrement) and the outcomes
    /// of permits leave it where it is (the key's throttle still learns
    /// from them). An adaptive rate starts from [`adaptive`](Self::adaptive).
    ///
    /// A fixed quota takes no bounds, steps or cooldown: setting one is an
    /// error at [`build`](crate::builder::ThrottleManagerBuilder::build) naming the
    /// field, since it could only be ignored.
    ///
    /// ```
    /// # use portcullis::{RateConfig, ThrottleManager};
    /// # fn manager(config: RateConfig) -> ThrottleManager<String> {
    /// #     let clock = portcullis::clock::ManualClock::new();
    /// #     ThrottleManager::builder().rate(config).clock(clock).build().unwrap()
    /// # }
    /// use std::time::Duration;
    ///
    /// // 100 calls every 10 seconds, 5 at once.
    /// let manager = manager(RateConfig::per(100, Duration::from_secs(10)).burst(5));
    /// assert_eq!(manager.increment("api"), Some(10.0)); // fixed: 10 a second
    /// assert_eq!(manager.decrement("api"), Some(10.0));
    /// assert_eq!((0..10).filter(|_| manager.check("api").is_ok()).count(), 5);
    ///
    /// let err = RateConfig::per(0, Duration::from_secs(60)).validate().unwrap_err();
    /// assert_eq!(err.to_string(), "invalid configuration: rate.quota: must allow at least 1 call, got 0 per 1m");
    /// ```
    pub fn per(calls: u32, period: Duration) -> Self {
        let rate = f64::from(calls) / period.as_secs_f64();
        Self {
            quota: Some((calls, period)),
            burst: calls.max(1),
            ..Self::adaptive(rate)
        }
    }

    /// A fixed quota of `calls` a second, bursts of `calls` unless
    /// [`burst`](Self::burst) is set: [`per`](Self::per) one second.
    ///
    /// ```
    /// use portcullis::RateConfig;
    /// use std::time::Duration;
    ///
    /// assert_eq!(RateConfig::per_second(50), RateConfig::per(50, Duration::from_secs(1)));
    /// ```
    pub fn per_second(calls: u32) -> Self {
        Self::per(calls, Duration::from_secs(1))
    }

    /// A fixed quota of `calls` a minute, bursts of `calls` unless
    /// [`burst`](Self::burst) is set: [`per`](Self::per) one minute.
    ///
    /// ```
    /// # use portcullis::{RateConfig, ThrottleManager};
    /// # fn manager(config: RateConfig) -> ThrottleManager<String> {
    /// #     let clock = portcullis::clock::ManualClock::new();
    /// #     ThrottleManager::builder().rate(config).clock(clock).build().unwrap()
    /// # }
    /// let manager = manager(RateConfig::per_minute(600).burst(20));
    /// assert_eq!((0..30).filter(|_| manager.check("tenant-a").is_ok()).count(), 20);
    /// assert_eq!(manager.key("tenant-a").rate(), Some(10.0)); // 600 a minute, 10 a second
    /// ```
    pub fn per_minute(calls: u32) -> Self {
        Self::per(calls, Duration::from_secs(60))
    }

    /// A fixed quota of `calls` an hour, bursts of `calls` unless
    /// [`burst`](Self::burst) is set: [`per`](Self::per) one hour.
    ///
    /// ```
    /// use portcullis::RateConfig;
    ///
    /// assert!(RateConfig::per_hour(1000).burst(100).validate().is_ok());
    /// assert!(RateConfig::per_hour(1000).is_fixed());
    /// ```
    pub fn per_hour(calls: u32) -> Self {
        Self::per(calls, Duration::from_secs(3600))
    }

    /// A fixed quota from a governor [`Quota`](governor::Quota): its
    /// replenishment interval and burst. Feature `governor`, so that
    /// governor's type is in the API only for those who ask.
    ///
    /// ```
    /// # use portcullis::{RateConfig, ThrottleManager};
    /// # fn manager(config: RateConfig) -> ThrottleManager<String> {
    /// #     let clock = portcullis::clock::ManualClock::new();
    /// #     ThrottleManager::builder().rate(config).clock(clock).build().unwrap()
    /// # }
    /// use governor::Quota;
    /// use nonzero_ext::nonzero;
    /// use std::time::Duration;
    ///
    /// let config = RateConfig::from_quota(Quota::per_second(nonzero!(50u32)).allow_burst(nonzero!(5u32)));
    /// assert_eq!(config, RateConfig::per(1, Duration::from_millis(20)).burst(5));
    /// let manager = manager(config);
    /// assert_eq!(manager.increment("api"), Some(50.0)); // fixed, as governor's
    /// assert_eq!((0..6).filter(|_| manager.check("api").is_ok()).count(), 5);
    /// ```
    #[cfg(feature = "governor")]
    #[cfg_attr(docsrs, doc(cfg(feature = "governor")))]
    pub fn from_quota(quota: governor::Quota) -> Self {
        Self::per(1, quota.replenish_interval()).burst(quota.burst_size().get())
    }

    /// Whether this is a fixed quota ([`per`](Self::per) and its kin),
    /// whose rate never moves.
    ///
    /// ```
    /// use portcullis::RateConfig;
    ///
    /// assert!(RateConfig::per_minute(600).is_fixed());
    /// assert!(!RateConfig::adaptive(10.0).is_fixed());
    /// ```
    pub fn is_fixed(&self) -> bool {
        self.quota.is_some()
    }

    /// How many calls may start at once from a full bucket. At least 1.
    ///
    /// ```
    /// # use portcullis::{RateConfig, ThrottleManager};
    /// # fn manager(config: RateConfig) -> ThrottleManager<String> {
    /// #     let clock = portcullis::clock::ManualClock::new();
    /// #     ThrottleManager::builder().rate(config).clock(clock).build().unwrap()
    /// # }
    /// let manager = manager(RateConfig::adaptive(10.0).burst(5));
    /// assert_eq!((0..10).filter(|_| manager.check("api").is_ok()).count(), 5);
    /// ```
    pub fn burst(mut self, burst: u32) -> Self {
        self.burst = burst;
        self
    }

    /// The rate never leaves `[lower, upper]`. `lower` must be above 0.
    ///
    /// Equal bounds (`adaptive(r).bounds(r, r)`) make a rate that cannot
    /// move, but not a quota: its burst is an adaptive rate's default of 1
    /// (a quota's is its `calls`), and
    /// [`is_fixed`](Self::is_fixed) is false. For a rate that never moves,
    /// write the quota ([`per_second`](Self::per_second), [`per`](Self::per)):
    /// it says so, takes no steps to be ignored, and bursts as governor's
    /// `Quota` does.
    ///
    /// ```
    /// # use portcullis::{RateConfig, ThrottleManager};
    /// # fn manager(config: RateConfig) -> ThrottleManager<String> {
    /// #     let clock = portcullis::clock::ManualClock::new();
    /// #     ThrottleManager::builder().rate(config).clock(clock).build().unwrap()
    /// # }
    /// let manager = manager(RateConfig::adaptive(10.0).bounds(2.0, 50.0).increase_by(100.0).decrease_by(100.0));
    /// // A rate rises only as far as its use shows: one success at once, 1.5x.
    /// assert_eq!(manager.increment("api"), Some(15.0));
    /// for _ in 0..3 {
    ///     manager.increment("api");
    /// }
    /// assert_eq!(manager.key("api").rate(), Some(50.0));
    /// assert_eq!(manager.decrement("api"), Some(2.0));
    /// ```
    pub fn bounds(mut self, lower: f64, upper: f64) -> Self {
        self.lower_bound = Some(lower);
        self.upper_bound = Some(upper);
        self
    }

    /// A success adds `step` calls per second.
    ///
    /// ```
    /// # use portcullis::{RateConfig, ThrottleManager};
    /// # fn manager(config: RateConfig) -> ThrottleManager<String> {
    /// #     let clock = portcullis::clock::ManualClock::new();
    /// #     ThrottleManager::builder().rate(config).clock(clock).build().unwrap()
    /// # }
    /// let manager = manager(RateConfig::adaptive(10.0).increase_by(2.0));
    /// assert_eq!(manager.increment("api"), Some(12.0));
    /// ```
    pub fn increase_by(mut self, step: f64) -> Self {
        self.increase_by = Some(step);
        self
    }

    /// A failure subtracts `step` calls per second (additive decrease).
    /// Without a cooldown set, every failure counts. One way down per
    /// config: with [`decrease_factor`](Self::decrease_factor) set too,
    /// [`validate`](Self::validate) and `build()` name both.
    ///
    /// ```
    /// # use portcullis::{RateConfig, ThrottleManager};
    /// # fn manager(config: RateConfig) -> ThrottleManager<String> {
    /// #     let clock = portcullis::clock::ManualClock::new();
    /// #     ThrottleManager::builder().rate(config).clock(clock).build().unwrap()
    /// # }
    /// let manager = manager(RateConfig::adaptive(10.0).decrease_by(1.0));
    /// assert_eq!(manager.decrement("api"), Some(9.0));
    /// assert_eq!(manager.decrement("api"), Some(8.0)); // no cooldown unless set
    ///
    /// let both = RateConfig::adaptive(10.0).decrease_by(1.0).decrease_factor(0.5);
    /// assert_eq!(
    ///     both.validate().unwrap_err().to_string(),
    ///     "invalid configuration: rate.decrease_factor: set one of decrease_by (additive) or \
    ///      decrease_factor (multiplicative), not both; got decrease_by 1 and decrease_factor 0.5"
    /// );
    /// ```
    pub fn decrease_by(mut self, step: f64) -> Self {
        self.decrease_by = Some(step);
        self
    }

    /// A failure multiplies the rate by `factor` (`0 < factor <= 1`),
    /// TCP-style. Unless a cooldown is set, at most one decrease per 500 ms
    /// counts, so that a burst of failures from calls that were already in
    /// flight does not collapse the rate. Not with
    /// [`decrease_by`](Self::decrease_by): one way down per config.
    ///
    /// ```
    /// # use portcullis::{RateConfig, ThrottleManager};
    /// # fn manager(config: RateConfig) -> ThrottleManager<String> {
    /// #     let clock = portcullis::clock::ManualClock::new();
    /// #     ThrottleManager::builder().rate(config).clock(clock).build().unwrap()
    /// # }
    /// let manager = manager(RateConfig::adaptive(10.0).decrease_factor(0.7));
    /// assert_eq!(manager.decrement("api"), Some(7.0));
    /// assert_eq!(manager.decrement("api"), Some(7.0)); // within the 500 ms cooldown
    /// ```
    pub fn decrease_factor(mut self, factor: f64) -> Self {
        self.decrease_factor = Some(factor);
        self
    }

    /// After a decrease, further failures within `cooldown` leave the rate
    /// alone. Defaults: none for [`decrease_by`](RateConfig::decrease_by), 500 ms
    /// for [`decrease_factor`](RateConfig::decrease_factor).
    ///
    /// ```
    /// use portcullis::clock::ManualClock;
    /// use portcullis::{RateConfig, ThrottleManager};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::adaptive(10.0).decrease_factor(0.5).decrease_cooldown(Duration::from_millis(200)))
    ///     .clock(clock.clone())
    ///     .build()?;
    /// assert_eq!(manager.decrement("api"), Some(5.0));
    /// assert_eq!(manager.decrement("api"), Some(5.0)); // within the cooldown
    /// clock.advance(Duration::from_millis(200));
    /// assert_eq!(manager.decrement("api"), Some(2.5));
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn decrease_cooldown(mut self, cooldown: Duration) -> Self {
        self.decrease_cooldown = Some(cooldown);
        self
    }

    /// The lowest rate, after defaults: a tenth of the starting rate, and
    /// at most 1/s, so that a start far above a host's capacity can come
    /// down to it.
    pub(crate) fn lower_bound(&self) -> f64 {
        if self.quota.is_some() {
            return self.starting_rate;
        }
        self.lower_bound.unwrap_or(
            (self.starting_rate / 10.0)
                .min(1.0)
                .max(slowest_rate(self.burst)),
        )
    }

    /// The highest rate, after defaults: none but [`MAX_RATE`], so that a
    /// start far below a host's capacity can find it (validation keeps
    /// the rate within twice what its calls use).
    pub(crate) fn upper_bound(&self) -> f64 {
        if self.quota.is_some() {
            return self.starting_rate;
        }
        self.upper_bound.unwrap_or(MAX_RATE)
    }

    /// What a success adds, after defaults: a learned rate's
    /// ([`learns`](Self::learns)) grows by time instead, and a store
    /// applies 3 % of the starting rate per success.
    pub(crate) fn increment_step(&self) -> f64 {
        if self.quota.is_some() {
            return 0.0;
        }
        self.increase_by.unwrap_or(self.starting_rate * 0.03)
    }

    /// Whether the rate is learned: adaptive, with no `increase_by` step.
    pub(crate) fn learns(&self) -> bool {
        self.quota.is_none() && self.increase_by.is_none()
    }

    /// Whether the decrease is the default one: adaptive, with neither
    /// `decrease_by` nor `decrease_factor`.
    pub(crate) fn learns_decrease(&self) -> bool {
        self.quota.is_none() && self.decrease_by.is_none() && self.decrease_factor.is_none()
    }

    /// How a failure lowers the rate, after defaults.
    pub(crate) fn decrease(&self) -> Decrease {
        if self.quota.is_some() {
            return Decrease::Subtract(0.0);
        }
        match (self.decrease_by, self.decrease_factor) {
            (Some(step), None) => Decrease::Subtract(step),
            (_, Some(factor)) => Decrease::Multiply(factor),
            (None, None) => Decrease::Multiply(0.7),
        }
    }

    /// The decrease cooldown, after defaults.
    pub(crate) fn cooldown(&self) -> Duration {
        if self.quota.is_some() {
            return Duration::ZERO;
        }
        self.decrease_cooldown
            .unwrap_or(match (self.decrease_by, self.decrease_factor) {
                (Some(_), None) => Duration::ZERO,
                (_, Some(_)) => Duration::from_millis(500),
                (None, None) => DEFAULT_COOLDOWN,
            })
    }
}

/// # Names before 0.3
///
/// Kept so that code written for 0.2 builds; each says its new name.
impl RateConfig {
    /// [`adaptive`](Self::adaptive): `new` read as a fixed quota next to
    /// [`BulkheadConfig::new`](crate::BulkheadConfig::new), which is one.
    ///
    /// ```
    /// # #![allow(deprecated)]
    /// use portcullis::RateConfig;
    ///
    /// assert_eq!(RateConfig::new(10.0), RateConfig::adaptive(10.0));
    /// ```
    #[deprecated(
        since = "0.3.0",
        note = "an adaptive rate is `RateConfig::adaptive(starting_rate)`"
    )]
    pub fn new(starting_rate: f64) -> Self {
        Self::adaptive(starting_rate)
    }

    /// [`increase_by`](Self::increase_by): the manager's
    /// [`increment`](crate::ThrottleManager::increment) is the outcome, this
    /// is the step.
    ///
    /// ```
    /// # #![allow(deprecated)]
    /// use portcullis::RateConfig;
    ///
    /// assert_eq!(RateConfig::adaptive(10.0).increment(2.0), RateConfig::adaptive(10.0).increase_by(2.0));
    /// ```
    #[deprecated(
        since = "0.3.0",
        note = "the step a success adds is `increase_by(step)`"
    )]
    pub fn increment(self, step: f64) -> Self {
        self.increase_by(step)
    }

    /// [`decrease_by`](Self::decrease_by): the manager's
    /// [`decrement`](crate::ThrottleManager::decrement) is the outcome, this
    /// is the step.
    ///
    /// ```
    /// # #![allow(deprecated)]
    /// use portcullis::RateConfig;
    ///
    /// assert_eq!(RateConfig::adaptive(10.0).decrement(1.0), RateConfig::adaptive(10.0).decrease_by(1.0));
    /// ```
    #[deprecated(
        since = "0.3.0",
        note = "the step a failure subtracts is `decrease_by(step)`"
    )]
    pub fn decrement(self, step: f64) -> Self {
        self.decrease_by(step)
    }
}

#[cfg(test)]
mod tests;
