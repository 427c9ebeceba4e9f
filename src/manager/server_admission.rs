//! The admissions only an edge needs: refused at once by everything but
//! the bulkhead's queue (a server's), and an admission held until a second
//! manager admits the call too (a service guard's). Apart, and last in the
//! method list, so that a caller meets `acquire` and `try_acquire` first.

use std::hash::Hash;

use super::ThrottleManager;
use crate::core::{Admitted, Admitting, Patience};
use crate::error::{RejectReason, Rejected};
use crate::permit::{OwnedPermit, Permit, Ticket};
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
    /// with [`RejectReason::QueueTimeout`]
    /// or [`RejectReason::Dropped`] from the
    /// queue.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe, as [`acquire`](Self::acquire): dropped in the queue, it
    /// leaves the queue at once and takes nothing; a slot handed to it at
    /// that instant goes on to the next waiter.
    ///
    /// ```
    /// use portcullis::error::RejectReason;
    /// use portcullis::{BulkheadConfig, Priority, RateConfig, ThrottleManager};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), portcullis::error::ConfigError> {
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
        let request = self.permit_request(priority.into(), Patience::QueueOnly);
        let ticket = self.admit(key, &request).await?;
        Ok(Permit::owned(&self.inner.core, ticket))
    }
}

/// A call its key admitted, held until another manager (a server's
/// service guard) admits it too: it holds what the key gave (its rate
/// token, its slot) uncounted, and gives it all back if dropped, as one
/// key of a call charged to several does. [`ThrottleManager::confirm`]
/// makes it a permit.
pub(crate) struct Provisional<'m> {
    call: Admitting<'m>,
    /// Let through by shadow mode: what the key would have refused it for.
    would_refuse: Option<RejectReason>,
}

impl<'c> Admitted<'c> for Provisional<'c> {
    const COUNTED: bool = false;
    const KEEPS_TOKEN: bool = true;

    fn from_call(call: Admitting<'c>) -> Self {
        Self {
            call,
            would_refuse: None,
        }
    }

    fn shadowed(call: Admitting<'c>, reason: RejectReason) -> Self {
        Self {
            call,
            would_refuse: Some(reason),
        }
    }

    fn label(&self) -> Option<&str> {
        self.call.call().telemetry.label()
    }
}

/// # Admission held for a second manager
impl<K> ThrottleManager<K>
where
    K: Hash + Eq + Send + Sync + 'static,
{
    /// `key` admits a call at `priority` as `patience` waits, uncounted
    /// until [`confirm`](Self::confirm)ed; dropped before, the key gets
    /// back what it gave and counts nothing.
    pub(crate) async fn admit_provisionally<Q: BorrowedKey<K> + ?Sized>(
        &self,
        key: &Q,
        priority: Priority,
        patience: Patience,
    ) -> Result<Provisional<'_>, Rejected> {
        let request = self.permit_request(priority.into(), patience);
        self.admit(key, &request).await
    }

    /// The call `held` stands for is admitted: its permit, counted.
    pub(crate) fn confirm(&self, held: Provisional<'_>) -> OwnedPermit {
        let ticket = match held.would_refuse {
            None => <Ticket as Admitted<'_>>::from_call(held.call),
            Some(reason) => <Ticket as Admitted<'_>>::shadowed(held.call, reason),
        };
        self.core().metrics().admitted(ticket.label());
        Permit::owned(&self.inner.core, ticket)
    }
}
