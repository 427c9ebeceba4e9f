//! What a manager tells the outside: tracing events at the turns, and
//! snapshots a health endpoint can return as JSON.

use crate::support;

use std::time::Duration;

use portcullis::{BulkheadConfig, Priority, RateConfig, ThrottleConfig, ThrottleManager};

#[tokio::test(start_paused = true)]
async fn the_rate_reports_its_turns_with_the_key() {
    let (_one_at_a_time, captured) = support::capture();
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(10.0).increase_by(1.0).decrease_by(2.0))
        .key_names(|key: &String| key.clone())
        .build()
        .unwrap();
    manager.increment("api");
    manager.increment("api"); // still rising: no event
    manager.decrement("api"); // turned down
    manager.decrement("api"); // still falling: no event
    manager
        .try_acquire("api", Priority::HIGH)
        .unwrap()
        .success(); // turned up, via a permit
    let lines = captured.lines();
    let turns: Vec<&String> = lines.iter().filter(|l| l.contains("rate turned")).collect();
    assert_eq!(turns.len(), 2, "{lines:#?}");
    assert!(
        turns[0].contains("rate turned down") && turns[0].contains(r#"key="api""#),
        "{}",
        turns[0]
    );
    assert!(
        turns[0].contains("from=12.0") && turns[0].contains("to=10.0"),
        "{}",
        turns[0]
    );
    assert!(
        turns[1].contains("rate turned up") && turns[1].contains(r#"key="api""#),
        "{}",
        turns[1]
    );
}

#[tokio::test(start_paused = true)]
async fn the_throttle_reports_when_it_starts_and_stops_shedding() {
    let (_one_at_a_time, captured) = support::capture();
    let manager = ThrottleManager::<String>::builder()
        .throttle(ThrottleConfig::new().window(Duration::from_secs(10)))
        .random_source(|| 0.0)
        .key_names(|key: &String| key.clone())
        .build()
        .unwrap();
    for _ in 0..20 {
        manager.decrement("db");
    }
    for _ in 0..5 {
        assert!(manager.try_acquire("db", Priority::LOW).is_err());
    }
    // The failures fade out over the second window: gone at 20 s.
    tokio::time::advance(Duration::from_secs(20)).await;
    drop(manager.try_acquire("db", Priority::LOW).unwrap());
    let lines = captured.lines();
    let started: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("started shedding"))
        .collect();
    let stopped: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("stopped shedding"))
        .collect();
    assert_eq!((started.len(), stopped.len()), (1, 1), "{lines:#?}");
    assert!(
        started[0].contains(r#"key="db""#) && started[0].contains("priority=3"),
        "{}",
        started[0]
    );
}

