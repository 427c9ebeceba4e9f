//! The key space: lazy per-key state, idle eviction and a cap on the number
//! of keys.
//!
//! Keys often come from untrusted input (client IPs, user ids), so the
//! number of live keys is capped, and a key is never forgotten while
//! forgetting it would loosen a limit: a bucket still owing tokens, a call in
//! flight, a waiter queued. The owner says when that is over through a
//! [`QuietFrom`] function.
//!
//! # At the cap
//!
//! A new key at the cap first makes room: the registry evicts, in one sweep,
//! every idle key and up to a sixteenth of the cap of the evictable keys:
//! those that carry nothing a fresh key would not have first (their rate
//! never moved), then those whose rate moved, each the least recently
//! quiet first (an approximate LRU that keeps the sweep's cost amortised).
//! If no key can be evicted, every live key is still limiting someone, and
//! the new key is refused with the time until the first of them can go
//! ([`NoRoom`]): `wait` waits that long and `check` reports it. Evicting a key
//! that still owes tokens instead would let a flood of new keys reset the
//! limits of real ones.
//!
//! Debt is kept; what else holds a key is bounded. A key held only by a
//! pause (a server's `Retry-After`) or by shedding, for longer than
//! `max_hold` from now, may go under pressure, and is the first to: so
//! keys an adversary makes (hosts that answer every request with
//! `Retry-After: 300`) cannot hold the key space for minutes. Forgetting a
//! pause costs one more request to a host that will ask again; forgetting
//! shedding, a few calls to a backend that is failing them. Forgetting debt
//! would hand a client calls its limit refused, so debt, at most `burst`
//! intervals of the key's rate, holds its key until paid.
//!
//! A scan of a full key space costs time in proportion to its keys (about
//! 80 ms at a million), so the registry remembers its answer: until the
//! first key that owes tokens can go (and for at least ten times the scan's
//! own cost), a new key is refused at once, without a lock or a scan. Only
//! one thread scans at a time; the others are refused meanwhile rather than
//! blocked. Room given back (a key evicted, a new key that failed) clears
//! the answer and wakes the callers waiting for room.
//!
//! The words used here (debt, fall, news, quiet, room, hold, ticket, ...)
//! are defined once, in [the architecture map](crate::architecture).

use std::borrow::Borrow;
use std::hash::Hash;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use tokio::sync::Notify;

use triomphe::Arc;

use dashmap::DashMap;
use dashmap::mapref::entry::Entry;
use dashmap::mapref::one::Ref;

use crate::clock::Nanos;

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

/// The order in which evictable keys go: those whose rate never moved first,
/// each group least recently quiet first.
type Rank = (bool, Nanos);

/// A new key was refused: the registry is at its cap and no key can go yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NoRoom {
    /// Time until the first live key can be evicted (a guess when unknown).
    pub(crate) retry_after: Nanos,
}

/// When no live key knows when it will be quiet, a new key retries after this.
const UNKNOWN_RETRY: Nanos = 10_000_000;

/// While another thread scans for room, a new key is refused with this
/// retry: the scan will have answered by then.
const SCANNING_RETRY: Nanos = 1_000_000;

/// A refused new key retries after at least this many times the last
/// scan's cost, and while every blocking key's quiet time is known, no
/// scan runs before then: scans then take at most a tenth of one core.
/// (Keys busy with no known end, calls in flight, are not waited out: the
/// next refused key scans again, one scanner at a time.)
const SCAN_COST_FACTOR: u32 = 10;

/// Shards of the map: more than dashmap's default (4 per core), so that two
/// threads on different keys rarely share a shard's lock word.
const SHARDS: usize = 64;

/// Tells those waiting for room in a full key space that there may be some:
/// room given back (a key evicted, a new key that failed), or a key's last
/// call in flight ended (which may let it go). Shared by the registry and
/// the permits, which do not know the key type.
#[derive(Debug, Default)]
pub(crate) struct RoomSignal {
    /// Callers waiting for room now; a permit's end looks here first, so
    /// without waiters it costs one load.
    waiting: AtomicUsize,
    freed: Notify,
}

impl RoomSignal {
    /// Room may have appeared: wake every waiter.
    pub(crate) fn notify(&self) {
        self.freed.notify_waiters();
    }

    /// A call of a key ended, and nothing else holds the key: if anyone
    /// waits for room, that key may now make it.
    #[inline]
    pub(crate) fn call_ended(&self, last_holder: impl FnOnce() -> bool) {
        if self.waiting.load(Ordering::Relaxed) > 0 && last_holder() {
            self.notify();
        }
    }

