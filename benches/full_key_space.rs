//! A key space at its cap of 1,000,000 keys, every one of them still owing
//! tokens: how long a new key waits to hear "full", alone and while another
//! thread floods new keys.
//!
//! Run: `cargo bench --bench full_key_space` (about 10 s).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use portcullis::{RateConfig, ThrottleManager};

const CAP: usize = 1_000_000;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p) as usize]
}

fn main() {
    // One call a minute: every key owes its token for a minute.
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::new(1.0 / 60.0))
        .max_keys(CAP)
        .build()
        .unwrap();
    let filled = Instant::now();
    for i in 0..CAP {
        manager.check(format!("owing-{i}").as_str()).unwrap();
    }
    println!("filled {CAP} keys in {:?}", filled.elapsed());

    let mut alone = Vec::new();
    for i in 0..200 {
        let started = Instant::now();
        let refused = manager.check(format!("new-{i}").as_str()).unwrap_err();
        alone.push(started.elapsed());
        assert_eq!(refused.reason(), portcullis::RejectReason::KeySpaceFull);
    }
    alone.sort();
    println!(
        "refused new key, alone: median {:?}, worst {:?} (200 tries)",
        percentile(&alone, 0.5),
        percentile(&alone, 1.0)
    );

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
    let mut under_flood = Vec::new();
    let until = Instant::now() + Duration::from_secs(3);
    let mut i = 0;
    while Instant::now() < until {
        let started = Instant::now();
        let _ = manager.check(format!("legit-{i}").as_str());
        under_flood.push(started.elapsed());
        i += 1;
    }
    flooding.store(false, Ordering::Relaxed);
    let flooded = flood.join().unwrap();
    under_flood.sort();
    println!(
        "legitimate new key while another thread floods ({flooded} new keys in 3 s): \
         median {:?}, p99 {:?}, worst {:?} ({} tries)",
        percentile(&under_flood, 0.5),
        percentile(&under_flood, 0.99),
        percentile(&under_flood, 1.0),
        under_flood.len()
    );
}
