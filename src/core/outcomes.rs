//! How the end of a call is counted: the throttle's window, the rate, a
//! learned concurrency limit, and the bulkhead's slot.

use super::{CallTimes, Core, KeySettings, KeyTelemetry};
use crate::clock::Nanos;
use crate::events;
use crate::key::KeyState;
use crate::outcome::Outcome;
use crate::priority::Priority;
use crate::throttle::Count;

/// # Outcomes
impl Core {
    /// A call admitted at `started` that held a slot of its key's bulkhead
    /// ended as `outcome`: a learned limit learns from it (reading the
    /// clock; a fixed limit does not), then the slot goes back, to the head
    /// of the queue if anyone waits; a limit that rose hands its new slots
    /// to the queue too.
    #[inline]
    pub(crate) fn release_slot_after_call(
        &self,
        state: &KeyState,
        settings: &KeySettings,
        started: Nanos,
        outcome: Outcome,
        telemetry: &KeyTelemetry,
    ) {
        let Some(bulkhead) = state.bulkhead() else {
            return;
        };
        if bulkhead.is_learned() {
            return self.release_learned_slot(state, settings, started, outcome, telemetry);
        }
        bulkhead.release();
        self.metrics.active(telemetry.label(), -1.0);
    }

    fn release_learned_slot(
        &self,
        state: &KeyState,
        settings: &KeySettings,
        started: Nanos,
        outcome: Outcome,
        telemetry: &KeyTelemetry,
    ) {
        let Some((bulkhead, settings)) = settings.bulkhead_of(state) else {
            return;
        };
        let changed = match outcome {
            Outcome::Neutral => None, // says nothing about capacity
            Outcome::Success | Outcome::Overloaded => {
                let now = self.now();
                let overloaded = outcome == Outcome::Overloaded;
                bulkhead.learn(settings, now, now.saturating_sub(started), overloaded)
            }
        };
        bulkhead.release();
        self.metrics.active(telemetry.label(), -1.0);
        if let Some(change) = changed {
            if change.after != change.before {
                self.metrics
                    .concurrency_limit(telemetry.label(), change.after);
            }
            if change.reversed {
                events::concurrency_limit_reversed(telemetry.span(), change.before, change.after);
            }
            if change.after > change.before {
                bulkhead.grant_waiters(settings);
            }
        }
    }

    /// Counts the outcome of a call scheduled and admitted at `times`,
    /// which took `cost` rate tokens. The
    /// throttle counts a call when its outcome is known: a call still in
    /// flight is not yet a request, so a healthy call costs it one
    /// `fetch_add`.
    #[inline]
    #[expect(
        clippy::too_many_arguments,
        reason = "the call's facts as its permit holds them, each read once"
    )]
    pub(crate) fn record_outcome(
        &self,
        state: &KeyState,
        settings: &KeySettings,
        priority: Priority,
        times: CallTimes,
        cost: u32,
        outcome: Outcome,
        telemetry: &KeyTelemetry,
    ) {
        let label = telemetry.label();
        self.metrics.outcome(label, outcome);
        match outcome {
            Outcome::Success => {
                // The window puts the count in its newest bucket, and a rate
                // at its upper bound does not change: a healthy key's success
                // reads no clock.
                self.count(state, settings, times.started, priority, Count::Accepted);
                if let Some(rate) = &settings.rate {
                    let change = state.rate.increase(
                        || self.now(),
                        times.scheduled,
                        times.started,
                        times.waited(),
                        cost,
                        rate,
                    );
                    events::rate_changed(telemetry.span(), change);
                    if change.from != change.to {
                        self.metrics.rate(label, change.to);
                    }
                }
            }
            Outcome::Overloaded => {
                let now = self.now();
                self.count(state, settings, now, priority, Count::Request);
                if let Some(rate) = &settings.rate {
                    let change = state.rate.decrease(now, times.scheduled, rate);
                    events::rate_changed(telemetry.span(), change);
                    self.metrics.rate(label, change.to);
                }
            }
            Outcome::Neutral => {
                self.count(state, settings, times.started, priority, Count::Accepted)
            }
        }
        if self.store.is_some() {
            self.share_outcome(state, times, cost, outcome);
        }
    }

    #[inline]
    fn count(
        &self,
        state: &KeyState,
        settings: &KeySettings,
        now: Nanos,
        priority: Priority,
        count: Count,
    ) {
        if let Some((window, settings)) = settings.throttle_of(state) {
            window.record(
                now,
                usize::from(priority.level()),
                count,
                self.calls.priorities.levels,
                settings,
            );
        }
    }
}
