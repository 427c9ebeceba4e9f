//! The database key against a real SQLite file and a real pool, through
//! the per-user example's service (features `tower` and `sqlx`): "database
//! is locked" is a 503 that says so; a refused request never reaches the
//! pool; a header cannot name the database's key; and the database's
//! queue serves its users in turn, each query as the user the server
//! layer admitted.

#![cfg(all(feature = "axum", feature = "sqlx"))]

use crate::app;

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use app::{Key, Settings, USER_HEADER};
use portcullis::ThrottleManager;

/// What a request naming itself after the database sends as its user.
const DATABASE: &str = "database";
use sqlx::{Connection, SqlitePool};

struct Service {
    url: String,
    pool: SqlitePool,
    guards: ThrottleManager<Key>,
    /// The database file, for connections of the test's own.
    path: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

async fn start(settings: Settings) -> Service {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.sqlite");
    let pool = app::open(&path, &settings).await.unwrap();
    let guards = app::guards(&settings);
    let url = app::serve(app::router(pool.clone(), Some(guards.clone())))
        .await
        .unwrap();
    Service {
        url,
        pool,
        guards,
        path,
        _dir: dir,
    }
}

/// A new user id per request, so no user's own quota is in the way.
fn fresh_user() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed).to_string()
}

async fn read(client: &reqwest::Client, service: &Service, user: &str) -> u16 {
    let answer = client
        .get(format!("{}/summary", service.url))
        .header(USER_HEADER, user)
        .send()
        .await
        .unwrap();
    answer.status().as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locked_database_is_503_with_its_reason_and_gives_its_slot_back() {
    let _alone = crate::support::alone();
    let service = start(Settings {
        busy_timeout: Duration::from_millis(50),
        ..Settings::default()
    })
    .await;
    let (url, manager, path) = (&service.url, &service.guards, &service.path);
    let client = reqwest::Client::new();
    let write = || {
        client
            .post(format!("{url}/events"))
            .header(USER_HEADER, fresh_user())
            .send()
    };
    assert_eq!(write().await.unwrap().status(), 201);

    // Another process's connection holds the write lock.
    let mut other = sqlx::SqliteConnection::connect(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut other)
        .await
        .unwrap();
    let locked = write().await.unwrap();
    assert_eq!(locked.status(), 503);
    assert!(locked.text().await.unwrap().contains("database is locked"));
    let database = manager.key(&Key::Database).snapshot().unwrap();
    assert_eq!(
        database.active,
        Some(0),
        "the failed query's slot given back"
    );

    sqlx::query("ROLLBACK").execute(&mut other).await.unwrap();
    assert_eq!(write().await.unwrap().status(), 201);
}

/// A request the user's limits refuse is answered at once, while the pool
/// has no connection to give: it never asked for one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_request_never_takes_a_pool_connection() {
    let _alone = crate::support::alone();
    let service = start(Settings {
        connections: 2,
        pool_timeout: Duration::from_secs(5),
        ..Settings::default()
    })
    .await;
    let client = reqwest::Client::new();
    let held = [
        service.pool.acquire().await.unwrap(),
        service.pool.acquire().await.unwrap(),
    ];

    // One user sends six at once: one goes in (and waits for the pool),
    // one waits in the user's queue, the rest are refused.
    let user = fresh_user();
    let mut requests = Vec::new();
    for _ in 0..6 {
        let (client, url, user) = (client.clone(), service.url.clone(), user.clone());
        requests.push(tokio::spawn(async move {
            let start = Instant::now();
            let answer = client
                .get(format!("{url}/summary"))
                .header(USER_HEADER, user)
                .send()
                .await
                .unwrap();
            (answer.status().as_u16(), start.elapsed())
        }));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (done, waiting): (Vec<_>, Vec<_>) = requests.into_iter().partition(|r| r.is_finished());
    let mut refused = 0;
    for request in done {
        let (status, took) = request.await.unwrap();
        assert!(
            matches!(status, 429 | 503),
            "{status} while the pool was held"
        );
        assert!(took < Duration::from_secs(1));
        refused += 1;
    }
    assert_eq!(refused, 5, "all but the one in flight refused at once");
    assert_eq!(
        service
            .guards
            .key(&Key::Database)
            .snapshot()
            .unwrap()
            .active,
        Some(1)
    );

    drop(held);
    for request in waiting {
        assert_eq!(request.await.unwrap().0, 200);
    }
}

/// A request sent as user `database` is limited as any user is, and takes
/// nothing of the database's key: the users' keys and the database's live
/// in one typed key space, where the layer makes a header's text a user
/// and nothing else. (In a key space of strings the layer's permit would
/// take the database's slot, and the request's own query would wait
/// behind it until its queue timeout.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_named_database_takes_nothing_of_the_databases_key() {
    let service = start(Settings {
        connections: 1,
        ..Settings::default()
    })
    .await;
    let client = reqwest::Client::new();
    let mut statuses = Vec::new();
    for _ in 0..3 {
        statuses.push(read(&client, &service, DATABASE).await);
    }
    // A user's burst of 2, then its quota's refusal.
    assert_eq!(statuses, [200, 200, 429]);
    assert_eq!(service.guards.key(&Key::Database).rate(), None);
    let database = service.guards.key(&Key::Database).snapshot().unwrap();
    assert_eq!(database.active, Some(0), "every query's slot given back");
    assert_eq!(
        service.guards.key(&Key::User(DATABASE.into())).rate(),
        Some(10.0),
        "the header's `database` is a user, at a user's quota"
    );
}
