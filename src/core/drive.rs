//! The one driver of admission: [`Core::decide`] runs a key's controls in
//! their one order as far as they go without waiting, and says where the
//! call must wait ([`Wait`]); [`Core::admit_after`] is the one loop that
//! waits there and goes on. Every entry point builds a [`Request`] and
//! hands it here with a [`Lookup`] of its key; the steps themselves (and
//! why each stands where it does) are in `steps.rs`.
//!
//! A call that waits for nothing, the common case, runs no async machinery:
//! [`Core::admit_at_once`] is `decide` and its answer, inlined into the
//! caller. A call that must wait is boxed ([`MustWait`]), and enters the
//! loop.
//!
//! What a call takes on its way, it holds in its [`Admitting`]: refused,
//! or dropped while it waits, it gives everything back.

use std::future::Future;
use std::time::Duration;

use super::admitting::{Admitted, Admitting, HeldToken};
use super::request::{Request, Scope};
use super::shared_rate::StoreStep;
use super::{BulkheadPlace, CallTimes, Core, FreeSlot, KeyTelemetry, Patience, Token};
use crate::bulkhead::{QueuedWait, WaiterId};
use crate::clock::Nanos;
use crate::error::{RejectReason, Rejected};
use crate::events;
use crate::key::KeyState;
use crate::metrics::{CallWaits, WaitReason};
use crate::rate::Reservation;
use crate::registry::NoRoom;

/// How the driver finds the key of a call: all it knows of the key.
pub(crate) trait Lookup {
    /// The key's state and how it is named, made if the key is new.
    ///
    /// # Errors
    ///
    /// [`NoRoom`] when the key is new and the key space has none.
    fn find(&self, now: Nanos) -> Result<(triomphe::Arc<KeyState>, KeyTelemetry), NoRoom>;

    /// [`find`](Self::find) for a call that is never counted in events or
    /// metrics: the state alone.
    fn state(&self, now: Nanos) -> Result<triomphe::Arc<KeyState>, NoRoom>;

    /// Resolves at `until`, or sooner if room may have appeared in the key
    /// space.
    fn room_freed(&self, until: Nanos) -> impl Future<Output = ()>;

    /// The key's label in per-key metrics, if the manager has them.
    fn label(&self) -> Option<String>;

    /// The key's name in events, if the manager names keys.
    fn name(&self) -> Option<String>;
}

/// Why `decide` stopped short of admitting a call: refused, or a step that
/// must wait before the call can go on.
///
/// A wait is boxed: it holds the call on its way, and a healthy call's
/// result (this or its ticket) is returned through several steps, so
/// keeping it small saves copies on every call; a call that waits pays one
/// allocation, small next to the wait.
pub(crate) enum Stop<'c> {
    Refused(Rejected),
    Wait(Box<Wait<'c>>),
}

impl<'c> Stop<'c> {
    #[cold]
    fn wait(wait: Wait<'c>) -> Self {
        Stop::Wait(Box::new(wait))
    }
}

impl From<Rejected> for Stop<'_> {
    #[inline]
    fn from(rejected: Rejected) -> Self {
        Stop::Refused(rejected)
    }
}

/// Where a call that [`Core::admit_at_once`] could not decide must wait,
/// for [`Core::admit_after`] to go on from.
pub(crate) struct MustWait<'c>(Box<Wait<'c>>);

impl MustWait<'_> {
    /// The refusal of a call that does not wait after all; what it took
    /// goes back.
    #[cold]
    pub(crate) fn refused(self, core: &Core, request: &Request) -> Rejected {
        self.0.refused(core, request)
    }
}

