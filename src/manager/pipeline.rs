//! The admission pipeline: one step function,
//! [`decide`](ThrottleManager::decide), runs the controls in their one
//! order (the five steps of [`acquire`](ThrottleManager::acquire)'s docs;
//! each step's invariant is stated on it in `core/steps.rs`).
//!
//! `decide` is synchronous: it runs the steps as far as they go without
//! waiting, and where a step must wait it stops and says so ([`Wait`]).
//! Two entry points run it:
//! - [`admit_now`](ThrottleManager::admit_now), for `try_acquire`: never
//!   waits, so every wait is a refusal;
//! - [`admit`](ThrottleManager::admit), for everything that may wait
//!   (`acquire`, the owned forms, the server's queue-only admission): its
//!   first half, [`admit_at_once`](ThrottleManager::admit_at_once), is
//!   `decide` and its count, inlined; only a call that must wait enters
//!   the second, [`admit_after`](ThrottleManager::admit_after), the async
//!   driver that waits and goes on with the next step. `call` uses the two
//!   halves itself, so that its one future holds the ticket.
//!
//! So a call that waits for nothing, the common case, runs no async
//! machinery at all.

use std::borrow::Borrow;
use std::hash::Hash;
use std::time::Duration;

use super::{RefusedKey, ThrottleManager};
use crate::bulkhead::QueuedWait;
use crate::bulkhead::WaiterId;
use crate::clock::Nanos;
use crate::core::shared_rate::{StoreStep, StoreToken};
use crate::core::{BulkheadPlace, CallTimes, Core, FreeSlot, KeyTelemetry, Patience, Token};
use crate::deadline;
use crate::error::{RejectReason, Rejected};
use crate::events;
use crate::key::KeyState;
use crate::metrics::{CallWaits, WaitReason};
use crate::permit::Ticket;
use crate::priority::Priority;
use crate::rate::Reservation;

mod admission;

pub(super) use admission::{Admission, Held};

/// Why the pipeline stopped short of admitting a call: refused, or a step
/// that must wait before the call can go on.
///
/// A wait is boxed: it holds the call on its way, and a healthy call's
/// result (this or its ticket) is returned through several steps, so
/// keeping it small saves copies on every call; a call that waits pays
/// one allocation, small next to the wait.
enum Stop {
    Refused(Rejected),
    Wait(Box<Wait>),
}

impl Stop {
    #[cold]
    fn wait(wait: Wait) -> Self {
        Stop::Wait(Box::new(wait))
    }
}

/// Where a call that [`admit_at_once`](ThrottleManager::admit_at_once)
/// could not decide at once must wait, for
/// [`admit_after`](ThrottleManager::admit_after) to go on from.
pub(super) struct MustWait(Box<Wait>);

/// A step that must wait, and what the call holds meanwhile.
enum Wait {
    /// The key is new and the key space full: nothing was taken; run the
    /// pipeline again at this time.
    ForRoom(Nanos),
    /// Its rate token is taken but not due: sleep until it is, then the
    /// bulkhead.
    ForToken(Admitting, Reservation),
    /// In its key's line for a rate token: wait for its turn, take the
    /// token, then as above.
    InLine(Admitting),
    /// In the bulkhead's queue: wait for the slot.
    InQueue(Admitting, WaiterId),
    /// Its rate is in a store: ask the store for the token (a round trip).
    ForStoreToken(Admitting),
}

impl From<Rejected> for Stop {
    #[inline]
    fn from(rejected: Rejected) -> Self {
        Stop::Refused(rejected)
    }
}

/// A rate token a call holds until it is admitted: handed back if the call
/// is refused after taking it. A call's rate is its key's own or the
/// store's, never both; the store's token is boxed, so a call holding
/// either is no bigger than one holding the key's own.
pub(super) enum HeldToken {
    Local(Reservation),
    Store(Box<StoreToken>),
}

