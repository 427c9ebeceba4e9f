//! The bulkhead through the public API, on tokio's paused clock.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use portcullis::builder::Tier;
use portcullis::bulkhead::Overflow;
use portcullis::deadline::TimeLimits;
use portcullis::error::RejectReason;
use portcullis::{BulkheadConfig, Priority, RateConfig, ThrottleManager};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// A test on tokio's paused clock that fails instead of hanging: a lost
/// wake-up leaves a waiter asleep with no timer to advance to, and without a
/// limit the whole run would hang. The limit is virtual time (an idle paused
/// runtime jumps straight to it), so it costs nothing when the test passes.
macro_rules! paused_test {
    (async fn $name:ident() $(-> $ret:ty)? $body:block) => {
        #[tokio::test(start_paused = true)]
        async fn $name() $(-> $ret)? {
            async fn body() $(-> $ret)? $body
            tokio::time::timeout(Duration::from_secs(600), body())
                .await
                .expect("the test hung: a waiter was never woken")
        }
    };
}

fn manager(config: BulkheadConfig) -> ThrottleManager<String> {
    ThrottleManager::<String>::builder()
        .bulkhead(config)
        .build()
        .unwrap()
}

/// Spawns a call that waits for a slot, records its name when it gets one,
/// then holds the slot until `hold` has passed.
fn spawn_call(
    manager: &ThrottleManager<String>,
    name: &'static str,
    priority: Priority,
    hold: Duration,
    order: &Arc<Mutex<Vec<&'static str>>>,
) -> JoinHandle<Result<(), RejectReason>> {
    let (manager, order) = (manager.clone(), Arc::clone(order));
    tokio::spawn(async move {
        let permit = manager
            .acquire("db", priority)
            .await
            .map_err(|r| r.reason())?;
        order.lock().unwrap().push(name);
        tokio::time::sleep(hold).await;
        permit.success();
        Ok(())
    })
}

async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

paused_test! {
async fn the_public_contract_compiles_and_works() -> Result<(), Box<dyn std::error::Error>> {
    let manager = ThrottleManager::<String>::builder()
        .bulkhead(
            BulkheadConfig::new(10)
                .queue(50)
                .queue_timeout(Duration::from_millis(200))
                .overflow(Overflow::DropOldest),
        )
        .build()?;
    let mut busy = Vec::new();
    for _ in 0..10 {
        busy.push(manager.acquire("payments", Priority::LOW).await?);
    }
    assert_eq!(manager.key("payments").snapshot().unwrap().active, Some(10));
    // All 10 are busy: the next call waits in the queue, and the first slot
    // released goes to it.
    let waiter = tokio::spawn({
        let manager = manager.clone();
        async move {
            let permit = manager.acquire("payments", Priority::HIGH).await?; // waits in the queue if all 10 are busy
            // ... the call ...
            permit.success(); // releasing the permit hands it to the head of the queue
            Ok::<_, portcullis::Rejected>(())
        }
    });
    settle().await;
    assert_eq!(manager.key("payments").snapshot().unwrap().queued, Some(1));
    tokio::time::sleep(Duration::from_millis(100)).await; // within the 200 ms queue timeout
    busy.pop().unwrap().success();
    waiter.await??;
    assert_eq!(manager.key("payments").snapshot().unwrap().active, Some(9));
    Ok(())
}
}

