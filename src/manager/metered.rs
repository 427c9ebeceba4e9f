//! Calls to a metered API: a key's named limits beside its rate
//! ([`limit`](crate::builder::ThrottleManagerBuilder::limit)), a call's [`Cost`] in
//! each, and `acquire_cost`, which admits the call once every limit has
//! room for it.
//!
//! Each named limit is a manager of its own with a rate alone, on this
//! manager's clock and key space bounds, keyed by the same keys: its keys
//! are made, evicted, overridden and inspected as any manager's are
//! ([`limit`](ThrottleManager::limit) hands it out).

use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use super::ThrottleManager;
use super::withheld::WithheldRoom;
use crate::clock::{Nanos, nanos};
use crate::core::{Admitted, Admitting, Patience, Request, Scope, StartBy};
use crate::error::{RejectReason, Rejected};
use crate::metered::{Cost, CostPermit, LimitPart, NamedParts, REQUESTS, SharedLimits};
use crate::permit::{Permit, Ticket};
use crate::priority::Priority;
use crate::rate::{TakeMark, interval};
use crate::registry::BorrowedKey;
use crate::store::{LimitRequest, LimitsAnswer};

/// One of a manager's named limits: its name, and the manager that keeps
/// it for every key.
pub(crate) struct NamedLimit<K> {
    pub(crate) name: Arc<str>,
    pub(crate) manager: ThrottleManager<K>,
}

/// What one named limit took of a call, until the call is admitted (then
/// given back if dropped).
struct LimitTaken<'m> {
    /// The burst the call withheld as its key's first of the limit. Before
    /// `admitting`, so that a dropped part gives it back first: it lies
    /// before the call's own tokens (see `NamedParts::unsent`).
    withheld: Option<WithheldRoom<'m>>,
    /// `None`: the call's key is shadowed, and the limit would have
    /// refused it (counted so).
    admitting: Option<Admitting<'m>>,
    amount: u32,
    mark: TakeMark,
}

/// What a call's named limits took before its key admits it: each limit's
/// part in this process, or in the store that keeps them (and, with them,
/// the requests of the key's rate if it is in the store too).
enum Parts<'m> {
    Local(Vec<LimitTaken<'m>>),
    Shared(SharedLimits),
}

impl Parts<'_> {
    /// Whether the call's requests were taken with its named limits: its
    /// key then admits it without taking them again.
    fn took_requests(&self) -> bool {
        matches!(self, Parts::Shared(shared) if shared.holds(REQUESTS))
    }
}

/// Why the limits did not all take a call's cost now.
enum NotNow {
    /// Every limit will have room in this long, the last of them the named
    /// limit at this index (`None`: the key's rate); nothing was taken.
    Wait(Nanos, Option<usize>),
    Refused(Rejected),
}