/// A step that must wait, and the call on its way meanwhile.
pub(crate) enum Wait<'c> {
    /// The key is new and the key space full: nothing was taken; decide
    /// again at this time, or when room appears.
    ForRoom(Nanos),
    /// Its rate token is taken but not due: sleep until it is, then the
    /// bulkhead.
    ForToken(Admitting<'c>, Reservation),
    /// In its key's line for a rate token: wait for its turn, take the
    /// token, then as above.
    InLine(Admitting<'c>),
    /// In the bulkhead's queue: wait for the slot.
    InQueue(Admitting<'c>, WaiterId),
    /// Its rate is in a store: ask the store for the token (a round trip).
    ForStoreToken(Admitting<'c>),
}

/// # The driver
impl Core {
    /// `decide`, with a wait the caller does not make turned into its
    /// refusal: the call admitted or refused, or where it must wait.
    /// Inlined, so that an async caller admitted at once keeps its ticket
    /// in its own state instead of receiving it through a nested future.
    #[inline(always)]
    pub(crate) fn admit_at_once<'c, A: Admitted<'c>>(
        &'c self,
        lookup: &impl Lookup,
        request: &Request,
    ) -> Result<Result<A, Rejected>, MustWait<'c>> {
        match self.decide(lookup, request) {
            Ok(admitted) => Ok(Ok(admitted)),
            Err(Stop::Refused(rejected)) => Ok(Err(rejected)),
            Err(Stop::Wait(wait)) if !wait.is_waited_for_by(request.patience) => {
                Ok(Err(wait.refused(self, request)))
            }
            Err(Stop::Wait(wait)) => Err(MustWait(wait)),
        }
    }

    /// The driver's first steps for the rate alone and a caller that never
    /// waits ([`check`](crate::ThrottleManager::check)): the key's next
    /// `cost` tokens, taken if they are due now, else refused with how far
    /// ahead they are. Nothing is held on the way, so nothing is built to
    /// give back. A call with its rate in a store decides locally, as every
    /// caller that never waits does; a token due now is taken even while
    /// callers wait in the key's line (a check never queues, so it takes
    /// no one's turn).
    #[inline(always)]
    pub(crate) fn spend_at_once(
        &self,
        lookup: &impl Lookup,
        request: &Request,
    ) -> Result<(), Rejected> {
        debug_assert!(request.scope == Scope::RateOnly && request.patience == Patience::Never);
        // The rate alone knows no priority: the task's is not asked for.
        let priority = request.asked;
        let now = self.now();
        let state = match lookup.state(now) {
            Ok(state) => state,
            Err(full) => {
                request.in_time(now, || 0, priority)?;
                let retry_at = now.saturating_add(full.retry_after);
                return Err(Wait::ForRoom(retry_at).refused(self, request));
            }
        };
        request.in_time(now, || state.quickest_answer(), priority)?;
        let Some(settings) = self.rate_of(&state) else {
            return Ok(());
        };
        self.cost_fits(&state, priority, request.cost)?;
        state
            .rate
            .take_due(now, settings.burst, request.cost)
            .map_err(|wait| Rejected::rate_limited(wait, priority))
    }

    /// [`admit_at_once`](Self::admit_at_once) kept apart, for an async
    /// caller: `decide` inlined into a future would make every such future
    /// as large as all its steps' values together.
    #[inline(never)]
    pub(crate) fn admit_at_once_apart<'c, A: Admitted<'c>>(
        &'c self,
        lookup: &impl Lookup,
        request: &Request,
    ) -> Result<Result<A, Rejected>, MustWait<'c>> {
        self.admit_at_once(lookup, request)
    }

    /// The driver from where [`admit_at_once`](Self::admit_at_once) had to
    /// wait: the one loop that waits, within a `call waited` span while
    /// debug events are on.
    pub(crate) async fn admit_after<'c, A: Admitted<'c>>(
        &'c self,
        lookup: &impl Lookup,
        request: &Request,
        MustWait(wait): MustWait<'c>,
    ) -> Result<A, Rejected> {
        let waiting = Box::pin(self.wait_then_admit(lookup, request, *wait));
        if !events::enabled() {
            return waiting.await;
        }
        let span = events::wait_span(lookup.name().as_deref(), request.asked);
        let began = self.now();
        let admitted = tracing::Instrument::instrument(waiting, span.clone()).await;
        let refused = admitted.as_ref().err().map(Rejected::reason);
        events::wait_ended(&span, self.since(began), refused);
        admitted
    }

    /// Waits where `decide` stopped, and goes on with the next step, until
    /// the call is admitted or refused.
    async fn wait_then_admit<'c, A: Admitted<'c>>(
        &'c self,
        lookup: &impl Lookup,
        request: &Request,
        mut wait: Wait<'c>,
    ) -> Result<A, Rejected> {
        // A new key waits for room no longer than the caller waits for a
        // token, counted from its first wait for room.
        let mut room_until = None;
        let mut waits = CallWaits::new(&self.metrics, lookup.label());
        loop {
            let (began, waiting_for) = (self.now(), wait.waiting_for());
            let decided = match wait {
                Wait::ForRoom(retry_at) => {
                    let now = self.now();
                    let priority = self.resolve(request.asked)?;
                    let until = *room_until
                        .get_or_insert_with(|| self.token_deadline(priority, request, now, 0));
                    if retry_at > until.latest() || now >= until.latest() {
                        if until.is_the_callers(retry_at.max(now)) {
                            return Err(Rejected::new(RejectReason::Deadline, priority, None));
                        }
                        let retry_after = Duration::from_nanos(retry_at.saturating_sub(now));
                        let full = RejectReason::KeySpaceFull;
                        return Err(Rejected::new(full, priority, Some(retry_after)));
                    }
                    lookup.room_freed(retry_at).await;
                    self.decide(lookup, request)
                }
                Wait::ForToken(mut call, token) => {
                    let started = self.sleep_for_token(&call.call().state, token).await;
                    call.call_mut().times.started = started;
                    self.take_slot(call, request)
                }
                Wait::InLine(mut call) => {
                    let arrived = call.call().times.scheduled;
                    let in_line = {
                        let c = call.call();
                        self.wait_in_line(&c.state, c.priority, request, c.cost, arrived)
                            .await
                    };
                    match in_line {
                        Ok((token, taken_at)) => {
                            // Still scheduled when it arrived: a fall while
                            // it was in line answered the calls of its time,
                            // so its failure is no news to the rate
                            // (`rate::aimd::is_news`). It waited for its
                            // token, in line: started a tick after it came
                            // at the earliest.
                            call.call_mut().times.started = taken_at.max(arrived.saturating_add(1));
                            self.with_token(call, token, request)
                        }
                        Err(rejected) => Err(Stop::Refused(rejected)),
                    }
                }
                Wait::InQueue(mut call, id) => {
                    let waited = {
                        let c = call.call();
                        let since = c.times.started;
                        self.wait_in_queue(&c.state, c.priority, id, since, request, &c.telemetry)
                            .await
                    };
                    waits.add(WaitReason::Queue, || self.since(began));
                    return match waited {
                        Ok(()) => {
                            // Admitted now: a learned limit times the call
                            // from here, not from when it joined the queue.
                            let c = call.call_mut();
                            c.holds_slot = true;
                            c.times.started = self.now();
                            Ok(A::from_call(call))
                        }
                        Err(rejected) => Err(rejected),
                    };
                }
                Wait::ForStoreToken(mut call) => {
                    let asked = {
                        let c = call.call();
                        self.take_store_token(
                            &c.state,
                            c.priority,
                            request,
                            c.cost,
                            c.times.scheduled,
                        )
                        .await
                    };
                    match asked {
                        StoreStep::Token(token) => {
                            let answered = self.now();
                            // One booking a key is enough for the calls
                            // charged to several: they sleep once every
                            // key's token is booked.
                            let due = answered.saturating_add(token.wait());
                            call.call_mut().token = Some(HeldToken::Store(Box::new(token)));
                            call.call_mut().times.started = match request.scope {
                                Scope::Token => due,
                                _ => self.sleep_until_due(due).await,
                            };
                            self.take_slot(call, request)
                        }
                        // A caller that waits however long it takes (`wait`)
                        // asks again when a store that refuses meanwhile says
                        // to; its deadline ends that.
                        StoreStep::Refused(rejected)
                            if request.patience == Patience::Unbounded
                                && rejected.reason() != RejectReason::Deadline =>
                        {
                            let again = rejected.retry_after().unwrap_or(Duration::from_secs(1));
                            let at = self.now().saturating_add(crate::clock::nanos(again));
                            self.sleep_until_due(at).await;
                            Err(Stop::wait(Wait::ForStoreToken(call)))
                        }
                        StoreStep::Refused(rejected) => Err(Stop::Refused(rejected)),
                        StoreStep::Local => self.rate_then_slot(call, request),
                    }
                }
            };
            waits.add(waiting_for, || self.since(began));
            wait = match decided {
                Ok(admitted) => return Ok(admitted),
                Err(Stop::Refused(rejected)) => return Err(rejected),
                Err(Stop::Wait(next)) => *next,
            };
        }
    }

    /// The controls in their one order, as far as they go without waiting
    /// (see [`acquire`](crate::ThrottleManager::acquire) for the order and
    /// why).
    #[inline(always)]
    pub(crate) fn decide<'c, A: Admitted<'c>>(
        &'c self,
        lookup: &impl Lookup,
        request: &Request,
    ) -> Result<A, Stop<'c>> {
        let priority = self.resolve(request.asked)?;
        let now = self.now();
        let (state, telemetry) = match lookup.find(now) {
            Ok(found) => found,
            Err(full) => {
                request.in_time(now, || 0, priority)?;
                let retry_at = now.saturating_add(full.retry_after);
                return Err(Stop::wait(Wait::ForRoom(retry_at)));
            }
        };
        // A call that could not finish before its caller's deadline, even
        // starting now, is not started.
        request.in_time(now, || state.quickest_answer(), priority)?;
        self.cost_fits(&state, priority, request.cost)?;
        if request.scope != Scope::RateOnly {
            let span = telemetry.span();
            self.throttle_admits(&state, now, priority, request, span)?;
        }
        let times = CallTimes::at(now);
        let call = Admitting::new(self, state, telemetry, priority, times, request.cost);
        // A rate in a store is a round trip away: a caller that waits asks
        // the store (the long way); one that never waits decides locally.
        let in_store =
            request.patience != Patience::Never && self.store_of(&call.call().state).is_some();
        let call = if in_store || request.scope == Scope::RateOnly {
            call
        } else if self.bulkhead.is_none() {
            return self.rate_then_slot(call, request);
        } else if request.takes_slot() {
            match self.free_slot_then_rate(call, request) {
                Ok(decided) => return decided,
                Err(call) => call,
            }
        } else {
            call
        };
        if request.scope != Scope::RateOnly {
            self.bulkhead_has_room(&call.call().state, priority)?;
        }
        if in_store {
            return Err(Stop::wait(Wait::ForStoreToken(call)));
        }
        self.rate_then_slot(call, request)
    }

    /// Steps 3 to 5 while the key's bulkhead has a free slot: the healthy
    /// key's common case. Nothing can happen between the bulkhead's check
    /// (step 3) and its slot (step 5) when the slot is free and the token
    /// due now, so the free slot is taken first, and given back if the
    /// token is not due now. What the caller sees is what the order above
    /// gives (a full bulkhead refuses before the rate, a call it refuses
    /// takes no token, a call that waits for its token holds no slot
    /// meanwhile), for one look at the bulkhead instead of two.
    ///
    /// `Err(call)`: no slot is free and the caller may queue; go the long
    /// way, with nothing taken.
    #[inline(always)]
    fn free_slot_then_rate<'c, A: Admitted<'c>>(
        &'c self,
        mut call: Admitting<'c>,
        request: &Request,
    ) -> Result<Result<A, Stop<'c>>, Admitting<'c>> {
        let filled = match self.take_free_slot(&call.call().state) {
            FreeSlot::NoBulkhead => return Ok(self.rate_then_slot(call, request)),
            FreeSlot::Taken { filled } => filled,
            FreeSlot::None(refusal) if request.patience == Patience::Never => {
                return Ok(Err(Stop::Refused(refusal.rejected(call.call().priority))));
            }
            FreeSlot::None(_) => return Err(call),
        };
        call.call_mut().holds_slot = true;
        let c = call.call();
        let token = self.reserve_token(&c.state, c.times.scheduled, c.priority, request, c.cost);
        Ok(match token {
            Ok(Token::Due(token)) => {
                let c = call.call_mut();
                self.slot_taken(c.priority, filled, &c.telemetry);
                if A::KEEPS_TOKEN {
                    c.token = token.map(HeldToken::Local);
                }
                Ok(A::from_call(call))
            }
            // The call waits for its token without a slot, and takes one
            // (or a place in the queue) once the token is due.
            Ok(Token::Ahead(token)) => {
                call.release_slot();
                call.call_mut().token = Some(HeldToken::Local(token));
                Err(Stop::wait(Wait::ForToken(call, token)))
            }
            Ok(Token::InLine) => {
                call.release_slot();
                Err(Stop::wait(Wait::InLine(call)))
            }
            Err(rejected) => Err(Stop::Refused(rejected)),
        })
    }

    /// The rate step on the key's local rate, then the bulkhead. (Always
    /// inlined: called from four places, the compiler would otherwise keep
    /// it apart, and move the call in and out of it on every admission.)
    #[inline(always)]
    fn rate_then_slot<'c, A: Admitted<'c>>(
        &'c self,
        call: Admitting<'c>,
        request: &Request,
    ) -> Result<A, Stop<'c>> {
        let c = call.call();
        let token = self.reserve_token(&c.state, c.times.scheduled, c.priority, request, c.cost)?;
        self.with_token(call, token, request)
    }

    /// The call's rate token, from step 4: due, the bulkhead; ahead or in
    /// line, a wait (or, for one key of a call charged to several, booked:
    /// it sleeps once every key's token is). (Always inlined, as
    /// [`rate_then_slot`](Self::rate_then_slot).)
    #[inline(always)]
    fn with_token<'c, A: Admitted<'c>>(
        &'c self,
        mut call: Admitting<'c>,
        token: Token,
        request: &Request,
    ) -> Result<A, Stop<'c>> {
        match token {
            // Without a slot to take nothing can refuse the call from here:
            // the token is not kept to be given back, unless another key of
            // the call may yet refuse it.
            Token::Due(token) if self.bulkhead.is_none() || !request.takes_slot() => {
                if A::KEEPS_TOKEN {
                    call.call_mut().token = token.map(HeldToken::Local);
                }
                Ok(A::from_call(call))
            }
            Token::Due(token) => {
                call.call_mut().token = token.map(HeldToken::Local);
                self.enter_bulkhead_step(call, request)
            }
            Token::Ahead(token) if request.scope == Scope::Token => {
                let c = call.call_mut();
                c.token = Some(HeldToken::Local(token));
                c.times.started = token.slot.start;
                Ok(A::from_call(call))
            }
            Token::Ahead(token) => {
                call.call_mut().token = Some(HeldToken::Local(token));
                Err(Stop::wait(Wait::ForToken(call, token)))
            }
            Token::InLine => Err(Stop::wait(Wait::InLine(call))),
        }
    }

    /// The last step, once the call's token is due: its bulkhead slot.
    #[inline(always)]
    fn take_slot<'c, A: Admitted<'c>>(
        &'c self,
        call: Admitting<'c>,
        request: &Request,
    ) -> Result<A, Stop<'c>> {
        if self.bulkhead.is_none() || !request.takes_slot() {
            return Ok(A::from_call(call));
        }
        self.enter_bulkhead_step(call, request)
    }

    fn enter_bulkhead_step<'c, A: Admitted<'c>>(
        &'c self,
        mut call: Admitting<'c>,
        request: &Request,
    ) -> Result<A, Stop<'c>> {
        match self.enter_slot(&mut call, request.patience)? {
            Some(id) => Err(Stop::wait(Wait::InQueue(call, id))),
            None => Ok(A::from_call(call)),
        }
    }

    /// Sleeps until `due` on the core's clock; returns it.
    async fn sleep_until_due(&self, due: Nanos) -> Nanos {
        self.clock.sleep_until(Duration::from_nanos(due)).await;
        due
    }
}

