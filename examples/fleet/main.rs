//! A fleet of crawler processes sharing one host's rate through Redis.
//!
//! ```text
//! cargo run --release --features redis --example fleet
//! ```
//!
//! Starts a rate-limited HTTP server on loopback (50 requests/s, burst 5,
//! 429 beyond, as nginx's `limit_req` answers), a `redis-server` on a free
//! port (it must be installed: `apt-get install redis-server`), and N
//! crawler processes of this same program, for N = 2, 4 and 8. Each crawler
//! runs two request loops through its own manager, for two kinds of limit:
//!
//! - a **fixed quota** of 40 requests/s (burst 5) per manager: alone, N
//!   processes send N times the quota; sharing it, they send the quota,
//!   and no more (the last column: what they sent of the limit);
//! - the crate's **adaptive** rate (from 10/s): alone, each process probes
//!   on its own and refusals grow with the fleet; sharing it, the fleet
//!   learns one rate (the last column: what they sent of the rate it
//!   learned).
//!
//! For each, the table gives what the server saw once the rates settled
//! (the last 3 s of a fixed run, the last 6 s of an adaptive one), and the
//! fewest and most requests one process sent.
//!
//! Then the learning curve of a bigger fleet, 8 processes of 8 loops each
//! on one shared adaptive rate: second by second, the rate Redis holds,
//! how far ahead its bucket is booked (the calls already scheduled, in
//! seconds), and what the server served and refused.

#[path = "../../tests/support/limited_server.rs"]
mod limited_server;
#[allow(dead_code)] // shared with tests/rate/store/fleet.rs, which reads more
mod parts;
#[path = "../../tests/support/redis.rs"]
mod redis_server;

use std::time::{Duration, Instant};

use parts::{Job, Mode};
use portcullis::store::RedisStore;
use redis_server::RedisServer;

fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    if let Some(job) = Job::from_env() {
        // A crawler, started by the fleet below.
        let tally = runtime.block_on(parts::crawl(&job))?;
        parts::report(tally);
        return Ok(());
    }
    let Some(redis) = RedisServer::start("the fleet example") else {
        return Err("the fleet example needs redis-server on the PATH".into());
    };
    runtime.block_on(fleets(&redis))
}

async fn fleets(redis: &RedisServer) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let program = vec![std::env::current_exe()?.to_string_lossy().into_owned()];
    println!(
        "a server taking {}/s; each process runs 2 request loops\n",
        limited_server::CAPACITY
    );
    println!(
        "{:<9} {:>9} {:<7} {:>11} {:>9} {:>9} {:>18} {:>16}",
        "limit", "processes", "rate", "sent/s", "refused", "goodput", "per process", "of the limit"
    );
    for mode in [Mode::Fixed, Mode::Adaptive] {
        let (length, settle) = match mode {
            Mode::Fixed => (Duration::from_secs(4), Duration::from_secs(1)),
            Mode::Adaptive => (Duration::from_secs(12), Duration::from_secs(6)),
        };
        for processes in [2, 4, 8] {
            for shared in [false, true] {
                let (server, seen) = limited_server::start_server().await?;
                let job = Job {
                    server,
                    redis: shared.then(|| redis.url()),
                    prefix: format!("fleet-{mode:?}-{processes}"),
                    mode,
                    length,
                    callers: 2,
                };
                let crawlers = parts::start_fleet(&program, &job, processes);
                let start = Instant::now();
                let tallies = tokio::task::spawn_blocking(move || parts::collect(crawlers)).await?;
                let figures = seen.between(start + settle, (length - settle).as_secs_f64());
                let sent = tallies.iter().map(|t| t.requests);
                let (fewest, most) = (sent.clone().min().unwrap_or(0), sent.max().unwrap_or(0));
                let limit = limit_of(redis, &job, processes).await?;
                let of_limit = match limit {
                    Some(limit) => format!(
                        "{:.1}% of {limit:.1}/s",
                        100.0 * figures.sent_per_second() / limit
                    ),
                    None => "-".to_owned(),
                };
                println!(
                    "{:<9} {:>9} {:<7} {:>11.1} {:>8.1}% {:>8.0}% {:>18} {of_limit:>16}",
                    format!("{mode:?}").to_lowercase(),
                    processes,
                    if shared { "shared" } else { "alone" },
                    figures.sent_per_second(),
                    100.0 * figures.refused(),
                    100.0 * figures.goodput(),
                    format!("{fewest} to {most}"),
                );
            }
        }
    }
    learning_curve(redis).await
}

/// What limited the fleet of `job` in all: a fixed quota's (`processes`
/// times it alone, once shared), or the shared adaptive rate the store
/// holds at the end; none for adaptive rates learned alone.
async fn limit_of(
    redis: &RedisServer,
    job: &Job,
    processes: usize,
) -> Result<Option<f64>, Box<dyn std::error::Error + Send + Sync>> {
    let quota = f64::from(parts::QUOTA);
    Ok(match (job.mode, job.redis.is_some()) {
        (Mode::Fixed, true) => Some(quota),
        (Mode::Fixed, false) => Some(quota * processes as f64),
        (Mode::Adaptive, true) => {
            let store = RedisStore::connect(&redis.url(), &job.prefix).await?;
            store.peek("host").await?.map(|shared| shared.rate)
        }
        (Mode::Adaptive, false) => None,
    })
}

/// 8 processes of 8 loops each sharing one adaptive rate for 12 s, second
/// by second.
async fn learning_curve(
    redis: &RedisServer,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let program = vec![std::env::current_exe()?.to_string_lossy().into_owned()];
    let (server, seen) = limited_server::start_server().await?;
    let job = Job {
        server,
        redis: Some(redis.url()),
        prefix: "fleet-curve".to_string(),
        mode: Mode::Adaptive,
        length: Duration::from_secs(12),
        callers: 8,
    };
    let store = RedisStore::connect(&redis.url(), &job.prefix).await?;
    let crawlers = parts::start_fleet(&program, &job, 8);
    let start = Instant::now();
    let fleet = tokio::task::spawn_blocking(move || parts::collect(crawlers));
    // What Redis holds for the key, sampled at the end of each second.
    let mut shared = Vec::new();
    for second in 1..=12 {
        tokio::time::sleep_until((start + Duration::from_secs(second)).into()).await;
        shared.push(store.peek("host").await?);
    }
    fleet.await?;
    println!(
        "\n8 processes x 8 loops, one shared adaptive rate, against {}/s:",
        limited_server::CAPACITY
    );
    println!(
        "{:>6} {:>12} {:>10} {:>8} {:>8}",
        "second", "shared rate", "booked", "served", "refused"
    );
    for (second, rate) in shared.iter().enumerate() {
        let figures = seen.between(start + Duration::from_secs(second as u64), 1.0);
        let (rate, booked) = match rate {
            Some(rate) => (
                format!("{:.1}/s", rate.rate),
                format!("{:.1} s", rate.full_in.as_secs_f64()),
            ),
            None => ("-".to_string(), "-".to_string()),
        };
        println!(
            "{:>6} {rate:>12} {booked:>10} {:>8} {:>8}",
            format!("{}-{}", second, second + 1),
            figures.served,
            figures.requests - figures.served,
        );
    }
    let late = seen.between(start + Duration::from_secs(4), 8.0);
    println!(
        "from 4 s to 12 s: {:.0} % of the capacity served, {:.1} % refused",
        100.0 * late.goodput(),
        100.0 * late.refused()
    );
    Ok(())
}
