//! The learned rate against a real rate-limited HTTP server on loopback
//! (50 requests/s, burst 5, 429 beyond, like nginx's `limit_req`), through
//! `call`, for the crate's defaults and the README's quick start: 16
//! callers get the server's capacity with few refusals, and after a quiet
//! phase a spike starts from what was used, not from a rate that grew while
//! nothing tested it.
//!
//! Real time: the server and its callers talk over real sockets. Each test
//! prints its figures (`cargo test --test rate_http -- --nocapture`).

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use portcullis::{Priority, RateConfig, ThrottleManager, overloaded};

const CAPACITY: u32 = 50;

/// When each request arrived at the server, and whether it was served.
#[derive(Default)]
struct Seen {
    arrivals: std::sync::Mutex<Vec<(Instant, bool)>>,
}

async fn start_server() -> (SocketAddr, Arc<Seen>) {
    let limit: DefaultDirectRateLimiter = RateLimiter::direct(
        Quota::per_second(NonZeroU32::new(CAPACITY).unwrap())
            .allow_burst(NonZeroU32::new(5).unwrap()),
    );
    let seen = Arc::new(Seen::default());
    let state = (Arc::new(limit), Arc::clone(&seen));
    let app = Router::new().fallback(
        |State((limit, seen)): State<(Arc<DefaultDirectRateLimiter>, Arc<Seen>)>| async move {
            let served = limit.check().is_ok();
            seen.arrivals.lock().unwrap().push((Instant::now(), served));
            if served {
                StatusCode::OK
            } else {
                StatusCode::TOO_MANY_REQUESTS
            }
        },
    );
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app.with_state(state)).await });
    (addr, seen)
}

/// One call through `call`: a 429 is overload.
async fn fetch(manager: &ThrottleManager<String>, client: &reqwest::Client, url: &str) {
    let _ = manager
        .call("server", Priority::MEDIUM, || async {
            let response = client.get(url).send().await.map_err(overloaded)?;
            if response.status() == StatusCode::TOO_MANY_REQUESTS {
                return Err(overloaded(std::io::Error::other("429")));
            }
            Ok(())
        })
        .await;
}

/// `callers` loops calling the server until `until`.
async fn load(manager: &ThrottleManager<String>, addr: SocketAddr, callers: usize, until: Instant) {
    let client = reqwest::Client::new();
    let url = format!("http://{addr}/");
    let mut tasks = Vec::new();
    for _ in 0..callers {
        let (manager, client, url) = (manager.clone(), client.clone(), url.clone());
        tasks.push(tokio::spawn(async move {
            while Instant::now() < until {
                fetch(&manager, &client, &url).await;
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
}

/// The README's quick start, as it reads there.
fn quick_start() -> RateConfig {
    RateConfig::new(10.0)
        .bounds(1.0, 200.0)
        .increment(0.3)
        .decrease_factor(0.7)
}

/// 16 callers for 12 s; over the second half, the share of requests the
/// server refused and its capacity used.
async fn settled_figures(config: RateConfig, name: &str) -> (f64, f64) {
    let manager = ThrottleManager::<String>::builder()
        .rate(config)
        .build()
        .unwrap();
    let (addr, seen) = start_server().await;
    let start = Instant::now();
    let half = start + Duration::from_secs(6);
    load(&manager, addr, 16, start + Duration::from_secs(12)).await;
    let late: Vec<bool> = seen
        .arrivals
        .lock()
        .unwrap()
        .iter()
        .filter(|(t, _)| *t >= half)
        .map(|&(_, served)| served)
        .collect();
    let served = late.iter().filter(|&&s| s).count() as f64;
    let refused = 1.0 - served / late.len() as f64;
    let goodput = served / 6.0 / f64::from(CAPACITY);
    println!(
        "{name}: second half {} requests, {:.1} % refused by the server, goodput {:.1} % \
         of {CAPACITY}/s (its burst of 5 puts the most at about 103 %), learned rate {:.1}/s",
        late.len(),
        100.0 * refused,
        100.0 * goodput,
        manager.rate("server").unwrap()
    );
    (refused, goodput)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quick_start_gets_the_capacity_with_few_refusals() {
    let (refused, goodput) = settled_figures(quick_start(), "quick start").await;
    assert!(refused <= 0.05, "refused {refused:.3}");
    assert!(goodput >= 0.95, "goodput {goodput:.3}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_defaults_get_the_capacity_with_few_refusals() {
    let (refused, goodput) = settled_figures(RateConfig::new(10.0), "defaults").await;
    assert!(refused <= 0.05, "refused {refused:.3}");
    assert!(goodput >= 0.95, "goodput {goodput:.3}");
}

/// 5/s for 8 s, then 16 callers as fast as they may: after the quiet phase
/// the rate is at most twice what was used (or its start), plus the one
/// step a new key's first success takes; the first second of the spike
/// sends the server at most 1.5x its capacity. (Before rate validation,
/// the quiet phase alone took the rate from 10/s to 22/s at 0.3/s a
/// success, and to 50/s at 1/s.)
async fn quiet_then_spike(config: RateConfig, step: f64, name: &str) {
    let manager = ThrottleManager::<String>::builder()
        .rate(config)
        .build()
        .unwrap();
    let (addr, seen) = start_server().await;
    let client = reqwest::Client::new();
    let url = format!("http://{addr}/");
    let quiet_until = Instant::now() + Duration::from_secs(8);
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    while Instant::now() < quiet_until {
        tick.tick().await;
        fetch(&manager, &client, &url).await;
    }
    let learned = manager.rate("server").unwrap();
    let used: f64 = 5.0;
    let spike_at = Instant::now();
    load(&manager, addr, 16, spike_at + Duration::from_secs(2)).await;
    let arrivals = seen.arrivals.lock().unwrap().clone();
    let first_second = arrivals
        .iter()
        .filter(|(t, _)| *t >= spike_at && *t < spike_at + Duration::from_secs(1))
        .count();
    println!(
        "{name}: learned {learned:.1}/s after the quiet phase ({used}/s used); \
         the spike's first second sent {first_second} ({:.2}x capacity)",
        first_second as f64 / f64::from(CAPACITY)
    );
    assert!(
        learned <= (2.0 * used).max(10.0) + step,
        "learned {learned}"
    );
    assert!(
        first_second as f64 <= 1.5 * f64::from(CAPACITY),
        "{first_second} in the spike's first second"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_quiet_phase_a_spike_starts_at_what_was_used_defaults() {
    quiet_then_spike(RateConfig::new(10.0), 0.3, "defaults").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_quiet_phase_a_spike_starts_at_what_was_used_quick_start() {
    quiet_then_spike(quick_start(), 0.3, "quick start").await;
}
