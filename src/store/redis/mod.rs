//! [`RedisStore`]: each key's rate in Redis (feature `redis`).
//!
//! Each decision is one round trip: a Lua script on the server runs the
//! same GCRA as the local rate cell (same burst, same `max_wait`, same
//! hand-back of a cancelled wait's token), reading the time from Redis's
//! `TIME`, so the processes' clocks do not matter. Each outcome is one more
//! script, which moves the shared rate by the same rules as locally:
//! additive increase while the rate is what limits the key's calls,
//! decrease with its cooldown, outcomes of calls scheduled before the last
//! decrease left out, bounds, and the bucket's debt kept across a change.
//! Scripts go by hash, loaded again when the server does not know them;
//! each touches one Redis key (so on Redis Cluster,
//! [`connect_cluster`](RedisStore::connect_cluster), it runs on the node
//! of that key's slot), which expires once the key has been idle for the
//! store's [`idle_ttl`](RedisStore::idle_ttl) and owes nothing. The one
//! exception decides a metered call's named limits
//! ([`take_limits`](RateStore::take_limits)): every limit of one key at
//! once, each limit's bucket `{prefix:name}#limit`, the rate's key a hash
//! tag that puts them in one slot. The
//! scripts write after reading `TIME`, which needs Redis 5 or later
//! (script effects replication); the store checks the version when it is
//! made.
//!
//! Each script checks what it reads from its key before it uses it (see
//! [what a store reads](crate::store#what-a-store-reads)): a key that is
//! not a hash, or a field that holds no usable number, is deleted and
//! read as missing, a rate out of the caller's bounds is clamped, a debt
//! beyond what a bucket can owe is cut; the script then says so, and the
//! store writes a `warn` event with the key's `store_key`.
//!
//! # When Redis is unreachable or slow
//!
//! Every round trip has a [`deadline`](RedisStore::deadline). A round trip
//! that fails or misses it marks the store unavailable for
//! [`recheck_every`](RedisStore::recheck_every) (a `warn` event says so),
//! and meanwhile, by default, each key falls back to its local rate: each
//! process limits itself alone, from the rate its own outcomes taught it.
//! The first round trip that succeeds after that returns every key to the
//! shared rate (an `info` event). With
//! [`WhenUnavailable::Refuse`] calls are refused instead, with
//! [`RejectReason::StoreUnavailable`](crate::error::RejectReason::StoreUnavailable).
//!
//! # Processes that share a prefix
//!
//! They should share the rate's config. Each decision and outcome carries
//! the config of the process that sends it: the starting rate applies to a
//! key Redis has no state for, and the bounds and steps to that outcome.
//! Keys from untrusted input (client addresses behind the server layer)
//! cost Redis one small hash each until they have been idle for the
//! store's `idle_ttl`.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

pub use connection::ConnectError;
use connection::Connection;

use super::{
    LimitRequest, LimitsAnswer, RateEvent, RateRules, RateStore, StoreFuture, TokenAnswer,
    TokenReceipt, TokenRequest, WhenUnavailable,
};
use crate::clock::Nanos;

mod connection;
mod limits;
mod scripts;

/// Each key's rate shared through Redis; see [`store`](crate::store) for
/// what is shared and which calls use it, and this module for the scripts
/// and what happens when Redis is down.
///
/// # Example
///
/// ```no_run
/// use portcullis::store::RedisStore;
/// use portcullis::{RateConfig, ThrottleManager};
/// use std::time::Duration;
///
/// # async fn shared() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// let store = RedisStore::connect("redis://127.0.0.1:6379/", "crawler")
///     .await?
///     .deadline(Duration::from_millis(20));
/// let manager = ThrottleManager::<String>::builder()
///     .rate(RateConfig::adaptive(10.0))
///     .rate_store(store)
///     .build()?;
/// manager.wait("example.com").await?; // one round trip to Redis
/// manager.increment("example.com"); // sent in the background
/// # Ok(())
/// # }
/// ```
pub struct RedisStore {
    connection: Connection,
    prefix: String,
    settings: StoreSettings,
    scripts: scripts::Scripts,
    health: Health,
}

/// How a store behaves: its deadlines and what it does without Redis.
#[derive(Debug, Clone, Copy)]
struct StoreSettings {
    deadline: Duration,
    when_unavailable: WhenUnavailable,
    recheck_every: Duration,
    idle_ttl: Duration,
}

