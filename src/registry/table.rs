//! The key space's map: each key with the `Arc` of its state, in shards of
//! a hash table found by hash and a comparison (not by `Borrow` alone), so
//! that eviction can remove a key by its hash and its state's address,
//! without holding a copy of the key.
//!
//! A lookup takes its shard's lock shared (one atomic operation each way,
//! as a `DashMap` does); an insert or a removal takes it alone. Nothing
//! runs under a lock but the key's own `Hash` and `Eq` and the caller's
//! short reads of the slot.

use super::BorrowedKey;
use std::hash::{BuildHasher, Hash};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use hashbrown::HashTable;
use hashbrown::hash_table::Entry;
use triomphe::Arc;

/// Shards of the table: more than dashmap's default (4 per core), so that
/// two threads on different keys rarely share a shard's lock word.
const SHARD_BITS: u32 = 6;

/// One key and its state.
type KeyEntry<K, S> = (K, Arc<S>);

/// One shard: a part of the keys, under its lock.
type Shard<K, S> = RwLock<HashTable<KeyEntry<K, S>>>;

/// A sharded hash table of keys and their states.
pub(super) struct Table<K, S> {
    shards: Box<[Shard<K, S>]>,
    hasher: foldhash::fast::RandomState,
}

impl<K, S> Table<K, S>
where
    K: Hash + Eq,
{
    pub(super) fn new() -> Self {
        Self {
            shards: (0..1 << SHARD_BITS)
                .map(|_| RwLock::new(HashTable::new()))
                .collect(),
            hasher: foldhash::fast::RandomState::default(),
        }
    }

    /// `key`'s hash, as the table files it.
    #[inline]
    pub(super) fn hash<Q: Hash + ?Sized>(&self, key: &Q) -> u64 {
        self.hasher.hash_one(key)
    }

    /// The shard of `hash`: by the bits below the seven the table's
    /// control bytes take from the top.
    #[inline]
    fn shard(&self, hash: u64) -> &Shard<K, S> {
        let index = (hash << 7) >> (64 - SHARD_BITS);
        &self.shards[index as usize]
    }

    fn read(&self, hash: u64) -> RwLockReadGuard<'_, HashTable<KeyEntry<K, S>>> {
        self.shard(hash).read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self, hash: u64) -> RwLockWriteGuard<'_, HashTable<KeyEntry<K, S>>> {
        self.shard(hash).write().unwrap_or_else(|e| e.into_inner())
    }

    /// `then` of `key`'s slot, if the key is in the table (under its
    /// shard's shared lock).
    #[inline]
    pub(super) fn get<Q: BorrowedKey<K> + ?Sized, T>(
        &self,
        key: &Q,
        hash: u64,
        then: impl FnOnce(&K, &Arc<S>) -> T,
    ) -> Option<T> {
        let shard = self.read(hash);
        let (found, state) = shard.find(hash, |(k, _)| key.names(k))?;
        Some(then(found, state))
    }

    /// Puts `key` with `state` in the table, unless it is there already:
    /// then `then` of the slot found, else `then` of the new slot with the
    /// state's `Arc` for the caller to queue.
    pub(super) fn insert<T>(
        &self,
        key: K,
        hash: u64,
        state: S,
        then: impl FnOnce(&K, &Arc<S>) -> T,
    ) -> (Option<Arc<S>>, T) {
        let mut shard = self.write(hash);
        let hasher = |(k, _): &KeyEntry<K, S>| self.hasher.hash_one(k);
        match shard.entry(hash, |(k, _)| *k == key, hasher) {
            Entry::Occupied(found) => {
                let (k, state) = found.get();
                (None, then(k, state))
            }
            Entry::Vacant(vacant) => {
                let state = Arc::new(state);
                let made = Arc::clone(&state);
                let slot = vacant.insert((key, state)).into_mut();
                (Some(made), then(&slot.0, &slot.1))
            }
        }
    }

    /// Removes the slot of `hash` holding `state`, if it is there and
    /// `remove` says so of it (under the shard's lock, so that no lookup
    /// takes the state between the check and the removal). Returns the
    /// slot, to be dropped outside the lock.
    pub(super) fn remove_if(
        &self,
        hash: u64,
        state: &Arc<S>,
        remove: impl FnOnce(&Arc<S>) -> bool,
    ) -> Option<KeyEntry<K, S>> {
        let mut shard = self.write(hash);
        let found = shard
            .find_entry(hash, |(_, held)| Arc::ptr_eq(held, state))
            .ok()?;
        if !remove(&found.get().1) {
            return None;
        }
        Some(found.remove().0)
    }

    /// Removes the slot of `key`, if it is there. Returns the slot, to be
    /// dropped outside the lock.
    pub(super) fn remove_key<Q: BorrowedKey<K> + ?Sized>(
        &self,
        hash: u64,
        key: &Q,
    ) -> Option<KeyEntry<K, S>> {
        let mut shard = self.write(hash);
        let found = shard.find_entry(hash, |(k, _)| key.names(k)).ok()?;
        Some(found.remove().0)
    }

    /// The number of keys.
    pub(super) fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| shard.read().unwrap_or_else(|e| e.into_inner()).len())
            .sum()
    }

    /// Visits every key, each shard under its shared lock.
    pub(super) fn for_each(&self, mut visit: impl FnMut(&K, &Arc<S>)) {
        for shard in &*self.shards {
            let shard = shard.read().unwrap_or_else(|e| e.into_inner());
            for (key, state) in shard.iter() {
                visit(key, state);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_found_by_borrow_and_removed_by_their_states_address() {
        let table: Table<String, u32> = Table::new();
        let hash = table.hash("a");
        let (made, ()) = table.insert("a".to_owned(), hash, 1, |_, _| ());
        let made = made.unwrap();
        let (again, found) = table.insert("a".to_owned(), hash, 2, |_, state| **state);
        assert!(again.is_none());
        assert_eq!(found, 1, "the first state stays");
        assert_eq!(
            table.get("a", hash, |k, state| (k.clone(), **state)),
            Some(("a".into(), 1))
        );
        assert_eq!(table.get("b", table.hash("b"), |_, state| **state), None);
        let other = Arc::new(1);
        assert!(
            table.remove_if(hash, &other, |_| true).is_none(),
            "another state"
        );
        assert!(table.remove_if(hash, &made, |_| false).is_none(), "refused");
        assert_eq!(table.len(), 1);
        let (key, _) = table.remove_if(hash, &made, |_| true).unwrap();
        assert_eq!(key, "a");
        assert_eq!(table.len(), 0);
    }
}
