//! CoDel on the bulkhead's queue, as pure state: what the queue's sojourn
//! times say about overload. No clock and no lock: the limiter feeds it
//! the time under its lock.
//!
//! CoDel (Nichols and Jacobson, 2012) judges a queue by the shortest time
//! any call spent in it over the last `interval`: a queue that drains now
//! and then has a short minimum, however long its bursts; one whose
//! minimum stays above `target` has a standing queue, which only delays
//! every call. Facebook's "Fail at scale" (2015) applies it to a server's
//! request queue with two changes taken here: while overloaded, a waiter
//! is dropped once it has waited `target` (not the configured queue
//! timeout), and, with adaptive LIFO, the newest waiter is served first,
//! so the calls served are those whose callers are still likely waiting.
//! The queue is no longer overloaded once it drains, and serves first come
//! first served again.
//!
//! Once overloaded, the queue stays so until it drains, that is until it
//! has stayed empty for a whole interval: under adaptive LIFO the calls
//! served have waited least, so their sojourns no longer measure the
//! standing queue, and calls that end together can empty the queue for a
//! moment while twice its capacity keeps coming.
//!
//! Invariant: `overloaded` becomes true only when an interval ends whose
//! every sojourn was above the target (a moment of empty queue counts as
//! a sojourn of 0), and false only once the queue has been empty for an
//! interval.

use crate::clock::Nanos;

/// CoDel's settings, checked: `0 < target <= interval`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CodelSettings {
    pub(crate) target: Nanos,
    pub(crate) interval: Nanos,
    /// Serve the newest waiter first while overloaded.
    pub(crate) lifo: bool,
}

/// The queue's recent sojourn times, as CoDel reads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CodelState {
    /// When the current interval began; `None` before the first sample.
    interval_start: Option<Nanos>,
    /// The shortest sojourn of the current interval.
    interval_min: Nanos,
    /// Since when the queue has been empty, if it is.
    empty_since: Option<Nanos>,
    overloaded: bool,
}

impl Default for CodelState {
    fn default() -> Self {
        Self {
            interval_start: None,
            interval_min: Nanos::MAX,
            empty_since: None,
            overloaded: false,
        }
    }
}

impl CodelState {
    /// Whether the queue stands above the target, as of the last
    /// [`look`](Self::look).
    pub(crate) fn overloaded(&self) -> bool {
        self.overloaded
    }

    /// Brings the state to `now`: an overloaded queue that has been empty
    /// for an interval is no longer overloaded.
    pub(crate) fn look(&mut self, settings: &CodelSettings, now: Nanos) {
        let empty_for = self.empty_since.map(|since| now.saturating_sub(since));
        if self.overloaded && empty_for.is_some_and(|empty| empty >= settings.interval) {
            self.overloaded = false;
            self.interval_start = Some(now);
            self.interval_min = Nanos::MAX;
        }
    }

    /// A waiter that had waited `sojourn` left the queue for a slot at
    /// `now`.
    pub(crate) fn served(&mut self, settings: &CodelSettings, now: Nanos, sojourn: Nanos) {
        self.look(settings, now);
        if self.overloaded {
            return; // until the queue drains
        }
        let start = *self.interval_start.get_or_insert(now);
        self.interval_min = self.interval_min.min(sojourn);
        if now.saturating_sub(start) >= settings.interval {
            self.overloaded = self.interval_min > settings.target;
            self.interval_start = Some(now);
            self.interval_min = Nanos::MAX;
        }
    }

    /// A call joined the queue.
    pub(crate) fn joined(&mut self) {
        self.empty_since = None;
    }

    /// The queue is empty at `now`: a sojourn of 0 for the interval.
    pub(crate) fn emptied(&mut self, now: Nanos) {
        self.empty_since.get_or_insert(now);
        self.interval_min = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = 1_000_000;

    fn settings() -> CodelSettings {
        CodelSettings {
            target: 5 * MS,
            interval: 100 * MS,
            lifo: true,
        }
    }

    /// Serves a call every 10 ms from `from` to `to` (ms) that waited `waited`.
    fn serve(state: &mut CodelState, from: u64, to: u64, waited: Nanos) {
        for at in (from..=to).step_by(10) {
            state.served(&settings(), at * MS, waited);
        }
    }

    #[test]
    fn a_queue_whose_shortest_wait_stays_above_target_for_an_interval_is_overloaded() {
        let mut state = CodelState::default();
        serve(&mut state, 0, 90, 20 * MS);
        assert!(!state.overloaded(), "not a whole interval yet");
        serve(&mut state, 100, 100, 20 * MS);
        assert!(state.overloaded());
    }

    #[test]
    fn one_short_wait_or_a_moment_of_empty_queue_means_no_standing_queue() {
        let mut state = CodelState::default();
        for at in (0..=100).step_by(10) {
            let sojourn = if at == 50 { MS } else { 50 * MS };
            state.served(&settings(), at * MS, sojourn);
        }
        assert!(!state.overloaded());
        let mut state = CodelState::default();
        serve(&mut state, 0, 40, 50 * MS);
        state.emptied(45 * MS);
        state.joined();
        serve(&mut state, 50, 100, 50 * MS);
        assert!(!state.overloaded());
    }

    #[test]
    fn an_overloaded_queue_stays_so_until_it_has_been_empty_for_an_interval() {
        let mut state = CodelState::default();
        serve(&mut state, 0, 100, 20 * MS);
        assert!(state.overloaded());
        // Served newest first, the calls served waited little, and calls
        // ending together empty the queue for a moment: still overloaded.
        serve(&mut state, 110, 200, MS / 2);
        state.emptied(205 * MS);
        state.joined();
        serve(&mut state, 210, 300, MS / 2);
        assert!(
            state.overloaded(),
            "short sojourns and a moment of empty queue do not end it"
        );
        state.emptied(310 * MS);
        state.look(&settings(), 400 * MS);
        assert!(state.overloaded(), "empty for 90 ms");
        state.look(&settings(), 410 * MS);
        assert!(!state.overloaded(), "empty for an interval");
        state.joined();
        serve(&mut state, 420, 530, 20 * MS);
        assert!(state.overloaded(), "standing again after a whole interval");
    }
}
