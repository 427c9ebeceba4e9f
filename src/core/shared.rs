//! The store's step in the admission pipeline, and the outcomes it shares:
//! what [`Core`] does for a key whose rate lives in the store
//! ([`crate::store`] is the client; this is the core's use of it).

use std::sync::Arc;
use std::time::Duration;

use super::{CallTimes, Core, Patience};
use crate::clock::Nanos;
use crate::error::{RejectReason, Rejected};
use crate::key::KeyState;
use crate::outcome::Outcome;
use crate::priority::Priority;
use crate::rate::config::RateSettings;
use crate::store::{Decision, Grant, RedisStore, Report, SharedKey, WhenUnavailable};

/// What the store's step gave a call.
#[derive(Debug)]
pub(crate) enum SharedStep {
    /// A shared token, due `grant.wait` after the decision.
    Token(Grant),
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
    pub(crate) fn shared_of<'s>(
        &'s self,
        state: &'s KeyState,
    ) -> Option<(&'s Arc<RedisStore>, &'s SharedKey, &'s RateSettings)> {
        let store = self.store.as_ref()?;
        Some((store, state.shared()?, self.rate_of(state)?))
    }

    /// The rate step for a key whose rate is shared: one round trip.
    pub(crate) async fn take_shared_token(
        &self,
        state: &KeyState,
        priority: Priority,
        patience: Patience,
    ) -> SharedStep {
        let Some((store, shared, settings)) = self.shared_of(state) else {
            return SharedStep::Local;
        };
        let patience = self.patience_for_token(priority, patience);
        let max_wait = (patience != Nanos::MAX).then_some(patience);
        match store
            .decide(shared, settings, max_wait, self.now(), None)
            .await
        {
            Decision::Granted(grant) => SharedStep::Token(grant),
            Decision::Refused { wait } => {
                SharedStep::Refused(Rejected::rate_limited(wait, priority))
            }
            Decision::Unavailable => match store.settings.when_unavailable {
                WhenUnavailable::UseLocalRate => SharedStep::Local,
                WhenUnavailable::Refuse => SharedStep::Refused(Rejected::new(
                    RejectReason::StoreUnavailable,
                    priority,
                    Some(store.settings.recheck_every),
                )),
            },
        }
    }

    /// [`wait`](crate::ThrottleManager::wait) on a shared rate: `false`
    /// when the key's rate is not shared, or the store is unavailable and
    /// the local rate is to be used. Under [`WhenUnavailable::Refuse`],
    /// asks the store again every `recheck_every` until it answers.
    pub(crate) async fn wait_for_shared_token(&self, state: &KeyState) -> bool {
        loop {
            match self
                .take_shared_token(state, Priority::HIGH, Patience::Unbounded)
                .await
            {
                SharedStep::Token(grant) => {
                    self.sleep_for_shared(state, &grant, self.now()).await;
                    return true;
                }
                SharedStep::Local => return false,
                SharedStep::Refused(rejected) => {
                    let again = rejected.retry_after().unwrap_or(Duration::from_secs(1));
                    let until = self.now().saturating_add(crate::clock::nanos(again));
                    self.clock.sleep_until(Duration::from_nanos(until)).await;
                }
            }
        }
    }

    /// Sleeps until a shared token decided at `decided_at` is due, and
    /// returns that time. Dropped before then, it hands the token back.
    pub(crate) async fn sleep_for_shared(
        &self,
        state: &KeyState,
        grant: &Grant,
        decided_at: Nanos,
    ) -> Nanos {
        if grant.wait == 0 {
            return decided_at;
        }
        let start = decided_at.saturating_add(grant.wait);
        let mut pending = PendingShared {
            core: self,
            state,
            grant: Some(grant.clone()),
        };
        self.clock.sleep_until(Duration::from_nanos(start)).await;
        pending.grant = None; // started: the token is used
        start
    }

    /// Hands back a shared token whose call will not happen (if no later
    /// token was taken since, as locally).
    pub(crate) fn return_shared(&self, state: &KeyState, grant: Grant) {
        if let Some((store, shared, settings)) = self.shared_of(state) {
            store.report(shared, Report::Cancel(grant), settings, self.now());
        }
    }

    /// Shares the outcome of a call scheduled and started at `times`.
    pub(crate) fn share_outcome(&self, state: &KeyState, times: CallTimes, outcome: Outcome) {
        let Some((store, shared, settings)) = self.shared_of(state) else {
            return;
        };
        let now = self.now();
        let scheduled_ago = now.saturating_sub(times.scheduled);
        let report = match outcome {
            Outcome::Success => Report::Success {
                scheduled_ago,
                started_ago: now.saturating_sub(times.started),
                waited: times.waited(),
            },
            Outcome::Overloaded => Report::Failure { scheduled_ago },
            Outcome::Neutral => return,
        };
        store.report(shared, report, settings, now);
    }

    /// Shares a pause of the key (a server's `Retry-After`).
    pub(crate) fn share_pause(&self, state: &KeyState, pause: Nanos) {
        if let Some((store, shared, settings)) = self.shared_of(state) {
            store.report(shared, Report::Pause(pause), settings, self.now());
        }
    }

    /// The key's shared rate as Redis last answered it, while the store
    /// answers; `None` otherwise (the local rate is in force).
    pub(crate) fn shared_rate(&self, state: &KeyState) -> Option<f64> {
        let (store, shared, _) = self.shared_of(state)?;
        store.is_up().then(|| shared.rate())?
    }
}

/// A shared token taken for a call that has not started: dropped before
/// it starts, hands the token back.
struct PendingShared<'a> {
    core: &'a Core,
    state: &'a KeyState,
    grant: Option<Grant>,
}

impl Drop for PendingShared<'_> {
    fn drop(&mut self) {
        if let Some(grant) = self.grant.take() {
            self.core.return_shared(self.state, grant);
        }
    }
}