paused_test! {
async fn waiters_go_by_priority_then_arrival_and_newcomers_never_overtake() {
    let manager = manager(BulkheadConfig::new(1).queue(10));
    let order = Arc::new(Mutex::new(Vec::new()));
    let hold = Duration::from_millis(10);
    let mut calls = vec![spawn_call(&manager, "first", Priority::HIGH, hold, &order)];
    settle().await;
    for (name, priority) in [
        ("low-1", Priority::LOW),
        ("medium-1", Priority::MEDIUM),
        ("low-2", Priority::LOW),
        ("high-1", Priority::HIGH),
        ("medium-2", Priority::MEDIUM),
    ] {
        calls.push(spawn_call(&manager, name, priority, hold, &order));
        settle().await;
    }
    assert_eq!(manager.key("db").snapshot().unwrap().queued, Some(5));
    // A newcomer with try_acquire finds no free slot: it never jumps the queue.
    assert_eq!(
        manager
            .try_acquire("db", Priority::HIGH)
            .unwrap_err()
            .reason(),
        RejectReason::Full
    );
    for call in calls {
        call.await.unwrap().unwrap();
    }
    assert_eq!(
        *order.lock().unwrap(),
        ["first", "high-1", "medium-1", "medium-2", "low-1", "low-2"]
    );
    let status = manager.key("db").snapshot().unwrap();
    assert_eq!((status.active, status.queued), (Some(0), Some(0)));
}
}

paused_test! {
async fn a_released_slot_goes_straight_to_the_head_of_the_queue() {
    let manager = manager(BulkheadConfig::new(1).queue(1));
    let permit = manager.try_acquire("db", Priority::HIGH).unwrap();
    let waiter = {
        let manager = manager.clone();
        tokio::spawn(async move {
            manager
                .acquire("db", Priority::LOW)
                .await
                .map(|p| p.priority())
        })
    };
    settle().await;
    drop(permit);
    // The slot now belongs to the waiter, even before it runs: a newcomer
    // cannot take it.
    assert_eq!(manager.key("db").snapshot().unwrap().active, Some(1));
    assert!(manager.try_acquire("db", Priority::HIGH).is_err());
    assert_eq!(waiter.await.unwrap().unwrap(), Priority::LOW);
}
}

paused_test! {
async fn with_no_queue_a_full_bulkhead_fails_fast_with_its_load() {
    let manager = manager(BulkheadConfig::new(2));
    let _a = manager.acquire("db", Priority::HIGH).await.unwrap();
    let _b = manager.acquire("db", Priority::HIGH).await.unwrap();
    let start = Instant::now();
    let rejected = manager.acquire("db", Priority::HIGH).await.unwrap_err();
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(rejected.reason(), RejectReason::Full);
    assert_eq!((rejected.active(), rejected.queued()), (Some(2), Some(0)));
    assert_eq!(rejected.retry_after(), None);
}
}

paused_test! {
async fn a_waiter_is_rejected_after_the_queue_timeout() {
    let manager = manager(
        BulkheadConfig::new(1)
            .queue(4)
            .queue_timeout(Duration::from_millis(200)),
    );
    let _busy = manager.try_acquire("db", Priority::HIGH).unwrap();
    let start = Instant::now();
    let rejected = manager.acquire("db", Priority::HIGH).await.unwrap_err();
    assert_eq!(start.elapsed(), Duration::from_millis(200));
    assert_eq!(rejected.reason(), RejectReason::QueueTimeout);
    assert_eq!((rejected.active(), rejected.queued()), (Some(1), Some(1)));
    assert_eq!(manager.key("db").snapshot().unwrap().queued, Some(0));
}
}

paused_test! {
async fn a_slot_freed_before_the_timeout_is_taken() {
    let manager = manager(
        BulkheadConfig::new(1)
            .queue(4)
            .queue_timeout(Duration::from_millis(200)),
    );
    let holder = {
        let manager = manager.clone();
        tokio::spawn(async move {
            let busy = manager.try_acquire("db", Priority::HIGH).unwrap();
            tokio::time::sleep(Duration::from_millis(150)).await;
            busy.success();
        })
    };
    settle().await;
    let start = Instant::now();
    let permit = manager.acquire("db", Priority::HIGH).await;
    assert!(permit.is_ok());
    assert_eq!(start.elapsed(), Duration::from_millis(150));
    holder.await.unwrap();
}
}

