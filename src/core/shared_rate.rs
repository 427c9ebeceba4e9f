//! The store's step in the admission pipeline, and the outcomes it shares:
//! what [`Core`] does for a key whose rate lives in a
//! [`RateStore`](crate::store::RateStore) ([`crate::store`] names the
//! trait; this is the core's use of it).

use std::sync::Arc;
use std::time::Duration;

use super::request::Request;
use super::{CallTimes, Core};
use crate::clock::{Nanos, nanos};
use crate::error::{RejectReason, Rejected};
use crate::key::KeyState;
use crate::outcome::Outcome;
use crate::priority::Priority;
use crate::rate::RateSettings;
use crate::rate::{self, STORE_HORIZON};
use crate::store::{
    RateEvent, RateRules, StoreHandle, StoreKey, TokenAnswer, TokenReceipt, TokenRequest,
    WhenUnavailable,
};

/// A shared token taken for a call: due `wait` after the store's answer.
#[derive(Debug, Clone)]
pub(crate) struct StoreToken {
    wait: Nanos,
    receipt: TokenReceipt,
}

impl StoreToken {
    /// How long after the store's answer the token is due.
    pub(crate) fn wait(&self) -> Nanos {
        self.wait
    }
}

/// What one round trip to the store gave.
enum Asked {
    Granted(StoreToken),
    /// Not taken: due this long from now, beyond what was asked for.
    Later(Nanos),
    /// Nothing to wait for: the store is not there for the key, or is
    /// unavailable.
    Done(StoreStep),
}

/// What the store's step gave a call.
#[derive(Debug)]
pub(crate) enum StoreStep {
    /// A shared token.
    Token(StoreToken),
    /// Refused: the token lay beyond the caller's patience, or the store
    /// is unavailable and refuses meanwhile.
    Refused(Rejected),
    /// The store is unavailable: decide on the key's local rate.
    Local,
}

