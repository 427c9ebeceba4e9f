//! Per-user database throttling on a real SQLite file, through the
//! example's own service and load generator (features `tower` and `sqlx`):
//! one noisy user cannot starve the others with the manager, and does
//! without it.
//!
//! Real time, real sockets, a real pool. The reference the ordinary
//! users' latency is held to is measured at the same moment, never taken
//! from a constant or from an earlier phase: the same ordinary users call a
//! twin of the service (its own database file, its own pool, the same
//! settings) where no noisy user calls. A stall of the machine (a shared CI
//! runner, another test binary) then lands on both sides of the comparison
//! alike, and what is compared is only what the noisy user does through the
//! shared pool. `cargo test --all-features --test server per_user_db:: --
//! --nocapture` prints the tables.

#![cfg(all(feature = "axum", feature = "sqlx"))]

use crate::app;
#[path = "../../examples/per_user_db/load.rs"]
mod load;

use std::time::Duration;

use app::Settings;
use load::Load;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_noisy_user_cannot_starve_the_others() {
    let _alone = crate::support::alone();
    let dir = tempfile::tempdir().unwrap();
    let settings = Settings::default();
    let shared = app::open(&dir.path().join("shared.sqlite"), &settings)
        .await
        .unwrap();
    let twin = app::open(&dir.path().join("twin.sqlite"), &settings)
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
    // Each phase: the noisy user and the ordinary users on one service,
    // the same ordinary users alone on its twin, at the same time.
    let phase = |guarded: bool| {
        let (shared, twin, quiet, noisy) = (shared.clone(), twin.clone(), &quiet, &noisy);
        let settings = &settings;
        let manager = move || guarded.then(|| app::manager(settings));
        async move {
            let shared = app::serve(app::router(shared, manager())).await.unwrap();
            let twin = app::serve(app::router(twin, manager())).await.unwrap();
            tokio::join!(load::run(&shared, noisy), load::run(&twin, quiet))
        }
    };

    let (with, alone) = phase(true).await;
    load::print("a noisy user, with the manager", &with, &noisy);
    load::print("the same users on the twin, alone", &alone, &quiet);
    // With the manager: the ordinary users lose nothing and wait at most
    // twice what they wait alone; the noisy user is refused, and told when
    // to come back.
    assert!(with.ordinary.success_rate() >= 0.99, "{:?}", with.ordinary);
    let (p99, reference) = (with.ordinary.latency(0.99), alone.ordinary.latency(0.99));
    assert!(
        p99 <= reference * 2,
        "p99 {p99:?} with the manager, {reference:?} alone"
    );
    assert!(with.noisy.too_many > 0, "{:?}", with.noisy);
    assert!(with.noisy.with_retry_after > 0, "{:?}", with.noisy);

    let (without, alone) = phase(false).await;
    load::print("a noisy user, without the manager", &without, &noisy);
    load::print("the same users on the twin, alone", &alone, &quiet);
    // Without it, the same load starves them: far slower, or failing.
    let (p99, reference) = (without.ordinary.latency(0.99), alone.ordinary.latency(0.99));
    assert!(
        p99 > reference * 3 || without.ordinary.success_rate() < 0.95,
        "without the manager: p99 {p99:?} ({reference:?} alone), {:?}",
        without.ordinary
    );
}
