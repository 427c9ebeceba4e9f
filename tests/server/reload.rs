//! Limits reloaded from a changed file while a real server runs: an axum
//! server limiting each API key, its plans reloaded mid-run. The clients'
//! 429s follow the new limits from the next request on, and no key's
//! admitted calls exceed either limit's bound.

#![cfg(feature = "axum")]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::routing::get;
use portcullis::ThrottleManager;
use portcullis::builder::ManagerConfig;
use portcullis::server::{KeyExtractor, ThrottleLayer};
use tokio::time::{Instant, MissedTickBehavior};

use crate::layer::serve;

const BEFORE: &str = "[default.rate]\nquota = \"20/s\"\nburst = 5\n";
/// The default lowered to 5/s, and key `b` given 50/s of its own.
const AFTER: &str = "[default.rate]\nquota = \"5/s\"\nburst = 5\n\
                     [overrides.b.rate]\nquota = \"50/s\"\nburst = 20\n";
const RELOAD_AT: Duration = Duration::from_millis(1_500);
const RUN: Duration = Duration::from_millis(4_000);

/// When each request of a key was answered, since the start, and whether
/// it was admitted (200) or refused (429).
type Answers = Arc<Mutex<Vec<(Duration, bool)>>>;

/// One client of `key`: a request every `every`, one at a time, for the
/// run.
async fn client(url: String, key: &'static str, every: Duration, start: Instant) -> Answers {
    let answers = Answers::default();
    let client = reqwest::Client::new();
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    while start.elapsed() < RUN {
        ticks.tick().await;
        let response = client.get(&url).header("x-api-key", key).send().await;
        let status = response.unwrap().status().as_u16();
        assert!(status == 200 || status == 429, "{status}");
        answers
            .lock()
            .unwrap()
            .push((start.elapsed(), status == 200));
    }
    answers
}

/// The most requests admitted in any interval of `answers` from `from` on,
/// over what a quota of `rate`/s with `burst` allows in it (plus one, for
/// the time between a request's admission and its answer).
fn worst_excess(answers: &[(Duration, bool)], from: Duration, rate: f64, burst: f64) -> f64 {
    let admitted: Vec<Duration> = answers
        .iter()
        .filter(|(at, ok)| *ok && *at >= from)
        .map(|(at, _)| *at)
        .collect();
    let mut worst = f64::MIN;
    for (first, start) in admitted.iter().enumerate() {
        for (last, end) in admitted.iter().enumerate().skip(first) {
            let allowed = rate * (*end - *start).as_secs_f64() + burst + 1.0;
            worst = worst.max((last - first + 1) as f64 - allowed);
        }
    }
    worst
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_reloaded_mid_run_are_what_clients_see_from_the_next_request() {
    let _alone = crate::support::alone();
    let config = |text: &str| toml::from_str::<ManagerConfig>(text).unwrap();
    let manager = ThrottleManager::<String>::builder()
        .config(config(BEFORE))
        .build()
        .unwrap();
    let layer = ThrottleLayer::builder(manager.clone(), KeyExtractor::header("x-api-key"))
        .build()
        .unwrap();
    let url = serve(
        axum::Router::new()
            .route("/", get(|| async { "ok" }))
            .layer(layer),
    )
    .await;

    let start = Instant::now();
    // `a` offers 40/s: over 20/s before, far over 5/s after. `b` offers
    // 30/s: over 20/s before, well within its 50/s after.
    let a = tokio::spawn(client(url.clone(), "a", Duration::from_millis(25), start));
    let b = tokio::spawn(client(url, "b", Duration::from_millis(33), start));
    tokio::time::sleep_until(start + RELOAD_AT).await;
    manager.reload(config(AFTER)).unwrap();
    let reloaded = start.elapsed();
    let (a, b) = (a.await.unwrap(), b.await.unwrap());
    let (a, b) = (a.lock().unwrap().clone(), b.lock().unwrap().clone());

    let refused_after = |answers: &[(Duration, bool)], from: Duration| {
        answers.iter().filter(|(at, ok)| !ok && *at >= from).count()
    };
    let settled = reloaded + Duration::from_secs(1);
    assert!(refused_after(&a, Duration::ZERO) > 0, "a was over 20/s");
    assert!(refused_after(&a, settled) > 0, "a is over 5/s");
    assert_eq!(refused_after(&b, settled), 0, "b is within 50/s: {b:?}");
    // Each limit's bound, on its side of the reload.
    let before: Vec<_> = a.iter().copied().filter(|(at, _)| *at < reloaded).collect();
    assert!(
        worst_excess(&before, Duration::ZERO, 20.0, 5.0) <= 0.0,
        "{before:?}"
    );
    assert!(worst_excess(&a, reloaded, 5.0, 5.0) <= 0.0, "{a:?}");
    assert!(worst_excess(&b, reloaded, 50.0, 20.0) <= 0.0, "{b:?}");
    let admitted_after = a.iter().filter(|(at, ok)| *ok && *at >= settled).count();
    assert!(admitted_after > 0, "a still gets its 5/s");
}