    /// Resolves when room may have appeared. (Made after a refusal, it may
    /// miss room that appeared in between, or a key whose last call ended
    /// just before it was released; the caller's retry time bounds that.)
    pub(crate) async fn freed(&self) {
        struct RoomWaiter<'a>(&'a AtomicUsize);
        impl Drop for RoomWaiter<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::Relaxed);
            }
        }
        let notified = self.freed.notified();
        self.waiting.fetch_add(1, Ordering::Relaxed);
        let _waiting = RoomWaiter(&self.waiting);
        notified.await;
    }
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
pub(crate) struct Registry<K, S> {
    map: DashMap<K, Arc<S>, foldhash::fast::RandomState>,
    /// Keys in the map plus keys about to be inserted: never above `max_keys`.
    reserved: AtomicUsize,
    max_keys: usize,
    idle_ttl: Option<Nanos>,
    /// Under pressure, a key that would hold its place longer than this
    /// from now may be evicted.
    max_hold: Nanos,
    next_idle_sweep: AtomicU64,
    sweeping: Mutex<()>,
    quiet_from: Box<QuietFrom<S>>,
    /// Until when a full key space has no room (its last scan found no
    /// evictable key): a new key before then is refused without a scan.
    no_room_until: AtomicU64,
    /// Woken when room is given back.
    room: std::sync::Arc<RoomSignal>,
}

impl<K, S> Registry<K, S> {
    /// `count` keys' room is free again: the remembered "no room" no longer
    /// holds, and those waiting for room try again.
    fn give_back(&self, count: usize) {
        if count == 0 {
            return;
        }
        self.reserved.fetch_sub(count, Ordering::AcqRel);
        self.no_room_until.store(0, Ordering::Release);
        self.room.notify();
    }
}

