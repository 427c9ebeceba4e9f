//! [`ThrottleManager`]: the facade that owns the key space and applies each
//! key's controls.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use dashmap::mapref::one::Ref;

use std::future::Future;
use std::task::Poll;

use tracing::Span;

use crate::builder::ThrottleManagerBuilder;
use crate::bulkhead::config::BulkheadSettings;
use crate::bulkhead::limiter::{Admission, Bulkhead, Waiting};
use crate::call::{CallError, CallFailure, Classifier, outcome_of};
use crate::clock::{Clock, Nanos, nanos};
use crate::error::{RateLimited, RejectReason, Rejected};
use crate::events;
use crate::key::KeyState;
use crate::metrics;
use crate::permit::{CallTimes, Outcome, Permit};
use crate::priority::{Priorities, Priority};
use crate::rate::ValidRateConfig;
use crate::rate::cell::{RateCell, Reservation};
use crate::rate::config::RateSettings;
use crate::registry::{Full, Registry};
use crate::throttle::config::ThrottleSettings;
use crate::throttle::window::{Count, ThrottleWindow};

pub(crate) type RatePerKey<K> = dyn Fn(&K) -> Option<ValidRateConfig> + Send + Sync;
pub(crate) type RandomSource = dyn Fn() -> f64 + Send + Sync;

/// What a key is doing, for a health endpoint: each field is `None` when
/// the manager does not have that control.
///
/// # Example
///
/// ```
/// use portcullis::{RateConfig, ThrottleManager};
///
/// let manager = ThrottleManager::<String>::builder().rate(RateConfig::new(10.0)).build()?;
/// manager.increment("api");
/// let status = manager.status("api").unwrap();
/// assert_eq!(status.rate, Some(10.5));
/// assert_eq!(status.active, None); // no bulkhead
/// # Ok::<(), portcullis::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
#[non_exhaustive]
pub struct KeyStatus {
    /// The key's current rate, in calls per second.
    pub rate: Option<f64>,
    /// Calls of the key in flight (holding a bulkhead slot).
    pub active: Option<u32>,
    /// Calls of the key waiting in its bulkhead's queue.
    pub queued: Option<u32>,
}

/// Everything a key's controls know, for a health endpoint or a dashboard:
/// `Serialize`, so it can be returned as JSON.
///
/// # Example
///
/// ```
/// use portcullis::{Priority, RateConfig, ThrottleConfig, ThrottleManager};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), portcullis::ConfigError> {
/// let manager = ThrottleManager::<String>::builder()
///     .rate(RateConfig::new(10.0).burst(2))
///     .throttle(ThrottleConfig::new())
///     .build()?;
/// manager.try_acquire("db", Priority::HIGH).unwrap().success();
/// manager.try_acquire("db", Priority::LOW).unwrap().failure();
/// let snapshot = manager.snapshot("db").unwrap();
/// assert_eq!(snapshot.priorities[0].requests, 1);
/// assert_eq!(snapshot.priorities[0].accepts, 1);
/// assert_eq!(snapshot.priorities[3].requests, 1);
/// assert_eq!(snapshot.priorities[3].rejection_probability, 1.0 / 61.0);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[non_exhaustive]
pub struct KeySnapshot {
    /// The key's current rate, in calls per second, if it has a rate.
    pub rate: Option<f64>,
    /// Calls in flight, if the key has a bulkhead.
    pub active: Option<u32>,
    /// Calls waiting in the bulkhead's queue, if the key has a bulkhead.
    pub queued: Option<u32>,
    /// Per priority level (index 0 is `Priority::HIGH`), the throttle's
    /// window; empty if the key has no throttle.
    pub priorities: Vec<PrioritySnapshot>,
}

/// One priority's view of a key's throttle window.
///
/// ```
/// # use portcullis::*;
/// let manager = ThrottleManager::<String>::builder().throttle(ThrottleConfig::new()).build()?;
/// manager.decrement("db");
/// let high = &manager.snapshot("db").unwrap().priorities[0];
/// assert_eq!((high.requests, high.accepts), (1, 0));
/// # Ok::<(), ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
#[non_exhaustive]
pub struct PrioritySnapshot {
    /// Calls of this priority counted over the window (shed ones included).
    pub requests: u64,
    /// Calls of this priority the backend accepted over the window.
    pub accepts: u64,
    /// The probability that a call of this priority is shed now.
    pub rejection_probability: f64,
}

/// Guards calls to many keys (hosts, users, tenants) at once: for each key it
/// sees, it lazily creates the controls configured (an adaptive rate, an
/// adaptive throttle, a bulkhead), which learn from the outcomes you report.
///
/// Clones share all state. Keys are looked up by their borrowed form: a
/// `ThrottleManager<String>` takes `&str`. Keys must be `Debug`: events and
/// per-key metrics name them.
///
/// # Example
///
/// ```
/// use portcullis::{RateConfig, ThrottleManager};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let manager = ThrottleManager::<String>::builder()
///     .rate(RateConfig::new(10.0).burst(5).bounds(1.0, 200.0).increment(2.0).decrement(1.0))
///     .build()?;
/// manager.wait("example.com").await; // before each call to example.com
/// let ok = true; // ... make the call ...
/// if ok {
///     manager.increment("example.com");
/// } else {
///     manager.decrement("example.com");
/// }
/// assert_eq!(manager.rate("example.com"), Some(12.0));
/// # Ok(())
/// # }
/// ```
pub struct ThrottleManager<K> {
    shared: Arc<Shared<K>>,
}

