//! Randomized stress on real threads: the lock-free rate cell loses no
//! count and admits no call beyond its bound, however threads interleave.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use portcullis::clock::{ManualClock, QuantaClock};
use portcullis::{RateConfig, ThrottleManager};

const THREADS: usize = 4;

#[test]
fn on_frozen_time_threads_together_take_exactly_one_burst() {
    let _alone = crate::support::alone();
    let clock = ManualClock::new();
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(5.0).burst(1_000).bounds(1.0, 10.0))
        .clock(clock)
        .build()
        .unwrap();
    let admitted = Arc::new(AtomicU64::new(0));
    std::thread::scope(|scope| {
        for _ in 0..THREADS {
            let (manager, admitted) = (&manager, Arc::clone(&admitted));
            scope.spawn(move || {
                for _ in 0..20_000 {
                    if manager.check("shared").is_ok() {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    assert_eq!(admitted.load(Ordering::Relaxed), 1_000);
}

#[test]
fn on_real_time_with_rates_changing_underneath_the_bound_holds() {
    let _alone = crate::support::alone();
    const UPPER: f64 = 20_000.0;
    const BURST: u32 = 50;
    let manager = ThrottleManager::<String>::builder()
        .rate(
            RateConfig::adaptive(5_000.0)
                .burst(BURST)
                .bounds(100.0, UPPER)
                .increase_by(50.0)
                .decrease_by(400.0),
        )
        .clock(QuantaClock::new())
        .build()
        .unwrap();
    let admitted = AtomicU64::new(0);
    let started = std::time::Instant::now();
    std::thread::scope(|scope| {
        for thread in 0..THREADS {
            let (manager, admitted) = (&manager, &admitted);
            scope.spawn(move || {
                // A cheap deterministic mix per thread: mostly checks, some
                // successes and failures reported concurrently.
                let mut state = 0x9E37_79B9_7F4A_7C15u64 ^ thread as u64;
                while started.elapsed() < Duration::from_millis(300) {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    match state % 10 {
                        0 => {
                            manager.increment("shared");
                        }
                        1 => {
                            manager.decrement("shared");
                        }
                        _ => {
                            if manager.check("shared").is_ok() {
                                admitted.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                }
            });
        }
    });
    let elapsed = started.elapsed().as_secs_f64();
    let admitted = admitted.load(Ordering::Relaxed) as f64;
    let rate = manager.key("shared").rate().unwrap();
    assert!((100.0..=UPPER).contains(&rate));
    // Each race between a check and a rate change may count one call at the
    // old rate: bounded by the burst's slack, far below this margin.
    let bound = UPPER * elapsed + f64::from(BURST);
    assert!(
        admitted <= bound,
        "{admitted} admitted in {elapsed}s, bound {bound}"
    );
    assert!(
        admitted > 100.0 * elapsed,
        "the key must keep admitting calls"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_tasks_waiting_and_cancelling_leave_the_schedule_intact() {
    let _alone = crate::support::alone();
    // 200 tasks wait on one key at 2,000/s; a third of them give up after a
    // random short time. Nothing hangs, every patient task gets through,
    // and they take at least as long as the rate allows (burst 1).
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(2_000.0).bounds(2_000.0, 2_000.0))
        .build()
        .unwrap();
    let finished = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..200u64 {
        let (manager, finished) = (manager.clone(), Arc::clone(&finished));
        tasks.push(tokio::spawn(async move {
            let give_up = Duration::from_micros(500 + (i * 7919) % 40_000);
            if i % 3 == 0 {
                let _ = tokio::time::timeout(give_up, manager.wait("shared")).await;
            } else {
                manager.wait("shared").await.unwrap();
                finished.lock().unwrap().push(std::time::Instant::now());
            }
        }));
    }
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("no waiter hangs")
            .unwrap();
    }
    let mut finished = finished.lock().unwrap();
    assert_eq!(finished.len(), 133);
    finished.sort();
    let span = *finished.last().unwrap() - finished[0];
    // 132 intervals of 0.5 ms; a late wake-up of the first shortens it by
    // at most a timer tick.
    assert!(span >= Duration::from_millis(64), "took {span:?}");
}
