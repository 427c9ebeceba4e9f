//! One admission pipeline: the same call refused (or admitted) through
//! `try_acquire` and through `acquire` meets the same control, with the same
//! reason, the same events, the same counters and the same trace in the
//! key's state. Each scenario runs twice on identical managers, once per
//! path, and the two runs are compared.
//!
//! It holds the binary's capture for its whole run: events go to one
//! global subscriber, which must not see another test's events.

use crate::support;

use std::time::Duration;

use portcullis::builder::ThrottleManagerBuilder;
use portcullis::clock::ManualClock;
use portcullis::deadline::TimeLimits;
use portcullis::error::RejectReason;
use portcullis::manager::Permit;
use portcullis::priority::OutOfRange;
use portcullis::{BulkheadConfig, Priority, RateConfig, Rejected, ThrottleConfig, ThrottleManager};
use support::Captured;

/// What one way in produced: the result, the events, the counters, and
/// the key's state afterwards.
#[derive(Debug, PartialEq)]
struct Seen {
    result: Result<Priority, Rejected>,
    events: Vec<String>,
    counters: Vec<(String, u64)>,
    snapshot: Option<portcullis::manager::KeySnapshot>,
}

#[derive(Debug, Clone, Copy)]
enum Way {
    TryAcquire,
    Acquire,
}

/// Builds a manager, brings it to the scenario's state, then makes one
/// call to "key" at `priority` the given way.
fn run(
    way: Way,
    captured: &Captured,
    build: &dyn Fn() -> ThrottleManagerBuilder<String>,
    prepare: &dyn Fn(&ThrottleManager<String>) -> Vec<Permit<'static>>,
    priority: Priority,
) -> Seen {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    let manager = build()
        .clock(ManualClock::new())
        .key_names(|key: &String| key.clone())
        .build()
        .unwrap();
    let _held = prepare(&manager);
    captured.take();
    let mut result = None;
    let counters = counters(|| {
        let admitted = match way {
            Way::TryAcquire => manager.try_acquire("key", priority).map(|p| p.priority()),
            Way::Acquire => runtime
                .block_on(async {
                    tokio::time::timeout(Duration::from_secs(60), manager.acquire("key", priority))
                        .await
                })
                .expect("acquire waited, where try_acquire could not")
                .map(|p| p.priority()),
        };
        result = Some(admitted);
    });
    Seen {
        result: result.unwrap(),
        events: captured.take(),
        counters,
        snapshot: manager.key("key").snapshot(),
    }
}

#[cfg(feature = "metrics")]
fn counters(run: impl FnOnce()) -> Vec<(String, u64)> {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, run);
    let mut counters: Vec<(String, u64)> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter_map(|(key, _, _, value)| match value {
            DebugValue::Counter(n) => Some((format!("{:?}", key.key()), n)),
            _ => None,
        })
        .collect();
    counters.sort();
    counters
}

#[cfg(not(feature = "metrics"))]
fn counters(run: impl FnOnce()) -> Vec<(String, u64)> {
    run();
    Vec::new()
}

#[test]
fn every_refusal_and_admission_is_the_same_through_try_acquire_and_acquire() {
    let (_one_at_a_time, captured) = support::capture();

    type Build = Box<dyn Fn() -> ThrottleManagerBuilder<String>>;
    type Prepare = Box<dyn Fn(&ThrottleManager<String>) -> Vec<Permit<'static>>>;
    let none: fn(&ThrottleManager<String>) -> Vec<Permit<'static>> = |_| Vec::new();
    let scenarios: Vec<(&str, Build, Prepare, Priority, Option<RejectReason>)> = vec![
        (
            "the throttle sheds a failing key's call",
            Box::new(|| {
                ThrottleManager::builder()
                    .throttle(ThrottleConfig::new())
                    .random_source(|| 0.0)
            }),
            Box::new(|manager| {
                for _ in 0..50 {
                    manager.decrement("key");
                }
                Vec::new()
            }),
            Priority::LOW,
            Some(RejectReason::Throttled),
        ),
        (
            "the rate refuses a token further ahead than the call waits",
            Box::new(|| {
                ThrottleManager::builder()
                    .rate(RateConfig::adaptive(10.0))
                    .time_limits(TimeLimits::new().max_wait(Duration::ZERO))
            }),
            Box::new(|manager| {
                manager.check("key").unwrap(); // the next token is 100 ms away
                Vec::new()
            }),
            Priority::MEDIUM,
            Some(RejectReason::RateLimited),
        ),
        (
            "a full bulkhead with no queue refuses",
            Box::new(|| ThrottleManager::builder().bulkhead(BulkheadConfig::new(1))),
            Box::new(|manager| {
                let owned = manager.try_acquire_owned("key", Priority::HIGH).unwrap();
                vec![owned]
            }),
            Priority::HIGH,
            Some(RejectReason::Full),
        ),
        (
            "a priority out of range is refused under OutOfRange::Reject",
            Box::new(|| {
                ThrottleManager::builder()
                    .rate(RateConfig::adaptive(10.0))
                    .out_of_range(OutOfRange::Reject)
            }),
            Box::new(none),
            Priority::new(9),
            Some(RejectReason::InvalidPriority),
        ),
        (
            "the call that takes the bulkhead's last slot is admitted and reported",
            Box::new(|| {
                ThrottleManager::builder()
                    .rate(RateConfig::adaptive(10.0).burst(2))
                    .throttle(ThrottleConfig::new())
                    .bulkhead(BulkheadConfig::new(2).queue(4))
            }),
            Box::new(|manager| vec![manager.try_acquire_owned("key", Priority::LOW).unwrap()]),
            Priority::MEDIUM_HIGH,
            None,
        ),
    ];
    for (name, build, prepare, priority, expected) in &scenarios {
        let now = run(Way::TryAcquire, &captured, build, prepare, *priority);
        let waiting = run(Way::Acquire, &captured, build, prepare, *priority);
        assert_eq!(
            now.result.as_ref().err().map(Rejected::reason),
            *expected,
            "{name}: {now:#?}"
        );
        assert_eq!(now, waiting, "{name}: try_acquire and acquire differ");
        if cfg!(feature = "metrics") {
            assert!(!now.counters.is_empty(), "{name}: nothing counted");
        }
    }
    // The events the scenarios are about were seen at all (the comparison
    // above would pass if neither path emitted anything).
    let shed = run(
        Way::Acquire,
        &captured,
        &scenarios[0].1,
        &scenarios[0].2,
        Priority::LOW,
    );
    assert!(
        shed.events
            .iter()
            .any(|l| l.contains("throttle started shedding") && l.contains(r#"key="key""#)),
        "{:#?}",
        shed.events
    );
    let filled = run(
        Way::Acquire,
        &captured,
        &scenarios[4].1,
        &scenarios[4].2,
        Priority::MEDIUM_HIGH,
    );
    assert!(
        filled.events.iter().any(|l| l.contains("bulkhead full")),
        "{:#?}",
        filled.events
    );
}
