//! Rates shared by many processes: the [`RateStore`] trait, which a
//! shared backend implements, and [`RedisStore`] (feature `redis`), the
//! one this crate ships.
//!
//! A store given to the builder
//! ([`rate_store`](crate::builder::ThrottleManagerBuilder::rate_store)) holds the
//! **rate** of every key: each process's calls to a key take their tokens
//! from one shared bucket, and every process's outcomes move one shared
//! rate. A fixed quota held by N replicas is then the quota, not N times
//! it, and N crawlers learning one host's rate learn it together instead
//! of each probing on its own.
//!
//! The **throttle** and the **bulkhead** stay in each process: the SRE
//! throttle is client-side by design (each client sheds from what it has
//! seen itself), and calls in flight are a process's own.
//!
//! # What the manager asks of a store
//!
//! Two things, both through [`RateStore`]:
//! - [`take_token`](RateStore::take_token): a token for a key's next call,
//!   if it can be used within the caller's patience
//!   ([`TokenRequest::max_wait`]); the answer says how long until it may be
//!   used ([`TokenAnswer`]). One round trip a call.
//! - [`report`](RateStore::report): what happened since ([`RateEvent`]):
//!   a success or an overload of a call (which move the rate by the key's
//!   [`RateRules`]), a token handed back by a call cancelled before it
//!   started, a pause a server asked for. The manager sends reports
//!   without waiting for them, on a task of the current tokio runtime, a
//!   few thousand at most at once; beyond that an outcome moves only the
//!   key's local rate.
//!
//! A store that cannot answer says so ([`TokenAnswer::Unavailable`]), and
//! the key falls back to its local rate, or is refused, as the store's
//! [`when_unavailable`](RateStore::when_unavailable) says.
//!
//! # What a store reads
//!
//! A store's backend is shared, so what a store reads from it may be
//! anything: another client's write, a bug in another service, a restore
//! from an old dump. Every store checks each value before it uses it, as
//! [`RedisStore`] does in its scripts, with what [`RateRules`] gives it:
//! - a rate that is no number, not finite, 0 or below, and a time that is
//!   no number, not finite or not above 0, are missing: the key starts
//!   afresh (at [`starting_rate`](RateRules::starting_rate), with a full
//!   bucket), and the store says so once (a `warn` event naming the key in
//!   the backend), since it writes the fresh state back;
//! - a rate out of the caller's bounds is clamped into them
//!   ([`RateRules::checked_rate`]);
//! - a debt further ahead than a bucket can owe
//!   ([`RateRules::max_debt`]: the burst's intervals and the longest
//!   pause) is cut to it, and no token is booked further ahead than the
//!   longest pause;
//! - a value of the wrong type is missing too.
//!
//! So garbage can make a key start afresh, or wait out at most one
//! longest pause, but never admit more than the key's upper bound allows.
//! The manager checks the store's answers the same way (see
//! [`TokenAnswer`]), so a store that reads unchecked still cannot open a
//! key's limit in one process.
//!
//! # Which calls use the store
//!
//! Those that may wait for it: [`wait`](crate::ThrottleManager::wait),
//! [`acquire`](crate::ThrottleManager::acquire), `call` and its variants,
//! the client middleware and the server layer. [`check`] and [`try_acquire`]
//! never wait, not even for a round trip: they decide on the key's local
//! rate, as under the fallback.
//!
//! # Cancel safety
//!
//! A call dropped while it sleeps for its shared token hands the token
//! back ([`RateEvent::Cancelled`]). A call dropped during the round trip
//! itself may leave its token taken, since the store may or may not have
//! taken it: one call's worth of the rate is lost to the fleet, never
//! given twice.
//!
//! # Writing a store
//!
//! A store is a `Send + Sync` value whose methods return boxed futures
//! ([`StoreFuture`]), so the manager holds any store behind one pointer.
//! This one keeps every key's rate in a map in memory (a fixed rate: it
//! ignores outcomes), which is enough for two managers in one process to
//! share their keys' rates, or for a test:
//!
//! ```
//! use std::collections::HashMap;
//! use std::sync::Mutex;
//! use std::time::{Duration, Instant};
//!
//! use portcullis::store::{RateEvent, RateStore, StoreFuture, TokenAnswer, TokenReceipt, TokenRequest};
//! use portcullis::{RateConfig, ThrottleManager};
//!
//! /// Each key's next free time, on a clock of the store's own (burst 1:
//! /// a call's tokens are paid before the next call starts).
//! #[derive(Default)]
//! struct InMemory {
//!     next_free: Mutex<HashMap<String, Duration>>,
//!     start: std::sync::OnceLock<Instant>,
//! }
//!
//! impl RateStore for InMemory {
//!     fn take_token<'a>(&'a self, key: &'a str, request: TokenRequest) -> StoreFuture<'a, TokenAnswer> {
//!         let now = self.start.get_or_init(Instant::now).elapsed();
//!         let rate = request.rules.starting_rate;
//!         let interval = Duration::from_secs_f64(1.0 / rate);
//!         let mut next_free = self.next_free.lock().unwrap();
//!         let free = next_free.entry(key.to_owned()).or_default();
//!         let start = (*free).max(now);
//!         let wait = start - now;
//!         let answer = if request.max_wait.is_some_and(|max| wait > max) {
//!             TokenAnswer::Refused { wait, rate }
//!         } else {
//!             *free = start + interval * request.cost;
//!             TokenAnswer::Granted { wait, receipt: TokenReceipt::new(""), rate }
//!         };
//!         Box::pin(async move { answer })
//!     }
//!
//!     fn report<'a>(&'a self, _key: &'a str, _event: RateEvent, rules: portcullis::store::RateRules) -> StoreFuture<'a, Option<f64>> {
//!         Box::pin(async move { Some(rules.starting_rate) })
//!     }
//! }
//!
//! let manager = ThrottleManager::<String>::builder()
//!     .rate(RateConfig::adaptive(10.0))
//!     .rate_store(InMemory::default())
//!     .build()?;
//! # drop(manager);
//! # Ok::<(), portcullis::error::ConfigError>(())
//! ```
//!
//! [`check`]: crate::ThrottleManager::check
//! [`try_acquire`]: crate::ThrottleManager::try_acquire

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

