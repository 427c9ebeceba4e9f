//! Calls charged to several keys: admitted by all or by none, and nothing
//! a refused or cancelled call took stays taken.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use portcullis::clock::ManualClock;
use portcullis::error::RejectReason;
use portcullis::{BulkheadConfig, Priority, RateConfig, ThrottleConfig, ThrottleManager};
use proptest::prelude::*;

fn requests(manager: &ThrottleManager<String>, key: &str) -> u64 {
    let snapshot = manager.key(key).snapshot().expect("the key exists");
    snapshot.priorities.iter().map(|level| level.requests).sum()
}

#[tokio::test(start_paused = true)]
async fn a_call_its_second_key_refuses_leaves_the_first_as_it_was() {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_second(10))
        .throttle(ThrottleConfig::new())
        .bulkhead(BulkheadConfig::new(1))
        .build()
        .unwrap();
    let busy = manager.try_acquire("tenant-a", Priority::HIGH).unwrap();
    let refused = manager
        .acquire_all(&["user-7", "tenant-a"], Priority::HIGH)
        .await
        .unwrap_err();
    assert_eq!(refused.reason(), RejectReason::Full);
    assert_eq!(refused.key_index(), Some(1));
    let user = manager.key("user-7").snapshot().unwrap();
    assert_eq!((user.active, user.queued), (Some(0), Some(0)));
    assert_eq!(manager.peek("user-7").unwrap().remaining, 10);
    assert_eq!(
        requests(&manager, "user-7"),
        0,
        "the throttle counted a call that never went"
    );
    busy.success();
    // With the tenant's slot free, the same call goes, and holds both.
    let permit = manager
        .acquire_all(&["user-7", "tenant-a"], Priority::HIGH)
        .await
        .unwrap();
    assert_eq!(manager.key("user-7").snapshot().unwrap().active, Some(1));
    assert_eq!(manager.key("tenant-a").snapshot().unwrap().active, Some(1));
    permit.overloaded();
    assert_eq!(requests(&manager, "user-7"), 1);
    assert_eq!(requests(&manager, "tenant-a"), 2);
    assert_eq!(manager.key("tenant-a").snapshot().unwrap().active, Some(0));
}

#[tokio::test(start_paused = true)]
async fn without_a_bulkhead_the_keys_before_a_refusal_get_their_tokens_back() {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_second(1).burst(5))
        .clock(ManualClock::new())
        .build()
        .unwrap();
    manager.key("user-7").check(4).unwrap();
    let refused = manager
        .try_acquire_all(&["tenant-a", "crawl", "user-7"], Priority::HIGH.cost(2))
        .unwrap_err();
    assert_eq!(
        (refused.reason(), refused.key_index()),
        (RejectReason::RateLimited, Some(2))
    );
    assert_eq!(manager.peek("tenant-a").unwrap().remaining, 5);
    assert_eq!(manager.peek("crawl").unwrap().remaining, 5);
    assert_eq!(manager.peek("user-7").unwrap().remaining, 1);
}

