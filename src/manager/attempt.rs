//! One logical call of `call` and `call_all`: its attempts under the
//! retry policy ([`ThrottleManager::call_charged`]), each admitted by the
//! driver, run under its call timeout and its caller's deadline on the
//! manager's clock, and its outcome classified and reported
//! ([`ThrottleManager::attempt`]).

use std::future::Future;
use std::hash::Hash;
use std::time::Duration;

use super::ThrottleManager;
use crate::core::Patience;
use crate::deadline::{self, TimeLimit};
use crate::error::{CallError, Rejected};
use crate::outcome::{CallFailure, Outcome, outcome_of};
use crate::permit::{JointPermit, Permit, Ticket};
use crate::priority::{AdmitOptions, CallOptions, Priority, with_priority};
use crate::registry::BorrowedKey;
use crate::retry::{Retries, RetryCause};

impl<K> ThrottleManager<K>
where
    K: Hash + Eq + Send + Sync + 'static,
{
    /// Runs `call` charged to `keys` as `options` ask (its own run timeout,
    /// else the manager's): one attempt, or attempts as the manager's
    /// retry policy allows.
    pub(super) async fn call_charged<Q: BorrowedKey<K> + ?Sized, F, Fut, T, E, Via>(
        &self,
        keys: Charged<'_, Q>,
        options: CallOptions,
        mut call: F,
    ) -> Result<T, CallError<E>>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: CallFailure<Via>,
    {
        let timeout = options.run_timeout().or(self.core().call_timeout());
        if self.core().retry_settings().is_none() {
            let attempt = self
                .attempt(keys, options.admit(), timeout, &mut call)
                .await;
            return attempt.map_err(|(error, _)| error);
        }
        self.call_with_retries(keys, options, timeout, call).await
    }

    /// [`call_charged`](Self::call_charged) under the manager's retry
    /// policy: an attempt, then more while the policy allows. A future of
    /// its own: the loop's state laid out in `call_charged`'s beside the
    /// lone attempt's made every call's future larger, retried or not.
    async fn call_with_retries<Q: BorrowedKey<K> + ?Sized, F, Fut, T, E, Via>(
        &self,
        keys: Charged<'_, Q>,
        options: CallOptions,
        timeout: Option<Duration>,
        mut call: F,
    ) -> Result<T, CallError<E>>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: CallFailure<Via>,
    {
        let (admit, priority) = (options.admit(), options.admit().priority());
        // A retry's lower priority must win over the task's, which would
        // otherwise replace it: every attempt runs under its own.
        let first = Priority::current().unwrap_or(priority);
        let mut retries = match keys.first() {
            Some(key) => self.key(key).retries(first),
            None => Retries::new(self.core(), None, None, first),
        };
        loop {
            let priority = retries.priority();
            // Pinned where it is made: the loop's state holds the attempt
            // once (an attempt passed on by value is held again by each
            // future it passes through).
            let attempt = std::pin::pin!(with_priority(
                priority,
                self.attempt(keys, admit.at(priority), timeout, &mut call),
            ));
            let (error, outcome) = match retries.within_pinned(attempt).await {
                Some(Ok(value)) => return Ok(value),
                Some(Err(failed)) => failed,
                // Past the deadline: dropped unfinished, as neutral.
                None => return Err(CallError::TimedOut(retries.expired())),
            };
            let cause = match &error {
                CallError::Rejected(rejected) => RetryCause::Refused {
                    retry_after: rejected.retry_after(),
                },
                CallError::TimedOut(expiry) if expiry.limit() == TimeLimit::CallTimeout => {
                    RetryCause::Overloaded { pause: None }
                }
                _ if outcome == Outcome::Overloaded => RetryCause::Overloaded { pause: None },
                _ => return Err(error),
            };
            if retries.after(cause).await.is_err() {
                return Err(error);
            }
        }
    }

    /// One attempt: admitted, run, reported. A failure comes with the
    /// outcome it was reported as.
    async fn attempt<Q: BorrowedKey<K> + ?Sized, F, Fut, T, E, Via>(
        &self,
        keys: Charged<'_, Q>,
        admit: AdmitOptions,
        timeout: Option<Duration>,
        call: &mut F,
    ) -> Result<T, (CallError<E>, Outcome)>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: CallFailure<Via>,
    {
        let core = self.core();
        let request = self.permit_request(admit, Patience::AsConfigured);
        let admitted = match keys {
            // As `acquire`, with the ticket of a call admitted at once kept
            // in this future's state (see `Core::admit_at_once`).
            Charged::One(key) => {
                let lookup = self.lookup(key);
                let mut admitted: Result<Ticket, Rejected> =
                    match core.admit_at_once(&lookup, &request) {
                        Ok(admitted) => admitted,
                        Err(wait) if self.shadows(key) => Err(wait.refused(core, &request)),
                        // Boxed, as the joint wait below: a call admitted at
                        // once carries no waiting state in its future.
                        Err(wait) => Box::pin(core.admit_after(&lookup, &request, wait)).await,
                    };
                self.settle_admission(key, &request, &mut admitted);
                admitted.map(|ticket| Attempted::One(Permit::borrowed(core, ticket)))
            }
            // Boxed: a single key's call future stays as small as its own
            // steps need.
            Charged::All(keys) => Box::pin(self.admit_all(keys, &request))
                .await
                .map(Attempted::All),
        };
        let permit =
            admitted.map_err(|rejected| (CallError::Rejected(rejected), Outcome::Neutral))?;
        // A call admitted with a deadline keeps it: it ends by the sooner
        // of its timeout and its caller's deadline, on the manager's clock,
        // and only its timeout judges the backend.
        let result = match deadline::call_bound(timeout, request.deadline, || core.now()) {
            None => call().await,
            Some((bound, until)) => match core.before(until, std::pin::pin!(call())).await {
                Some(result) => result,
                None => {
                    let outcome = bound.limit().counts_as();
                    permit.report(outcome);
                    return Err((CallError::TimedOut(bound), outcome));
                }
            },
        };
        match result {
            Ok(value) => {
                if request.deadline.is_some() {
                    permit.answered();
                }
                permit.success();
                Ok(value)
            }
            Err(error) => {
                let outcome = outcome_of(&error, core.classifier());
                permit.report(outcome);
                Err((CallError::Inner(error), outcome))
            }
        }
    }
}