pub use crate::rate::Decrease;
use crate::rate::RateSettings;
use crate::rate::{DEFAULT_MAX_DEFER, MAX_RATE_OVER_USE, MAX_RATE_OVER_USE_WAITED, STORE_HORIZON};

mod handle;
mod limits;
#[cfg(feature = "redis")]
mod redis;

#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use self::redis::{ConnectError, RedisStore, SharedRate};
pub(crate) use handle::{StoreHandle, StoreKey, set_rate};
pub use limits::{LimitRequest, LimitsAnswer, REQUESTS};

/// The future a [`RateStore`] method returns: boxed, so that the manager
/// holds any store behind one pointer.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A backend that holds every key's rate for many processes: what the
/// manager asks of it. See the [module](self) for when each method is
/// called, and an example.
///
/// Keys reach the store by name: the manager's key as `Display` writes it
/// (or what [`key_names`](crate::builder::ThrottleManagerBuilder::key_names) says).
/// A store that shares one backend among several fleets keeps them apart
/// itself (a prefix, as [`RedisStore`] does).
///
/// The rules to apply come with every request and report
/// ([`RateRules`], the key's validated [`RateConfig`](crate::RateConfig)):
/// the starting rate for a key the store has no state for, the burst, and
/// how outcomes move the rate. A store checks what it reads against them
/// before it uses it (see [what a store reads](self#what-a-store-reads)).
pub trait RateStore: Send + Sync {
    /// A token for the next call of `key`, if it can be used within
    /// `request.max_wait` (`None`: however far ahead); the store takes it
    /// only then.
    ///
    /// # Cancel safety
    ///
    /// The manager may drop the future at any point (its caller gave up).
    /// A store that cannot tell whether the token was taken should take it
    /// rather than give it twice.
    fn take_token<'a>(
        &'a self,
        key: &'a str,
        request: TokenRequest,
    ) -> StoreFuture<'a, TokenAnswer>;

    /// Applies `event` to `key`'s shared rate under `rules`, and returns
    /// the rate after it (`None`: the store did not answer). The manager
    /// sends reports on their own task and does not wait for them.
    ///
    /// # Cancel safety
    ///
    /// A report dropped before it resolves may or may not have been
    /// applied.
    fn report<'a>(
        &'a self,
        key: &'a str,
        event: RateEvent,
        rules: RateRules,
    ) -> StoreFuture<'a, Option<f64>>;

    /// Takes a metered call's part of each of `key`'s named `limits`
    /// ([`limit`](crate::builder::ThrottleManagerBuilder::limit)) at once, if every
    /// one has room now, and nothing otherwise
    /// ([`LimitsAnswer`]): one round trip for all of them. A part named
    /// [`REQUESTS`] (asked last, when the key's
    /// rate is in the store) is the call's tokens of the key's own rate,
    /// the bucket [`take_token`](Self::take_token) takes from: the call
    /// then asks for no token besides. Default:
    /// [`Unavailable`](LimitsAnswer::Unavailable), and each process keeps
    /// its named limits itself.
    ///
    /// # Cancel safety
    ///
    /// As [`take_token`](Self::take_token): a store that cannot tell
    /// whether the parts were taken should take them.
    fn take_limits<'a>(
        &'a self,
        key: &'a str,
        limits: &'a [LimitRequest<'a>],
    ) -> StoreFuture<'a, LimitsAnswer> {
        let _ = (key, limits);
        Box::pin(std::future::ready(LimitsAnswer::Unavailable))
    }

    /// A metered call cost `more` tokens of `key`'s named limit `limit`
    /// (or of its rate, for [`REQUESTS`])
    /// than it took (negative: fewer): the store owes them from now, or
    /// gives back as much of them as still lies ahead of now, by the mark
    /// [`take_limits`](Self::take_limits) gave the call's part. Sent
    /// without waiting for it. Default: nothing (a store that keeps no
    /// named limits).
    fn settle_limit<'a>(
        &'a self,
        key: &'a str,
        limit: LimitRequest<'a>,
        more: i64,
        mark: &'a TokenReceipt,
    ) -> StoreFuture<'a, ()> {
        let _ = (key, limit, more, mark);
        Box::pin(std::future::ready(()))
    }

    /// Applies `event` to `key`'s named limit `limit` under `rules`, as
    /// [`report`](Self::report) applies it to the key's rate: an adaptive
    /// limit learns from its calls' outcomes in the store. Returns the
    /// limit's rate after it (`None`: the store did not answer). Sent
    /// without waiting for it, and only for a limit whose rate can move.
    /// Default: nothing (a store that keeps no named limits, or keeps them
    /// at their starting rates).
    ///
    /// # Cancel safety
    ///
    /// As [`report`](Self::report).
    fn report_limit<'a>(
        &'a self,
        key: &'a str,
        limit: &'a str,
        event: RateEvent,
        rules: RateRules,
    ) -> StoreFuture<'a, Option<f64>> {
        let _ = (key, limit, event, rules);
        Box::pin(std::future::ready(None))
    }

    /// What calls get while the store cannot answer. Default: each key
    /// falls back to its local rate.
    fn when_unavailable(&self) -> WhenUnavailable {
        WhenUnavailable::UseLocalRate
    }

    /// Whether the store answers now; while it does not, a key's rate as
    /// [`rate`](crate::ThrottleManager::rate) and snapshots report it is
    /// the local one, which is in force. Default: always.
    fn is_available(&self) -> bool {
        true
    }

    /// The store's settings that cannot work, each as the setting's name
    /// and what is wrong with it; [`build`](crate::builder::ThrottleManagerBuilder::build)
    /// reports each as `rate_store.<name>`. Default: none.
    fn invalid_settings(&self) -> Vec<(&'static str, String)> {
        Vec::new()
    }
}

