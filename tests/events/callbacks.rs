//! User callbacks that panic: a per-key rule, the classifier, the key
//! naming, the random source. None of them may leak key-space room, a
//! bulkhead slot, a throttle count or a lock.

use crate::support;

use std::panic::{AssertUnwindSafe, catch_unwind};

use portcullis::builder::KeySpaceConfig;
use portcullis::builder::Tier;
use portcullis::outcome::Outcome;
use portcullis::priority::with_priority;
use portcullis::{BulkheadConfig, Priority, RateConfig, ThrottleConfig, ThrottleManager};

/// Debug events on, so that key names are asked for; held for the test,
/// as every test of this binary holds the capture.
fn debug_events() -> std::sync::MutexGuard<'static, ()> {
    support::capture().0
}

fn panics(f: impl FnOnce()) -> bool {
    catch_unwind(AssertUnwindSafe(f)).is_err()
}

#[test]
fn a_panicking_per_key_rule_gives_its_room_back() {
    let _events = debug_events();
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(10.0))
        .tier("long", Tier::new().rate(RateConfig::adaptive(20.0)))
        .tier_of(|key: &String| {
            // A rule that slices untrusted keys: panics on short ones.
            let _prefix = &key[..8];
            None
        })
        .key_space(KeySpaceConfig::new().max_keys(100))
        .build()
        .unwrap();
    for i in 0..100 {
        assert!(panics(|| {
            let _ = manager.check(format!("k{i}").as_str());
        }));
    }
    // Every one of the 100 places is still free.
    for i in 0..100 {
        let key = format!("long-key-{i}");
        assert!(manager.check(key.as_str()).is_ok(), "key {i} refused");
    }
}

#[test]
fn a_per_key_rule_may_call_the_manager() {
    let _events = debug_events();
    // The rule runs outside the key space's locks: asking the manager about
    // another key (or the same one) from inside it does not deadlock.
    let shared = std::sync::Arc::new(std::sync::OnceLock::<ThrottleManager<String>>::new());
    let inside = std::sync::Arc::clone(&shared);
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(10.0))
        .tier("other", Tier::new().rate(RateConfig::adaptive(20.0)))
        .tier_of(move |key: &String| {
            if let Some(manager) = inside.get() {
                let _ = manager.key(key.as_str()).rate();
                let _ = manager.key("other").rate();
            }
            None
        })
        .build()
        .unwrap();
    shared.set(manager.clone()).ok().unwrap();
    // On a thread of its own, so that a deadlock fails the test instead of
    // hanging it.
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let admitted = (0..1_000)
            .filter(|i| manager.check(format!("k{i}").as_str()).is_ok())
            .count();
        let _ = done.send(admitted);
    });
    let admitted = finished
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("deadlocked: the rule ran under the key space's lock");
    assert_eq!(admitted, 1_000);
}

/// A name is only a name: a `key_names` that panics on a key names it
/// `<unnamed>` (said once), and the call goes on, leaking nothing.
#[test]
fn a_panicking_key_name_names_the_key_unnamed_and_leaks_nothing() {
    let (_one_at_a_time, events) = support::capture();
    let manager = ThrottleManager::<String>::builder()
        .bulkhead(BulkheadConfig::new(1))
        .key_names(|key: &String| {
            assert!(key != "bad", "no name for this key");
            key.clone()
        })
        .build()
        .unwrap();
    for _ in 0..3 {
        let permit = manager.try_acquire("bad", Priority::HIGH).unwrap();
        // The key's one slot is held, and its shard is not locked.
        assert_eq!(manager.key("bad").snapshot().unwrap().active, Some(1));
        assert!(manager.try_acquire("bad", Priority::HIGH).is_err());
        permit.success();
        assert_eq!(manager.key("bad").snapshot().unwrap().active, Some(0));
    }
    assert!(manager.try_acquire("good", Priority::HIGH).is_ok());
    let lines = events.lines();
    let said = lines
        .iter()
        .filter(|line| line.contains("key_names panicked"));
    assert_eq!(said.count(), 1, "{lines:#?}");
    assert!(
        lines.iter().any(|line| line.contains("key=\"<unnamed>\"")),
        "{lines:#?}"
    );
}

#[test]
fn a_panicking_random_source_counts_nothing_and_holds_no_slot() {
    let _events = debug_events();
    let manager = ThrottleManager::<String>::builder()
        .throttle(ThrottleConfig::new())
        .bulkhead(BulkheadConfig::new(1))
        .random_source(|| panic!("no randomness today"))
        .build()
        .unwrap();
    // Failures at LOW: LOW calls may be shed, so the draw is made.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime.block_on(with_priority(Priority::LOW, async {
        for _ in 0..20 {
            manager.decrement("db");
        }
    }));
    let before = manager.key("db").snapshot().unwrap();
    assert!(panics(|| {
        let _ = manager.try_acquire("db", Priority::LOW);
    }));
    let after = manager.key("db").snapshot().unwrap();
    assert_eq!(after.active, Some(0));
    assert_eq!(
        after.priorities[3].requests, before.priorities[3].requests,
        "the throttle counted a call that never happened"
    );
    // HIGH never draws: it goes through, and the slot is there to take.
    assert!(manager.try_acquire("db", Priority::HIGH).is_ok());
}

#[tokio::test]
async fn a_panicking_classifier_frees_the_slot_and_counts_the_call_once() {
    let _events = debug_events();
    let manager = ThrottleManager::<String>::builder()
        .throttle(ThrottleConfig::new())
        .bulkhead(BulkheadConfig::new(1))
        .classifier(|_error| -> Outcome { panic!("cannot classify") })
        .build()
        .unwrap();
    let inner = manager.clone();
    let task = tokio::spawn(async move {
        inner
            .call("db", Priority::HIGH, || async {
                Err::<(), _>(std::io::Error::other("boom"))
            })
            .await
    });
    assert!(task.await.unwrap_err().is_panic());
    let snapshot = manager.key("db").snapshot().unwrap();
    assert_eq!(snapshot.active, Some(0));
    // The call was made: it counts once, as an outcome that says nothing.
    assert_eq!(snapshot.priorities[0].requests, 1);
    assert_eq!(snapshot.priorities[0].accepts, 1);
    assert!(manager.try_acquire("db", Priority::HIGH).is_ok());
}
