//! What a key's bytes could be in other layouts of the key space: the
//! same `String` keys as `benches/memory.rs`, each layout in a fresh
//! process, with plain words standing in for the key's state (40 bytes
//! for the rate and 8 for the link to the rest; 136 more with the
//! throttle and the bulkhead). The first rows model the registry before the
//! lean key issue (a `DashMap` and a queue of key copies); the others are
//! the layouts that issue weighed: a table of our own whose per-key `Arc`
//! holds the key too, so the eviction queue needs no copy of it. (The
//! registry now keeps the key in the table's slot and the queue holds the
//! key's hash and its state's `Arc`: see benches/README.md.)
//!
//! Run: `cargo bench --bench key_layouts`.

#[path = "support/million_keys.rs"]
mod million_keys;

use std::collections::VecDeque;
use std::hash::BuildHasher;
use std::process::Command;

use million_keys::{KEYS, keys, resident_bytes};
use std::sync::RwLock;
use std::sync::atomic::AtomicU64;

use dashmap::DashMap;
use hashbrown::HashTable;
use triomphe::Arc;

/// The rate cell: 40 bytes.
type RateCell = [u64; 5];
/// The throttle's window, the bulkhead, the retry budget, the key's own
/// settings: 136 bytes.
type Extras = [u64; 17];
/// A key's state as today: the rate cell and a link to the extras, 48
/// bytes.
type KeyState = (RateCell, Option<Box<Extras>>);

fn rate_only() -> KeyState {
    (RateCell::default(), None)
}

fn all_three() -> KeyState {
    (RateCell::default(), Some(Box::default()))
}

/// A key and its state in one allocation.
struct Entry<S> {
    key: String,
    #[allow(dead_code)] // stands in for the key's state: only its size counts
    state: S,
}

/// A sharded table of entries, found by hash and compared by key: what a
/// key space of our own would hold, without the eviction queue (whose
/// entries would be the `Arc`s' addresses, or the `Arc`s themselves).
struct OwnTable<S> {
    shards: Vec<RwLock<HashTable<Arc<Entry<S>>>>>,
    hasher: foldhash::fast::RandomState,
}

impl<S> OwnTable<S> {
    fn new() -> Self {
        Self {
            shards: (0..64).map(|_| RwLock::new(HashTable::new())).collect(),
            hasher: foldhash::fast::RandomState::default(),
        }
    }

    fn insert(&self, key: &str, state: S) {
        let hash = self.hasher.hash_one(key);
        let mut shard = self.shards[(hash >> 58) as usize].write().unwrap();
        let entry = Arc::new(Entry {
            key: key.to_owned(),
            state,
        });
        shard.insert_unique(hash, entry, |entry| {
            self.hasher.hash_one(entry.key.as_str())
        });
    }
}

/// Today's registry: the map holds the key and an `Arc` of the state, and
/// the eviction queue a copy of the key.
fn todays<S: 'static>(keys: &[String], state: impl Fn() -> S) -> Box<dyn std::any::Any> {
    let map = DashMap::<String, Arc<S>>::new();
    let mut queue = VecDeque::new();
    for key in keys {
        map.insert(key.clone(), Arc::new(state()));
        queue.push_back(key.clone());
    }
    Box::new((map, queue))
}

fn own<S: 'static>(keys: &[String], state: impl Fn() -> S) -> Box<dyn std::any::Any> {
    let table = OwnTable::new();
    for key in keys {
        table.insert(key, state());
    }
    Box::new(table)
}

const LAYOUTS: [&str; 6] = [
    "governor's: DashMap<String, AtomicU64>",
    "today's, rate only",
    "today's, all three (extras boxed)",
    "own table, rate only",
    "own table, all three, extras boxed",
    "own table, all three, extras inline",
];

fn measure(layout: &str) {
    let keys = keys();
    let before = resident_bytes();
    let kept: Box<dyn std::any::Any> = match layout {
        "governor's: DashMap<String, AtomicU64>" => {
            let map = DashMap::<String, AtomicU64>::new();
            for key in &keys {
                map.insert(key.clone(), AtomicU64::new(0));
            }
            Box::new(map)
        }
        "today's, rate only" => todays(&keys, rate_only),
        "today's, all three (extras boxed)" => todays(&keys, all_three),
        "own table, rate only" => own(&keys, rate_only),
        "own table, all three, extras boxed" => own(&keys, all_three),
        "own table, all three, extras inline" => {
            own(&keys, || (RateCell::default(), Extras::default()))
        }
        other => panic!("no layout {other:?}"),
    };
    let bytes = resident_bytes() - before;
    println!("{layout:<40} {:>5.0} B a key", bytes as f64 / KEYS as f64);
    std::hint::black_box(kept);
}

fn main() {
    if let Ok(layout) = std::env::var("KEY_LAYOUT") {
        measure(&layout);
        return;
    }
    let exe = std::env::current_exe().expect("the bench's own path");
    for layout in LAYOUTS {
        let status = Command::new(&exe)
            .env("KEY_LAYOUT", layout)
            .status()
            .expect("a fresh process");
        assert!(status.success(), "{layout}");
    }
}
