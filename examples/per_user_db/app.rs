//! The service: an API over a SQLite database of events, shared by many
//! users through one small pool, with or without a manager in front.
//!
//! (Also compiled into `tests/server/per_user_db.rs` and `tests/server/database.rs`,
//! which run this same service.)

use std::path::Path;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use portcullis::builder::Tier;
use portcullis::deadline::TimeLimits;
use portcullis::server::{KeyExtractor, ThrottleLayer, refusal};
use portcullis::{BulkheadConfig, CallError, Priority, RateConfig, ThrottleManager};
use sqlx::SqlitePool;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};

/// The service's keys, in one manager: its users, named by a header
/// (through the server layer, which makes a header's text a
/// [`Key::User`] and nothing else), and the database, named by the program
/// alone. No request can take the database's slots by calling itself
/// `database`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Key {
    User(String),
    Database,
}

impl From<String> for Key {
    fn from(user: String) -> Self {
        Key::User(user)
    }
}
/// The header that says who the user is (after authentication).
pub(crate) const USER_HEADER: &str = "x-user-id";
/// Rows the events table starts with.
pub(crate) const ROWS: i64 = 100_000;

/// How the database and its guard are set up.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// Connections in the shared pool.
    pub(crate) connections: u32,
    /// How long a query waits for a pool connection before sqlx gives up.
    pub(crate) pool_timeout: Duration,
    /// How long SQLite waits on a lock before answering "database is locked".
    pub(crate) busy_timeout: Duration,
    /// Each user's quota: requests a second, and how many may come at once.
    pub(crate) user_rate: u32,
    pub(crate) user_burst: u32,
    /// Each user's requests in flight at most, and how many may wait.
    pub(crate) user_in_flight: u32,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            connections: 4,
            pool_timeout: Duration::from_secs(2),
            busy_timeout: Duration::from_millis(100),
            user_rate: 10,
            user_burst: 2,
            user_in_flight: 1,
        }
    }
}

/// Serves `router` on a loopback port of its own, with each request's peer
/// address (`ConnectInfo`); returns its base URL.
pub(crate) async fn serve(router: Router) -> std::io::Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        axum::serve(
            listener,
            router.into_make_service_with_connect_info::<std::net::SocketAddr>(),
        )
        .await
    });
    Ok(format!("http://{addr}"))
}

/// Opens (creating if needed) the database file at `path`, and fills its
/// events table on first start.
pub(crate) async fn open(path: &Path, settings: &Settings) -> Result<SqlitePool, sqlx::Error> {
    let options = SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .busy_timeout(settings.busy_timeout);
    let pool = SqlitePoolOptions::new()
        .max_connections(settings.connections)
        .acquire_timeout(settings.pool_timeout)
        .connect_with(options)
        .await?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS events (
            id INTEGER PRIMARY KEY,
            user_id INTEGER NOT NULL,
            amount INTEGER NOT NULL,
            created_at INTEGER NOT NULL
        )",
    )
    .execute(&pool)
    .await?;
    let (rows,): (i64,) = sqlx::query_as("SELECT count(*) FROM events")
        .fetch_one(&pool)
        .await?;
    if rows == 0 {
        sqlx::query(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
             INSERT INTO events (user_id, amount, created_at)
             SELECT i % 1000, (i * 7919) % 1000, i FROM n",
        )
        .bind(ROWS)
        .execute(&pool)
        .await?;
    }
    Ok(pool)
}

