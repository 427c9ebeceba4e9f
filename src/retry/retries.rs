//! [`Retries`]: one logical call's attempts, as `call` and the client
//! middleware make them, and as any other edge can.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use crate::clock::{Nanos, nanos};
use crate::core::{Core, KeyTelemetry};
use crate::deadline::{self, Expiry, TimeLimit};
use crate::key::KeyState;
use crate::priority::Priority;
use crate::retry_budget::{self, RetrySettings};

/// Why an attempt failed, as [`Retries::after`] judges it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RetryCause {
    /// The backend was over capacity (429, 503, a timeout, an error marked
    /// [`overloaded`](crate::overloaded)); `pause`, how long it asked the
    /// caller to stay away (`Retry-After`), if it did.
    Overloaded {
        /// The backend's `Retry-After`, or the key's pause.
        pause: Option<Duration>,
    },
    /// The connection failed (refused, reset, timed out): retried only under
    /// [`retry_transport_errors`](crate::retry::RetryPolicy::retry_transport_errors).
    Transport,
    /// A control refused the call locally; `retry_after`, when it could go
    /// ([`Rejected::retry_after`](crate::Rejected::retry_after)). A refusal
    /// that does not say is not retried.
    Refused {
        /// When the call could go again, if known.
        retry_after: Option<Duration>,
    },
}

/// Why [`Retries::after`] made no retry: the caller returns the last
/// failure as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum GaveUp {
    /// The manager has no [`RetryPolicy`](crate::retry::RetryPolicy).
    NoPolicy,
    /// The failure is not one the policy retries (a transport error without
    /// `retry_transport_errors`, a refusal that does not say when).
    NotRetryable,
    /// The call has made its `max_retries`.
    MaxRetries,
    /// The key's retry budget is spent: its backend fails too often for
    /// retries to help.
    Budget,
    /// The wait before the retry would end past the call's deadline.
    Deadline,
}

impl GaveUp {
    fn label(self) -> &'static str {
        match self {
            Self::NoPolicy => "no_policy",
            Self::NotRetryable => "not_retryable",
            Self::MaxRetries => "max_retries",
            Self::Budget => "budget",
            Self::Deadline => "deadline",
        }
    }
}

impl fmt::Display for GaveUp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::NoPolicy => "the manager does not retry",
            Self::NotRetryable => "the failure is not retried",
            Self::MaxRetries => "the call made its last retry",
            Self::Budget => "the key's retry budget is spent",
            Self::Deadline => "the retry would end past the call's deadline",
        })
    }
}

/// One logical call's attempts under the manager's
/// [`RetryPolicy`](crate::retry::RetryPolicy), from
/// [`ThrottleManager::retries`](crate::manager::KeyHandle::retries): the
/// priority of each attempt, the deadline they share, and after each
/// failure whether to retry, waiting the backoff first.
///
/// Made when the logical call starts, which counts it in the key's budget;
/// what [`call`](crate::ThrottleManager::call) and the client middleware
/// use, for edges of your own.
///
/// ```
/// use portcullis::retry::RetryPolicy;
/// use portcullis::retry::RetryCause;
/// use portcullis::{BulkheadConfig, Priority, ThrottleManager};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let manager = ThrottleManager::<String>::builder()
///     .bulkhead(BulkheadConfig::new(8))
///     .retry(RetryPolicy::new().max_retries(2))
///     .build()?;
/// let mut retries = manager.key("api").retries(Priority::HIGH);
/// let mut sent = Vec::new();
/// loop {
///     let permit = manager.acquire("api", retries.priority()).await?;
///     sent.push(permit.priority());
///     permit.overloaded(); // the backend answered 503
///     if retries.after(RetryCause::Overloaded { pause: None }).await.is_err() {
///         break;
///     }
/// }
/// assert_eq!(sent, [Priority::HIGH, Priority::MEDIUM_HIGH, Priority::MEDIUM_HIGH]);
/// # Ok(())
/// # }
/// ```
pub struct Retries<'m> {
    core: &'m Core,
    /// `None`: the manager does not retry.
    policy: Option<Policed<'m>>,
    first: Priority,
    made: u32,
}

/// What a logical call of a manager that retries holds.
struct Policed<'m> {
    settings: &'m RetrySettings,
    /// The key's state, for its budget (`None`: a full key space gave the
    /// key no state, so it has no budget and is not retried).
    state: Option<triomphe::Arc<KeyState>>,
    telemetry: KeyTelemetry,
    /// When the call's time is up, and the limit that sets it.
    deadline: Option<(Nanos, Expiry)>,
}

