use super::*;

#[test]
fn learned_bounds_are_checked_and_only_for_a_learned_limit() {
    let fields = |config: BulkheadConfig| {
        let mut found = Vec::new();
        let _ = config.check(&mut Problems::new("bulkhead", &mut found));
        found.iter().map(|p| p.to_string()).collect::<Vec<_>>()
    };
    assert_eq!(
        fields(BulkheadConfig::adaptive().bounds(0, 10)),
        ["bulkhead.bounds: the lower bound must be at least 1, got 0"]
    );
    assert_eq!(
        fields(BulkheadConfig::adaptive().bounds(10, 5)),
        ["bulkhead.bounds: the lower bound must not exceed the upper, got 10 and 5"]
    );
    assert_eq!(
        fields(BulkheadConfig::new(4).bounds(1, 10)),
        ["bulkhead.bounds: only for a learned limit (BulkheadConfig::adaptive), not a fixed one"]
    );
    assert!(fields(BulkheadConfig::adaptive().bounds(1, 200).queue(32)).is_empty());
}

#[test]
fn probe_settings_are_checked_and_only_for_a_learned_limit() {
    let fields = |config: BulkheadConfig| {
        let mut found = Vec::new();
        let _ = config.check(&mut Problems::new("bulkhead", &mut found));
        found.iter().map(|p| p.to_string()).collect::<Vec<_>>()
    };
    let bad = BulkheadConfig::adaptive()
        .bounds(1, 8)
        .probe_interval(Duration::from_micros(10))
        .probe_calls(0)
        .probe_limit(9);
    assert_eq!(
        fields(bad),
        [
            "bulkhead.probe_interval: must be at least 1ms, got 10µs",
            "bulkhead.probe_calls: must be at least 1, got 0",
            "bulkhead.probe_limit: must not exceed the upper bound (8), got 9",
        ]
    );
    assert_eq!(
        fields(BulkheadConfig::adaptive().probe_limit(0)),
        ["bulkhead.probe_limit: must be at least 1, got 0"]
    );
    assert_eq!(
        fields(
            BulkheadConfig::new(4)
                .probe_calls(5)
                .probe_jitter(Duration::ZERO)
        ),
        [
            "bulkhead.probe_calls: only for a learned limit (BulkheadConfig::adaptive), not a fixed one",
            "bulkhead.probe_jitter: only for a learned limit (BulkheadConfig::adaptive), not a fixed one",
        ]
    );
    // What is set reaches the tuning; the jitter defaults to 15 % of
    // the interval.
    let mut found = Vec::new();
    let settings = BulkheadConfig::adaptive()
        .probe_interval(Duration::from_secs(60))
        .probe_calls(50)
        .probe_limit(3)
        .check(&mut Problems::new("bulkhead", &mut found))
        .unwrap();
    let tuning = settings.learned.unwrap().tuning;
    assert_eq!(
        (tuning.probe_every, tuning.probe_jitter),
        (60_000_000_000, 9_000_000_000)
    );
    assert_eq!((tuning.probe_calls, tuning.probe_limit), (50, 3));
    // The longest interval there is does not overflow.
    assert!(fields(BulkheadConfig::adaptive().probe_interval(Duration::MAX)).is_empty());
}

/// Every problem `config` has, as its error names it.
fn problems_of(config: BulkheadConfig) -> Vec<String> {
    let mut found = Vec::new();
    let _ = config.check(&mut Problems::new("bulkhead", &mut found));
    found.iter().map(|p| p.to_string()).collect()
}

#[test]
fn codel_settings_that_could_never_act_are_refused_by_name() {
    let fields = problems_of;
    let codel = |target: u64, interval: Duration| {
        BulkheadConfig::new(4)
            .queue(8)
            .codel(Duration::from_millis(target), interval)
    };
    let ms = Duration::from_millis;
    assert!(fields(codel(5, ms(100))).is_empty());
    assert!(fields(codel(5, Duration::from_secs(60))).is_empty());
    for never in [
        codel(5, Duration::MAX),
        BulkheadConfig::new(4)
            .queue(8)
            .codel(Duration::MAX, Duration::MAX),
        codel(5, Duration::from_secs(61)),
    ] {
        let found = fields(never);
        assert!(
            found
                .iter()
                .any(|p| p.starts_with("bulkhead.codel: the interval must be at most 60s")),
            "{found:?}"
        );
    }
    for timeout in [ms(2), ms(5)] {
        let found = fields(codel(5, ms(100)).queue_timeout(timeout));
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with("bulkhead.queue_timeout: must be above CoDel's target"),
            "{found:?}"
        );
    }
    assert!(fields(codel(5, ms(100)).queue_timeout(ms(6))).is_empty());
    for newest_first in [false, true] {
        let found = fields(BulkheadConfig::new(4).queue(8).adaptive_lifo(newest_first));
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with("bulkhead.adaptive_lifo: only with CoDel"),
            "{found:?}"
        );
    }
    assert!(fields(codel(5, ms(100)).adaptive_lifo(false)).is_empty());
}

#[test]
fn bad_values_are_named() {
    let mut found = Vec::new();
    let config = BulkheadConfig::new(0).queue_timeout(Duration::ZERO);
    assert!(
        config
            .check(&mut Problems::new("bulkhead", &mut found))
            .is_none()
    );
    let found: Vec<String> = found.iter().map(|p| p.to_string()).collect();
    assert_eq!(
        found,
        [
            "bulkhead.max_concurrent: must be at least 1, got 0",
            "bulkhead.queue_timeout: must be above 0, got 0ns"
        ]
    );
}
