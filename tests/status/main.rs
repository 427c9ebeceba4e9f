//! The status page on a real server over loopback: its JSON against the
//! manager's own snapshots, and the page in a real headless browser.

#![cfg(feature = "status")]
// A test that captures events holds the capture's lock across its awaits,
// so that no other capturing test runs at once; each test's future is
// driven on its own thread, so the lock blocks no other task.
#![allow(clippy::await_holding_lock)]

mod browser;
mod hostile;
#[path = "../support/mod.rs"]
mod support;

use std::time::Duration;

use portcullis::builder::KeySpaceConfig;
use portcullis::clock::ManualClock;
use portcullis::status::StatusPage;
use portcullis::{BulkheadConfig, Priority, ThrottleConfig, ThrottleManager};
use serde_json::Value;

/// Serves `router` on a loopback port; its base URL.
pub(crate) async fn serve(router: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    format!("http://{address}")
}

/// A manager whose keys starting with "secret" are shown as "redacted", on
/// a clock that stands still (so its snapshots do not move under a test),
/// drawing its shedding from an even, fixed sequence (so how many calls it
/// sheds, and its probabilities, are the same on every run).
fn manager() -> ThrottleManager<String> {
    let draws = std::sync::atomic::AtomicU64::new(0);
    ThrottleManager::<String>::builder()
        .throttle(ThrottleConfig::new())
        .random_source(move || {
            let n = draws.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            (n as f64 * 0.618_033_988_749_895).fract()
        })
        .bulkhead(BulkheadConfig::new(1).queue(4))
        .key_names(|key: &String| {
            if key.starts_with("secret") {
                "redacted".to_owned()
            } else {
                key.clone()
            }
        })
        .clock(ManualClock::new())
        .build()
        .unwrap()
}

/// Makes `key`'s throttle shed: 100 capacity failures, then `tries` calls
/// at low priority, each admitted one handed back at once.
fn shed(manager: &ThrottleManager<String>, key: &str, tries: usize) {
    for _ in 0..100 {
        manager.decrement(key);
    }
    for _ in 0..tries {
        drop(manager.try_acquire(key, Priority::LOW));
    }
}