#[tokio::test(start_paused = true)]
async fn a_slot_given_back_goes_to_the_head_of_its_queue() {
    let manager = ThrottleManager::<String>::builder()
        .bulkhead(BulkheadConfig::new(1).queue(4))
        .build()
        .unwrap();
    let user = manager.try_acquire("user-7", Priority::HIGH).unwrap();
    let busy = manager.try_acquire("tenant-a", Priority::HIGH).unwrap();
    // A joint call queues for the user after taking the tenant's slot...
    let joint = tokio::spawn({
        let manager = manager.clone();
        async move {
            let tenant_then_user = ["tenant-b", "user-7"];
            manager
                .acquire_all(&tenant_then_user, Priority::HIGH)
                .await
                .map(drop)
        }
    });
    tokio::task::yield_now().await;
    assert_eq!(manager.key("tenant-b").snapshot().unwrap().active, Some(1));
    // ... and another call queues for tenant-b behind it.
    let waiter = tokio::spawn({
        let manager = manager.clone();
        async move { manager.acquire("tenant-b", Priority::HIGH).await.map(drop) }
    });
    tokio::task::yield_now().await;
    assert_eq!(manager.key("tenant-b").snapshot().unwrap().queued, Some(1));
    // Cancelled, the joint call hands tenant-b's slot to that waiter.
    joint.abort();
    assert!(joint.await.unwrap_err().is_cancelled());
    let handed_on = tokio::time::timeout(Duration::from_secs(1), waiter).await;
    handed_on
        .expect("the waiter never had the slot")
        .unwrap()
        .unwrap();
    let tenant = manager.key("tenant-b").snapshot().unwrap();
    assert_eq!((tenant.active, tenant.queued), (Some(0), Some(0)));
    assert_eq!(manager.key("user-7").snapshot().unwrap().queued, Some(0));
    drop((user, busy));
}

#[tokio::test(start_paused = true)]
async fn a_joint_call_goes_when_its_slowest_key_has_a_token() {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_second(2).burst(1))
        .build()
        .unwrap();
    manager.check("user-7").unwrap(); // the user's next token is 500 ms away
    let start = tokio::time::Instant::now();
    manager
        .acquire_all(&["tenant-a", "user-7"], Priority::HIGH)
        .await
        .unwrap()
        .success();
    assert_eq!(start.elapsed(), Duration::from_millis(500));
    assert_eq!(manager.peek("user-7").unwrap().remaining, 0);
}

#[tokio::test(start_paused = true)]
async fn a_key_named_twice_is_refused_before_any_key_counts_the_call() {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_second(10))
        .build()
        .unwrap();
    let refused = manager
        .acquire_all(&["user-7", "tenant-a", "user-7"], Priority::HIGH.cost(2))
        .await
        .unwrap_err();
    assert_eq!(refused.reason(), RejectReason::DuplicateKey);
    assert!(
        refused.to_string().contains("keys[0] and keys[2]"),
        "{refused}"
    );
    assert!(manager.key("user-7").snapshot().is_none());
    assert!(manager.key("tenant-a").snapshot().is_none());
    let refused = manager
        .try_acquire_all(&["a", "b", "b"], Priority::HIGH)
        .unwrap_err();
    assert!(
        refused.to_string().contains("keys[1] and keys[2]"),
        "{refused}"
    );
    // No keys: nothing to wait for, nothing held.
    let none: [&str; 0] = [];
    manager
        .try_acquire_all(&none, Priority::HIGH)
        .unwrap()
        .success();
}

/// One step of a call charged to several keys, for the model below.
#[derive(Debug, Clone)]
struct Step {
    /// Which of the keys the call is charged to, in this order.
    keys: Vec<usize>,
    cost: u32,
    /// Whether the caller keeps its permit (holding the slots) until the
    /// end, or reports at once.
    keep: bool,
    /// Whether the caller waits (`acquire_all_n`) or not
    /// (`try_acquire_all_n`, refused where it would wait).
    waits: bool,
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let step = (
        proptest::sample::subsequence((0..KEYS).collect::<Vec<_>>(), 1..=KEYS).prop_shuffle(),
        0u32..=4,
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(keys, cost, keep, waits)| Step {
            keys,
            cost,
            keep,
            waits,
        });
    proptest::collection::vec(step, 1..40)
}

const KEYS: usize = 4;
const BURST: u32 = 6;
const SLOTS: u32 = 2;

