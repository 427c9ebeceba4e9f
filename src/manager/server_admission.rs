//! The one admission only a server needs: refused at once by everything
//! but the bulkhead's queue. Apart, and last in the method list, so that a
//! caller meets `acquire` and `try_acquire` first.

use std::hash::Hash;

use super::ThrottleManager;
use crate::core::Patience;
use crate::error::Rejected;
use crate::permit::{OwnedPermit, Permit};
use crate::priority::Priority;
use crate::registry::BorrowedKey;

/// # Admission for servers
impl<K> ThrottleManager<K>
where
    K: Hash + Eq + Send + Sync + 'static,
{
    /// [`try_acquire_owned`](Self::try_acquire_owned), except that a call
    /// its bulkhead has no slot for waits in the bulkhead's queue, as
    /// configured (`queue`, `queue_timeout`, the overflow policy), instead
    /// of being refused. It waits for nothing else: a call the rate would
    /// hold, or a new key in a full key space, is refused at once, with the
    /// wait as [`retry_after`](Rejected::retry_after).
    ///
    /// What a server answering a client needs: a client over its quota is
    /// answered at once (429 with `Retry-After`) rather than held on its
    /// connection, while a short burst of concurrent requests queues for
    /// the bulkhead. The server layer admits every request this way.
    ///
    /// # Errors
    ///
    /// [`Rejected`] as [`try_acquire`](Self::try_acquire) refuses, and
    /// with [`RejectReason::QueueTimeout`](crate::RejectReason::QueueTimeout)
    /// or [`RejectReason::Dropped`](crate::RejectReason::Dropped) from the
    /// queue.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe, as [`acquire`](Self::acquire): dropped in the queue, it
    /// leaves the queue at once and takes nothing; a slot handed to it at
    /// that instant goes on to the next waiter.
    ///
    /// ```
    /// use portcullis::{BulkheadConfig, Priority, RateConfig, RejectReason, ThrottleManager};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), portcullis::ConfigError> {
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::adaptive(1.0).burst(2))
    ///     .bulkhead(BulkheadConfig::new(1).queue(1))
    ///     .build()?;
    /// let first = manager.try_acquire_or_queue_owned("api", Priority::HIGH).await.unwrap();
    /// // The second call queues for the slot, and has it once the first ends.
    /// let second = tokio::spawn({
    ///     let manager = manager.clone();
    ///     async move { manager.try_acquire_or_queue_owned("api", Priority::HIGH).await }
    /// });
    /// tokio::task::yield_now().await;
    /// first.success();
    /// second.await.unwrap().unwrap().success();
    /// // The burst is spent: the rate refuses at once instead of waiting.
    /// let refused = manager.try_acquire_or_queue_owned("api", Priority::HIGH).await.unwrap_err();
    /// assert_eq!(refused.reason(), RejectReason::RateLimited);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_acquire_or_queue_owned<Q: BorrowedKey<K> + ?Sized>(
        &self,
        key: &Q,
        priority: Priority,
    ) -> Result<OwnedPermit, Rejected> {
        let request = self.permit_request(priority, 1, Patience::QueueOnly);
        let ticket = self.admit(key, &request).await?;
        Ok(Permit::owned(&self.inner.core, ticket))
    }
}
