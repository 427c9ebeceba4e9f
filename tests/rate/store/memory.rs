//! The manager's side of the store seam, through a store written against
//! the public trait alone (`tests/support/memory_store.rs`), on virtual
//! time: what any store gets asked, and what managers sharing one store
//! see. Redis's store passes the same kinds of tests on a real server
//! (`on_redis.rs`).

use std::sync::Arc;
use std::time::Duration;

use portcullis::error::RejectReason;
use portcullis::store::WhenUnavailable;
use portcullis::{BulkheadConfig, Priority, RateConfig, ThrottleManager};
use tokio::time::Instant;

use crate::memory_store::{MemoryStore, RECHECK};

fn store() -> Arc<MemoryStore> {
    Arc::new(MemoryStore::new(WhenUnavailable::UseLocalRate))
}

fn manager(store: &Arc<MemoryStore>, config: RateConfig) -> ThrottleManager<String> {
    ThrottleManager::<String>::builder()
        .rate(config)
        .rate_store(Arc::clone(store))
        .build()
        .unwrap()
}

/// Lets the reports the manager sent on their own tasks arrive.
async fn reports_arrive() {
    tokio::time::sleep(Duration::from_millis(1)).await;
}

#[tokio::test(start_paused = true)]
async fn two_managers_on_one_store_share_one_fixed_quota() {
    let store = store();
    let quota = RateConfig::adaptive(10.0).burst(1).bounds(10.0, 10.0);
    let until = Instant::now() + Duration::from_secs(2);
    let loops: Vec<_> = (0..2)
        .map(|_| {
            tokio::spawn(super::calls_until(
                manager(&store, quota.clone()),
                "api",
                until,
            ))
        })
        .collect();
    let mut total = 0;
    for calls in loops {
        total += calls.await.unwrap();
    }
    // 2 s at 10/s: 20 calls, where two unshared quotas let 40 go.
    assert!((20..=21).contains(&total), "{total} calls in 2 s");
}

#[tokio::test(start_paused = true)]
async fn an_overload_one_manager_sees_lowers_the_rate_for_all() {
    let store = store();
    let config = RateConfig::adaptive(40.0)
        .bounds(1.0, 40.0)
        .decrease_factor(0.5);
    let seeing = manager(&store, config.clone());
    let other = manager(&store, config);
    seeing.wait("host").await.unwrap();
    other.wait("host").await.unwrap();
    assert_eq!(other.key("host").rate(), Some(40.0));
    seeing.decrement("host");
    reports_arrive().await;
    assert_eq!(store.rate("host"), Some(20.0));
    assert_eq!(
        seeing.key("host").rate(),
        Some(20.0),
        "the report brought it back"
    );
    other.wait("host").await.unwrap(); // each decision brings the shared rate back
    assert_eq!(other.key("host").rate(), Some(20.0));
}