/// A call past the throttle, on its way through the rate and the bulkhead.
pub(super) struct Admitting {
    state: triomphe::Arc<KeyState>,
    telemetry: KeyTelemetry,
    priority: Priority,
    times: CallTimes,
    /// How many rate tokens it takes (at most the key's burst).
    cost: u32,
    /// Its rate token, if it holds one: the key's own, or the store's.
    token: Option<HeldToken>,
}

impl Admitting {
    #[inline]
    fn admitted(self, holds_slot: bool) -> Ticket {
        Ticket::new(
            self.state,
            self.priority,
            self.times,
            holds_slot,
            self.cost,
            self.telemetry,
        )
    }

    /// Hands back the bulkhead slot the call took, before it was admitted
    /// (no permit counted it).
    #[inline]
    fn give_back_slot(&self) {
        give_back_slot(&self.state);
    }

    /// The call will not happen: its token goes back if it can.
    #[inline]
    fn refused(self, core: &Core, rejected: Rejected) -> Rejected {
        self.give_back_token(core);
        rejected
    }

    /// Hands the call's rate token back, while no later call has taken one
    /// (`rate::gcra::cancel`), or to the store it came from.
    #[inline]
    fn give_back_token(self, core: &Core) {
        if let Some(token) = self.token {
            token.give_back(core, &self.state);
        }
    }
}

/// Hands back a bulkhead slot taken for a call no permit counted.
#[inline]
fn give_back_slot(state: &KeyState) {
    if let Some(bulkhead) = state.bulkhead() {
        bulkhead.release();
    }
}

impl HeldToken {
    /// Hands the token back to `state`'s rate, while no later call has
    /// taken one (`rate::gcra::cancel`), or to the store it came from.
    #[inline]
    fn give_back(self, core: &Core, state: &KeyState) {
        match self {
            HeldToken::Local(token) => state.rate.cancel(token),
            HeldToken::Store(token) => core.return_store_token(state, *token),
        }
    }
}

/// A call waiting in its bulkhead's queue. Dropped there (the caller gave
/// up), it hands its rate token back as a refusal from the queue would:
/// the call never happened.
struct QueuedCall<'a> {
    core: &'a Core,
    call: Option<Admitting>,
}

impl Drop for QueuedCall<'_> {
    fn drop(&mut self) {
        if let Some(call) = self.call.take() {
            call.give_back_token(self.core);
        }
    }
}

