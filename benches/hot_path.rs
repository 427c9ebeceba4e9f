//! The hot path of a healthy key, next to the obvious alternative in the same
//! run: governor's keyed limiter (`check_key`) on the same String keys.
//!
//! Run: `cargo bench --bench hot_path`. Compare ratios, not absolute times:
//! these machines are shared and noisy. `cargo bench --bench hot_path --
//! rounds` instead times the headline calls in 15 rounds that alternate
//! the sides, and prints the median ratio of each to governor (and of
//! `call` to `try_acquire` + `success()`): drift moves medians of
//! interleaved rounds least.

#[path = "support/composition.rs"]
mod composition;
#[path = "support/rounds.rs"]
mod rounds;

use std::future::Future;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, criterion_group};
use dashmap::DashMap;
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use portcullis::builder::KeySpaceConfig;
use portcullis::builder::ThrottleManagerBuilder;
use portcullis::clock::TokioClock;
use portcullis::{BulkheadConfig, Priority, RateConfig, ThrottleConfig, ThrottleManager};
use tokio::sync::Semaphore;

/// Fast enough that a check never fails: every key stays healthy.
const RATE: u32 = 1_000_000_000;

fn keys(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("host-{i}.example.com")).collect()
}

/// A manager with its default clock (quanta, like governor's).
fn portcullis(keys: &[String]) -> ThrottleManager<String> {
    portcullis_with(keys, ThrottleManager::<String>::builder())
}

/// A manager from `builder`, each key's rate at its upper bound.
fn portcullis_with(
    keys: &[String],
    builder: ThrottleManagerBuilder<String>,
) -> ThrottleManager<String> {
    portcullis_starting_at(keys, builder, RATE)
}

/// A manager from `builder`, each key's rate starting at `rate` (at most
/// its upper bound, `RATE`), with `keys` in its key space.
fn portcullis_starting_at(
    keys: &[String],
    builder: ThrottleManagerBuilder<String>,
    rate: u32,
) -> ThrottleManager<String> {
    let manager = builder
        .rate(
            RateConfig::adaptive(f64::from(rate))
                .burst(rate)
                .bounds(1.0, f64::from(RATE)),
        )
        .key_space(KeySpaceConfig::new().max_keys(keys.len().max(1)))
        .build()
        .unwrap();
    for key in keys {
        manager.check(key.as_str()).unwrap();
    }
    manager
}

fn governor(keys: &[String]) -> DefaultKeyedRateLimiter<String> {
    let rate = NonZeroU32::new(RATE).unwrap();
    let limiter = RateLimiter::keyed(Quota::per_second(rate).allow_burst(rate));
    for key in keys {
        limiter.check_key(key).unwrap();
    }
    limiter
}

/// `try_acquire` + `success()` on `manager`, over `keys` in turn.
fn bench_try_acquire_success(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    manager: &ThrottleManager<String>,
    keys: &[String],
) {
    let mut i = 0;
    group.bench_function(BenchmarkId::new(name, keys.len()), |b| {
        b.iter(|| {
            i = (i + 1) % keys.len();
            if let Ok(permit) = manager.try_acquire(keys[i].as_str(), Priority::MEDIUM) {
                permit.success();
            }
        })
    });
}

/// governor's `check_key` over `keys` in turn: the baseline of each group.
fn bench_governor(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    limiter: &DefaultKeyedRateLimiter<String>,
    keys: &[String],
) {
    let mut i = 0;
    group.bench_function(BenchmarkId::new("governor_check_key", keys.len()), |b| {
        b.iter(|| {
            i = (i + 1) % keys.len();
            black_box(limiter.check_key(&keys[i]))
        })
    });
}

fn check_healthy(c: &mut Criterion) {
    let mut group = c.benchmark_group("check_healthy_key");
    for n in [1usize, 1_000, 1_000_000] {
        let keys = keys(n);
        if n >= 1_000_000 {
            group
                .sample_size(30)
                .measurement_time(Duration::from_secs(4));
        }
        let manager = portcullis(&keys);
        let mut i = 0;
        group.bench_function(BenchmarkId::new("portcullis_check", n), |b| {
            b.iter(|| {
                i = (i + 1) % n;
                black_box(manager.check(keys[i].as_str()))
            })
        });
        drop(manager);
        if n == 1_000 {
            // The price of following tokio's (pausable) clock: a system clock read.
            let manager =
                portcullis_with(&keys, ThrottleManager::builder().clock(TokioClock::new()));
            group.bench_function(BenchmarkId::new("portcullis_check_tokio_clock", n), |b| {
                b.iter(|| {
                    i = (i + 1) % n;
                    black_box(manager.check(keys[i].as_str()))
                })
            });
        }
        let limiter = governor(&keys);
        bench_governor(&mut group, &limiter, &keys);
    }
    group.finish();
}

