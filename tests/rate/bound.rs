//! A quota is a bound a user can check: over any interval `T`, the calls
//! admitted are at most `rate × T + burst`, whoever waits and however
//! many wait. On tokio's paused clock, so the instants are exact.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use portcullis::{Priority, RateConfig, ThrottleManager};
use tokio::time::Instant;

/// How a waiter is let in.
#[derive(Debug, Clone, Copy)]
enum Entry {
    Wait,
    Acquire,
    Call,
}

/// The instants (seconds from `start`) at which `waiters` tasks, each
/// calling `key` through `entry` in a loop, were let in over `run_for`.
async fn admissions(
    manager: &ThrottleManager<String>,
    entry: Entry,
    waiters: usize,
    run_for: Duration,
) -> Vec<f64> {
    let start = Instant::now();
    let until = start + run_for;
    let admitted = Arc::new(Mutex::new(Vec::new()));
    let tasks: Vec<_> = (0..waiters)
        .map(|_| {
            let (manager, admitted) = (manager.clone(), Arc::clone(&admitted));
            tokio::spawn(async move {
                loop {
                    let let_in = match entry {
                        Entry::Wait => {
                            manager.wait("key").await;
                            true
                        }
                        Entry::Acquire => match manager.acquire("key", Priority::HIGH).await {
                            Ok(permit) => {
                                permit.success();
                                true
                            }
                            Err(_) => false,
                        },
                        Entry::Call => manager
                            .call("key", Priority::HIGH, || async { Ok::<_, std::io::Error>(()) })
                            .await
                            .is_ok(),
                    };
                    let now = Instant::now();
                    if now >= until {
                        return;
                    }
                    if let_in {
                        admitted.lock().unwrap().push((now - start).as_secs_f64());
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let mut admitted = admitted.lock().unwrap().clone();
    admitted.sort_by(f64::total_cmp);
    admitted
}

/// The most calls `admitted` (sorted instants) put into one interval
/// beyond what `rate × T` allows it: the bound holds when this is at most
/// `burst`. For calls i..=j, (j - i + 1) - rate × (t_j - t_i).
fn most_over_rate(admitted: &[f64], rate: f64) -> f64 {
    let mut lowest = f64::INFINITY; // min over i of (i - rate × t_i)
    let mut most = 0.0_f64;
    for (j, &t) in admitted.iter().enumerate() {
        let at = j as f64 - rate * t;
        lowest = lowest.min(at);
        most = most.max(at - lowest + 1.0);
    }
    most
}

async fn holds(entry: Entry, waiters: usize) {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_second(40).burst(5))
        .max_wait(Duration::from_secs(3_600))
        .build()
        .unwrap();
    let run_for = Duration::from_secs(600);
    let admitted = admissions(&manager, entry, waiters, run_for).await;
    let bound = 40.0 * 600.0 + 5.0;
    let count = admitted.len() as f64;
    let over = most_over_rate(&admitted, 40.0);
    println!("{entry:?}, {waiters} waiters: {count} admitted of {bound}, most over the rate in one interval {over:.3}");
    assert!(count <= bound, "{entry:?}, {waiters} waiters: {count} > {bound}");
    assert!(over <= 5.0 + 1e-6, "{entry:?}, {waiters} waiters: {over} over the rate in one interval");
    assert!(count >= 0.99 * bound, "{entry:?}, {waiters} waiters: only {count}");
}

#[tokio::test(start_paused = true)]
async fn eight_waiters_get_the_quota_and_no_more() {
    for entry in [Entry::Wait, Entry::Acquire, Entry::Call] {
        holds(entry, 8).await;
    }
}

#[tokio::test(start_paused = true)]
async fn sixty_four_waiters_get_the_quota_and_no_more() {
    for entry in [Entry::Wait, Entry::Acquire, Entry::Call] {
        holds(entry, 64).await;
    }
}

#[tokio::test(start_paused = true)]
async fn five_hundred_and_twelve_waiters_get_the_quota_and_no_more() {
    for entry in [Entry::Wait, Entry::Acquire, Entry::Call] {
        holds(entry, 512).await;
    }
}
