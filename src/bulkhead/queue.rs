//! The bulkhead's wait queue as a plain data structure: who is next, who is
//! oldest, who goes when it overflows, who has waited too long. No atomics,
//! no clock: the limiter calls it under its lock, with the time.

use std::collections::VecDeque;
use std::task::Waker;

use super::config::Overflow;
use crate::clock::Nanos;

/// A queued call, known by its number: numbers rise with arrival, so the
/// smallest is the oldest.
pub(crate) type WaiterId = u64;

#[derive(Debug)]
struct Entry {
    id: WaiterId,
    waker: Option<Waker>,
    /// When it joined the queue (0 unless CoDel reads it).
    since: Nanos,
}

/// Waiters by priority (index 0 first), first come first served within one.
#[derive(Debug, Default)]
pub(crate) struct WaitQueue {
    /// Allocated on the first wait: a key that never queues pays nothing.
    levels: Vec<VecDeque<Entry>>,
    len: usize,
    next_id: WaiterId,
}

/// A waiter served at a hand-off (its number, waker and when it joined),
/// and those dropped at it.
pub(crate) type Served = (
    Option<(WaiterId, Option<Waker>, Nanos)>,
    Vec<(WaiterId, Option<Waker>)>,
);

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

    /// Queues a call of `priority` (`< levels`) that joins at `since`;
    /// returns its number.
    pub(crate) fn push(&mut self, priority: usize, levels: usize, since: Nanos) -> WaiterId {
        if self.levels.is_empty() {
            self.levels.resize_with(levels, VecDeque::new);
        }
        let id = self.next_id;
        self.next_id += 1;
        self.levels[priority].push_back(Entry {
            id,
            waker: None,
            since,
        });
        self.len += 1;
        id
    }

    /// Takes the head of the queue: the oldest of the most important.
    /// Returns its number, its waker and when it joined.
    pub(crate) fn pop_head(&mut self) -> Option<(WaiterId, Option<Waker>, Nanos)> {
        let entry = self.levels.iter_mut().find_map(VecDeque::pop_front)?;
        self.len -= 1;
        Some((entry.id, entry.waker, entry.since))
    }

    /// Takes the newest of the most important (adaptive LIFO): priorities
    /// keep their order, and within one the last to come is served first.
    pub(crate) fn pop_newest(&mut self) -> Option<(WaiterId, Option<Waker>, Nanos)> {
        let entry = self.levels.iter_mut().find_map(VecDeque::pop_back)?;
        self.len -= 1;
        Some((entry.id, entry.waker, entry.since))
    }

    /// While CoDel finds the queue overloaded, at a hand-off: takes the
    /// waiter served next and every other waiter that joined before
    /// `stale_before` (they have waited the target). The one served is of
    /// the most important priority that has waiters: its newest if
    /// `newest_first`, else its oldest that is not stale, else (all of
    /// that priority stale) its newest. So a waiter is never dropped at a
    /// hand-off that serves a less important one. Returns the one served
    /// (number, waker, when it joined) and the dropped ones.
    pub(crate) fn pop_dropping_stale(&mut self, newest_first: bool, stale_before: Nanos) -> Served {
        let Some(level) = self.levels.iter_mut().find(|level| !level.is_empty()) else {
            return (None, Vec::new());
        };
        // Each level is in arrival order: its stale waiters lead it.
        let stale = level
            .iter()
            .take_while(|entry| entry.since < stale_before)
            .count();
        let at = match newest_first || stale == level.len() {
            true => level.len() - 1,
            false => stale,
        };
        let served = level.remove(at).expect("a waiter of this level");
        self.len -= 1;
        let dropped = self.remove_older_than(stale_before);
        (Some((served.id, served.waker, served.since)), dropped)
    }

    /// Takes out every waiter that joined before `joined_before`; returns
    /// their numbers and wakers.
    pub(crate) fn remove_older_than(
        &mut self,
        joined_before: Nanos,
    ) -> Vec<(WaiterId, Option<Waker>)> {
        let mut removed = Vec::new();
        for level in &mut self.levels {
            // Each level is in arrival order: its stale waiters lead it.
            while level
                .front()
                .is_some_and(|entry| entry.since < joined_before)
            {
                let entry = level.pop_front().expect("looked at above");
                removed.push((entry.id, entry.waker));
            }
        }
        self.len -= removed.len();
        removed
    }

    /// Takes waiter `id` of `priority` out of the queue, if it is there;
    /// returns its waker.
    pub(crate) fn remove(&mut self, priority: usize, id: WaiterId) -> Option<Option<Waker>> {
        let level = self.levels.get_mut(priority)?;
        let at = level.iter().position(|e| e.id == id)?;
        let entry = level.remove(at)?;
        self.len -= 1;
        Some(entry.waker)
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

    /// Who makes way for a newcomer of `priority` when the queue is full.
    pub(crate) fn on_full(&self, policy: Overflow, priority: usize) -> OnFull {
        match policy {
            Overflow::RejectNew => OnFull::RejectNewcomer,
            Overflow::DropOldest => self
                .levels
                .iter()
                .enumerate()
                .filter_map(|(p, level)| level.front().map(|e| (e.id, p)))
                .min()
                .map_or(OnFull::RejectNewcomer, |(id, p)| OnFull::Drop(p, id)),
            Overflow::DropLowestPriority => self
                .levels
                .iter()
                .enumerate()
                .rev()
                .find_map(|(p, level)| level.back().map(|e| (p, e.id)))
                .filter(|(p, _)| priority < *p)
                .map_or(OnFull::RejectNewcomer, |(p, id)| OnFull::Drop(p, id)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(arrivals: &[usize]) -> (WaitQueue, Vec<WaiterId>) {
        let mut queue = WaitQueue::default();
        let ids = (0..)
            .zip(arrivals)
            .map(|(at, p)| queue.push(*p, 4, at))
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
        assert_eq!(q.on_full(Overflow::RejectNew, 0), OnFull::RejectNewcomer);
    }

    #[test]
    fn drop_oldest_picks_the_longest_waiting_whatever_its_priority() {
        let (q, ids) = queue(&[2, 0, 3]);
        assert_eq!(q.on_full(Overflow::DropOldest, 3), OnFull::Drop(2, ids[0]));
    }

    #[test]
    fn drop_lowest_priority_picks_its_newest_and_only_for_a_strictly_better_newcomer() {
        let (q, ids) = queue(&[3, 1, 3]);
        assert_eq!(
            q.on_full(Overflow::DropLowestPriority, 2),
            OnFull::Drop(3, ids[2])
        );
        assert_eq!(
            q.on_full(Overflow::DropLowestPriority, 3),
            OnFull::RejectNewcomer
        );
        let (q, _) = queue(&[0, 0]);
        assert_eq!(
            q.on_full(Overflow::DropLowestPriority, 0),
            OnFull::RejectNewcomer
        );
        // A newcomer less important than every waiter displaces none.
        let (q, _) = queue(&[0, 1]);
        assert_eq!(
            q.on_full(Overflow::DropLowestPriority, 3),
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

    #[test]
    fn an_unused_queue_allocates_nothing() {
        assert_eq!(WaitQueue::default().levels.capacity(), 0);
    }
}