/// A store behind an `Arc` is a store: several managers (hosts and a
/// database, say) can share one connection. They share its key names too,
/// so their keys must not collide.
///
/// ```no_run
/// # #[cfg(feature = "redis")]
/// # async fn two() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// use std::sync::Arc;
/// use portcullis::store::RedisStore;
/// use portcullis::{RateConfig, ThrottleManager};
///
/// let store = Arc::new(RedisStore::connect("redis://127.0.0.1/", "fleet").await?);
/// let hosts = ThrottleManager::<String>::builder()
///     .rate(RateConfig::adaptive(10.0))
///     .rate_store(Arc::clone(&store))
///     .build()?;
/// let tenants = ThrottleManager::<String>::builder()
///     .rate(RateConfig::adaptive(100.0))
///     .rate_store(store)
///     .build()?;
/// # drop((hosts, tenants));
/// # Ok(())
/// # }
/// ```
impl<S: RateStore + ?Sized> RateStore for Arc<S> {
    fn take_token<'a>(
        &'a self,
        key: &'a str,
        request: TokenRequest,
    ) -> StoreFuture<'a, TokenAnswer> {
        (**self).take_token(key, request)
    }

    fn report<'a>(
        &'a self,
        key: &'a str,
        event: RateEvent,
        rules: RateRules,
    ) -> StoreFuture<'a, Option<f64>> {
        (**self).report(key, event, rules)
    }

    fn take_limits<'a>(
        &'a self,
        key: &'a str,
        limits: &'a [LimitRequest<'a>],
    ) -> StoreFuture<'a, LimitsAnswer> {
        (**self).take_limits(key, limits)
    }

    fn report_limit<'a>(
        &'a self,
        key: &'a str,
        limit: &'a str,
        event: RateEvent,
        rules: RateRules,
    ) -> StoreFuture<'a, Option<f64>> {
        (**self).report_limit(key, limit, event, rules)
    }

    fn settle_limit<'a>(
        &'a self,
        key: &'a str,
        limit: LimitRequest<'a>,
        more: i64,
        mark: &'a TokenReceipt,
    ) -> StoreFuture<'a, ()> {
        (**self).settle_limit(key, limit, more, mark)
    }

    fn when_unavailable(&self) -> WhenUnavailable {
        (**self).when_unavailable()
    }

    fn is_available(&self) -> bool {
        (**self).is_available()
    }

    fn invalid_settings(&self) -> Vec<(&'static str, String)> {
        (**self).invalid_settings()
    }
}

