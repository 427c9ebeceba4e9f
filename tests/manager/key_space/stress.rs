//! Many threads making, using and holding keys at once in a key space four
//! times too small for them: whatever the interleaving, the cap holds, a
//! key with a call in flight is never evicted, every live key stays within
//! eviction's reach, and no room is lost or made up.

use std::sync::{Barrier, RwLock};
use std::time::Duration;

use portcullis::builder::KeySpaceConfig;
use portcullis::clock::ManualClock;
use portcullis::error::RejectReason;
use portcullis::manager::OwnedPermit;
use portcullis::{BulkheadConfig, Priority, RateConfig, ThrottleManager};

const CAP: usize = 64;
const KEYS: u64 = 4 * CAP as u64;
const THREADS: u64 = 4;
const OPS: usize = 20_000;

/// xorshift64: each thread's own reproducible sequence of operations.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

#[test]
fn concurrent_new_keys_at_the_cap_keep_every_invariant() {
    let _alone = crate::support::alone();
    let clock = ManualClock::new();
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(1_000.0)) // each call owes a token for 1 ms
        .bulkhead(BulkheadConfig::new(4))
        .key_space(
            KeySpaceConfig::new()
                .max_keys(CAP)
                .idle_ttl(Duration::from_secs(1)),
        )
        .clock(clock.clone())
        .build()
        .unwrap();
    let start = Barrier::new(THREADS as usize);
    let stop_all = RwLock::new(());
    std::thread::scope(|scope| {
        for thread in 0..THREADS {
            let (manager, clock, start, stop_all) = (&manager, &clock, &start, &stop_all);
            scope.spawn(move || {
                let mut rng = 0x9E37_79B9_7F4A_7C15 ^ (thread + 1);
                let mut held: Vec<(String, OwnedPermit)> = Vec::new();
                start.wait();
                for op in 0..OPS {
                    let running = stop_all.read().unwrap();
                    let key = format!("k{}", next(&mut rng) % KEYS);
                    match next(&mut rng) % 8 {
                        0..=3 => {
                            let _ = manager.check(&key);
                        }
                        4 | 5 if held.len() < 8 => {
                            if let Ok(permit) = manager.try_acquire_owned(&key, Priority::HIGH) {
                                held.push((key, permit));
                            }
                        }
                        6 => {
                            manager
                                .key(&key)
                                .defer(Duration::from_millis(next(&mut rng) % 5));
                        }
                        _ => {
                            if !held.is_empty() {
                                let (key, permit) = held.swap_remove(0);
                                let active = manager.key(&key).snapshot().and_then(|s| s.active);
                                assert!(
                                    active >= Some(1),
                                    "{key} was evicted with a call in flight"
                                );
                                drop(permit);
                            }
                        }
                    }
                    drop(running);
                    // `len` adds up the map's shards one by one, so while
                    // other threads move rooms from evicted keys to new
                    // ones it may count both: the cap is checked with every
                    // thread stopped (a failure poisons the lock, so the
                    // other threads fail too rather than wait).
                    if op % 1_000 == 999 {
                        let _stopped = stop_all.write().unwrap();
                        let live = manager.keys().len();
                        assert!(live <= CAP, "{live} live keys");
                        if thread == 0 {
                            // Every key not held goes idle: new keys at the
                            // cap then make room from idle keys.
                            clock.advance(Duration::from_millis(1_500));
                        }
                    }
                    if thread == 0 && op % 16 == 0 {
                        clock.advance(Duration::from_micros(500));
                    }
                }
                for (key, _permit) in &held {
                    assert!(manager.key(key).snapshot().and_then(|s| s.active) >= Some(1));
                }
            });
        }
    });

    // Every live key is within eviction's reach: once all are idle, the
    // owner's sweep finds every one.
    clock.advance(Duration::from_secs(2));
    let live = manager.keys().len();
    assert!(live > 0);
    assert_eq!(manager.keys().evict_idle(), live);
    assert_eq!(manager.keys().len(), 0);

    // No room was lost or made up: exactly the cap's worth of new keys fit.
    for i in 0..CAP {
        manager
            .check(&format!("after-{i}"))
            .unwrap_or_else(|refused| panic!("key {i} of {CAP} refused: {refused}"));
    }
    let refused = manager.check("one-too-many").unwrap_err();
    assert_eq!(refused.reason(), RejectReason::KeySpaceFull);
}
