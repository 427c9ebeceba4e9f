//! The methods that hand out permits: `acquire`, `try_acquire` and their
//! owned forms, each a way into the one driver (`admission`).

use std::hash::Hash;

use super::ThrottleManager;
use crate::core::Patience;
use crate::error::Rejected;
use crate::permit::{OwnedPermit, Permit};
use crate::priority::AdmitOptions;
use crate::registry::BorrowedKey;

/// # Admission: permits for calls
impl<K> ThrottleManager<K>
where
    K: Hash + Eq + Send + Sync + 'static,
{
    /// Waits until one call to `key` at `priority` may go through every
    /// control the manager has, and returns the permit for it. A bulkhead
    /// waits only in its queue, which is 0 unless configured
    /// ([`BulkheadConfig::queue`](crate::BulkheadConfig::queue)): with every
    /// slot busy and no queue, the call is refused at once with
    /// [`Full`](crate::error::RejectReason::Full).
    ///
    /// The controls are applied in one order, the same for every way in
    /// (`try_acquire`, `acquire`, `call`):
    /// 1. the key's state: a new key in a full key space waits for room;
    /// 2. the **throttle** decides at once whether to shed the call (waiting
    ///    would not make the backend healthier). A call it would shed whose
    ///    rate token lies beyond its
    ///    [`max_wait`](crate::deadline::TimeLimits::max_wait) is refused by
    ///    the rate instead, and not counted: the throttle counts only calls
    ///    that would otherwise have reached the backend;
    /// 3. a **bulkhead** that would turn the call away anyway (queue full)
    ///    does so before the call takes a rate token;
    /// 4. the **rate**: the call waits for its token, as
    ///    [`wait`](Self::wait) does;
    /// 5. the **bulkhead**: a free slot, or a place in its queue.
    ///
    /// A call refused at any step leaves no trace in the steps after it, and
    /// a rate token taken for a call the bulkhead then refuses goes back if
    /// no later call has taken one. The task-local priority
    /// ([`with_priority`](crate::priority::with_priority)), if set, replaces `priority`.
    ///
    /// # Errors
    ///
    /// [`Rejected`] with reason [`Throttled`](crate::error::RejectReason::Throttled);
    /// [`RateLimited`](crate::error::RejectReason::RateLimited) only when the
    /// manager has a [`max_wait`](crate::deadline::TimeLimits::max_wait)
    /// and the token is further ahead than that; the bulkhead's reasons
    /// ([`Full`](crate::error::RejectReason::Full),
    /// [`QueueTimeout`](crate::error::RejectReason::QueueTimeout),
    /// [`Dropped`](crate::error::RejectReason::Dropped)); under
    /// [`OutOfRange::Reject`](crate::priority::OutOfRange::Reject),
    /// [`InvalidPriority`](crate::error::RejectReason::InvalidPriority). A full key
    /// space is waited out, like the rate.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe. Dropped while waiting for its token, it takes no token
    /// (as [`wait`](Self::wait)); dropped in the bulkhead's queue, it leaves
    /// the queue, handing on a slot it was given meanwhile, and gives its
    /// token back as a cancelled `wait` does; the throttle counts nothing.
    ///
    /// # Panics
    ///
    /// Under [`OutOfRange::Panic`](crate::priority::OutOfRange::Panic), for a
    /// priority out of range; and as [`wait`](Self::wait) does.
    ///
    /// ```
    /// use portcullis::{Priority, RateConfig, ThrottleConfig, ThrottleManager};
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::adaptive(10.0))
    ///     .throttle(ThrottleConfig::new().ratio(2.0).min_rate(1.0).window(Duration::from_secs(60)))
    ///     .build()?;
    /// match manager.acquire("db-7", Priority::LOW).await {
    ///     Ok(permit) => {
    ///         // make the call, then report what happened:
    ///         permit.success(); // or permit.overloaded() for a capacity failure (429, 503, timeout)
    ///     }
    ///     Err(rejected) => {
    ///         let _why = rejected.reason();
    ///         let _hint = rejected.retry_after();
    ///     }
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire<Q: BorrowedKey<K> + ?Sized>(
        &self,
        key: &Q,
        options: impl Into<AdmitOptions>,
    ) -> Result<Permit<'_>, Rejected> {
        let request = self.permit_request(options.into(), Patience::AsConfigured);
        let ticket = self.admit(key, &request).await?;
        Ok(Permit::borrowed(self.core(), ticket))
    }

    /// [`acquire`](Self::acquire), for a permit that can move into a spawned
    /// task on its own ([`OwnedPermit`]).
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    ///
    /// As [`acquire`](Self::acquire).
    ///
    /// # Panics
    ///
    /// As [`acquire`](Self::acquire).
    ///
    /// ```
    /// use portcullis::{BulkheadConfig, Priority, ThrottleManager};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let manager = ThrottleManager::<String>::builder().bulkhead(BulkheadConfig::new(4)).build()?;
    /// let permit = manager.acquire_owned("db", Priority::HIGH).await?;
    /// let task = tokio::spawn(async move {
    ///     // ... the call, holding one of db's four slots ...
    ///     permit.success();
    /// });
    /// task.await?;
    /// assert_eq!(manager.key("db").snapshot().unwrap().active, Some(0));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire_owned<Q: BorrowedKey<K> + ?Sized>(
        &self,
        key: &Q,
        options: impl Into<AdmitOptions>,
    ) -> Result<OwnedPermit, Rejected> {
        let request = self.permit_request(options.into(), Patience::AsConfigured);
        let ticket = self.admit(key, &request).await?;
        Ok(Permit::owned(&self.inner.core, ticket))
    }

    /// Like [`acquire`](Self::acquire), but never waits: a call without a
    /// rate token now, a free bulkhead slot now or room in the key space now
    /// is rejected. The same steps, in the same order.
    ///
    /// # Errors
    ///
    /// [`Rejected`] with reason [`Throttled`](crate::error::RejectReason::Throttled),
    /// [`RateLimited`](crate::error::RejectReason::RateLimited) (with the time until
    /// the next token), [`Full`](crate::error::RejectReason::Full),
    /// [`KeySpaceFull`](crate::error::RejectReason::KeySpaceFull), or
    /// [`InvalidPriority`](crate::error::RejectReason::InvalidPriority). A rejected
    /// call leaves no trace in the controls that did not reject it.
    ///
    /// # Panics
    ///
    /// Under [`OutOfRange::Panic`](crate::priority::OutOfRange::Panic), for a
    /// priority out of range.
    ///
    /// ```
    /// use portcullis::error::RejectReason;
    /// use portcullis::{Priority, RateConfig, ThrottleManager};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), portcullis::error::ConfigError> {
    /// let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(2.0)).build()?;
    /// let permit = manager.try_acquire("api", Priority::MEDIUM).unwrap();
    /// permit.success();
    /// let rejected = manager.try_acquire("api", Priority::MEDIUM).unwrap_err();
    /// assert_eq!(rejected.reason(), RejectReason::RateLimited);
    /// # Ok(())
    /// # }
    /// ```
    // Always inlined, as are `admit_now` and the driver's `decide`: the
    // permit is built where the caller keeps it instead of being copied
    // out through the calls between.
    #[inline(always)]
    pub fn try_acquire<Q: BorrowedKey<K> + ?Sized>(
        &self,
        key: &Q,
        options: impl Into<AdmitOptions>,
    ) -> Result<Permit<'_>, Rejected> {
        let request = self.permit_request(options.into(), Patience::Never);
        let ticket = self.admit_now(key, &request)?;
        Ok(Permit::borrowed(self.core(), ticket))
    }

    /// [`try_acquire`](Self::try_acquire), for a permit that can move into a
    /// spawned task on its own ([`OwnedPermit`]).
    ///
    /// # Errors
    ///
    /// As [`try_acquire`](Self::try_acquire).
    ///
    /// # Panics
    ///
    /// As [`try_acquire`](Self::try_acquire).
    ///
    /// ```
    /// use portcullis::{Priority, RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(10.0)).build()?;
    /// let permit: portcullis::manager::OwnedPermit = manager.try_acquire_owned("api", Priority::HIGH).unwrap();
    /// std::thread::spawn(move || permit.success()).join().unwrap();
    /// assert_eq!(manager.key("api").rate(), Some(11.0));
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    #[inline(always)]
    pub fn try_acquire_owned<Q: BorrowedKey<K> + ?Sized>(
        &self,
        key: &Q,
        options: impl Into<AdmitOptions>,
    ) -> Result<OwnedPermit, Rejected> {
        let request = self.permit_request(options.into(), Patience::Never);
        let ticket = self.admit_now(key, &request)?;
        Ok(Permit::owned(&self.inner.core, ticket))
    }
}