/// # Admission: the pipeline behind permits and `call`
impl<K> ThrottleManager<K>
where
    K: Hash + Eq + Send + Sync + 'static,
{
    /// The pipeline without waiting: a call that would have to wait at
    /// any step is refused with that step's reason.
    #[inline(always)]
    pub(super) fn admit_now<Q, A: Admission>(
        &self,
        key: &Q,
        priority: Priority,
        cost: u32,
    ) -> Result<A, Rejected>
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        match self.admit_at_once(key, priority, Patience::Never, cost) {
            Ok(admitted) => admitted,
            // `Patience::Never` waits for nothing, so `admit_at_once` has
            // refused every wait already; this arm only keeps the types.
            Err(MustWait(wait)) => {
                let refused = Err(wait.refused(self.core(), priority));
                self.count(key, &refused);
                refused
            }
        }
    }

    /// The pipeline, waiting where a step says to. A call that waits for
    /// nothing never enters the async driver; one that does pays for it (one
    /// allocation, small next to the wait), which keeps this future small.
    pub(super) async fn admit<Q, A: Admission>(
        &self,
        key: &Q,
        priority: Priority,
        patience: Patience,
        cost: u32,
    ) -> Result<A, Rejected>
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        match self.admit_at_once(key, priority, patience, cost) {
            Ok(admitted) => admitted,
            Err(wait) => self.admit_after(key, priority, patience, cost, wait).await,
        }
    }

    /// The pipeline as far as it goes without waiting: the call admitted or
    /// refused (and counted), or where it must wait. Inlined, so that an
    /// async caller admitted at once keeps its ticket in its own state
    /// instead of receiving it through a nested future.
    #[inline(always)]
    pub(super) fn admit_at_once<Q, A: Admission>(
        &self,
        key: &Q,
        priority: Priority,
        patience: Patience,
        cost: u32,
    ) -> Result<Result<A, Rejected>, MustWait>
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        let admitted = match self.decide(key, priority, patience, cost) {
            Ok(ticket) => Ok(ticket),
            Err(Stop::Refused(rejected)) => Err(rejected),
            Err(Stop::Wait(wait)) if !wait.is_waited_for_by(patience) => {
                Err(wait.refused(self.core(), priority))
            }
            Err(Stop::Wait(wait)) => return Err(MustWait(wait)),
        };
        self.count(key, &admitted);
        Ok(admitted)
    }

    /// The pipeline from where [`admit_at_once`](Self::admit_at_once) had
    /// to wait, in the async driver.
    pub(super) async fn admit_after<Q, A: Admission>(
        &self,
        key: &Q,
        priority: Priority,
        patience: Patience,
        cost: u32,
        MustWait(wait): MustWait,
    ) -> Result<A, Rejected>
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        let waiting = Box::pin(self.wait_then_admit(key, priority, patience, cost, *wait));
        if !events::enabled() {
            let admitted = waiting.await;
            self.count(key, &admitted);
            return admitted;
        }
        let span = events::wait_span(self.name_of_key(key).as_deref(), priority);
        let began = self.core().now();
        let admitted = tracing::Instrument::instrument(waiting, span.clone()).await;
        let refused = admitted.as_ref().err().map(Rejected::reason);
        events::wait_ended(&span, self.core().since(began), refused);
        self.count(key, &admitted);
        admitted
    }

    /// Waits where the pipeline stopped, and goes on with the next step,
    /// until the call is admitted or refused.
    async fn wait_then_admit<Q, A: Admission>(
        &self,
        key: &Q,
        priority: Priority,
        patience: Patience,
        cost: u32,
        mut wait: Wait,
    ) -> Result<A, Rejected>
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        let core = self.core();
        // A new key waits for room in a full key space no longer than the
        // caller waits for a token (`max_wait` for its priority), counted
        // from its first wait for room: past that, it is refused as the key
        // space's, with the time until room.
        let mut room_until = None;
        let mut waits = CallWaits::new(&core.metrics, self.label_of(key));
        loop {
            let (began, waiting_for) = (core.now(), wait.waiting_for());
            let decided = match wait {
                Wait::ForRoom(retry_at) => {
                    let now = core.now();
                    // `decide` resolved the priority already: in range here.
                    let resolved = core.resolve(priority).unwrap_or(priority);
                    let until = *room_until
                        .get_or_insert_with(|| core.token_deadline(resolved, patience, now, 0));
                    if retry_at > until.latest() || now >= until.latest() {
                        if until.is_the_callers(retry_at.max(now)) {
                            return Err(Rejected::new(RejectReason::Deadline, resolved, None));
                        }
                        let retry_after = Duration::from_nanos(retry_at.saturating_sub(now));
                        return Err(Rejected::new(
                            RejectReason::KeySpaceFull,
                            resolved,
                            Some(retry_after),
                        ));
                    }
                    self.wait_for_room(retry_at).await;
                    self.decide(key, priority, patience, cost)
                }
                Wait::ForToken(mut call, token) => {
                    call.times.started = core.sleep_for_token(&call.state, token).await;
                    Self::take_slot(core, call, patience)
                }
                Wait::InLine(mut call) => {
                    let arrived = call.times.scheduled;
                    let (state, priority, cost) = (&call.state, call.priority, call.cost);
                    match core
                        .wait_in_line(state, priority, patience, cost, arrived)
                        .await
                    {
                        Ok((token, taken_at)) => {
                            // Still scheduled when it arrived: a fall while
                            // it was in line answered the calls of its time,
                            // so its failure is no news to the rate
                            // (`rate::aimd::is_news`). It waited for its
                            // token, in line: started a tick after it came
                            // at the earliest.
                            call.times.started = taken_at.max(arrived.saturating_add(1));
                            Self::with_token(core, call, token, patience)
                        }
                        Err(rejected) => Err(Stop::Refused(rejected)),
                    }
                }
                Wait::InQueue(call, id) => {
                    let mut queued = QueuedCall {
                        core,
                        call: Some(call),
                    };
                    let call = queued.call.as_ref().expect("set above");
                    let (state, priority, telemetry) =
                        (&call.state, call.priority, &call.telemetry);
                    let since = call.times.started;
                    let waited = core
                        .wait_in_queue(state, priority, id, since, telemetry)
                        .await;
                    let mut call = queued.call.take().expect("taken only here");
                    waits.add(WaitReason::Queue, || core.since(began));
                    return match waited {
                        Ok(()) => {
                            // Admitted now: a learned limit times the call
                            // from here, not from when it joined the queue.
                            call.times.started = core.now();
                            Ok(A::from_call(call, true))
                        }
                        Err(rejected) => Err(call.refused(core, rejected)),
                    };
                }
                Wait::ForStoreToken(mut call) => {
                    let arrived = call.times.scheduled;
                    match core
                        .take_store_token(&call.state, call.priority, patience, call.cost, arrived)
                        .await
                    {
                        StoreStep::Token(token) => {
                            let answered = core.now();

                            call.times.started = core
                                .sleep_for_store_token(&call.state, &token, answered)
                                .await;
                            call.token = Some(HeldToken::Store(Box::new(token)));
                            Self::take_slot(core, call, patience)
                        }
                        StoreStep::Refused(rejected) => Err(Stop::Refused(rejected)),
                        StoreStep::Local => Self::rate_then_slot(core, call, patience),
                    }
                }
            };
            waits.add(waiting_for, || core.since(began));
            wait = match decided {
                Ok(ticket) => return Ok(ticket),
                Err(Stop::Refused(rejected)) => return Err(rejected),
                Err(Stop::Wait(next)) => *next,
            };
        }
    }

    /// The controls in their one order, as far as they go without waiting
    /// (see [`acquire`](Self::acquire) for the order and why).
    #[inline]
    fn decide<Q, A: Admission>(
        &self,
        key: &Q,
        asked: Priority,
        patience: Patience,
        cost: u32,
    ) -> Result<A, Stop>
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        let core = self.core();
        let priority = core.resolve(asked)?;
        let now = core.now();
        let (state, telemetry) = match self.key_state(key, now) {
            Ok(found) => found,
            Err(full) => {
                deadline::in_time(|| 0, priority)?;
                return Err(Stop::wait(Wait::ForRoom(
                    now.saturating_add(full.retry_after),
                )));
            }
        };
        // A call that could not finish before its caller's deadline, even
        // starting now, is not started.
        deadline::in_time(|| state.quickest_answer(), priority)?;
        core.cost_fits(&state, priority, cost)?;
        core.throttle_admits(&state, now, priority, patience, cost, telemetry.span())?;
        let call = Admitting {
            state,
            telemetry,
            priority,
            times: CallTimes::at(now),
            cost,
            token: None,
        };
        // A rate in a store is a round trip away: a caller that waits asks
        // the store (the long way); one that never waits decides locally.
        let in_store = patience != Patience::Never && core.store_of(&call.state).is_some();
        let call = if in_store {
            call
        } else if core.bulkhead.is_none() {
            return Self::rate_then_slot(core, call, patience);
        } else {
            match Self::free_slot_then_rate(core, call, patience) {
                Ok(decided) => return decided,
                Err(call) => call,
            }
        };
        core.bulkhead_has_room(&call.state, priority, patience)?;
        if in_store {
            return Err(Stop::wait(Wait::ForStoreToken(call)));
        }
        Self::rate_then_slot(core, call, patience)
    }

    /// Steps 3 to 5 while the key's bulkhead has a free slot: the healthy
    /// key's common case. Nothing can happen between the bulkhead's check
    /// (step 3) and its slot (step 5) when the slot is free and the token
    /// due now, so the free slot is taken first, and handed back if the
    /// token is not due now. What the caller sees is what the order above
    /// gives (a full bulkhead refuses before the rate, a call it refuses
    /// takes no token, a call that waits for its token holds no slot
    /// meanwhile), for one look at the bulkhead instead of two.
    ///
    /// `Err(call)`: no slot is free and the caller may queue; go the long
    /// way, with nothing taken.
    #[inline]
    fn free_slot_then_rate<A: Admission>(
        core: &Core,
        mut call: Admitting,
        patience: Patience,
    ) -> Result<Result<A, Stop>, Admitting> {
        let filled = match core.take_free_slot(&call.state) {
            FreeSlot::NoBulkhead => return Ok(Self::rate_then_slot(core, call, patience)),
            FreeSlot::Taken { filled } => filled,
            FreeSlot::None(refusal) if patience == Patience::Never => {
                return Ok(Err(Stop::Refused(refusal.rejected(call.priority))));
            }
            FreeSlot::None(_) => return Err(call),
        };
        let now = call.times.scheduled;
        let token = core.reserve_token(&call.state, now, call.priority, patience, call.cost);
        Ok(match token {
            Ok(Token::Due(token)) => {
                core.slot_taken(call.priority, filled, &call.telemetry);
                call.token = token.map(HeldToken::Local);
                Ok(A::from_call(call, true))
            }
            Ok(Token::Ahead(token)) => {
                // The call waits for its token without a slot, and takes
                // one (or a place in the queue) once the token is due.
                call.give_back_slot();
                call.token = Some(HeldToken::Local(token));
                Err(Stop::wait(Wait::ForToken(call, token)))
            }
            Ok(Token::InLine) => {
                call.give_back_slot();
                Err(Stop::wait(Wait::InLine(call)))
            }
            Err(rejected) => {
                call.give_back_slot();
                Err(Stop::Refused(rejected))
            }
        })
    }

    /// The rate step on the key's local rate, then the bulkhead. (Always
    /// inlined: called from four places, the compiler would otherwise keep
    /// it apart, and move the call in and out of it on every admission.)
    #[inline(always)]
    fn rate_then_slot<A: Admission>(
        core: &Core,
        call: Admitting,
        patience: Patience,
    ) -> Result<A, Stop> {
        let now = call.times.scheduled;
        let token = core.reserve_token(&call.state, now, call.priority, patience, call.cost)?;
        Self::with_token(core, call, token, patience)
    }

    /// The call's rate token, from step 4: due, the bulkhead; ahead or in
    /// line, a wait. (Always inlined, as [`rate_then_slot`](Self::rate_then_slot).)
    #[inline(always)]
    fn with_token<A: Admission>(
        core: &Core,
        mut call: Admitting,
        token: Token,
        patience: Patience,
    ) -> Result<A, Stop> {
        match token {
            // Without a bulkhead nothing can refuse the call from here:
            // the token is not kept to be handed back, unless another key
            // of the call may yet refuse it.
            Token::Due(token) if core.bulkhead.is_none() => {
                if A::KEEPS_TOKEN {
                    call.token = token.map(HeldToken::Local);
                }
                Ok(A::from_call(call, false))
            }
            Token::Due(token) => {
                call.token = token.map(HeldToken::Local);
                Self::enter_bulkhead(core, call, patience)
            }
            Token::Ahead(token) => {
                call.token = Some(HeldToken::Local(token));
                Err(Stop::wait(Wait::ForToken(call, token)))
            }
            Token::InLine => Err(Stop::wait(Wait::InLine(call))),
        }
    }

    /// The last step, once the call's token is due: its bulkhead slot.
    #[inline(always)]
    fn take_slot<A: Admission>(
        core: &Core,
        call: Admitting,
        patience: Patience,
    ) -> Result<A, Stop> {
        if core.bulkhead.is_none() {
            return Ok(A::from_call(call, false));
        }
        Self::enter_bulkhead(core, call, patience)
    }

    fn enter_bulkhead<A: Admission>(
        core: &Core,
        call: Admitting,
        patience: Patience,
    ) -> Result<A, Stop> {
        match core.enter_bulkhead(&call.state, call.priority, patience, &call.telemetry) {
            Ok(BulkheadPlace::Queued(id)) => Err(Stop::wait(Wait::InQueue(call, id))),
            Ok(slot) => Ok(A::from_call(call, matches!(slot, BulkheadPlace::Held))),
            Err(rejected) => Err(Stop::Refused(call.refused(core, rejected))),
        }
    }

    /// Counts an admission or a rejection in the metrics.
    #[inline]
    ///
    /// One key of a call charged to several is counted once the call is
    /// admitted by every key (`joint`), not here.
    fn count<Q, A: Admission>(&self, key: &Q, admitted: &Result<A, Rejected>)
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Eq + ToOwned + ?Sized,
    {
        match admitted {
            Ok(_) if A::KEEPS_TOKEN => {}
            Ok(admitted) => self.core().metrics.admitted(admitted.ticket().label()),
            Err(rejected) => self.count_refusal(key, rejected),
        }
    }

    /// Counts a refusal of `key` wherever it is seen: the metrics, the
    /// `call refused` event, a status page's tally. Every method that
    /// refuses a call ends here.
    pub(super) fn count_refusal<Q>(&self, key: &Q, rejected: &Rejected)
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Eq + ToOwned + ?Sized,
    {
        self.core()
            .metrics
            .rejected(self.label_of(key).as_deref(), rejected.reason());
        if events::enabled() {
            events::call_refused(self.name_of_key(key).as_deref(), rejected);
        }
        if let Some(watcher) = self.inner.refusal_watcher.get() {
            let refused = RefusedKey {
                is: &|held: &K| held.borrow() == key,
                owned: &|| K::from(key.to_owned()),
            };
            watcher.refused(refused, rejected.reason());
        }
    }
}

