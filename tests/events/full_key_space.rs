//! A full key space under a flood of new keys: refusals answer from what the
//! last scan found, instead of scanning every key again.
//!
//! It counts the "key space full" debug events, one per scan, through the
//! binary's one subscriber, holding its capture.

use crate::support;

use std::time::Duration;

use portcullis::builder::KeySpaceConfig;
use portcullis::clock::ManualClock;
use portcullis::{RateConfig, ThrottleManager};

#[test]
fn refused_new_keys_do_not_rescan_the_key_space() {
    let (_one_at_a_time, events) = support::capture();
    let clock = ManualClock::new();
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(1.0))
        .key_space(KeySpaceConfig::new().max_keys(1_000))
        .clock(clock.clone())
        .build()
        .unwrap();
    // Every key owes its one token for a second: none can be evicted.
    for i in 0..1_000 {
        manager.check(format!("owing-{i}").as_str()).unwrap();
    }
    for i in 0..10_000 {
        let refused = manager.check(format!("new-{i}").as_str()).unwrap_err();
        assert_eq!(
            refused.reason(),
            portcullis::error::RejectReason::KeySpaceFull
        );
        assert!(refused.retry_after().unwrap() <= Duration::from_secs(1));
    }
    let scans = events
        .lines()
        .iter()
        .filter(|line| line.contains("no key evictable"))
        .count();
    assert_eq!(
        scans, 1,
        "10,000 refusals scanned the key space {scans} times"
    );

    // Once the first keys can go, a new key makes room at once.
    clock.advance(Duration::from_secs(1));
    assert!(manager.check("new-after").is_ok());
    assert!(manager.keys().len() <= 1_000);
}
