//! Calls charged to several keys at once (a user's quota and its tenant's,
//! a host's and the whole crawl's): admitted by every key, or by none.
//!
//! Each key runs the one driver in turn, as a call of its own, up to its
//! rate token ([`Scope::Token`]); once every key's token is due, each key's
//! slot is taken. A call holds no slot while it waits for a token, so a
//! scarce slot (the database's) is never held while a user waits out its
//! own quota. What each key gave stays on its way ([`Admitting`]): a key
//! that refuses, or the caller giving up, gives back what every key gave,
//! and no control counts it.

use std::hash::Hash;

use super::ThrottleManager;
use crate::core::Admitted;
use crate::core::{Admitting, Core, Patience, Request, Scope};
use crate::error::Rejected;
use crate::permit::{JointPermit, Permit, Ticket};
use crate::priority::{AdmitOptions, Flow, Priority};
use crate::registry::BorrowedKey;

/// # Admission: calls charged to several keys
impl<K> ThrottleManager<K>
where
    K: Hash + Eq + Send + Sync + 'static,
{
    /// Waits until one call at `priority` may go through the controls of
    /// every key in `keys`, and returns one permit that holds each key's
    /// token and slot: a call that must fit both a user's quota and its
    /// tenant's, or a host's and the whole crawl's.
    ///
    /// All or nothing. First every key's rate token, in the order given,
    /// each as [`acquire`](Self::acquire) takes one (a new key waits for
    /// room, then the throttle, the bulkhead's check, the rate), waiting
    /// for the latest of them; then every key's slot. No slot is held
    /// while any key's token is waited for. A key that refuses the call
    /// ends it, and every key gets back what it gave: its slot (to the
    /// head of its queue), and its rate token as a cancelled
    /// [`wait`](Self::wait) gives one back (while no later call of that
    /// key has taken one). No key counts a call that was refused, in its
    /// throttle or its learned limit. The permit's outcome is every key's.
    ///
    /// A key's slot is held while the queues of the keys after it are
    /// waited in, as a lock is held while the next is taken: calls that
    /// charge the same keys with queues should list them in the same order
    /// (the wider first: the tenant, then the user), or two of them can
    /// each hold a slot the other waits for, until a queue timeout ends
    /// one.
    ///
    /// # Errors
    ///
    /// The first refusal, as [`acquire`](Self::acquire) refuses, with
    /// [`key_index`](Rejected::key_index) naming the key that refused;
    /// [`DuplicateKey`](crate::error::RejectReason::DuplicateKey), before any key
    /// counts the call, when `keys` names a key twice. An empty `keys`
    /// admits the call with nothing held.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe. Dropped while waiting for a key, it takes nothing from
    /// that key (as [`acquire`](Self::acquire)), and the keys before it get
    /// back what they gave, as if that key had refused.
    ///
    /// # Panics
    ///
    /// As [`acquire`](Self::acquire).
    ///
    /// ```
    /// use portcullis::error::RejectReason;
    /// use portcullis::{BulkheadConfig, Priority, RateConfig, ThrottleManager};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::per_second(10))
    ///     .bulkhead(BulkheadConfig::new(2))
    ///     .build()?;
    /// let permit = manager.acquire_all(&["tenant-a", "user-7"], Priority::HIGH).await?;
    /// assert_eq!(manager.key("tenant-a").snapshot().unwrap().active, Some(1));
    /// assert_eq!(manager.key("user-7").snapshot().unwrap().active, Some(1));
    /// permit.success(); // both keys learn the outcome, and free their slots
    ///
    /// // The tenant's two slots are busy: a call for another of its users
    /// // is refused, and that user's key gives back its token and slot.
    /// let _busy = [manager.try_acquire("tenant-a", Priority::HIGH)?, manager.try_acquire("tenant-a", Priority::HIGH)?];
    /// let refused = manager.acquire_all(&["user-8", "tenant-a"], Priority::HIGH).await.unwrap_err();
    /// assert_eq!((refused.reason(), refused.key_index()), (RejectReason::Full, Some(1)));
    /// assert_eq!(manager.peek("user-8").unwrap().remaining, 10); // its token is back
    /// assert_eq!(manager.key("user-8").snapshot().unwrap().active, Some(0));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire_all<Q: BorrowedKey<K> + ?Sized>(
        &self,
        keys: &[&Q],
        options: impl Into<AdmitOptions>,
    ) -> Result<JointPermit<'_>, Rejected> {
        let request = self.permit_request(options.into(), Patience::AsConfigured);
        self.admit_all(keys, &request).await
    }

    /// [`acquire_all`](Self::acquire_all) that never waits, as
    /// [`try_acquire`](Self::try_acquire) for one key.
    ///
    /// # Errors
    ///
    /// As [`try_acquire_all_n`](Self::try_acquire_all_n).
    ///
    /// # Panics
    ///
    /// As [`try_acquire`](Self::try_acquire).
    ///
    /// ```
    /// use portcullis::{BulkheadConfig, Priority, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder().bulkhead(BulkheadConfig::new(1)).build()?;
    /// let permit = manager.try_acquire_all(&["tenant-a", "user-7"], Priority::HIGH).unwrap();
    /// assert!(manager.try_acquire_all(&["tenant-a", "user-8"], Priority::HIGH).is_err());
    /// permit.success();
    /// assert!(manager.try_acquire_all(&["tenant-a", "user-8"], Priority::HIGH).is_ok());
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn try_acquire_all<Q: BorrowedKey<K> + ?Sized>(
        &self,
        keys: &[&Q],
        options: impl Into<AdmitOptions>,
    ) -> Result<JointPermit<'_>, Rejected> {
        let options = options.into();
        let (priority, cost) = (options.priority(), options.tokens());
        refuse_duplicates(keys, priority)?;
        let request = Request::new(self.core(), priority, cost, Patience::Never, Scope::Token);
        let mut taken = TakenByKeys::new(self.core(), keys.len());
        for (index, key) in keys.iter().enumerate() {
            let booked = self
                .admit_now::<Q, Admitting<'_>>(key, &request)
                .map_err(|rejected| rejected.by_key_at(index))?;
            taken.held.push(booked);
        }
        // Every token booked without waiting is due now: the slots.
        let core = self.core();
        for (index, held) in taken.held.iter_mut().enumerate() {
            if let Err(rejected) = core.enter_slot(held, Patience::Never, None) {
                self.slot_refused(keys[index], rejected.by_key_at(index))?;
            }
        }
        Ok(taken.admitted())
    }
}

