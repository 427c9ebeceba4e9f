//! The page as a stranger (or a bug) would load it: a lookup costs what
//! it returns, not the key space; a `key_names` that panics on a key
//! leaves the page working; every method's refusals reach it.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::body::Body;
use axum::http::Request;
use portcullis::builder::KeySpaceConfig;
use portcullis::status::StatusPage;
use portcullis::{BulkheadConfig, Priority, RateConfig, ThrottleManager};
use serde_json::Value;

use crate::support;

/// `uri` of `router`: its status and JSON.
async fn ask(router: &axum::Router, uri: &str) -> (u16, Value) {
    let request = Request::get(uri).body(Body::empty()).unwrap();
    let answer = tower::ServiceExt::oneshot(router.clone(), request)
        .await
        .unwrap();
    let status = answer.status().as_u16();
    let bytes = axum::body::to_bytes(answer.into_body(), usize::MAX)
        .await
        .unwrap();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// A manager of `keys` live keys (`k0`, `k1`, …) whose `key_names` counts
/// its calls, and two routers of its page: one that finds only the keys it
/// shows, one with `key_from_name`.
fn keyed(keys: usize) -> (ThrottleManager<String>, Arc<AtomicUsize>, [axum::Router; 2]) {
    let named = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&named);
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(100.0))
        .key_space(KeySpaceConfig::new().max_keys(keys + 10))
        .key_names(move |key: &String| {
            counter.fetch_add(1, Ordering::Relaxed);
            key.clone()
        })
        .build()
        .unwrap();
    for i in 0..keys {
        manager.check(&format!("k{i}")).unwrap();
    }
    let shown_only = StatusPage::new(&manager).unwrap().router();
    let by_name = StatusPage::builder(&manager)
        .key_from_name(|name: &str| Some(name.to_owned()))
        .build()
        .unwrap()
        .router();
    (manager, named, [shown_only, by_name])
}

/// The names `key_names` gave while each of these lookups ran: an unknown
/// name and a live key no list shows, on both routers.
async fn names_a_lookup_costs(keys: usize) -> Vec<(u16, usize)> {
    let (_manager, named, routers) = keyed(keys);
    // The keys' debts are paid: none waits, so no list shows any.
    tokio::time::advance(Duration::from_secs(1)).await;
    for router in &routers {
        let (status, _) = ask(router, "/keys").await; // sampling starts
        assert_eq!(status, 200);
    }
    let mut costs = Vec::new();
    for router in &routers {
        for name in ["nobody", "k3"] {
            let before = named.load(Ordering::Relaxed);
            let (status, _) = ask(router, &format!("/keys/{name}")).await;
            costs.push((status, named.load(Ordering::Relaxed) - before));
        }
    }
    costs
}

/// A lookup asks `key_names` for at most the one name it checks, with 10
/// live keys as with 300,000: it walks none of them. (The page used to
/// name every key in turn until it found the one asked for.)
#[tokio::test(start_paused = true)]
async fn a_lookup_costs_the_same_whatever_the_key_space() {
    let few = names_a_lookup_costs(10).await;
    let many = names_a_lookup_costs(300_000).await;
    assert_eq!(few, many);
    // Shown only: both unknown to the page, at once, naming nothing. By
    // name: each name's key is named once, to check it is that key's
    // name; the unknown one is not live.
    assert_eq!(many, [(404, 0), (404, 0), (404, 1), (200, 1)]);
}

/// A key found by its value but named otherwise (a secret shown under
/// another name) is not found by its value.
#[tokio::test]
async fn a_key_is_found_only_by_the_name_the_page_shows() {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(100.0))
        .key_names(|key: &String| format!("user #{}", key.len()))
        .build()
        .unwrap();
    manager.check("alice-token").unwrap();
    let router = StatusPage::builder(&manager)
        .key_from_name(|name: &str| Some(name.to_owned()))
        .build()
        .unwrap()
        .router();
    let (status, _) = ask(&router, "/keys/alice-token").await;
    assert_eq!(status, 404);
}

/// A `key_names` that panics on one key: the key is shown as `<unnamed>`,
/// the panic is said once however often it recurs, and the page goes on
/// sampling and answering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_names_that_panics_leaves_the_page_working() {
    let (_one_at_a_time, events) = support::capture();
    let manager = ThrottleManager::<String>::builder()
        .bulkhead(BulkheadConfig::new(4))
        .key_names(|key: &String| {
            assert!(key != "poison", "no name for this key");
            key.clone()
        })
        .build()
        .unwrap();
    let _held = [
        manager.try_acquire("poison", Priority::HIGH).unwrap(),
        manager.try_acquire("fine", Priority::HIGH).unwrap(),
        manager.try_acquire("fine", Priority::HIGH).unwrap(),
    ];
    let router = StatusPage::builder(&manager)
        .sample_every(Duration::from_millis(50))
        .history(Duration::from_secs(5))
        .build()
        .unwrap()
        .router();
    let mut samples = Vec::new();
    for _ in 0..5 {
        let (status, body) = ask(&router, "/keys?sort=in_flight").await;
        assert_eq!(status, 200, "{body}");
        samples.push(body["sampled_at_ms"].as_u64().unwrap());
        let names: Vec<&str> = body["keys"]
            .as_array()
            .unwrap()
            .iter()
            .map(|row| row["key"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["fine", "<unnamed>"], "{body}");
        tokio::time::sleep(Duration::from_millis(120)).await;
    }
    samples.dedup();
    assert!(samples.len() >= 3, "the sampler stopped: {samples:?}");
    let (status, _) = ask(&router, "/keys/%3Cunnamed%3E").await;
    assert_eq!(
        status, 200,
        "a key shown can be asked for by its shown name"
    );
    let said = events
        .lines()
        .iter()
        .filter(|line| line.contains("key_names panicked"))
        .count();
    assert_eq!(said, 1);
}

/// Refusals of `check`, `check_n` and `wait_n` reach the page, as those of
/// `try_acquire` do.
#[tokio::test(start_paused = true)]
async fn every_method_s_refusals_reach_the_page() {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_minute(1).burst(2))
        .key_names(|key: &String| key.clone())
        .build()
        .unwrap();
    let router = StatusPage::new(&manager).unwrap().router();
    manager.check("checked").unwrap();
    manager.check("checked").unwrap();
    for _ in 0..3 {
        manager.check("checked").unwrap_err();
    }
    manager.key("costly").check(3).unwrap_err();
    manager.key("costly").wait(3).await.unwrap_err();
    manager.try_acquire("checked", Priority::HIGH).unwrap_err();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (status, body) = ask(&router, "/keys?sort=refusals").await;
    assert_eq!(status, 200);
    let refusals = &body["totals"]["refusals"];
    assert_eq!(refusals["rate_limited"], 4, "{body}");
    assert_eq!(refusals["cost_above_burst"], 2, "{body}");
    assert_eq!(body["keys"][0]["key"], "checked", "{body}");
}
