//! A fair queue's bookkeeping: which round of its flow each waiter joins.
//!
//! Self-clocked fair queuing (Golestani, 1994) with every waiter costing
//! one slot: a waiter joins the round after its flow's newest waiter, and
//! the queue serves the lowest round first, first come first served
//! within one. So a flow that waits is served once per round, and one
//! that sends more than its share waits behind those that send less.
//!
//! A flow that has been quiet gets a head start, as fq_codel's sparse
//! flows do (RFC 8290), bounded as a token bucket's burst is: its rounds
//! may start up to [`CREDIT`] rounds before the round being served, a
//! round a flow uses only once. A flow below its share is then served
//! ahead of one that waits all the time, first come first served among
//! its kind, instead of taking its turn behind it in every round.
//!
//! The bound: a waiter of a flow that has waited (or been served) in each
//! of the last [`CREDIT`] rounds waits at most [`CREDIT`] + 1 rounds, and
//! each round serves at most one waiter of each other flow.

use std::collections::HashMap;

use crate::bulkhead::codel::CodelState;

/// How many rounds ahead of the round being served a quiet flow may be
/// served: enough that a flow well below its share (a user's occasional
/// query) rarely takes its turn behind a flow that waits all the time (in
/// `tests/bulkhead/fair.rs`, 8 keeps 20 such flows' p99 wait within 1.25x
/// of what it is without one; 0 doubles it), few enough that a flow
/// that waits all the time still gets a turn within 9 rounds.
pub(super) const CREDIT: u64 = 8;

/// The rounds of a fair queue's flows, per priority level.
#[derive(Debug, Default)]
pub(super) struct FlowRounds {
    /// Per level: the round of the waiter served last.
    served: Vec<u64>,
    /// Per level and flow that has waiters there, or had one within
    /// [`CREDIT`] rounds of the round being served: its newest waiter's
    /// round and how many of its waiters wait at that level.
    flows: HashMap<(usize, u64), FlowAtLevel>,
    /// Under CoDel, each flow's sojourns (at every level), while it has
    /// waiters or stands overloaded: CoDel per flow, as fq_codel runs it,
    /// so a flow's standing queue drops its own waiters and no other's.
    pub(super) codel: HashMap<u64, CodelState>,
}

#[derive(Debug, Clone, Copy)]
struct FlowAtLevel {
    newest: u64,
    waiting: u32,
}

impl FlowRounds {
    /// A waiter of `flow` joins `level` (of `levels`): its round.
    pub(super) fn join(&mut self, level: usize, levels: usize, flow: u64) -> u64 {
        if self.served.len() < levels {
            self.served.resize(levels, 0);
        }
        let earliest = self.served[level].saturating_sub(CREDIT);
        match self.flows.get_mut(&(level, flow)) {
            Some(at) => {
                at.newest = (at.newest + 1).max(earliest);
                at.waiting += 1;
                at.newest
            }
            None => {
                let at = FlowAtLevel {
                    newest: earliest,
                    waiting: 1,
                };
                self.flows.insert((level, flow), at);
                earliest
            }
        }
    }

    /// A waiter of `flow` in `round` of `level` left: served (the rounds
    /// move on to its round) or not (dropped, given up: its round is free
    /// for its flow's next waiter).
    pub(super) fn left(&mut self, level: usize, flow: u64, round: u64, served: bool) {
        if let Some(at) = self.flows.get_mut(&(level, flow)) {
            at.waiting -= 1;
            if !served && at.newest == round {
                at.newest = round.saturating_sub(1);
            }
        }
        if served && self.served[level] < round {
            self.served[level] = round;
            let earliest = round.saturating_sub(CREDIT);
            // A flow with no waiter and none since the earliest round is as new.
            self.flows.retain(|(at, _), flow| {
                *at != level || flow.waiting > 0 || flow.newest >= earliest
            });
        }
        let earliest = self.served[level].saturating_sub(CREDIT);
        let gone = self
            .flows
            .get(&(level, flow))
            .is_some_and(|at| at.waiting == 0 && at.newest < earliest);
        if gone {
            self.flows.remove(&(level, flow));
        }
    }

    /// How many waiters `flow` has, at any level.
    pub(super) fn waiting(&self, flow: u64) -> u32 {
        self.flows
            .iter()
            .filter(|((_, f), _)| *f == flow)
            .map(|(_, at)| at.waiting)
            .sum()
    }

    /// How many waiters each flow has at `level` or less important ones.
    pub(super) fn waiting_from(&self, level: usize) -> HashMap<u64, u32> {
        let mut counts: HashMap<u64, u32> = HashMap::new();
        for ((at, flow), waiting) in &self.flows {
            if *at >= level && waiting.waiting > 0 {
                *counts.entry(*flow).or_default() += waiting.waiting;
            }
        }
        counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flow_that_waits_takes_one_round_per_waiter_and_a_quiet_one_starts_credit_rounds_back() {
        let mut rounds = FlowRounds::default();
        for round in 0..12 {
            assert_eq!(rounds.join(0, 1, 7), round);
        }
        for round in 0..10 {
            rounds.left(0, 7, round, true);
        }
        // Round 9 served: a quiet flow starts at round 1, and its waiters
        // go one round each, while flow 7's next is after its own.
        assert_eq!(rounds.join(0, 1, 9), 9 - CREDIT);
        assert_eq!(rounds.join(0, 1, 9), 10 - CREDIT);
        assert_eq!(rounds.join(0, 1, 7), 12);
        assert_eq!(rounds.waiting(7), 3);
        assert_eq!(rounds.waiting_from(0), HashMap::from([(7, 3), (9, 2)]));
        // Served, flow 9 keeps its place: quiet again, it starts where
        // it left off, not back at the earliest round.
        rounds.left(0, 9, 1, true);
        rounds.left(0, 9, 2, true);
        assert_eq!(rounds.join(0, 1, 9), 3);
    }

    #[test]
    fn a_waiter_that_leaves_unserved_frees_its_round_for_its_flow() {
        let mut rounds = FlowRounds::default();
        assert_eq!(rounds.join(0, 1, 7), 0);
        assert_eq!(rounds.join(0, 1, 7), 1);
        rounds.left(0, 7, 1, false);
        assert_eq!(rounds.join(0, 1, 7), 1);
        rounds.left(0, 7, 0, false);
        rounds.left(0, 7, 1, false);
        assert!(rounds.waiting_from(0).is_empty());
    }
}