/// The keys an attempt is charged to.
pub(super) enum Charged<'k, Q: ?Sized> {
    One(&'k Q),
    All(&'k [&'k Q]),
}

impl<Q: ?Sized> Clone for Charged<'_, Q> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<Q: ?Sized> Copy for Charged<'_, Q> {}

impl<'k, Q: ?Sized> Charged<'k, Q> {
    /// The key whose retry budget the call draws on.
    fn first(self) -> Option<&'k Q> {
        match self {
            Charged::One(key) => Some(key),
            Charged::All(keys) => keys.first().copied(),
        }
    }
}

/// An admitted attempt's permit: one key's, or every key's.
enum Attempted<'m> {
    One(Permit<'m>),
    All(JointPermit<'m>),
}

impl Attempted<'_> {
    /// [`report`](Self::report) of a success, kept apart: a permit's
    /// success is its quickest way out.
    #[inline]
    fn success(self) {
        match self {
            Attempted::One(permit) => permit.success(),
            Attempted::All(permit) => permit.success(),
        }
    }

    fn report(self, outcome: Outcome) {
        match self {
            Attempted::One(permit) => permit.report(outcome),
            Attempted::All(permit) => permit.report(outcome),
        }
    }

    /// The call, which had a deadline, had its answer now.
    fn answered(&self) {
        match self {
            Attempted::One(permit) => permit.answered(),
            Attempted::All(permit) => permit.answered(),
        }
    }
}
