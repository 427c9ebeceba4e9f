//! [`EdgeCall`]: the one path of a call through an edge (the steps are in
//! the [module's docs](super)). An edge brings what is its own: how it
//! admits (a client waits, a server queues), how it calls and judges what
//! came back; it answers each [`Passage`] its own way.

use std::future::Future;
use std::time::Duration;

use super::BodyPermit;
use crate::ThrottleManager;
use crate::deadline::{self, Expiry};
use crate::error::Rejected;
use crate::outcome::Outcome;
use crate::priority::{Priority, with_priority};
use crate::with_deadline;
use tokio::time::Instant;

/// How an edge waits for its call's admission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admission {
    /// As [`acquire`](ThrottleManager::acquire): for the rate's token and a
    /// place in the bulkhead. A client's way: its caller wants the call
    /// made.
    Wait,
    /// As [`try_acquire_or_queue_owned`](ThrottleManager::try_acquire_or_queue_owned):
    /// refused at once if the rate has no token, queued for the bulkhead.
    /// A server's way: a client over its quota is told so, not held.
    #[cfg(feature = "tower")]
    Queue,
}

/// What came back from a call, as the edge judges it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Verdict {
    pub(crate) outcome: Outcome,
    /// How long the answer asks the caller to hold off the key.
    pub(crate) pause: Option<Duration>,
}

impl Verdict {
    /// `outcome`, with no pause asked for.
    pub(crate) fn of(outcome: Outcome) -> Self {
        Self {
            outcome,
            pause: None,
        }
    }
}

/// How a call through an edge went.
#[derive(Debug)]
pub(crate) enum Passage<T, E> {
    /// The key's controls refused it: it was not made.
    Refused(Rejected),
    /// It had no answer within the manager's call timeout (counted as
    /// overload) or before its caller's deadline (neutral): dropped.
    TimedOut(Expiry),
    /// A success whose body is to carry `BodyPermit` to its end.
    Carried(T, BodyPermit),
    /// What came back, already reported as the verdict says (and the key
    /// deferred by its pause).
    Reported(
        Result<T, E>,
        // Only the reqwest middleware's retries read it.
        #[cfg_attr(not(feature = "reqwest"), allow(dead_code))] Verdict,
    ),
}

/// One call through an edge: on `key` of `manager`, at `priority`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct EdgeCall<'a> {
    pub(crate) manager: &'a ThrottleManager<String>,
    pub(crate) key: &'a str,
    pub(crate) priority: Priority,
    pub(crate) admission: Admission,
    /// Whether a success's body carries its permit (`false`: every call
    /// ends at its head, `release_at_headers`).
    pub(crate) carry: bool,
    /// The call's deadline, if it brought one (a server's `grpc-timeout`,
    /// a request's own timeout): admitted and run under it.
    pub(crate) deadline: Option<Instant>,
}

impl EdgeCall<'_> {
    /// Admits the call, makes it with `call` under the manager's call
    /// timeout, judges what came back with `judge`, and reports it or
    /// hands its permit on.
    ///
    /// # Cancel safety
    ///
    /// Dropped while waiting for admission, it takes nothing from the key;
    /// dropped while `call` runs, it drops that call and frees the key's
    /// slot, counting a neutral outcome.
    pub(crate) async fn pass<T, E, F, C>(
        self,
        call: C,
        judge: impl FnOnce(&Result<T, E>) -> Verdict,
    ) -> Passage<T, E>
    where
        C: FnOnce() -> F,
        F: Future<Output = Result<T, E>>,
    {
        match self.deadline {
            Some(deadline) => with_deadline(deadline, self.pass_by(call, judge)).await,
            None => self.pass_by(call, judge).await,
        }
    }

    /// [`pass`](Self::pass), under the task's deadline if it has one: the
    /// call ends by the sooner of it and the manager's call timeout, and
    /// only the call timeout's expiry counts against the backend (see
    /// [whose time ran out](crate::deadline#whose-time-ran-out)).
    async fn pass_by<T, E, F, C>(
        self,
        call: C,
        judge: impl FnOnce(&Result<T, E>) -> Verdict,
    ) -> Passage<T, E>
    where
        C: FnOnce() -> F,
        F: Future<Output = Result<T, E>>,
    {
        let (manager, key, priority) = (self.manager, self.key, self.priority);
        let admitted = match self.admission {
            Admission::Wait => with_priority(priority, manager.acquire_owned(key, priority)).await,
            #[cfg(feature = "tower")]
            Admission::Queue => manager.try_acquire_or_queue_owned(key, priority).await,
        };
        let permit = match admitted {
            Ok(permit) => permit,
            Err(rejected) => return Passage::Refused(rejected),
        };
        let result = match deadline::call_bound(manager.call_timeout()) {
            None => call().await,
            Some(bound) => match tokio::time::timeout(bound.after(), call()).await {
                Ok(result) => result,
                Err(_) => {
                    permit.report(bound.limit().counts_as());
                    return Passage::TimedOut(bound);
                }
            },
        };
        let verdict = judge(&result);
        let under_deadline = deadline::current().is_some();
        if under_deadline && verdict.outcome == Outcome::Success {
            permit.answered();
        }
        // A success's body carries the permit to its end, unless its head
        // asks for a pause: a report after the pause is set would rescale
        // the pause with the rate's debt.
        let result = match result {
            Ok(answer) if self.carry && verdict == Verdict::of(Outcome::Success) => {
                let permit = BodyPermit::new(permit, Outcome::Success, under_deadline);
                return Passage::Carried(answer, permit);
            }
            result => result,
        };
        // The outcome first: a failure rescales the rate's debt, which must
        // not stretch a pause set after it.
        permit.report(verdict.outcome);
        if let Some(pause) = verdict.pause {
            let deferred = manager.defer(key, pause);
            tracing::debug!(key, ?pause, ?deferred, "the server asked for a pause");
        }
        Passage::Reported(result, verdict)
    }
}