#[tokio::test(start_paused = true)]
async fn outcomes_reach_the_store_and_neutral_ones_do_not() {
    let store = store();
    let manager = manager(&store, RateConfig::adaptive(10.0).bounds(1.0, 100.0));
    manager
        .acquire("api", Priority::HIGH)
        .await
        .unwrap()
        .success();
    manager
        .acquire("api", Priority::HIGH)
        .await
        .unwrap()
        .overloaded();
    drop(manager.acquire("api", Priority::HIGH).await.unwrap()); // neutral
    reports_arrive().await;
    assert_eq!((store.reports(0), store.reports(1)), (1, 1));
    assert_eq!(store.asked.load(std::sync::atomic::Ordering::Acquire), 3);
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_wait_hands_its_token_back() {
    let store = store();
    // A token 50 ms away: within the booking horizon, so the call takes it.
    let manager = manager(
        &store,
        RateConfig::adaptive(20.0).burst(1).bounds(20.0, 20.0),
    );
    let (start, _first) = super::take_then_give_up(&manager).await;
    reports_arrive().await;
    assert_eq!(store.reports(2), 1, "one token handed back");
    let _second = manager.acquire("api", Priority::HIGH).await.unwrap();
    // Its token was the one given back: 50 ms after the first, not 100.
    assert_eq!(start.elapsed(), Duration::from_millis(50));
}

/// A call whose shared token (of a rate that moves) lies beyond the
/// booking horizon waits in its key's line and takes nothing until its
/// turn: given up meanwhile, it leaves nothing to hand back, and delays
/// nobody.
#[tokio::test(start_paused = true)]
async fn a_call_given_up_in_line_takes_nothing() {
    let store = store();
    let manager = manager(&store, RateConfig::adaptive(1.0).burst(1).bounds(0.5, 2.0));
    let (start, _first) = super::take_then_give_up(&manager).await;
    reports_arrive().await;
    assert_eq!(store.reports(2), 0, "nothing to hand back");
    assert_eq!(store.asked.load(std::sync::atomic::Ordering::Acquire), 2);
    let _second = manager.acquire("api", Priority::HIGH).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn a_pause_reaches_the_store_and_holds_every_manager() {
    let store = store();
    let config = RateConfig::adaptive(10.0).burst(1).bounds(10.0, 10.0);
    let paused = manager(&store, config.clone());
    let other = manager(&store, config);
    other.wait("host").await.unwrap();
    paused.key("host").defer(Duration::from_secs(3));
    reports_arrive().await;
    let start = Instant::now();
    other.wait("host").await.unwrap();
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(2_990) && waited <= Duration::from_secs(3),
        "{waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn calls_that_never_wait_decide_locally() {
    let store = store();
    let manager = manager(&store, RateConfig::adaptive(10.0).burst(2));
    assert!(manager.check("api").is_ok());
    assert!(manager.try_acquire("api", Priority::HIGH).is_ok());
    assert!(manager.check("api").is_err(), "the local burst is spent");
    assert_eq!(store.asked.load(std::sync::atomic::Ordering::Acquire), 0);
}

#[tokio::test(start_paused = true)]
async fn an_unavailable_store_falls_back_to_the_local_rate() {
    let store = store();
    let manager = manager(&store, RateConfig::adaptive(10.0).bounds(1.0, 100.0));
    manager
        .acquire("host", Priority::HIGH)
        .await
        .unwrap()
        .success();
    reports_arrive().await;
    assert_eq!(store.rate("host"), Some(10.3));
    store.set_available(false);
    let start = Instant::now();
    for _ in 0..5 {
        let permit = manager.acquire("host", Priority::HIGH).await;
        permit.expect("the local rate admits").success();
    }
    assert!(start.elapsed() < Duration::from_secs(1), "paced locally");
    assert_eq!(store.rate("host"), Some(10.3), "the store saw none of it");
    let local = manager.key("host").rate().unwrap();
    assert!(local > 10.3, "the local rate is in force: {local}");
    store.set_available(true);
    manager
        .acquire("host", Priority::HIGH)
        .await
        .unwrap()
        .success();
    reports_arrive().await;
    assert_eq!(
        manager.key("host").rate(),
        store.rate("host"),
        "back on the store"
    );
}

#[tokio::test(start_paused = true)]
async fn the_refusing_mode_refuses_with_its_own_reason() {
    let store = Arc::new(MemoryStore::new(WhenUnavailable::Refuse));
    let manager = manager(&store, RateConfig::adaptive(50.0));
    let _before = manager.acquire("quota", Priority::HIGH).await.unwrap();
    store.set_available(false);
    let refused = manager.acquire("quota", Priority::HIGH).await.unwrap_err();
    assert_eq!(refused.reason(), RejectReason::StoreUnavailable);
    assert_eq!(refused.retry_after(), Some(RECHECK));
    // `wait` cannot refuse: it asks again when the store said to.
    let waiting = tokio::spawn({
        let manager = manager.clone();
        async move { manager.wait("quota").await }
    });
    tokio::time::sleep(RECHECK * 3).await;
    assert!(!waiting.is_finished());
    store.set_available(true);
    tokio::time::sleep(RECHECK).await;
    assert!(waiting.is_finished());
}

#[test]
fn a_store_needs_a_rate_to_share() {
    let error = ThrottleManager::<String>::builder()
        .bulkhead(BulkheadConfig::new(4))
        .rate_store(store())
        .build()
        .unwrap_err();
    let fields: Vec<_> = error.problems().iter().map(|p| p.field()).collect();
    assert_eq!(fields, ["rate_store"], "{error}");
}

/// A store's own tests can ask it what the manager asks, with the public
/// constructors of the request and the rules.
#[tokio::test(start_paused = true)]
async fn a_store_can_be_asked_directly_as_the_manager_asks_it() {
    use portcullis::store::{RateRules, RateStore, TokenAnswer, TokenRequest};
    let store = MemoryStore::new(WhenUnavailable::UseLocalRate);
    let rules = RateRules::of(&RateConfig::adaptive(10.0).burst(1)).unwrap();
    let now_or_never = TokenRequest::new(rules, Some(Duration::ZERO));
    let first = store.take_token("k", now_or_never).await;
    assert!(
        matches!(first, TokenAnswer::Granted { wait, .. } if wait.is_zero()),
        "{first:?}"
    );
    let second = store.take_token("k", now_or_never).await;
    assert!(
        matches!(second, TokenAnswer::Refused { wait, .. } if wait == Duration::from_millis(100)),
        "{second:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_call_takes_its_cost_from_the_store_and_a_cancelled_one_gives_it_all_back() {
    let store = store();
    let manager = manager(&store, RateConfig::per_second(10).burst(10));
    let start = Instant::now();
    manager
        .acquire("api", Priority::HIGH.cost(8))
        .await
        .unwrap()
        .success();
    // Five more: two are left, three are 300 ms away.
    manager
        .acquire("api", Priority::HIGH.cost(5))
        .await
        .unwrap()
        .success();
    assert_eq!(start.elapsed(), Duration::from_millis(300));
    // Six more would wait 600 ms; dropped at 100 ms, all six go back.
    let dropped = tokio::time::timeout(
        Duration::from_millis(100),
        manager.acquire("api", Priority::HIGH.cost(6)),
    )
    .await;
    assert!(dropped.is_err());
    reports_arrive().await;
    // A fixed quota's calls book their shared tokens on arrival (the
    // processes of a fleet keep the store's order): all six go back.
    assert_eq!(store.reports(2), 1, "the six tokens handed back");
    let before = Instant::now();
    manager
        .acquire("api", Priority::HIGH.cost(6))
        .await
        .unwrap()
        .success();
    // Due at 900 ms, as the dropped call would have been: the drop kept
    // nothing (a token kept would make it 1 s).
    assert_eq!(
        before.elapsed() + Duration::from_millis(401),
        Duration::from_millis(900)
    );
}

/// A store that answers every call with a token at once, and `rate` as the
/// key's shared rate: only the two methods a store must have.
struct AnswersWith(f64);

impl portcullis::store::RateStore for AnswersWith {
    fn take_token<'a>(
        &'a self,
        _key: &'a str,
        _request: portcullis::store::TokenRequest,
    ) -> portcullis::store::StoreFuture<'a, portcullis::store::TokenAnswer> {
        let answer = portcullis::store::TokenAnswer::Granted {
            wait: Duration::ZERO,
            receipt: portcullis::store::TokenReceipt::new(""),
            rate: self.0,
        };
        Box::pin(async move { answer })
    }

    fn report<'a>(
        &'a self,
        _key: &'a str,
        _event: portcullis::store::RateEvent,
        _rules: portcullis::store::RateRules,
    ) -> portcullis::store::StoreFuture<'a, Option<f64>> {
        let rate = self.0;
        Box::pin(async move { Some(rate) })
    }
}

fn answering(rate: f64) -> ThrottleManager<String> {
    ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(10.0))
        .rate_store(AnswersWith(rate))
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_store_with_only_the_required_methods_is_available_and_its_rate_shown() {
    let manager = answering(7.0);
    manager
        .acquire("api", Priority::HIGH)
        .await
        .unwrap()
        .success();
    reports_arrive().await;
    // The default `is_available` is true: the shared rate is the one shown.
    assert_eq!(manager.key("api").rate(), Some(7.0));
}

#[tokio::test(start_paused = true)]
async fn a_rate_from_a_store_that_is_no_rate_is_ignored() {
    for nonsense in [0.0, -0.0, -3.0, f64::INFINITY, f64::NAN] {
        let manager = answering(nonsense);
        manager
            .acquire("api", Priority::HIGH)
            .await
            .unwrap()
            .success();
        reports_arrive().await;
        let shown = manager.key("api").rate().unwrap();
        assert!(
            shown.is_finite() && shown > 0.0,
            "{nonsense} shown as {shown}"
        );
    }
}
