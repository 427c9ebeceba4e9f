//! The driver's waiting half: [`Core::admit_after`] is the one loop that
//! waits where [`Core::decide`] stopped (for room in the key space, a rate
//! token, a turn in the key's line, a slot in the bulkhead's queue, the
//! store's answer) and goes on with the next step; and the waits of a call
//! charged to several keys, which takes its slots once every key's token
//! is due.

use std::time::Duration;

use super::admitting::{Admitted, Admitting, HeldToken};
use super::drive::{Lookup, MustWait, Stop, Wait};
use super::request::{Request, Scope};
use super::shared_rate::StoreStep;
use super::{Core, Patience};
use crate::bulkhead::WaiterId;
use crate::clock::Nanos;
use crate::error::{RejectReason, Rejected};
use crate::events;
use crate::metrics::{CallWaits, WaitReason};

impl Core {
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

    /// A shadowed key's call that would have to wait: it never does. One
    /// whose rate is in a store asks the store as a caller that waits for
    /// no token would (the token due now is taken, one further ahead is
    /// refused), so that the store counts what enforcement would; any
    /// other wait is refused for what it waits for, as `try_acquire` is.
    /// A refusal here is what the shadowed call is counted as.
    ///
    /// # Cancel safety
    ///
    /// Dropped during the store's round trip, the call takes nothing (a
    /// token the store granted meanwhile goes back with the `Admitting`).
    pub(crate) async fn admit_shadowed<'c, A: Admitted<'c>>(
        &'c self,
        request: &Request,
        MustWait(wait): MustWait<'c>,
    ) -> Result<A, Rejected> {
        let Wait::ForStoreToken(mut call) = *wait else {
            return Err(wait.refused(self, request));
        };
        let asking = Request {
            patience: Patience::QueueOnly,
            ..*request
        };
        let at_once = Request {
            patience: Patience::Never,
            ..*request
        };
        let asked = {
            let c = call.call();
            let arrived = c.times.scheduled;
            self.take_store_token(&c.state, c.priority, &asking, c.cost, arrived)
                .await
        };
        let decided = match asked {
            StoreStep::Token(token) => {
                call.call_mut().times.started = self.now();
                call.call_mut().token = Some(HeldToken::Store(Box::new(token)));
                self.take_slot(call, &at_once)
            }
            StoreStep::Refused(rejected) => return Err(rejected),
            StoreStep::Local => {
                let settings = self.settings_of(&call.call().state);
                self.rate_then_slot(call, &at_once, settings)
            }
        };
        decided.map_err(|stop| stop.refused(self, &at_once))
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
        // The wait to be admitted is one budget, counted from here.
        let arrived = self.now();
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
                            // A learned rate's call is scheduled when it
                            // took its token, at the rate then: a fall while
                            // it was in line paced it, so its outcome is news
                            // (`rate::aimd::is_news`), and a rate far above a
                            // host's capacity falls once per round trip, not
                            // once per line. Steps set by hand keep the rule
                            // they were measured with: scheduled when it
                            // arrived. It waited for its token, in line:
                            // started a tick after it was scheduled.
                            let learns = self
                                .rate_of(&call.call().state)
                                .is_some_and(|rate| rate.learns);
                            let times = &mut call.call_mut().times;
                            if learns {
                                times.scheduled = taken_at.saturating_sub(1).max(arrived);
                            }
                            times.started = taken_at.max(arrived.saturating_add(1));
                            self.with_token(call, token, request)
                        }
                        Err(rejected) => Err(Stop::Refused(rejected)),
                    }
                }
                Wait::InQueue(mut call, id) => {
                    let waited = self
                        .wait_for_queued_slot(&mut call, id, request, arrived)
                        .await;
                    waits.add(WaitReason::Queue, || self.since(began));
                    return waited.map(|()| A::from_call(call));
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
                        StoreStep::Local => {
                            let settings = self.settings_of(&call.call().state);
                            self.rate_then_slot(call, request, settings)
                        }
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

    /// The slot of `call`, whose token is due: taken, or waited for in the
    /// bulkhead's queue as `request` waits, within what is left of the budget
    /// of a call that began to wait for admission at `arrived`.
    ///
    /// # Errors
    ///
    /// The bulkhead's refusal, or the caller's deadline's; `call` keeps
    /// what it holds, to give back when dropped.
    pub(crate) async fn take_slot_waiting(
        &self,
        call: &mut Admitting<'_>,
        request: &Request,
        arrived: Nanos,
    ) -> Result<(), Rejected> {
        let Some(id) = self.enter_slot(call, request.patience, request.flow())? else {
            return Ok(());
        };
        self.wait_for_queued_slot(call, id, request, arrived).await
    }

    /// Waits at `id` in the bulkhead's queue, within what is left of the
    /// budget of a call that began to wait for admission at `arrived`.
    /// Given its slot, the call holds it and starts now: a learned limit
    /// times it from here, not from when it joined the queue.
    ///
    /// # Errors
    ///
    /// The queue's refusal (timed out, dropped, overloaded) or the
    /// caller's deadline's.
    async fn wait_for_queued_slot(
        &self,
        call: &mut Admitting<'_>,
        id: WaiterId,
        request: &Request,
        arrived: Nanos,
    ) -> Result<(), Rejected> {
        let c = call.call();
        let times = (arrived, c.times.started);
        self.wait_in_queue(&c.state, c.priority, id, times, request, &c.telemetry)
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
}
