//! Choosing which keys go: the idle sweep as new keys arrive, room at the
//! cap, and the owner's full idle sweep. Each looks at keys taken from the
//! front of the eviction queue, never at the whole map.

use std::hash::Hash;
use std::sync::atomic::Ordering;

use super::{HOLDERS, NoRoom, Queued, Quiet, Registry};
use crate::clock::Nanos;

/// The most idle keys one new key evicts in passing.
pub(super) const IDLE_SWEEP_MAX: usize = 64;

/// How many keys that are not idle a new key looks at, and sends to the
/// back of the queue, before it stops sweeping: the sweep's hand moves on
/// at this pace even when the front of the queue is busy.
const IDLE_LOOKS: usize = 2;

/// Keys looked at together when making room: the new key evicts the best
/// of the evictable keys among them (an approximate LRU, as Redis samples
/// keys for `maxmemory`).
const SAMPLE: usize = 5;

/// The most keys one new key at the cap looks at before it is refused.
pub(super) const MAX_PROBES: usize = 256;

/// Keys looked at in one hold of the queue's lock by the owner's sweep.
const SWEEP_CHUNK: usize = 256;

/// When no key seen knows when it will be quiet, a new key retries after
/// this.
const UNKNOWN_RETRY: Nanos = 10_000_000;

/// A new key refused before refusals have looked at every live key retries
/// after at most this: a key not yet looked at may be evictable.
const UNSEEN_RETRY: Nanos = 1_000_000;

/// The order in which evictable keys go: lowest first. Those whose rate
/// never moved before those that learned one, each group least recently
/// quiet first; a key held too long by a pause or shedding ranks lowest.
type Rank = (bool, Nanos);

/// What a key taken from the queue is to eviction at one moment.
enum Probe {
    /// Not in the map: the queue holds the last reference to its state
    /// (the queue's invariant says this does not happen; such an entry is
    /// dropped).
    Gone,
    /// Quiet for the idle TTL: it goes whether or not room is needed.
    Idle,
    /// It may go to make room.
    Evictable(Rank),
    /// It may not go before this time (`None`: in use with no known end).
    Held(Option<Nanos>),
}

