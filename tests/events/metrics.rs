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
        .rate(RateConfig::adaptive(10.0).burst(3).decrease_by(1.0))
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
        b.overloaded();
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
        .rate(RateConfig::adaptive(10.0))
        .metrics_per_key(true)
        .build()
        .unwrap_err();
    assert_eq!(err.problems()[0].field(), "metrics_per_key");
}

#[test]
fn two_named_managers_keep_their_series_apart() {
    let _events = crate::support::capture();
    let named = |name: &str| {
        ThrottleManager::<String>::builder()
            .bulkhead(BulkheadConfig::new(1))
            .name(name)
            .clock(ManualClock::new())
            .build()
            .unwrap()
    };
    let (hosts, database) = (named("hosts"), named("database"));
    let metrics = record(|| {
        hosts.try_acquire("a", Priority::HIGH).unwrap().success();
        hosts.try_acquire("b", Priority::HIGH).unwrap().success();
        let held = database.try_acquire("db", Priority::HIGH).unwrap();
        assert!(database.try_acquire("db", Priority::HIGH).is_err());
        drop(held);
    });
    let hosts = [("manager", "hosts")];
    assert_eq!(counter(&metrics, "portcullis_admitted_total", &hosts), 2);
    assert_eq!(
        counter(
            &metrics,
            "portcullis_admitted_total",
            &[("manager", "database")]
        ),
        1
    );
    let full = [("manager", "database"), ("reason", "full")];
    assert_eq!(counter(&metrics, "portcullis_rejected_total", &full), 1);
    assert!(!metrics.contains_key(&("portcullis_admitted_total".to_owned(), Vec::new())));
}

/// The waits a call made, by reason: how many and how long in all.
fn waits(metrics: &Recorded, reason: &str) -> (usize, f64) {
    let labels = vec![("reason".to_owned(), reason.to_owned())];
    match metrics.get(&("portcullis_wait_seconds".to_owned(), labels)) {
        Some(DebugValue::Histogram(values)) => {
            (values.len(), values.iter().map(|v| v.into_inner()).sum())
        }
        other => panic!("{reason}: {other:?}"),
    }
}

#[test]
fn time_spent_waiting_is_a_histogram_by_what_was_waited_for() {
    let _events = crate::support::capture();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    let _paused = runtime.enter(); // the clock reads the runtime's paused time
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(10.0).burst(1))
        .bulkhead(BulkheadConfig::new(1).queue(1))
        .clock(portcullis::clock::TokioClock::new())
        .build()
        .unwrap();
    let metrics = record(|| {
        runtime.block_on(async {
            // The second call waits 100 ms for its token.
            manager
                .acquire("api", Priority::HIGH)
                .await
                .unwrap()
                .success();
            let held = manager.acquire("api", Priority::HIGH).await.unwrap();
            // The third waits for its token (100 ms, to 0.2 s), then in
            // the queue until the held slot is given back (at 0.45 s).
            let third = manager.acquire("api", Priority::HIGH);
            let release = async {
                tokio::time::sleep(std::time::Duration::from_millis(350)).await;
                drop(held);
            };
            let (third, ()) = tokio::join!(third, release);
            third.unwrap().success();
        });
    });
    let (rate_waits, rate_seconds) = waits(&metrics, "rate");
    assert_eq!(rate_waits, 2);
    // Each waits about 100 ms; a call in the key's line takes its turn up
    // to a few milliseconds before its token is due.
    assert!((0.18..=0.2).contains(&rate_seconds), "{rate_seconds}");
    let (queue_waits, queue_seconds) = waits(&metrics, "queue");
    assert_eq!(queue_waits, 1);
    assert!((0.245..=0.26).contains(&queue_seconds), "{queue_seconds}");
}

#[test]
fn every_series_is_described() {
    let _events = crate::support::capture();
    let manager = manager(false);
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        manager.try_acquire("db", Priority::HIGH).unwrap().success();
    });
    let described: Vec<_> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(_, _, description, _)| description.is_some())
        .map(|(key, ..)| key.key().name().to_owned())
        .collect();
    assert!(
        described.contains(&"portcullis_admitted_total".to_owned()),
        "{described:?}"
    );
    assert!(
        described.contains(&"portcullis_outcomes_total".to_owned()),
        "{described:?}"
    );
}
