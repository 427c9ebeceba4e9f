//! Per-user database throttling on a real SQLite database: one noisy user
//! cannot starve the others, and a crowd within its quotas shares the
//! database fairly and uses all of it.
//!
//! ```text
//! cargo run --release --features axum,sqlx --example per_user_db
//! ```
//!
//! An axum service answers reads (an aggregate over a table of 100,000
//! events) and writes (one insert) from a SQLite file through one pool of
//! 4 connections, shared by every user. A load generator on loopback runs
//! 20 ordinary users at 5 requests a second each, and one noisy user with
//! 50 loops, then a crowd, in five phases of 5 s:
//!
//! 0. the ordinary users alone, for reference;
//! 1. with the noisy user, **without** the manager: every request goes
//!    straight to the pool, and the noisy user's queries fill it;
//! 2. with the noisy user, **with** the manager: each user (keyed by the
//!    `x-user-id` header) has a quota of 10 requests a second (2 at once)
//!    and 1 in flight (1 more may wait 100 ms), and every query holds a
//!    permit of the database's key (a bulkhead of twice the pool, whose
//!    queue serves the users in turn) before it asks the pool. Users and
//!    the database are keys of one manager, of a type (`app::Key`) whose
//!    users are all a header can name; the server layer runs each handler
//!    under its user's flow, so the database's queue knows whose query it
//!    holds;
//! 3. a crowd within its quotas (users at 8 requests a second each, as
//!    many as ask twice what the database served in phase 1), beside 10
//!    ordinary users, **without** the manager, for the database's
//!    throughput;
//! 4. the same crowd **with** the managers: what each group was served,
//!    beside its max-min fair share, and the database's throughput.
//!
//! The database file is created on first start, in the system's
//! temporary directory (or at the path given as the first argument).

mod app;
// Shared with the tests, which read more of it than this program does.
#[allow(dead_code)]
mod load;

use std::path::PathBuf;
use std::time::Duration;

use app::Settings;
use load::Load;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("portcullis-per-user-db.sqlite"));
    let settings = Settings::default();
    let pool = app::open(&path, &settings).await?;
    println!(
        "database {} ({} events), a pool of {} connections\n",
        path.display(),
        app::ROWS,
        settings.connections
    );

    let quiet = Load {
        ordinary_users: 20,
        per_user_rate: 5.0,
        noisy_loops: 0,
        crowd_users: 0,
        crowd_rate: 0.0,
        length: Duration::from_secs(5),
    };
    let noisy = Load {
        noisy_loops: 50,
        ..quiet.clone()
    };

    let guarded = app::serve(app::router(pool.clone(), Some(app::guards(&settings)))).await?;
    let report = load::run(&guarded, &quiet).await;
    load::print("phase 0: the ordinary users alone", &report, &quiet);

    let bare = app::serve(app::router(pool.clone(), None)).await?;
    let report = load::run(&bare, &noisy).await;
    load::print(
        "phase 1: a noisy user, without the manager",
        &report,
        &noisy,
    );
    let capacity = report.served_in_time() / noisy.length.as_secs_f64();

    let guards = app::guards(&settings);
    let guarded = app::serve(app::router(pool.clone(), Some(guards.clone()))).await?;
    let report = load::run(&guarded, &noisy).await;
    load::print("phase 2: a noisy user, with the manager", &report, &noisy);

    // A crowd within its quotas: users at 8 requests a second, each under
    // its 10/s, as many as ask twice what the database served in phase 1,
    // with 10 ordinary users.
    let crowd = Load {
        ordinary_users: 10,
        noisy_loops: 0,
        crowd_users: (2.0 * capacity / 8.0).ceil() as u32,
        crowd_rate: 8.0,
        ..quiet.clone()
    };
    let report = load::run(&bare, &crowd).await;
    load::print(
        "phase 3: a crowd within its quotas, without the manager",
        &report,
        &crowd,
    );
    let unguarded = report.served_in_time() / crowd.length.as_secs_f64();
    let guarded = app::serve(app::router(pool.clone(), Some(app::guards(&settings)))).await?;
    let report = load::run(&guarded, &crowd).await;
    load::print(
        "phase 4: a crowd within its quotas, with the manager",
        &report,
        &crowd,
    );
    load::print_shares(&report, &crowd, unguarded);
    Ok(())
}