/// What all clones of a manager share.
pub(crate) struct Shared<K> {
    pub(crate) keys: Registry<K, KeyState>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) rate: Option<Policy<K, RateSettings>>,
    pub(crate) throttle: Option<Policy<K, ThrottleSettings>>,
    pub(crate) bulkhead: Option<Policy<K, BulkheadSettings>>,
    pub(crate) priorities: Priorities,
    /// `None`: the built-in per-thread generator.
    pub(crate) random: Option<Box<RandomSource>>,
    /// Judges unmarked errors of `call`; `None`: all neutral.
    pub(crate) classifier: Option<Box<Classifier>>,
    /// The default timeout of `call`.
    pub(crate) call_timeout: Option<Duration>,
    /// The longest pause `defer` accepts.
    pub(crate) max_defer: Duration,
    /// By priority level, the longest `acquire` and `call` wait for a rate
    /// token; `None`: no limit.
    pub(crate) max_wait: Box<[Option<Duration>]>,
    /// Whether metrics carry a `key` label.
    #[cfg(feature = "metrics")]
    pub(crate) metrics_per_key: bool,
}

/// Which settings of one control a new key gets: an exact override, or
/// (for the rate) what a function says, or the default. A key with none of
/// these does not have the control.
pub(crate) struct Policy<K, S> {
    pub(crate) default: Option<Arc<S>>,
    pub(crate) overrides: HashMap<K, Arc<S>, foldhash::fast::RandomState>,
    pub(crate) per_key: Option<Box<PerKey<K, S>>>,
}

pub(crate) type PerKey<K, S> = dyn Fn(&K) -> Option<Arc<S>> + Send + Sync;

/// How long a caller of `take_now` would wait for a rate token if it had to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Patience {
    /// `try_acquire`: not at all.
    Never,
    /// `acquire`: up to its priority's `max_wait`.
    UpToMaxWait,
}

impl<K: Hash + Eq, S> Policy<K, S> {
    pub(crate) fn new(default: Option<S>) -> Self {
        Self {
            default: default.map(Arc::new),
            overrides: HashMap::with_hasher(foldhash::fast::RandomState::default()),
            per_key: None,
        }
    }

    /// The settings of `key` if they are not the default; `None` means the
    /// default (which costs a key nothing to point at).
    fn settings_for(&self, key: &K) -> Option<Arc<S>> {
        if let Some(settings) = self.overrides.get(key) {
            return Some(Arc::clone(settings));
        }
        self.per_key.as_ref()?(key)
    }

    /// A key's own settings, else the default, if any.
    fn or_default<'s>(&'s self, own: Option<&'s S>) -> Option<&'s S> {
        own.or(self.default.as_deref())
    }
}

impl<K> Clone for ThrottleManager<K> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<K: Hash + Eq> fmt::Debug for ThrottleManager<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shared = &*self.shared;
        f.debug_struct("ThrottleManager")
            .field("keys", &shared.keys.len())
            .field("rate", &shared.rate.as_ref().map(|rate| &rate.default))
            .field("throttle", &shared.throttle.as_ref().map(|t| &t.default))
            .field("bulkhead", &shared.bulkhead.as_ref().map(|b| &b.default))
            .field("priorities", &shared.priorities)
            .field("clock", &shared.clock)
            .finish_non_exhaustive()
    }
}

