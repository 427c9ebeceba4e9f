//! The public contract of the manager's shape, in 0.3's names (as first
//! written, it is in `before_0_3.rs`): `call` with an `anyhow` closure
//! and `?`, keys of `Arc<str>` looked up by `&str`, and keys that are not
//! `Debug`.

use portcullis::{Priority, RateConfig, ThrottleManager};
use std::sync::Arc;

async fn fetch(manager: &ThrottleManager<String>) -> anyhow::Result<String> {
    let body = manager
        .call("example.com", Priority::MEDIUM, || async {
            let text: String = tokio::fs::read_to_string("/etc/hostname").await?;
            Ok::<_, anyhow::Error>(text)
        })
        .await?;
    Ok(body)
}

async fn arc_keys() -> anyhow::Result<()> {
    let manager = ThrottleManager::<Arc<str>>::builder()
        .rate(RateConfig::adaptive(10.0))
        .build()?;
    manager.wait("example.com").await.unwrap();
    Ok(())
}

#[derive(Hash, PartialEq, Eq, Clone)]
struct ApiToken(String); // deliberately not Debug

fn secret_keys() -> anyhow::Result<()> {
    let manager = ThrottleManager::<ApiToken>::builder()
        .rate(RateConfig::adaptive(10.0))
        .build()?;
    let _ = manager.check(&ApiToken("t0ps3cret".into()));
    Ok(())
}

// The seams issue's contract: any store, no feature needed.
use portcullis::error::ConfigError;

fn with_store<S>(store: S) -> Result<ThrottleManager<String>, ConfigError>
where
    S: portcullis::store::RateStore + Send + Sync + 'static,
{
    ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(10.0))
        .rate_store(store)
        .build()
}

// The runtime limits issue's contract, as written (the scenario adds `toml`).
mod runtime_limits {
    use portcullis::builder::ManagerConfig;
    use portcullis::{Priority, RateConfig, ThrottleManager};

    pub(super) async fn contract() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let manager = ThrottleManager::<String>::builder()
            .rate(RateConfig::per_second(10).burst(5))
            .build()?;
        manager
            .key("acme")
            .set_rate(RateConfig::per_second(50).burst(10))?;
        manager.acquire("acme", Priority::HIGH).await?.success();
        manager.key("acme").remove_overrides();
        manager.key("acme").forget();
        let config: ManagerConfig =
            toml::from_str("[default.rate]\nquota = \"20/s\"\nburst = 5\n")?;
        manager.reload(config)?;
        manager.set_shadow(true);
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn the_runtime_limits_contract_runs() {
    runtime_limits::contract().await.unwrap();
}

// ---- The contract above, exercised ----

use portcullis::deadline::TimeLimits;
use portcullis::error::RejectReason;
use portcullis::{CallError, overloaded};

#[tokio::test(start_paused = true)]
async fn an_anyhow_closure_runs_and_its_errors_convert_with_question_mark() {
    let manager = ThrottleManager::<String>::builder()
        .rate(
            RateConfig::adaptive(10.0)
                .burst(1)
                .increase_by(1.0)
                .decrease_by(5.0),
        )
        .time_limits(TimeLimits::new().max_wait(std::time::Duration::from_secs(1)))
        .build()
        .unwrap();
    // /etc/hostname may be missing in a container: then the call's own
    // error comes back through `?`, and is neutral for the rate.
    match fetch(&manager).await {
        Ok(_) => assert_eq!(manager.key("example.com").rate(), Some(11.0)),
        Err(error) => {
            assert!(error.downcast_ref::<CallError<anyhow::Error>>().is_some());
            assert_eq!(manager.key("example.com").rate(), Some(10.0));
        }
    }
    // A key paused for longer than the call would wait is refused: the
    // closure never runs.
    manager
        .key("example.com")
        .defer(std::time::Duration::from_secs(60));
    let rejected = manager
        .call("example.com", Priority::MEDIUM, || async {
            Ok::<_, anyhow::Error>(())
        })
        .await;
    let CallError::Rejected(rejected) = rejected.unwrap_err() else {
        panic!("deferred: the call must not run");
    };
    assert_eq!(rejected.reason(), RejectReason::RateLimited);
    // And through `?`, a rejection becomes an anyhow::Error that keeps it.
    let error = fetch(&manager).await.unwrap_err();
    let call_error = error.downcast_ref::<CallError<anyhow::Error>>().unwrap();
    assert!(call_error.is_local());
}

#[tokio::test(start_paused = true)]
async fn anyhow_and_boxed_errors_are_classified_like_any_other() {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(10.0).increase_by(1.0).decrease_by(5.0))
        .classifier(portcullis::outcome::transport_overload)
        .build()
        .unwrap();
    // An anyhow error whose chain holds a refused connection: overload.
    let refused = manager
        .call("a", Priority::HIGH, || async {
            Err::<(), _>(anyhow::Error::new(std::io::Error::from(
                std::io::ErrorKind::ConnectionRefused,
            )))
        })
        .await;
    assert!(matches!(refused, Err(CallError::Inner(_))));
    assert_eq!(manager.key("a").rate(), Some(5.0));
    // A boxed error that is not an overload: neutral.
    let missing = manager
        .call("b", Priority::HIGH, || async {
            Err::<(), Box<dyn std::error::Error + Send + Sync>>("404 Not Found".into())
        })
        .await;
    assert_eq!(missing.unwrap_err().to_string(), "404 Not Found");
    assert_eq!(manager.key("b").rate(), Some(10.0));
    // The overloaded mark works for every error type it wraps.
    let marked = manager
        .call("c", Priority::HIGH, || async {
            Err::<(), _>(overloaded(anyhow::anyhow!("503 Service Unavailable")))
        })
        .await;
    assert!(marked.is_err());
    assert_eq!(manager.key("c").rate(), Some(5.0));
}

#[tokio::test(start_paused = true)]
async fn arc_str_keys_are_looked_up_by_str() {
    arc_keys().await.unwrap();
    let manager = ThrottleManager::<Arc<str>>::builder()
        .rate(RateConfig::adaptive(10.0))
        .build()
        .unwrap();
    manager.increment("example.com");
    let key: Arc<str> = Arc::from("example.com");
    assert_eq!(manager.key(&*key).rate(), Some(11.0));
    assert_eq!(manager.key("example.com").rate(), Some(11.0));
    assert_eq!(manager.keys().len(), 1);
}

#[path = "../support/memory_store.rs"]
mod memory_store;

#[tokio::test(start_paused = true)]
async fn any_store_written_against_the_trait_holds_the_rate() {
    let store = std::sync::Arc::new(memory_store::MemoryStore::new(
        portcullis::store::WhenUnavailable::UseLocalRate,
    ));
    let manager = with_store(std::sync::Arc::clone(&store)).unwrap();
    manager.wait("example.com").await.unwrap();
    assert_eq!(store.rate("example.com"), Some(10.0));
}

#[test]
fn keys_need_not_be_debug() {
    secret_keys().unwrap();
    let manager = ThrottleManager::<ApiToken>::builder()
        .rate(RateConfig::adaptive(1.0))
        .build()
        .unwrap();
    let token = ApiToken("t0ps3cret".into());
    manager.check(&token).unwrap();
    assert!(manager.check(&token).is_err(), "one token per second");
    let snapshots: Vec<_> = manager.snapshots().collect();
    assert_eq!(snapshots.len(), 1);
    assert!(snapshots[0].0 == token);
}
