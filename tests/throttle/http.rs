//! The throttle's promises against real HTTP servers on loopback: a
//! HIGH caller whose demand fits is not shed while LOW callers overload a
//! rate-limited server, and a window without calls forgets a backend's
//! failures at every priority.

#[path = "../support/limited_server.rs"]
mod limited_server;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use axum::http::StatusCode;
use portcullis::clock::ManualClock;
use portcullis::{Priority, ThrottleConfig, ThrottleManager};
use tokio::time::Instant;

use crate::promises::PRIORITIES;
use limited_server::CAPACITY;

/// Calls `url` 40 times a second at `priority` until the end of `span`,
/// through the throttle; each answer is its outcome (200 a success, 429 a
/// capacity failure). From the start of `span` on, counts what it sent
/// and what was shed.
async fn caller(
    manager: ThrottleManager<String>,
    client: reqwest::Client,
    url: String,
    priority: Priority,
    (count_from, until): (Instant, Instant),
    counts: Arc<[AtomicU32; 2]>,
) {
    let mut ticks = tokio::time::interval(Duration::from_millis(25));
    loop {
        ticks.tick().await;
        let now = Instant::now();
        if now >= until {
            return;
        }
        let counted = now >= count_from;
        if counted {
            counts[0].fetch_add(1, Ordering::Relaxed);
        }
        let Ok(permit) = manager.try_acquire_owned("server", priority) else {
            if counted {
                counts[1].fetch_add(1, Ordering::Relaxed);
            }
            continue;
        };
        let client = client.clone();
        let url = url.clone();
        // Each call on its own task, so a slow answer delays no caller.
        tokio::spawn(async move {
            match client.get(&url).send().await {
                Ok(answer) if answer.status().is_success() => permit.success(),
                _ => permit.overloaded(),
            }
        });
    }
}

/// One HIGH caller at 40 calls a second and nine LOW callers at 40 each,
/// eight times what the server takes (50/s): over the second half of 8 s,
/// HIGH is shed next to nothing and LOW carries the shedding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_high_caller_whose_demand_fits_is_not_shed_by_a_real_overloaded_server() {
    let _alone = crate::alone();
    let (addr, seen) = limited_server::start_server().await.unwrap();
    let manager = ThrottleManager::<String>::builder()
        .throttle(ThrottleConfig::new().window(Duration::from_secs(2)))
        .build()
        .unwrap();
    let client = reqwest::Client::new();
    let url = format!("http://{addr}/");
    let start = Instant::now();
    let (count_from, until) = (
        start + Duration::from_secs(4),
        start + Duration::from_secs(8),
    );
    let high = Arc::new([AtomicU32::new(0), AtomicU32::new(0)]);
    let low = Arc::new([AtomicU32::new(0), AtomicU32::new(0)]);
    let mut callers = Vec::new();
    for i in 0..10 {
        let (priority, counts) = if i == 0 {
            (Priority::HIGH, Arc::clone(&high))
        } else {
            (Priority::LOW, Arc::clone(&low))
        };
        callers.push(tokio::spawn(caller(
            manager.clone(),
            client.clone(),
            url.clone(),
            priority,
            (count_from, until),
            counts,
        )));
    }
    for caller in callers {
        caller.await.unwrap();
    }
    let share = |counts: &[AtomicU32; 2]| {
        let (sent, shed) = (
            counts[0].load(Ordering::Relaxed),
            counts[1].load(Ordering::Relaxed),
        );
        (f64::from(shed) / f64::from(sent.max(1)), sent)
    };
    let ((high_shed, high_sent), (low_shed, low_sent)) = (share(&high), share(&low));
    let server = seen.between(count_from.into_std(), 4.0);
    println!(
        "HIGH shed {:.1} % of {high_sent}, LOW shed {:.1} % of {low_sent}; the server saw \
         {:.0}/s and served {:.0}/s (it takes {CAPACITY}/s)",
        100.0 * high_shed,
        100.0 * low_shed,
        server.sent_per_second(),
        server.served as f64 / server.seconds,
    );
    assert!(high_shed <= 0.05, "HIGH shed {high_shed:.3}");
    assert!(low_shed >= 0.5, "LOW shed {low_shed:.3}");
}

/// A server that answers 503 while `down`, 200 otherwise.
async fn switchable_server(down: Arc<AtomicBool>) -> SocketAddr {
    let app = axum::Router::new().fallback(move || {
        let down = Arc::clone(&down);
        async move {
            if down.load(Ordering::Relaxed) {
                StatusCode::SERVICE_UNAVAILABLE
            } else {
                StatusCode::OK
            }
        }
    });
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// `calls` calls at each priority, each through the throttle to `url`
/// (the manager's clock moving `gap` after each round); how many of each
/// priority were shed.
async fn call_each(
    manager: &ThrottleManager<String>,
    clock: &ManualClock,
    client: &reqwest::Client,
    url: &str,
    calls: u32,
    gap: Duration,
) -> Vec<u32> {
    let mut shed = vec![0; PRIORITIES.len()];
    for _ in 0..calls {
        for (level, priority) in PRIORITIES.into_iter().enumerate() {
            match manager.try_acquire("server", priority) {
                Ok(permit) => match client.get(url).send().await {
                    Ok(answer) if answer.status().is_success() => permit.success(),
                    _ => permit.overloaded(),
                },
                Err(_) => shed[level] += 1,
            }
        }
        clock.advance(gap);
    }
    shed
}

/// A real server fails every call for a second, then comes back; the
/// throttle's time is a manual clock, so the idle time is exact. After
/// nine tenths of a window without a call every priority is still shed;
/// after a window and 1 %, 200 calls at each priority all go, and succeed.
#[tokio::test]
async fn a_window_without_calls_forgets_a_real_server_s_failures() {
    let _alone = crate::alone();
    for (idle, forgotten) in [
        (Duration::from_millis(1_800), false),
        (Duration::from_millis(2_020), true),
    ] {
        let down = Arc::new(AtomicBool::new(true));
        let url = format!("http://{}/", switchable_server(Arc::clone(&down)).await);
        let clock = ManualClock::new();
        let manager = ThrottleManager::<String>::builder()
            .throttle(ThrottleConfig::new().window(Duration::from_secs(2)))
            .clock(clock.clone())
            .build()
            .unwrap();
        let client = reqwest::Client::new();
        // A second of failures, a round of calls each 10 ms.
        let gap = Duration::from_millis(10);
        call_each(&manager, &clock, &client, &url, 100, gap).await;
        down.store(false, Ordering::Relaxed);
        clock.advance(idle - gap); // from the last call
        let probabilities: Vec<f64> = PRIORITIES
            .iter()
            .map(|&priority| {
                manager
                    .key("server")
                    .rejection_probability(priority)
                    .unwrap()
            })
            .collect();
        if forgotten {
            assert_eq!(probabilities, [0.0; 4]);
            let shed = call_each(&manager, &clock, &client, &url, 200, Duration::ZERO).await;
            assert_eq!(shed, [0, 0, 0, 0]);
        } else {
            assert!(probabilities.iter().all(|&p| p > 0.5), "{probabilities:?}");
        }
    }
}
