//! Admission as the manager runs it: a key's [`Lookup`] for the core's one
//! driver (`core/drive.rs`), and the counting of what it decided (the
//! metrics, the `call refused` event, a status page's tally), which needs
//! the key.

use std::hash::Hash;

use super::{RefusedKey, ThrottleManager};
use crate::clock::Nanos;
use crate::core::{
    Admitted, Admitting, CallTimes, KeyTelemetry, Lookup, Patience, Request, Scope, Stop,
};
use crate::error::Rejected;
use crate::events;
use crate::key::KeyState;
use crate::priority::AdmitOptions;
use crate::registry::BorrowedKey;
use crate::registry::NoRoom;

/// A call's key, as the driver looks it up.
pub(super) struct KeyLookup<'m, 'q, K, Q: ?Sized> {
    manager: &'m ThrottleManager<K>,
    key: &'q Q,
}

impl<K, Q> Lookup for KeyLookup<'_, '_, K, Q>
where
    K: Hash + Eq + Send + Sync + 'static,
    Q: BorrowedKey<K> + ?Sized,
{
    #[inline(always)]
    fn find(&self, now: Nanos) -> Result<(triomphe::Arc<KeyState>, KeyTelemetry), NoRoom> {
        self.manager.key_state(self.key, now)
    }

    #[inline(always)]
    fn state(&self, now: Nanos) -> Result<triomphe::Arc<KeyState>, NoRoom> {
        self.manager.entry(self.key, now)
    }

    fn room_freed(&self, until: Nanos) -> impl std::future::Future<Output = ()> {
        self.manager.wait_for_room(until)
    }

    fn label(&self) -> Option<String> {
        self.manager.label_of(self.key)
    }

    fn name(&self) -> Option<String> {
        self.manager.name_of_key(self.key)
    }
}

