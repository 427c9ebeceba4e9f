//! The public contracts of earlier issues, exactly as they were written:
//! programs built against 0.2's names still build on 0.3. The names 0.3
//! moved (`RateConfig::new`, the config's `increment`/`decrement`, the
//! manager's `rate`) are deprecated, and `wait` now returns a `Result`,
//! so these snippets warn; they must not fail.
#![allow(deprecated, unused_must_use)]

use portcullis::{Priority, RateConfig, ThrottleConfig, ThrottleManager};
use std::time::Duration;

/// Issue 2's contract: the adaptive rate.
async fn foundation() -> Result<Option<f64>, Box<dyn std::error::Error>> {
    let manager = ThrottleManager::<String>::builder()
        .rate(
            RateConfig::new(10.0)
                .burst(5)
                .bounds(1.0, 200.0)
                .increment(2.0)
                .decrement(1.0),
        )
        .build()?; // Result<_, portcullis::error::ConfigError>, ConfigError: std::error::Error
    manager.wait("example.com").await;
    let may_go_now: bool = manager.check("example.com").is_ok();
    manager.increment("example.com");
    manager.decrement("example.com");
    let current: Option<f64> = manager.rate("example.com");
    assert!(may_go_now);
    Ok(current)
}

/// Issue 3's contract: the throttle and `acquire`.
async fn throttle() -> Result<(), Box<dyn std::error::Error>> {
    let manager = ThrottleManager::<String>::builder()
        .throttle(
            ThrottleConfig::new()
                .ratio(2.0)
                .min_rate(1.0)
                .window(Duration::from_secs(60)),
        )
        .build()?;
    match manager.acquire("db-7", Priority::LOW).await {
        Ok(permit) => {
            // make the call, then report what happened:
            permit.success(); // or permit.overloaded() for a capacity failure (429, 503, timeout);
            // dropping the permit without a report counts as neither
        }
        Err(rejected) => {
            let _why = rejected.reason();
            let _hint = rejected.retry_after();
        }
    }
    Ok(())
}

/// Issue 10's contract, the part 0.3 renamed (the rest is in `contract.rs`).
async fn arc_keys() -> anyhow::Result<()> {
    let manager = ThrottleManager::<std::sync::Arc<str>>::builder()
        .rate(RateConfig::new(10.0))
        .build()?;
    manager.wait("example.com").await;
    Ok(())
}

/// Issue 12's contract: the client middleware.
#[cfg(feature = "reqwest")]
#[allow(dead_code)]
mod client {
    use portcullis::client::ThrottleMiddleware;
    use portcullis::{RateConfig, Rejected, ThrottleManager};

    async fn crawl(url: &str) -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
        let manager = ThrottleManager::<String>::builder()
            .rate(RateConfig::new(10.0))
            .build()?;
        let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
            .with(ThrottleMiddleware::new(manager.clone()))
            .build();
        match client.get(url).send().await {
            Ok(response) => Ok(response.text().await?),
            Err(reqwest_middleware::Error::Middleware(e))
                if e.downcast_ref::<Rejected>().is_some() =>
            {
                Err("refused locally".into())
            }
            Err(e) => Err(e.into()),
        }
    }
}

/// Issue 15's contract: a rate shared through Redis.
#[cfg(feature = "redis")]
#[allow(dead_code)]
mod shared {
    use portcullis::store::RedisStore;
    use portcullis::{RateConfig, ThrottleManager};

    async fn shared() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let store = RedisStore::connect("redis://127.0.0.1:6379/", "crawler").await?;
        let manager = ThrottleManager::<String>::builder()
            .rate(RateConfig::new(10.0))
            .rate_store(store)
            .build()?;
        manager.wait("example.com").await;
        manager.increment("example.com");
        let _shared_rate: Option<f64> = manager.rate("example.com");
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn the_names_before_0_3_build_and_mean_what_they_meant() {
    // Starting 10, +2, -1: as issue 2's worked example.
    assert_eq!(foundation().await.unwrap(), Some(11.0));
    throttle().await.unwrap();
    arc_keys().await.unwrap();
}