async fn fill(
    manager: &ThrottleManager<String>,
    arrivals: &[(&'static str, Priority)],
) -> Vec<(&'static str, JoinHandle<Result<(), RejectReason>>)> {
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut calls = Vec::new();
    for &(name, priority) in arrivals {
        calls.push((
            name,
            spawn_call(manager, name, priority, Duration::from_millis(10), &order),
        ));
        settle().await;
    }
    calls
}

async fn outcomes(
    calls: Vec<(&'static str, JoinHandle<Result<(), RejectReason>>)>,
) -> Vec<(&'static str, Result<(), RejectReason>)> {
    let mut out = Vec::new();
    for (name, call) in calls {
        out.push((name, call.await.unwrap()));
    }
    out
}

paused_test! {
async fn overflow_reject_new() {
    let manager = manager(BulkheadConfig::new(1).queue(2));
    let calls = fill(
        &manager,
        &[
            ("run", Priority::LOW),
            ("a", Priority::LOW),
            ("b", Priority::LOW),
            ("new", Priority::HIGH),
        ],
    )
    .await;
    let results = outcomes(calls).await;
    assert_eq!(results[3], ("new", Err(RejectReason::Full)));
    assert!(results[..3].iter().all(|(_, r)| r.is_ok()));
}
}

paused_test! {
async fn overflow_drop_oldest() {
    let manager = manager(
        BulkheadConfig::new(1)
            .queue(2)
            .overflow(Overflow::DropOldest),
    );
    let calls = fill(
        &manager,
        &[
            ("run", Priority::LOW),
            ("old", Priority::HIGH),
            ("b", Priority::LOW),
            ("new", Priority::LOW),
        ],
    )
    .await;
    let results = outcomes(calls).await;
    assert_eq!(results[1], ("old", Err(RejectReason::Dropped)));
    assert!(results[2].1.is_ok() && results[3].1.is_ok());
}
}

paused_test! {
async fn overflow_drop_lowest_priority() {
    let manager = manager(
        BulkheadConfig::new(1)
            .queue(2)
            .overflow(Overflow::DropLowestPriority),
    );
    let calls = fill(
        &manager,
        &[
            ("run", Priority::HIGH),
            ("low-old", Priority::LOW),
            ("low-new", Priority::LOW),
            ("medium", Priority::MEDIUM), // outranks LOW: drops the newest LOW
            ("low-late", Priority::LOW),  // does not outrank anyone: rejected
        ],
    )
    .await;
    let results = outcomes(calls).await;
    assert_eq!(results[2], ("low-new", Err(RejectReason::Dropped)));
    assert_eq!(results[4], ("low-late", Err(RejectReason::Full)));
    assert!(results[1].1.is_ok() && results[3].1.is_ok());
}
}

paused_test! {
async fn overflow_drop_lowest_priority_keeps_every_waiter_from_a_less_important_newcomer() {
    let manager = manager(
        BulkheadConfig::new(1)
            .queue(2)
            .overflow(Overflow::DropLowestPriority),
    );
    let calls = fill(
        &manager,
        &[
            ("run", Priority::HIGH),
            ("high", Priority::HIGH),
            ("medium", Priority::MEDIUM),
            ("low", Priority::LOW), // outranks no waiter: rejected
        ],
    )
    .await;
    let results = outcomes(calls).await;
    assert_eq!(results[3], ("low", Err(RejectReason::Full)));
    assert!(results[1].1.is_ok() && results[2].1.is_ok(), "{results:?}");
}
}

paused_test! {
async fn a_cancelled_waiter_leaves_the_queue_at_once() {
    let manager = manager(BulkheadConfig::new(1).queue(4));
    let busy = manager.try_acquire("db", Priority::HIGH).unwrap();
    let waiter = {
        let manager = manager.clone();
        tokio::spawn(async move { manager.acquire("db", Priority::HIGH).await.is_ok() })
    };
    settle().await;
    assert_eq!(manager.key("db").snapshot().unwrap().queued, Some(1));
    waiter.abort();
    let _ = waiter.await;
    assert_eq!(manager.key("db").snapshot().unwrap().queued, Some(0));
    drop(busy);
    assert_eq!(
        manager.key("db").snapshot().unwrap().active,
        Some(0),
        "no slot went to the gone waiter"
    );
}
}

paused_test! {
async fn a_slot_handed_to_a_waiter_as_it_is_cancelled_passes_on() {
    let manager = manager(BulkheadConfig::new(1).queue(4));
    let busy = manager.try_acquire("db", Priority::HIGH).unwrap();
    let first = {
        let manager = manager.clone();
        tokio::spawn(async move { manager.acquire("db", Priority::HIGH).await.is_ok() })
    };
    settle().await;
    let second = {
        let manager = manager.clone();
        tokio::spawn(async move {
            let permit = manager.acquire("db", Priority::HIGH).await;
            permit.is_ok()
        })
    };
    settle().await;
    // The slot is handed to `first` and, before `first` runs, `first` is
    // cancelled: the slot must reach `second`, not vanish.
    drop(busy);
    first.abort();
    assert!(first.await.unwrap_err().is_cancelled());
    assert!(second.await.unwrap());
    let status = manager.key("db").snapshot().unwrap();
    assert_eq!((status.active, status.queued), (Some(0), Some(0)));
}
}

paused_test! {
async fn a_panic_inside_the_call_releases_the_slot() {
    let manager = manager(BulkheadConfig::new(1));
    let task = {
        let manager = manager.clone();
        tokio::spawn(async move {
            let _permit = manager.acquire("db", Priority::HIGH).await.unwrap();
            panic!("the user's code panicked");
        })
    };
    assert!(task.await.unwrap_err().is_panic());
    assert_eq!(manager.key("db").snapshot().unwrap().active, Some(0));
    assert!(manager.try_acquire("db", Priority::HIGH).is_ok());
}
}

paused_test! {
async fn try_acquire_never_queues() {
    let manager = manager(BulkheadConfig::new(1).queue(8));
    let _busy = manager.try_acquire("db", Priority::HIGH).unwrap();
    let rejected = manager.try_acquire("db", Priority::HIGH).unwrap_err();
    assert_eq!(rejected.reason(), RejectReason::Full);
    assert_eq!(manager.key("db").snapshot().unwrap().queued, Some(0));
}
}

paused_test! {
async fn a_bulkhead_rejection_gives_the_rate_token_back() {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(1.0).bounds(1.0, 1.0))
        .bulkhead(
            BulkheadConfig::new(1)
                .queue(1)
                .queue_timeout(Duration::from_millis(100)),
        )
        .build()
        .unwrap();
    let busy = manager.try_acquire("db", Priority::HIGH).unwrap(); // token 1 and the slot
    // Waits 1 s for token 2, then 100 ms in the queue, then gives up: token 2
    // goes back.
    let rejected = manager.acquire("db", Priority::HIGH).await.unwrap_err();
    assert_eq!(rejected.reason(), RejectReason::QueueTimeout);
    drop(busy);
    assert!(
        manager.try_acquire("db", Priority::HIGH).is_ok(),
        "token 2 is still there"
    );
}
}

paused_test! {
async fn a_waiter_given_up_in_the_queue_gives_the_rate_token_back() {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_second(1).burst(2))
        .bulkhead(BulkheadConfig::new(1).queue(1))
        .build()
        .unwrap();
    let busy = manager.try_acquire("db", Priority::HIGH).unwrap(); // token 1 and the slot
    // Takes token 2, then queues for the slot, and is given up there.
    let waiter = {
        let manager = manager.clone();
        tokio::spawn(async move { manager.acquire("db", Priority::HIGH).await.is_ok() })
    };
    settle().await;
    assert_eq!(manager.key("db").snapshot().unwrap().queued, Some(1));
    assert_eq!(manager.peek("db").unwrap().remaining, 0);
    waiter.abort();
    let _ = waiter.await;
    assert_eq!(manager.peek("db").unwrap().remaining, 1, "token 2 is back");
    drop(busy);
}
}

paused_test! {
async fn a_try_acquire_the_bulkhead_refuses_takes_no_rate_token() {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(1.0).burst(2).bounds(1.0, 1.0))
        .bulkhead(BulkheadConfig::new(1))
        .build()
        .unwrap();
    let busy = manager.try_acquire("db", Priority::HIGH).unwrap(); // token 1 and the slot
    for _ in 0..3 {
        let rejected = manager.try_acquire("db", Priority::HIGH).unwrap_err();
        assert_eq!(rejected.reason(), RejectReason::Full);
    }
    drop(busy);
    assert!(
        manager.try_acquire("db", Priority::HIGH).is_ok(),
        "token 2 is still there"
    );
}
}

