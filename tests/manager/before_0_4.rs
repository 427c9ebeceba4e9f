//! Programs written against 0.3's names still build on 0.4 and do what
//! they did: each deprecated method calls its new name, and 0.3's paths at
//! the crate root still resolve (hidden from the docs).
#![allow(deprecated)]

use std::time::Duration;

use portcullis::snapshot::KeySnapshot;
use portcullis::{
    BulkheadConfig, ConfigError, Cost, ManagerConfig, Permit, Priority, RateConfig, RejectReason,
    ThrottleManager, ThrottleManagerBuilder, Tier, with_deadline,
};

fn builder() -> ThrottleManagerBuilder<String> {
    ThrottleManager::<String>::builder()
}

#[tokio::test(start_paused = true)]
async fn the_03_methods_call_their_new_names() -> Result<(), ConfigError> {
    let manager = builder()
        .rate(RateConfig::per_second(10).burst(10))
        .bulkhead(BulkheadConfig::new(4))
        .limit("tokens", RateConfig::per_minute(600).burst(100))
        .max_wait(Duration::from_secs(1))
        .max_keys(100)
        .call_timeout(Duration::from_secs(2))
        .rate_override("partner".to_owned(), RateConfig::per_second(20).burst(20))
        .build()?;
    manager
        .call_n("api", Priority::HIGH, 3, || async {
            Ok::<_, std::io::Error>(())
        })
        .await
        .unwrap();
    let permit: Permit<'_> = manager.try_acquire_n("api", Priority::HIGH, 2).unwrap();
    permit.success();
    assert_eq!(manager.peek("api").unwrap().remaining, 5);
    manager.check_n("api", 2).unwrap();
    assert_eq!(manager.peek("api").unwrap().remaining, 3);
    assert_eq!(manager.current_rate("api"), manager.key("api").rate());
    let snapshot: Option<KeySnapshot> = manager.snapshot("api");
    assert_eq!(snapshot, manager.key("api").snapshot());
    assert_eq!(manager.call_timeout(), Some(Duration::from_secs(2)));
    assert_eq!(manager.len(), manager.keys().len());
    assert_eq!(manager.limit_names().collect::<Vec<_>>(), ["tokens"]);

    manager.check("partner").unwrap();
    assert_eq!(manager.peek("partner").unwrap().burst, 20);
    manager.set_rate_override("partner", RateConfig::per_second(5).burst(5))?;
    assert_eq!(manager.peek("partner").unwrap().burst, 5);
    manager.remove_overrides("partner");
    assert_eq!(manager.peek("partner").unwrap().burst, 10);
    assert!(manager.forget("partner"));
    assert_eq!(manager.key("partner").rate(), None);

    let hung = manager
        .call_with_timeout("api", Priority::HIGH, Duration::from_millis(10), || async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            Ok::<_, std::io::Error>(())
        })
        .await;
    assert!(hung.is_err());
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn the_03_root_paths_still_resolve() -> Result<(), Box<dyn std::error::Error>> {
    let config: ManagerConfig = toml::from_str("[default.rate]\nquota = \"1/s\"\nburst = 1\n")?;
    let manager = ThrottleManager::<String>::from_config(config)?;
    manager.wait("api").await?;
    let deadline = tokio::time::Instant::now() + Duration::from_millis(100);
    let refused = with_deadline(deadline, manager.acquire("api", Priority::HIGH))
        .await
        .unwrap_err();
    assert_eq!(refused.reason(), RejectReason::Deadline);
    let _tier = Tier::new();
    let _cost = Cost::of("tokens", 5);
    Ok(())
}