/// The default [`RedisStore::deadline`].
const DEFAULT_DEADLINE: Duration = Duration::from_millis(50);
/// The default [`RedisStore::recheck_every`].
const DEFAULT_RECHECK: Duration = Duration::from_secs(1);
/// The default [`RedisStore::idle_ttl`].
const DEFAULT_IDLE_TTL: Duration = Duration::from_secs(600);

impl RedisStore {
    /// How long one round trip may take (default 50 ms); one that takes
    /// longer counts as Redis being unavailable. Must be above 0 (the
    /// builder says so otherwise).
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), portcullis::store::ConnectError> {
    /// use portcullis::store::RedisStore;
    /// use std::time::Duration;
    ///
    /// let store = RedisStore::connect("redis://127.0.0.1/", "api")
    ///     .await?
    ///     .deadline(Duration::from_millis(10));
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.settings.deadline = deadline;
        self
    }

    /// What calls get while Redis is unavailable (default: the local rate).
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), portcullis::store::ConnectError> {
    /// use portcullis::store::{RedisStore, WhenUnavailable};
    ///
    /// let store = RedisStore::connect("redis://127.0.0.1/", "quota")
    ///     .await?
    ///     .when_unavailable(WhenUnavailable::Refuse);
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn when_unavailable(mut self, policy: WhenUnavailable) -> Self {
        self.settings.when_unavailable = policy;
        self
    }

    /// Once a round trip has failed, how long calls go without asking Redis
    /// (default 1 s), so that each does not pay the deadline; the first
    /// call after it asks again. Must be above 0.
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), portcullis::store::ConnectError> {
    /// use portcullis::store::RedisStore;
    /// use std::time::Duration;
    ///
    /// let store = RedisStore::connect("redis://127.0.0.1/", "api")
    ///     .await?
    ///     .recheck_every(Duration::from_millis(250));
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn recheck_every(mut self, every: Duration) -> Self {
        self.settings.recheck_every = every;
        self
    }

    /// How long Redis keeps a key's shared state once the key is idle and
    /// its bucket owes nothing (default 10 minutes), or up to half as long
    /// again (a decision moves the key's expiry only when it falls short,
    /// which spares a busy key a write); after that the key starts again
    /// from its starting rate, as an evicted local key does. At least 1 s.
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), portcullis::store::ConnectError> {
    /// use portcullis::store::RedisStore;
    /// use std::time::Duration;
    ///
    /// let store = RedisStore::connect("redis://127.0.0.1/", "api")
    ///     .await?
    ///     .idle_ttl(Duration::from_secs(3600));
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn idle_ttl(mut self, ttl: Duration) -> Self {
        self.settings.idle_ttl = ttl;
        self
    }

    /// The prefix of every Redis key this store writes.
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), portcullis::store::ConnectError> {
    /// use portcullis::store::RedisStore;
    ///
    /// let store = RedisStore::connect("redis://127.0.0.1/", "crawler").await?;
    /// assert_eq!(store.prefix(), "crawler");
    /// # Ok(()) }
    /// ```
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Forgets the shared state of the manager's key `key`: the next call
    /// of any process starts it afresh, at the starting rate with a full
    /// burst (redis_rate's `Reset`). Each manager's local state for the key
    /// (its fallback while Redis is away) is its own, and stays. Whether
    /// Redis held state for it.
    ///
    /// # Errors
    ///
    /// Redis's error, when the round trip fails.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropped before Redis has the command, nothing changes;
    /// after, the state is forgotten all the same.
    ///
    /// ```no_run
    /// # async fn f(store: portcullis::store::RedisStore) -> redis::RedisResult<()> {
    /// // The tenant's quota was changed: let it start afresh.
    /// let existed: bool = store.reset("tenant-a").await?;
    /// # let _ = existed;
    /// # Ok(()) }
    /// ```
    pub async fn reset(&self, key: &str) -> redis::RedisResult<bool> {
        let mut connection = self.connection.clone();
        let removed: u32 = redis::cmd("DEL")
            .arg(self.redis_key(key))
            .query_async(&mut connection)
            .await?;
        Ok(removed > 0)
    }

    /// What Redis holds for the manager's key `key`, changing nothing: its
    /// shared rate, and how long until its bucket is full again; `None` if
    /// Redis holds no usable state for it (never called, idle past its
    /// [`idle_ttl`](Self::idle_ttl), [reset](Self::reset), or holding what
    /// is no rate, which the next call replaces: see
    /// [what a store reads](crate::store#what-a-store-reads)). A rate out
    /// of a key's bounds is shown as stored (a look knows no bounds) until
    /// the next call clamps it.
    ///
    /// # Errors
    ///
    /// Redis's error, when the round trip fails.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: it changes nothing.
    ///
    /// ```no_run
    /// # async fn f(store: portcullis::store::RedisStore) -> redis::RedisResult<()> {
    /// if let Some(shared) = store.peek("example.com").await? {
    ///     println!("{:.1}/s, {} of a burst of 10 left", shared.rate, shared.remaining(10));
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn peek(&self, key: &str) -> redis::RedisResult<Option<SharedRate>> {
        self.look(self.redis_key(key)).await
    }

    /// `event` applied to the bucket at `key` while Redis is worth asking:
    /// the rate after it.
    async fn report_to(
        &self,
        key: RedisKey<'_>,
        event: RateEvent,
        rules: RateRules,
    ) -> Option<f64> {
        if !self.health.worth_asking() {
            return None;
        }
        self.send(key, &event, &rules, None).await
    }

    /// The Redis key of the manager's key named `name`.
    fn redis_key<'a>(&'a self, name: &'a str) -> RedisKey<'a> {
        RedisKey {
            prefix: &self.prefix,
            name,
            limit: None,
        }
    }
}