async fn get(client: &reqwest::Client, url: &str) -> (u16, Value) {
    let answer = client.get(url).send().await.unwrap();
    let status = answer.status().as_u16();
    let text = answer.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// Asks `url` until `ready` holds for its JSON (the page samples on its
/// own time), for at most 20 s.
async fn until(client: &reqwest::Client, url: &str, ready: impl Fn(&Value) -> bool) -> Value {
    for _ in 0..400 {
        let (status, body) = get(client, url).await;
        assert_eq!(status, 200, "{url}: {body}");
        if ready(&body) {
            return body;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{url} never showed what was expected");
}

/// `key`'s snapshot as JSON, read back as the page's answers are (the
/// same text parses to the same numbers).
fn snapshot_json(manager: &ThrottleManager<String>, key: &str) -> Value {
    let text = serde_json::to_string(&manager.key(key).snapshot().unwrap()).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_ranks_the_shedding_and_the_queued_keys_and_its_json_is_the_snapshot() {
    let manager = manager();
    let page = StatusPage::builder(&manager)
        .sample_every(Duration::from_millis(50))
        .build()
        .unwrap();
    let base = serve(axum::Router::new().nest("/status", page.router())).await;
    let client = reqwest::Client::new();
    let (status, _) = get(&client, &format!("{base}/status/keys")).await;
    assert_eq!(status, 200);

    shed(&manager, "flaky", 200);
    shed(&manager, "secret-token-42", 200);
    let held = manager.acquire("busy", Priority::HIGH).await.unwrap();
    let waiters: Vec<_> = (0..2)
        .map(|_| {
            let manager = manager.clone();
            tokio::spawn(async move { manager.acquire("busy", Priority::HIGH).await.map(drop) })
        })
        .collect();
    while manager.key("busy").snapshot().unwrap().queued != Some(2) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    let refused = until(
        &client,
        &format!("{base}/status/keys?sort=refusals&top=5"),
        |body| body["keys"].as_array().is_some_and(|keys| keys.len() == 2),
    )
    .await;
    let names: Vec<&str> = refused["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row["key"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"flaky") && names.contains(&"redacted"),
        "{names:?}"
    );
    let flaky = refused["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|row| row["key"] == "flaky")
        .unwrap();
    assert_eq!(flaky["snapshot"], snapshot_json(&manager, "flaky"));
    assert!(
        flaky["refusals_per_second"].as_f64().unwrap() > 0.0,
        "{flaky}"
    );
    // The low priority it tried sheds (its dropped calls, neutral, are
    // accepts of the budget every priority shares, which HIGH's 100
    // failures fit in).
    assert!(
        flaky["snapshot"]["priorities"][3]["rejection_probability"]
            .as_f64()
            .unwrap()
            > 0.3,
        "{flaky}"
    );
    assert!(refused["totals"]["refusals"]["throttled"].as_u64().unwrap() > 0);
    assert_eq!(refused["totals"]["keys_live"], 3);
    assert!(
        !refused.to_string().contains("secret-token-42"),
        "a key leaves only by its name: {refused}"
    );

    let busy = until(
        &client,
        &format!("{base}/status/keys?sort=in_flight"),
        |body| body["keys"][0]["key"] == "busy",
    )
    .await;
    let row = &busy["keys"][0];
    assert_eq!(
        (row["in_flight"].as_u64(), row["queued"].as_u64()),
        (Some(1), Some(2))
    );
    assert_eq!(row["snapshot"], snapshot_json(&manager, "busy"));

    let one = until(&client, &format!("{base}/status/keys/busy"), |body| {
        body["history"].as_array().is_some_and(|h| h.len() >= 2)
    })
    .await;
    assert_eq!(one["snapshot"], snapshot_json(&manager, "busy"));
    let last = one["history"].as_array().unwrap().last().unwrap();
    assert_eq!(
        (last["in_flight"].as_u64(), last["queued"].as_u64()),
        (Some(1), Some(2))
    );

    drop(held);
    for waiter in waiters {
        waiter.await.unwrap().unwrap();
    }
}

#[tokio::test]
async fn bad_requests_are_refused_naming_what_was_wrong() {
    let manager = manager();
    manager.decrement("known");
    let page = StatusPage::builder(&manager)
        .key_from_name(|name: &str| Some(name.to_owned()))
        .build()
        .unwrap();
    let base = serve(page.router()).await;
    let client = reqwest::Client::new();

    let (status, body) = get(&client, &format!("{base}/keys?top=0")).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("top: must be from 1 to 1000, got 0"))
    );
    let answer = client
        .get(format!("{base}/keys?sort=bogus"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 400);
    let text = answer.text().await.unwrap();
    assert!(text.contains("sort") && text.contains("bogus"), "{text}");
    let (status, body) = get(&client, &format!("{base}/keys/nobody")).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (404, Some("no live key is named \"nobody\""))
    );
    // A name with a slash, percent-encoded, is one key.
    let (status, _) = get(&client, &format!("{base}/keys/a%2Fb")).await;
    assert_eq!(status, 404);

    let (status, body) = get(&client, &format!("{base}/keys/known")).await;
    assert_eq!(status, 200);
    assert_eq!(body["snapshot"], snapshot_json(&manager, "known"));
    let page = client.get(format!("{base}/")).send().await.unwrap();
    assert_eq!(page.headers()["content-type"], "text/html; charset=utf-8");
    assert!(page.text().await.unwrap().contains("<canvas"));
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

    /// Paths and query strings from the network are hostile: whatever
    /// they hold, the page answers 200, 400 or 404 (with a reason), never
    /// an error of its own or a panic.
    #[test]
    fn any_path_or_query_gets_an_answer_not_a_failure(
        key in proptest::collection::vec(proptest::num::u8::ANY, 0..40),
        query in ".{0,40}",
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let status = runtime.block_on(async {
            let manager = manager();
            manager.decrement("known");
            let router = StatusPage::new(&manager).unwrap().router();
            let encoded: String = key.iter().map(|byte| format!("%{byte:02X}")).collect();
            let query: String = query
                .bytes()
                .map(|byte| if byte.is_ascii_alphanumeric() || b"=&_".contains(&byte) {
                    char::from(byte).to_string()
                } else {
                    format!("%{byte:02X}")
                })
                .collect();
            let mut statuses = Vec::new();
            for uri in [format!("/keys/{encoded}"), format!("/keys?{query}")] {
                let request = axum::http::Request::get(uri).body(axum::body::Body::empty()).unwrap();
                let answer = tower::ServiceExt::oneshot(router.clone(), request).await.unwrap();
                statuses.push(answer.status().as_u16());
            }
            statuses
        });
        for code in status {
            proptest::prop_assert!([200, 400, 404].contains(&code), "answered {}", code);
        }
    }
}

#[tokio::test]
async fn the_totals_show_the_key_spaces_cap_and_its_evictions() {
    let clock = ManualClock::new();
    let manager = ThrottleManager::<String>::builder()
        .bulkhead(BulkheadConfig::new(1))
        .key_space(
            KeySpaceConfig::new()
                .max_keys(3)
                .idle_ttl(Duration::from_secs(60)),
        )
        .key_names(String::clone)
        .clock(clock.clone())
        .build()
        .unwrap();
    let page = StatusPage::builder(&manager).build().unwrap();
    let base = serve(page.router()).await;
    let client = reqwest::Client::new();
    let totals = |body: &Value| {
        let totals = &body["totals"];
        (
            totals["max_keys"].clone(),
            totals["evicted"].clone(),
            totals["keys_live"].clone(),
        )
    };
    let (_, body) = get(&client, &format!("{base}/keys")).await;
    assert_eq!(totals(&body), (3.into(), 0.into(), 0.into()), "{body}");

    for key in ["a", "b"] {
        drop(manager.try_acquire(key, Priority::HIGH).unwrap());
    }
    clock.advance(Duration::from_secs(61));
    assert_eq!(manager.keys().evict_idle(), 2);
    let (_, body) = get(&client, &format!("{base}/keys")).await;
    assert_eq!(totals(&body), (3.into(), 2.into(), 0.into()), "{body}");
}
