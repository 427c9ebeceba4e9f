//! The bulkhead's wait queue as a plain data structure: who is next, who is
//! oldest, who goes when it overflows, who has waited too long. No atomics,
//! no clock: the limiter calls it under its lock, with the time.
//!
//! Each priority level is kept in the order it is served: by arrival, or
//! at a fair queue by its flows' rounds ([`rounds`]), then arrival.

use std::collections::VecDeque;
use std::num::NonZeroU64;
use std::task::Waker;

use super::codel::CodelSettings;
use super::config::Overflow;
use crate::clock::Nanos;

mod rounds;

use rounds::FlowRounds;

/// A queued call, known by its number: numbers rise with arrival, so the
/// smallest is the oldest.
pub(crate) type WaiterId = u64;

#[derive(Debug)]
struct Entry {
    id: WaiterId,
    waker: Option<Waker>,
    /// When it joined the queue (0 unless CoDel reads it).
    since: Nanos,
    /// Its flow's round at a fair queue (then its flow is set), else its
    /// level's last round when it joined: its level is in `(round, id)`
    /// order.
    round: u64,
    /// Its flow's id, non-zero so that this is a word.
    flow: Option<NonZeroU64>,
}

impl Entry {
    fn flow(&self) -> Option<u64> {
        self.flow.map(NonZeroU64::get)
    }
}

/// The id a flow's waiters carry: a flow's own, never zero (the flow of
/// calls that have none is 0, and waits as 1).
fn entry_flow(flow: u64) -> NonZeroU64 {
    NonZeroU64::new(flow).unwrap_or(NonZeroU64::MIN)
}

/// Waiters by priority (index 0 first), in the order each level is served.
#[derive(Debug, Default)]
pub(crate) struct WaitQueue {
    /// Allocated on the first wait: a key that never queues pays nothing.
    levels: Vec<VecDeque<Entry>>,
    len: usize,
    next_id: WaiterId,
    /// The flows' rounds (and, under CoDel, each flow's sojourns), from
    /// the first waiter with a flow.
    rounds: Option<Box<FlowRounds>>,
}

/// A waiter taken from the queue: its number, waker and when it joined.
pub(crate) type Taken = (WaiterId, Option<Waker>, Nanos);

/// A waiter served at a hand-off, and those dropped at it.
pub(crate) type Served = (Option<Taken>, Vec<(WaiterId, Option<Waker>)>);

/// What to do with a newcomer who finds the queue full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnFull {
    /// Reject the newcomer.
    RejectNewcomer,
    /// Reject this waiter (of this priority) and queue the newcomer.
    Drop(usize, WaiterId),
}

impl WaitQueue {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Queues a call of `priority` (`< levels`) that joins at `since`, of
    /// `flow` if the queue is fair; returns its number. A fair waiter goes
    /// behind every waiter of its round or an earlier one.
    pub(crate) fn push(
        &mut self,
        priority: usize,
        levels: usize,
        since: Nanos,
        flow: Option<u64>,
    ) -> WaiterId {
        if self.levels.is_empty() {
            self.levels.resize_with(levels, VecDeque::new);
        }
        let id = self.next_id;
        self.next_id += 1;
        let flow = flow.map(entry_flow);
        let level = &mut self.levels[priority];
        let last = level.back().map_or(0, |entry| entry.round);
        let round = match flow {
            None => last,
            Some(flow) => {
                self.rounds
                    .get_or_insert_with(Box::default)
                    .join(priority, levels, flow.get())
            }
        };
        let at = match round >= last {
            true => level.len(),
            false => level.partition_point(|entry| entry.round <= round),
        };
        let entry = Entry {
            id,
            waker: None,
            since,
            round,
            flow,
        };
        level.insert(at, entry);
        self.len += 1;
        id
    }

