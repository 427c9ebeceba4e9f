//! `call`: the whole protocol around one call, against a real local HTTP
//! server and on virtual time.

use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;
use portcullis::deadline::TimeLimits;
use portcullis::outcome::Outcome;
use portcullis::outcome::transport_overload;
use portcullis::{
    BulkheadConfig, CallError, Priority, RateConfig, ThrottleConfig, ThrottleManager, overloaded,
};

#[derive(Debug)]
enum MyError {
    Status(reqwest::StatusCode),
}

impl std::fmt::Display for MyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Status(status) => write!(f, "server answered {status}"),
        }
    }
}

impl std::error::Error for MyError {}

async fn start_server() -> std::net::SocketAddr {
    let app = Router::new()
        .route("/ok", get(|| async { "hello" }))
        .route(
            "/busy",
            get(|| async { (StatusCode::TOO_MANY_REQUESTS, "slow down") }),
        )
        .route(
            "/missing",
            get(|| async { (StatusCode::NOT_FOUND, "no such page") }),
        );
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

fn manager() -> ThrottleManager<String> {
    ThrottleManager::<String>::builder()
        .rate(
            RateConfig::adaptive(100.0)
                .bounds(1.0, 1_000.0)
                .increase_by(1.0)
                .decrease_by(10.0),
        )
        .throttle(ThrottleConfig::new())
        .bulkhead(BulkheadConfig::new(4).queue(4))
        .classifier(transport_overload)
        .build()
        .unwrap()
}

/// The public contract, against a real server.
async fn fetch(
    manager: &ThrottleManager<String>,
    client: &reqwest::Client,
    host: &String,
    url: &str,
) -> Result<String, Box<dyn std::error::Error>> {
    let body = manager
        .call(host, Priority::MEDIUM, || async {
            let resp = client.get(url).send().await?;
            if resp.status() == 429 || resp.status() == 503 {
                return Err(portcullis::overloaded(MyError::Status(resp.status())));
            }
            Ok(resp.text().await?)
        })
        .await?;
    Ok(body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_public_contract_against_a_real_server() {
    let addr = start_server().await;
    let (manager, client) = (manager(), reqwest::Client::new());
    let host = addr.to_string();

    let body = fetch(&manager, &client, &host, &format!("http://{addr}/ok"))
        .await
        .unwrap();
    assert_eq!(body, "hello");
    assert_eq!(
        manager.key(&host).rate(),
        Some(101.0),
        "a success raises the rate"
    );

    let err = fetch(&manager, &client, &host, &format!("http://{addr}/busy"))
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "server answered 429 Too Many Requests");
    assert_eq!(
        manager.key(&host).rate(),
        Some(91.0),
        "a marked 429 lowers it"
    );

    // A 404 is not an error of this closure: the page says so, the rate
    // goes on rising.
    let body = fetch(&manager, &client, &host, &format!("http://{addr}/missing"))
        .await
        .unwrap();
    assert_eq!(body, "no such page");
    assert_eq!(manager.key(&host).rate(), Some(92.0));

    // A refused connection is a transport failure: the classifier calls it
    // overload. The socket is bound but not listening, so connections to it
    // are refused; it stays bound, so no other test can take the port
    // meanwhile (a listener bound and dropped would leave the port free).
    let bound = tokio::net::TcpSocket::new_v4().unwrap();
    bound.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let closed = bound.local_addr().unwrap();
    let dead = closed.to_string();
    let _ = fetch(&manager, &client, &dead, &format!("http://{closed}/ok"))
        .await
        .unwrap_err();
    assert_eq!(manager.key(&dead).rate(), Some(90.0));
    drop(bound);

    let status = manager.key(&host).snapshot().unwrap();
    assert_eq!((status.active, status.queued), (Some(0), Some(0)));
}

#[tokio::test(start_paused = true)]
async fn unmarked_errors_are_neutral_without_a_classifier() {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(10.0).increase_by(1.0).decrease_by(5.0))
        .throttle(ThrottleConfig::new())
        .random_source(|| 0.0)
        .build()
        .unwrap();
    for _ in 0..50 {
        let result = manager
            .call("db", Priority::HIGH, || async {
                Err::<(), _>(std::io::Error::from(std::io::ErrorKind::TimedOut))
            })
            .await;
        assert!(matches!(result, Err(CallError::Inner(_))));
    }
    assert_eq!(manager.key("db").rate(), Some(10.0));
    assert_eq!(
        manager.key("db").rejection_probability(Priority::HIGH),
        Some(0.0)
    );
}

#[tokio::test(start_paused = true)]
async fn the_classifier_judges_unmarked_errors() {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(10.0).decrease_by(1.0))
        .classifier(|error| {
            if error.to_string().contains("busy") {
                Outcome::Overloaded
            } else {
                Outcome::Neutral
            }
        })
        .build()
        .unwrap();
    let _ = manager
        .call("db", Priority::HIGH, || async {
            Err::<(), _>(std::io::Error::other("busy"))
        })
        .await;
    assert_eq!(manager.key("db").rate(), Some(9.0));
    let _ = manager
        .call("db", Priority::HIGH, || async {
            Err::<(), _>(std::io::Error::other("bad input"))
        })
        .await;
    assert_eq!(manager.key("db").rate(), Some(9.0));
    // A mark wins over the classifier.
    let _ = manager
        .call("db", Priority::HIGH, || async {
            Err::<(), _>(overloaded(std::io::Error::other("bad input")))
        })
        .await;
    assert_eq!(manager.key("db").rate(), Some(8.0));
}

