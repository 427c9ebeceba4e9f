//! The pieces of a fleet: a crawler process's work, and how a parent
//! starts crawler processes and reads what they did. The rate-limited
//! server they call is `tests/support/limited_server.rs`.
//!
//! (Also compiled into `tests/rate/store/fleet.rs`.)

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use portcullis::store::RedisStore;
use portcullis::{Priority, RateConfig, ThrottleManager, overloaded};

/// The fixed quota, in requests a second.
pub(crate) const QUOTA: u32 = 40;

/// How each crawler limits itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// A fixed quota of 40 requests a second, burst 5.
    Fixed,
    /// The crate's default adaptive rate, from 10/s.
    Adaptive,
}

impl Mode {
    pub(crate) fn config(self) -> RateConfig {
        match self {
            Mode::Fixed => RateConfig::per_second(QUOTA).burst(5),
            Mode::Adaptive => RateConfig::adaptive(10.0),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Mode::Fixed => "fixed",
            Mode::Adaptive => "adaptive",
        }
    }
}

/// One crawler process's job, passed to it in its environment.
#[derive(Debug, Clone)]
pub(crate) struct Job {
    pub(crate) server: SocketAddr,
    /// The shared store's URL, or a cluster's node URLs joined by commas;
    /// `None`: each process on its own.
    pub(crate) redis: Option<String>,
    /// The store's prefix: one per run, so runs share nothing.
    pub(crate) prefix: String,
    pub(crate) mode: Mode,
    pub(crate) length: Duration,
    /// Concurrent request loops in the process.
    pub(crate) callers: usize,
}

impl Job {
    fn to_env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("FLEET_SERVER", self.server.to_string()),
            ("FLEET_REDIS", self.redis.clone().unwrap_or_default()),
            ("FLEET_PREFIX", self.prefix.clone()),
            ("FLEET_MODE", self.mode.name().to_owned()),
            ("FLEET_MILLIS", self.length.as_millis().to_string()),
            ("FLEET_CALLERS", self.callers.to_string()),
        ]
    }

    /// The job this process was started for, if it was started as a
    /// crawler.
    pub(crate) fn from_env() -> Option<Self> {
        let var = |name| std::env::var(name).ok();
        Some(Self {
            server: var("FLEET_SERVER")?.parse().ok()?,
            redis: var("FLEET_REDIS").filter(|url| !url.is_empty()),
            prefix: var("FLEET_PREFIX")?,
            mode: match var("FLEET_MODE")?.as_str() {
                "fixed" => Mode::Fixed,
                _ => Mode::Adaptive,
            },
            length: Duration::from_millis(var("FLEET_MILLIS")?.parse().ok()?),
            callers: var("FLEET_CALLERS")?.parse().ok()?,
        })
    }
}

/// What one crawler did.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Tally {
    pub(crate) requests: u64,
    pub(crate) refused: u64,
}

/// A crawler's work: `callers` loops calling the server through one
/// manager (sharing its rate through Redis if the job says so) until the
/// job's length has passed. A 429 is overload.
pub(crate) async fn crawl(job: &Job) -> Result<Tally, Box<dyn std::error::Error + Send + Sync>> {
    let mut builder = ThrottleManager::<String>::builder().rate(job.mode.config());
    if let Some(url) = &job.redis {
        // Eight processes and Redis on two cores: a round trip can take
        // longer than the default deadline of 50 ms, and each miss would
        // put the process on its local rate for a second.
        let store = if url.contains(',') {
            let nodes: Vec<&str> = url.split(',').collect();
            RedisStore::connect_cluster(&nodes, &job.prefix).await?
        } else {
            RedisStore::connect(url, &job.prefix).await?
        };
        builder = builder.rate_store(store.deadline(Duration::from_millis(200)));
    }
    let manager = builder.build()?;
    let client = reqwest::Client::new();
    let url = format!("http://{}/", job.server);
    let until = Instant::now() + job.length;
    let tally = Arc::new(Mutex::new(Tally::default()));
    let mut loops = Vec::new();
    for _ in 0..job.callers {
        let (manager, client, url, tally) = (
            manager.clone(),
            client.clone(),
            url.clone(),
            Arc::clone(&tally),
        );
        loops.push(tokio::spawn(async move {
            while Instant::now() < until {
                let answer = manager
                    .call("host", Priority::MEDIUM, || async {
                        let response = client.get(&url).send().await.map_err(overloaded)?;
                        if response.status() == StatusCode::TOO_MANY_REQUESTS {
                            return Err(overloaded(std::io::Error::other("429")));
                        }
                        Ok(())
                    })
                    .await;
                let mut tally = tally.lock().unwrap();
                tally.requests += 1;
                tally.refused += u64::from(answer.is_err());
            }
        }));
    }
    for task in loops {
        task.await?;
    }
    let tally = *tally.lock().unwrap();
    Ok(tally)
}

/// The line a crawler prints for its parent.
pub(crate) fn report(tally: Tally) {
    println!("portcullis-fleet {} {}", tally.requests, tally.refused);
}

/// Starts `processes` crawlers: this program again (`program` with
/// `args`), each with `job` in its environment.
pub(crate) fn start_fleet(program: &[String], job: &Job, processes: usize) -> Vec<Child> {
    (0..processes)
        .map(|_| {
            Command::new(&program[0])
                .args(&program[1..])
                .envs(job.to_env())
                .stdout(Stdio::piped())
                .spawn()
                .expect("a crawler process starts")
        })
        .collect()
}

/// Waits for every crawler and reads what each did.
pub(crate) fn collect(fleet: Vec<Child>) -> Vec<Tally> {
    fleet
        .into_iter()
        .map(|child| {
            let output = child.wait_with_output().expect("a crawler ends");
            let text = String::from_utf8_lossy(&output.stdout);
            let line = text
                .lines()
                .find_map(|line| line.split("portcullis-fleet ").nth(1))
                .unwrap_or_else(|| panic!("a crawler failed ({}): {text}", output.status));
            let mut numbers = line.split(' ').map(|n| n.parse().unwrap_or(0));
            Tally {
                requests: numbers.next().unwrap_or(0),
                refused: numbers.next().unwrap_or(0),
            }
        })
        .collect()
}
