//! [`CostPermit`]: the permit of a call charged to several limits, whose
//! cost is settled once its answer says what it was.

use std::fmt;
use std::sync::Mutex;

use super::cost::Cost;
use super::parts::{Held, NamedParts, lock};
use crate::error::RejectReason;
use crate::outcome::Outcome;
use crate::permit::Permit;
use crate::priority::Priority;
use crate::rate::TakeMark;

/// The permit of a call admitted by every limit of its key
/// ([`acquire_cost`](crate::ThrottleManager::acquire_cost)). Tell it what
/// the call cost once its answer says ([`settle`](Self::settle)), then its
/// outcome, as a [`Permit`]'s: every limit learns it.
///
/// Dropped without an outcome, it ends as a [`Permit`] does (neutral), and
/// what it took stays taken: the call was made. A call that never reached
/// the backend gives its cost back with [`unsent`](Self::unsent).
///
/// ```
/// use portcullis::metered::Cost;
/// use portcullis::{Priority, RateConfig, ThrottleManager};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let manager = ThrottleManager::<String>::builder()
///     .rate(RateConfig::per_minute(60).burst(10))
///     .limit("tokens", RateConfig::per_minute(10_000).burst(2_000))
///     .build()?;
/// let permit = manager.acquire_cost("model-a", Priority::HIGH, Cost::of("tokens", 500)).await?;
/// // ... the call; its answer says it used 742 tokens ...
/// permit.settle(Cost::of("tokens", 742));
/// permit.success();
/// // The 242 more are owed; a new key earns the rest of its burst.
/// let tokens = manager.limit("tokens").unwrap().peek("model-a").unwrap();
/// assert_eq!(tokens.full_in, std::time::Duration::from_millis(2_242 * 6));
/// # Ok(())
/// # }
/// ```
#[must_use = "a permit is released when dropped; report the call's outcome with success() or overloaded()"]
pub struct CostPermit<'a> {
    permit: Permit<'a>,
    /// What the call's requests hold of the key's rate, as settled so far.
    requests: Mutex<Held>,
    named: NamedParts<'a>,
}

impl<'a> CostPermit<'a> {
    /// The call `permit` admitted, its requests marked `requests`, and
    /// its parts of the named limits.
    pub(crate) fn new(permit: Permit<'a>, requests: TakeMark, named: NamedParts<'a>) -> Self {
        Self {
            requests: Mutex::new(Held::new(permit.cost(), requests)),
            permit,
            named,
        }
    }

    /// Why the controls would have refused this call, if its key is in
    /// shadow mode and they would have (its rate, throttle or bulkhead, as
    /// [`Permit::would_refuse`] says; or a named limit:
    /// [`RateLimited`](RejectReason::RateLimited)); `None` for a call they
    /// admitted.
    ///
    /// ```
    /// use portcullis::error::RejectReason;
    /// use portcullis::metered::Cost;
    /// use portcullis::{Priority, RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::per_minute(60).burst(10))
    ///     .limit("tokens", RateConfig::per_minute(6_000).burst(1_000))
    ///     .shadow(true)
    ///     .clock(portcullis::clock::ManualClock::new())
    ///     .build()?;
    /// let first = manager.try_acquire_cost("a", Priority::HIGH, Cost::of("tokens", 900)).unwrap();
    /// assert_eq!(first.would_refuse(), None);
    /// let second = manager.try_acquire_cost("a", Priority::HIGH, Cost::of("tokens", 900)).unwrap();
    /// assert_eq!(second.would_refuse(), Some(RejectReason::RateLimited)); // counted, let through
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn would_refuse(&self) -> Option<RejectReason> {
        let by_limit = self
            .named
            .any_would_refuse()
            .then_some(RejectReason::RateLimited);
        self.permit.would_refuse().or(by_limit)
    }

