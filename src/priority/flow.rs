//! Whom a call is for: its [`Flow`] (the user, the tenant), which a shared
//! key's fair queue serves round ([`BulkheadConfig::fair_queuing`]). It
//! travels with the call as its task's priority and deadline do: set for
//! a task by [`with_flow`] (the server layer sets its key's for the
//! handler), or, for a key of
//! [`call_all`](crate::ThrottleManager::call_all), the keys before it. It
//! is not among a call's options, which every call carries: a request's
//! flow is set once at its edge.
//!
//! [`BulkheadConfig::fair_queuing`]: crate::BulkheadConfig::fair_queuing

use std::fmt;
use std::future::Future;
use std::hash::{BuildHasher, Hash};
use std::num::NonZeroU64;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::sync::CountedScope;

/// Whom a call is for: a user, a tenant, a client. Known by a hash of its
/// name, seeded at random per process, so a name chosen by a client
/// (a header) cannot be made to share another's flow on purpose.
///
/// ```
/// use portcullis::priority::Flow;
///
/// assert_eq!(Flow::of("user-7"), Flow::of(&String::from("user-7")));
/// assert_ne!(Flow::of("user-7"), Flow::of("user-8"));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Flow(NonZeroU64);

impl Flow {
    /// The flow named `name` (a user id, a tenant, a client's address).
    ///
    /// ```
    /// use portcullis::priority::Flow;
    ///
    /// let tenant = Flow::of(&("acme", 7));
    /// assert_eq!(tenant, Flow::of(&("acme", 7)));
    /// ```
    pub fn of<T: Hash + ?Sized>(name: &T) -> Self {
        static SEED: OnceLock<foldhash::quality::RandomState> = OnceLock::new();
        let hash = SEED.get_or_init(Default::default).hash_one(name);
        // Non-zero, so an `Option<Flow>` is a word: a call's options stay small.
        Self(NonZeroU64::new(hash).unwrap_or(NonZeroU64::MIN))
    }

    /// The flow of the current task, if it runs inside [`with_flow`].
    ///
    /// ```
    /// use portcullis::priority::{Flow, with_flow};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// assert_eq!(Flow::current(), None);
    /// with_flow(Flow::of("user-7"), async {
    ///     assert_eq!(Flow::current(), Some(Flow::of("user-7")));
    /// })
    /// .await;
    /// # }
    /// ```
    #[inline]
    pub fn current() -> Option<Self> {
        if FLOW_SCOPES.load(Ordering::Relaxed) == 0 {
            return None;
        }
        TASK_FLOW.try_with(|flow| *flow).ok()
    }

    /// The hash the queue orders by.
    pub(crate) fn id(self) -> u64 {
        self.0.get()
    }
}

impl fmt::Debug for Flow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Flow({:016x})", self.0)
    }
}

tokio::task_local! {
    static TASK_FLOW: Flow;
}

/// How many [`with_flow`] scopes are alive in the process (see
/// `CountedScope`).
static FLOW_SCOPES: AtomicUsize = AtomicUsize::new(0);

/// Runs `future` with `flow` as its task's flow: every call inside it,
/// however deep, is `flow`'s at a fair queue
/// ([`BulkheadConfig::fair_queuing`](crate::BulkheadConfig::fair_queuing)),
/// whatever flow [`call_all`](crate::ThrottleManager::call_all) would give
/// it. The server layer runs each request's
/// handler under the flow of the request's key, so a database called from
/// the handler knows whose query it is without being told. The innermost
/// `with_flow` wins; tasks spawned inside do not inherit it (wrap them
/// too).
///
/// # Example
///
/// ```
/// use portcullis::priority::{Flow, with_flow};
/// use portcullis::{BulkheadConfig, Priority, ThrottleManager};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let database = ThrottleManager::<String>::builder()
///     .bulkhead(BulkheadConfig::new(4).queue(64).fair_queuing())
///     .build()?;
/// // In a handler: the query queues as user-7's.
/// let rows = with_flow(Flow::of("user-7"), async {
///     database.call("sqlite", Priority::HIGH, || async { Ok::<_, std::io::Error>(3) }).await
/// })
/// .await?;
/// assert_eq!(rows, 3);
/// # Ok(())
/// # }
/// ```
///
/// # Cancel safety
///
/// Dropping the returned future drops `future` and ends the scope.
pub async fn with_flow<F: Future>(flow: Flow, future: F) -> F::Output {
    let _scope = CountedScope::enter(&FLOW_SCOPES);
    TASK_FLOW.scope(flow, future).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_innermost_scope_wins_and_ends_with_its_future() {
        let (outer, inner) = (Flow::of("outer"), Flow::of("inner"));
        with_flow(outer, async {
            assert_eq!(Flow::current(), Some(outer));
            with_flow(inner, async { assert_eq!(Flow::current(), Some(inner)) }).await;
            assert_eq!(Flow::current(), Some(outer));
        })
        .await;
        assert_eq!(Flow::current(), None);
    }
}
