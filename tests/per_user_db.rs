//! Per-user database throttling on a real SQLite file, through the
//! example's own service and load generator (features `tower` and `sqlx`):
//! one noisy user cannot starve the others with the manager, and does
//! without it.
//!
//! Real time, real sockets, a real pool: the latencies are compared with
//! the same users' latencies measured moments before in the same run, never
//! with a constant. `cargo test --all-features --test per_user_db --
//! --nocapture` prints the three tables.

#![cfg(all(feature = "tower", feature = "sqlx"))]

#[path = "../examples/per_user_db/app.rs"]
mod app;
#[path = "../examples/per_user_db/load.rs"]
mod load;

use std::time::Duration;

use app::Settings;
use load::Load;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_noisy_user_cannot_starve_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let settings = Settings::default();
    let pool = app::open(&dir.path().join("events.sqlite"), &settings)
        .await
        .unwrap();
    let quiet = Load {
        ordinary_users: 20,
        per_user_rate: 5.0,
        noisy_loops: 0,
        length: Duration::from_secs(3),
    };
    let noisy = Load {
        noisy_loops: 50,
        ..quiet.clone()
    };

    let guarded = app::serve(app::router(pool.clone(), Some(app::manager(&settings))))
        .await
        .unwrap();
    let alone = load::run(&guarded, &quiet).await;
    load::print("the ordinary users alone", &alone, &quiet);
    let guarded = app::serve(app::router(pool.clone(), Some(app::manager(&settings))))
        .await
        .unwrap();
    let with = load::run(&guarded, &noisy).await;
    load::print("a noisy user, with the manager", &with, &noisy);
    let bare = app::serve(app::router(pool.clone(), None)).await.unwrap();
    let without = load::run(&bare, &noisy).await;
    load::print("a noisy user, without the manager", &without, &noisy);

    let reference = alone.ordinary.latency(0.99);
    // With the manager: the ordinary users lose nothing and wait at most
    // twice what they waited alone; the noisy user is refused, and told
    // when to come back.
    assert!(with.ordinary.success_rate() >= 0.99, "{:?}", with.ordinary);
    let p99 = with.ordinary.latency(0.99);
    assert!(
        p99 <= reference * 2,
        "p99 {p99:?} with the manager, {reference:?} alone"
    );
    assert!(with.noisy.too_many > 0, "{:?}", with.noisy);
    assert!(with.noisy.with_retry_after > 0, "{:?}", with.noisy);
    // Without it, the same load starves them: far slower, or failing.
    let p99 = without.ordinary.latency(0.99);
    assert!(
        p99 > reference * 3 || without.ordinary.success_rate() < 0.95,
        "without the manager: p99 {p99:?} ({reference:?} alone), {:?}",
        without.ordinary
    );
}
