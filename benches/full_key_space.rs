//! A key space at its cap, four ways:
//!
//! 1. **single-thread flood**: 1,000,000 new keys, one thread, through a
//!    cap of 100,000, each key owing its token for a millisecond: the cost
//!    of a new key at the cap, and the worst single `check`;
//! 2. **nothing evictable**: a cap of 1,000,000 keys that all owe tokens
//!    for a minute: how long a new key waits to hear "full", alone and
//!    while another thread floods new keys;
//! 3. **a flood beside quiet keys**: a cap of 1,000,000 filled by keys that
//!    have been quiet for a while, one thread flooding new keys: how often,
//!    and how slowly, a legitimate new key is refused while evictable keys
//!    exist (it should never be);
//! 4. **the deferring flooder**: a cap of 100,000, one thread deferring new
//!    keys for 2 s for 6 s while, from 2 s on, another makes 2,000 new keys
//!    1 ms apart: how often each is refused (a fair key space refuses both
//!    alike).
//!
//! Run: `cargo bench --bench full_key_space` (about 40 s).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use portcullis::builder::KeySpaceConfig;
use portcullis::error::RejectReason;
use portcullis::{RateConfig, ThrottleManager};

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p) as usize]
}

fn main() {
    single_thread_flood();
    nothing_evictable();
    flood_beside_quiet_keys();
    deferring_flooder();
}

fn single_thread_flood() {
    const CAP: usize = 100_000;
    const KEYS: usize = 1_000_000;
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(1_000.0))
        .key_space(KeySpaceConfig::new().max_keys(CAP))
        .build()
        .unwrap();
    // The worst check while the key space fills (its tables grow), and
    // once it is full.
    let (mut worst_filling, mut worst_full, mut refused) = (Duration::ZERO, Duration::ZERO, 0);
    let started = Instant::now();
    for i in 0..KEYS {
        let one = Instant::now();
        refused += usize::from(manager.check(format!("flood-{i}").as_str()).is_err());
        let worst = if i < CAP {
            &mut worst_filling
        } else {
            &mut worst_full
        };
        *worst = (*worst).max(one.elapsed());
    }
    let per_key = started.elapsed() / KEYS as u32;
    println!(
        "single-thread flood, {KEYS} new keys through a cap of {CAP}: {per_key:?} a key, \
         worst check {worst_filling:?} filling, {worst_full:?} full, {refused} refused"
    );
}

fn nothing_evictable() {
    const CAP: usize = 1_000_000;
    // One call a minute: every key owes its token for a minute.
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(1.0 / 60.0))
        .key_space(KeySpaceConfig::new().max_keys(CAP))
        .build()
        .unwrap();
    for i in 0..CAP {
        manager.check(format!("owing-{i}").as_str()).unwrap();
    }
    let mut alone = Vec::new();
    for i in 0..2_000 {
        let started = Instant::now();
        let refused = manager.check(format!("new-{i}").as_str()).unwrap_err();
        alone.push(started.elapsed());
        assert_eq!(refused.reason(), RejectReason::KeySpaceFull);
    }
    alone.sort();
    println!(
        "nothing evictable, cap {CAP}: refused new key alone: median {:?}, worst {:?} (2,000 tries)",
        percentile(&alone, 0.5),
        percentile(&alone, 1.0)
    );
    let (flooded, under_flood, _) =
        beside_a_flood(&manager, Duration::from_secs(3), Duration::ZERO);
    println!(
        "  while another thread floods ({flooded} new keys in 3 s): median {:?}, p99 {:?}, worst {:?} ({} tries)",
        percentile(&under_flood, 0.5),
        percentile(&under_flood, 0.99),
        percentile(&under_flood, 1.0),
        under_flood.len()
    );
}

/// Floods `manager` with new keys from another thread for `length`, while
/// this one makes new keys `apart` from each other: the flood's count, each
/// legitimate check's time, and how many of them were refused.
fn beside_a_flood(
    manager: &ThrottleManager<String>,
    length: Duration,
    apart: Duration,
) -> (u64, Vec<Duration>, usize) {
    let flooding = Arc::new(AtomicBool::new(true));
    let flood = {
        let (manager, flooding) = (manager.clone(), Arc::clone(&flooding));
        std::thread::spawn(move || {
            let mut i = 0u64;
            while flooding.load(Ordering::Relaxed) {
                let _ = manager.check(format!("flood-{i}").as_str());
                i += 1;
            }
            i
        })
    };
    let (mut times, mut refused) = (Vec::new(), 0);
    let until = Instant::now() + length;
    let mut i = 0;
    while Instant::now() < until {
        let started = Instant::now();
        refused += usize::from(manager.check(format!("legit-{i}").as_str()).is_err());
        times.push(started.elapsed());
        i += 1;
        std::thread::sleep(apart);
    }
    flooding.store(false, Ordering::Relaxed);
    let flooded = flood.join().unwrap();
    times.sort();
    (flooded, times, refused)
}

fn flood_beside_quiet_keys() {
    const CAP: usize = 1_000_000;
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(1_000.0))
        .key_space(KeySpaceConfig::new().max_keys(CAP))
        .build()
        .unwrap();
    for i in 0..CAP {
        manager.check(format!("quiet-{i}").as_str()).unwrap();
    }
    std::thread::sleep(Duration::from_millis(50)); // every key quiet
    let (flooded, times, refused) =
        beside_a_flood(&manager, Duration::from_secs(3), Duration::from_micros(100));
    println!(
        "a flood beside quiet keys, cap {CAP} ({flooded} flood keys in 3 s): \
         legitimate new keys refused {refused} of {}; check median {:?}, p99 {:?}, worst {:?}",
        times.len(),
        percentile(&times, 0.5),
        percentile(&times, 0.99),
        percentile(&times, 1.0)
    );
}

fn deferring_flooder() {
    const CAP: usize = 100_000;
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(1.0).burst(1000))
        .key_space(KeySpaceConfig::new().max_keys(CAP))
        .build()
        .unwrap();
    let started = Instant::now();
    let flooding = Arc::new(AtomicBool::new(true));
    let flood_refused = Arc::new(AtomicU64::new(0));
    let flood = {
        let (manager, flooding, flood_refused) = (
            manager.clone(),
            Arc::clone(&flooding),
            Arc::clone(&flood_refused),
        );
        std::thread::spawn(move || {
            let mut i = 0u64;
            while flooding.load(Ordering::Relaxed) {
                let key = format!("flood-{i}");
                manager.key(&key).defer(Duration::from_secs(2));
                if manager.key(&key).rate().is_none() {
                    flood_refused.fetch_add(1, Ordering::Relaxed);
                }
                i += 1;
            }
            i
        })
    };
    std::thread::sleep(Duration::from_secs(2));
    let mut legit_refused = 0;
    let mut worst = Duration::ZERO;
    for j in 0..2_000 {
        let started = Instant::now();
        legit_refused += usize::from(manager.check(format!("legit-{j}").as_str()).is_err());
        worst = worst.max(started.elapsed());
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(Duration::from_secs(6).saturating_sub(started.elapsed()));
    flooding.store(false, Ordering::Relaxed);
    let flooded = flood.join().unwrap();
    let flood_refused = flood_refused.load(Ordering::Relaxed);
    println!(
        "the deferring flooder, cap {CAP}: flood refused {flood_refused} of {flooded} ({:.1} %), \
         legitimate refused {legit_refused} of 2000 ({:.1} %), worst legitimate check {worst:?}",
        100.0 * flood_refused as f64 / flooded as f64,
        100.0 * legit_refused as f64 / 2000.0
    );
}