/// A Redis key as the store names it, written straight into the command
/// that carries it (no string of its own): `prefix:name` for a key's rate,
/// `{prefix:name}#limit` for its named limit `limit` (`limits.rs`).
#[derive(Debug, Clone, Copy)]
struct RedisKey<'a> {
    prefix: &'a str,
    name: &'a str,
    limit: Option<&'a str>,
}

impl fmt::Display for RedisKey<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.limit {
            None => write!(f, "{}:{}", self.prefix, self.name),
            Some(limit) => write!(f, "{{{}:{}}}#{limit}", self.prefix, self.name),
        }
    }
}

impl redis::ToRedisArgs for RedisKey<'_> {
    fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
        use std::io::Write as _;
        let mut arg = out.writer_for_next_arg();
        // Writing into the command's buffer, which cannot fail.
        let _ = match self.limit {
            None => arg
                .write_all(self.prefix.as_bytes())
                .and_then(|()| arg.write_all(b":"))
                .and_then(|()| arg.write_all(self.name.as_bytes())),
            Some(_) => arg.write_all(self.to_string().as_bytes()),
        };
    }
}

impl RateStore for RedisStore {
    fn take_token<'a>(
        &'a self,
        key: &'a str,
        request: TokenRequest,
    ) -> StoreFuture<'a, TokenAnswer> {
        Box::pin(async move {
            let max_wait = request.max_wait.map(crate::clock::nanos);
            self.decide(
                self.redis_key(key),
                &request.rules,
                request.cost,
                max_wait,
                None,
            )
            .await
        })
    }

    fn report<'a>(
        &'a self,
        key: &'a str,
        event: RateEvent,
        rules: RateRules,
    ) -> StoreFuture<'a, Option<f64>> {
        Box::pin(self.report_to(self.redis_key(key), event, rules))
    }

    fn take_limits<'a>(
        &'a self,
        key: &'a str,
        limits: &'a [LimitRequest<'a>],
    ) -> StoreFuture<'a, LimitsAnswer> {
        Box::pin(self.take_limits_of(key, limits, None))
    }

    fn report_limit<'a>(
        &'a self,
        key: &'a str,
        limit: &'a str,
        event: RateEvent,
        rules: RateRules,
    ) -> StoreFuture<'a, Option<f64>> {
        // A limit's bucket keeps a rate's fields: the outcome script moves
        // it as it moves a key's rate.
        Box::pin(self.report_to(self.part_key(key, limit), event, rules))
    }

    fn settle_limit<'a>(
        &'a self,
        key: &'a str,
        limit: LimitRequest<'a>,
        more: i64,
        mark: &'a TokenReceipt,
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            self.settle_limit_of(key, &limit, more, mark, None).await;
        })
    }

    fn when_unavailable(&self) -> WhenUnavailable {
        self.settings.when_unavailable
    }

    fn is_available(&self) -> bool {
        self.health.is_up()
    }

    fn invalid_settings(&self) -> Vec<(&'static str, String)> {
        let mut found = Vec::new();
        let s = &self.settings;
        if s.deadline.is_zero() {
            found.push(("deadline", "must be above 0, got 0ns".to_owned()));
        }
        if s.recheck_every.is_zero() {
            found.push(("recheck_every", "must be above 0, got 0ns".to_owned()));
        }
        if s.idle_ttl < Duration::from_secs(1) {
            found.push((
                "idle_ttl",
                format!("must be at least 1s, got {:?}", s.idle_ttl),
            ));
        }
        found
    }
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.prefix)
            .field("settings", &self.settings)
            .field("available", &self.health.is_up())
            .finish_non_exhaustive()
    }
}