/// What a call asks of the store: `cost` tokens under the key's rules,
/// within its patience.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct TokenRequest {
    /// The key's rate rules.
    pub rules: RateRules,
    /// The longest wait the caller takes: a token due later is refused.
    /// `None`: however far ahead, up to the rules'
    /// [`max_pause`](RateRules::max_pause) (the manager never asks further
    /// ahead than that, and a store books no further).
    pub max_wait: Option<Duration>,
    /// How many tokens the call takes, all in the one decision: the
    /// bucket's debt grows by `cost` intervals, and the call may start
    /// once that debt fits in the burst. At most `rules.burst` (the
    /// manager refuses a larger cost before asking); 0 takes nothing.
    pub cost: u32,
}

/// A key's rate rules as the store applies them: its validated
/// [`RateConfig`](crate::RateConfig).
///
/// ```
/// use portcullis::RateConfig;
/// use portcullis::store::{RateRules, TokenRequest};
/// use std::time::Duration;
///
/// // What a store's own tests can ask it, as the manager would.
/// let rules = RateRules::of(&RateConfig::adaptive(10.0).burst(5))?;
/// assert_eq!((rules.starting_rate, rules.burst), (10.0, 5));
/// let request = TokenRequest::new(rules, Some(Duration::from_millis(100)));
/// assert_eq!(request.max_wait, Some(Duration::from_millis(100)));
/// assert!(RateRules::of(&RateConfig::adaptive(f64::NAN)).is_err());
/// # Ok::<(), portcullis::error::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct RateRules {
    /// Calls a second for a key the store has no state for.
    pub starting_rate: f64,
    /// Calls that may start at once after the key has been quiet.
    pub burst: u32,
    /// The rate never falls below this.
    pub lower_bound: f64,
    /// The rate never rises above this.
    pub upper_bound: f64,
    /// What a success adds to the rate (while the rate is what limits the
    /// key's calls).
    pub increment: f64,
    /// What an overload does to the rate.
    pub decrease: Decrease,
    /// The rate falls at most once in this long.
    pub cooldown: Duration,
    /// The longest a key's calls are held back beyond its burst: the
    /// longest pause a server's `Retry-After` can impose (the manager's
    /// [`max_defer`](crate::deadline::TimeLimits::max_defer)), which is
    /// also as far ahead as the manager asks for a token. With the burst,
    /// it bounds what a bucket can owe ([`max_debt`](Self::max_debt)).
    pub max_pause: Duration,
    /// A success raises the rate only while the rate is below this many
    /// times the key's use (its successes a second over the last one to
    /// two seconds): a rate far above its use limits no call, so its
    /// successes say nothing about it.
    pub max_rate_over_use: f64,
    /// The same bound for a success whose call waited for its token: the
    /// rate limited that call, and the use lags a rate that is climbing.
    pub max_rate_over_use_waited: f64,
}