/// The manager of every key of the service, for `settings`:
/// - each user (the `user` tier) has a fixed quota and a small bulkhead;
/// - the database ([`Key::Database`], the defaults) is a bulkhead of twice
///   the pool (the pool's connections busy, and as many queries next in
///   line, so no connection waits for a query to be woken), whose queue
///   serves the users in turn: each query is its user's, since the server
///   layer runs the handler under the user's flow. What a database shows
///   when it struggles is queueing; its queue is where it is met.
pub(crate) fn guards(settings: &Settings) -> ThrottleManager<Key> {
    let user = Tier::new()
        .rate(RateConfig::per_second(settings.user_rate).burst(settings.user_burst))
        .bulkhead(
            BulkheadConfig::new(settings.user_in_flight)
                .queue(settings.user_in_flight)
                .queue_timeout(Duration::from_millis(100)),
        );
    ThrottleManager::builder()
        .bulkhead(
            BulkheadConfig::new(2 * settings.connections)
                .queue(256)
                .queue_timeout(Duration::from_millis(500))
                .fair_queuing(),
        )
        .tier("user", user)
        .tier_of(|key: &Key| matches!(key, Key::User(_)).then_some("user"))
        .classifier(portcullis::database::classify_error)
        .time_limits(TimeLimits::new().max_wait(Duration::from_millis(250)))
        .build()
        .expect("a valid configuration")
}

#[derive(Clone)]
struct App {
    pool: SqlitePool,
    /// `None`: every query goes straight to the pool.
    guards: Option<ThrottleManager<Key>>,
}

/// The API: `GET /summary` (an aggregate over the whole table) and
/// `POST /events` (one insert). With guards, each user (header
/// `x-user-id`) is limited by the layer, and each query by the database's
/// key, in the same manager.
pub(crate) fn router(pool: SqlitePool, guards: Option<ThrottleManager<Key>>) -> Router {
    let app = App {
        pool,
        guards: guards.clone(),
    };
    let routes = Router::new()
        .route("/summary", get(summary))
        .route("/events", post(add_event))
        .with_state(app);
    match guards {
        Some(guards) => routes.layer(ThrottleLayer::new(
            guards,
            KeyExtractor::header(USER_HEADER),
        )),
        None => routes,
    }
}

async fn summary(State(app): State<App>) -> Response {
    let query = || async {
        sqlx::query_as::<_, (i64, i64, f64)>(
            "SELECT count(*), sum(amount), avg(amount) FROM events WHERE amount % 7 = 3",
        )
        .fetch_one(&app.pool)
        .await
    };
    match app.query(query).await {
        Ok((count, sum, average)) => {
            format!("{{\"count\":{count},\"sum\":{sum},\"average\":{average:.2}}}").into_response()
        }
        Err(answer) => answer,
    }
}

async fn add_event(State(app): State<App>) -> Response {
    let query = || async {
        sqlx::query("INSERT INTO events (user_id, amount, created_at) VALUES (?1, ?2, ?3)")
            .bind(7)
            .bind(42)
            .bind(0)
            .execute(&app.pool)
            .await
    };
    match app.query(query).await {
        Ok(_) => StatusCode::CREATED.into_response(),
        Err(answer) => answer,
    }
}

impl App {
    /// Runs `query` through the database's key (if there is a manager),
    /// which reports its outcome; an error becomes the answer.
    async fn query<T, F, Fut>(&self, mut query: F) -> Result<T, Response>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, sqlx::Error>>,
    {
        let Some(guards) = &self.guards else {
            return query().await.map_err(failed);
        };
        match guards.call(&Key::Database, Priority::HIGH, query).await {
            Ok(value) => Ok(value),
            // The database's limit, not the user's: 503, not 429.
            // (The default refusal's headers: Retry-After when known.)
            Err(CallError::Rejected(rejected)) => {
                let (mut head, _) = refusal(&rejected).into_parts();
                head.status = StatusCode::SERVICE_UNAVAILABLE;
                let body = format!(
                    "503 Service Unavailable: the database is busy ({})\n",
                    rejected.reason()
                );
                Err(Response::from_parts(head, body.into()))
            }
            Err(CallError::Inner(error)) => Err(failed(error)),
            // Timed out, or a way to fail that a later version adds.
            Err(_) => Err(StatusCode::SERVICE_UNAVAILABLE.into_response()),
        }
    }
}

/// A query that failed: 503 when the database had no room (a pool timeout,
/// "database is locked"), 500 otherwise.
fn failed(error: sqlx::Error) -> Response {
    let status = match portcullis::database::classify(&error) {
        portcullis::outcome::Outcome::Overloaded => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    (status, error.to_string()).into_response()
}