paused_test! {
async fn a_rate_rejection_in_try_acquire_frees_the_slot() {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(1.0).bounds(1.0, 1.0))
        .bulkhead(BulkheadConfig::new(1))
        .build()
        .unwrap();
    drop(manager.try_acquire("db", Priority::HIGH).unwrap());
    let rejected = manager.try_acquire("db", Priority::HIGH).unwrap_err();
    assert_eq!(rejected.reason(), RejectReason::RateLimited);
    assert_eq!(manager.key("db").snapshot().unwrap().active, Some(0));
}
}

paused_test! {
async fn the_rate_is_waited_for_before_a_slot_is_taken() {
    // Slots are not held idle while a call sleeps for its rate token: with 1
    // slot and 2 calls/s, a call waiting for its token leaves the slot free.
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(2.0).bounds(2.0, 2.0))
        .bulkhead(BulkheadConfig::new(1))
        .build()
        .unwrap();
    drop(manager.try_acquire("db", Priority::HIGH).unwrap());
    let sleeper = {
        let manager = manager.clone();
        tokio::spawn(async move { manager.acquire("db", Priority::HIGH).await.is_ok() })
    };
    settle().await;
    assert_eq!(manager.key("db").snapshot().unwrap().active, Some(0));
    assert!(sleeper.await.unwrap());
}
}

