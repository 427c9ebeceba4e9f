//! A flood of distinct keys (client IPs, user ids from untrusted input)
//! through a capped manager: the cap holds, memory stays bounded, and the
//! flood cannot reset the limit of a key that still owes tokens, even when
//! that key is the least recently used one.
//!
//! The memory test takes `support::alone()`, so the process's resident
//! memory is its own.

use std::time::Duration;

use portcullis::builder::KeySpaceConfig;
use portcullis::clock::ManualClock;
use portcullis::{RateConfig, ThrottleManager};

const KEYS: usize = 1_000_000;
const CAP: usize = 10_000;

fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

#[test]
fn a_million_keys_through_a_cap_of_ten_thousand() {
    let _alone = crate::support::alone();
    let clock = ManualClock::new();
    let manager = ThrottleManager::<String>::builder()
        .rate(
            RateConfig::adaptive(1_000.0)
                .bounds(0.001, 1_000.0)
                .decrease_by(999.999),
        )
        .key_space(KeySpaceConfig::new().max_keys(CAP))
        .clock(clock.clone())
        .build()
        .unwrap();
    // The victim: rate at the floor, one call made, 1000 s of debt.
    manager.decrement("victim").unwrap();
    manager.check("victim").unwrap();

    let before = resident_bytes();
    let mut max_len = 0;
    let mut key = String::new();
    for i in 0..KEYS {
        key.clear();
        use std::fmt::Write;
        write!(key, "10.{}.{}.{}", i >> 16, (i >> 8) & 255, i & 255).unwrap();
        // Each new key owes one token (1 ms) after its call.
        manager.check(key.as_str()).unwrap();
        clock.advance(Duration::from_micros(2));
        if i % 997 == 0 {
            max_len = max_len.max(manager.keys().len());
        }
    }
    let after = resident_bytes();

    assert!(max_len <= CAP, "live keys reached {max_len}");
    assert!(manager.keys().len() <= CAP);
    assert!(
        manager.keys().len() > CAP / 2,
        "the cap should be used, not emptied"
    );
    // The flood did not reset the victim's limit.
    assert_eq!(manager.key("victim").rate(), Some(0.001));
    assert!(manager.check("victim").unwrap_err().retry_after() > Some(Duration::from_secs(990)));
    if let (Some(before), Some(after)) = (before, after) {
        // 10,000 keys take about 2 MB; 1,000,000 would take over 100 MB.
        let grown = after.saturating_sub(before);
        assert!(grown < 16 << 20, "resident memory grew by {grown} bytes");
    }

    // A second flood of keys that each owe even longer than the victim: once
    // the first flood's quiet keys have made room, every live key owes, and
    // the victim is the least recently quiet of them. It is still not
    // evicted: new keys are refused instead.
    clock.advance(Duration::from_secs(1)); // the first flood's debts are paid
    let (mut admitted, mut refused) = (0, 0);
    for i in 0..CAP + 2_000 {
        key.clear();
        use std::fmt::Write;
        write!(key, "flood-2-{i}").unwrap();
        if manager.decrement(key.as_str()).is_none() {
            refused += 1;
            assert_eq!(
                manager.check(key.as_str()).unwrap_err().reason(),
                portcullis::error::RejectReason::KeySpaceFull
            );
            continue;
        }
        manager.check(key.as_str()).unwrap(); // owes 1000 s from now
        admitted += 1;
    }
    assert_eq!(
        (admitted, refused),
        (CAP - 1, 2_001),
        "every room but the victim's was taken, then new keys were refused"
    );
    assert_eq!(manager.keys().len(), CAP);
    assert_eq!(manager.key("victim").rate(), Some(0.001));
    assert!(manager.check("victim").unwrap_err().retry_after() > Some(Duration::from_secs(990)));
}

/// A flood of new keys from one thread, while evictable keys remain, never
/// refuses another thread's new keys: each new key makes its own room, no
/// caller is turned away because another is making room.
#[test]
fn a_flood_does_not_starve_other_new_keys_while_keys_can_go() {
    const QUIET: usize = 20_000;
    const EACH: usize = 8_000;
    let _alone = crate::support::alone();
    let clock = ManualClock::new();
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(1_000.0)) // each call owes its token for 1 ms
        .key_space(KeySpaceConfig::new().max_keys(QUIET))
        .clock(clock.clone())
        .build()
        .unwrap();
    for i in 0..QUIET {
        manager.check(&format!("quiet-{i}")).unwrap();
    }
    clock.advance(Duration::from_secs(1)); // every one of them may go now
    let start = std::sync::Barrier::new(2);
    let refused = |prefix: &str| {
        start.wait();
        (0..EACH)
            .filter(|i| manager.check(&format!("{prefix}-{i}")).is_err())
            .count()
    };
    let (flood, legitimate) = std::thread::scope(|scope| {
        let flood = scope.spawn(|| refused("flood"));
        let legitimate = refused("legit");
        (flood.join().unwrap(), legitimate)
    });
    // 16,000 of the 20,000 quiet keys made room; none of the new keys, which
    // still owe, did.
    assert_eq!((flood, legitimate), (0, 0), "new keys refused");
    assert_eq!(manager.keys().len(), QUIET);
    assert!(manager.key("flood-0").rate().is_some() && manager.key("legit-0").rate().is_some());
}
