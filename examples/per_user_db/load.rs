//! The load: ordinary users calling at a steady, modest rate, and one noisy
//! user running many loops at once; what each class got back.
//!
//! (Also compiled into `tests/server/per_user_db.rs`.)

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::app::USER_HEADER;

/// The noisy user's id.
pub(crate) const NOISY_USER: u32 = 666;

/// Who calls, how much, for how long.
#[derive(Debug, Clone)]
pub(crate) struct Load {
    /// Ordinary users (ids 1, 2, ...), each sending `per_user_rate`
    /// requests a second whatever the answers: nine reads to one write.
    pub(crate) ordinary_users: u32,
    pub(crate) per_user_rate: f64,
    /// The noisy user's loops: each sends its next read as soon as the last
    /// is answered, and after a refusal waits as `Retry-After` says (100 ms
    /// when it says nothing), as a client with a retry policy does.
    pub(crate) noisy_loops: usize,
    pub(crate) length: Duration,
}

/// What one class of users got back.
#[derive(Debug, Default, Clone)]
pub(crate) struct Tally {
    pub(crate) requests: u64,
    pub(crate) successes: u64,
    pub(crate) too_many: u64,
    pub(crate) unavailable: u64,
    /// Refusals (429 or 503) that said when to retry.
    pub(crate) with_retry_after: u64,
    /// Anything else: other statuses, failed connections.
    pub(crate) errors: u64,
    latencies: Vec<Duration>,
}

impl Tally {
    /// The `q` quantile of the latencies (of every answer, refusals too).
    pub(crate) fn latency(&self, q: f64) -> Duration {
        let mut sorted = self.latencies.clone();
        sorted.sort_unstable();
        if sorted.is_empty() {
            return Duration::ZERO;
        }
        sorted[((sorted.len() - 1) as f64 * q).round() as usize]
    }

    pub(crate) fn success_rate(&self) -> f64 {
        self.successes as f64 / self.requests.max(1) as f64
    }

    fn count(&mut self, status: Option<u16>, retry_after: bool, latency: Duration) {
        self.requests += 1;
        self.latencies.push(latency);
        match status {
            Some(200 | 201) => self.successes += 1,
            Some(429) => self.too_many += 1,
            Some(503) => self.unavailable += 1,
            _ => self.errors += 1,
        }
        if matches!(status, Some(429 | 503)) && retry_after {
            self.with_retry_after += 1;
        }
    }
}

/// What the ordinary users and the noisy one got.
#[derive(Debug, Default, Clone)]
pub(crate) struct Report {
    pub(crate) ordinary: Tally,
    pub(crate) noisy: Tally,
}

/// One request as `user`; its status (`None`: no answer), whether it
/// carried `Retry-After` (and what it said), and how long it took.
async fn request(
    client: &reqwest::Client,
    base: &str,
    user: u32,
    write: bool,
) -> (Option<u16>, Option<Duration>, Duration) {
    let start = Instant::now();
    let request = if write {
        client.post(format!("{base}/events"))
    } else {
        client.get(format!("{base}/summary"))
    };
    let answer = request.header(USER_HEADER, user.to_string()).send().await;
    let Ok(answer) = answer else {
        return (None, None, start.elapsed());
    };
    let status = answer.status().as_u16();
    let retry_after = answer
        .headers()
        .get("retry-after")
        .and_then(|value| value.to_str().ok()?.parse::<u64>().ok())
        .map(Duration::from_secs);
    let _ = answer.bytes().await;
    (Some(status), retry_after, start.elapsed())
}

/// Runs `load` against the service at `base`.
pub(crate) async fn run(base: &str, load: &Load) -> Report {
    let client = reqwest::Client::new();
    let report = Arc::new(Mutex::new(Report::default()));
    let deadline = Instant::now() + load.length;
    let mut tasks = Vec::new();
    for user in 1..=load.ordinary_users {
        let (client, base, report) = (client.clone(), base.to_owned(), Arc::clone(&report));
        let period = Duration::from_secs_f64(1.0 / load.per_user_rate);
        tasks.push(tokio::spawn(async move {
            // Users start spread over one period, not all at once.
            let offset = period.mul_f64(f64::from(user) / 32.0 % 1.0);
            tokio::time::sleep(offset).await;
            let mut ticks = tokio::time::interval(period);
            let mut sent = Vec::new();
            for n in 0.. {
                ticks.tick().await;
                if Instant::now() >= deadline {
                    break;
                }
                let (client, base, report) = (client.clone(), base.clone(), Arc::clone(&report));
                sent.push(tokio::spawn(async move {
                    let (status, after, took) = request(&client, &base, user, n % 10 == 9).await;
                    report
                        .lock()
                        .unwrap()
                        .ordinary
                        .count(status, after.is_some(), took);
                }));
            }
            for request in sent {
                let _ = request.await;
            }
        }));
    }
    for _ in 0..load.noisy_loops {
        let (client, base, report) = (client.clone(), base.to_owned(), Arc::clone(&report));
        tasks.push(tokio::spawn(async move {
            while Instant::now() < deadline {
                let (status, after, took) = request(&client, &base, NOISY_USER, false).await;
                report
                    .lock()
                    .unwrap()
                    .noisy
                    .count(status, after.is_some(), took);
                if matches!(status, Some(429 | 503)) {
                    tokio::time::sleep(after.unwrap_or(Duration::from_millis(100))).await;
                }
            }
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
    report.lock().unwrap().clone()
}

/// Prints one phase's table.
pub(crate) fn print(title: &str, report: &Report, load: &Load) {
    println!("{title}");
    println!(
        "  {:<26} {:>8} {:>9} {:>6} {:>6} {:>12} {:>7} {:>9} {:>9}",
        "users", "requests", "successes", "429", "503", "Retry-After", "errors", "p50", "p99"
    );
    let ordinary = format!(
        "{} ordinary, {}/s each",
        load.ordinary_users, load.per_user_rate
    );
    let noisy = format!("1 noisy, {} loops", load.noisy_loops);
    let rows = [(ordinary, &report.ordinary), (noisy, &report.noisy)];
    for (class, tally) in rows {
        if tally.requests == 0 {
            continue;
        }
        println!(
            "  {:<26} {:>8} {:>9} {:>6} {:>6} {:>12} {:>7} {:>9} {:>9}",
            class,
            tally.requests,
            tally.successes,
            tally.too_many,
            tally.unavailable,
            tally.with_retry_after,
            tally.errors,
            format!("{:.1} ms", tally.latency(0.5).as_secs_f64() * 1e3),
            format!("{:.1} ms", tally.latency(0.99).as_secs_f64() * 1e3),
        );
    }
    println!();
}
