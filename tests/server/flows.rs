//! Whom a request is for, carried to what its handler calls: the server
//! layer runs each handler under its key's flow, so a database key the
//! handler calls serves its queue round the users; and the users and the
//! database in one typed key space, where a header names only users. On a
//! real axum server over loopback (feature `axum`).

#![cfg(feature = "axum")]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::get;
use portcullis::builder::Tier;
use portcullis::server::{KeyExtractor, ThrottleLayer};
use portcullis::{BulkheadConfig, CallError, Priority, RateConfig, ThrottleManager};
use tokio::sync::Semaphore;

use crate::layer::serve;

/// The database's side of the handler: which user's query ran, in order,
/// and a gate each query waits at before it ends.
#[derive(Clone)]
struct Database {
    manager: ThrottleManager<String>,
    ran: Arc<Mutex<Vec<String>>>,
    gate: Arc<Semaphore>,
}

async fn query(State(db): State<Database>, headers: HeaderMap) -> &'static str {
    let user = headers["x-user-id"].to_str().unwrap().to_owned();
    let ran = db
        .manager
        .call("database", Priority::HIGH, || async {
            db.ran.lock().unwrap().push(user.clone());
            db.gate.acquire().await.unwrap().forget();
            Ok::<_, std::io::Error>("ok")
        })
        .await;
    ran.unwrap()
}

/// The database key: one query at a time, its queue served round the flows
/// if `fair`. The users' layer limits nothing here (100 in flight each).
async fn service(fair: bool) -> (String, Database) {
    let mut bulkhead = BulkheadConfig::new(1).queue(16);
    if fair {
        bulkhead = bulkhead.fair_queuing();
    }
    let db = Database {
        manager: ThrottleManager::builder()
            .bulkhead(bulkhead)
            .build()
            .unwrap(),
        ran: Arc::default(),
        gate: Arc::new(Semaphore::new(0)),
    };
    let users = ThrottleManager::<String>::builder()
        .bulkhead(BulkheadConfig::new(100))
        .build()
        .unwrap();
    let app = Router::new()
        .route("/", get(query))
        .with_state(db.clone())
        .layer(ThrottleLayer::new(users, KeyExtractor::header("x-user-id")));
    (serve(app).await, db)
}

/// A heavy user sends six requests at once; once five of them wait for
/// the database, a light user sends one. The order the database ran them.
async fn heavy_then_light(fair: bool) -> Vec<String> {
    let (url, db) = service(fair).await;
    let client = reqwest::Client::new();
    let send = |user: &'static str| {
        let request = client.get(&url).header("x-user-id", user).send();
        tokio::spawn(async move { request.await.unwrap().status().as_u16() })
    };
    let mut answers: Vec<_> = (0..6).map(|_| send("heavy")).collect();
    let queued = |n: u32| {
        let manager = db.manager.clone();
        async move {
            while manager.key("database").snapshot().and_then(|s| s.queued) != Some(n) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    };
    let waited = tokio::time::timeout(Duration::from_secs(10), queued(5)).await;
    waited.expect("five of the heavy user's queries wait");
    answers.push(send("light"));
    tokio::time::timeout(Duration::from_secs(10), queued(6))
        .await
        .expect("the light user's query waits too");
    db.gate.add_permits(7);
    for answer in answers {
        assert_eq!(answer.await.unwrap(), 200);
    }
    db.ran.lock().unwrap().clone()
}

#[tokio::test]
async fn the_users_flow_reaches_the_database_key_its_handler_calls() {
    let _alone = crate::support::alone();
    let ran = heavy_then_light(true).await;
    // The light user's query runs within a round of the queue: behind the
    // heavy user's query in flight and at most one of its queued ones, not
    // behind all five.
    let light = ran.iter().position(|user| user == "light").unwrap();
    assert!(light <= 2, "{ran:?}");
    // First come first served, it runs last.
    let ran = heavy_then_light(false).await;
    assert_eq!(ran.last().map(String::as_str), Some("light"), "{ran:?}");
}

/// The keys of a per-user database service in one manager: its users,
/// named by a header, and the database, named by the program alone.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    User(String),
    Database,
}

impl From<String> for Key {
    /// What the server layer makes of a request's header: a user, always.
    fn from(user: String) -> Self {
        Key::User(user)
    }
}

/// Users have a quota (2 at once, then 10 a second); the database one
/// query at a time, its queue served round the users.
fn one_manager() -> ThrottleManager<Key> {
    ThrottleManager::builder()
        .bulkhead(BulkheadConfig::new(1).queue(16).fair_queuing())
        .tier(
            "user",
            Tier::new()
                .rate(RateConfig::per_second(10).burst(2))
                .bulkhead(BulkheadConfig::new(8)),
        )
        .tier_of(|key: &Key| matches!(key, Key::User(_)).then_some("user"))
        .build()
        .unwrap()
}

async fn query_one(
    State(manager): State<ThrottleManager<Key>>,
) -> Result<&'static str, StatusCode> {
    // One level of error: the database's refusal, or the query's own.
    let ran: Result<&str, CallError<std::io::Error>> = manager
        .call(&Key::Database, Priority::HIGH, || async { Ok("ok") })
        .await;
    ran.map_err(|_| StatusCode::SERVICE_UNAVAILABLE)
}

#[tokio::test]
async fn a_header_can_never_name_the_programs_keys() {
    let manager = one_manager();
    let app = Router::new()
        .route("/", get(query_one))
        .with_state(manager.clone())
        .layer(ThrottleLayer::new(
            manager.clone(),
            KeyExtractor::header("x-user-id"),
        ));
    let url = serve(app).await;
    let client = reqwest::Client::new();
    let mut statuses = Vec::new();
    for name in ["Database", "Database", "Database", "database"] {
        let answer = client
            .get(&url)
            .header("x-user-id", name)
            .send()
            .await
            .unwrap();
        statuses.push(answer.status().as_u16());
    }
    // A user named `Database`: its burst of 2, then its quota's 429; a
    // user named `database` is another user.
    assert_eq!(statuses, [200, 200, 429, 200]);
    let named = Key::User("Database".into());
    let rate = manager.key(&named).rate();
    assert_eq!(rate, Some(10.0), "the header's `Database` is a user");
    let database = manager.key(&Key::Database);
    assert_eq!(database.rate(), None, "the database has no quota to take");
    let snapshot = database.snapshot().unwrap();
    assert_eq!(snapshot.active, Some(0), "every query's slot given back");
    assert_eq!(manager.keys().len(), 3, "two users and the database");
}