impl<'m> Retries<'m> {
    pub(crate) fn new(
        core: &'m Core,
        settings: Option<&'m RetrySettings>,
        key: Option<(triomphe::Arc<KeyState>, KeyTelemetry)>,
        first: Priority,
    ) -> Self {
        let policy = settings.map(|settings| {
            let now = core.now();
            let (state, telemetry) = match key {
                Some((state, telemetry)) => (Some(state), telemetry),
                None => (None, KeyTelemetry::new(None, None)),
            };
            if let Some(budget) = state.as_deref().and_then(KeyState::retry_budget) {
                budget.deposit(now, &settings.budget);
            }
            Policed {
                settings,
                state,
                telemetry,
                deadline: Self::deadline_of(settings, now),
            }
        });
        Self {
            core,
            policy,
            first,
            made: 0,
        }
    }

    /// When a logical call made at `now` is out of time: the policy's
    /// deadline, or the caller's if that is sooner.
    fn deadline_of(settings: &RetrySettings, now: Nanos) -> Option<(Nanos, Expiry)> {
        let retry = settings
            .deadline
            .map(|after| Expiry::new(TimeLimit::RetryDeadline, after));
        let caller = deadline::remaining().map(|left| Expiry::new(TimeLimit::Deadline, left));
        let sooner = match (retry, caller) {
            (Some(retry), Some(caller)) if caller.after() < retry.after() => Some(caller),
            (retry, caller) => retry.or(caller),
        };
        sooner.map(|expiry| (now.saturating_add(nanos(expiry.after())), expiry))
    }

    /// The priority the next attempt goes in at: the first attempt's, and
    /// for a retry that many levels lower as the policy says, down to the
    /// manager's lowest.
    ///
    /// ```
    /// # use portcullis::{retry::RetryPolicy, *};
    /// # let manager = ThrottleManager::<String>::builder().throttle(ThrottleConfig::new()).retry(RetryPolicy::new()).build()?;
    /// let retries = manager.key("api").retries(Priority::HIGH);
    /// assert_eq!(retries.priority(), Priority::HIGH); // no retry yet
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn priority(&self) -> Priority {
        match &self.policy {
            Some(policy) if self.made > 0 => {
                let lowest = self.core.priorities().levels.saturating_sub(1);
                let level = self.first.level().saturating_add(policy.settings.lower_by);
                Priority::new(level.min(lowest.max(self.first.level())))
            }
            _ => self.first,
        }
    }

    /// Whether the call may be retried at all: the manager has a policy
    /// that makes retries, and the call is `idempotent` (safe to send
    /// twice) or the policy
    /// [retries any call](crate::retry::RetryPolicy::retry_non_idempotent). An
    /// edge asks it before keeping a copy of what it sends.
    ///
    /// ```
    /// # use portcullis::{retry::RetryPolicy, *};
    /// # let manager = ThrottleManager::<String>::builder().throttle(ThrottleConfig::new()).retry(RetryPolicy::new()).build()?;
    /// let retries = manager.key("api").retries(Priority::HIGH);
    /// assert!(retries.may_retry(true)); // a GET
    /// assert!(!retries.may_retry(false)); // a POST, by default
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn may_retry(&self, idempotent: bool) -> bool {
        self.policy.as_ref().is_some_and(|policy| {
            policy.settings.max_retries > 0 && (idempotent || policy.settings.any_method)
        })
    }

    /// How many retries the call has made so far.
    ///
    /// ```
    /// # use portcullis::{retry::RetryPolicy, *};
    /// # let manager = ThrottleManager::<String>::builder().throttle(ThrottleConfig::new()).retry(RetryPolicy::new()).build()?;
    /// assert_eq!(manager.key("api").retries(Priority::HIGH).made(), 0);
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn made(&self) -> u32 {
        self.made
    }

    /// How long the whole call may take, first attempt, waits and retries
    /// together: the policy's
    /// [`deadline`](crate::retry::RetryPolicy::deadline); `None` without one.
    ///
    /// ```
    /// # use portcullis::{retry::RetryPolicy, *};
    /// # use std::time::Duration;
    /// # let manager = ThrottleManager::<String>::builder().throttle(ThrottleConfig::new())
    /// #     .retry(RetryPolicy::new().deadline(Duration::from_secs(30))).build()?;
    /// let retries = manager.key("api").retries(Priority::HIGH);
    /// assert_eq!(retries.deadline(), Some(Duration::from_secs(30)));
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn deadline(&self) -> Option<Duration> {
        self.policy.as_ref()?.settings.deadline
    }

