//! A throttle changed on a live key keeps its counts (a new ratio applies
//! to them), unless its window's length changed.

use std::time::Duration;

use portcullis::clock::ManualClock;
use portcullis::{Priority, ThrottleConfig, ThrottleManager};

fn failing_manager() -> ThrottleManager<String> {
    let manager = ThrottleManager::<String>::builder()
        .throttle(ThrottleConfig::new().ratio(2.0).min_rate(0.1))
        .clock(ManualClock::new())
        .random_source(|| 0.999_999)
        .build()
        .unwrap();
    for key in ["acme", "fresh"] {
        for _ in 0..10 {
            manager.try_acquire(key, Priority::HIGH).unwrap().success();
        }
        for _ in 0..40 {
            manager
                .try_acquire(key, Priority::HIGH)
                .unwrap()
                .overloaded();
        }
    }
    manager
}

#[test]
fn a_new_ratio_applies_to_the_counts_the_key_has() {
    let manager = failing_manager();
    let before = manager
        .key("acme")
        .rejection_probability(Priority::HIGH)
        .unwrap();
    assert!(before > 0.5, "{before}");
    manager
        .key("acme")
        .set_throttle(ThrottleConfig::new().ratio(4.0).min_rate(0.1))
        .unwrap();
    let after = manager
        .key("acme")
        .rejection_probability(Priority::HIGH)
        .unwrap();
    // 50 requests, 10 accepts, m = 6: (50 - 4·10) / 56 with the counts kept.
    assert!((after - 10.0 / 56.0).abs() < 1e-9, "{after}");
    assert_eq!(
        manager.key("fresh").rejection_probability(Priority::HIGH),
        Some(before),
        "another key keeps the default"
    );
}

#[test]
fn a_new_window_length_starts_the_counts_afresh() {
    let manager = failing_manager();
    let window = ThrottleConfig::new()
        .ratio(2.0)
        .min_rate(0.1)
        .window(Duration::from_secs(30));
    manager.key("acme").set_throttle(window).unwrap();
    assert_eq!(
        manager.key("acme").rejection_probability(Priority::HIGH),
        Some(0.0)
    );
    assert!(manager.try_acquire("acme", Priority::HIGH).is_ok());
}