    /// The call cost `cost`: each limit it names now takes that amount
    /// instead of what it took so far (the estimate), owing the difference
    /// from now or getting it back; a limit it leaves out keeps what it
    /// took, and so do the requests unless it says them. Settling again
    /// replaces the last settlement. A name the manager has no limit by is
    /// skipped, with a warning event naming it.
    ///
    /// What a limit admits stays within its `quota × T + burst`, plus the
    /// under-estimates of the calls in flight: a cost settled above its
    /// estimate makes later calls wait.
    ///
    /// ```
    /// use portcullis::metered::Cost;
    /// use portcullis::{Priority, RateConfig, ThrottleManager};
    ///
    /// let clock = portcullis::clock::ManualClock::new();
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::per_minute(60).burst(10))
    ///     .limit("tokens", RateConfig::per_minute(6_000).burst(1_000))
    ///     .clock(clock.clone())
    ///     .build()?;
    /// let tokens = manager.limit("tokens").unwrap();
    /// let full_in = |key| tokens.peek(key).unwrap().full_in.as_secs();
    /// // The key's first call, and the burst its rate has earned it since.
    /// manager.try_acquire_cost("model-a", Priority::HIGH, Cost::of("tokens", 100)).unwrap().success();
    /// clock.advance(std::time::Duration::from_secs(10));
    /// let permit = manager.try_acquire_cost("model-a", Priority::HIGH, Cost::of("tokens", 100)).unwrap();
    /// permit.settle(Cost::of("tokens", 1_300)); // 300 past the burst: owed
    /// assert_eq!(full_in("model-a"), 13);
    /// permit.settle(Cost::of("tokens", 400)); // the answer was wrong: 400
    /// assert_eq!(tokens.peek("model-a").unwrap().remaining, 600);
    /// permit.success();
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn settle(&self, cost: Cost) {
        if let Some(requests) = cost.said_requests() {
            if !self.named.settle_requests(requests) {
                lock(&self.requests).settle(&self.permit, requests);
            }
        }
        self.named.settle(&cost);
    }

    /// What the call holds of each limit, as settled so far.
    ///
    /// ```
    /// use portcullis::metered::Cost;
    /// use portcullis::{Priority, RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::per_minute(60))
    ///     .limit("tokens", RateConfig::per_minute(6_000).burst(1_000))
    ///     .build()?;
    /// let permit = manager.try_acquire_cost("model-a", Priority::HIGH, Cost::of("tokens", 100)).unwrap();
    /// permit.settle(Cost::of("tokens", 250));
    /// assert_eq!(permit.cost(), Cost::of("tokens", 250).and("requests", 1));
    /// # permit.success();
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn cost(&self) -> Cost {
        let requests =
            (self.named.requests_taken()).unwrap_or_else(|| lock(&self.requests).amount());
        self.named.add_to(Cost::requests(requests))
    }

    /// The priority the call was admitted at.
    ///
    /// ```
    /// # use portcullis::*;
    /// # let manager = ThrottleManager::<String>::builder().rate(RateConfig::per_minute(60)).limit("tokens", RateConfig::per_minute(600)).build()?;
    /// let permit = manager.try_acquire_cost("model-a", Priority::LOW, Cost::of("tokens", 10)).unwrap();
    /// assert_eq!(permit.priority(), Priority::LOW);
    /// # permit.success();
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn priority(&self) -> Priority {
        self.permit.priority()
    }

    /// The call succeeded: every limit learns it ([`Outcome::Success`]).
    ///
    /// ```
    /// # use portcullis::*;
    /// # let manager = ThrottleManager::<String>::builder().rate(RateConfig::per_minute(60)).limit("tokens", RateConfig::per_minute(600)).build()?;
    /// manager.try_acquire_cost("model-a", Priority::HIGH, Cost::of("tokens", 10)).unwrap().success();
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn success(self) {
        self.report(Outcome::Success);
    }

    /// The backend was over capacity (a 429): the key's rate, and each
    /// named limit that adapts, falls ([`Outcome::Overloaded`]).
    ///
    /// ```
    /// # use portcullis::*;
    /// # let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(10.0)).limit("tokens", RateConfig::adaptive(1_000.0).burst(100)).build()?;
    /// manager.try_acquire_cost("model-a", Priority::HIGH, Cost::of("tokens", 10)).unwrap().overloaded();
    /// assert!(manager.limit("tokens").unwrap().key("model-a").rate().unwrap() < 1_000.0);
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn overloaded(self) {
        self.report(Outcome::Overloaded);
    }

    /// The call's outcome, as [`Permit::report`]: told to the key and to
    /// each of its named limits.
    ///
    /// ```
    /// # use portcullis::*;
    /// # let manager = ThrottleManager::<String>::builder().rate(RateConfig::per_minute(60)).limit("tokens", RateConfig::per_minute(600)).build()?;
    /// let permit = manager.try_acquire_cost("model-a", Priority::HIGH, Cost::of("tokens", 10)).unwrap();
    /// permit.report(Outcome::Neutral); // a 400: says nothing of capacity
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn report(self, outcome: Outcome) {
        self.named.report(outcome, &self.permit);
        self.permit.report(outcome);
    }

    /// The call never reached the backend (its connection failed, or the
    /// caller gave up before sending it): every limit gets back what it
    /// took, and the outcome counts in no control.
    ///
    /// ```
    /// use portcullis::metered::Cost;
    /// use portcullis::{Priority, RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::per_minute(60).burst(10))
    ///     .limit("tokens", RateConfig::per_minute(6_000).burst(1_000))
    ///     .clock(portcullis::clock::ManualClock::new())
    ///     .build()?;
    /// let permit = manager.try_acquire_cost("model-a", Priority::HIGH, Cost::of("tokens", 900)).unwrap();
    /// permit.unsent();
    /// assert_eq!(manager.limit("tokens").unwrap().peek("model-a").unwrap().remaining, 1_000);
    /// assert_eq!(manager.peek("model-a").unwrap().remaining, 10);
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn unsent(self) {
        if !self.named.settle_requests(0) {
            lock(&self.requests).settle(&self.permit, 0);
        }
        self.named.unsent();
        self.permit.uncounted();
    }
}

impl fmt::Debug for CostPermit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CostPermit")
            .field("priority", &self.priority())
            .field("cost", &self.cost())
            .finish_non_exhaustive()
    }
}