/// # Calls charged to several keys: slots once every token is due
impl Core {
    /// Sleeps until the token `call` booked (a [`Scope::Token`] admission)
    /// is due, a fall of its rate moving it as it moves every booked call.
    pub(crate) async fn until_due(&self, call: &mut Admitting<'_>) {
        let c = call.call();
        let started = match &c.token {
            Some(HeldToken::Local(token)) => self.sleep_for_token(&c.state, *token).await,
            _ => self.sleep_until_due(c.times.started).await,
        };
        call.call_mut().times.started = started;
    }

    /// The slot of `call`, whose token is due: taken (`None`), or a place
    /// in the bulkhead's queue if `patience` waits there.
    ///
    /// # Errors
    ///
    /// The bulkhead's refusal.
    #[inline]
    pub(crate) fn enter_slot(
        &self,
        call: &mut Admitting<'_>,
        patience: Patience,
    ) -> Result<Option<WaiterId>, Rejected> {
        let c = call.call();
        match self.enter_bulkhead(&c.state, c.priority, patience, &c.telemetry)? {
            BulkheadPlace::NoBulkhead => Ok(None),
            BulkheadPlace::Held => {
                call.call_mut().holds_slot = true;
                Ok(None)
            }
            BulkheadPlace::Queued(id) => Ok(Some(id)),
        }
    }