#[test]
fn listing_every_key_for_a_health_endpoint() {
    let manager = manager(BulkheadConfig::new(3));
    let _a1 = manager.try_acquire("a", Priority::HIGH).unwrap();
    let _a2 = manager.try_acquire("a", Priority::HIGH).unwrap();
    let _b = manager.try_acquire("b", Priority::HIGH).unwrap();
    let mut seen: Vec<_> = manager
        .snapshots()
        .map(|(key, snapshot)| (key, snapshot.active, snapshot.queued))
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        [
            ("a".to_string(), Some(2), Some(0)),
            ("b".to_string(), Some(1), Some(0))
        ]
    );
}

#[test]
fn bad_bulkhead_configs_are_named() {
    let err = ThrottleManager::<String>::builder()
        .bulkhead(BulkheadConfig::new(0))
        .build()
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid configuration: bulkhead.max_concurrent: must be at least 1, got 0"
    );
}

#[test]
fn one_key_can_have_its_own_bulkhead() {
    let manager = ThrottleManager::<String>::builder()
        .bulkhead(BulkheadConfig::new(3))
        .key_override(
            "api.github.com",
            Tier::new().bulkhead(BulkheadConfig::new(1)),
        )
        .build()
        .unwrap();
    let _github = manager
        .try_acquire("api.github.com", Priority::HIGH)
        .unwrap();
    let rejected = manager
        .try_acquire("api.github.com", Priority::HIGH)
        .unwrap_err();
    assert_eq!(
        (rejected.reason(), rejected.active()),
        (RejectReason::Full, Some(1))
    );
    let _others: Vec<_> = (0..3)
        .map(|_| manager.try_acquire("example.com", Priority::HIGH).unwrap())
        .collect();
    assert!(manager.try_acquire("example.com", Priority::HIGH).is_err());
}

