//! The key space: lazy per-key state, idle eviction and a cap on the number
//! of keys.
//!
//! Keys often come from untrusted input (client IPs, user ids), so the
//! number of live keys is capped, and a key is never forgotten while
//! forgetting it would loosen a limit: a bucket still owing tokens, a call in
//! flight, a waiter queued. The owner says when that is over through a
//! [`QuietFrom`] function.
//!
//! # Eviction costs a bounded amount per new key
//!
//! Every live key waits its turn in one queue, the eviction queue, in the
//! order keys were created or last looked at by eviction. The queue holds
//! each key's hash and its state's `Arc`, not a copy of the key: the map
//! ([`table`]) finds a key to remove by the two. No caller ever scans the
//! key space:
//!
//! - **Idle keys** go as new keys arrive: below the cap, each new key looks
//!   at the front of the queue and evicts the keys there that have been
//!   quiet for the idle TTL, up to [`IDLE_SWEEP_MAX`], sending the first
//!   few that are not to the back; at the cap, the look for room evicts
//!   the idle keys it meets. [`Registry::evict_idle`], called by the
//!   owner, walks the whole queue.
//! - **At the cap**, a new key looks at the front of the queue, a few keys
//!   at a time up to [`MAX_PROBES`], until it has seen a key it may evict.
//!   It evicts the best of those it saw: a key held only by a pause or
//!   shedding longer than `max_hold`, then a key whose rate never moved,
//!   then one whose rate moved; each the least recently quiet first (an
//!   approximate LRU). The room that key held passes to the new key
//!   directly, so no other caller can take it in between. Keys it may not
//!   evict go to the back of the queue; those it may evict but did not go
//!   back to the front, for the next new key.
//! - **If none of the keys it saw can go**, the new key is refused
//!   ([`NoRoom`]): `wait` waits, and `check` reports, the time until the
//!   first of them can go, or at most a millisecond while keys remain that
//!   no refusal has looked at since the last eviction. Once refusals have
//!   looked at as many keys as are live, every live key is still limiting
//!   someone: the registry then refuses every new key at once, without
//!   looking, until the first key they saw can go, or room is given back.
//!
//! Evicting a key that still owes tokens instead would let a flood of new
//! keys reset the limits of real ones: debt, at most `burst` intervals of
//! the key's rate, holds its key until paid. What else holds a key is
//! bounded: a key held only by a pause (a server's `Retry-After`) or by
//! shedding, for longer than `max_hold` from now, may go under pressure,
//! and is the first to: so keys an adversary makes (hosts that answer every
//! request with `Retry-After: 300`) cannot hold the key space for minutes.
//! Forgetting a pause costs one more request to a host that will ask again;
//! forgetting shedding, a few calls to a backend that is failing them.
//!
//! The words used here (debt, fall, news, quiet, room, hold, ticket, ...)
//! are defined once, in [the architecture map](crate::guide::architecture).

mod borrowed_key;
mod eviction;
mod room_signal;
mod table;

use std::collections::VecDeque;
use std::hash::Hash;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use triomphe::Arc;

use crate::clock::Nanos;

pub use borrowed_key::BorrowedKey;
use table::Table;

pub(crate) use room_signal::RoomSignal;

#[cfg(doc)]
use eviction::{IDLE_SWEEP_MAX, MAX_PROBES};

/// When a key's state may be forgotten, seen at `now`, or `None` while it is
/// in use with no known end.
pub(crate) type QuietFrom<S> = dyn Fn(&S, Nanos) -> Option<Quiet> + Send + Sync;

/// When a key may be forgotten, and what forgetting it costs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Quiet {
    /// The time from which forgetting it loses nothing that limits anyone.
    pub(crate) from: Nanos,
    /// Until when forgetting it would forgive debt; between then and
    /// `from` only a pause or shedding holds it.
    pub(crate) debt_until: Nanos,
    /// Whether it holds something a fresh key would not (a rate that moved):
    /// such keys are evicted after those that hold nothing.
    pub(crate) rate_moved: bool,
}

/// A new key was refused: the registry is at its cap and no key can go yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NoRoom {
    /// Time until the first live key can be evicted (a guess when unknown).
    pub(crate) retry_after: Nanos,
}

/// How many references to a live key's state the key space holds: the
/// map's and the eviction queue's. A state with more is in use (a permit,
/// a waiter, a lookup under way), and not evicted.
pub(crate) const HOLDERS: usize = 2;