/// `try_acquire` through the rate and the throttle of a healthy key
/// (probability 0), the permit released without a report, and with a
/// success reported; governor's `check_key` alongside.
fn try_acquire_healthy(c: &mut Criterion) {
    let mut group = c.benchmark_group("try_acquire_healthy_key");
    let n = 1_000;
    let keys = keys(n);
    let manager = portcullis_with(
        &keys,
        ThrottleManager::builder().throttle(ThrottleConfig::new()),
    );
    let mut i = 0;
    group.bench_function(BenchmarkId::new("portcullis_rate_throttle_drop", n), |b| {
        b.iter(|| {
            i = (i + 1) % n;
            black_box(
                manager
                    .try_acquire(keys[i].as_str(), Priority::MEDIUM)
                    .is_ok(),
            )
        })
    });
    bench_try_acquire_success(
        &mut group,
        "portcullis_rate_throttle_success",
        &manager,
        &keys,
    );
    drop(manager);
    let limiter = governor(&keys);
    bench_governor(&mut group, &limiter, &keys);
    group.finish();
}

/// A manager with all three controls, healthy on every key.
fn all_three(keys: &[String]) -> ThrottleManager<String> {
    portcullis_with(keys, all_three_builder())
}

fn all_three_builder() -> ThrottleManagerBuilder<String> {
    ThrottleManager::builder()
        .throttle(ThrottleConfig::new())
        .bulkhead(BulkheadConfig::new(1_000).queue(10))
}

/// `try_acquire` and release through all three controls of a healthy key,
/// next to governor's keyed check and tokio's semaphore (bare, and one per
/// key behind a DashMap, the hand-rolled alternative).
fn full_healthy_path(c: &mut Criterion) {
    let mut group = c.benchmark_group("full_healthy_path");
    let n = 1_000;
    let keys = keys(n);
    let manager = all_three(&keys);
    let mut i = 0;
    bench_try_acquire_success(
        &mut group,
        "portcullis_all_three_try_acquire_success",
        &manager,
        &keys,
    );
    group.bench_function(BenchmarkId::new("portcullis_all_three_call", n), |b| {
        // `call` polled to completion by hand: the closure is ready at once,
        // so the future never waits and needs no runtime.
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        b.iter(|| {
            i = (i + 1) % n;
            let call = manager.call(keys[i].as_str(), Priority::MEDIUM, || async {
                Ok::<_, std::io::Error>(1u8)
            });
            let mut call = std::pin::pin!(call);
            black_box(call.as_mut().poll(&mut cx).is_ready())
        })
    });
    group.bench_function(
        BenchmarkId::new("portcullis_all_three_try_acquire_drop", n),
        |b| {
            b.iter(|| {
                i = (i + 1) % n;
                black_box(
                    manager
                        .try_acquire(keys[i].as_str(), Priority::MEDIUM)
                        .is_ok(),
                )
            })
        },
    );
    drop(manager);
    // The same, on keys whose rate is still below its upper bound: each
    // success raises it (and counts in its recent use), the common case of
    // a learning rate. Half the bound at the start: the bench's successes
    // cannot reach it.
    let growing = portcullis_starting_at(&keys, all_three_builder(), RATE / 2);
    bench_try_acquire_success(
        &mut group,
        "portcullis_all_three_try_acquire_success_rate_growing",
        &growing,
        &keys,
    );
    drop(growing);
    let limiter = governor(&keys);
    bench_governor(&mut group, &limiter, &keys);
    let semaphore = Semaphore::new(1_000);
    group.bench_function("tokio_semaphore_try_acquire", |b| {
        b.iter(|| black_box(semaphore.try_acquire().is_ok()))
    });
    let semaphores: DashMap<String, Arc<Semaphore>> = keys
        .iter()
        .map(|k| (k.clone(), Arc::new(Semaphore::new(1_000))))
        .collect();
    group.bench_function(
        BenchmarkId::new("dashmap_of_tokio_semaphores_try_acquire", n),
        |b| {
            b.iter(|| {
                i = (i + 1) % n;
                let semaphore = Arc::clone(semaphores.get(keys[i].as_str()).unwrap().value());
                black_box(semaphore.try_acquire_owned().is_ok())
            })
        },
    );
    group.finish();
}

