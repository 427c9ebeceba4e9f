//! A call's deadline, carried by its task as its priority is
//! ([`with_deadline`], at the crate's root): every wait
//! the manager would make for a call inside [`with_deadline`] is refused at
//! once when it cannot end before the deadline, instead of waiting and
//! timing out.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

tokio::task_local! {
    static TASK_DEADLINE: Instant;
}

/// Runs `future` with `deadline` as its task's deadline: every call the
/// manager admits inside it, however deep, must be able to start before
/// `deadline`, and a call made through
/// [`call`](crate::ThrottleManager::call) ends by it. A wait that cannot
/// end in time is refused at once with
/// [`RejectReason::Deadline`](crate::RejectReason::Deadline), taking
/// nothing, so a caller that has given up costs the backend nothing.
/// gRPC and Envoy carry a caller's deadline with the call the same way.
///
/// Which waits are known, and which are estimates:
/// - a **rate token**'s time is known: the call is refused at once if its
///   token comes later than the deadline (for a call behind others in the
///   key's line, the line's expected wait at the current rate);
/// - **room in a full key space**: the time until a key can be evicted is
///   known, and refused at once the same way;
/// - a **place in the bulkhead's queue** has no known wait: the call
///   queues, and leaves the queue with `Deadline` when the deadline comes
///   (or at its queue timeout, if that is sooner);
/// - a **retry's backoff** that would end past the deadline is not slept:
///   the retries give up at once.
///
/// The innermost `with_deadline` can only bring a deadline closer: an
/// inner deadline later than the outer one keeps the outer. The deadline
/// belongs to the future, not the thread: tasks spawned inside do not
/// inherit it.
///
/// ```
/// use portcullis::{with_deadline, RateConfig, RejectReason, ThrottleManager, Priority};
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
/// use portcullis::{deadline, with_deadline};
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
    TASK_DEADLINE.try_with(|deadline| *deadline).ok()
}

/// The time left before the task's deadline, if it has one: zero once it
/// has passed.
#[inline]
pub(crate) fn remaining() -> Option<Duration> {
    TASK_DEADLINE
        .try_with(|deadline| deadline.saturating_duration_since(Instant::now()))
        .ok()
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
}