/// A key in the eviction queue: its hash and its state, by which the map
/// finds it.
struct Queued<S> {
    hash: u64,
    state: Arc<S>,
}

/// One key's room in the count, reserved for a key not yet in the map;
/// given back when dropped (forgotten once the key is in).
struct Room<'a, K, S>(&'a Registry<K, S>);

impl<K, S> Room<'_, K, S> {
    /// The key is in the map: the room stays taken.
    fn keep(self) {
        std::mem::forget(self);
    }
}

impl<K, S> Drop for Room<'_, K, S> {
    fn drop(&mut self) {
        self.0.give_back(1);
    }
}

/// Lazily created per-key state, bounded in count and evicted when idle.
///
/// Every key in `map` is in `eviction_queue` exactly once, except while the
/// thread that created it has yet to queue it, or while an evicting thread
/// holds it out of the queue; only a thread holding a key out of the queue
/// removes it from the map, but for a key forgotten on demand
/// ([`remove`](Self::remove)), whose entry in the queue eviction drops
/// when it meets it (its state is no longer in the map). So every live key
/// is looked at by eviction in its turn, and none twice in one round.
pub(crate) struct Registry<K, S> {
    map: Table<K, S>,
    /// The live keys in the order eviction looks at them, front first.
    eviction_queue: Mutex<VecDeque<Queued<S>>>,
    /// Keys in the map plus keys about to be inserted: never above `max_keys`.
    reserved: AtomicUsize,
    max_keys: usize,
    idle_ttl: Option<Nanos>,
    /// Under pressure, a key that would hold its place longer than this
    /// from now may be evicted.
    max_hold: Nanos,
    quiet_from: Box<QuietFrom<S>>,
    /// Keys refusals looked at since the last eviction, and the first time
    /// one of them can go (`Nanos::MAX` if none is known).
    fruitless_probes: AtomicUsize,
    fruitless_first_quiet: AtomicU64,
    /// Woken when room is given back; holds the remembered "no room".
    room: std::sync::Arc<RoomSignal>,
    /// Keys evicted since the registry was made.
    evicted: AtomicU64,
}

impl<K, S> Registry<K, S> {
    /// `count` keys' room is free again: the remembered "no room" no longer
    /// holds, and those waiting for room try again.
    fn give_back(&self, count: usize) {
        if count == 0 {
            return;
        }
        self.reserved.fetch_sub(count, Ordering::AcqRel);
        self.room.notify();
    }
}

