//! The learned concurrency limit against simulated backends on virtual
//! time: a backend with a fixed number of workers, whose calls take longer
//! once more are in flight than it has workers.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use portcullis::{BulkheadConfig, Priority, ThrottleManager};
use tokio::time::Instant;

const SERVICE: Duration = Duration::from_millis(10);

/// A backend of `workers` workers: a call takes `SERVICE`, stretched by
/// how far the calls in flight outnumber the workers.
struct Backend {
    workers: AtomicU32,
    in_flight: AtomicU32,
}

impl Backend {
    async fn call(&self) -> Duration {
        let in_flight = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        let workers = self.workers.load(Ordering::SeqCst);
        let latency = SERVICE.mul_f64((f64::from(in_flight) / f64::from(workers)).max(1.0));
        tokio::time::sleep(latency).await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        latency
    }
}

/// `callers` closed loops for `length`; returns the latencies after
/// `warm_up` and the limits seen then.
async fn run(
    workers: u32,
    callers: usize,
    length: Duration,
    warm_up: Duration,
) -> (Vec<Duration>, Vec<u32>) {
    run_with(workers, None, callers, length, warm_up).await
}

/// As [`run`], with the workers changed to `then.1` at `then.0`.
async fn run_with(
    workers: u32,
    then: Option<(Duration, u32)>,
    callers: usize,
    length: Duration,
    warm_up: Duration,
) -> (Vec<Duration>, Vec<u32>) {
    let manager = ThrottleManager::<String>::builder()
        .bulkhead(BulkheadConfig::adaptive().bounds(1, 200).queue(1_000))
        .build()
        .unwrap();
    let backend = Arc::new(Backend {
        workers: AtomicU32::new(workers),
        in_flight: AtomicU32::new(0),
    });
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..callers {
        let (manager, backend) = (manager.clone(), Arc::clone(&backend));
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            while start.elapsed() < length {
                let permit = manager.acquire("db", Priority::HIGH).await.unwrap();
                let latency = backend.call().await;
                permit.success();
                if start.elapsed() > warm_up {
                    latencies.push(latency);
                }
            }
            latencies
        }));
    }
    let mut limits = Vec::new();
    while start.elapsed() < length {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if let Some((at, workers)) = then {
            if start.elapsed() >= at {
                backend.workers.store(workers, Ordering::SeqCst);
            }
        }
        if start.elapsed() > warm_up {
            limits.push(manager.key("db").concurrency_limit().unwrap());
        }
    }
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.unwrap());
    }
    latencies.sort();
    (latencies, limits)
}

#[tokio::test(start_paused = true)]
async fn the_limit_settles_near_the_backends_workers() {
    let (latencies, limits) = run(10, 64, Duration::from_secs(30), Duration::from_secs(10)).await;
    let p99 = latencies[latencies.len() * 99 / 100];
    // (Probes hold the limit at 2 for a few calls now and then: the
    // settled range is what it keeps 95 % of the time.)
    let mut limits = limits;
    limits.sort();
    let (low, high) = (
        limits[limits.len() / 20],
        limits[limits.len() - 1 - limits.len() / 20],
    );
    println!(
        "limit {low}..={high} (5th to 95th percentile), p99 {p99:?}, {} calls",
        latencies.len()
    );
    assert!(low >= 8 && high <= 16, "limit {low}..={high}");
    assert!(p99 <= SERVICE * 2, "p99 {p99:?}");
}

/// Half the workers go at 15 s: within a second the limit has followed
/// them down, and calls are back near the unloaded latency.
#[tokio::test(start_paused = true)]
async fn the_limit_follows_the_backend_when_its_workers_halve() {
    let (latencies, limits) = run_with(
        10,
        Some((Duration::from_secs(15), 5)),
        64,
        Duration::from_secs(30),
        Duration::from_secs(16),
    )
    .await;
    let mut limits = limits;
    limits.sort();
    let (low, high) = (
        limits[limits.len() / 20],
        limits[limits.len() - 1 - limits.len() / 20],
    );
    let p99 = latencies[latencies.len() * 99 / 100];
    println!("after the drop: limit {low}..={high}, p99 {p99:?}");
    assert!(low >= 4 && high <= 8, "limit {low}..={high}");
    assert!(p99 <= SERVICE * 2, "p99 {p99:?}");
}