impl<K> ThrottleManager<K>
where
    K: Hash + Eq + fmt::Debug + Send + Sync + 'static,
{
    pub(crate) fn from_shared(shared: Shared<K>) -> Self {
        Self {
            shared: Arc::new(shared),
        }
    }

    /// Starts configuring a manager.
    ///
    /// ```
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<u64>::builder().rate(RateConfig::new(5.0)).build()?;
    /// assert!(manager.is_empty());
    /// # Ok::<(), portcullis::ConfigError>(())
    /// ```
    pub fn builder() -> ThrottleManagerBuilder<K> {
        ThrottleManagerBuilder::new()
    }

    /// Waits until one call to `key` at `priority` may go through every
    /// control the manager has, and returns the permit for it.
    ///
    /// In order: the throttle decides at once whether to shed the call (a
    /// shed call is rejected without waiting: waiting would not make the
    /// backend healthier); then the rate makes it wait for its token, as
    /// [`wait`](Self::wait) does. A call the throttle sheds takes no rate
    /// token; a call that is still waiting for its token is not yet counted
    /// by the throttle. A call the throttle would shed whose token lies
    /// beyond its [`max_wait`](crate::ThrottleManagerBuilder::max_wait) is
    /// refused by the rate instead, and the throttle does not count it: it
    /// counts only calls that would otherwise have reached the backend. The
    /// task-local priority ([`with_priority`]), if set, replaces `priority`.
    ///
    /// [`with_priority`]: crate::with_priority
    ///
    /// # Errors
    ///
    /// [`Rejected`] with reason [`Throttled`](RejectReason::Throttled) or,
    /// under [`OutOfRange::Reject`](crate::OutOfRange::Reject),
    /// [`InvalidPriority`](RejectReason::InvalidPriority);
    /// [`RateLimited`](RejectReason::RateLimited) only when the manager has a
    /// [`max_wait`](crate::ThrottleManagerBuilder::max_wait) and the token is
    /// further ahead than that; the bulkhead's reasons with a bulkhead. A
    /// full key space is waited out, like the rate.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe. Dropped while waiting for its token, it takes no token
    /// (as [`wait`](Self::wait)) and the throttle counts nothing.
    ///
    /// # Panics
    ///
    /// Under [`OutOfRange::Panic`](crate::OutOfRange::Panic), for a priority
    /// out of range; and as [`wait`](Self::wait) does.
    ///
    /// ```
    /// use portcullis::{Priority, RateConfig, ThrottleConfig, ThrottleManager};
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::new(10.0))
    ///     .throttle(ThrottleConfig::new().ratio(2.0).min_rate(1.0).window(Duration::from_secs(60)))
    ///     .build()?;
    /// match manager.acquire("db-7", Priority::LOW).await {
    ///     Ok(permit) => {
    ///         // make the call, then report what happened:
    ///         permit.success(); // or permit.failure() for a capacity failure (429, 503, timeout)
    ///     }
    ///     Err(rejected) => {
    ///         let _why = rejected.reason();
    ///         let _hint = rejected.retry_after();
    ///     }
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire<Q>(&self, key: &Q, priority: Priority) -> Result<Permit<'_, K>, Rejected>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let acquired = self.acquire_uncounted(key, priority).await;
        self.count_admission(key, acquired)
    }

    /// `acquire` without counting it in the metrics.
    async fn acquire_uncounted<Q>(
        &self,
        key: &Q,
        priority: Priority,
    ) -> Result<Permit<'_, K>, Rejected>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        // A healthy key needs no waiting: the synchronous path first.
        let priority = match self.take_now(key, priority, Patience::UpToMaxWait) {
            Ok(permit) => return Ok(permit),
            // The priority the rejection carries is already resolved (task
            // priority, out-of-range policy): no need to resolve it again.
            Err(rejected) => match rejected.reason() {
                // A token beyond the call's `max_wait`: waiting will not help.
                RejectReason::RateLimited
                    if matches!(
                        (rejected.retry_after(), self.max_wait(rejected.priority())),
                        (Some(wait), Some(max_wait)) if wait > max_wait
                    ) =>
                {
                    return Err(rejected);
                }
                RejectReason::RateLimited | RejectReason::Full | RejectReason::KeySpaceFull => {
                    rejected.priority()
                }
                _ => return Err(rejected),
            },
        };
        // The throttle let the call through just now (a call it sheds never
        // gets here); deciding again would shed it twice over.
        let (state, span) = self.state_waiting_for_room(key).await;
        let now = self.now();
        // Turned away by the bulkhead anyway? Then before taking a token.
        if let Some((bulkhead, settings)) = self.bulkhead_of(&state) {
            if let Some(refusal) = bulkhead.would_refuse(settings, usize::from(priority.level())) {
                return Err(Rejected::bulkhead(refusal, priority));
            }
        }
        let scheduled = now;
        let (now, reservation) = self
            .take_token_waiting(&state, now, self.max_wait(priority))
            .await
            .map_err(|wait| Rejected::rate_limited(wait, priority))?;
        let label = self.key_label(key);
        let holds_slot = match self
            .take_slot_waiting(
                &state,
                priority,
                now,
                span.as_ref().unwrap_or(&Span::none()),
                label.as_deref(),
            )
            .await
        {
            Ok(holds_slot) => holds_slot,
            Err(rejected) => {
                // The call will not happen: its token goes back if it can.
                if let Some(reservation) = reservation {
                    state.rate.cancel(reservation);
                }
                return Err(rejected);
            }
        };
        let times = CallTimes {
            scheduled,
            started: now,
        };
        Ok(Permit::new(self, state, priority, times, holds_slot, span))
    }

    /// A manager configured entirely by `config` (see
    /// [`ThrottleManagerBuilder::config`] to add what a file cannot say,
    /// such as a classifier).
    ///
    /// # Errors
    ///
    /// A [`ConfigError`](crate::ConfigError) naming every problem by its
    /// path in the file, e.g.
    /// `overrides."api.github.com".bulkhead.max_concurrent: must be at least 1, got 0`.
    ///
    /// ```
    /// use portcullis::{ManagerConfig, ThrottleManager};
    ///
    /// let config: ManagerConfig = toml::from_str(r#"
    ///     [default.bulkhead]
    ///     max_concurrent = 8
    ///     [overrides."api.github.com".bulkhead]
    ///     max_concurrent = 0
    /// "#)?;
    /// let err = ThrottleManager::<String>::from_config(config).unwrap_err();
    /// assert_eq!(
    ///     err.problems()[0].to_string(),
    ///     r#"overrides."api.github.com".bulkhead.max_concurrent: must be at least 1, got 0"#
    /// );
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_config(config: crate::ManagerConfig) -> Result<Self, crate::ConfigError>
    where
        K: From<String> + fmt::Debug,
    {
        Self::builder().config(config).build()
    }

    /// Runs `call` under every control of `key`: acquires as
    /// [`acquire`](Self::acquire) does (waiting and queueing as configured),
    /// runs it, and reports its outcome. The recommended way to use the
    /// library.
    ///
    /// A success raises the key's rate and counts an accept. An error
    /// marked with [`overloaded`](crate::overloaded) lowers the rate and
    /// counts no accept; so does any error the manager's
    /// [classifier](crate::ThrottleManagerBuilder::classifier) calls
    /// [`Outcome::Overloaded`]; every other error is neutral (no shedding, the
    /// rate left alone). With a [call timeout](crate::ThrottleManagerBuilder::call_timeout),
    /// a call still running then is dropped and counted as a capacity
    /// failure: a hung call would otherwise hold its slot forever.
    ///
    /// # Errors
    ///
    /// [`CallError::Rejected`] when a control refused the call (it never
    /// ran), [`CallError::TimedOut`], or [`CallError::Inner`] with the
    /// call's own error.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe. Dropped while waiting, it takes nothing (as `acquire`);
    /// dropped while the call runs, the call is dropped with it and its slot
    /// freed, and the outcome counts as [`Outcome::Neutral`]: nothing is left
    /// held or half-recorded.
    ///
    /// ```
    /// use portcullis::{CallError, Priority, RateConfig, ThrottleManager, overloaded};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::new(10.0).increment(1.0).decrement(5.0))
    ///     .build()?;
    /// async fn fetch(status: u16) -> Result<String, std::io::Error> {
    ///     Ok(format!("status {status}"))
    /// }
    /// let body = manager
    ///     .call("api.example.com", Priority::MEDIUM, || async {
    ///         let body = fetch(200).await?; // any error converts
    ///         if body.contains("429") {
    ///             return Err(overloaded(std::io::Error::other(body)));
    ///         }
    ///         Ok(body)
    ///     })
    ///     .await?;
    /// assert_eq!(body, "status 200");
    /// assert_eq!(manager.rate("api.example.com"), Some(11.0));
    ///
    /// let failed = manager
    ///     .call("api.example.com", Priority::MEDIUM, || async {
    ///         Err::<String, _>(overloaded(std::io::Error::other("503")))
    ///     })
    ///     .await;
    /// assert!(matches!(failed, Err(CallError::Inner(_))));
    /// assert_eq!(manager.rate("api.example.com"), Some(6.0));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn call<Q, F, Fut, T, E>(
        &self,
        key: &Q,
        priority: Priority,
        call: F,
    ) -> Result<T, CallError<E>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: CallFailure,
    {
        self.call_within(key, priority, self.shared.call_timeout, call)
            .await
    }

    /// [`call`](Self::call) with its own timeout instead of the manager's.
    ///
    /// # Errors
    ///
    /// As [`call`](Self::call).
    ///
    /// # Cancel safety
    ///
    /// As [`call`](Self::call).
    ///
    /// ```
    /// use portcullis::{CallError, Priority, RateConfig, ThrottleManager};
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), portcullis::ConfigError> {
    /// let manager = ThrottleManager::<String>::builder().rate(RateConfig::new(10.0).decrement(5.0)).build()?;
    /// let hung = manager
    ///     .call_with_timeout("db", Priority::HIGH, Duration::from_secs(2), || async {
    ///         std::future::pending::<Result<(), std::io::Error>>().await
    ///     })
    ///     .await;
    /// assert!(matches!(hung, Err(CallError::TimedOut(_))));
    /// assert_eq!(manager.rate("db"), Some(5.0)); // a timeout is a capacity failure
    /// # Ok(())
    /// # }
    /// ```
    pub async fn call_with_timeout<Q, F, Fut, T, E>(
        &self,
        key: &Q,
        priority: Priority,
        timeout: Duration,
        call: F,
    ) -> Result<T, CallError<E>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: CallFailure,
    {
        self.call_within(key, priority, Some(timeout), call).await
    }

    /// [`call`](Self::call), and when it does not return a value, `fallback`
    /// instead: given the [`CallError`], whose
    /// [`is_local`](CallError::is_local) tells a local rejection from a
    /// failed call, it can degrade gracefully (a cached value, a default).
    ///
    /// # Errors
    ///
    /// Whatever `fallback` returns.
    ///
    /// # Cancel safety
    ///
    /// As [`call`](Self::call) while the call runs; the fallback is the
    /// caller's own code.
    ///
    /// ```
    /// use portcullis::{BulkheadConfig, Priority, ThrottleManager};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let manager = ThrottleManager::<String>::builder().bulkhead(BulkheadConfig::new(1)).build()?;
    /// let _busy = manager.try_acquire("recommendations", Priority::HIGH).unwrap();
    /// let shown = manager
    ///     .call_with_fallback(
    ///         "recommendations",
    ///         Priority::LOW,
    ///         || async { Ok::<_, std::io::Error>(vec!["fresh picks"]) },
    ///         |error| async move {
    ///             assert!(error.is_local()); // the bulkhead was full: nothing was sent
    ///             Ok(vec!["bestsellers"])
    ///         },
    ///     )
    ///     .await?;
    /// assert_eq!(shown, ["bestsellers"]);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn call_with_fallback<Q, F, Fut, T, E, G, GFut>(
        &self,
        key: &Q,
        priority: Priority,
        call: F,
        fallback: G,
    ) -> Result<T, CallError<E>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: CallFailure,
        G: FnOnce(CallError<E>) -> GFut,
        GFut: Future<Output = Result<T, CallError<E>>>,
    {
        match self.call(key, priority, call).await {
            Ok(value) => Ok(value),
            Err(error) => fallback(error).await,
        }
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
    /// assert_eq!(manager.check("api").unwrap_err().retry_after(), Duration::from_secs(30));
    /// let start = tokio::time::Instant::now();
    /// manager.wait("api").await;
    /// assert_eq!(start.elapsed(), Duration::from_secs(30));
    /// # Ok(())
    /// # }
    /// ```
    pub fn defer<Q>(&self, key: &Q, pause: Duration) -> Option<Duration>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let pause = pause.min(self.shared.max_defer);
        let now = self.now();
        let state = self.entry(key, now).ok()?;
        let settings = self.rate_of(&state)?;
        let until = now.saturating_add(nanos(pause));
        state.rate.pause_until(until, settings.burst);
        Some(pause)
    }

    async fn call_within<Q, F, Fut, T, E>(
        &self,
        key: &Q,
        priority: Priority,
        timeout: Option<Duration>,
        call: F,
    ) -> Result<T, CallError<E>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: CallFailure,
    {
        let permit = self.acquire(key, priority).await?;
        let result = match timeout {
            None => call().await,
            Some(timeout) => {
                let deadline = self.now().saturating_add(nanos(timeout));
                match self.before(deadline, call()).await {
                    Some(result) => result,
                    None => {
                        permit.report(Outcome::Overloaded);
                        return Err(CallError::TimedOut(timeout));
                    }
                }
            }
        };
        match &result {
            Ok(_) => permit.success(),
            Err(error) => permit.report(outcome_of(error, self.shared.classifier.as_deref())),
        }
        result.map_err(CallError::Inner)
    }

    /// Like [`acquire`](Self::acquire), but never waits: a call without a
    /// rate token now is rejected.
    ///
    /// # Errors
    ///
    /// [`Rejected`] with reason [`Throttled`](RejectReason::Throttled),
    /// [`RateLimited`](RejectReason::RateLimited) (with the time until the
    /// next token), [`KeySpaceFull`](RejectReason::KeySpaceFull), or
    /// [`InvalidPriority`](RejectReason::InvalidPriority). A rejected call
    /// leaves no trace in the controls that did not reject it.
    ///
    /// # Panics
    ///
    /// Under [`OutOfRange::Panic`](crate::OutOfRange::Panic), for a priority
    /// out of range.
    ///
    /// ```
    /// use portcullis::{Priority, RateConfig, RejectReason, ThrottleManager};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), portcullis::ConfigError> {
    /// let manager = ThrottleManager::<String>::builder().rate(RateConfig::new(2.0)).build()?;
    /// let permit = manager.try_acquire("api", Priority::MEDIUM).unwrap();
    /// permit.success();
    /// let rejected = manager.try_acquire("api", Priority::MEDIUM).unwrap_err();
    /// assert_eq!(rejected.reason(), RejectReason::RateLimited);
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_acquire<Q>(&self, key: &Q, priority: Priority) -> Result<Permit<'_, K>, Rejected>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let taken = self.take_now(key, priority, Patience::Never);
        self.count_admission(key, taken)
    }

    /// `try_acquire` without counting it in the metrics. `patience` says how
    /// long the caller would wait for a rate token, for the throttle's sake
    /// (see [`throttle_admits`](Self::throttle_admits)); this never waits.
    fn take_now<Q>(
        &self,
        key: &Q,
        priority: Priority,
        patience: Patience,
    ) -> Result<Permit<'_, K>, Rejected>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let priority = self.resolve(priority)?;
        let now = self.now();
        let entry = self.entry(key, now).map_err(|full| {
            Rejected::new(
                RejectReason::KeySpaceFull,
                priority,
                Some(Duration::from_nanos(full.retry_after)),
            )
        })?;
        let state: &KeyState = entry.value();
        self.throttle_admits(entry.key(), state, now, priority, patience)?;
        let holds_slot = match self.bulkhead_of(state) {
            Some((bulkhead, settings)) => {
                let active = bulkhead
                    .try_acquire(settings)
                    .map_err(|refusal| Rejected::bulkhead(refusal, priority))?;
                if active == settings.max_concurrent {
                    events::bulkhead_filled(entry.key(), priority, active);
                }
                true
            }
            None => false,
        };
        if let Some(settings) = self.rate_of(state) {
            if let Err(wait) = state.rate.check(now, settings.burst) {
                if let (true, Some(bulkhead)) = (holds_slot, state.bulkhead()) {
                    bulkhead.release();
                }
                return Err(Rejected::rate_limited(wait, priority));
            }
        }
        Ok(Permit::new(
            self,
            triomphe::Arc::clone(entry.value()),
            priority,
            CallTimes::at(now),
            holds_slot,
            events::key_span(entry.key()),
        ))
    }

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
    /// sleeps some other way ([`ManualClock`](crate::ManualClock) does).
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
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        if self.shared.rate.is_none() {
            return;
        }
        let (state, _) = self.state_waiting_for_room(key).await;
        let now = self.now();
        let _ = self.take_token_waiting(&state, now, None).await;
    }

    /// The calls of `key` in flight and waiting, and its rate: for a health
    /// endpoint. `None` if the key is not live. Does not create the key.
    ///
    /// ```
    /// use portcullis::{BulkheadConfig, Priority, RateConfig, ThrottleManager};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::new(100.0))
    ///     .bulkhead(BulkheadConfig::new(4))
    ///     .build()?;
    /// let _permit = manager.acquire("db", Priority::HIGH).await?;
    /// let status = manager.status("db").unwrap();
    /// assert_eq!((status.active, status.queued), (Some(1), Some(0)));
    /// assert_eq!(status.rate, Some(100.0));
    /// # Ok(())
    /// # }
    /// ```
    pub fn status<Q>(&self, key: &Q) -> Option<KeyStatus>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let state = self.shared.keys.get(key)?;
        Some(self.status_of(&state))
    }

    /// Calls `visit` with every live key and its [`KeyStatus`]. Holds each
    /// shard of the key space while visiting it: keep `visit` short.
    ///
    /// ```
    /// use portcullis::{BulkheadConfig, Priority, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder().bulkhead(BulkheadConfig::new(2)).build()?;
    /// let _a = manager.try_acquire("a", Priority::HIGH).unwrap();
    /// let mut busy = Vec::new();
    /// manager.for_each_status(|key, status| busy.push((key.clone(), status.active)));
    /// assert_eq!(busy, [("a".to_string(), Some(1))]);
    /// # Ok::<(), portcullis::ConfigError>(())
    /// ```
    pub fn for_each_status(&self, mut visit: impl FnMut(&K, KeyStatus)) {
        self.shared
            .keys
            .for_each(|key, state| visit(key, self.status_of(state)));
    }

    /// Everything `key`'s controls know now ([`KeySnapshot`]), or `None` if
    /// the key is not live. Does not create the key.
    ///
    /// ```
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder().rate(RateConfig::new(10.0)).build()?;
    /// assert!(manager.snapshot("api").is_none());
    /// manager.increment("api");
    /// assert_eq!(manager.snapshot("api").unwrap().rate, Some(10.5));
    /// # Ok::<(), portcullis::ConfigError>(())
    /// ```
    pub fn snapshot<Q>(&self, key: &Q) -> Option<KeySnapshot>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let state = self.shared.keys.get(key)?;
        Some(self.snapshot_of(&state))
    }

    /// Every live key with its [`KeySnapshot`], for a health endpoint.
    /// Visits the key space shard by shard; keys created or evicted
    /// meanwhile may or may not appear.
    ///
    /// ```
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder().rate(RateConfig::new(10.0)).build()?;
    /// manager.increment("a");
    /// manager.decrement("b");
    /// let mut rates: Vec<(String, Option<f64>)> =
    ///     manager.snapshots().map(|(key, snapshot)| (key, snapshot.rate)).collect();
    /// rates.sort_by(|a, b| a.0.cmp(&b.0));
    /// assert_eq!(rates, [("a".to_string(), Some(10.5)), ("b".to_string(), Some(5.0))]);
    /// # Ok::<(), portcullis::ConfigError>(())
    /// ```
    pub fn snapshots(&self) -> impl Iterator<Item = (K, KeySnapshot)>
    where
        K: Clone,
    {
        let mut all = Vec::with_capacity(self.len());
        self.shared
            .keys
            .for_each(|key, state| all.push((key.clone(), self.snapshot_of(state))));
        all.into_iter()
    }

    fn snapshot_of(&self, state: &KeyState) -> KeySnapshot {
        let status = self.status_of(state);
        let priorities = self
            .throttle_of(state)
            .map(|(window, settings)| {
                window
                    .report(self.now(), settings)
                    .into_iter()
                    .map(|(counts, probability)| PrioritySnapshot {
                        requests: counts.requests as u64,
                        accepts: counts.accepts as u64,
                        rejection_probability: probability,
                    })
                    .collect()
            })
            .unwrap_or_default();
        KeySnapshot {
            rate: status.rate,
            active: status.active,
            queued: status.queued,
            priorities,
        }
    }

    fn status_of(&self, state: &KeyState) -> KeyStatus {
        let load = state.bulkhead().map(|bulkhead| bulkhead.load());
        KeyStatus {
            rate: self.rate_of(state).map(|_| state.rate.rate()),
            active: load.map(|load| load.active),
            queued: load.map(|load| load.queued),
        }
    }

    /// Takes a token for one call to `key` if one is there now.
    ///
    /// # Errors
    ///
    /// [`RateLimited`] when the call may not start yet; it takes nothing and
    /// says how long until it could ([`RateLimited::retry_after`]), or that
    /// the key is new and the key space is full
    /// ([`RateLimited::key_space_full`]).
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
    pub fn check<Q>(&self, key: &Q) -> Result<(), RateLimited>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        if self.shared.rate.is_none() {
            return Ok(());
        }
        let now = self.now();
        let state = self
            .entry(key, now)
            .map_err(|full| RateLimited::full(Duration::from_nanos(full.retry_after)))?;
        let Some(settings) = self.rate_of(&state) else {
            return Ok(());
        };
        state
            .rate
            .check(now, settings.burst)
            .map_err(|wait| RateLimited::rate(Duration::from_nanos(wait)))
    }

    /// Reports a success: `key`'s rate rises by its increment, up to its
    /// upper bound, and its throttle counts a request and an accept (at the
    /// task's priority, else [`Priority::HIGH`]). For calls made with
    /// [`wait`](Self::wait); a [`Permit`] reports its own outcome. Returns the new rate, or `None` if the manager has no
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
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
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
    /// assert_eq!(manager.decrement("api"), Some(5.0)); // within the one-second cooldown
    /// # Ok::<(), portcullis::ConfigError>(())
    /// ```
    pub fn decrement<Q>(&self, key: &Q) -> Option<f64>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.report(key, Outcome::Overloaded)
    }

    /// What `increment` and `decrement` share: the outcome of a call made
    /// after `wait`, counted as a permit's would be.
    fn report<Q>(&self, key: &Q, outcome: Outcome) -> Option<f64>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let now = self.now();
        let state = self.entry(key, now).ok()?;
        let (span, label) = (events::key_span(state.key()), self.key_label(key));
        let priority = self.outcome_priority();
        let span = span.unwrap_or_else(Span::none);
        let times = CallTimes::at(now);
        self.record_outcome(&state, priority, times, outcome, &span, label.as_deref());
        self.rate_of(&state).map(|_| state.rate.rate())
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
    /// assert_eq!(manager.rate("api"), Some(10.5));
    /// # Ok::<(), portcullis::ConfigError>(())
    /// ```
    pub fn rate<Q>(&self, key: &Q) -> Option<f64>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let state = self.shared.keys.get(key)?;
        self.rate_of(&state).map(|_| state.rate.rate())
    }

    /// The probability that `key`'s throttle rejects a call at `priority`
    /// right now, or `None` if the manager has no throttle or the key is not
    /// live. Does not create the key.
    ///
    /// ```
    /// use portcullis::{Priority, ThrottleConfig, ThrottleManager};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), portcullis::ConfigError> {
    /// let manager = ThrottleManager::<String>::builder().throttle(ThrottleConfig::new()).build()?;
    /// for _ in 0..100 {
    ///     manager.decrement("db"); // 100 capacity failures
    /// }
    /// // 100 requests, 0 accepts, ratio 2, min_rate 1/s over 60 s: 100 / 160.
    /// assert_eq!(manager.rejection_probability("db", Priority::LOW), Some(0.625));
    /// # Ok(())
    /// # }
    /// ```
    pub fn rejection_probability<Q>(&self, key: &Q, priority: Priority) -> Option<f64>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let priority = self.shared.priorities.clamp(priority);
        let state = self.shared.keys.get(key)?;
        let (window, settings) = self.throttle_of(&state)?;
        Some(window.rejection(self.now(), usize::from(priority.level()), settings))
    }

    /// The number of live keys.
    ///
    /// ```
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder().rate(RateConfig::new(10.0)).build()?;
    /// manager.increment("a");
    /// manager.increment("b");
    /// assert_eq!(manager.len(), 2);
    /// # Ok::<(), portcullis::ConfigError>(())
    /// ```
    pub fn len(&self) -> usize {
        self.shared.keys.len()
    }

    /// True when no key is live.
    ///
    /// ```
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder().rate(RateConfig::new(10.0)).build()?;
    /// assert!(manager.is_empty());
    /// # Ok::<(), portcullis::ConfigError>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets every key that has been quiet for the idle TTL now, instead of
    /// waiting for the next new key to trigger a sweep. Returns how many keys
    /// went. Does nothing without an idle TTL.
    ///
    /// ```
    /// use portcullis::{ManualClock, RateConfig, ThrottleManager};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::new(10.0))
    ///     .idle_ttl(Duration::from_secs(60))
    ///     .clock(clock.clone())
    ///     .build()?;
    /// manager.check("api").unwrap();
    /// clock.advance(Duration::from_secs(61));
    /// assert_eq!(manager.evict_idle(), 1);
    /// assert!(manager.is_empty());
    /// # Ok::<(), portcullis::ConfigError>(())
    /// ```
    pub fn evict_idle(&self) -> usize {
        self.shared.keys.evict_idle(self.now())
    }

    /// Counts the outcome of a call scheduled and admitted at `times`. The
    /// throttle counts a call when its outcome is known: a call still in
    /// flight is not yet a request, so a healthy call costs it one
    /// `fetch_add`.
    pub(crate) fn record_outcome(
        &self,
        state: &KeyState,
        priority: Priority,
        times: CallTimes,
        outcome: Outcome,
        span: &Span,
        label: Option<&str>,
    ) {
        metrics::outcome(label, outcome);
        match outcome {
            Outcome::Success => {
                // The window puts the count in its newest bucket, and a rate
                // at its upper bound does not change: a healthy key's success
                // reads no clock.
                self.count(state, times.started, priority, Count::Accepted);
                if let Some(settings) = self.rate_of(state) {
                    let change = state
                        .rate
                        .increase(|| self.now(), times.scheduled, settings);
                    events::rate_changed(span, change);
                    if change.from != change.to {
                        metrics::rate(label, change.to);
                    }
                }
            }
            Outcome::Overloaded => {
                let now = self.now();
                self.count(state, now, priority, Count::Request);
                if let Some(settings) = self.rate_of(state) {
                    let change = state.rate.decrease(now, times.scheduled, settings);
                    events::rate_changed(span, change);
                    metrics::rate(label, change.to);
                }
            }
            Outcome::Neutral => self.count(state, times.started, priority, Count::Accepted),
        }
    }

    fn now(&self) -> Nanos {
        self.shared.clock.now_nanos()
    }

    /// The priority a call is judged at, or the rejection for it.
    fn resolve(&self, asked: Priority) -> Result<Priority, Rejected> {
        self.shared
            .priorities
            .resolve(asked)
            .ok_or_else(|| Rejected::new(RejectReason::InvalidPriority, asked, None))
    }

    /// The longest a call at `priority` (resolved) waits for its token.
    fn max_wait(&self, priority: Priority) -> Option<Duration> {
        let levels = &self.shared.max_wait;
        levels[usize::from(priority.level()).min(levels.len() - 1)]
    }

    /// The priority that [`increment`](Self::increment) and
    /// [`decrement`](Self::decrement) count at.
    fn outcome_priority(&self) -> Priority {
        let asked = Priority::current().unwrap_or(Priority::HIGH);
        self.shared.priorities.clamp(asked)
    }

    /// Whether the throttle lets a call through; a shed call is counted as a
    /// request, as in the SRE book.
    ///
    /// A call the throttle would shed, but whose rate token lies further
    /// ahead than the caller would wait (`patience`), is
    /// refused by the rate instead and not counted: the throttle counts the
    /// calls that would otherwise have gone to the backend. Otherwise, while
    /// a rate at its lower bound turns most calls away, every one the
    /// throttle shed first would count as a request the backend did not
    /// accept, and keep the throttle shedding long after the backend has
    /// recovered. Only the shedding path reads the rate.
    fn throttle_admits(
        &self,
        key: &K,
        state: &KeyState,
        now: Nanos,
        priority: Priority,
        patience: Patience,
    ) -> Result<(), Rejected> {
        let Some((window, settings)) = self.throttle_of(state) else {
            return Ok(());
        };
        let level = usize::from(priority.level());
        let probability = window.rejection(now, level, settings);
        if probability > 0.0 && self.draw() < probability {
            if let Some(rate) = self.rate_of(state) {
                let wait = state.rate.wait(now, rate.burst);
                let patience = match patience {
                    Patience::Never => 0,
                    Patience::UpToMaxWait => self.max_wait(priority).map_or(Nanos::MAX, nanos),
                };
                if wait > patience {
                    return Err(Rejected::rate_limited(wait, priority));
                }
            }
            window.record(now, level, Count::Request, settings);
            if window.note_shedding(true) {
                events::shedding(key, priority, probability, true);
            }
            return Err(Rejected::new(RejectReason::Throttled, priority, None));
        }
        if probability == 0.0 && window.note_shedding(false) {
            events::shedding(key, priority, probability, false);
        }
        Ok(())
    }

    fn count(&self, state: &KeyState, now: Nanos, priority: Priority, count: Count) {
        if let Some((window, settings)) = self.throttle_of(state) {
            window.record(now, usize::from(priority.level()), count, settings);
        }
    }

    /// `future`'s output, or `None` if the clock reaches `deadline` first
    /// (then `future` is dropped unfinished).
    async fn before<F: Future>(&self, deadline: Nanos, future: F) -> Option<F::Output> {
        let mut timer = self
            .shared
            .clock
            .sleep_until(Duration::from_nanos(deadline));
        let mut future = std::pin::pin!(future);
        std::future::poll_fn(|cx| {
            if let Poll::Ready(output) = future.as_mut().poll(cx) {
                return Poll::Ready(Some(output));
            }
            timer.as_mut().poll(cx).map(|()| None)
        })
        .await
    }

    /// The key's metrics label: only with feature `metrics` and
    /// `metrics_per_key`, else `None` (and no work).
    #[allow(clippy::unused_self)]
    fn key_label<Q>(&self, key: &Q) -> Option<String>
    where
        K: Borrow<Q>,
        Q: ToOwned<Owned = K> + ?Sized,
    {
        #[cfg(feature = "metrics")]
        if self.shared.metrics_per_key {
            return Some(format!("{:?}", key.to_owned()));
        }
        let _ = key;
        None
    }

    /// Counts an admission or a rejection; gives the permit its label.
    #[inline]
    fn count_admission<'m, Q>(
        &'m self,
        key: &Q,
        result: Result<Permit<'m, K>, Rejected>,
    ) -> Result<Permit<'m, K>, Rejected>
    where
        K: Borrow<Q>,
        Q: ToOwned<Owned = K> + ?Sized,
    {
        let label = self.key_label(key);
        match result {
            Ok(permit) => {
                metrics::admitted(label.as_deref());
                Ok(permit.counted(label))
            }
            Err(rejected) => {
                metrics::rejected(label.as_deref(), rejected.reason());
                Err(rejected)
            }
        }
    }

    /// The key's rate settings, if the key has a rate.
    fn rate_of<'s>(&'s self, state: &'s KeyState) -> Option<&'s RateSettings> {
        self.shared.rate.as_ref()?.or_default(state.rate_settings())
    }

    /// The key's throttle window and its settings, if the key has a
    /// throttle.
    fn throttle_of<'s>(
        &'s self,
        state: &'s KeyState,
    ) -> Option<(&'s ThrottleWindow, &'s ThrottleSettings)> {
        let policy = self.shared.throttle.as_ref()?;
        Some((
            state.throttle()?,
            policy.or_default(state.throttle_settings())?,
        ))
    }

    /// The key's bulkhead and its settings, if the key has a bulkhead.
    fn bulkhead_of<'s>(
        &'s self,
        state: &'s KeyState,
    ) -> Option<(&'s Bulkhead, &'s BulkheadSettings)> {
        let policy = self.shared.bulkhead.as_ref()?;
        Some((
            state.bulkhead()?,
            policy.or_default(state.bulkhead_settings())?,
        ))
    }

    fn draw(&self) -> f64 {
        match &self.shared.random {
            Some(random) => random(),
            None => crate::throttle::random_unit(),
        }
    }

    fn entry<Q>(&self, key: &Q, now: Nanos) -> Result<Ref<'_, K, triomphe::Arc<KeyState>>, Full>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let shared = &*self.shared;
        shared.keys.get_or_insert_with(key, now, |key| {
            let rate_settings = shared.rate.as_ref().and_then(|rate| rate.settings_for(key));
            let starting = shared
                .rate
                .as_ref()
                .and_then(|rate| rate.or_default(rate_settings.as_deref()));
            // A key has a throttle or a bulkhead when it has settings for it:
            // its own, or the default.
            let throttle = shared.throttle.as_ref().and_then(|policy| {
                let own = policy.settings_for(key);
                let settings = policy.or_default(own.as_deref())?;
                let window = ThrottleWindow::new(shared.priorities.levels, now, settings);
                Some((window, own))
            });
            let bulkhead = shared.bulkhead.as_ref().and_then(|policy| {
                let own = policy.settings_for(key);
                policy.or_default(own.as_deref())?;
                Some((Bulkhead::default(), own))
            });
            KeyState::new(
                RateCell::new(starting.map_or(1.0, |s| s.starting_rate), now),
                rate_settings,
                throttle,
                bulkhead,
            )
        })
    }

    /// The state of `key`, waiting for room in a full key space.
    async fn state_waiting_for_room<Q>(&self, key: &Q) -> (triomphe::Arc<KeyState>, Option<Span>)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        loop {
            let now = self.now();
            match self.entry(key, now) {
                Ok(state) => {
                    return (
                        triomphe::Arc::clone(state.value()),
                        events::key_span(state.key()),
                    );
                }
                Err(full) => {
                    let retry_at = now.saturating_add(full.retry_after);
                    self.shared
                        .clock
                        .sleep_until(Duration::from_nanos(retry_at))
                        .await;
                }
            }
        }
    }

    /// Takes the key's next rate token and sleeps until it is due; returns
    /// the time the call may start, and the token. Without a rate, returns
    /// `now` and no token.
    ///
    /// With a `max_wait`, a token further ahead is not taken: the answer is
    /// the wait it would have been.
    async fn take_token_waiting(
        &self,
        state: &KeyState,
        now: Nanos,
        max_wait: Option<Duration>,
    ) -> Result<(Nanos, Option<Reservation>), Nanos> {
        let Some(settings) = self.rate_of(state) else {
            return Ok((now, None));
        };
        let max_wait = max_wait.map_or(Nanos::MAX, nanos);
        let reservation = state.rate.reserve(now, settings.burst, max_wait)?;
        if reservation.slot.start <= now {
            return Ok((now, Some(reservation)));
        }
        let pending = PendingWait {
            state,
            reservation: Some(reservation),
        };
        self.shared
            .clock
            .sleep_until(Duration::from_nanos(reservation.slot.start))
            .await;
        pending.started();
        Ok((reservation.slot.start, Some(reservation)))
    }

    /// Takes a slot of the key's bulkhead, waiting in its queue as
    /// configured. `Ok(false)` without a bulkhead.
    async fn take_slot_waiting(
        &self,
        state: &KeyState,
        priority: Priority,
        now: Nanos,
        span: &Span,
        label: Option<&str>,
    ) -> Result<bool, Rejected> {
        let Some((bulkhead, settings)) = self.bulkhead_of(state) else {
            return Ok(false);
        };
        let level = usize::from(priority.level());
        let levels = usize::from(self.shared.priorities.levels);
        let refused = |refusal| Rejected::bulkhead(refusal, priority);
        let id = match bulkhead.enter(settings, level, levels).map_err(refused)? {
            Admission::Granted => return Ok(true),
            Admission::Queued(id) => id,
        };
        let _queued = metrics::Queued::enter(label);
        let mut waiting = Waiting::new(bulkhead, level, id);
        let Some(timeout) = settings.queue_timeout else {
            return (&mut waiting).await.map(|()| true).map_err(refused);
        };
        match self.before(now.saturating_add(timeout), &mut waiting).await {
            Some(outcome) => outcome.map(|()| true).map_err(refused),
            None => waiting
                .give_up(RejectReason::QueueTimeout)
                .map(|()| true)
                .map_err(|refusal| {
                    events::queue_timed_out(span, priority, refusal.load);
                    refused(refusal)
                }),
        }
    }
}

/// A token taken for a call that has not started: if dropped before it
/// starts, hands the token back.
struct PendingWait<'a> {
    state: &'a KeyState,
    reservation: Option<Reservation>,
}

impl PendingWait<'_> {
    fn started(mut self) {
        self.reservation = None;
    }
}

impl Drop for PendingWait<'_> {
    fn drop(&mut self) {
        if let Some(reservation) = self.reservation.take() {
            self.state.rate.cancel(reservation);
        }
    }
}