#[test]
fn an_override_alone_gives_only_that_key_a_bulkhead() {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(1_000.0).burst(10))
        .key_override(
            "api.github.com",
            Tier::new().bulkhead(BulkheadConfig::new(1)),
        )
        .build()
        .unwrap();
    let _github = manager
        .try_acquire("api.github.com", Priority::HIGH)
        .unwrap();
    assert_eq!(
        manager
            .try_acquire("api.github.com", Priority::HIGH)
            .unwrap_err()
            .reason(),
        RejectReason::Full
    );
    let _a = manager.try_acquire("example.com", Priority::HIGH).unwrap();
    let _b = manager.try_acquire("example.com", Priority::HIGH).unwrap();
    assert_eq!(manager.key("example.com").snapshot().unwrap().active, None);

    let err = ThrottleManager::<String>::builder()
        .key_override("api", Tier::new().bulkhead(BulkheadConfig::new(0)))
        .build()
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"invalid configuration: bulkhead_override["api"].max_concurrent: must be at least 1, got 0"#
    );
}

/// Every way in meets the bulkhead's room before the rate: with the one
/// slot held and the rate's one token spent, each refuses the call as the
/// bulkhead's (`Full`), not the rate's. Without the room check, the ways
/// that wait would meet the rate first and be refused as `RateLimited`.
#[tokio::test(start_paused = true)]
async fn a_full_bulkhead_refuses_before_the_rate_on_every_path() {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(1.0).burst(1))
        .bulkhead(BulkheadConfig::new(1))
        .time_limits(TimeLimits::new().max_wait(Duration::ZERO))
        .build()
        .unwrap();
    let _held = manager.try_acquire("db", Priority::HIGH).unwrap();
    let mut reasons = vec![
        (
            "try_acquire",
            manager.try_acquire("db", Priority::HIGH).map(drop),
        ),
        (
            "try_acquire_owned",
            manager.try_acquire_owned("db", Priority::HIGH).map(drop),
        ),
        (
            "acquire",
            manager.acquire("db", Priority::HIGH).await.map(drop),
        ),
        (
            "acquire_owned",
            manager.acquire_owned("db", Priority::HIGH).await.map(drop),
        ),
        (
            "try_acquire_or_queue_owned",
            manager
                .try_acquire_or_queue_owned("db", Priority::HIGH)
                .await
                .map(drop),
        ),
    ];
    let called = manager
        .call("db", Priority::HIGH, || async {
            Ok::<_, std::io::Error>(())
        })
        .await;
    reasons.push((
        "call",
        called.map_err(|error| match error {
            portcullis::CallError::Rejected(rejected) => rejected,
            other => panic!("call: {other}"),
        }),
    ));
    for (path, refused) in reasons {
        assert_eq!(refused.unwrap_err().reason(), RejectReason::Full, "{path}");
    }
}

paused_test! {
    async fn a_waiter_moved_to_another_task_is_woken_there() {
        let manager = manager(BulkheadConfig::new(1).queue(1));
        let busy = manager.try_acquire("db", Priority::HIGH).unwrap();
        // Polled once where nobody will wake it (a select! arm, a future
        // built in one task and spawned into another), it queues...
        let mut waiting = Box::pin(owned_acquire(&manager));
        let mut elsewhere = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(waiting.as_mut().poll(&mut elsewhere).is_pending());
        assert_eq!(manager.key("db").snapshot().unwrap().queued, Some(1));
        // ...then runs in a task of its own: the slot given back wakes that
        // task, not the waker it was first polled with.
        let task = tokio::spawn(waiting);
        tokio::task::yield_now().await;
        busy.success();
        let permit = tokio::time::timeout(Duration::from_secs(1), task)
            .await
            .expect("the moved waiter was never woken")
            .unwrap()
            .unwrap();
        permit.success();
    }
}

/// `acquire_owned` on a clone of the manager: a future that can move.
fn owned_acquire(
    manager: &ThrottleManager<String>,
) -> impl Future<Output = Result<portcullis::manager::OwnedPermit, portcullis::Rejected>> + Send + 'static
{
    let manager = manager.clone();
    async move { manager.acquire_owned("db", Priority::HIGH).await }
}