    /// Takes the head of the queue: the first of the most important.
    pub(crate) fn pop_head(&mut self) -> Option<Taken> {
        let priority = self.top()?;
        let entry = self.levels[priority].pop_front().expect("a waiter");
        Some(self.took(priority, entry, true))
    }

    /// Whether the queue serves its waiters round their flows.
    pub(crate) fn is_fair(&self) -> bool {
        self.rounds.is_some()
    }

    /// At a fair queue under CoDel, a waiter of `flow` joined.
    pub(crate) fn flow_joined(&mut self, flow: Option<u64>) {
        if let Some(flow) = flow {
            let rounds = self.rounds.get_or_insert_with(Box::default);
            rounds
                .codel
                .entry(entry_flow(flow).get())
                .or_default()
                .joined();
        }
    }

    /// At a fair queue under CoDel, at `now`: takes the head of the queue
    /// (its flow's CoDel counts its sojourn), and, if `drop_stale`, every
    /// waiter that has waited the target of a flow whose own sojourns
    /// stand above it, at the served one's priority or below. Returns the
    /// one served and the dropped ones.
    pub(crate) fn pop_fair_codel(
        &mut self,
        settings: &CodelSettings,
        now: Nanos,
        drop_stale: bool,
    ) -> Served {
        let Some(priority) = self.top() else {
            return (None, Vec::new());
        };
        let entry = self.levels[priority].pop_front().expect("a waiter");
        let flow = entry.flow().unwrap_or_default();
        let served = self.took(priority, entry, true);
        let Some(rounds) = self.rounds.as_deref_mut() else {
            return (Some(served), Vec::new());
        };
        let state = rounds.codel.entry(flow).or_default();
        state.served(settings, now, now.saturating_sub(served.2));
        let overloaded: Vec<u64> = match drop_stale {
            true => rounds
                .codel
                .iter_mut()
                .filter_map(|(flow, state)| {
                    state.look(settings, now);
                    state.overloaded().then_some(*flow)
                })
                .collect(),
            false => Vec::new(),
        };
        let stale_before = now.saturating_sub(settings.target).saturating_add(1);
        let dropped = match overloaded.is_empty() {
            true => Vec::new(),
            false => self.remove_where(priority, |e| {
                e.since < stale_before && overloaded.contains(&e.flow().unwrap_or_default())
            }),
        };
        // A flow left without waiters counts an empty queue; one empty and
        // calm is as new, and its state goes.
        let rounds = self.rounds.as_deref_mut().expect("a fair queue");
        let waiting = rounds.waiting_from(0);
        rounds.codel.retain(|flow, state| {
            if waiting.contains_key(flow) {
                return true;
            }
            state.emptied(now);
            state.look(settings, now);
            state.overloaded()
        });
        (Some(served), dropped)
    }

    /// Takes the newest of the most important (adaptive LIFO): priorities
    /// keep their order, and within one the last to come is served first.
    pub(crate) fn pop_newest(&mut self) -> Option<Taken> {
        let priority = self.top()?;
        let at = newest(&self.levels[priority]);
        let entry = self.levels[priority].remove(at).expect("a waiter");
        Some(self.took(priority, entry, true))
    }

    /// While CoDel finds the queue overloaded, at a hand-off: takes the
    /// waiter served next and every other waiter that joined before
    /// `stale_before` (they have waited the target). The one served is of
    /// the most important priority that has waiters: its newest if
    /// `newest_first`, else its first in order that is not stale, else
    /// (all of that priority stale) its last. So a waiter is never dropped
    /// at a hand-off that serves a less important one. Returns the one
    /// served and the dropped ones.
    pub(crate) fn pop_dropping_stale(&mut self, newest_first: bool, stale_before: Nanos) -> Served {
        let Some(priority) = self.top() else {
            return (None, Vec::new());
        };
        let level = &self.levels[priority];
        let fresh = level.iter().position(|entry| entry.since >= stale_before);
        let at = match (newest_first, fresh) {
            (false, Some(at)) => at,
            _ => newest(level),
        };
        let served = self.levels[priority].remove(at).expect("a waiter");
        let served = self.took(priority, served, true);
        let dropped = self.remove_older_than(stale_before);
        (Some(served), dropped)
    }