/// Two threads on the same key: the contended case.
fn two_threads_one_key(c: &mut Criterion) {
    let mut group = c.benchmark_group("two_threads_one_key");
    let one = Arc::new(vec!["shared.example.com".to_string()]);
    let halves = [Arc::clone(&one), Arc::clone(&one)];
    let manager = all_three(&one);
    group.bench_function("portcullis_all_three_try_acquire_success", |b| {
        b.iter_custom(|iters| {
            run_on_two_threads(iters, &halves, |keys, i| {
                if let Ok(permit) = manager.try_acquire(keys[i].as_str(), Priority::MEDIUM) {
                    permit.success();
                }
            })
        })
    });
    let limiter = governor(&one);
    group.bench_function("governor_check_key", |b| {
        b.iter_custom(|iters| {
            run_on_two_threads(iters, &halves, |keys, i| {
                black_box(limiter.check_key(&keys[i]).is_ok());
            })
        })
    });
    let semaphore = Semaphore::new(1_000);
    group.bench_function("tokio_semaphore_try_acquire", |b| {
        b.iter_custom(|iters| {
            run_on_two_threads(iters, &halves, |_, _| {
                black_box(semaphore.try_acquire().is_ok());
            })
        })
    });
    group.finish();
}

/// Two threads, each on its own 1,000 keys: no global lock means each thread
/// runs about as fast as one thread alone.
fn two_threads_distinct_keys(c: &mut Criterion) {
    let mut group = c.benchmark_group("two_threads_distinct_keys");
    let all = keys(2_000);
    let halves: [Arc<Vec<String>>; 2] = [
        Arc::new(all[..1_000].to_vec()),
        Arc::new(all[1_000..].to_vec()),
    ];
    let manager = portcullis(&all);
    group.bench_function("portcullis_check", |b| {
        b.iter_custom(|iters| {
            run_on_two_threads(iters, &halves, |keys, i| {
                black_box(manager.check(keys[i].as_str()).is_ok());
            })
        })
    });
    let limiter = governor(&all);
    group.bench_function("governor_check_key", |b| {
        b.iter_custom(|iters| {
            run_on_two_threads(iters, &halves, |keys, i| {
                black_box(limiter.check_key(&keys[i]).is_ok());
            })
        })
    });
    group.finish();
}

