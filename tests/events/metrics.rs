//! The `metrics` feature: counters and gauges through the facade.
#![cfg(feature = "metrics")]

use std::collections::HashMap;

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use portcullis::clock::ManualClock;
use portcullis::{BulkheadConfig, Priority, RateConfig, ThrottleManager};

/// Metric values by name and sorted labels.
type Recorded = HashMap<(String, Vec<(String, String)>), DebugValue>;

/// Every metric recorded by `run`, by name and sorted labels.
fn record(run: impl FnOnce()) -> Recorded {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, run);
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let mut labels: Vec<(String, String)> = key
                .key()
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            labels.sort();
            ((key.key().name().to_owned(), labels), value)
        })
        .collect()
}

fn counter(metrics: &Recorded, name: &str, labels: &[(&str, &str)]) -> u64 {
    let labels = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    match metrics.get(&(name.to_string(), labels)) {
        Some(DebugValue::Counter(n)) => *n,
        other => panic!("{name}: {other:?}"),
    }
}

fn gauge(metrics: &Recorded, name: &str, labels: &[(&str, &str)]) -> f64 {
    let labels = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    match metrics.get(&(name.to_string(), labels)) {
        Some(DebugValue::Gauge(g)) => g.into_inner(),
        other => panic!("{name}: {other:?}"),
    }
}

fn manager(per_key: bool) -> ThrottleManager<String> {
    ThrottleManager::<String>::builder()
        .rate(RateConfig::new(10.0).burst(3).decrement(1.0))
        .bulkhead(BulkheadConfig::new(2))
        .key_names(|key: &String| key.clone())
        .metrics_per_key(per_key)
        .clock(ManualClock::new())
        .build()
        .unwrap()
}

#[test]
fn admissions_rejections_outcomes_and_load_without_key_labels() {
    let _events = crate::support::capture();
    let manager = manager(false);
    let metrics = record(|| {
        let a = manager.try_acquire("db", Priority::HIGH).unwrap();
        let b = manager.try_acquire("db", Priority::HIGH).unwrap();
        assert!(manager.try_acquire("db", Priority::HIGH).is_err()); // bulkhead full
        a.success();
        b.failure();
        let c = manager.try_acquire("db", Priority::HIGH).unwrap();
        assert!(manager.try_acquire("db", Priority::HIGH).is_err()); // rate: burst spent
        drop(c);
    });
    assert_eq!(counter(&metrics, "portcullis_admitted_total", &[]), 3);
    assert_eq!(
        counter(&metrics, "portcullis_rejected_total", &[("reason", "full")]),
        1
    );
    assert_eq!(
        counter(
            &metrics,
            "portcullis_rejected_total",
            &[("reason", "rate_limited")]
        ),
        1
    );
    assert_eq!(
        counter(
            &metrics,
            "portcullis_outcomes_total",
            &[("outcome", "success")]
        ),
        1
    );
    assert_eq!(
        counter(
            &metrics,
            "portcullis_outcomes_total",
            &[("outcome", "overloaded")]
        ),
        1
    );
    assert_eq!(
        counter(
            &metrics,
            "portcullis_outcomes_total",
            &[("outcome", "neutral")]
        ),
        1
    );
    assert_eq!(gauge(&metrics, "portcullis_active", &[]), 0.0);
    assert!(
        !metrics.keys().any(|(name, _)| name == "portcullis_rate"),
        "no rate without key labels"
    );
}

#[test]
fn per_key_labels_on_request() {
    let _events = crate::support::capture();
    let manager = manager(true);
    let mut held = None;
    let metrics = record(|| {
        held = Some(manager.try_acquire("db", Priority::HIGH).unwrap());
        manager.decrement("db");
    });
    let key = [("key", "db")];
    assert_eq!(counter(&metrics, "portcullis_admitted_total", &key), 1);
    assert_eq!(gauge(&metrics, "portcullis_active", &key), 1.0);
    assert_eq!(gauge(&metrics, "portcullis_rate", &key), 9.0);
    drop(held);
}

#[test]
fn per_key_labels_need_key_names() {
    let _events = crate::support::capture();
    let err = ThrottleManager::<String>::builder()
        .rate(RateConfig::new(10.0))
        .metrics_per_key(true)
        .build()
        .unwrap_err();
    assert_eq!(err.problems()[0].field(), "metrics_per_key");
}