    /// Takes out every waiter that joined before `joined_before`; returns
    /// their numbers and wakers.
    pub(crate) fn remove_older_than(
        &mut self,
        joined_before: Nanos,
    ) -> Vec<(WaiterId, Option<Waker>)> {
        self.remove_where(0, |entry| entry.since < joined_before)
    }

    /// Takes out every waiter of priority `from` or less important that
    /// `gone` picks, keeping the others' order; returns their numbers and
    /// wakers.
    fn remove_where(
        &mut self,
        from: usize,
        gone: impl Fn(&Entry) -> bool,
    ) -> Vec<(WaiterId, Option<Waker>)> {
        let mut removed = Vec::new();
        for priority in from..self.levels.len() {
            let level = &mut self.levels[priority];
            if !level.iter().any(&gone) {
                continue;
            }
            let (taken, kept): (VecDeque<Entry>, VecDeque<Entry>) =
                std::mem::take(level).into_iter().partition(&gone);
            self.levels[priority] = kept;
            for entry in taken {
                let (id, waker, _) = self.took(priority, entry, false);
                removed.push((id, waker));
            }
        }
        removed
    }

    /// Takes waiter `id` of `priority` out of the queue, if it is there;
    /// returns its waker.
    pub(crate) fn remove(&mut self, priority: usize, id: WaiterId) -> Option<Option<Waker>> {
        let level = self.levels.get_mut(priority)?;
        let at = level.iter().position(|e| e.id == id)?;
        let entry = level.remove(at)?;
        Some(self.took(priority, entry, false).1)
    }

    /// Remembers how to wake waiter `id` of `priority`.
    pub(crate) fn set_waker(&mut self, priority: usize, id: WaiterId, waker: &Waker) {
        if let Some(entry) = self
            .levels
            .get_mut(priority)
            .and_then(|level| level.iter_mut().find(|e| e.id == id))
        {
            match &mut entry.waker {
                Some(known) if known.will_wake(waker) => {}
                slot => *slot = Some(waker.clone()),
            }
        }
    }

    /// Who makes way for a newcomer of `priority` and `flow` when the
    /// queue is full. At a fair queue, first the flow with the most
    /// waiters at the newcomer's priority or below, if it has at least two
    /// more than the newcomer's flow: its newest waiter of its least
    /// important level. Otherwise the overflow `policy`.
    pub(crate) fn on_full(&self, policy: Overflow, priority: usize, flow: Option<u64>) -> OnFull {
        if let Some(victim) = self.longest_flow_makes_way(priority, flow) {
            return victim;
        }
        match policy {
            Overflow::RejectNew => OnFull::RejectNewcomer,
            Overflow::DropOldest => self
                .levels
                .iter()
                .enumerate()
                .filter_map(|(p, level)| level.iter().map(|e| (e.id, p)).min())
                .min()
                .map_or(OnFull::RejectNewcomer, |(id, p)| OnFull::Drop(p, id)),
            Overflow::DropLowestPriority => self
                .levels
                .iter()
                .enumerate()
                .rev()
                .find_map(|(p, level)| level.iter().map(|e| e.id).max().map(|id| (p, id)))
                .filter(|(p, _)| priority < *p)
                .map_or(OnFull::RejectNewcomer, |(p, id)| OnFull::Drop(p, id)),
        }
    }