proptest! {
    /// On frozen time nothing refills, so every token is accounted for: a
    /// key's tokens left are its burst less what admitted calls took, and
    /// its busy slots are the permits still held, whatever refused or
    /// abandoned the calls in between. A waiting call the keys cannot all
    /// admit at once is polled once (it may take tokens and slots of the
    /// keys before the one it waits for) and then dropped, as a caller
    /// giving up; one that does not wait is refused.
    #[test]
    fn refused_and_abandoned_calls_leave_every_key_as_it_was(steps in steps()) {
        let manager = ThrottleManager::<String>::builder()
            .rate(RateConfig::per_second(1).burst(BURST))
            .bulkhead(BulkheadConfig::new(SLOTS).queue(2))
            .clock(ManualClock::new())
            .build()
            .unwrap();
        let names: Vec<String> = (0..KEYS).map(|key| format!("key-{key}")).collect();
        let mut taken = [0u32; KEYS];
        let mut kept = Vec::new();
        let mut held = [0u32; KEYS];
        let mut context = Context::from_waker(Waker::noop());
        for step in steps {
            let keys: Vec<&str> = step.keys.iter().map(|&key| names[key].as_str()).collect();
            let mut call = Box::pin(manager.acquire_all(&keys, Priority::HIGH.cost(step.cost)));
            let polled = if step.waits {
                call.as_mut().poll(&mut context)
            } else {
                Poll::Ready(manager.try_acquire_all(&keys, Priority::HIGH.cost(step.cost)))
            };
            match polled {
                Poll::Ready(Ok(permit)) => {
                    for &key in &step.keys {
                        taken[key] += step.cost;
                    }
                    if step.keep {
                        for &key in &step.keys {
                            held[key] += 1;
                        }
                        kept.push(permit);
                    } else {
                        permit.success();
                    }
                }
                Poll::Ready(Err(rejected)) => {
                    let why = rejected.reason();
                    prop_assert!(!step.waits, "a waiting call was refused: {}", rejected);
                    prop_assert!(why == RejectReason::Full || why == RejectReason::RateLimited, "{}", rejected);
                }
                Poll::Pending => {}
            }
            drop(call);
            for key in 0..KEYS {
                let Some(rate) = manager.peek(names[key].as_str()) else { continue };
                prop_assert_eq!(rate.remaining, BURST - taken[key], "tokens of key {}", key);
                let snapshot = manager.key(names[key].as_str()).snapshot().unwrap();
                prop_assert_eq!(snapshot.active, Some(held[key]), "slots of key {}", key);
                prop_assert_eq!(snapshot.queued, Some(0), "queue of key {}", key);
            }
        }
        drop(kept);
        for name in &names {
            if let Some(snapshot) = manager.key(name.as_str()).snapshot() {
                prop_assert_eq!(snapshot.active, Some(0));
            }
        }
    }
}

/// Many joint calls at once, on virtual time, each given up at a random
/// moment (while it waits for a token, in a queue, or never): no key ever
/// has more calls in flight than its slots, and once every call has ended
/// every slot is free and every queue empty.
#[tokio::test(start_paused = true)]
async fn joint_calls_given_up_at_random_never_leak_a_slot() {
    const CALLS: u64 = 400;
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_second(50).burst(3))
        .bulkhead(BulkheadConfig::new(SLOTS).queue(8))
        .build()
        .unwrap();
    let in_flight: Arc<[AtomicU32; KEYS]> = Arc::new(Default::default());
    let mut tasks = Vec::new();
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for _ in 0..CALLS {
        // Keys in one global order (as the docs ask), a random subset.
        let keys: Vec<usize> = (0..KEYS).filter(|_| next() % 2 == 0).collect();
        let patience = Duration::from_millis(next() % 120);
        let work = Duration::from_millis(next() % 40);
        let (manager, in_flight) = (manager.clone(), Arc::clone(&in_flight));
        tasks.push(tokio::spawn(async move {
            let names: Vec<String> = keys.iter().map(|key| format!("key-{key}")).collect();
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            let call = manager.acquire_all(&names, Priority::HIGH);
            if let Ok(Ok(permit)) = tokio::time::timeout(patience, call).await {
                for &key in &keys {
                    let now = in_flight[key].fetch_add(1, Ordering::SeqCst) + 1;
                    assert!(now <= SLOTS, "key {key} has {now} calls in flight");
                }
                tokio::time::sleep(work).await;
                for &key in &keys {
                    in_flight[key].fetch_sub(1, Ordering::SeqCst);
                }
                permit.success();
            }
        }));
        if next() % 4 == 0 {
            tokio::time::sleep(Duration::from_millis(next() % 10)).await;
        }
    }
    for task in tasks {
        task.await.unwrap();
    }
    for key in 0..KEYS {
        let snapshot = manager
            .key(format!("key-{key}").as_str())
            .snapshot()
            .unwrap();
        assert_eq!(
            (snapshot.active, snapshot.queued),
            (Some(0), Some(0)),
            "key {key}"
        );
    }
}