impl RateRules {
    /// The rules of `config`, checked as
    /// [`build`](crate::builder::ThrottleManagerBuilder::build) checks it.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`](crate::error::ConfigError) naming every invalid field,
    /// as [`RateConfig::validate`](crate::RateConfig::validate) does.
    ///
    /// Its [`max_pause`](Self::max_pause) is the builder's default
    /// `max_defer`, 5 minutes.
    pub fn of(config: &crate::RateConfig) -> Result<Self, crate::ConfigError> {
        config
            .validated()
            .map(|settings| Self::from_settings(&settings, DEFAULT_MAX_DEFER))
    }

    /// The rules for a key's validated rate settings, in a manager whose
    /// longest pause is `max_defer`. No call books its token further ahead
    /// than the store's horizon either, so the longest pause is at least
    /// that.
    pub(crate) fn from_settings(settings: &RateSettings, max_defer: Duration) -> Self {
        Self {
            starting_rate: settings.starting_rate,
            burst: settings.burst,
            lower_bound: settings.lower_bound,
            upper_bound: settings.upper_bound,
            increment: settings.increment,
            decrease: settings.decrease,
            cooldown: Duration::from_nanos(settings.cooldown),
            max_pause: max_defer.max(Duration::from_nanos(STORE_HORIZON)),
            max_rate_over_use: MAX_RATE_OVER_USE,
            max_rate_over_use_waited: MAX_RATE_OVER_USE_WAITED,
        }
    }

    /// A rate read from the store, as the key may use it: `None` for a
    /// value that is no rate (not finite, 0 or below), which the store
    /// treats as missing; otherwise the rate clamped into the bounds (a
    /// process with other bounds, or another client, may have written it).
    ///
    /// ```
    /// use portcullis::RateConfig;
    /// use portcullis::store::RateRules;
    ///
    /// let rules = RateRules::of(&RateConfig::adaptive(5.0).bounds(1.0, 20.0))?;
    /// assert_eq!(rules.checked_rate(7.5), Some(7.5));
    /// assert_eq!(rules.checked_rate(1e308), Some(20.0));
    /// assert_eq!(rules.checked_rate(0.01), Some(1.0));
    /// for garbage in [0.0, -5.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
    ///     assert_eq!(rules.checked_rate(garbage), None);
    /// }
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn checked_rate(&self, stored: f64) -> Option<f64> {
        (stored.is_finite() && stored > 0.0)
            .then(|| stored.clamp(self.lower_bound, self.upper_bound))
    }

    /// The most a bucket under these rules can owe at `rate` (a checked
    /// one): its burst's worth of intervals, and the longest pause. A
    /// theoretical arrival time further ahead of now than this is no
    /// bucket's: a store cuts it to this.
    ///
    /// ```
    /// use portcullis::RateConfig;
    /// use portcullis::store::RateRules;
    /// use std::time::Duration;
    ///
    /// let mut rules = RateRules::of(&RateConfig::adaptive(5.0).burst(2))?;
    /// rules.max_pause = Duration::from_secs(1);
    /// // Two calls at 5/s, 400 ms, and a pause of a second.
    /// assert_eq!(rules.max_debt(5.0), Duration::from_millis(1_400));
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn max_debt(&self, rate: f64) -> Duration {
        let burst =
            Duration::try_from_secs_f64(f64::from(self.burst) / rate).unwrap_or(Duration::MAX);
        burst.saturating_add(self.max_pause)
    }
}

impl TokenRequest {
    /// A request for one token under `rules`, usable within `max_wait`
    /// (`None`: however far ahead).
    pub fn new(rules: RateRules, max_wait: Option<Duration>) -> Self {
        Self {
            rules,
            max_wait,
            cost: 1,
        }
    }