impl<K, S> std::fmt::Debug for Registry<K, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("reserved", &self.reserved)
            .field("max_keys", &self.max_keys)
            .field("idle_ttl", &self.idle_ttl)
            .finish_non_exhaustive()
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
            map: DashMap::with_hasher_and_shard_amount(Default::default(), SHARDS),
            reserved: AtomicUsize::new(0),
            max_keys,
            idle_ttl,
            max_hold,
            next_idle_sweep: AtomicU64::new(0),
            sweeping: Mutex::new(()),
            quiet_from,
            no_room_until: AtomicU64::new(0),
            room,
        }
    }

    /// Resolves when room may have appeared ([`RoomSignal::freed`]).
    pub(crate) async fn room_freed(&self) {
        self.room.freed().await;
    }

    /// The state of `key`, if it is live.
    pub(crate) fn get<Q>(&self, key: &Q) -> Option<Ref<'_, K, Arc<S>>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.map.get(key)
    }

    /// The state of `key`, created by `make` if the key is new.
    ///
    /// # Errors
    ///
    /// [`NoRoom`] when the key is new, the registry is at its cap and no key can
    /// be evicted.
    #[inline]
    pub(crate) fn get_or_insert_with<Q>(
        &self,
        key: &Q,
        now: Nanos,
        make: impl FnOnce(&K) -> S,
    ) -> Result<Ref<'_, K, Arc<S>>, NoRoom>
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        if let Some(state) = self.map.get(key) {
            return Ok(state);
        }
        self.insert_with(key, now, make)
    }

    /// [`get_or_insert_with`](Self::get_or_insert_with) for a key not found.
    #[cold]
    fn insert_with<Q>(
        &self,
        key: &Q,
        now: Nanos,
        make: impl FnOnce(&K) -> S,
    ) -> Result<Ref<'_, K, Arc<S>>, NoRoom>
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        self.reserve_room(now)?;
        // Until the key is in the map, the room goes back if anything fails:
        // another thread creating it first, or a panic in the key's
        // conversion or in `make` (which runs user callbacks, such as a
        // per-key rule). `make` runs outside the map's locks, so a callback
        // that calls the manager cannot deadlock on its own shard.
        let room = Room(self);
        let key = K::from(key.to_owned());
        let state = make(&key);
        match self.map.entry(key) {
            Entry::Occupied(found) => Ok(found.into_ref().downgrade()),
            Entry::Vacant(vacant) => {
                room.keep();
                Ok(vacant.insert(Arc::new(state)).downgrade())
            }
        }
    }

    /// The number of live keys.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// Visits every live key. Holds each shard's read lock while visiting it.
    pub(crate) fn for_each(&self, mut visit: impl FnMut(&K, &Arc<S>)) {
        for entry in self.map.iter() {
            visit(entry.key(), entry.value());
        }
    }

    /// Evicts every key that has been quiet for the idle TTL. Returns how
    /// many went.
    pub(crate) fn evict_idle(&self, now: Nanos) -> usize {
        let _sweeping = self.sweeping.lock().unwrap_or_else(|e| e.into_inner());
        self.sweep(now, None, 0)
    }

    /// `state`'s quiet time, or `None` while anyone else holds it.
    fn quiet(&self, state: &Arc<S>, now: Nanos) -> Option<Quiet> {
        if Arc::strong_count(state) > 1 {
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

    /// Counts one more key against the cap, making room if needed.
    fn reserve_room(&self, now: Nanos) -> Result<(), NoRoom> {
        self.sweep_idle_if_due(now);
        let mut reserved = self.reserved.load(Ordering::Acquire);
        loop {
            if reserved >= self.max_keys {
                self.make_room(now)?;
                reserved = self.reserved.load(Ordering::Acquire);
                continue;
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

    /// Idle keys are swept when new keys arrive, at most twice per idle TTL:
    /// a manager that sees no new keys does not grow.
    fn sweep_idle_if_due(&self, now: Nanos) {
        let Some(ttl) = self.idle_ttl else { return };
        let due = self.next_idle_sweep.load(Ordering::Acquire);
        if now < due {
            return;
        }
        let Ok(_sweeping) = self.sweeping.try_lock() else {
            return; // someone else is sweeping right now
        };
        self.next_idle_sweep
            .store(now.saturating_add(ttl / 2), Ordering::Release);
        self.sweep(now, None, 0);
    }

    /// At the cap: evict the idle keys and a batch of the least recently
    /// quiet evictable ones. Refuses at once, without a scan, while the
    /// last scan's answer holds or another thread is scanning.
    fn make_room(&self, now: Nanos) -> Result<(), NoRoom> {
        let until = self.no_room_until.load(Ordering::Acquire);
        if now < until {
            return Err(NoRoom {
                retry_after: until - now,
            });
        }
        let _sweeping = match self.sweeping.try_lock() {
            Ok(guard) => guard,
            Err(std::sync::TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => {
                return Err(NoRoom {
                    retry_after: SCANNING_RETRY,
                });
            }
        };
        if self.reserved.load(Ordering::Acquire) < self.max_keys {
            return Ok(()); // a sweep that finished meanwhile made room
        }
        let scan_started = Instant::now();
        let mut evictable = Vec::new();
        let mut first_quiet = Nanos::MAX;
        for entry in self.map.iter() {
            match self
                .quiet(entry.value(), now)
                .map(|quiet| self.rank(quiet, now))
            {
                Some(Ok(rank)) => evictable.push(rank),
                Some(Err(from)) => first_quiet = first_quiet.min(from),
                None => {}
            }
        }
        if evictable.is_empty() {
            let known = first_quiet != Nanos::MAX;
            let until_quiet = if known {
                first_quiet - now
            } else {
                UNKNOWN_RETRY
            };
            let scan_cost = crate::clock::nanos(scan_started.elapsed() * SCAN_COST_FACTOR);
            let retry_after = until_quiet.max(scan_cost);
            if known {
                // No key can go before then: the answer holds till then
                // (keys busy with no known end, calls in flight, may free
                // up sooner; the next scan after then sees them).
                self.no_room_until
                    .store(now.saturating_add(retry_after), Ordering::Release);
            }
            tracing::debug!(
                max_keys = self.max_keys,
                retry_after_ns = retry_after,
                "key space full, no key evictable"
            );
            return Err(NoRoom { retry_after });
        }
        let batch = (self.max_keys / 16).clamp(1, evictable.len());
        let (_, &mut threshold, _) = evictable.select_nth_unstable(batch - 1);
        let evicted = self.sweep(now, Some(threshold), batch);
        tracing::debug!(
            evicted,
            max_keys = self.max_keys,
            "key space full, evicted least recently used keys"
        );
        Ok(())
    }

    /// Removes every idle key, plus up to `lru_batch` evictable keys ranked
    /// at `lru_threshold` or before. Call with `sweeping` held.
    fn sweep(&self, now: Nanos, lru_threshold: Option<Rank>, lru_batch: usize) -> usize {
        let idle_before = self.idle_ttl.and_then(|ttl| now.checked_sub(ttl));
        let mut lru_evicted = 0;
        let mut evicted = 0;
        self.map.retain(|_, state| {
            let Some(quiet) = self.quiet(state, now) else {
                return true;
            };
            let idle = idle_before.is_some_and(|before| quiet.from <= before);
            let lru = lru_evicted < lru_batch
                && lru_threshold.is_some_and(|threshold| {
                    self.rank(quiet, now).is_ok_and(|rank| rank <= threshold)
                });
            if idle || lru {
                lru_evicted += usize::from(!idle);
                evicted += 1;
                false
            } else {
                true
            }
        });
        self.give_back(evicted);
        evicted
    }
}