// The 0.3 name, kept through 0.4: it still calls `call` and hands over its error.
#[allow(deprecated)]
#[tokio::test(start_paused = true)]
async fn the_fallback_learns_whether_the_call_was_sent() {
    let manager = ThrottleManager::<String>::builder()
        .bulkhead(BulkheadConfig::new(1))
        .build()
        .unwrap();
    let failed = manager
        .call_with_fallback(
            "db",
            Priority::HIGH,
            || async { Err::<&str, _>(std::io::Error::other("boom")) },
            |error| async move { Ok(if error.is_local() { "local" } else { "sent" }) },
        )
        .await
        .unwrap();
    assert_eq!(failed, "sent");
    let _busy = manager.try_acquire("db", Priority::HIGH).unwrap();
    let rejected = manager
        .call_with_fallback(
            "db",
            Priority::HIGH,
            || async { Ok::<&str, std::io::Error>("fresh") },
            |error| async move { Ok(if error.is_local() { "local" } else { "sent" }) },
        )
        .await
        .unwrap();
    assert_eq!(rejected, "local");
}

#[tokio::test(start_paused = true)]
async fn a_hung_call_times_out_as_a_capacity_failure_and_frees_its_slot() {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(10.0).decrease_by(4.0))
        .bulkhead(BulkheadConfig::new(1))
        .time_limits(TimeLimits::new().call_timeout(Duration::from_secs(5)))
        .build()
        .unwrap();
    let start = tokio::time::Instant::now();
    let result = manager
        .call("db", Priority::HIGH, || async {
            std::future::pending::<Result<(), std::io::Error>>().await
        })
        .await;
    assert!(matches!(result, Err(CallError::TimedOut(d)) if d.after() == Duration::from_secs(5)));
    assert_eq!(start.elapsed(), Duration::from_secs(5));
    assert_eq!(manager.key("db").rate(), Some(6.0));
    assert_eq!(manager.key("db").snapshot().unwrap().active, Some(0));
}

#[tokio::test(start_paused = true)]
async fn dropping_a_running_call_leaves_nothing_held_or_half_recorded() {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(10.0).increase_by(1.0).decrease_by(1.0))
        .throttle(ThrottleConfig::new())
        .random_source(|| 0.0)
        .bulkhead(BulkheadConfig::new(1))
        .build()
        .unwrap();
    let call = manager.call("db", Priority::HIGH, || async {
        tokio::time::sleep(Duration::from_secs(60)).await;
        Ok::<_, std::io::Error>(())
    });
    assert!(
        tokio::time::timeout(Duration::from_secs(1), call)
            .await
            .is_err()
    );
    let status = manager.key("db").snapshot().unwrap();
    assert_eq!((status.active, status.queued), (Some(0), Some(0)));
    assert_eq!(status.rate, Some(10.0));
    assert_eq!(
        manager.key("db").rejection_probability(Priority::HIGH),
        Some(0.0)
    );
}

#[tokio::test(start_paused = true)]
async fn a_call_does_nothing_until_polled_and_can_be_spawned() {
    let manager = std::sync::Arc::new(
        ThrottleManager::<String>::builder()
            .rate(RateConfig::adaptive(1.0).burst(1))
            .bulkhead(BulkheadConfig::new(1))
            .build()
            .unwrap(),
    );
    // Built and dropped unpolled: no token, no slot, not even the key.
    let never_polled = manager.call("db", Priority::HIGH, || async {
        Ok::<_, std::io::Error>(())
    });
    drop(never_polled);
    assert!(manager.key("db").snapshot().is_none());
    // The future is `Send`: it runs on another task, and takes the token.
    let spawned = std::sync::Arc::clone(&manager);
    let result = tokio::spawn(async move {
        spawned
            .call("db", Priority::HIGH, || async {
                Ok::<_, std::io::Error>(7)
            })
            .await
    })
    .await
    .unwrap();
    assert_eq!(result.unwrap(), 7);
    assert!(manager.check("db").is_err(), "the one token was spent");
}

#[tokio::test(start_paused = true)]
async fn retry_after_pauses_the_key_and_is_capped() {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(100.0).burst(10))
        .time_limits(TimeLimits::new().max_defer(Duration::from_secs(60)))
        .build()
        .unwrap();
    assert_eq!(
        manager.key("api").defer(Duration::from_secs(3_600)),
        Some(Duration::from_secs(60))
    );
    let limited = manager.check("api").unwrap_err();
    assert_eq!(limited.retry_after(), Some(Duration::from_secs(60)));
    assert!(manager.check("other").is_ok(), "other keys are not paused");
    tokio::time::advance(Duration::from_secs(60)).await;
    // One call, then the rate resumes with an empty bucket: no burst of 10.
    assert!(manager.check("api").is_ok());
    assert_eq!(
        manager.check("api").unwrap_err().retry_after(),
        Some(Duration::from_millis(10))
    );
}

#[tokio::test(start_paused = true)]
async fn retry_after_makes_acquire_wait() {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(100.0))
        .build()
        .unwrap();
    manager.key("api").defer(Duration::from_millis(1_500));
    let start = tokio::time::Instant::now();
    manager
        .acquire("api", Priority::HIGH)
        .await
        .unwrap()
        .success();
    assert_eq!(start.elapsed(), Duration::from_millis(1_500));
}

#[test]
fn call_errors_are_errors() {
    fn assert_error<E: std::error::Error>() {}
    assert_error::<CallError<std::io::Error>>();
    assert_error::<CallError<portcullis::outcome::Failure>>();
}