    /// At a fair queue, the waiter that makes way for a newcomer of `flow`
    /// at `priority`, if a flow holds at least two more places there or
    /// below than the newcomer's holds in all (so it still holds more
    /// after): the newest waiter of the flows with the most, at its least
    /// important level. (Chosen by arrival, not by the flows' hashes, so
    /// the same calls give the same choice in every process.)
    fn longest_flow_makes_way(&self, priority: usize, flow: Option<u64>) -> Option<OnFull> {
        let (rounds, flow) = (self.rounds.as_deref()?, entry_flow(flow?).get());
        let mut counts = rounds.waiting_from(priority);
        counts.remove(&flow);
        let most = counts.values().copied().max()?;
        if most < rounds.waiting(flow) + 2 {
            return None;
        }
        self.levels
            .iter()
            .enumerate()
            .skip(priority)
            .rev()
            .find_map(|(p, level)| {
                let longest = level
                    .iter()
                    .filter(|e| e.flow().is_some_and(|f| counts.get(&f) == Some(&most)));
                longest.map(|e| e.id).max().map(|id| OnFull::Drop(p, id))
            })
    }

    /// The most important level with a waiter (so never an empty one).
    fn top(&self) -> Option<usize> {
        self.levels.iter().position(|level| !level.is_empty())
    }

    /// `entry`, taken out of `priority`'s level, leaves the queue: served
    /// (its flow's round is done) or not.
    fn took(&mut self, priority: usize, entry: Entry, served: bool) -> Taken {
        self.len -= 1;
        if let (Some(flow), Some(rounds)) = (entry.flow(), self.rounds.as_deref_mut()) {
            rounds.left(priority, flow, entry.round, served);
        }
        (entry.id, entry.waker, entry.since)
    }
}