/// # Metered calls: a cost in several limits
impl<K> ThrottleManager<K>
where
    K: Hash + Eq + Send + Sync + 'static,
{
    /// The manager that keeps the named limit `name` of every key
    /// ([`limit`](crate::builder::ThrottleManagerBuilder::limit)): a manager with a
    /// rate alone, on this manager's clock, to [`peek`](Self::peek) at a
    /// key's use of the limit, give a key its own
    /// ([`set_rate_override`](Self::set_rate_override)), or move it to what
    /// a provider says. `None` for a name the manager has no limit by.
    ///
    /// ```
    /// use portcullis::metered::Cost;
    /// use portcullis::{Priority, RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::per_minute(60))
    ///     .limit("tokens", RateConfig::per_minute(10_000).burst(2_000))
    ///     .clock(portcullis::clock::ManualClock::new())
    ///     .build()?;
    /// manager.try_acquire_cost("model-a", Priority::HIGH, Cost::of("tokens", 500)).unwrap().success();
    /// let tokens = manager.limit("tokens").unwrap();
    /// // A new key's first call leaves it no burst: the rest is earned at 10,000 a minute.
    /// assert_eq!(tokens.peek("model-a").unwrap().remaining, 0);
    /// assert_eq!(tokens.peek("model-a").unwrap().full_in, std::time::Duration::from_secs(12));
    /// assert!(manager.limit("images").is_none());
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn limit(&self, name: &str) -> Option<&ThrottleManager<K>> {
        let mut limits = self.inner.limits.iter();
        limits
            .find(|limit| &*limit.name == name)
            .map(|limit| &limit.manager)
    }

    /// The manager's named limits, in the order declared.
    pub(crate) fn named_limits(&self) -> &[NamedLimit<K>] {
        &self.inner.limits
    }

    /// The work of the handles' `limit_names`.
    pub(crate) fn named_limit_names(&self) -> impl Iterator<Item = &str> {
        self.inner.limits.iter().map(|limit| &*limit.name)
    }

    /// The work of [`KeyHandle::observe_remaining`](super::KeyHandle::observe_remaining).
    pub(crate) fn key_observe_remaining<Q: BorrowedKey<K> + ?Sized>(
        &self,
        key: &Q,
        limit: &str,
        remaining: u64,
        reset: Option<Duration>,
    ) -> bool {
        let manager = match limit {
            REQUESTS => self,
            name => match self.limit(name) {
                Some(manager) => manager,
                None => return false,
            },
        };
        match (remaining, reset) {
            // A reset now or gone by: the limit is whole again, whatever
            // the count said before it.
            (_, Some(Duration::ZERO)) => return true,
            (0, Some(reset)) => {
                manager.key(key).defer(reset);
                return true;
            }
            _ => {}
        }
        let core = manager.core();
        let now = core.now();
        let Ok(state) = manager.entry(key, now) else {
            return true;
        };
        if let Some(settings) = core.rate_of(&state) {
            let burst = u64::from(settings.burst);
            state
                .rate
                .owe_at_least(now, burst.saturating_sub(remaining));
        }
        true
    }

    /// Waits until `key` has room for a call costing `cost` in every limit
    /// (its rate, for the requests, and each named limit), then admits it
    /// as [`acquire_n`](Self::acquire_n) does (the throttle, the bulkhead)
    /// and returns its permit. The cost is an estimate where the call's
    /// cost is known only from its answer:
    /// [`settle`](CostPermit::settle) the permit with what it cost.
    ///
    /// The call waits once, for the latest of its limits, and takes nothing
    /// from any while it waits: every limit takes its part at one moment
    /// (if another call took a limit's room first, it waits again), and a
    /// refusal gives back whatever was taken. A key's bulkhead, if it has
    /// one, is waited for after the limits are taken. A limit's wait counts
    /// against the priority's
    /// [`max_wait`](crate::deadline::TimeLimits::max_wait) and the task's
    /// deadline ([`with_deadline`](crate::deadline::with_deadline)) as a rate token's
    /// does.
    ///
    /// # Errors
    ///
    /// As [`acquire_n`](Self::acquire_n); a refusal by a named limit is
    /// [`RateLimited`](RejectReason::RateLimited) or
    /// [`CostAboveBurst`](RejectReason::CostAboveBurst) with
    /// [`limit_index`](Rejected::limit_index) naming it; a cost naming a
    /// limit the manager does not have is
    /// [`UnknownLimit`](RejectReason::UnknownLimit), with the name in a
    /// warning event.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropped while it waits, it has taken nothing; dropped
    /// while it waits for a slot, it gives back what the limits took.
    ///
    /// ```
    /// use portcullis::metered::Cost;
    /// use portcullis::{Priority, RateConfig, ThrottleManager};
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::per_minute(60).burst(10)) // requests
    ///     .limit("tokens", RateConfig::per_minute(6_000).burst(1_000))
    ///     .build()?;
    /// let started = tokio::time::Instant::now();
    /// manager.acquire_cost("model-a", Priority::HIGH, Cost::of("tokens", 1_000)).await?.success();
    /// // The tokens are spent: the next call waits for 500 of them, 5 s.
    /// manager.acquire_cost("model-a", Priority::HIGH, Cost::of("tokens", 500)).await?.success();
    /// assert_eq!(started.elapsed(), Duration::from_secs(5));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire_cost<Q: BorrowedKey<K> + ?Sized>(
        &self,
        key: &Q,
        priority: Priority,
        cost: Cost,
    ) -> Result<CostPermit<'_>, Rejected> {
        let amounts = self.amounts_of(&cost, priority)?;
        let requests = cost.amount(REQUESTS);
        let taken = self
            .wait_for_parts(key, priority, requests, &amounts)
            .await?;
        let mark = self.mark_before_taking(key, requests);
        let permit = match taken.took_requests() {
            true => self.acquire_rate_taken(key, priority, requests).await?,
            false => self.acquire(key, priority.cost(requests)).await?,
        };
        let named = self.named_parts(taken, |limit, ticket| {
            Permit::borrowed(limit.core(), ticket)
        });
        Ok(CostPermit::new(permit, mark, named))
    }

    /// The named limits' parts of a call of `key` costing `cost`, waited
    /// for as [`acquire_cost`](Self::acquire_cost) waits (its request, of
    /// the key's rate, is the caller's to take: the client middleware's
    /// edge takes it), held by permits that own their managers' cores.
    #[cfg_attr(not(feature = "reqwest"), allow(dead_code))]
    pub(crate) async fn take_named_parts<Q: BorrowedKey<K> + ?Sized>(
        &self,
        key: &Q,
        priority: Priority,
        cost: &Cost,
    ) -> Result<NamedParts<'static>, Rejected> {
        let amounts = self.amounts_of(cost, priority)?;
        let requests = cost.amount(REQUESTS);
        let taken = self
            .wait_for_parts(key, priority, requests, &amounts)
            .await?;
        Ok(self.named_parts(taken, |limit, ticket| {
            Permit::owned(&limit.inner.core, ticket)
        }))
    }

    /// [`acquire_n`](Self::acquire_n) for a call whose `cost` tokens of
    /// the key's rate the store took with its named limits: the throttle
    /// and the bulkhead, and not the rate again.
    async fn acquire_rate_taken<Q: BorrowedKey<K> + ?Sized>(
        &self,
        key: &Q,
        priority: Priority,
        cost: u32,
    ) -> Result<Permit<'_>, Rejected> {
        let request = self.rate_taken_request(priority, cost);
        let ticket = self.admit(key, &request).await?;
        Ok(Permit::borrowed(self.core(), ticket))
    }

    /// [`acquire_rate_taken`](Self::acquire_rate_taken), for a permit that
    /// owns its manager's core (an edge's).
    pub(crate) async fn acquire_owned_rate_taken<Q: BorrowedKey<K> + ?Sized>(
        &self,
        key: &Q,
        priority: Priority,
        cost: u32,
    ) -> Result<crate::OwnedPermit, Rejected> {
        let request = self.rate_taken_request(priority, cost);
        let ticket = self.admit(key, &request).await?;
        Ok(Permit::owned(&self.inner.core, ticket))
    }

    fn rate_taken_request(&self, priority: Priority, cost: u32) -> Request {
        let patience = Patience::AsConfigured;
        Request::new(self.core(), priority, cost, patience, Scope::RateTaken)
    }

    /// Every named limit's part of a call (`amounts`, and room for
    /// `requests` of the key's rate), taken at one moment once every limit
    /// has room: the one wait of `acquire_cost`, within the priority's
    /// `max_wait` and the task's deadline.
    async fn wait_for_parts<'m, Q: BorrowedKey<K> + ?Sized>(
        &'m self,
        key: &Q,
        priority: Priority,
        requests: u32,
        amounts: &[u32],
    ) -> Result<Parts<'m>, Rejected> {
        let core = self.core();
        let resolved = core.resolve(priority)?;
        let request = self.permit_request(priority.cost(requests), Patience::AsConfigured);
        let patience = core.configured_patience(resolved, Patience::AsConfigured);
        let latest = core.now().saturating_add(patience);
        loop {
            // A shadowed key's limits decide in the process: it never waits.
            let shadowed = self.shadowed(key);
            let shared = match shadowed {
                false => self.take_shared(key, priority, requests, amounts).await,
                true => None,
            };
            let taken = match shared {
                Some(shared) => shared.map(Parts::Shared),
                None => self
                    .take_limits(key, priority, requests, amounts, shadowed)
                    .map(Parts::Local),
            };
            let (wait, limit) = match taken {
                Ok(taken) => return Ok(taken),
                Err(NotNow::Refused(rejected)) => return Err(rejected),
                Err(NotNow::Wait(wait, limit)) => (wait, limit),
            };
            let now = core.now();
            let until = now.saturating_add(wait);
            if until > latest {
                return Err(by_limit(Rejected::rate_limited(wait, resolved), limit));
            }
            let in_time = match request.start_by(now, || 0) {
                StartBy::Whenever => true,
                StartBy::Until(by) => until <= by,
                StartBy::TooLate => false,
            };
            if !in_time {
                return Err(Rejected::new(RejectReason::Deadline, resolved, None));
            }
            core.clock().sleep_until(Duration::from_nanos(until)).await;
        }
    }

    /// [`acquire_cost`](Self::acquire_cost) that never waits: every limit
    /// has room for the call now, or it is refused, with the wait for the
    /// latest limit as [`retry_after`](Rejected::retry_after), taking
    /// nothing.
    ///
    /// # Errors
    ///
    /// As [`try_acquire_n`](Self::try_acquire_n), and as
    /// [`acquire_cost`](Self::acquire_cost) for the named limits.
    ///
    /// ```
    /// use portcullis::error::RejectReason;
    /// use portcullis::metered::Cost;
    /// use portcullis::{Priority, RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::per_minute(60).burst(10))
    ///     .limit("tokens", RateConfig::per_minute(6_000).burst(1_000))
    ///     .clock(portcullis::clock::ManualClock::new())
    ///     .build()?;
    /// let permit = manager.try_acquire_cost("model-a", Priority::HIGH, Cost::of("tokens", 800)).unwrap();
    /// let refused = manager.try_acquire_cost("model-a", Priority::HIGH, Cost::of("tokens", 300)).unwrap_err();
    /// assert_eq!((refused.reason(), refused.limit_index()), (RejectReason::RateLimited, Some(0)));
    /// assert_eq!(manager.peek("model-a").unwrap().remaining, 9); // the refusal took no request
    /// # drop(permit);
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn try_acquire_cost<Q: BorrowedKey<K> + ?Sized>(
        &self,
        key: &Q,
        priority: Priority,
        cost: Cost,
    ) -> Result<CostPermit<'_>, Rejected> {
        let amounts = self.amounts_of(&cost, priority)?;
        let requests = cost.amount(REQUESTS);
        match self.take_limits(key, priority, requests, &amounts, self.shadowed(key)) {
            Ok(taken) => {
                let mark = self.mark_before_taking(key, requests);
                let permit = self.try_acquire(key, priority.cost(requests))?;
                let named = self.named_parts(Parts::Local(taken), |limit, ticket| {
                    Permit::borrowed(limit.core(), ticket)
                });
                Ok(CostPermit::new(permit, mark, named))
            }
            Err(NotNow::Refused(rejected)) => Err(rejected),
            Err(NotNow::Wait(wait, limit)) => {
                let refused = Rejected::rate_limited(wait, self.core().resolve(priority)?);
                Err(by_limit(refused, limit))
            }
        }
    }

    /// What `cost` takes of each named limit, in the manager's order; the
    /// refusal of a cost that names a limit the manager does not have.
    fn amounts_of(&self, cost: &Cost, priority: Priority) -> Result<Vec<u32>, Rejected> {
        let limits = &self.inner.limits;
        if let Some((unknown, _)) = cost
            .named()
            .find(|(name, _)| !limits.iter().any(|limit| &*limit.name == *name))
        {
            tracing::warn!(
                limit = unknown,
                known = ?self.settings().limit_names().collect::<Vec<_>>(),
                "a call's cost names a limit the manager does not have"
            );
            return Err(Rejected::new(RejectReason::UnknownLimit, priority, None));
        }
        Ok(limits
            .iter()
            .map(|limit| cost.amount(&limit.name))
            .collect())
    }

    /// What the named limits took of a call (`taken`), as its parts, each
    /// limit's permit made by `permit_of` (borrowing its manager, or owning
    /// its core).
    fn named_parts<'m, 'p>(
        &'m self,
        taken: Parts<'m>,
        permit_of: impl Fn(&'m ThrottleManager<K>, Ticket) -> Permit<'p>,
    ) -> NamedParts<'p> {
        let taken = match taken {
            Parts::Local(taken) => taken,
            Parts::Shared(shared) => return NamedParts::new(Vec::new(), Some(shared), Vec::new()),
        };
        let mut parts = Vec::with_capacity(taken.len());
        let mut would_refuse = Vec::new();
        for (limit, taken) in self.inner.limits.iter().zip(taken) {
            let Some(admitting) = taken.admitting else {
                would_refuse.push(Arc::clone(&limit.name));
                continue;
            };
            let ticket = <Ticket as Admitted<'_>>::from_call(admitting);
            limit.manager.core().metrics().admitted(ticket.label());
            let permit = permit_of(&limit.manager, ticket);
            let name = Arc::clone(&limit.name);
            let withheld = taken.withheld.map(WithheldRoom::kept);
            parts
                .push(LimitPart::new(name, permit, taken.amount, taken.mark).withholding(withheld));
        }
        NamedParts::new(parts, None, would_refuse)
    }

    /// Every named limit's part of a call, and its `requests` of the key's
    /// rate if that is in the store too, taken by the manager's store in
    /// one round trip if it keeps them; `None` if there is no store, it
    /// does not answer, or it keeps no named limits (the process then
    /// decides on its own limits).
    async fn take_shared<Q: BorrowedKey<K> + ?Sized>(
        &self,
        key: &Q,
        priority: Priority,
        requests: u32,
        amounts: &[u32],
    ) -> Option<Result<SharedLimits, NotNow>> {
        let core = self.core();
        let handle = core.store()?;
        if self.inner.limits.is_empty() {
            return None;
        }
        let now = core.now();
        let state = self.entry(key, now).ok()?;
        let name = Arc::clone(&state.store_key()?.name);
        // Every named limit's part, and the requests'.
        let mut asked = Vec::with_capacity(amounts.len() + 1);
        for (index, (limit, &amount)) in self.inner.limits.iter().zip(amounts).enumerate() {
            let manager = &limit.manager;
            let limit_state = manager.entry(key, now).ok()?;
            let settings = manager.core().rate_of(&limit_state)?;
            if amount > settings.burst {
                let refused = Rejected::cost_above_burst(amount, settings.burst, priority);
                return Some(Err(NotNow::Refused(refused.by_limit_at(index))));
            }
            asked.push(LimitRequest::new(
                &limit.name,
                core.store_rules(settings),
                amount,
            ));
        }
        // The requests, in the rate's own bucket, asked last: a wait's index
        // past the named limits is the rate's.
        if let Some((_, _, settings)) = core.store_of(&state).filter(|_| requests > 0) {
            if requests > settings.burst {
                let refused = Rejected::cost_above_burst(requests, settings.burst, priority);
                return Some(Err(NotNow::Refused(refused)));
            }
            let rules = core.store_rules(settings);
            asked.push(LimitRequest::new(REQUESTS, rules, requests));
        }
        match handle.store.take_limits(&name, &asked).await {
            LimitsAnswer::Taken { marks } if marks.len() == asked.len() => {
                let parts = (asked.iter().zip(marks))
                    .map(|(part, mark)| (Arc::from(part.limit), part.rules, part.cost, mark));
                Some(Ok(SharedLimits::new(Arc::clone(handle), name, parts)))
            }
            LimitsAnswer::Wait { wait, limit } => {
                let named = (limit < self.inner.limits.len()).then_some(limit);
                Some(Err(NotNow::Wait(nanos(wait).max(1), named)))
            }
            _ => None,
        }
    }

    /// Where the `cost` tokens a call of `key` is about to take will lie in
    /// its rate's time, at least: from now on, past what give-backs have
    /// moved so far. Makes the key (its call is about to).
    fn mark_before_taking<Q: BorrowedKey<K> + ?Sized>(&self, key: &Q, cost: u32) -> TakeMark {
        let now = self.core().now();
        let Ok(state) = self.entry(key, now) else {
            // No room for the key: it takes nothing, or waits for room.
            return TakeMark {
                end: now,
                shifted: 0,
            };
        };
        let spacing = interval(state.rate.rate()).saturating_mul(u64::from(cost));
        TakeMark {
            end: now.saturating_add(spacing),
            shifted: state.rate.given_back(),
        }
    }

    /// Every named limit's part of a call, taken now if every limit (and
    /// the key's rate, for `requests`) has room; else nothing taken, and
    /// how long until every one would have. A part dropped before the call
    /// is admitted gives back what it took. `shadowed`: the key's, which
    /// then never waits.
    fn take_limits<'m, Q: BorrowedKey<K> + ?Sized>(
        &'m self,
        key: &Q,
        priority: Priority,
        requests: u32,
        amounts: &[u32],
        shadowed: bool,
    ) -> Result<Vec<LimitTaken<'m>>, NotNow> {
        // A shadowed key's call never waits: each limit decides now, and
        // one that would refuse is counted so and takes nothing.
        if !shadowed {
            self.room_for_all(key, priority, requests, amounts)?;
        }
        let mut parts = Vec::with_capacity(amounts.len());
        for (index, (limit, &amount)) in self.inner.limits.iter().zip(amounts).enumerate() {
            let manager = &limit.manager;
            let request = Request::new(
                manager.core(),
                priority,
                amount,
                Patience::Never,
                Scope::Token,
            );
            let (shifted, withheld) = manager.before_taking_part(key, amount);
            match manager.admit_now::<Q, Admitting<'_>>(key, &request) {
                Ok(admitting) => {
                    // Its tokens end where its reservation put them (a
                    // cost of 0, or a shadowed call, holds none: `now`).
                    let end = admitting
                        .booked_until()
                        .unwrap_or_else(|| manager.core().now());
                    let mark = TakeMark { end, shifted };
                    parts.push(LimitTaken {
                        admitting: Some(admitting),
                        amount,
                        mark,
                        withheld: withheld.map(WithheldRoom::armed),
                    });
                }
                Err(refused) if shadowed && refused.reason().is_limit() => {
                    manager.count_refusal_as(key, &refused, true);
                    let mark = TakeMark { end: 0, shifted };
                    parts.push(LimitTaken {
                        admitting: None,
                        amount: 0,
                        mark,
                        withheld: None,
                    });
                }
                // Another call took the room since it was seen: wait again,
                // the parts taken given back as they drop.
                Err(refused) if refused.reason() == RejectReason::RateLimited => {
                    let wait = refused.retry_after().map_or(1, nanos).max(1);
                    return Err(NotNow::Wait(wait, Some(index)));
                }
                Err(refused) => return Err(NotNow::Refused(refused.by_limit_at(index))),
            }
        }
        Ok(parts)
    }

    /// Whether `key` is shadowed, as its settings say: the key is made
    /// first, so that a new key's say too.
    fn shadowed<Q: BorrowedKey<K> + ?Sized>(&self, key: &Q) -> bool {
        let _ = self.entry(key, self.core().now());
        self.shadows(key)
    }

    /// Nothing, if `key`'s rate has room for `requests` and each named
    /// limit for its part of `amounts` now; else how long until every one
    /// has, or the refusal of a part above its limit's burst.
    fn room_for_all<Q: BorrowedKey<K> + ?Sized>(
        &self,
        key: &Q,
        priority: Priority,
        requests: u32,
        amounts: &[u32],
    ) -> Result<(), NotNow> {
        let own = self.room_in(key, requests, priority);
        let mut wait = (own.map_err(NotNow::Refused)?, None);
        for (index, (limit, &amount)) in self.inner.limits.iter().zip(amounts).enumerate() {
            let room = limit.manager.room_in(key, amount, priority);
            let room = room.map_err(|refused| NotNow::Refused(refused.by_limit_at(index)))?;
            if room > wait.0 {
                wait = (room, Some(index));
            }
        }
        match wait {
            (0, _) => Ok(()),
            (wait, limit) => Err(NotNow::Wait(wait, limit)),
        }
    }

    /// How long until `key`'s rate has room for `cost` tokens (0: now), or
    /// the refusal of a cost above its burst. Takes nothing and makes no key.
    fn room_in<Q: BorrowedKey<K> + ?Sized>(
        &self,
        key: &Q,
        cost: u32,
        priority: Priority,
    ) -> Result<Nanos, Rejected> {
        let core = self.core();
        let Some(state) = self.inner.keys.state(key) else {
            return Ok(0);
        };
        let Some(settings) = core.rate_of(&state) else {
            return Ok(0);
        };
        if cost > settings.burst {
            let priority = core.resolve(priority)?;
            return Err(Rejected::cost_above_burst(cost, settings.burst, priority));
        }
        Ok(state.rate.wait(core.now(), settings.burst, cost))
    }
}

/// `refused`, by the named limit at `limit` if there is one.
fn by_limit(refused: Rejected, limit: Option<usize>) -> Rejected {
    match limit {
        Some(index) => refused.by_limit_at(index),
        None => refused,
    }
}