impl<K, S> Registry<K, S>
where
    K: Hash + Eq,
{
    /// Keys quiet since before this time are idle (`None`: no idle TTL).
    fn idle_before(&self, now: Nanos) -> Option<Nanos> {
        self.idle_ttl.and_then(|ttl| now.checked_sub(ttl))
    }

    /// Whether a key quiet as `quiet` has been idle since before
    /// `idle_before` (never without an idle TTL).
    fn is_idle(quiet: Quiet, idle_before: Option<Nanos>) -> bool {
        idle_before.is_some_and(|before| quiet.from <= before)
    }

    /// `state`'s quiet time, or `None` while anyone but the key space
    /// holds it.
    fn quiet(&self, state: &triomphe::Arc<S>, now: Nanos) -> Option<Quiet> {
        if triomphe::Arc::strong_count(state) > HOLDERS {
            return None;
        }
        (self.quiet_from)(state, now)
    }

    /// Where a key stands in the eviction order under pressure at `now`:
    /// `Ok(rank)` if it may go, `Err(at)` if it may go at `at`. A key whose
    /// debt is paid but whose pause or shedding would hold it longer than
    /// `max_hold` from now may go now, first of all: it is the one holding
    /// the key space longest for the least.
    fn rank(&self, quiet: Quiet, now: Nanos) -> Result<Rank, Nanos> {
        if quiet.from <= now {
            return Ok((quiet.rate_moved, quiet.from));
        }
        // From `free` on, only a pause or shedding holds the key.
        let free = quiet.debt_until.clamp(now, quiet.from);
        let held_too_long = quiet.from - free > self.max_hold;
        match (free <= now, held_too_long) {
            (true, true) => Ok((false, 0)),
            (false, true) => Err(free),
            (_, false) => Err(quiet.from),
        }
    }

    /// Moves up to `count` keys from the front of the queue into `into`.
    fn take_front(&self, count: usize, into: &mut Vec<Queued<S>>) {
        let mut queue = self.queue();
        let count = count.min(queue.len());
        into.extend(queue.drain(..count));
    }

    /// Forgets what refusals have seen: after an eviction, or once they
    /// have seen every key.
    fn start_fruitless_round(&self) {
        self.fruitless_probes.store(0, Ordering::Relaxed);
        self.fruitless_first_quiet
            .store(Nanos::MAX, Ordering::Relaxed);
    }

    /// What `key` is to eviction at `now`. The queue's reference is all
    /// it needs: the map's is the other one, if the key is live.
    fn probe(&self, key: &Queued<S>, now: Nanos, idle_before: Option<Nanos>) -> Probe {
        if triomphe::Arc::strong_count(&key.state) < HOLDERS {
            return Probe::Gone;
        }
        match self.quiet(&key.state, now) {
            None => Probe::Held(None),
            Some(quiet) if Self::is_idle(quiet, idle_before) => Probe::Idle,
            Some(quiet) => match self.rank(quiet, now) {
                Ok(rank) => Probe::Evictable(rank),
                Err(at) => Probe::Held(Some(at)),
            },
        }
    }

    /// Removes `key` if it is still idle, or with `pressure` still
    /// evictable: a call may have taken it since it was looked at. The
    /// check runs under the shard's write lock, so no call takes it between
    /// the check and the removal. Its state is dropped outside the lock.
    fn evict(
        &self,
        key: &Queued<S>,
        now: Nanos,
        idle_before: Option<Nanos>,
        pressure: bool,
    ) -> bool {
        let removed = self.map.remove_if(key.hash, &key.state, |state| {
            self.quiet(state, now).is_some_and(|quiet| {
                Self::is_idle(quiet, idle_before) || (pressure && self.rank(quiet, now).is_ok())
            })
        });
        if removed.is_some() {
            self.evicted.fetch_add(1, Ordering::Relaxed);
        }
        removed.is_some()
    }

    /// As a new key arrives below the cap: evicts the idle keys at the
    /// front of the queue, up to [`IDLE_SWEEP_MAX`], and sends the first
    /// [`IDLE_LOOKS`] that are not idle to the back, so the sweep reaches
    /// every key in turn.
    pub(super) fn sweep_idle_front(&self, now: Nanos) {
        let Some(idle_before) = self.idle_before(now) else {
            return;
        };
        let (mut evicted, mut looked) = (0, 0);
        while evicted < IDLE_SWEEP_MAX && looked < IDLE_LOOKS {
            let Some(key) = self.queue().pop_front() else {
                break;
            };
            match self.probe(&key, now, Some(idle_before)) {
                Probe::Gone => {}
                Probe::Idle if self.evict(&key, now, Some(idle_before), false) => evicted += 1,
                _ => {
                    looked += 1;
                    self.queue().push_back(key);
                }
            }
        }
        self.give_back(evicted);
    }

    /// At the cap: evicts one key for the caller, whose room then passes to
    /// it (the count of reserved rooms is unchanged), plus the idle keys
    /// met on the way (their room given back). Looks at the front of the
    /// queue [`SAMPLE`] keys at a time until it has seen a key it may
    /// evict, at most [`MAX_PROBES`].
    ///
    /// # Errors
    ///
    /// [`NoRoom`] when none of the keys looked at may go.
    pub(super) fn make_room(&self, now: Nanos) -> Result<(), NoRoom> {
        let until = self.room.no_room_until();
        if now < until {
            return Err(NoRoom {
                retry_after: until - now,
            });
        }
        let idle_before = self.idle_before(now);
        let mut candidates: Vec<(Rank, Queued<S>)> = Vec::new();
        let mut held = Vec::new();
        let mut idle_evicted: usize = 0;
        let mut first_quiet = Nanos::MAX;
        let mut probes = 0;
        let mut batch = Vec::with_capacity(SAMPLE);
        while probes < MAX_PROBES && candidates.is_empty() && idle_evicted == 0 {
            self.take_front(SAMPLE, &mut batch);
            if batch.is_empty() {
                break;
            }
            probes += batch.len();
            for key in batch.drain(..) {
                match self.probe(&key, now, idle_before) {
                    Probe::Gone => {}
                    Probe::Idle if self.evict(&key, now, idle_before, false) => idle_evicted += 1,
                    Probe::Idle => held.push(key),
                    Probe::Evictable(rank) => candidates.push((rank, key)),
                    Probe::Held(at) => {
                        first_quiet = first_quiet.min(at.unwrap_or(Nanos::MAX));
                        held.push(key);
                    }
                }
            }
        }
        candidates.sort_unstable_by_key(|(rank, _)| *rank);
        let mut made_room = idle_evicted > 0;
        let mut next_candidates = Vec::new();
        for (_, key) in candidates {
            if made_room {
                next_candidates.push(key);
            } else if self.evict(&key, now, idle_before, true) {
                made_room = true;
            } else {
                held.push(key); // taken by a call since it was looked at
            }
        }
        {
            let mut queue = self.queue();
            for key in next_candidates.into_iter().rev() {
                queue.push_front(key);
            }
            queue.extend(held);
        }
        if !made_room {
            return Err(self.refuse(now, probes, first_quiet));
        }
        // One evicted key's room is the caller's; the others are free.
        self.give_back(idle_evicted.saturating_sub(1));
        self.start_fruitless_round();
        tracing::trace!(
            idle_evicted,
            max_keys = self.max_keys,
            "key space full, evicted a key to make room"
        );
        Ok(())
    }

    /// A new key found no key to evict among `probes` keys, the first of
    /// which can go at `first_quiet`. Once refusals have looked at as many
    /// keys as are live, no key can go before the first time they saw, and
    /// until then new keys are refused without looking.
    fn refuse(&self, now: Nanos, probes: usize, first_quiet: Nanos) -> NoRoom {
        let seen = self.fruitless_probes.fetch_add(probes, Ordering::Relaxed) + probes;
        let first = self
            .fruitless_first_quiet
            .fetch_min(first_quiet, Ordering::Relaxed)
            .min(first_quiet);
        let live = self.reserved.load(Ordering::Relaxed);
        if seen < live || first <= now {
            // Keys not looked at yet, or one seen that is free by now.
            let until_first = first.saturating_sub(now).max(1);
            return NoRoom {
                retry_after: UNSEEN_RETRY.min(until_first),
            };
        }
        self.start_fruitless_round();
        let retry_after = if first == Nanos::MAX {
            // Every key is in use with no known end: retry, and look again.
            UNKNOWN_RETRY
        } else {
            // No key can go before then by time alone. Keys in use with no
            // known end (calls in flight) may free up sooner: the end of a
            // key's last call ends this memory and wakes the waiters.
            self.room.remember_no_room_until(first);
            first - now
        };
        tracing::debug!(
            max_keys = self.max_keys,
            retry_after_ns = retry_after,
            "key space full, no key evictable"
        );
        NoRoom { retry_after }
    }

    /// Evicts every key that has been quiet for the idle TTL, walking the
    /// whole queue once. Returns how many went.
    pub(crate) fn evict_idle(&self, now: Nanos) -> usize {
        let Some(idle_before) = self.idle_before(now) else {
            return 0;
        };
        let mut left = self.queue().len();
        let mut evicted = 0;
        let mut chunk = Vec::with_capacity(SWEEP_CHUNK);
        while left > 0 {
            self.take_front(SWEEP_CHUNK.min(left), &mut chunk);
            if chunk.is_empty() {
                break;
            }
            left -= chunk.len();
            chunk.retain(|key| match self.probe(key, now, Some(idle_before)) {
                Probe::Gone => false,
                Probe::Idle if self.evict(key, now, Some(idle_before), false) => {
                    evicted += 1;
                    false
                }
                _ => true,
            });
            self.queue().extend(chunk.drain(..));
        }
        self.give_back(evicted);
        evicted
    }
}
