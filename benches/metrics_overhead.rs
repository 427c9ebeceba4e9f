//! What the `metrics` feature costs on the hot path of a healthy key:
//! `try_acquire` + `success()` with all three controls, with no recorder
//! (the facade's no-op) and with the Prometheus exporter's recorder
//! installed, next to governor's `check_key` on the same keys; in 15
//! rounds that alternate the three, whose median ratios the machine's
//! drift moves least.
//!
//! Run: `cargo bench --features metrics --bench metrics_overhead`.

#[path = "support/rounds.rs"]
mod rounds;

use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use metrics_exporter_prometheus::PrometheusBuilder;
use portcullis::builder::KeySpaceConfig;
use portcullis::{BulkheadConfig, Priority, RateConfig, ThrottleConfig, ThrottleManager};
use rounds::median;

const KEYS: usize = 1_000;
const CALLS: usize = 2_000_000;
const ROUNDS: usize = 15;
/// Fast enough that no call is refused.
const RATE: u32 = 1_000_000_000;

fn keys() -> Vec<String> {
    (0..KEYS).map(|i| format!("host-{i}.example.com")).collect()
}

/// How long `CALLS` calls of `call` take, each on the next key.
fn time(keys: &[String], call: impl Fn(&str)) -> Duration {
    let start = Instant::now();
    for i in 0..CALLS {
        call(black_box(keys[i % keys.len()].as_str()));
    }
    start.elapsed()
}

fn main() {
    let keys = keys();
    let manager = || {
        ThrottleManager::<String>::builder()
            .rate(
                RateConfig::adaptive(f64::from(RATE))
                    .burst(RATE)
                    .bounds(1.0, f64::from(RATE)),
            )
            .throttle(ThrottleConfig::new())
            .bulkhead(BulkheadConfig::new(64))
            .key_space(KeySpaceConfig::new().max_keys(KEYS))
            .name("bench")
            .build()
            .unwrap()
    };
    // One manager counted only without a recorder, one only with: each
    // registers its series with the recorder of its first count, as an
    // application's manager does with the recorder installed at start.
    let (plain_manager, recorded_manager) = (manager(), manager());
    let governor: DefaultKeyedRateLimiter<String> =
        RateLimiter::keyed(Quota::per_second(NonZeroU32::new(RATE).unwrap()));
    let recorder = PrometheusBuilder::new().build_recorder();
    let call = |manager: &ThrottleManager<String>, key: &str| {
        manager.try_acquire(key, Priority::HIGH).unwrap().success();
    };
    let plain_calls = |key: &str| call(&plain_manager, key);
    let recorded_calls = |key: &str| call(&recorded_manager, key);
    let theirs = |key: &str| {
        governor.check_key(&key.to_owned()).unwrap();
    };
    let (mut recorded_over_plain, mut plain_over_governor) = (Vec::new(), Vec::new());
    let mut recorded_over_governor = Vec::new();
    for round in 0..ROUNDS {
        let mut plain = Duration::ZERO;
        let mut recorded = Duration::ZERO;
        let mut reference = Duration::ZERO;
        // Which side goes first turns each round.
        for side in 0..3 {
            match (side + round) % 3 {
                0 => plain = time(&keys, plain_calls),
                1 => {
                    recorded =
                        metrics::with_local_recorder(&recorder, || time(&keys, recorded_calls));
                }
                _ => reference = time(&keys, theirs),
            }
        }
        recorded_over_plain.push(recorded.as_secs_f64() / plain.as_secs_f64());
        plain_over_governor.push(plain.as_secs_f64() / reference.as_secs_f64());
        recorded_over_governor.push(recorded.as_secs_f64() / reference.as_secs_f64());
    }
    let (a, a_low, a_high) = median(recorded_over_plain);
    let (b, b_low, b_high) = median(plain_over_governor);
    let (c, c_low, c_high) = median(recorded_over_governor);
    println!("try_acquire + success(), rate + throttle + bulkhead, {KEYS} keys, {ROUNDS} rounds:");
    println!(
        "  with the Prometheus recorder / with none: {a:.2}x median ({a_low:.2}x to {a_high:.2}x)"
    );
    println!("  with none / governor check_key: {b:.2}x median ({b_low:.2}x to {b_high:.2}x)");
    println!(
        "  with the Prometheus recorder / governor check_key: {c:.2}x median ({c_low:.2}x to {c_high:.2}x)"
    );
}