impl<K, S> Registry<K, S>
where
    K: Hash + Eq,
{
    /// A registry of at most `max_keys` keys, forgetting keys quiet for
    /// `idle_ttl`, and under pressure those that would hold their place
    /// longer than `max_hold`. Holders of a state's `Arc` (permits, waiters)
    /// make it busy without `quiet_from` being asked.
    pub(crate) fn new(
        max_keys: usize,
        idle_ttl: Option<Nanos>,
        max_hold: Nanos,
        quiet_from: Box<QuietFrom<S>>,
        room: std::sync::Arc<RoomSignal>,
    ) -> Self {
        Self {
            map: Table::new(),
            eviction_queue: Mutex::new(VecDeque::new()),
            reserved: AtomicUsize::new(0),
            max_keys,
            idle_ttl,
            max_hold,
            quiet_from,
            fruitless_probes: AtomicUsize::new(0),
            fruitless_first_quiet: AtomicU64::new(Nanos::MAX),
            room,
            evicted: AtomicU64::new(0),
        }
    }

    /// Resolves when room may have appeared ([`RoomSignal::freed`]).
    pub(crate) async fn room_freed(&self) {
        self.room.freed().await;
    }

    /// `then` of `key` and its state, if the key is live (under its shard's
    /// shared lock: `then` should be short).
    #[inline]
    pub(crate) fn get<Q: BorrowedKey<K> + ?Sized, T>(
        &self,
        key: &Q,
        then: impl FnOnce(&K, &Arc<S>) -> T,
    ) -> Option<T> {
        self.map.get(key, self.map.hash(key), then)
    }

    /// The state of `key`, if it is live.
    pub(crate) fn state<Q: BorrowedKey<K> + ?Sized>(&self, key: &Q) -> Option<Arc<S>> {
        self.get(key, |_, state| Arc::clone(state))
    }

    /// `then` of `key` and its state, created by `make` if the key is new.
    ///
    /// # Errors
    ///
    /// [`NoRoom`] when the key is new, the registry is at its cap and no key can
    /// be evicted.
    #[inline(always)]
    pub(crate) fn get_or_insert_with<Q: BorrowedKey<K> + ?Sized, T>(
        &self,
        key: &Q,
        now: Nanos,
        make: impl FnOnce(&K) -> S,
        then: impl FnOnce(&K, &Arc<S>) -> T,
    ) -> Result<T, NoRoom> {
        let hash = self.map.hash(key);
        let mut then = Some(then);
        // `then` runs once: here, or below.
        if let Some(found) = self
            .map
            .get(key, hash, |k, state| (then.take().expect("once"))(k, state))
        {
            return Ok(found);
        }
        self.insert_with(key, hash, now, make, then.expect("not run"))
    }

    /// [`get_or_insert_with`](Self::get_or_insert_with) for a key not found.
    #[cold]
    fn insert_with<Q: BorrowedKey<K> + ?Sized, T>(
        &self,
        key: &Q,
        hash: u64,
        now: Nanos,
        make: impl FnOnce(&K) -> S,
        then: impl FnOnce(&K, &Arc<S>) -> T,
    ) -> Result<T, NoRoom> {
        self.reserve_room(now)?;
        // Until the key is in the map, the room goes back if anything fails:
        // another thread creating it first, or a panic in the key's
        // conversion or in `make` (which runs user callbacks, such as a
        // per-key rule). `make` runs outside the map's locks, so a callback
        // that calls the manager cannot deadlock on its own shard. Between
        // the insert and the push nothing can fail, so no live key misses
        // the queue.
        let room = Room(self);
        let key = key.to_key();
        let state = make(&key);
        let (made, found) = self.map.insert(key, hash, state, then);
        if let Some(state) = made {
            room.keep();
            self.queue().push_back(Queued { hash, state });
        }
        Ok(found)
    }

    /// The eviction queue, locked. Nothing that can panic runs under it.
    fn queue(&self) -> std::sync::MutexGuard<'_, VecDeque<Queued<S>>> {
        self.eviction_queue
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Forgets `key`, if it is live: the map lets it go at once and its
    /// room is given back; whoever holds its state (a call in flight, a
    /// waiter) keeps it until done. `false` if the key was not live.
    pub(crate) fn remove<Q: BorrowedKey<K> + ?Sized>(&self, key: &Q) -> bool {
        let removed = self.map.remove_key(self.map.hash(key), key);
        let forgotten = removed.is_some();
        drop(removed);
        if forgotten {
            self.give_back(1);
        }
        forgotten
    }

    /// How long an idle key is kept, if it is forgotten when idle.
    pub(crate) fn idle_ttl(&self) -> Option<Nanos> {
        self.idle_ttl
    }

    /// How long a busy key may hold its place when room is needed.
    pub(crate) fn max_hold(&self) -> Nanos {
        self.max_hold
    }

    /// The number of live keys.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// The most keys the registry holds.
    #[cfg_attr(not(feature = "status"), allow(dead_code))]
    pub(crate) fn max_keys(&self) -> usize {
        self.max_keys
    }

    /// Keys evicted since the registry was made (idle, or for room).
    #[cfg_attr(not(feature = "status"), allow(dead_code))]
    pub(crate) fn evicted(&self) -> u64 {
        self.evicted.load(Ordering::Relaxed)
    }

    /// Visits every live key. Holds each shard's read lock while visiting it.
    pub(crate) fn for_each(&self, visit: impl FnMut(&K, &Arc<S>)) {
        self.map.for_each(visit);
    }

    /// Counts one more key against the cap, making room if needed.
    fn reserve_room(&self, now: Nanos) -> Result<(), NoRoom> {
        let mut reserved = self.reserved.load(Ordering::Acquire);
        if reserved < self.max_keys {
            // At the cap `make_room` evicts the idle keys it meets; the
            // sweep, which sends busy keys to the back, would move away
            // the candidates it left at the front.
            self.sweep_idle_front(now);
            reserved = self.reserved.load(Ordering::Acquire);
        }
        loop {
            if reserved >= self.max_keys {
                // The room of the key evicted passes to this one.
                return self.make_room(now);
            }
            match self.reserved.compare_exchange_weak(
                reserved,
                reserved + 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Ok(()),
                Err(actual) => reserved = actual,
            }
        }
    }
}
