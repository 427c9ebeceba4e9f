//! The HTTP client middleware against real servers on loopback, through a
//! real reqwest client (feature `reqwest`).
//!
//! These run on real time: the servers and the client talk over real
//! sockets. What they assert about time are lower bounds measured at the
//! server (no request before the pause ends), which noise cannot break; the
//! pause arithmetic itself is tested on virtual time with `defer`.

#![cfg(feature = "reqwest")]
// Tests that measure real time hold `support::alone()` across their
// awaits, so they do not run at once.
#![allow(clippy::await_holding_lock)]

#[path = "../support/mod.rs"]
mod support;

mod deadlines;
mod paused;
mod remaining;
mod retry;
mod streams;
mod tls;

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use axum::Router;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use portcullis::client::ThrottleMiddleware;
use portcullis::deadline::TimeLimits;
use portcullis::error::RejectReason;
use portcullis::priority::with_priority;
use portcullis::{Priority, RateConfig, Rejected, ThrottleConfig, ThrottleManager};
use reqwest_middleware::ClientWithMiddleware;

// ---- The public contract of the issue, as written ----

async fn crawl(url: &str) -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(10.0))
        .build()?;
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(ThrottleMiddleware::new(manager.clone()))
        .build();
    match client.get(url).send().await {
        Ok(response) => Ok(response.text().await?),
        Err(reqwest_middleware::Error::Middleware(e)) if e.downcast_ref::<Rejected>().is_some() => {
            Err("refused locally".into())
        }
        Err(e) => Err(e.into()),
    }
}

// ---- Servers ----