/// A key's shared state in Redis, from [`RedisStore::peek`].
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct SharedRate {
    /// The key's shared rate, in calls a second.
    pub rate: f64,
    /// How long until its bucket is full again (zero: it is full).
    pub full_in: Duration,
}

impl SharedRate {
    /// How many calls could start at once now, for a key whose burst is
    /// `burst` (the rate's [`RateConfig::burst`](crate::RateConfig::burst)):
    /// the burst less the calls' worth of debt still to clear.
    ///
    /// ```
    /// use portcullis::store::SharedRate;
    /// # fn f(shared: SharedRate) {
    /// let left = shared.remaining(20);
    /// # let _ = left; }
    /// ```
    pub fn remaining(&self, burst: u32) -> u32 {
        let owed = (self.full_in.as_secs_f64() * self.rate).ceil();
        (f64::from(burst) - owed).clamp(0.0, f64::from(burst)) as u32
    }
}

/// Whether Redis answers: up, or down until a time after which the next
/// call asks again. The time is on the store's own clock, made as a
/// manager's default is ([`default_clock`](crate::clock::default_clock):
/// tokio's under paused time, so tests move it): one store may serve
/// several managers, each with a clock of its own.
#[derive(Debug)]
struct Health {
    clock: std::sync::Arc<dyn crate::clock::Clock>,
    /// 0: up; else one more than the time until which calls do not ask.
    down_until: AtomicU64,
}

impl Default for Health {
    fn default() -> Self {
        Self {
            clock: crate::clock::default_clock(),
            down_until: AtomicU64::new(0),
        }
    }
}

impl Health {
    fn now(&self) -> Nanos {
        self.clock.now_nanos()
    }

    fn is_up(&self) -> bool {
        self.down_until.load(Ordering::Acquire) == 0
    }

    /// Whether a call now should ask Redis.
    fn worth_asking(&self) -> bool {
        let down = self.down_until.load(Ordering::Acquire);
        down == 0 || self.now() >= down - 1
    }

    /// A round trip failed; `true` if the store was up until then.
    fn failed(&self, recheck: Duration) -> bool {
        let until = self
            .now()
            .saturating_add(crate::clock::nanos(recheck))
            .saturating_add(1);
        self.down_until.swap(until, Ordering::AcqRel) == 0
    }

    /// A round trip succeeded; `true` if the store was down until then.
    fn answered(&self) -> bool {
        self.down_until.load(Ordering::Acquire) != 0
            && self.down_until.swap(0, Ordering::AcqRel) != 0
    }
}

/// The rate store stopped answering (at `warn`: every key of every
/// manager on the store is affected until it answers again).
fn unavailable_event(prefix: &str, problem: &str, fallback: bool) {
    if fallback {
        tracing::warn!(
            prefix,
            problem,
            "rate store unavailable: each key falls back to its local rate"
        );
    } else {
        tracing::warn!(
            prefix,
            problem,
            "rate store unavailable: calls that need it are refused"
        );
    }
}

/// The rate store answers again: keys are back on their shared rates.
fn restored_event(prefix: &str) {
    tracing::info!(
        prefix,
        "rate store available again: keys use their shared rates"
    );
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod health_tests {
    use super::Health;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn a_failed_store_is_down_and_asked_again_exactly_after_the_recheck() {
        let health = Health::default();
        assert!(health.is_up() && health.worth_asking());
        assert!(health.failed(Duration::from_millis(250)), "was up");
        assert!(!health.is_up());
        tokio::time::advance(Duration::from_millis(250) - Duration::from_nanos(1)).await;
        assert!(!health.worth_asking(), "asked before the recheck");
        tokio::time::advance(Duration::from_nanos(1)).await;
        assert!(health.worth_asking(), "not asked at the recheck");
        assert!(!health.is_up(), "down until it answers");
        assert!(health.answered(), "was down");
        assert!(health.is_up() && !health.answered());
    }
}
