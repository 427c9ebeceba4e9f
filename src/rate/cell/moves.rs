//! How changes of the rate move the calls already waiting for their
//! tokens (the maths is [`falls`]'s): a fall moves them later, a rise moves
//! back those a fall moved, and wakes them to find it.

use std::sync::atomic::Ordering;
use std::sync::{Mutex, MutexGuard};

use super::super::falls;
use super::super::gcra;
use super::{Queue, QueueFalls, RateCell};
use crate::clock::Nanos;

/// At most this many falls that moved calls are kept for them to find; a
/// fall beyond them, with its calls still waiting, leaves them where they
/// are (as falls did before they moved waiters).
const RECENT_FALLS: usize = 64;

/// # Calls waiting for their tokens, moved by changes of the rate
impl RateCell {
    /// Where a call due at `start`, which had seen `seen` falls move the
    /// queue, is due now: later by each fall since that moved it
    /// ([`falls::Fall::moved`]). Updates `seen`.
    pub(crate) fn moved_start(&self, start: Nanos, seen: &mut u64) -> Nanos {
        let Some(queue) = self.queue.get() else {
            return start;
        };
        let current = queue.moves.load(Ordering::Acquire);
        if current == *seen && current % 2 == 0 {
            return start;
        }
        let falls = lock(&queue.falls);
        let since = *seen;
        *seen = queue.moves.load(Ordering::Acquire);
        falls
            .recent
            .iter()
            .filter(|(number, _)| *number > since)
            .fold(start, |start, (_, fall)| fall.moved(start))
    }

    /// What wakes a call sleeping until its token is due when a rise
    /// moves it earlier: register before reading
    /// [`moved_start`](Self::moved_start), so that no rise is missed
    /// between the two.
    pub(crate) fn moved_back(&self) -> &tokio::sync::Notify {
        let queue = self.queue.get_or_init(Box::default);
        queue.moved_back.get_or_init(Box::default)
    }

    /// The interval grew at `now`: the debt is rescaled, and calls waiting
    /// for their tokens move with it ([`falls`]).
    pub(super) fn fall(&self, now: Nanos, old_interval: Nanos, new_interval: Nanos, burst: u32) {
        let tail = old_interval.saturating_mul(u64::from(burst));
        if self.tat.load(Ordering::Acquire).saturating_sub(tail) <= now {
            // Nobody waits: the common case, without a lock.
            return self.rescale_debt(now, old_interval, new_interval, burst);
        }
        let queue = self.queue.get_or_init(Box::default);
        self.move_waiters(
            queue,
            now,
            (old_interval, new_interval),
            burst,
            |last, paced| {
                let (fall, paced) = falls::Fall::new(now, last, old_interval, new_interval, paced);
                fall.moves_anyone().then_some((fall, paced))
            },
        );
    }

    /// The interval shrank at `now`: the debt is rescaled, and calls a
    /// fall moved that still wait move back to the new pace, woken to
    /// find it ([`falls::Fall::rise`]).
    pub(super) fn rise(&self, now: Nanos, old_interval: Nanos, new_interval: Nanos, burst: u32) {
        let tail = old_interval.saturating_mul(u64::from(burst));
        let Some(queue) = self.queue.get() else {
            return self.rescale_debt(now, old_interval, new_interval, burst);
        };
        if self.tat.load(Ordering::Acquire).saturating_sub(tail) <= now
            || queue.moves.load(Ordering::Acquire) == 0
        {
            // Nobody waits, or no fall ever moved anyone: no lock.
            return self.rescale_debt(now, old_interval, new_interval, burst);
        }
        let moved = self.move_waiters(
            queue,
            now,
            (old_interval, new_interval),
            burst,
            |last, paced| falls::Fall::rise(now, last, old_interval, new_interval, paced),
        );
        if let Some(sleeping) = queue.moved_back.get().filter(|_| moved) {
            sleeping.notify_waiters();
        }
    }

    /// Under the queue's lock, the interval changes at `now` (`intervals`:
    /// from, to) with calls waiting: `plan` says how the waiters up to the
    /// last one move (given the pace the last fall left), if they do; the
    /// debt after the last waiter is rescaled. Returns whether they moved.
    fn move_waiters(
        &self,
        queue: &Queue,
        now: Nanos,
        (old_interval, new_interval): (Nanos, Nanos),
        burst: u32,
        plan: impl Fn(Nanos, Option<falls::Paced>) -> Option<(falls::Fall, falls::Paced)>,
    ) -> bool {
        let tail = old_interval.saturating_mul(u64::from(burst));
        let mut falls = lock(&queue.falls);
        // Moves whose moved calls have all started are of no more use.
        falls.recent.retain(|(_, fall)| fall.moved_until() > now);
        // Odd while this move is applied (see `Queue::moves`).
        let before = queue.moves.fetch_add(1, Ordering::AcqRel);
        let mut tat = self.tat.load(Ordering::Acquire);
        loop {
            let last_waiter = tat.saturating_sub(tail);
            let moved = (last_waiter > now && falls.recent.len() < RECENT_FALLS)
                .then(|| plan(last_waiter, falls.paced))
                .flatten();
            // Calls a move leaves keep their places (a rise moves only
            // those a fall moved), and the debt after the last is rescaled.
            let new_tat = match moved {
                Some((fall, _)) => fall.tat(tat, last_waiter, old_interval, new_interval),
                None => gcra::rescale(tat, now, old_interval, new_interval, burst),
            };
            match self
                .tat
                .compare_exchange_weak(tat, new_tat, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    let Some((fall, paced)) = moved else {
                        queue.moves.store(before, Ordering::Release);
                        return false;
                    };
                    let after = before + 2;
                    falls.paced = Some(paced);
                    falls.recent.push((after, fall));
                    queue.moves.store(after, Ordering::Release);
                    return true;
                }
                Err(actual) => tat = actual,
            }
        }
    }
}

/// The queue's lock. A panic elsewhere while it was held leaves nothing half
/// done that a fall or a waiter could trip on (each change is one push), so
/// a poisoned lock is used as it is.
fn lock(falls: &Mutex<QueueFalls>) -> MutexGuard<'_, QueueFalls> {
    falls
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