#[tokio::test(start_paused = true)]
async fn the_bulkhead_reports_filling_up_and_timeouts() {
    let (_one_at_a_time, captured) = support::capture();
    let manager = ThrottleManager::<String>::builder()
        .bulkhead(
            BulkheadConfig::new(2)
                .queue(1)
                .queue_timeout(Duration::from_millis(50)),
        )
        .key_names(|key: &String| key.clone())
        .build()
        .unwrap();
    let _a = manager.try_acquire("pool", Priority::HIGH).unwrap();
    let _b = manager.try_acquire("pool", Priority::MEDIUM).unwrap();
    assert!(manager.acquire("pool", Priority::LOW).await.is_err());
    let lines = captured.lines();
    assert!(
        lines.iter().any(|l| l.contains("bulkhead full")
            && l.contains(r#"key="pool""#)
            && l.contains("priority=2")),
        "{lines:#?}"
    );
    assert!(
        lines.iter().any(|l| l.contains("bulkhead queue timeout")
            && l.contains(r#"key="pool""#)
            && l.contains("queued=1")),
        "{lines:#?}"
    );
}

#[tokio::test(start_paused = true)]
async fn snapshots_serialize_to_json_for_a_health_endpoint() {
    // Its events would land in another test's capture.
    let (_one_at_a_time, _) = support::capture();
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(10.0).burst(5))
        .throttle(ThrottleConfig::new().window(Duration::from_secs(10)))
        .bulkhead(BulkheadConfig::new(4))
        .build()
        .unwrap();
    let _busy = manager.try_acquire("db", Priority::HIGH).unwrap();
    manager
        .try_acquire("db", Priority::LOW)
        .unwrap()
        .overloaded();
    let all: Vec<(String, portcullis::manager::KeySnapshot)> = manager.snapshots().collect();
    let json = serde_json::to_value(&all).unwrap();
    assert_eq!(json[0][0], "db");
    let snapshot = &json[0][1];
    assert_eq!(snapshot["rate"], 7.0);
    assert_eq!(snapshot["active"], 1);
    assert_eq!(snapshot["queued"], 0);
    assert_eq!(snapshot["priorities"].as_array().unwrap().len(), 4);
    assert_eq!(snapshot["priorities"][3]["requests"], 1);
    assert_eq!(snapshot["priorities"][3]["accepts"], 0);
    assert_eq!(
        snapshot["priorities"][3]["rejection_probability"],
        1.0 / 11.0
    );
}

#[tokio::test(start_paused = true)]
async fn without_key_names_events_never_name_the_key() {
    // Keys can be secrets (API tokens): events name them only when asked.
    let (_one_at_a_time, captured) = support::capture();
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(10.0).increase_by(1.0).decrease_by(2.0))
        .throttle(ThrottleConfig::new().window(Duration::from_secs(10)))
        .bulkhead(BulkheadConfig::new(1))
        .random_source(|| 0.0)
        .build()
        .unwrap();
    let token = "sk-live-t0ps3cret";
    manager.increment(token);
    manager.decrement(token); // the rate turns down
    let busy = manager.try_acquire(token, Priority::HIGH); // sheds, or fills the bulkhead
    drop(busy);
    for _ in 0..20 {
        manager.decrement(token);
    }
    tokio::time::advance(Duration::from_secs(1)).await; // a rate token is due
    assert!(manager.try_acquire(token, Priority::LOW).is_err()); // shedding
    let lines = captured.lines();
    assert!(
        lines.iter().any(|l| l.contains("rate turned down")),
        "events are still emitted: {lines:#?}"
    );
    assert!(
        lines.iter().any(|l| l.contains("started shedding")),
        "{lines:#?}"
    );
    assert!(
        lines
            .iter()
            .all(|l| !l.contains(token) && !l.contains("key=")),
        "{lines:#?}"
    );
}

/// A waiting call's span, as an exporter sees it when it closes, and the
/// event of a refusal: the wait and the reason travel with the caller's
/// trace.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_call_that_waits_has_a_span_with_its_wait_and_a_refusal_says_why() {
    let captured = support::Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_ansi(false)
        .without_time()
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
        .with_writer(move || writer.clone())
        .finish();
    let _on_this_thread = tracing::subscriber::set_default(subscriber);
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(10.0).burst(1))
        .bulkhead(BulkheadConfig::new(1))
        .key_names(|key: &String| key.clone())
        .clock(portcullis::clock::TokioClock::new())
        .build()
        .unwrap();
    manager
        .acquire("api", Priority::HIGH)
        .await
        .unwrap()
        .success();
    // Waits about 100 ms (its turn in the key's line comes a few
    // milliseconds before its token is due).
    let held = manager.acquire("api", Priority::MEDIUM).await.unwrap();
    let refused = manager.try_acquire("api", Priority::LOW).unwrap_err();
    drop(held);
    let lines = captured.lines();
    let closed: Vec<&String> = lines
        .iter()
        .filter(|line| line.contains("portcullis.wait") && line.contains("close"))
        .collect();
    assert_eq!(closed.len(), 1, "{lines:#?}");
    assert!(
        closed[0].contains(r#"key="api""#)
            && closed[0].contains("priority=2")
            && closed[0].contains("waited_s=0.09"),
        "{}",
        closed[0]
    );
    assert!(!closed[0].contains("refused="), "{}", closed[0]);
    let refusals: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("call refused"))
        .collect();
    assert_eq!(refusals.len(), 1, "{lines:#?}");
    // The one slot is held: refused as full, before its rate is asked.
    assert_eq!(refused.reason(), portcullis::error::RejectReason::Full);
    let reason = r#"reason="full""#;
    assert!(
        refusals[0].contains(reason)
            && refusals[0].contains("priority=3")
            && refusals[0].contains(r#"key="api""#),
        "{}",
        refusals[0]
    );
}
