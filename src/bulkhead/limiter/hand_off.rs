//! The queue's side of the bulkhead, under its lock: who gets a slot
//! given back (the head of the queue, or under CoDel the newest of the
//! most important, or at a fair queue the next flow's), who CoDel drops
//! meanwhile, and what CoDel is told of the queue's comings and goings.

use std::sync::atomic::Ordering;
use std::task::Waker;

use super::{Bulkhead, Decision, Inner, Load, QUEUED, active, queued};
use crate::bulkhead::queue::WaiterId;
use crate::clock::Nanos;
use crate::error::RejectReason;

impl Bulkhead {
    /// Under the lock: the slot in hand goes to the head of the queue
    /// (returns its waker, with those of the waiters CoDel dropped), or
    /// becomes free if nobody waits, or if the limit fell below the calls
    /// in flight (the slot is retired).
    pub(super) fn hand_off_or_free(&self, inner: &mut Inner) -> Vec<Waker> {
        let limit = match self.learned() {
            Some(learned) => learned.whole(),
            None => inner.fixed_limit,
        };
        if active(self.state.load(Ordering::Acquire)) > limit {
            self.state.fetch_sub(1, Ordering::AcqRel);
            return Vec::new();
        }
        debug_assert_eq!(
            inner.queue.len(),
            queued(self.state.load(Ordering::Acquire)) as usize,
            "the lock's holder keeps `queued` equal to the queue's length"
        );
        let (served, mut wakers) = self.serve_next(inner);
        match served {
            Some((id, waker)) => {
                inner.decided.push((id, Decision::Granted));
                self.state.fetch_sub(QUEUED, Ordering::AcqRel);
                wakers.extend(waker);
            }
            None => {
                self.state.fetch_sub(1, Ordering::AcqRel);
            }
        }
        wakers
    }

    /// Under the lock, at a hand-off: takes the waiter served next, and,
    /// while CoDel finds the queue overloaded, drops every other waiter
    /// that has waited the target ([`WaitQueue::pop_dropping_stale`](crate::bulkhead::queue::WaitQueue::pop_dropping_stale):
    /// never one more important than the one served); returns the dropped
    /// ones' wakers with it.
    pub(super) fn serve_next(
        &self,
        inner: &mut Inner,
    ) -> (Option<(WaiterId, Option<Waker>)>, Vec<Waker>) {
        let Some(codel) = self.codel() else {
            return (self.next_waiter(inner), Vec::new());
        };
        let now = codel.now();
        if inner.queue.is_fair() {
            // CoDel per flow: a flow's standing queue drops its own waiters.
            let (served, stale) = inner.queue.pop_fair_codel(&codel.settings, now, true);
            let wakers = self.dropped_as_overloaded(inner, stale);
            return (served.map(|(id, waker, _)| (id, waker)), wakers);
        }
        inner.codel.look(&codel.settings, now);
        if !inner.codel.overloaded() {
            return (self.next_waiter(inner), Vec::new());
        }
        let stale_before = now.saturating_sub(codel.settings.target).saturating_add(1);
        let (served, stale) = inner
            .queue
            .pop_dropping_stale(codel.settings.lifo, stale_before);
        let wakers = self.dropped_as_overloaded(inner, stale);
        let served = served.map(|(id, waker, since)| {
            // Overloaded: CoDel only waits for the queue to drain.
            inner
                .codel
                .served(&codel.settings, now, now.saturating_sub(since));
            (id, waker)
        });
        if inner.queue.len() == 0 {
            inner.codel.emptied(now);
        }
        (served, wakers)
    }

    /// Under the lock: the waiters CoDel dropped (taken out of the queue)
    /// are told so, and no longer counted as queued; returns their wakers.
    fn dropped_as_overloaded(
        &self,
        inner: &mut Inner,
        stale: Vec<(WaiterId, Option<Waker>)>,
    ) -> Vec<Waker> {
        let mut wakers = Vec::with_capacity(stale.len());
        if stale.is_empty() {
            return wakers;
        }
        let gone = QUEUED * stale.len() as u64;
        let load = Load::of(self.state.fetch_sub(gone, Ordering::AcqRel) - gone);
        for (id, waker) in stale {
            let dropped = Decision::Dropped(load, RejectReason::QueueOverloaded);
            inner.decided.push((id, dropped));
            wakers.extend(waker);
        }
        wakers
    }

    /// Under the lock: takes the waiter served next, the head of the queue
    /// or, while CoDel finds it overloaded with adaptive LIFO, the newest
    /// of the most important; tells CoDel how long it waited (at a fair
    /// queue, its flow's CoDel).
    pub(super) fn next_waiter(&self, inner: &mut Inner) -> Option<(WaiterId, Option<Waker>)> {
        let Some(codel) = self.codel() else {
            return inner.queue.pop_head().map(|(id, waker, _)| (id, waker));
        };
        let now = codel.now();
        if inner.queue.is_fair() {
            let (served, _) = inner.queue.pop_fair_codel(&codel.settings, now, false);
            return served.map(|(id, waker, _)| (id, waker));
        }
        inner.codel.look(&codel.settings, now);
        let newest_first = codel.settings.lifo && inner.codel.overloaded();
        let popped = match newest_first {
            true => inner.queue.pop_newest(),
            false => inner.queue.pop_head(),
        };
        let Some((id, waker, since)) = popped else {
            inner.codel.emptied(now);
            return None;
        };
        inner
            .codel
            .served(&codel.settings, now, now.saturating_sub(since));
        if inner.queue.len() == 0 {
            inner.codel.emptied(now);
        }
        Some((id, waker))
    }

    /// Under the lock, a call of `flow` joins the queue: when, for CoDel
    /// (0 without).
    pub(super) fn joined_at(&self, inner: &mut Inner, flow: Option<u64>) -> Nanos {
        let Some(codel) = self.codel() else {
            return 0;
        };
        let now = codel.now();
        inner.codel.look(&codel.settings, now);
        inner.codel.joined();
        inner.queue.flow_joined(flow);
        now
    }

    /// Under the lock, a waiter left the queue: CoDel counts an empty one.
    pub(super) fn left(&self, inner: &mut Inner) {
        match self.codel() {
            Some(codel) if inner.queue.len() == 0 => inner.codel.emptied(codel.now()),
            _ => {}
        }
    }
}
