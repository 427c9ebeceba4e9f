//! The load: ordinary users calling at a steady, modest rate, one noisy
//! user running many loops at once, and a crowd of users each within its
//! quota; what each class got back.
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
    /// A crowd of other users (ids from [`CROWD_FROM`]), each sending
    /// `crowd_rate` requests a second as the ordinary users do.
    pub(crate) crowd_users: u32,
    pub(crate) crowd_rate: f64,
    pub(crate) length: Duration,
}

/// The first id of the crowd's users.
pub(crate) const CROWD_FROM: u32 = 1_000;

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
    /// Successes answered before the load's end (those of requests still
    /// waiting then are answered later): the rate the service served.
    pub(crate) served_in_time: u64,
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

    fn count(&mut self, status: Option<u16>, retry_after: bool, latency: Duration, in_time: bool) {
        self.requests += 1;
        self.latencies.push(latency);
        match status {
            Some(200 | 201) => {
                self.successes += 1;
                self.served_in_time += u64::from(in_time);
            }
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
    pub(crate) crowd: Tally,
}

/// Which class a user is in.
#[derive(Debug, Clone, Copy)]
enum Class {
    Ordinary,
    Crowd,
}

impl Report {
    /// Requests every class was served before the load's end.
    pub(crate) fn served_in_time(&self) -> f64 {
        let tallies = [&self.ordinary, &self.noisy, &self.crowd];
        tallies
            .iter()
            .map(|tally| tally.served_in_time as f64)
            .sum()
    }

    fn of(&mut self, class: Class) -> &mut Tally {
        match class {
            Class::Ordinary => &mut self.ordinary,
            Class::Crowd => &mut self.crowd,
        }
    }
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
    let ordinary =
        (1..=load.ordinary_users).map(|user| (user, Class::Ordinary, load.per_user_rate));
    let crowd = (CROWD_FROM..CROWD_FROM + load.crowd_users)
        .map(|user| (user, Class::Crowd, load.crowd_rate));
    for (user, class, rate) in ordinary.chain(crowd) {
        let (client, base, report) = (client.clone(), base.to_owned(), Arc::clone(&report));
        let period = Duration::from_secs_f64(1.0 / rate);
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
                    report.lock().unwrap().of(class).count(
                        status,
                        after.is_some(),
                        took,
                        Instant::now() < deadline,
                    );
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
                report.lock().unwrap().noisy.count(
                    status,
                    after.is_some(),
                    took,
                    Instant::now() < deadline,
                );
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
    let crowd = format!(
        "{} in a crowd, {}/s each",
        load.crowd_users, load.crowd_rate
    );
    let rows = [
        (ordinary, &report.ordinary),
        (noisy, &report.noisy),
        (crowd, &report.crowd),
    ];
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

/// Each user's max-min fair share of `capacity` requests a second, when
/// `demands` lists each user's requests a second: users who ask less than
/// an equal share get what they ask, and the rest share what is left.
pub(crate) fn fair_shares(demands: &[f64], capacity: f64) -> Vec<f64> {
    let mut order: Vec<usize> = (0..demands.len()).collect();
    order.sort_by(|a, b| demands[*a].total_cmp(&demands[*b]));
    let mut shares = vec![0.0; demands.len()];
    let mut left = capacity;
    for (served, &user) in order.iter().enumerate() {
        let equal = left / (demands.len() - served) as f64;
        shares[user] = demands[user].min(equal);
        left -= shares[user];
    }
    shares
}

/// Prints what the ordinary users and the crowd were served, beside
/// their max-min fair shares of what the database served `unguarded`
/// (requests a second).
pub(crate) fn print_shares(report: &Report, load: &Load, unguarded: f64) {
    let seconds = load.length.as_secs_f64();
    let served = report.served_in_time() / seconds;
    let demands: Vec<f64> = std::iter::repeat_n(load.per_user_rate, load.ordinary_users as usize)
        .chain(std::iter::repeat_n(
            load.crowd_rate,
            load.crowd_users as usize,
        ))
        .collect();
    let shares = fair_shares(&demands, served);
    let ordinary_fair: f64 = shares[..load.ordinary_users as usize].iter().sum();
    let ordinary = report.ordinary.served_in_time as f64 / seconds;
    println!(
        "  served {served:.0} requests/s ({:.0} % of the {unguarded:.0}/s served without the manager)",
        served / unguarded * 100.0
    );
    println!(
        "  the ordinary users: {ordinary:.1}/s, {:.0} % of their max-min fair share ({ordinary_fair:.1}/s); the crowd: {:.1}/s",
        ordinary / ordinary_fair * 100.0,
        report.crowd.served_in_time as f64 / seconds,
    );
    println!();
}