    /// The same request for `cost` tokens.
    ///
    /// ```
    /// use portcullis::RateConfig;
    /// use portcullis::store::{RateRules, TokenRequest};
    ///
    /// let rules = RateRules::of(&RateConfig::per_minute(600).burst(20))?;
    /// assert_eq!(TokenRequest::new(rules, None).cost, 1);
    /// assert_eq!(TokenRequest::new(rules, None).cost(5).cost, 5);
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    #[must_use]
    pub fn cost(mut self, cost: u32) -> Self {
        self.cost = cost;
        self
    }
}

/// The store's answer to a [`TokenRequest`].
///
/// The manager checks it as a store checks what it reads: a rate that is
/// no rate is not taken as the key's shared rate, and one out of the
/// bounds is clamped ([`RateRules::checked_rate`]); a wait longer than the
/// bucket can owe ([`RateRules::max_debt`]) is cut to it; a token granted
/// beyond the caller's `max_wait` is not used (the call is refused, as if
/// the store had refused it).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum TokenAnswer {
    /// A token, which the call may use `wait` from now. `receipt` is what
    /// the store needs to take it back ([`RateEvent::Cancelled`]); `rate`
    /// the key's shared rate.
    Granted {
        /// How long until the call may start.
        wait: Duration,
        /// What identifies the token to the store.
        receipt: TokenReceipt,
        /// The key's shared rate, calls a second.
        rate: f64,
    },
    /// No token within the caller's patience: it would have been `wait`
    /// from now. Nothing was taken.
    Refused {
        /// How long until a token would have been free.
        wait: Duration,
        /// The key's shared rate, calls a second.
        rate: f64,
    },
    /// The store cannot answer now, and will not be asked again for
    /// `retry_after` (the hint a refused caller gets).
    Unavailable {
        /// When the store is worth asking again.
        retry_after: Duration,
    },
}

/// What a store needs to take back a token it granted: any text the store
/// chooses (its bucket's state after the token, an id).
///
/// ```
/// use portcullis::store::TokenReceipt;
///
/// let receipt = TokenReceipt::new("1700000000.25");
/// assert_eq!(receipt.as_str(), "1700000000.25");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TokenReceipt(Arc<str>);

impl TokenReceipt {
    /// A receipt holding `text`.
    pub fn new(text: impl Into<Arc<str>>) -> Self {
        Self(text.into())
    }

    /// The text the store put in it.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// What happened to a key, for its shared rate.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum RateEvent {
    /// A call succeeded: the rate may rise.
    Success {
        /// How long ago (as the report was made) the call's token was
        /// taken. A call scheduled before the rate's last fall says
        /// nothing of the rate after it.
        scheduled_ago: Duration,
        /// How long ago the call started.
        started_ago: Duration,
        /// Whether the call waited for its token: the rate was then what
        /// limited the key's calls.
        waited: bool,
        /// The tokens the call took: its use of the rate.
        tokens: u32,
    },
    /// A call met an overloaded backend: the rate falls.
    Overloaded {
        /// How long ago (as the report was made) the call's token was
        /// taken.
        scheduled_ago: Duration,
    },
    /// A call cancelled before it started hands its token back, if the
    /// store has granted no later token since.
    Cancelled(TokenReceipt),
    /// No call of the key starts for this long (a server's `Retry-After`).
    Paused(Duration),
}

/// What calls get while the store is unavailable.
///
/// ```
/// use portcullis::store::WhenUnavailable;
///
/// assert_eq!(WhenUnavailable::default(), WhenUnavailable::UseLocalRate);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum WhenUnavailable {
    /// Each key falls back to its local rate: every process limits itself
    /// alone, from what its own outcomes taught it, until the store
    /// answers again. No call fails because the store did.
    #[default]
    UseLocalRate,
    /// Calls that would take a shared token are refused with
    /// [`RejectReason::StoreUnavailable`](crate::error::RejectReason::StoreUnavailable)
    /// (and [`wait`](crate::ThrottleManager::wait), which cannot refuse,
    /// waits until the store answers). For quotas that must never be
    /// exceeded, even by N processes each on its own.
    Refuse,
}