/// Callers that never queue (`try_acquire`, retried a millisecond later
/// when refused) keep every slot taken: the limit is what holds them back,
/// so against a backend with room to spare it grows.
#[tokio::test(start_paused = true)]
async fn the_limit_grows_when_every_slot_is_taken_with_nobody_queued() {
    let manager = ThrottleManager::<String>::builder()
        .bulkhead(BulkheadConfig::adaptive().bounds(1, 200)) // no queue
        .build()
        .unwrap();
    let backend = Arc::new(Backend {
        workers: AtomicU32::new(1_000),
        in_flight: AtomicU32::new(0),
    });
    let start = Instant::now();
    let length = Duration::from_secs(10);
    let mut tasks = Vec::new();
    for _ in 0..100 {
        let (manager, backend) = (manager.clone(), Arc::clone(&backend));
        tasks.push(tokio::spawn(async move {
            while start.elapsed() < length {
                match manager.try_acquire("db", Priority::HIGH) {
                    Ok(permit) => {
                        backend.call().await;
                        permit.success();
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(1)).await,
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let learned = manager.key("db").concurrency_limit().unwrap();
    assert_eq!(manager.key("db").snapshot().unwrap().queued, Some(0));
    // A hundred callers, a backend that never slows: the limit climbs
    // toward them.
    assert!(learned >= 50, "the limit stayed at {learned}");
}

/// A neutral outcome (a 404, a cancelled call) says nothing about
/// capacity, but it still ends the call: its slot is free again, on a
/// learned limit as on a fixed one.
#[tokio::test(start_paused = true)]
async fn a_neutral_outcome_frees_its_slot_on_a_learned_limit() {
    let manager = ThrottleManager::<String>::builder()
        .bulkhead(BulkheadConfig::adaptive().bounds(4, 4))
        .build()
        .unwrap();
    for _ in 0..100 {
        let permits: Vec<_> = (0..4)
            .map(|_| manager.try_acquire("db", Priority::HIGH).unwrap())
            .collect();
        assert!(
            manager.try_acquire("db", Priority::HIGH).is_err(),
            "4 slots, 4 taken"
        );
        tokio::time::advance(Duration::from_millis(5)).await;
        for permit in permits {
            permit.report(portcullis::outcome::Outcome::Neutral);
        }
        assert_eq!(manager.key("db").snapshot().unwrap().active, Some(0));
    }
}

// ---- The public contract of the issue, as written ----

async fn learned() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let manager = ThrottleManager::<String>::builder()
        .bulkhead(BulkheadConfig::adaptive().bounds(1, 200).queue(32))
        .build()?;
    let permit = manager.acquire("db", Priority::HIGH).await?;
    permit.success();
    let _limit: Option<u32> = manager.key("db").concurrency_limit();
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn the_contract_compiles_and_runs() {
    learned().await.unwrap();
}

/// The other side of the rule: a limit its calls never fill learns nothing
/// from them, so one caller at a time leaves it near one, however fast the
/// backend answers.
#[tokio::test(start_paused = true)]
async fn a_limit_its_calls_never_fill_does_not_grow() {
    let manager = ThrottleManager::<String>::builder()
        .bulkhead(BulkheadConfig::adaptive().bounds(1, 200))
        .build()
        .unwrap();
    let backend = Backend {
        workers: AtomicU32::new(1_000),
        in_flight: AtomicU32::new(0),
    };
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        let permit = manager.try_acquire("db", Priority::HIGH).unwrap();
        backend.call().await;
        permit.success();
    }
    let learned = manager.key("db").concurrency_limit().unwrap();
    assert!(
        learned <= 2,
        "one caller at a time took the limit to {learned}"
    );
}

/// The probe's settings reach every key: with probes every 2 s (no
/// jitter), 5 calls at 1 in flight, the limit drops to 1 about every 2 s
/// for about five calls' latency, and not in between.
#[tokio::test(start_paused = true)]
async fn probes_come_as_often_and_as_long_as_tuned() {
    let config = BulkheadConfig::adaptive()
        .bounds(1, 200)
        .queue(1_000)
        .probe_interval(Duration::from_secs(2))
        .probe_jitter(Duration::ZERO)
        .probe_calls(5)
        .probe_limit(1);
    let manager = ThrottleManager::<String>::builder()
        .bulkhead(config)
        .build()
        .unwrap();
    let backend = Arc::new(Backend {
        workers: AtomicU32::new(8),
        in_flight: AtomicU32::new(0),
    });
    let start = Instant::now();
    let length = Duration::from_secs(7);
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let (manager, backend) = (manager.clone(), Arc::clone(&backend));
            tokio::spawn(async move {
                while start.elapsed() < length {
                    let permit = manager.acquire("db", Priority::HIGH).await.unwrap();
                    backend.call().await;
                    permit.success();
                }
            })
        })
        .collect();
    // When the limit is at the probe's 1, in 5 ms steps.
    let mut probing = Vec::new();
    while start.elapsed() < length {
        tokio::time::sleep(Duration::from_millis(5)).await;
        if manager.key("db").concurrency_limit() == Some(1) {
            probing.push(start.elapsed().as_millis() as u64);
        }
    }
    for task in tasks {
        task.await.unwrap();
    }
    // Runs of consecutive samples: one probe each.
    let mut probes: Vec<(u64, u64)> = Vec::new();
    for at in probing {
        match probes.last_mut() {
            Some((_, end)) if at - *end <= 5 => *end = at,
            _ => probes.push((at, at)),
        }
    }
    let starts: Vec<u64> = probes.iter().map(|&(from, _)| from).collect();
    assert_eq!(
        probes.len(),
        4,
        "the first probe and one every 2 s: {probes:?}"
    );
    for (probe, &(from, to)) in probes.iter().enumerate().skip(1) {
        let after = from - starts[probe - 1];
        assert!(
            (2_000..2_200).contains(&after),
            "probe {probe} came {after} ms after the one before: {probes:?}"
        );
        // Five calls of 10 ms, one at a time (and the window the probe
        // began in finishing).
        assert!(to - from <= 100, "probe {probe} lasted {} ms", to - from);
    }
}
