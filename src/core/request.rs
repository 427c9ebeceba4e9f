//! [`Request`]: what one admission asks of a key's controls, without the
//! key: the priority, the cost, how long the caller waits, which controls
//! apply, and the caller's deadline on the core's clock. Every entry point
//! builds one and hands it to the driver (`core/drive.rs`). And how long
//! the call may wait by it: [`StartBy`] for its start, [`TokenDeadline`]
//! for its rate token.

use super::{Core, Patience};
use crate::clock::{Nanos, nanos};
use crate::deadline;
use crate::error::{RejectReason, Rejected};
use crate::priority::{Flow, Priority};

/// Which of a key's controls an admission goes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    /// The throttle, the rate and the bulkhead: a permit's.
    Every,
    /// The rate alone: [`wait`](crate::ThrottleManager::wait) and
    /// [`check`](crate::ThrottleManager::check).
    RateOnly,
    /// The throttle and the rate, up to a booked token, and no slot: one
    /// key of a call charged to several, whose slots are taken once every
    /// key's token is due.
    Token,
    /// The throttle and the bulkhead: the rate's tokens were taken already,
    /// by the store's round trip that took the call's named limits (a
    /// metered call's: `manager/metered.rs`).
    RateTaken,
}

/// One admission's ask, without its key.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Request {
    /// The priority asked for (resolved by the driver).
    pub(crate) asked: Priority,
    /// Rate tokens the call takes.
    pub(crate) cost: u32,
    pub(crate) patience: Patience,
    pub(crate) scope: Scope,
    /// The caller's deadline ([`with_deadline`](crate::deadline::with_deadline)) on
    /// the core's clock, read once when the request was made; `None`: no
    /// deadline.
    pub(crate) deadline: Option<Nanos>,
    /// Whom the call is for, as its caller gave it (the task's flow, which
    /// wins, is read by [`flow`](Self::flow) only when the call queues).
    pub(crate) flow: Option<Flow>,
}

/// How long a call may wait before it starts, by its deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StartBy {
    /// No deadline.
    Whenever,
    /// It may start up to this time and still finish in time.
    Until(Nanos),
    /// Too late already: it could not finish before its deadline even if
    /// it started now.
    TooLate,
}

impl Request {
    /// A request of `scope` at `asked`, for `cost` tokens, waiting as
    /// `patience` says; its deadline is the task's, read now.
    #[inline]
    pub(crate) fn new(
        core: &Core,
        asked: Priority,
        cost: u32,
        patience: Patience,
        scope: Scope,
    ) -> Self {
        let deadline = deadline::remaining().map(|left| core.now().saturating_add(nanos(left)));
        Self {
            asked,
            cost,
            patience,
            scope,
            deadline,
            flow: None,
        }
    }

    /// Whom the call is for at a fair queue: the task's flow
    /// ([`with_flow`](crate::priority::with_flow)), else the one given. Read
    /// when the call meets a bulkhead's queue, not on every call.
    #[inline]
    pub(crate) fn flow(&self) -> Option<Flow> {
        Flow::current().or(self.flow)
    }

    /// Until when the call may start, at `now`, to a backend that answers
    /// in `answer()` at the quickest ([`deadline::AnswerTime`]; asked only
    /// under a deadline): its deadline, less the answer (a call that starts
    /// later could not finish in time), less a tick (a call must start
    /// before its deadline). Too late when the deadline is `answer` away or
    /// less: one that has passed, or is now, always.
    #[inline]
    pub(crate) fn start_by(&self, now: Nanos, answer: impl FnOnce() -> Nanos) -> StartBy {
        let Some(deadline) = self.deadline else {
            return StartBy::Whenever;
        };
        match deadline.checked_sub(answer()) {
            Some(latest) if latest > now => StartBy::Until(latest - 1),
            _ => StartBy::TooLate,
        }
    }

