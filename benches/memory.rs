//! Bytes per idle key: 1,000,000 String keys, resident memory before and
//! after, each library measured in a fresh process of its own so neither
//! inherits the other's freed memory. Keys are made by one `check` each;
//! for the last two rows by one call with its success at one priority
//! (what a key that has been used holds: its throttle counts that
//! priority), and by one at each of the four (every priority counted).
//!
//! Run: `cargo bench --bench memory`.

#[path = "support/composition.rs"]
mod composition;
#[path = "support/million_keys.rs"]
mod million_keys;

use std::num::NonZeroU32;
use std::process::Command;

use million_keys::{KEYS, keys, resident_bytes};

use governor::{Quota, RateLimiter};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use std::alloc::System;

/// Counts live allocations, for the key that fails and recovers: freed
/// memory stays resident, so only the allocator can tell it was given back.
#[global_allocator]
static ALLOCATOR: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;
use portcullis::builder::KeySpaceConfig;
use portcullis::{BulkheadConfig, Priority, RateConfig, ThrottleConfig, ThrottleManager};

/// Measures one library in this process; prints bytes per key.
fn measure(which: &str) {
    let keys = keys();
    let before = resident_bytes();
    match which {
        "portcullis"
        | "portcullis+throttle"
        | "portcullis+throttle+bulkhead"
        | "portcullis+used"
        | "portcullis+every-priority" => {
            // A burst of 4 lets a key take a call at each priority at once.
            let burst = if which == "portcullis+every-priority" {
                4
            } else {
                1
            };
            let builder = ThrottleManager::<String>::builder()
                .rate(RateConfig::adaptive(10.0).burst(burst))
                .key_space(KeySpaceConfig::new().max_keys(KEYS));
            let builder = match which {
                "portcullis" => builder,
                "portcullis+throttle" => builder.throttle(ThrottleConfig::new()),
                _ => builder
                    .throttle(ThrottleConfig::new())
                    .bulkhead(BulkheadConfig::new(10).queue(50)),
            };
            let manager = builder.build().unwrap();
            for key in &keys {
                match which {
                    "portcullis+used" => {
                        let permit = manager.try_acquire(key.as_str(), Priority::MEDIUM).unwrap();
                        permit.success();
                    }
                    "portcullis+every-priority" => {
                        for level in 0..4 {
                            let priority = Priority::new(level);
                            manager
                                .try_acquire(key.as_str(), priority)
                                .unwrap()
                                .success();
                        }
                    }
                    _ => manager.check(key.as_str()).unwrap(),
                }
            }
            assert_eq!(manager.keys().len(), KEYS);
            report(before);
            std::hint::black_box(manager);
        }
        "governor" => {
            let limiter = RateLimiter::keyed(Quota::per_second(NonZeroU32::new(10).unwrap()));
            for key in &keys {
                limiter.check_key(key).unwrap();
            }
            assert_eq!(limiter.len(), KEYS);
            report(before);
            std::hint::black_box(limiter);
        }
        "composition" => {
            let composed = composition::Composition::new(10, 10);
            for key in &keys {
                assert!(composed.call(key, 0.5));
            }
            report(before);
            std::hint::black_box(composed);
        }
        "portcullis+recovered" => {
            // Time moves only when told.
            let clock = portcullis::clock::ManualClock::new();
            let manager = ThrottleManager::<String>::builder()
                .rate(RateConfig::adaptive(10.0))
                .throttle(ThrottleConfig::new())
                .bulkhead(BulkheadConfig::new(10).queue(50))
                .clock(clock.clone())
                .key_space(KeySpaceConfig::new().max_keys(KEYS))
                .build()
                .unwrap();
            let region = Region::new(ALLOCATOR);
            let live = || {
                let change = region.change();
                (change.bytes_allocated as f64 - change.bytes_deallocated as f64) / KEYS as f64
            };
            let call = |outcome: portcullis::outcome::Outcome| {
                for key in &keys {
                    manager
                        .try_acquire(key.as_str(), Priority::MEDIUM)
                        .unwrap()
                        .report(outcome);
                }
            };
            call(portcullis::outcome::Outcome::Success);
            let healthy = live();
            clock.advance(std::time::Duration::from_secs(1));
            call(portcullis::outcome::Outcome::Overloaded);
            let failing = live();
            // A window (a minute) without a failure, then a success a key.
            clock.advance(std::time::Duration::from_secs(61));
            call(portcullis::outcome::Outcome::Success);
            let recovered = live();
            println!("{healthy:.0} {failing:.0} {recovered:.0}");
            std::hint::black_box(manager);
        }
        other => panic!("unknown library {other}"),
    }
}

fn report(before: u64) {
    let per_key = (resident_bytes() - before) as f64 / KEYS as f64;
    println!("{per_key:.0}");
}

fn main() {
    if let Some(which) = std::env::args().nth(1).filter(|a| !a.starts_with('-')) {
        return measure(&which);
    }
    let exe = std::env::current_exe().unwrap();
    let run = |which: &str| -> f64 {
        let out = Command::new(&exe).arg(which).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
    };
    let governor = run("governor");
    let composed = run("composition");
    let portcullis = run("portcullis");
    let throttled = run("portcullis+throttle");
    let all_three = run("portcullis+throttle+bulkhead");
    let used = run("portcullis+used");
    let every_priority = run("portcullis+every-priority");
    let out = Command::new(&exe)
        .arg("portcullis+recovered")
        .output()
        .unwrap();
    let live: Vec<f64> = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    println!("bytes per idle key, {KEYS} String keys (key storage included):");
    println!("  governor keyed (DashMap)         {governor:>6.0} B");
    println!(
        "  composition: governor direct + Semaphore + SRE counters, one DashMap entry a key: {composed:.0} B"
    );
    println!(
        "  portcullis, rate                 {portcullis:>6.0} B   {:.2}x governor",
        portcullis / governor
    );
    println!(
        "  portcullis, rate + throttle      {throttled:>6.0} B   {:.2}x governor",
        throttled / governor
    );
    println!(
        "  portcullis, all three controls   {all_three:>6.0} B   {:.2}x governor",
        all_three / governor
    );
    println!(
        "  all three, one success a key     {used:>6.0} B   {:.2}x governor",
        used / governor
    );
    println!(
        "  all three, a success a priority  {every_priority:>6.0} B   {:.2}x governor",
        every_priority / governor
    );
    println!(
        "  all three against the composition: idle {:.2}x, used {:.2}x",
        all_three / composed,
        used / composed
    );
    println!("live bytes a key (the allocator's count, without its rounding), all three controls:");
    println!(
        "  healthy {:.0} B, failed once {:.0} B, a window later {:.0} B",
        live[0], live[1], live[2]
    );
}