/// Each thread makes `iters` calls; returns the wall time of the slower one,
/// i.e. the time per call per thread.
fn run_on_two_threads(
    iters: u64,
    halves: &[Arc<Vec<String>>; 2],
    call: impl Fn(&[String], usize) + Sync,
) -> Duration {
    std::thread::scope(|scope| {
        let handles: Vec<_> = halves
            .iter()
            .map(|keys| {
                let call = &call;
                scope.spawn(move || {
                    let start = Instant::now();
                    for i in 0..iters as usize {
                        call(keys, i % keys.len());
                    }
                    start.elapsed()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .max()
            .unwrap()
    })
}

/// Calls per side per round, and rounds, of the interleaved mode.
const ROUND_CALLS: usize = 2_000_000;
const ROUNDS: usize = 15;

/// How long `ROUND_CALLS` calls of `call` take, each on the next key.
fn time_calls(keys: &[String], mut call: impl FnMut(&String)) -> Duration {
    let start = Instant::now();
    for i in 0..ROUND_CALLS {
        call(black_box(&keys[i % keys.len()]));
    }
    start.elapsed()
}

/// The interleaved mode: on 1,000 healthy keys, `check`, `try_acquire` +
/// `success()` (all three controls) and `call` (all three), and governor's
/// `check_key`, each round in a turned order; then two threads on one key.
fn interleaved_rounds() {
    let keys = keys(1_000);
    let checked = portcullis(&keys);
    let manager = all_three(&keys);
    let limiter = governor(&keys);
    let composed = composition::Composition::new(RATE, 1_000);
    for key in &keys {
        assert!(composed.call(key, 0.5));
    }
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let names = [
        "check",
        "try_acquire + success()",
        "call",
        "governor",
        "composition",
    ];
    let mut sides: Vec<(&str, Vec<f64>)> =
        names.into_iter().map(|name| (name, Vec::new())).collect();
    let count = sides.len();
    for round in 0..ROUNDS {
        let mut took = [Duration::ZERO; 5];
        for turn in 0..count {
            let side = (turn + round) % count;
            took[side] = match side {
                0 => time_calls(&keys, |key| black_box(checked.check(key.as_str())).unwrap()),
                1 => time_calls(&keys, |key| {
                    manager
                        .try_acquire(key, Priority::MEDIUM)
                        .unwrap()
                        .success();
                }),
                2 => time_calls(&keys, |key| {
                    let call = manager.call(key.as_str(), Priority::MEDIUM, || async {
                        Ok::<_, std::io::Error>(1u8)
                    });
                    let mut call = std::pin::pin!(call);
                    assert!(call.as_mut().poll(&mut cx).is_ready());
                }),
                3 => time_calls(&keys, |key| {
                    black_box(limiter.check_key(key)).unwrap();
                }),
                _ => time_calls(&keys, |key| {
                    assert!(black_box(composed.call(key, 0.5)));
                }),
            };
        }
        for (side, took) in sides.iter_mut().zip(took) {
            side.1.push(took.as_secs_f64() * 1e9 / ROUND_CALLS as f64);
        }
    }
    let median = |values: Vec<f64>| rounds::median(values).0;
    let ratios = |over: usize, under: usize| -> Vec<f64> {
        sides[over]
            .1
            .iter()
            .zip(&sides[under].1)
            .map(|(a, b)| a / b)
            .collect()
    };
    println!("1,000 healthy keys, {ROUNDS} interleaved rounds of {ROUND_CALLS} calls, medians:");
    let governor_ns = median(sides[3].1.clone());
    let composed_ns = median(sides[4].1.clone());
    println!(
        "  composition (governor direct + Semaphore + SRE counters, one DashMap entry a key): {composed_ns:.1} ns"
    );
    for (over, (name, took)) in sides.iter().enumerate().take(3) {
        println!(
            "  {name:<26} {:>6.1} ns   {:.2}x governor check_key ({governor_ns:.1} ns)",
            median(took.clone()),
            median(ratios(over, 3)),
        );
    }
    for over in [1, 2] {
        println!(
            "  {} / composition: {:.2}x",
            sides[over].0,
            median(ratios(over, 4))
        );
    }
    println!(
        "  call / try_acquire + success(): {:.2}x",
        median(ratios(2, 1))
    );
    // Two threads on one key, alternating with governor each round.
    let one = Arc::new(vec!["shared.example.com".to_string()]);
    let halves = [Arc::clone(&one), Arc::clone(&one)];
    let shared = all_three(&one);
    let shared_limiter = governor(&one);
    let mut two_threads = Vec::new();
    for round in 0..ROUNDS {
        let ours = || {
            run_on_two_threads(ROUND_CALLS as u64 / 2, &halves, |keys, i| {
                shared
                    .try_acquire(keys[i].as_str(), Priority::MEDIUM)
                    .unwrap()
                    .success();
            })
        };
        let theirs = || {
            run_on_two_threads(ROUND_CALLS as u64 / 2, &halves, |keys, i| {
                black_box(shared_limiter.check_key(&keys[i]).is_ok());
            })
        };
        let (a, b) = rounds::alternate(round, ours, theirs);
        two_threads.push(a.as_secs_f64() / b.as_secs_f64());
    }
    println!(
        "  two threads on one key, try_acquire + success() / governor: {:.2}x",
        median(two_threads)
    );
}

criterion_group!(
    benches,
    check_healthy,
    try_acquire_healthy,
    full_healthy_path,
    two_threads_distinct_keys,
    two_threads_one_key
);
fn main() {
    if std::env::args().any(|arg| arg == "rounds") {
        return interleaved_rounds();
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
