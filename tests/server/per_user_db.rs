//! Per-user database throttling on a real SQLite file, through the
//! example's own service and load generator (features `tower` and `sqlx`):
//! one noisy user cannot starve the others with the manager, and does
//! without it.
//!
//! Real time, real sockets, a real pool; the assertions are on what the
//! database served (counts and shares), which a slow or busy machine does
//! not change: the noisy user's share with the manager is its quota, and
//! without it most of the database. The ordinary users' latencies are
//! printed, next to those of the same users on a twin of the service (its
//! own database file, its own pool, the same settings) where, instead of
//! the noisy user, polite users call at its quota:
//! `cargo test --all-features --test server per_user_db:: -- --nocapture`
//! prints the tables.

#![cfg(all(feature = "axum", feature = "sqlx"))]

use crate::app;
// The example prints more of it (the crowd's shares) than these tests read.
#[allow(dead_code)]
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
        crowd_users: 0,
        crowd_rate: 0.0,
        length: Duration::from_secs(3),
    };
    let noisy = Load {
        noisy_loops: 50,
        ..quiet.clone()
    };
    // The twin carries the same users and, in the noisy user's place, as
    // many more ordinary users as make up its quota (two at 5/s for 10/s):
    // the work the manager admits from the noisy user. What the twin does
    // not get is the flood beyond the quota, which is what the manager
    // must keep from the others. (Without them the shared database served
    // a tenth more than the twin's, which on a busy machine alone cost the
    // ordinary users up to 10 % of their calls.)
    let polite = Load {
        ordinary_users: quiet.ordinary_users
            + (f64::from(settings.user_rate) / quiet.per_user_rate).round() as u32,
        ..quiet.clone()
    };
    // Each phase: the noisy user and the ordinary users on one service,
    // the ordinary and the polite users on its twin, at the same time.
    let phase = |guarded: bool| {
        let (shared, twin, polite, noisy) = (shared.clone(), twin.clone(), &polite, &noisy);
        let settings = &settings;
        let guards = move || guarded.then(|| app::guards(settings));
        async move {
            let shared = app::serve(app::router(shared, guards())).await.unwrap();
            let twin = app::serve(app::router(twin, guards())).await.unwrap();
            tokio::join!(load::run(&shared, noisy), load::run(&twin, polite))
        }
    };

    let (with, on_twin) = phase(true).await;
    load::print("a noisy user, with the manager", &with, &noisy);
    load::print(
        "the same users on the twin, with polite ones",
        &on_twin,
        &polite,
    );
    // With the manager: the ordinary users lose nothing to the noisy one
    // beyond what its quota costs. They are judged against the twin's
    // users at the same time: on an idle machine neither side loses more
    // than a few calls (3 % allowed); on a loaded one both are slowed, and
    // each user's own limit of one call in flight then refuses some of
    // their calls on both, so the bound grows by half as much again as the
    // twin lost. The noisy user gets no more than its quota of the
    // database (however fast the machine: its last call may end a pool
    // timeout after the run), and is refused and told when to come back.
    // Counts, not latencies: the latencies are printed above, next to the
    // twin's.
    let lost = |tally: &load::Tally| 1.0 - tally.success_rate();
    assert!(
        lost(&with.ordinary) <= lost(&on_twin.ordinary) * 1.5 + 0.03,
        "with a noisy user {:?}, on the twin {:?}",
        with.ordinary,
        on_twin.ordinary
    );
    let quota = f64::from(settings.user_rate)
        * (quiet.length + settings.pool_timeout).as_secs_f64()
        + f64::from(settings.user_burst);
    assert!(with.noisy.successes as f64 <= quota, "{:?}", with.noisy);
    assert!(
        share(&with) <= 0.2,
        "the noisy user had {:.0} %",
        share(&with) * 100.0
    );
    assert!(with.noisy.too_many > 0, "{:?}", with.noisy);
    assert!(with.noisy.with_retry_after > 0, "{:?}", with.noisy);

    let (without, on_twin) = phase(false).await;
    load::print("a noisy user, without the manager", &without, &noisy);
    load::print(
        "the same users on the twin, with polite ones",
        &on_twin,
        &polite,
    );
    // Without it, the same load takes the database: the noisy user is
    // served many times what the manager let it have, a large share of
    // all the database served (the ordinary users then wait, as the tables
    // show).
    assert!(
        without.noisy.successes > 3 * with.noisy.successes.max(1),
        "without the manager {:?}, with it {:?}",
        without.noisy,
        with.noisy
    );
    assert!(
        share(&without) > 0.25,
        "without the manager the noisy user had {:.0} %",
        share(&without) * 100.0
    );
}

/// The noisy user's share of the queries the database served.
fn share(report: &load::Report) -> f64 {
    let served = report.noisy.successes + report.ordinary.successes;
    report.noisy.successes as f64 / served.max(1) as f64
}