    /// The time left before the call's deadline (the policy's, or the
    /// caller's [`with_deadline`](crate::deadline::with_deadline) if that is sooner);
    /// `None` without either.
    ///
    /// ```
    /// # use portcullis::{retry::RetryPolicy, *};
    /// # use std::time::Duration;
    /// # let manager = ThrottleManager::<String>::builder().throttle(ThrottleConfig::new()).clock(clock::ManualClock::new())
    /// #     .retry(RetryPolicy::new().deadline(Duration::from_secs(30))).build()?;
    /// let retries = manager.key("api").retries(Priority::HIGH);
    /// assert_eq!(retries.remaining(), Some(Duration::from_secs(30)));
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn remaining(&self) -> Option<Duration> {
        let (deadline, _) = self.policy.as_ref()?.deadline?;
        Some(Duration::from_nanos(
            deadline.saturating_sub(self.core.now()),
        ))
    }

    /// `attempt`'s output, or `None` if the call's deadline passes first
    /// (then `attempt` is dropped unfinished); without a deadline, always
    /// its output.
    ///
    /// # Cancel safety
    ///
    /// As cancel-safe as `attempt`.
    ///
    /// ```
    /// # use portcullis::{retry::RetryPolicy, *};
    /// # use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), ConfigError> {
    /// let manager = ThrottleManager::<String>::builder()
    ///     .throttle(ThrottleConfig::new())
    ///     .retry(RetryPolicy::new().deadline(Duration::from_secs(1)))
    ///     .build()?;
    /// let retries = manager.key("api").retries(Priority::HIGH);
    /// let slow = retries.within(tokio::time::sleep(Duration::from_secs(2))).await;
    /// assert_eq!(slow, None);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn within<F: Future>(&self, attempt: F) -> Option<F::Output> {
        self.within_pinned(std::pin::pin!(attempt)).await
    }

    /// [`within`](Self::within) for an attempt pinned where it lives: the
    /// caller's state machine holds it, this one only a reference.
    pub(crate) async fn within_pinned<F: Future + Unpin>(&self, attempt: F) -> Option<F::Output> {
        match self.policy.as_ref().and_then(|policy| policy.deadline) {
            Some((deadline, _)) => self.core.before(deadline, attempt).await,
            None => Some(attempt.await),
        }
    }

    /// Which limit ended a call whose [`within`](Self::within) returned
    /// `None`, and how long it gave the call: the retry deadline, or the
    /// caller's deadline when that was sooner. For an edge that answers
    /// such a call as timed out (the client middleware's
    /// [`CallError::TimedOut`](crate::CallError::TimedOut)).
    ///
    /// ```
    /// # use portcullis::{retry::RetryPolicy, *};
    /// use portcullis::deadline::TimeLimit;
    /// # use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), ConfigError> {
    /// let manager = ThrottleManager::<String>::builder()
    ///     .throttle(ThrottleConfig::new())
    ///     .retry(RetryPolicy::new().deadline(Duration::from_secs(1)))
    ///     .build()?;
    /// let retries = manager.key("api").retries(Priority::HIGH);
    /// let slow = retries.within(tokio::time::sleep(Duration::from_secs(2))).await;
    /// assert_eq!(slow, None);
    /// assert_eq!(retries.expired().limit(), TimeLimit::RetryDeadline);
    /// # Ok(())
    /// # }
    /// ```
    pub fn expired(&self) -> Expiry {
        self.policy
            .as_ref()
            .and_then(|policy| policy.deadline)
            .map_or(
                Expiry::new(TimeLimit::RetryDeadline, Duration::ZERO),
                |(_, expiry)| expiry,
            )
    }

    /// After a failed attempt: whether to retry, and if so the wait first.
    /// `Ok(())` once the wait is over (make the next attempt, at
    /// [`priority`](Self::priority)); `Err` with why not, at once, for the
    /// caller to return the failure as it is.
    ///
    /// A failure the backend sent ([`Overloaded`](RetryCause::Overloaded),
    /// [`Transport`](RetryCause::Transport)) is retried after a full-jitter
    /// backoff, or the backend's pause if that is longer, and takes a token
    /// of the key's budget; a local refusal that says when it could go is
    /// retried then, and takes none (it never reached the backend). Before
    /// anything, a retry whose wait would end past the deadline is not
    /// made.
    ///
    /// # Errors
    ///
    /// [`GaveUp`], saying why there is no retry.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropped during the wait, the retry is not made (its
    /// budget token stays spent).
    ///
    /// ```
    /// use std::time::Duration;
    /// use portcullis::retry::RetryPolicy;
    /// use portcullis::retry::{GaveUp, RetryCause};
    /// use portcullis::{Priority, ThrottleConfig, ThrottleManager};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let manager = ThrottleManager::<String>::builder()
    ///     .throttle(ThrottleConfig::new())
    ///     .retry(RetryPolicy::new().deadline(Duration::from_secs(10)))
    ///     .build()?;
    /// let mut retries = manager.key("api").retries(Priority::HIGH);
    /// // The server asked for 30 s: past the deadline, so no wait at all.
    /// let start = tokio::time::Instant::now();
    /// let cause = RetryCause::Overloaded { pause: Some(Duration::from_secs(30)) };
    /// assert_eq!(retries.after(cause).await, Err(GaveUp::Deadline));
    /// assert_eq!(start.elapsed(), Duration::ZERO);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn after(&mut self, cause: RetryCause) -> Result<(), GaveUp> {
        let wait = self.decide(cause)?;
        let until = self.core.now().saturating_add(nanos(wait));
        self.core
            .clock()
            .sleep_until(Duration::from_nanos(until))
            .await;
        Ok(())
    }

    /// The wait before the next retry, with its budget token taken; or why
    /// there is none.
    fn decide(&mut self, cause: RetryCause) -> Result<Duration, GaveUp> {
        let Some(policy) = &self.policy else {
            return Err(GaveUp::NoPolicy);
        };
        let decided = Self::wait_for(self.core, policy, self.made, cause);
        let label = policy.telemetry.label();
        match decided {
            Ok(wait) => {
                self.made += 1;
                self.core.metrics().retried(label);
                tracing::debug!(parent: policy.telemetry.span(), retry = self.made, ?wait, ?cause, "retrying");
                Ok(wait)
            }
            Err(why) => {
                if why != GaveUp::NotRetryable {
                    self.core.metrics().retry_refused(label, why.label());
                    tracing::debug!(parent: policy.telemetry.span(), %why, ?cause, "not retrying");
                }
                Err(why)
            }
        }
    }

    /// Retry `made + 1`'s full-jitter draw.
    fn backoff(core: &Core, settings: &RetrySettings, made: u32) -> Duration {
        let ceiling = retry_budget::ceiling(made + 1, settings.base, settings.cap);
        retry_budget::jittered(ceiling, core.draw())
    }

    fn wait_for(
        core: &Core,
        policy: &Policed<'_>,
        made: u32,
        cause: RetryCause,
    ) -> Result<Duration, GaveUp> {
        let settings = policy.settings;
        if made >= settings.max_retries {
            return Err(GaveUp::MaxRetries);
        }
        let (wait, from_backend) = match cause {
            RetryCause::Refused { retry_after: None } => return Err(GaveUp::NotRetryable),
            RetryCause::Refused {
                retry_after: Some(after),
            } => (after, false),
            RetryCause::Transport if !settings.transport_errors => {
                return Err(GaveUp::NotRetryable);
            }
            RetryCause::Transport => (Self::backoff(core, settings, made), true),
            RetryCause::Overloaded { pause } => {
                let backoff = Self::backoff(core, settings, made);
                (backoff.max(pause.unwrap_or_default()), true)
            }
        };
        let now = core.now();
        if policy
            .deadline
            .is_some_and(|(deadline, _)| now.saturating_add(nanos(wait)) > deadline)
        {
            return Err(GaveUp::Deadline);
        }
        if from_backend {
            let budget = policy.state.as_deref().and_then(KeyState::retry_budget);
            if !budget.is_some_and(|budget| budget.withdraw(now, &settings.budget)) {
                return Err(GaveUp::Budget);
            }
        }
        Ok(wait)
    }
}

impl fmt::Debug for Retries<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Retries")
            .field(
                "policy",
                &self.policy.as_ref().map(|policy| policy.settings),
            )
            .field("first", &self.first)
            .field("made", &self.made)
            .finish_non_exhaustive()
    }
}