impl Core {
    /// The store, the key's link to it and its rate settings: present when
    /// the manager has a store and the key a rate.
    #[inline]
    pub(crate) fn store_of<'s>(
        &'s self,
        state: &'s KeyState,
    ) -> Option<(&'s Arc<StoreHandle>, &'s StoreKey, &'s RateSettings)> {
        let store = self.store.as_ref()?;
        Some((store, state.store_key()?, self.rate_of(state)?))
    }

    /// The rate step for a key whose rate is in the store: one round trip
    /// when the token is due within [`STORE_HORIZON`] and nobody is in the
    /// key's line; otherwise the call waits in the line
    /// (`rate/line.rs`), whose head asks the store, one
    /// call of this process at a time, until its token comes within the
    /// horizon. So the store's bucket is never booked further ahead than
    /// that by any process, and a change of the shared rate reaches every
    /// call still in line. `arrived`: when the call came, from which its
    /// patience counts.
    pub(crate) async fn take_store_token(
        &self,
        state: &KeyState,
        priority: Priority,
        request: &Request,
        cost: u32,
        arrived: Nanos,
    ) -> StoreStep {
        let Some((_, key, settings)) = self.store_of(state) else {
            return StoreStep::Local;
        };
        let caller = request.patience;
        let patience = self.patience_for_token(state, self.now(), priority, request);
        let in_line = state.rate.waiting_in_line();
        // When the token the call first asked for was due, if it was
        // beyond the horizon: the head sleeps until then before asking
        // again.
        let mut due = None;
        if in_line == 0 {
            // A fixed rate's token is booked as far ahead as the caller
            // waits (`ask_store` caps it at the longest pause: a store
            // takes a debt beyond that for garbage, `RateRules::max_debt`).
            let horizon = if settings.never_moves() {
                patience
            } else {
                STORE_HORIZON
            };
            match self
                .ask_store(state, priority, patience.min(horizon), cost)
                .await
            {
                Asked::Granted(token) => return StoreStep::Token(token),
                Asked::Later(wait) if wait > patience => {
                    return StoreStep::Refused(self.token_too_far(wait, priority, caller));
                }
                Asked::Later(wait) => due = Some(self.now().saturating_add(wait)),
                Asked::Done(step) => return step,
            }
        } else {
            // Behind others in line: expected at the shared rate last seen.
            let interval = rate::interval(key.rate().unwrap_or(settings.starting_rate));
            let expected = rate::expected_wait(0, in_line, cost, interval);
            if expected > patience {
                return StoreStep::Refused(self.token_too_far(expected, priority, caller));
            }
        }
        let until = self.token_deadline(priority, request, arrived, state.quickest_answer());
        let mut place = state.rate.line().join();
        place.head().await;
        loop {
            if let Some(due) = due.take() {
                let now = self.now();
                let look = rate::next_look(now, due.saturating_sub(now), STORE_HORIZON);
                self.clock.sleep_until(Duration::from_nanos(look)).await;
            }
            match self.ask_store(state, priority, STORE_HORIZON, cost).await {
                Asked::Granted(mut token) => {
                    // The head keeps its place until its token is due: each
                    // process books one token at a time, so the processes
                    // of a fleet take turns at the store's bucket.
                    self.sleep_for_store_token(state, &token, self.now()).await;
                    token.wait = 0;
                    return StoreStep::Token(token);
                }
                Asked::Later(wait) => {
                    let now = self.now();
                    if now.saturating_add(wait) > until.latest() {
                        let due = now.saturating_add(wait);
                        return StoreStep::Refused(until.refusal(due, wait, priority));
                    }
                    due = Some(now.saturating_add(wait));
                }
                Asked::Done(step) => return step,
            }
        }
    }

    /// The rules a store applies to a key of `settings`.
    pub(crate) fn store_rules(&self, settings: &RateSettings) -> RateRules {
        RateRules::from_settings(settings, self.calls.max_defer)
    }

    /// One round trip: the store's token if due within `max_wait` (at
    /// most the longest pause: no token is booked further ahead).
    async fn ask_store(
        &self,
        state: &KeyState,
        priority: Priority,
        max_wait: Nanos,
        cost: u32,
    ) -> Asked {
        let Some((handle, key, settings)) = self.store_of(state) else {
            return Asked::Done(StoreStep::Local);
        };
        let rules = self.store_rules(settings);
        let max_wait = max_wait.min(nanos(rules.max_pause));
        let request = TokenRequest::new(rules, Some(Duration::from_nanos(max_wait))).cost(cost);
        match handle.store.take_token(&key.name, request).await {
            TokenAnswer::Granted {
                wait,
                receipt,
                rate,
            } => {
                let wait = checked_answer(key, &rules, wait, rate);
                if wait > max_wait {
                    // Granted further ahead than asked: the store is not
                    // to be believed, and the call does not start early.
                    return Asked::Later(wait);
                }
                Asked::Granted(StoreToken { wait, receipt })
            }
            TokenAnswer::Refused { wait, rate } => {
                Asked::Later(checked_answer(key, &rules, wait, rate))
            }
            TokenAnswer::Unavailable { retry_after } => {
                Asked::Done(match handle.store.when_unavailable() {
                    WhenUnavailable::UseLocalRate => StoreStep::Local,
                    WhenUnavailable::Refuse => StoreStep::Refused(Rejected::new(
                        RejectReason::StoreUnavailable,
                        priority,
                        Some(retry_after),
                    )),
                })
            }
        }
    }
    /// Sleeps until a shared token decided at `decided_at` is due, and
    /// returns that time. Dropped before then, it hands the token back.
    pub(crate) async fn sleep_for_store_token(
        &self,
        state: &KeyState,
        token: &StoreToken,
        decided_at: Nanos,
    ) -> Nanos {
        if token.wait == 0 {
            return decided_at;
        }
        let start = decided_at.saturating_add(token.wait);
        let mut pending = PendingStoreToken {
            core: self,
            state,
            token: Some(token.clone()),
        };
        self.clock.sleep_until(Duration::from_nanos(start)).await;
        pending.token = None; // started: the token is used
        start
    }

    /// Hands back a shared token whose call will not happen (if no later
    /// token was taken since, as locally).
    pub(crate) fn give_back_store_token(&self, state: &KeyState, token: StoreToken) {
        self.report_to_store(state, RateEvent::Cancelled(token.receipt));
    }

    /// Reports the outcome of a call scheduled and started at `times`,
    /// which took `cost` tokens, to the store, if the key's rate is there.
    pub(crate) fn share_outcome(
        &self,
        state: &KeyState,
        times: CallTimes,
        cost: u32,
        outcome: Outcome,
    ) {
        if let Some(event) = self.outcome_event(times, cost, outcome) {
            self.report_to_store(state, event);
        }
    }

    /// What a store learns of the outcome of a call scheduled and started
    /// at `times`, which took `cost` tokens: `None` for a neutral one.
    pub(crate) fn outcome_event(
        &self,
        times: CallTimes,
        cost: u32,
        outcome: Outcome,
    ) -> Option<RateEvent> {
        let now = self.now();
        let scheduled_ago = Duration::from_nanos(now.saturating_sub(times.scheduled));
        match outcome {
            Outcome::Success => Some(RateEvent::Success {
                scheduled_ago,
                started_ago: Duration::from_nanos(now.saturating_sub(times.started)),
                waited: times.waited(),
                tokens: cost,
            }),
            Outcome::Overloaded => Some(RateEvent::Overloaded { scheduled_ago }),
            Outcome::Neutral => None,
        }
    }

    /// Reports a pause of the key (a server's `Retry-After`) to the store,
    /// if the key's rate is there.
    pub(crate) fn share_pause(&self, state: &KeyState, pause: Duration) {
        self.report_to_store(state, RateEvent::Paused(pause));
    }

    /// Sends `event` to the store without waiting for it, if the key's rate
    /// is there ([`StoreHandle::spawn_report`]: not always, and the local
    /// rate has counted the event already); the rate it brings back becomes
    /// the key's shared rate.
    fn report_to_store(&self, state: &KeyState, event: RateEvent) {
        let Some((handle, key, settings)) = self.store_of(state) else {
            return;
        };
        handle.spawn_report(|handle| {
            let (name, rate) = (Arc::clone(&key.name), key.rate_cell());
            let rules = self.store_rules(settings);
            async move {
                let shared = handle.store.report(&name, event, rules).await;
                if let Some(shared) = shared.and_then(|shared| rules.checked_rate(shared)) {
                    crate::store::set_rate(&rate, shared);
                }
            }
        });
    }

    /// The key's shared rate as the store last answered it, while the
    /// store answers; `None` otherwise (the local rate is in force).
    pub(crate) fn shared_rate(&self, state: &KeyState) -> Option<f64> {
        let (handle, key, _) = self.store_of(state)?;
        handle.store.is_available().then(|| key.rate())?
    }
}

/// A store's answer checked as a store checks what it reads (see
/// [`TokenAnswer`]): its rate, if it is one, becomes the key's shared
/// rate, clamped into the bounds; its wait, in nanoseconds, is cut to what
/// the bucket can owe at that rate.
fn checked_answer(key: &StoreKey, rules: &RateRules, wait: Duration, rate: f64) -> Nanos {
    let rate = match rules.checked_rate(rate) {
        Some(rate) => {
            key.set_rate(rate);
            rate
        }
        None => key.rate().unwrap_or(rules.starting_rate),
    };
    nanos(wait.min(rules.max_debt(rate)))
}

/// A shared token taken for a call that has not started: dropped before
/// it starts, hands the token back.
struct PendingStoreToken<'a> {
    core: &'a Core,
    state: &'a KeyState,
    token: Option<StoreToken>,
}

impl Drop for PendingStoreToken<'_> {
    fn drop(&mut self) {
        if let Some(token) = self.token.take() {
            self.core.give_back_store_token(self.state, token);
        }
    }
}