    /// The slot of `call`, whose token is due: taken, or waited for in the
    /// bulkhead's queue as `request` waits.
    ///
    /// # Errors
    ///
    /// The bulkhead's refusal, or the caller's deadline's; `call` keeps
    /// what it holds, to give back when dropped.
    pub(crate) async fn take_slot_waiting(
        &self,
        call: &mut Admitting<'_>,
        request: &Request,
    ) -> Result<(), Rejected> {
        let Some(id) = self.enter_slot(call, request.patience)? else {
            return Ok(());
        };
        let c = call.call();
        let since = c.times.started;
        self.wait_in_queue(&c.state, c.priority, id, since, request, &c.telemetry)
            .await?;
        let c = call.call_mut();
        c.holds_slot = true;
        c.times.started = self.now();
        Ok(())
    }
}

impl Wait<'_> {
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
    /// stands for; what the call took goes back as it is dropped. (Under
    /// [`Patience::Never`] the rate and the bulkhead refuse rather than ask
    /// to wait, and under [`Patience::QueueOnly`] the rate does; a full key
    /// space always asks.)
    #[cold]
    fn refused(self, core: &Core, request: &Request) -> Rejected {
        let priority = core.resolve(request.asked).unwrap_or(request.asked);
        match self {
            Wait::ForRoom(retry_at) => {
                let retry_after = Duration::from_nanos(retry_at.saturating_sub(core.now()));
                Rejected::new(RejectReason::KeySpaceFull, priority, Some(retry_after))
            }
            Wait::ForToken(call, token) => {
                let wait = token.slot.start.saturating_sub(call.call().times.scheduled);
                Rejected::rate_limited(wait, priority)
            }
            Wait::InQueue(call, id) => {
                if let Some((bulkhead, _)) = core.bulkhead_of(&call.call().state) {
                    // Dropped at once: leaves the queue.
                    drop(QueuedWait::new(
                        bulkhead,
                        usize::from(call.call().priority.level()),
                        id,
                    ));
                }
                Rejected::new(RejectReason::Full, priority, None)
            }
            // Never asked of a caller that does not wait: the rate refuses
            // it instead (see `Core::reserve_token` and `decide`).
            Wait::InLine(_) | Wait::ForStoreToken(_) => Rejected::rate_limited(0, priority),
        }
    }
}