/// A call charged to a shared key and a user's own key, whose user has
/// spent its token: it waits for the user's token holding no slot of the
/// shared key (the database's `active` stays 0, and another user's call
/// takes the slot meanwhile), then takes both.
#[tokio::test(start_paused = true)]
async fn a_joint_call_waiting_for_its_second_keys_token_holds_no_slot_of_the_first() {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_second(1).burst(2))
        .bulkhead(BulkheadConfig::new(1))
        .build()
        .unwrap();
    manager
        .try_acquire("user-7", Priority::HIGH.cost(2))
        .unwrap()
        .success();
    let waiting = {
        let manager = manager.clone();
        tokio::spawn(async move {
            let permit = manager
                .acquire_all(&["database", "user-7"], Priority::HIGH)
                .await
                .unwrap();
            permit.success();
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiting.is_finished(), "user-7 has no token for a second");
    assert_eq!(manager.key("database").snapshot().unwrap().active, Some(0));
    let other = manager.try_acquire("database", Priority::HIGH).unwrap();
    assert_eq!(manager.key("database").snapshot().unwrap().active, Some(1));
    other.success();
    waiting.await.unwrap();
    assert_eq!(manager.key("database").snapshot().unwrap().active, Some(0));
    assert_eq!(manager.key("user-7").snapshot().unwrap().active, Some(0));
}

/// `call_all`'s outcome reaches every key (an overload lowers each key's
/// rate), and its refusal takes nothing from any key and never runs the
/// call.
#[tokio::test(start_paused = true)]
async fn call_all_reports_to_every_key_and_its_refusal_takes_nothing() {
    let manager = ThrottleManager::<String>::builder()
        .rate(
            RateConfig::adaptive(10.0)
                .burst(2)
                .bounds(1.0, 100.0)
                .decrease_factor(0.5),
        )
        .bulkhead(BulkheadConfig::new(1))
        .build()
        .unwrap();
    let failed = manager
        .call_all(&["user-7", "database"], Priority::HIGH, || async {
            Err::<(), _>(portcullis::overloaded(std::io::Error::other(
                "the backend is overloaded",
            )))
        })
        .await;
    assert!(failed.is_err());
    assert_eq!(manager.key("user-7").rate(), Some(5.0));
    assert_eq!(manager.key("database").rate(), Some(5.0));

    let busy = manager.try_acquire("database", Priority::HIGH).unwrap();
    let user_tokens = manager.peek("user-7").unwrap().remaining;
    let ran = AtomicU32::new(0);
    let refused = manager
        .call_all(&["user-7", "database"], Priority::HIGH, || async {
            ran.fetch_add(1, Ordering::Relaxed);
            Ok::<(), std::io::Error>(())
        })
        .await
        .unwrap_err();
    let portcullis::CallError::Rejected(refused) = refused else {
        panic!("refused, not run: {refused:?}");
    };
    assert_eq!(refused.reason(), RejectReason::Full);
    assert_eq!(refused.key_index(), Some(1));
    assert_eq!(ran.load(Ordering::Relaxed), 0);
    assert_eq!(manager.peek("user-7").unwrap().remaining, user_tokens);
    assert_eq!(manager.key("user-7").snapshot().unwrap().active, Some(0));
    busy.success();
}