/// What a test server answers to its `n`th request (from 0): a status,
/// headers, and how long it takes.
type Answer = (StatusCode, Vec<(&'static str, String)>, Duration);

/// A server on a loopback port of its own that answers as `answer` says,
/// and remembers when each request arrived.
struct Server {
    addr: SocketAddr,
    arrivals: Arc<Mutex<Vec<Instant>>>,
}

impl Server {
    async fn start(answer: impl Fn(usize) -> Answer + Send + Sync + 'static) -> Self {
        let arrivals = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&arrivals);
        let answer = Arc::new(answer);
        let app = Router::new().fallback(move || {
            let (seen, answer) = (Arc::clone(&seen), Arc::clone(&answer));
            async move {
                let n = {
                    let mut seen = seen.lock().unwrap();
                    seen.push(Instant::now());
                    seen.len() - 1
                };
                let (status, headers, delay) = answer(n);
                tokio::time::sleep(delay).await;
                let mut map = HeaderMap::new();
                for (name, value) in headers {
                    map.insert(
                        HeaderName::from_static(name),
                        HeaderValue::from_str(&value).unwrap(),
                    );
                }
                (status, map, "a page")
            }
        });
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { addr, arrivals }
    }

    /// Answers every request with `status` at once.
    async fn always(status: StatusCode) -> Self {
        Self::start(move |_| (status, vec![], Duration::ZERO)).await
    }

    /// Answers the first request with `status` and `headers`, the rest with
    /// 200.
    async fn first(status: StatusCode, headers: Vec<(&'static str, String)>) -> Self {
        Self::start(move |n| match n {
            0 => (status, headers.clone(), Duration::ZERO),
            _ => (StatusCode::OK, vec![], Duration::ZERO),
        })
        .await
    }

    fn key(&self) -> String {
        self.addr.to_string()
    }

    fn url(&self) -> String {
        format!("http://{}/page", self.addr)
    }

    fn arrivals(&self) -> Vec<Instant> {
        self.arrivals.lock().unwrap().clone()
    }
}

fn client(manager: &ThrottleManager<String>) -> ClientWithMiddleware {
    let inner = reqwest::Client::builder()
        .timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    reqwest_middleware::ClientBuilder::new(inner)
        .with(ThrottleMiddleware::new(manager.clone()))
        .build()
}

/// Sends requests to `url` one after another until `until`, reading each
/// answer to its end (where the call ends); returns how many got one.
async fn keep_sending(client: ClientWithMiddleware, url: String, until: Instant) -> usize {
    let mut answered = 0;
    while Instant::now() < until {
        if let Ok(response) = client.get(&url).send().await {
            if response.bytes().await.is_ok() {
                answered += 1;
            }
        }
    }
    answered
}

fn manager(rate: RateConfig) -> ThrottleManager<String> {
    ThrottleManager::<String>::builder()
        .rate(rate)
        .build()
        .unwrap()
}

// ---- Tests ----

#[tokio::test]
async fn the_contract_fetches_a_page() {
    let server = Server::always(StatusCode::OK).await;
    assert_eq!(crawl(&server.url()).await.unwrap(), "a page");
    assert_eq!(server.arrivals().len(), 1);
}

#[tokio::test]
async fn a_host_that_refuses_everything_does_not_slow_a_healthy_one() {
    let manager = ThrottleManager::<String>::builder()
        .rate(
            RateConfig::adaptive(20.0)
                .bounds(1.0, 100.0)
                .decrease_factor(0.5),
        )
        .throttle(ThrottleConfig::new())
        .build()
        .unwrap();
    let (sick, healthy) = (
        Server::always(StatusCode::SERVICE_UNAVAILABLE).await,
        Server::always(StatusCode::OK).await,
    );
    let until = Instant::now() + Duration::from_secs(2);
    let mut tasks = Vec::new();
    for server in [&sick, &healthy] {
        for _ in 0..4 {
            tasks.push(tokio::spawn(keep_sending(
                client(&manager),
                server.url(),
                until,
            )));
        }
    }
    for task in tasks {
        task.await.unwrap();
    }
    // The sick host's rate fell (halved once a second, the cooldown);
    // the healthy one's rose from
    // 20/s, and it was served at least what 20/s for 2 s allows.
    assert!(manager.key(&sick.key()).rate().unwrap() <= 5.0);
    assert!(manager.key(&healthy.key()).rate().unwrap() > 20.0);
    let served = healthy.arrivals().len();
    assert!(served >= 40, "the healthy host served {served} in 2 s");
    let snapshot = manager.key(healthy.key().as_str()).snapshot().unwrap();
    assert_eq!(snapshot.priorities[0].rejection_probability, 0.0);
}

/// The second request to a host that answered 429 with `Retry-After` comes
/// no sooner than it asked; another host is served meanwhile.
async fn retry_after_holds_the_host(retry_after: String, at_least: Duration) {
    let manager = manager(RateConfig::adaptive(20.0));
    let limited = Server::first(
        StatusCode::TOO_MANY_REQUESTS,
        vec![("retry-after", retry_after)],
    )
    .await;
    let other = Server::always(StatusCode::OK).await;
    let until = Instant::now() + at_least + Duration::from_millis(500);
    let sending = tokio::spawn(keep_sending(client(&manager), limited.url(), until));
    let also = tokio::spawn(keep_sending(client(&manager), other.url(), until));
    sending.await.unwrap();
    also.await.unwrap();

    let arrivals = limited.arrivals();
    assert!(arrivals.len() >= 2, "the host was never asked again");
    let refused_at = arrivals[0];
    let next = arrivals[1] - refused_at;
    assert!(next >= at_least, "asked again after {next:?}");
    let meanwhile = other
        .arrivals()
        .iter()
        .filter(|&&t| t > refused_at && t < refused_at + at_least)
        .count();
    // 20/s for the pause, less the start of the bucket: the other host is
    // not held.
    let expected = (at_least.as_secs_f64() * 20.0 * 0.8) as usize;
    assert!(
        meanwhile >= expected,
        "the other host served {meanwhile} during the pause"
    );
}

#[tokio::test]
async fn retry_after_in_seconds_holds_the_host_and_no_other() {
    retry_after_holds_the_host("2".into(), Duration::from_secs(2)).await;
}

#[tokio::test]
async fn retry_after_as_an_http_date_holds_the_host_and_no_other() {
    // An HTTP-date has whole seconds: 4 s from now is more than 3 s away
    // once cut to the second, and more than 2 s by the time the client
    // reads it, however slow the machine.
    let date = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(4));
    retry_after_holds_the_host(date, Duration::from_secs(2)).await;
}

/// A 429's outcome is reported before its `Retry-After` pause is set: the
/// failure lowers the rate and rescales what the key owes, and that must
/// not stretch the pause the same response asked for (5 s, not 5 s over the
/// decrease's 0.7). Time only shortens what `peek` sees, so a slow machine
/// cannot fail it.
#[tokio::test]
async fn a_failure_does_not_stretch_the_pause_its_own_response_set() {
    let manager = manager(RateConfig::adaptive(20.0));
    let limited = Server::first(
        StatusCode::TOO_MANY_REQUESTS,
        vec![("retry-after", "5".into())],
    )
    .await;
    let response = client(&manager).get(limited.url()).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    let held = manager.peek(limited.key().as_str()).unwrap();
    assert!(
        manager.key(limited.key().as_str()).rate().unwrap() < 20.0,
        "the failure counted"
    );
    assert!(
        held.next_in <= Duration::from_secs(5) && held.next_in > Duration::from_secs(4),
        "the host is held for {:?}",
        held.next_in
    );
}

/// A host that never answers: the manager's call timeout drops the
/// request, counts it as overload and frees the host's bulkhead slot, so
/// the next request is sent (and times out too) instead of waiting for a
/// slot that never comes back.
#[tokio::test]
async fn the_call_timeout_frees_the_slot_of_a_host_that_never_answers() {
    let manager = ThrottleManager::<String>::builder()
        .rate(
            RateConfig::adaptive(100.0)
                .bounds(1.0, 100.0)
                .decrease_factor(0.5),
        )
        .bulkhead(portcullis::BulkheadConfig::new(1))
        .time_limits(TimeLimits::new().call_timeout(Duration::from_millis(200)))
        .build()
        .unwrap();
    let server = Server::start(|_| (StatusCode::OK, vec![], Duration::from_secs(60))).await;
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(ThrottleMiddleware::new(manager.clone()))
        .build();
    for attempt in 0..2 {
        let error = client.get(server.url()).send().await.unwrap_err();
        let timed_out = match &error {
            reqwest_middleware::Error::Middleware(e) => {
                e.downcast_ref::<portcullis::client::RequestTimedOut>()
            }
            reqwest_middleware::Error::Reqwest(_) => None,
        };
        let timed_out = timed_out.unwrap_or_else(|| panic!("attempt {attempt}: {error}"));
        assert_eq!(timed_out.after(), Duration::from_millis(200));
        assert_eq!(
            timed_out.to_string(),
            "no answer within the call timeout of 200ms"
        );
        let snapshot = manager.key(&server.key()).snapshot().unwrap();
        assert_eq!(
            snapshot.active,
            Some(0),
            "attempt {attempt}: the slot is free"
        );
    }
    assert_eq!(server.arrivals().len(), 2, "both requests were sent");
    assert_eq!(
        manager.key(&server.key()).rate(),
        Some(50.0),
        "a timeout is overload"
    );
}

/// A reset too large for a `Duration` (a hostile or broken server) is read
/// as the longest wait there is and capped at `max_defer`: the request task
/// gets its response instead of a panic, and the host is held no longer
/// than `max_defer`.
#[tokio::test]
async fn a_reset_too_large_for_a_duration_pauses_the_host_for_max_defer() {
    for (remaining, reset, value) in [
        ("x-ratelimit-remaining", "x-ratelimit-reset", "1e300"),
        ("x-ratelimit-remaining", "x-ratelimit-reset", "2e19"),
        ("ratelimit-remaining", "ratelimit-reset", "5e20"),
    ] {
        let max_defer = Duration::from_secs(3);
        let manager = ThrottleManager::<String>::builder()
            .rate(RateConfig::adaptive(10.0))
            .time_limits(TimeLimits::new().max_defer(max_defer))
            .build()
            .unwrap();
        let server = Server::first(
            StatusCode::OK,
            vec![(remaining, "0".into()), (reset, value.into())],
        )
        .await;
        let response = client(&manager).get(server.url()).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{reset}: {value}");
        let held = manager
            .check(&server.key())
            .unwrap_err()
            .retry_after()
            .unwrap();
        assert!(
            held > max_defer - Duration::from_secs(1) && held <= max_defer,
            "{reset}: {value} held the host {held:?}"
        );
    }
}

#[tokio::test]
async fn a_spent_ratelimit_quota_holds_the_host_before_any_429() {
    let manager = manager(RateConfig::adaptive(20.0));
    let server = Server::first(
        StatusCode::OK,
        vec![("ratelimit", "\"default\";r=0;t=1".into())],
    )
    .await;
    let client = client(&manager);
    for _ in 0..3 {
        let response = client.get(server.url()).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    let arrivals = server.arrivals();
    let next = arrivals[1] - arrivals[0];
    assert!(next >= Duration::from_secs(1), "asked again after {next:?}");
    assert!(arrivals[2] - arrivals[1] < Duration::from_millis(500));
}

#[tokio::test]
async fn refused_connections_and_timeouts_are_overload_and_a_404_is_not() {
    let config = RateConfig::adaptive(10.0)
        .decrease_factor(0.5)
        .increase_by(1.0);
    let manager = manager(config);
    let client = client(&manager);

    // Bound but not listening: connections are refused, and the port stays
    // ours for the test.
    let bound = tokio::net::TcpSocket::new_v4().unwrap();
    bound.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let closed = bound.local_addr().unwrap();
    let error = client
        .get(format!("http://{closed}/"))
        .send()
        .await
        .unwrap_err();
    assert!(error.is_connect(), "{error}");
    assert_eq!(manager.key(&closed.to_string()).rate(), Some(5.0));

    // Slower than the client's 500 ms timeout.
    let slow = Server::start(|_| (StatusCode::OK, vec![], Duration::from_secs(5))).await;
    let error = client.get(slow.url()).send().await.unwrap_err();
    assert!(error.is_timeout(), "{error}");
    assert_eq!(manager.key(&slow.key()).rate(), Some(5.0));

    let missing = Server::always(StatusCode::NOT_FOUND).await;
    let response = client.get(missing.url()).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    assert_eq!(manager.key(&missing.key()).rate(), Some(10.0));

    // A success counts when its body has been read: the call ends there.
    let fine = Server::always(StatusCode::OK).await;
    let response = client.get(fine.url()).send().await.unwrap();
    assert_eq!(manager.key(&fine.key()).rate(), Some(10.0));
    response.bytes().await.unwrap();
    assert_eq!(manager.key(&fine.key()).rate(), Some(11.0));
}

#[tokio::test]
async fn a_local_refusal_downcasts_to_rejected_and_sends_nothing() {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(1.0))
        .time_limits(TimeLimits::new().max_wait(Duration::from_millis(100)))
        .build()
        .unwrap();
    let server = Server::always(StatusCode::OK).await;
    let client = client(&manager);
    client.get(server.url()).send().await.unwrap();
    let error = client.get(server.url()).send().await.unwrap_err();
    let reqwest_middleware::Error::Middleware(error) = error else {
        panic!("not a middleware error: {error}");
    };
    let rejected = error.downcast_ref::<Rejected>().expect("a Rejected");
    assert_eq!(rejected.reason(), RejectReason::RateLimited);
    // The one success raised the rate to at most 1.5/s (slow start, as
    // far as its use validates): the next token is over 600 ms away.
    let wait = rejected.retry_after().unwrap();
    assert!(wait > Duration::from_millis(600), "{wait:?}");
    assert_eq!(server.arrivals().len(), 1);
}

#[tokio::test]
async fn the_priority_comes_from_the_extension_then_the_task_then_the_middleware() {
    // Failures at the least important priority only: its calls are shed
    // (the random draw is always 0), the most important ones are not. So
    // whether a request is sent shows the priority it was judged at.
    let manager = ThrottleManager::<String>::builder()
        .throttle(ThrottleConfig::new())
        .random_source(|| 0.0)
        .build()
        .unwrap();
    let server = Server::always(StatusCode::OK).await;
    with_priority(Priority::LOW, async {
        for _ in 0..20 {
            manager.decrement(server.key().as_str());
        }
    })
    .await;
    let sent = |middleware: ThrottleMiddleware, extension: Option<Priority>| {
        let url = server.url();
        async move {
            let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
                .with(middleware)
                .build();
            let mut request = client.get(url);
            if let Some(priority) = extension {
                request = request.with_extension(priority);
            }
            match request.send().await {
                Ok(_) => true,
                Err(reqwest_middleware::Error::Middleware(e)) => {
                    let rejected = e.downcast_ref::<Rejected>().unwrap();
                    assert_eq!(rejected.reason(), RejectReason::Throttled);
                    false
                }
                Err(e) => panic!("{e}"),
            }
        }
    };
    let plain = || ThrottleMiddleware::new(manager.clone());
    let low = || ThrottleMiddleware::new(manager.clone()).priority(Priority::LOW);
    // The middleware's default, HIGH unless set.
    assert!(sent(plain(), None).await);
    assert!(!sent(low(), None).await);
    // The extension wins over the middleware's priority and the task's.
    assert!(!sent(plain(), Some(Priority::LOW)).await);
    assert!(sent(low(), Some(Priority::HIGH)).await);
    assert!(with_priority(Priority::LOW, sent(plain(), Some(Priority::HIGH))).await);
    // The task's wins over the middleware's.
    assert!(!with_priority(Priority::LOW, sent(plain(), None)).await);
    assert!(with_priority(Priority::HIGH, sent(low(), None)).await);
    assert_eq!(server.arrivals().len(), 4);
}

/// What 16 callers got of a server that takes 50 requests a second
/// (burst 5, 429 beyond, no `Retry-After`, like nginx's `limit_req`) over
/// 12 s, counted over the second half once the rate has settled: the
/// goodput as a share of 50/s, and the share of requests the server
/// refused. Each caller reads each answer's body to its end, or, if not
/// `read_bodies`, only its status (the body dropped unread).
async fn sixteen_callers_against_a_50_per_second_server(read_bodies: bool) -> (f64, f64) {
    let limit: Arc<DefaultDirectRateLimiter> = Arc::new(RateLimiter::direct(
        Quota::per_second(NonZeroU32::new(50).unwrap()).allow_burst(NonZeroU32::new(5).unwrap()),
    ));
    let server = Server::start(move |_| {
        let status = if limit.check().is_ok() {
            StatusCode::OK
        } else {
            StatusCode::TOO_MANY_REQUESTS
        };
        (status, vec![], Duration::ZERO)
    })
    .await;
    let manager = manager(
        RateConfig::adaptive(10.0)
            .bounds(1.0, 1_000.0)
            .increase_by(0.3)
            .decrease_factor(0.7),
    );
    let run_for = Duration::from_secs(12);
    let started = Instant::now();
    let settled_from = started + run_for / 2;
    let until = started + run_for;
    let counts = Arc::new([(); 4].map(|()| AtomicUsize::new(0)));
    let mut callers = Vec::new();
    for _ in 0..16 {
        let (client, url, counts) = (client(&manager), server.url(), Arc::clone(&counts));
        callers.push(tokio::spawn(async move {
            while Instant::now() < until {
                let result = match client.get(&url).send().await {
                    Ok(response) if read_bodies => {
                        let status = response.status();
                        response.bytes().await.map(|_| status).map_err(|_| ())
                    }
                    Ok(response) => Ok(response.status()),
                    Err(_) => Err(()),
                };
                if Instant::now() < settled_from {
                    continue;
                }
                let index = match result {
                    Ok(StatusCode::OK) => 0,
                    Ok(StatusCode::TOO_MANY_REQUESTS) => 1,
                    Ok(_) => 2,
                    Err(_) => 3,
                };
                counts[index].fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for caller in callers {
        caller.await.unwrap();
    }
    let [ok, refused, other, errors] = counts.each_ref().map(|c| c.load(Ordering::Relaxed));
    let settled_secs = (until - settled_from).as_secs_f64();
    let goodput = ok as f64 / settled_secs / 50.0;
    let sent = ok + refused + other + errors;
    let refused_share = refused as f64 / sent as f64;
    println!(
        "bodies read: {read_bodies}; settled {settled_secs:.0} s: {sent} sent, {ok} ok, \
         {refused} refused by the server ({:.1} %), goodput {:.1} % of 50/s, learned rate \
         {:.1}/s",
        100.0 * refused_share,
        100.0 * goodput,
        manager.key(&server.key()).rate().unwrap()
    );
    assert_eq!((other, errors), (0, 0));
    (goodput, refused_share)
}

/// The figures of the issue: 16 callers that read each body learn the
/// server's capacity. The README's quick-start steps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn against_a_50_per_second_server_16_callers_get_its_capacity() {
    let _alone = support::alone();
    let (goodput, refused) = sixteen_callers_against_a_50_per_second_server(true).await;
    assert!(goodput >= 0.95, "goodput {goodput:.3}");
    assert!(refused <= 0.05, "refused {refused:.3}");
}

/// Callers that look only at the status, as much real code does, learn the
/// server's capacity too: a 200 whose body is dropped unread is a success.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_that_read_only_the_status_still_learn_the_servers_capacity() {
    let _alone = support::alone();
    let (goodput, refused) = sixteen_callers_against_a_50_per_second_server(false).await;
    assert!(goodput >= 0.90, "goodput {goodput:.3}");
    assert!(refused <= 0.10, "refused {refused:.3}");
}

/// What one call taught a key whose rate starts at 1/s: the throttle's
/// counts (requests, accepts) and whether the rate rose, fell or stayed.
fn learned(manager: &ThrottleManager<String>, key: &str) -> ((u64, u64), std::cmp::Ordering) {
    let snapshot = manager.key(key).snapshot().unwrap();
    let high = snapshot.priorities[0];
    let rate = snapshot.rate.unwrap();
    ((high.requests, high.accepts), rate.total_cmp(&1.0))
}

fn learning_manager() -> ThrottleManager<String> {
    ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(1.0).bounds(0.5, 100.0))
        .throttle(ThrottleConfig::new())
        .bulkhead(portcullis::BulkheadConfig::new(1))
        .build()
        .unwrap()
}

/// A 200 whose body the caller drops unread is a success: the rate rises,
/// and the slot is free at the drop.
#[tokio::test]
async fn a_body_dropped_after_a_200_head_is_a_success() {
    let server = Server::always(StatusCode::OK).await;
    let manager = learning_manager();
    let response = client(&manager).get(server.url()).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        manager.key(&server.key()).snapshot().unwrap().active,
        Some(1)
    );
    drop(response);
    assert_eq!(
        manager.key(&server.key()).snapshot().unwrap().active,
        Some(0)
    );
    assert_eq!(
        learned(&manager, &server.key()),
        ((1, 1), std::cmp::Ordering::Greater)
    );
}

/// A 503 whose body the caller drops unread is still overload.
#[tokio::test]
async fn a_body_dropped_after_a_503_head_is_overload() {
    let server = Server::always(StatusCode::SERVICE_UNAVAILABLE).await;
    let manager = learning_manager();
    let response = client(&manager).get(server.url()).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    drop(response);
    assert_eq!(
        manager.key(&server.key()).snapshot().unwrap().active,
        Some(0)
    );
    assert_eq!(
        learned(&manager, &server.key()),
        ((1, 0), std::cmp::Ordering::Less)
    );
}

/// Issue 31's public contract, exactly as written (it must compile).
mod retry_contract {
    use portcullis::client::ThrottleMiddleware;
    use portcullis::retry::RetryPolicy;
    use portcullis::{Priority, RateConfig, ThrottleConfig, ThrottleManager, overloaded};
    use std::time::Duration;

    #[allow(dead_code)]
    async fn fetch(url: &str) -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
        let policy = RetryPolicy::new()
            .max_retries(3)
            .backoff(Duration::from_millis(50), Duration::from_secs(5))
            .budget(0.1)
            .deadline(Duration::from_secs(30));
        let manager = ThrottleManager::<String>::builder()
            .rate(RateConfig::adaptive(10.0))
            .throttle(ThrottleConfig::new())
            .retry(policy)
            .build()?;
        // `call` retries overloaded outcomes within the key's budget.
        let n: u16 = manager
            .call("api.example", Priority::HIGH, || async {
                Err::<u16, _>(overloaded(std::io::Error::other("503")))
            })
            .await
            .unwrap_or(0);
        let _ = n;
        // The middleware retries idempotent requests the same way.
        let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
            .with(ThrottleMiddleware::new(manager.clone()))
            .build();
        Ok(client.get(url).send().await?.text().await?)
    }
}