    /// [`start_by`](Self::start_by) as a refusal, at `priority`, of a call
    /// that is [`TooLate`](StartBy::TooLate).
    #[inline]
    pub(crate) fn in_time(
        &self,
        now: Nanos,
        answer: impl FnOnce() -> Nanos,
        priority: Priority,
    ) -> Result<(), Rejected> {
        match self.start_by(now, answer) {
            StartBy::TooLate => Err(Rejected::new(RejectReason::Deadline, priority, None)),
            _ => Ok(()),
        }
    }

    /// Whether the call takes a slot of its key's bulkhead.
    #[inline]
    pub(crate) fn takes_slot(&self) -> bool {
        matches!(self.scope, Scope::Every | Scope::RateTaken)
    }
}

/// The latest a call's rate token may come, measured on the core's clock:
/// by the settings (from the call's arrival) and by the caller's deadline
/// (early enough to start before it with time for an answer: see
/// [`Request::start_by`](super::Request::start_by)).
#[derive(Debug, Clone, Copy)]
pub(crate) struct TokenDeadline {
    configured: Nanos,
    caller: Option<Nanos>,
}

impl TokenDeadline {
    /// The earlier of the two.
    pub(crate) fn latest(self) -> Nanos {
        self.caller
            .map_or(self.configured, |caller| caller.min(self.configured))
    }

    /// The refusal of a call whose token is due at `due`, `wait` from now,
    /// past [`latest`](Self::latest): the rate's when the settings would
    /// not wait that long, else the caller's deadline's.
    pub(crate) fn refusal(self, due: Nanos, wait: Nanos, priority: Priority) -> Rejected {
        if self.is_the_callers(due) {
            Rejected::new(RejectReason::Deadline, priority, None)
        } else {
            Rejected::rate_limited(wait, priority)
        }
    }

    /// Whether a wait until `due`, past [`latest`](Self::latest), is
    /// refused by the caller's deadline: the settings would wait that long.
    pub(crate) fn is_the_callers(self, due: Nanos) -> bool {
        due <= self.configured
    }
}

impl Core {
    /// The latest a token may come for a call of `patience` that arrived
    /// at `arrived`, to a key whose quickest recent answer is `answer`.
    pub(crate) fn token_deadline(
        &self,
        priority: Priority,
        request: &Request,
        arrived: Nanos,
        answer: Nanos,
    ) -> TokenDeadline {
        let configured =
            arrived.saturating_add(self.configured_patience(priority, request.patience));
        let caller = match request.patience {
            Patience::Never | Patience::QueueOnly => None,
            Patience::AsConfigured | Patience::Unbounded => {
                match request.start_by(self.now(), || answer) {
                    StartBy::Whenever => None,
                    StartBy::Until(latest) => Some(latest),
                    // No token is early enough: any is refused as the
                    // caller's deadline's.
                    StartBy::TooLate => Some(0),
                }
            }
        };
        TokenDeadline { configured, caller }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = 1_000_000;

    fn with_deadline(deadline: Option<Nanos>) -> Request {
        Request {
            asked: Priority::LOW,
            cost: 1,
            patience: Patience::AsConfigured,
            scope: Scope::Every,
            deadline,
            flow: None,
        }
    }

    #[test]
    fn a_call_may_start_until_its_deadline_less_its_answer_and_a_tick() {
        assert_eq!(with_deadline(None).start_by(0, || 0), StartBy::Whenever);
        let request = with_deadline(Some(100 * MS));
        assert_eq!(request.start_by(0, || 0), StartBy::Until(100 * MS - 1));
        assert_eq!(request.start_by(0, || 30 * MS), StartBy::Until(70 * MS - 1));
        assert_eq!(request.start_by(0, || 100 * MS), StartBy::TooLate);
        assert_eq!(request.start_by(0, || 100 * MS - 1), StartBy::Until(0));
        assert_eq!(
            request.start_by(100 * MS, || 0),
            StartBy::TooLate,
            "reached exactly"
        );
        let refused = request.in_time(100 * MS, || 0, Priority::LOW).unwrap_err();
        assert_eq!(
            (refused.reason(), refused.priority()),
            (RejectReason::Deadline, Priority::LOW)
        );
        assert!(request.in_time(0, || 0, Priority::LOW).is_ok());
    }
}
