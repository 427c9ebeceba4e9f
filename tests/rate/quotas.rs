//! Fixed quotas and costs through the public API, on tokio's paused
//! clock: a quota admits its burst and then its rate, and never moves; a
//! call of cost n takes n tokens, all or none, and one that could never
//! fit is refused at once.

use std::time::Duration;

use portcullis::error::RejectReason;
use portcullis::{BulkheadConfig, CallError, Priority, RateConfig, ThrottleManager};
use tokio::time::Instant;

/// The public contract, exactly as written.
async fn quotas() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_minute(600).burst(20))
        .build()?;
    manager.key("tenant-a").check(5)?;
    let permit = manager.acquire("tenant-a", Priority::HIGH.cost(5)).await?;
    permit.success();
    let _ = RateConfig::per_second(50);
    let _ = RateConfig::per_hour(1000).burst(100);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn the_public_contract_compiles_and_works() {
    quotas().await.unwrap();
}

use crate::manager;

#[tokio::test(start_paused = true)]
async fn a_quota_admits_its_burst_at_once_then_its_rate() {
    let manager = manager(RateConfig::per_minute(600).burst(20));
    let at_once = (0..100).filter(|_| manager.check("tenant").is_ok()).count();
    assert_eq!(at_once, 20);
    // Then 10 a second: one each 100 ms, none in between.
    for _ in 0..30 {
        tokio::time::advance(Duration::from_millis(99)).await;
        assert!(manager.check("tenant").is_err());
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(manager.check("tenant").is_ok());
    }
}

#[tokio::test(start_paused = true)]
async fn nothing_moves_a_quota() {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_second(10))
        .build()
        .unwrap();
    for _ in 0..50 {
        assert_eq!(manager.increment("tenant"), Some(10.0));
        manager.wait("tenant").await.unwrap();
    }
    for _ in 0..50 {
        assert_eq!(manager.decrement("tenant"), Some(10.0));
        tokio::time::advance(Duration::from_secs(1)).await;
    }
    // Nor do permits' outcomes, waited for or not.
    for _ in 0..20 {
        manager
            .acquire("tenant", Priority::HIGH)
            .await
            .unwrap()
            .success();
        manager
            .acquire("tenant", Priority::HIGH)
            .await
            .unwrap()
            .overloaded();
    }
    assert_eq!(manager.key("tenant").rate(), Some(10.0));
}

#[tokio::test(start_paused = true)]
async fn check_n_takes_all_its_tokens_or_none() {
    let manager = manager(RateConfig::per_minute(600).burst(20));
    manager.key("tenant").check(5).unwrap();
    assert_eq!(manager.peek("tenant").unwrap().remaining, 15);
    manager.key("tenant").check(15).unwrap();
    let refused = manager.key("tenant").check(2).unwrap_err();
    assert_eq!(refused.reason(), RejectReason::RateLimited);
    // Two tokens are 200 ms away; the refusal took none.
    assert_eq!(refused.retry_after(), Some(Duration::from_millis(200)));
    tokio::time::advance(Duration::from_millis(200)).await;
    manager.key("tenant").check(2).unwrap();
    // Cost 0 takes nothing.
    manager.key("tenant").check(0).unwrap();
    assert_eq!(manager.peek("tenant").unwrap().remaining, 0);
}

#[tokio::test(start_paused = true)]
async fn a_cost_above_the_burst_is_refused_at_once_by_every_way_in() {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_minute(600).burst(20))
        .bulkhead(BulkheadConfig::new(4))
        .build()
        .unwrap();
    let start = Instant::now();
    let is_cost = |reason: RejectReason| reason == RejectReason::CostAboveBurst;
    assert!(is_cost(manager.key("t").check(21).unwrap_err().reason()));
    assert!(is_cost(
        manager.key("t").wait(21).await.unwrap_err().reason()
    ));
    let refused = manager
        .try_acquire("t", Priority::HIGH.cost(21))
        .unwrap_err();
    assert!(is_cost(refused.reason()));
    assert_eq!(refused.retry_after(), None);
    let refused = manager
        .acquire("t", Priority::HIGH.cost(21))
        .await
        .unwrap_err();
    assert!(is_cost(refused.reason()));
    let made = std::cell::Cell::new(false);
    let called = manager
        .call("t", Priority::HIGH.cost(21), || async {
            made.set(true);
            Ok::<_, std::io::Error>(())
        })
        .await;
    assert!(matches!(called, Err(CallError::Rejected(r)) if is_cost(r.reason())));
    assert!(!made.get(), "the call was never made");
    // At once, and counted by no control: the bucket is full, nothing in flight.
    assert_eq!(start.elapsed(), Duration::ZERO);
    let snapshot = manager.key("t").snapshot().unwrap();
    assert_eq!(snapshot.active, Some(0));
    assert_eq!(manager.peek("t").unwrap().remaining, 20);
    // The burst itself fits.
    manager
        .acquire("t", Priority::HIGH.cost(20))
        .await
        .unwrap()
        .success();
}

#[tokio::test(start_paused = true)]
async fn acquire_n_waits_for_all_its_tokens_and_a_dropped_one_takes_none() {
    let manager = manager(RateConfig::per_second(10).burst(10));
    manager.key("t").check(10).unwrap();
    // Four tokens are 400 ms away.
    let start = Instant::now();
    manager
        .acquire("t", Priority::HIGH.cost(4))
        .await
        .unwrap()
        .success();
    assert_eq!(start.elapsed(), Duration::from_millis(400));
    // A waiter dropped before its tokens are due hands them all back.
    let dropped = tokio::time::timeout(
        Duration::from_millis(300),
        manager.acquire("t", Priority::HIGH.cost(6)),
    )
    .await;
    assert!(dropped.is_err(), "still waiting at 300 ms");
    tokio::time::advance(Duration::from_millis(300)).await;
    // 600 ms after the last call: six tokens back, none taken by the drop.
    assert_eq!(manager.peek("t").unwrap().remaining, 6);
}

#[tokio::test(start_paused = true)]
async fn a_call_its_bulkhead_refuses_takes_no_tokens() {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_second(10).burst(10))
        .bulkhead(BulkheadConfig::new(1))
        .build()
        .unwrap();
    let _busy = manager.try_acquire("t", Priority::HIGH.cost(1)).unwrap();
    let refused = manager
        .try_acquire("t", Priority::HIGH.cost(5))
        .unwrap_err();
    assert_eq!(refused.reason(), RejectReason::Full);
    assert_eq!(manager.peek("t").unwrap().remaining, 9);
}

#[tokio::test(start_paused = true)]
async fn an_adaptive_rate_counts_its_use_in_tokens() {
    // Calls of 5 tokens at 10 tokens a second are 2 calls a second: a
    // rate whose use were counted in calls could never rise past its
    // start, as it is what limits them (every call waits for its tokens).
    let manager = manager(
        RateConfig::adaptive(10.0)
            .burst(5)
            .bounds(1.0, 100.0)
            .increase_by(1.0),
    );
    for _ in 0..40 {
        manager
            .acquire("t", Priority::HIGH.cost(5))
            .await
            .unwrap()
            .success();
    }
    let rate = manager.key("t").rate().unwrap();
    assert!(rate > 25.0, "rate {rate}");
}