impl Wait {
    /// What the call waits for here, as the wait histogram names it.
    fn waiting_for(&self) -> WaitReason {
        match self {
            Wait::ForRoom(_) => WaitReason::Room,
            Wait::InQueue(..) => WaitReason::Queue,
            Wait::ForToken(..) | Wait::InLine(_) | Wait::ForStoreToken(_) => WaitReason::Rate,
        }
    }

    /// Whether a caller of `patience` waits this out; otherwise it is
    /// refused at once ([`refused`](Self::refused)).
    fn is_waited_for_by(&self, patience: Patience) -> bool {
        match self {
            Wait::ForRoom(_) => patience.waits_for_room(),
            _ => !matches!(patience, Patience::Never),
        }
    }

    /// For a caller that does not wait for this: the refusal this wait
    /// stands for, with anything taken given back. (Under
    /// [`Patience::Never`] the rate and the bulkhead refuse rather than ask
    /// to wait, and under [`Patience::QueueOnly`] the rate does; a full key
    /// space always asks.)
    #[cold]
    fn refused(self, core: &Core, priority: Priority) -> Rejected {
        match self {
            Wait::ForRoom(retry_at) => {
                let retry_after = Duration::from_nanos(retry_at.saturating_sub(core.now()));
                Rejected::new(RejectReason::KeySpaceFull, priority, Some(retry_after))
            }
            Wait::ForToken(call, token) => {
                let wait = token.slot.start.saturating_sub(call.times.scheduled);
                call.refused(core, Rejected::rate_limited(wait, priority))
            }
            // Never asked of a caller that does not wait: the rate refuses
            // it instead (see `Core::reserve_token`).
            Wait::InLine(call) => call.refused(core, Rejected::rate_limited(0, priority)),
            Wait::InQueue(call, id) => {
                if let Some((bulkhead, _)) = core.bulkhead_of(&call.state) {
                    // Dropped at once: leaves the queue.
                    drop(QueuedWait::new(
                        bulkhead,
                        usize::from(call.priority.level()),
                        id,
                    ));
                }
                call.refused(core, Rejected::new(RejectReason::Full, priority, None))
            }
            // Never asked of a caller that does not wait (see `decide`).
            Wait::ForStoreToken(call) => call.refused(core, Rejected::rate_limited(0, priority)),
        }
    }
}