/// # Admission: the driver, and what it decided counted
impl<K> ThrottleManager<K>
where
    K: Hash + Eq + Send + Sync + 'static,
{
    /// `key`, for the driver.
    #[inline(always)]
    pub(super) fn lookup<'m, 'q, Q>(&'m self, key: &'q Q) -> KeyLookup<'m, 'q, K, Q>
    where
        Q: ?Sized,
    {
        KeyLookup { manager: self, key }
    }

    /// A request through every control of a key (a permit's), the task's
    /// deadline read now.
    #[inline(always)]
    pub(super) fn permit_request(&self, options: AdmitOptions, patience: Patience) -> Request {
        let (priority, cost) = (options.priority(), options.tokens());
        Request::new(self.core(), priority, cost, patience, Scope::Every)
    }

    /// The driver without waiting: a call that would have to wait at any
    /// step is refused with that step's reason.
    #[inline(always)]
    pub(super) fn admit_now<'m, Q: BorrowedKey<K> + ?Sized, A: Admitted<'m>>(
        &'m self,
        key: &Q,
        request: &Request,
    ) -> Result<A, Rejected> {
        match self.core().decide::<A>(&self.lookup(key), request) {
            Ok(admitted) => {
                self.count_admitted(&admitted);
                Ok(admitted)
            }
            Err(stop) => self.refused_now(key, stop, request),
        }
    }

    /// The refusal of a call the driver stopped, counted (or, for a
    /// shadowed key, the call let through).
    #[cold]
    #[inline(never)]
    fn refused_now<'m, Q: BorrowedKey<K> + ?Sized, A: Admitted<'m>>(
        &'m self,
        key: &Q,
        stop: Stop<'_>,
        request: &Request,
    ) -> Result<A, Rejected> {
        let rejected = stop.refused(self.core(), request);
        self.refused_unless_shadowed(key, request, rejected)
    }

    /// The driver, waiting where a step says to. A call that waits for
    /// nothing never enters the async loop.
    pub(super) async fn admit<'m, Q: BorrowedKey<K> + ?Sized, A: Admitted<'m>>(
        &'m self,
        key: &Q,
        request: &Request,
    ) -> Result<A, Rejected> {
        let core = self.core();
        let lookup = self.lookup(key);
        let mut admitted = match core.admit_at_once(&lookup, request) {
            Ok(admitted) => admitted,
            Err(wait) if self.shadows(key) => core.admit_shadowed(request, wait).await,
            Err(wait) => core.admit_after(&lookup, request, wait).await,
        };
        self.settle_admission(key, request, &mut admitted);
        admitted
    }

    /// Counts an admission (one counted when made) or a refusal; a refusal
    /// of a shadowed key becomes the call let through. An admission is not
    /// moved on its way (only a refusal is): see `Core::admit_at_once`.
    #[inline(always)]
    pub(super) fn settle_admission<'m, Q: BorrowedKey<K> + ?Sized, A: Admitted<'m>>(
        &'m self,
        key: &Q,
        request: &Request,
        admitted: &mut Result<A, Rejected>,
    ) {
        match admitted {
            Ok(admitted) => self.count_admitted(admitted),
            Err(_) => self.settle_refusal(key, request, admitted),
        }
    }

    /// [`settle_admission`](Self::settle_admission) of a refusal.
    #[cold]
    #[inline(never)]
    fn settle_refusal<'m, Q: BorrowedKey<K> + ?Sized, A: Admitted<'m>>(
        &'m self,
        key: &Q,
        request: &Request,
        admitted: &mut Result<A, Rejected>,
    ) {
        if let Err(rejected) = admitted {
            let rejected = rejected.clone();
            *admitted = self.refused_unless_shadowed(key, request, rejected);
        }
    }

    /// Whether `key` is live and shadowed: its calls never wait, and what
    /// its controls would refuse goes through.
    pub(super) fn shadows<Q: BorrowedKey<K> + ?Sized>(&self, key: &Q) -> bool {
        let core = self.core();
        core.settings_table().any_shadowed()
            && (self.inner.keys)
                .get(key, |_, state| core.settings_of(state).shadow)
                .unwrap_or(false)
    }

    /// `rejected`, counted; or, if `key` is shadowed and its limits refused
    /// the call, the call let through holding nothing, counted as what
    /// would have been refused.
    #[cold]
    pub(super) fn refused_unless_shadowed<'m, Q: BorrowedKey<K> + ?Sized, A: Admitted<'m>>(
        &'m self,
        key: &Q,
        request: &Request,
        rejected: Rejected,
    ) -> Result<A, Rejected> {
        let core = self.core();
        if rejected.reason().is_limit() && core.settings_table().any_shadowed() {
            // One look at the key: its state, if it is live and shadowed.
            let shadowed = (self.inner.keys)
                .get(key, |key, state| {
                    let shadow = core.settings_of(state).shadow;
                    shadow.then(|| (triomphe::Arc::clone(state), self.telemetry_of(key)))
                })
                .flatten();
            if let (Some((state, telemetry)), Ok(priority)) =
                (shadowed, core.resolve(request.asked))
            {
                self.count_refusal_as(key, &rejected, true);
                let times = CallTimes::at(core.now());
                let call = Admitting::new(core, state, telemetry, priority, times, request.cost);
                return Ok(A::shadowed(call, rejected.reason()));
            }
        }
        self.count_refusal(key, &rejected);
        Err(rejected)
    }

    /// Counts an admission, if it is one counted when made (a permit's).
    #[inline(always)]
    fn count_admitted<'m, A: Admitted<'m>>(&self, admitted: &A) {
        if A::COUNTED {
            self.core().metrics().admitted(admitted.label());
        }
    }

    /// Counts a refusal of `key` wherever it is seen: the metrics, the
    /// `call refused` event, a status page's tally. Every method that
    /// refuses a call ends here.
    pub(super) fn count_refusal<Q: BorrowedKey<K> + ?Sized>(&self, key: &Q, rejected: &Rejected) {
        self.count_refusal_as(key, rejected, false);
    }

    /// Counts a refusal, or (`shadow`) one shadow mode let through, in the
    /// same places under their own names.
    pub(super) fn count_refusal_as<Q: BorrowedKey<K> + ?Sized>(
        &self,
        key: &Q,
        rejected: &Rejected,
        shadow: bool,
    ) {
        let label = self.label_of(key);
        let metrics = self.core().metrics();
        match shadow {
            false => metrics.rejected(label.as_deref(), rejected.reason()),
            true => metrics.would_reject(label.as_deref(), rejected.reason()),
        }
        if events::enabled() {
            events::call_refused(self.name_of_key(key).as_deref(), rejected, shadow);
        }
        if let Some(watcher) = self.inner.refusal_watcher.get() {
            let refused = RefusedKey {
                is: &|held: &K| key.names(held),
                owned: &|| key.to_key(),
            };
            watcher.refused(refused, rejected.reason(), shadow);
        }
    }
}