/// Where the newest waiter of a level with waiters is: its last, unless a
/// fair order put it earlier.
fn newest(level: &VecDeque<Entry>) -> usize {
    let newest = level.iter().enumerate().max_by_key(|(_, entry)| entry.id);
    newest.expect("a level with waiters").0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(arrivals: &[usize]) -> (WaitQueue, Vec<WaiterId>) {
        let mut queue = WaitQueue::default();
        let ids = (0..)
            .zip(arrivals)
            .map(|(at, p)| queue.push(*p, 4, at, None))
            .collect();
        (queue, ids)
    }

    #[test]
    fn the_head_is_the_oldest_of_the_most_important() {
        let (mut q, ids) = queue(&[3, 1, 3, 1, 0]);
        let order: Vec<WaiterId> = std::iter::from_fn(|| q.pop_head().map(|(id, ..)| id)).collect();
        assert_eq!(order, [ids[4], ids[1], ids[3], ids[0], ids[2]]);
        assert_eq!(q.len(), 0);
    }

    #[test]
    fn reject_new_never_displaces_anyone() {
        let (q, _) = queue(&[3, 3]);
        assert_eq!(
            q.on_full(Overflow::RejectNew, 0, None),
            OnFull::RejectNewcomer
        );
    }

    #[test]
    fn drop_oldest_picks_the_longest_waiting_whatever_its_priority() {
        let (q, ids) = queue(&[2, 0, 3]);
        assert_eq!(
            q.on_full(Overflow::DropOldest, 3, None),
            OnFull::Drop(2, ids[0])
        );
    }

    #[test]
    fn drop_lowest_priority_picks_its_newest_and_only_for_a_strictly_better_newcomer() {
        let (q, ids) = queue(&[3, 1, 3]);
        assert_eq!(
            q.on_full(Overflow::DropLowestPriority, 2, None),
            OnFull::Drop(3, ids[2])
        );
        assert_eq!(
            q.on_full(Overflow::DropLowestPriority, 3, None),
            OnFull::RejectNewcomer
        );
        let (q, _) = queue(&[0, 0]);
        assert_eq!(
            q.on_full(Overflow::DropLowestPriority, 0, None),
            OnFull::RejectNewcomer
        );
        // A newcomer less important than every waiter displaces none.
        let (q, _) = queue(&[0, 1]);
        assert_eq!(
            q.on_full(Overflow::DropLowestPriority, 3, None),
            OnFull::RejectNewcomer
        );
    }

    #[test]
    fn removed_waiters_are_gone() {
        let (mut q, ids) = queue(&[1, 1, 1]);
        assert!(q.remove(1, ids[1]).is_some());
        assert!(q.remove(1, ids[1]).is_none());
        assert_eq!(q.len(), 2);
        assert_eq!(q.pop_head().map(|(id, ..)| id), Some(ids[0]));
        assert_eq!(q.pop_head().map(|(id, ..)| id), Some(ids[2]));
    }

    #[test]
    fn newest_first_keeps_the_priorities_order() {
        let (mut q, ids) = queue(&[3, 1, 3, 1, 0]);
        let order: Vec<WaiterId> =
            std::iter::from_fn(|| q.pop_newest().map(|(id, ..)| id)).collect();
        assert_eq!(order, [ids[4], ids[3], ids[1], ids[2], ids[0]]);
    }

    #[test]
    fn the_stale_waiters_of_every_priority_go_and_the_others_stay() {
        // Joined at 0, 1, 2, 3, 4.
        let (mut q, ids) = queue(&[3, 1, 3, 1, 0]);
        let removed: Vec<WaiterId> = q
            .remove_older_than(3)
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        assert_eq!(removed, [ids[1], ids[0], ids[2]]);
        assert_eq!(q.len(), 2);
        let order: Vec<WaiterId> = std::iter::from_fn(|| q.pop_head().map(|(id, ..)| id)).collect();
        assert_eq!(order, [ids[4], ids[3]]);
    }

    #[test]
    fn an_overloaded_hand_off_never_drops_a_waiter_more_important_than_the_one_served() {
        // Joined at 0..5; stale: joined before 4.
        let (mut q, ids) = queue(&[1, 3, 1, 3, 3]);
        let (served, dropped) = q.pop_dropping_stale(true, 4);
        // Every priority-1 waiter is stale: the newest of them is served,
        // not a fresh priority-3 one, and only the rest are dropped.
        assert_eq!(served.map(|(id, ..)| id), Some(ids[2]));
        let dropped: Vec<WaiterId> = dropped.into_iter().map(|(id, _)| id).collect();
        assert_eq!(dropped, [ids[0], ids[1], ids[3]]);
        assert_eq!(q.len(), 1);
        // First come first served: the oldest that is not stale.
        let (mut q, ids) = queue(&[2, 2, 2]);
        let (served, dropped) = q.pop_dropping_stale(false, 1);
        assert_eq!(served.map(|(id, ..)| id), Some(ids[1]));
        assert_eq!(dropped.len(), 1);
        assert!(WaitQueue::default().pop_dropping_stale(true, 9).0.is_none());
    }

    proptest::proptest! {
        #[test]
        fn overloaded_hand_offs_keep_the_priorities_order(
            arrivals in proptest::collection::vec(0..4usize, 1..40),
            stale_before in 0..45u64,
            newest_first: bool,
        ) {
            let (mut q, ids) = queue(&arrivals);
            let level_of = |id: WaiterId| arrivals[ids.iter().position(|&i| i == id).unwrap()];
            let top = *arrivals.iter().min().unwrap();
            let (served, dropped) = q.pop_dropping_stale(newest_first, stale_before);
            let (served, _, since) = served.unwrap();
            proptest::prop_assert_eq!(level_of(served), top, "the most important level is served");
            for (id, _) in &dropped {
                proptest::prop_assert!(level_of(*id) >= top);
                proptest::prop_assert!(*id < stale_before, "only stale waiters are dropped");
            }
            // Every stale waiter but the one served is gone; the rest stay.
            let stale = ids.iter().filter(|&&id| id < stale_before && id != served).count();
            proptest::prop_assert_eq!(dropped.len(), stale);
            proptest::prop_assert_eq!(q.len(), arrivals.len() - 1 - stale);
            // A stale waiter is served only when its whole level is stale.
            if since < stale_before {
                let fresh_at_top = arrivals.iter().enumerate()
                    .any(|(at, &p)| p == top && (at as u64) >= stale_before);
                proptest::prop_assert!(!fresh_at_top);
            }
        }
    }

    proptest::proptest! {
        /// Flows that all wait, however many each has queued and in
        /// whatever order they came, are served in turn: at every point,
        /// two flows' waiters served differ by at most the credit a quiet
        /// flow starts with, plus two.
        #[test]
        fn flows_that_all_wait_are_served_in_turn(
            queued in proptest::collection::vec(1..6usize, 2..8),
            order in proptest::collection::vec(0..8usize, 0..40),
        ) {
            let mut q = WaitQueue::default();
            let flows = queued.len();
            let mut flow_of = std::collections::HashMap::new();
            // Some waiters in a random order, then each flow's own.
            for flow in order.iter().map(|f| f % flows).chain((0..flows).flat_map(|f| std::iter::repeat_n(f, queued[f]))) {
                flow_of.insert(q.push(0, 1, 0, Some(flow as u64 + 1)), flow);
            }
            let mut served = vec![0u64; flows];
            for _ in 0..200 {
                let (id, ..) = q.pop_head().unwrap();
                let flow = flow_of[&id];
                served[flow] += 1;
                // The flow waits on: it queues again.
                flow_of.insert(q.push(0, 1, 0, Some(flow as u64 + 1)), flow);
                let (least, most) = (served.iter().min().unwrap(), served.iter().max().unwrap());
                proptest::prop_assert!(most - least <= rounds::CREDIT + 2, "served {served:?}");
            }
        }
    }

    #[test]
    fn a_later_flow_is_served_before_the_rest_of_a_flow_that_waits() {
        let mut q = WaitQueue::default();
        let heavy: Vec<WaiterId> = (0..12).map(|_| q.push(0, 4, 0, Some(1))).collect();
        assert_eq!(q.pop_head().map(|(id, ..)| id), Some(heavy[0]));
        let light = q.push(0, 4, 0, Some(2));
        assert_eq!(q.pop_head().map(|(id, ..)| id), Some(light));
        let order: Vec<WaiterId> = std::iter::from_fn(|| q.pop_head().map(|(id, ..)| id)).collect();
        assert_eq!(order, heavy[1..]);
    }

    #[test]
    fn a_full_fair_queue_makes_room_from_the_flow_with_the_most_waiters() {
        let mut q = WaitQueue::default();
        let heavy: Vec<WaiterId> = (0..3).map(|_| q.push(3, 4, 0, Some(1))).collect();
        q.push(3, 4, 0, Some(2));
        // A newcomer of a third flow: the heavy flow's newest makes way.
        assert_eq!(
            q.on_full(Overflow::RejectNew, 3, Some(3)),
            OnFull::Drop(3, heavy[2])
        );
        // Of the second flow (one waiter): still two more than it.
        assert_eq!(
            q.on_full(Overflow::RejectNew, 3, Some(2)),
            OnFull::Drop(3, heavy[2])
        );
        // Of the heavy flow itself, or a plain newcomer: the policy.
        assert_eq!(
            q.on_full(Overflow::RejectNew, 3, Some(1)),
            OnFull::RejectNewcomer
        );
        assert_eq!(
            q.on_full(Overflow::RejectNew, 3, None),
            OnFull::RejectNewcomer
        );
        // Waiters more important than the newcomer never make way for it.
        let mut q = WaitQueue::default();
        for _ in 0..3 {
            q.push(0, 4, 0, Some(1));
        }
        assert_eq!(
            q.on_full(Overflow::RejectNew, 3, Some(2)),
            OnFull::RejectNewcomer
        );
    }

    #[test]
    fn an_unused_queue_allocates_nothing() {
        assert_eq!(WaitQueue::default().levels.capacity(), 0);
    }
}
