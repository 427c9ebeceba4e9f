//! A call's deadline, carried by its task as its priority is
//! ([`with_deadline`], at the crate's root): every wait
//! the manager would make for a call inside [`with_deadline`] is refused at
//! once when it cannot end before the deadline, instead of waiting and
//! timing out.
//!
//! # Whose time ran out
//!
//! Three limits can end a call that is running ([`TimeLimit`]), and only
//! one of them judges the backend:
//!
//! | limit | counted from | its expiry counts as |
//! |---|---|---|
//! | the [call timeout](crate::deadline::TimeLimits::call_timeout) (or a call's own, [`call_with_timeout`](crate::Priority::timeout)) | the call's admission | [`Overloaded`](crate::outcome::Outcome::Overloaded): the backend had all of it and used it |
//! | the caller's deadline ([`with_deadline`], a gRPC `grpc-timeout`, a server's deadline header, a reqwest request's own `timeout`) | wherever the caller set it | [`Neutral`](crate::outcome::Outcome::Neutral): the caller's budget, spent partly waiting here |
//! | the retry policy's [`deadline`](crate::retry::RetryPolicy::deadline) | the first attempt | [`Neutral`](crate::outcome::Outcome::Neutral), for the same reason |
//!
//! A call is bounded by the sooner of its call timeout and its deadline.
//! When the deadline comes first, the backend has had less than its call
//! timeout, some of the caller's budget having gone on waiting for a
//! token, a slot or room: that is no evidence against the backend, and
//! counting it would make a key's rate fall because its callers waited,
//! so waits would grow and the rate fall further. The backend is judged
//! by the call timeout alone; to have a slow backend counted as
//! overloaded, give the manager a call timeout. When both limits fall at
//! the same instant, the backend had its whole call timeout: overload.
//!
//! A deadline already passed, or reached exactly, is refused with
//! [`RejectReason::Deadline`](crate::error::RejectReason::Deadline) by every
//! entry point before anything is taken or run: an admitted call can
//! always start before its deadline.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::sync::CountedScope;

mod answer_time;
mod limits;
mod time_limits;

pub(crate) use answer_time::AnswerTime;
pub(crate) use limits::call_bound;
pub use limits::{Expiry, TimeLimit};
pub use time_limits::TimeLimits;

tokio::task_local! {
    static TASK_DEADLINE: Instant;
}

/// How many [`with_deadline`] scopes are alive in the process (see
/// `CountedScope`).
static SCOPES: AtomicUsize = AtomicUsize::new(0);

/// Runs `future` with `deadline` as its task's deadline: every call the
/// manager admits inside it, however deep, must be able to start before
/// `deadline`, and a call made through
/// [`call`](crate::ThrottleManager::call) or an edge ends by it. A wait
/// that cannot end in time, or a deadline already passed (or reached
/// exactly), is refused at once with
/// [`RejectReason::Deadline`](crate::error::RejectReason::Deadline), taking
/// nothing and running nothing, so a caller that has given up costs the
/// backend nothing. gRPC and Envoy carry a caller's deadline with the
/// call the same way.
///
/// How this limit meets the other six (what each bounds, on which
/// clock, what its expiry counts as): the [time
/// limits](crate::guide::getting_started#time-limits).
///
/// A call the deadline ends while it runs is dropped and counted as
/// [`Neutral`](crate::outcome::Outcome::Neutral): the deadline is the caller's
/// budget, part of which may have gone on waiting here, not evidence
/// that the backend is overloaded. Only the manager's
/// [`call_timeout`](crate::deadline::TimeLimits::call_timeout) judges
/// the backend (see [whose time ran out](self#whose-time-ran-out)).
///
/// A call must also leave its backend time to answer: a key remembers
/// the quickest recent answer of its calls made with a deadline, and a
/// call waits only while it would still start that long before its
/// deadline. With an answer taking 30 ms, a call with 100 ms left waits
/// 70 ms at most; one with 20 ms left is refused at once. Waiting longer
/// would spend the caller's deadline here and send a call it would then
/// cut short, work the backend does for nothing. (The estimate leans
/// short: only calls that could not have finished are refused.)
///
/// Which waits are known, and which are estimates:
/// - a **rate token**'s time is known: the call is refused at once if its
///   token comes too late (for a call behind others in the key's line,
///   the line's expected wait at the current rate);
/// - **room in a full key space**: the time until a key can be evicted is
///   known, and refused at once the same way;
/// - a **place in the bulkhead's queue** has no known wait: the call
///   queues, and leaves the queue with `Deadline` when it could no longer
///   start in time (or at its queue timeout, if that is sooner);
/// - a **retry's backoff** that would end past the deadline is not slept:
///   the retries give up at once.
///
/// The innermost `with_deadline` can only bring a deadline closer: an
/// inner deadline later than the outer one keeps the outer. The deadline
/// belongs to the future, not the thread: tasks spawned inside do not
/// inherit it.
///
/// ```
/// use portcullis::deadline::with_deadline;
/// use portcullis::error::RejectReason;
/// use portcullis::{RateConfig, ThrottleManager, Priority};
/// use tokio::time::{Duration, Instant};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let manager = ThrottleManager::<String>::builder()
///     .rate(RateConfig::per_second(2).burst(1)) // a token every 500 ms
///     .build()?;
/// manager.acquire("api", Priority::HIGH).await?.success(); // the burst
/// let start = Instant::now();
/// // The next token is 500 ms away: a caller with 100 ms left is refused at once.
/// let refused = with_deadline(start + Duration::from_millis(100), manager.acquire("api", Priority::HIGH))
///     .await
///     .unwrap_err();
/// assert_eq!(refused.reason(), RejectReason::Deadline);
/// assert_eq!(start.elapsed(), Duration::ZERO);
/// // One with a second left waits for it, and is admitted.
/// let permit = with_deadline(start + Duration::from_secs(1), manager.acquire("api", Priority::HIGH)).await?;
/// assert_eq!(start.elapsed(), Duration::from_millis(500));
/// permit.success();
/// # Ok(())
/// # }
/// ```
pub async fn with_deadline<F: Future>(deadline: Instant, future: F) -> F::Output {
    let _scope = CountedScope::enter(&SCOPES);
    let deadline = match TASK_DEADLINE.try_with(|outer| *outer) {
        Ok(outer) => outer.min(deadline),
        Err(_) => deadline,
    };
    TASK_DEADLINE.scope(deadline, future).await
}