/// # Calls charged to several keys: the one way in
impl<K> ThrottleManager<K>
where
    K: Hash + Eq + Send + Sync + 'static,
{
    /// Every key of `keys` admits the call `request` asks for: first every
    /// key's token (waiting for the latest), then every key's slot.
    pub(super) async fn admit_all<Q: BorrowedKey<K> + ?Sized>(
        &self,
        keys: &[&Q],
        request: &Request,
    ) -> Result<JointPermit<'_>, Rejected> {
        refuse_duplicates(keys, request.asked)?;
        let core = self.core();
        let arrived = core.now();
        let booking = Request {
            scope: Scope::Token,
            ..*request
        };
        let mut taken = TakenByKeys::new(core, keys.len());
        for (index, key) in keys.iter().enumerate() {
            let booked = self
                .admit::<Q, Admitting<'_>>(key, &booking)
                .await
                .map_err(|rejected| rejected.by_key_at(index))?;
            taken.held.push(booked);
        }
        for held in &mut taken.held {
            core.until_due(held).await;
        }
        for (index, held) in taken.held.iter_mut().enumerate() {
            let request = Request {
                flow: request.flow.or_else(|| flow_before(keys, index)),
                ..*request
            };
            let slot = core.take_slot_waiting(held, &request, arrived).await;
            if let Err(rejected) = slot {
                self.slot_refused(keys[index], rejected.by_key_at(index))?;
            }
        }
        Ok(taken.admitted())
    }
}

/// The flow of a call at the key `keys[index]`, when its task and its
/// caller give none: the keys before it (a user's call to the database,
/// charged to `[user, database]`, queues at the database as the user's).
/// One key before it is that key's flow, as `Flow::of(key)` names it.
fn flow_before<Q: Hash + ?Sized>(keys: &[&Q], index: usize) -> Option<Flow> {
    match index {
        0 => None,
        1 => Some(Flow::of(keys[0])),
        _ => Some(Flow::of(&keys[..index])),
    }
}

/// # Calls charged to several keys: a slot refused
impl<K> ThrottleManager<K>
where
    K: Hash + Eq + Send + Sync + 'static,
{
    /// A key's bulkhead refused the joint call its slot: the refusal,
    /// counted; or, for a shadowed key, `Ok` (counted as what would have
    /// been refused): the call goes on without that slot.
    fn slot_refused<Q: BorrowedKey<K> + ?Sized>(
        &self,
        key: &Q,
        rejected: Rejected,
    ) -> Result<(), Rejected> {
        if rejected.reason().is_limit() && self.shadows(key) {
            self.count_refusal_as(key, &rejected, true);
            return Ok(());
        }
        self.count_refusal(key, &rejected);
        Err(rejected)
    }
}

/// Refuses a list that names a key twice, naming both places. The lists
/// are short (one key per level), so every pair is compared.
fn refuse_duplicates<Q>(keys: &[&Q], priority: Priority) -> Result<(), Rejected>
where
    Q: Eq + ?Sized,
{
    for (again, key) in keys.iter().enumerate() {
        if let Some(first) = keys[..again].iter().position(|earlier| earlier == key) {
            return Err(Rejected::duplicate_key(first, again, priority));
        }
    }
    Ok(())
}

/// What the keys admitted so far gave a call charged to several: given
/// back, uncounted, if dropped before every key admits it.
struct TakenByKeys<'a> {
    core: &'a Core,
    held: Vec<Admitting<'a>>,
}

impl<'a> TakenByKeys<'a> {
    fn new(core: &'a Core, keys: usize) -> Self {
        Self {
            core,
            held: Vec::with_capacity(keys),
        }
    }

    /// Every key admitted the call: each key's part becomes a permit, and
    /// counts as admitted.
    fn admitted(self) -> JointPermit<'a> {
        let core = self.core;
        let parts = self
            .held
            .into_iter()
            .map(|held| {
                let ticket = <Ticket as Admitted<'_>>::from_call(held);
                core.metrics().admitted(ticket.label());
                Permit::borrowed(core, ticket)
            })
            .collect();
        JointPermit::new(parts)
    }
}