/// The deadline of the task this runs in ([`with_deadline`]), if it has
/// one: for an edge of your own that sends it on (the client layer sends
/// it as `grpc-timeout`).
///
/// ```
/// use portcullis::deadline::with_deadline;
/// use portcullis::deadline;
/// use tokio::time::{Duration, Instant};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let at = Instant::now() + Duration::from_secs(1);
/// assert_eq!(deadline::current(), None);
/// with_deadline(at, async move { assert_eq!(deadline::current(), Some(at)) }).await;
/// # }
/// ```
pub fn current() -> Option<Instant> {
    if SCOPES.load(Ordering::Relaxed) == 0 {
        return None;
    }
    TASK_DEADLINE.try_with(|deadline| *deadline).ok()
}

/// The time left before the task's deadline ([`with_deadline`]), if it has
/// one: zero once it has passed. For an edge of your own that sends the
/// deadline on as a timeout (the client layer sends it as `grpc-timeout`).
///
/// ```
/// use portcullis::deadline::{self, with_deadline};
/// use tokio::time::{Duration, Instant};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// assert_eq!(deadline::remaining(), None);
/// let at = Instant::now() + Duration::from_secs(1);
/// with_deadline(at, async {
///     assert_eq!(deadline::remaining(), Some(Duration::from_secs(1)));
/// })
/// .await;
/// # }
/// ```
#[inline]
pub fn remaining() -> Option<Duration> {
    if SCOPES.load(Ordering::Relaxed) == 0 {
        return None;
    }
    TASK_DEADLINE
        .try_with(|deadline| crate::clock::left_until(*deadline))
        .ok()
}

/// The deadline `left` from now, as the instant [`with_deadline`] takes:
/// for an edge of your own that reads a timeout from a request (the server
/// layer reads `grpc-timeout`). `None` (no deadline) when it lies past what
/// an [`Instant`] can hold, as `Duration::MAX` does.
///
/// ```
/// use portcullis::deadline::{self, with_deadline};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let at = deadline::from_now(Duration::from_millis(300)).expect("within range");
/// with_deadline(at, async {
///     assert_eq!(deadline::remaining(), Some(Duration::from_millis(300)));
/// })
/// .await;
/// assert_eq!(deadline::from_now(Duration::MAX), None);
/// # }
/// ```
pub fn from_now(left: Duration) -> Option<Instant> {
    crate::clock::instant_after(left)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn an_inner_deadline_only_brings_the_outer_one_closer() {
        let now = Instant::now();
        let second = Duration::from_secs(1);
        assert_eq!(remaining(), None);
        with_deadline(now + second, async {
            assert_eq!(remaining(), Some(second));
            with_deadline(now + 5 * second, async {
                assert_eq!(remaining(), Some(second), "a later one keeps the outer");
            })
            .await;
            with_deadline(now + second / 2, async {
                assert_eq!(remaining(), Some(second / 2));
            })
            .await;
            tokio::time::advance(2 * second).await;
            assert_eq!(remaining(), Some(Duration::ZERO), "passed: nothing left");
        })
        .await;
    }

    proptest::proptest! {
        #[test]
        fn any_timeout_is_a_deadline_or_none_never_a_panic(secs: u64, subsec in 0..1_000_000_000u32) {
            let _ = from_now(Duration::new(secs, subsec));
        }
    }
}
