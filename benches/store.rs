//! Decisions through Redis on loopback: `acquire` on a manager whose rate
//! is shared (the decision script), next to a plain GCRA script of the kind
//! go-redis's `redis_rate` runs (one string key, `GET` and `SET`, Redis's
//! `TIME`), sent the same way (the redis crate's connection manager, by
//! hash) in the same run; one caller at a time, and 32 at once; on one
//! server and on a three-node Redis Cluster; then the same ratio in 15
//! rounds that alternate the two, whose median the machine's drift moves
//! least, and the same split into the store's script over the plain one and
//! the manager over its script alone. Then the round trips a decision costs, counted by Redis itself
//! (`INFO commandstats`).
//!
//! Run: `cargo bench --features redis --bench store` (starts its own
//! `redis-server` and cluster, which need redis-server and redis-cli). Compare ratios, not times:
//! these machines are shared and noisy.

#[path = "support/rounds.rs"]
mod rounds;

#[path = "../tests/support/redis.rs"]
mod redis_server;

use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use portcullis::store::RedisStore;
use portcullis::{Priority, RateConfig, ThrottleManager};
use redis::aio::ConnectionLike;
use redis::aio::ConnectionManager;
use redis_server::{RedisCluster, RedisServer};
use tokio::runtime::Runtime;

/// GCRA in the style of `redis_rate`: the bucket's `tat` in one string key.
const PLAIN_GCRA: &str = r"
local time = redis.call('TIME')
local now = (tonumber(time[1]) - 1700000000) + tonumber(time[2]) / 1000000
local interval = 1 / tonumber(ARGV[1])
local tolerance = interval * tonumber(ARGV[2])
local tat = math.max(tonumber(redis.call('GET', KEYS[1])) or now, now)
local new_tat = tat + interval
local wait = new_tat - tolerance - now
if wait > 0 then
  return {0, tostring(wait)}
end
redis.call('SET', KEYS[1], string.format('%.17g', new_tat), 'PX', math.ceil((new_tat - now) * 1000) + 1)
return {1, '0'}
";

/// The keys the two scripts decide on: hash-tagged to the slot of the
/// manager's key (`bench:host`), so that on the cluster all three sides
/// ask the same node.
const PLAIN_KEY: &str = "{bench:host}:plain";
const SCRIPT_KEY: &str = "{bench:host}:script";

/// Fast enough that no decision waits.
const RATE: f64 = 1e6;

/// How long `calls` decisions take with `concurrency` callers at once.
async fn timed<F, Fut>(calls: u64, concurrency: u64, decide: F) -> Duration
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let start = Instant::now();
    let per_caller = calls.div_ceil(concurrency);
    let callers: Vec<_> = (0..concurrency)
        .map(|_| {
            let decide = decide.clone();
            tokio::spawn(async move {
                for _ in 0..per_caller {
                    decide().await;
                }
            })
        })
        .collect();
    for caller in callers {
        caller.await.unwrap();
    }
    start.elapsed()
}

fn decisions(c: &mut Criterion) {
    let Some(server) = RedisServer::start("the store bench") else {
        return;
    };
    let runtime = Runtime::new().unwrap();
    let (manager, plain) = runtime.block_on(async {
        let store = RedisStore::connect(&server.url(), "bench").await.unwrap();
        let manager = ThrottleManager::<String>::builder()
            .rate(RateConfig::adaptive(RATE).burst(1_000).bounds(RATE, RATE))
            .rate_store(store)
            .build()
            .unwrap();
        let client = redis::Client::open(server.url()).unwrap();
        let plain = ConnectionManager::new(client).await.unwrap();
        (manager, plain)
    });
    compare(c, "shared_decision", &runtime, &manager, &plain);

    // Round trips: scripts Redis ran for 1,000 decisions, and for 1,000
    // decisions each with its outcome reported.
    let scripts_run = || {
        let stats = server.command(&["INFO", "commandstats"]);
        ["cmdstat_evalsha:calls=", "cmdstat_eval:calls="]
            .iter()
            .filter_map(|name| {
                let at = stats.find(name)? + name.len();
                stats[at..].split(',').next()?.parse::<u64>().ok()
            })
            .sum::<u64>()
    };
    let before = scripts_run();
    runtime.block_on(async {
        for _ in 0..1_000 {
            drop(manager.acquire("host", Priority::HIGH).await.unwrap());
        }
    });
    let decisions_only = scripts_run() - before;
    let before = scripts_run();
    runtime.block_on(async {
        for _ in 0..1_000 {
            manager
                .acquire("host", Priority::HIGH)
                .await
                .unwrap()
                .success();
        }
        tokio::time::sleep(Duration::from_millis(200)).await; // outcomes land
    });
    let with_outcomes = scripts_run() - before;
    println!(
        "round trips: {:.2} per decision; {:.2} per decision with its outcome",
        decisions_only as f64 / 1_000.0,
        with_outcomes as f64 / 1_000.0
    );
}

/// How long `calls` of the manager's decisions take, `concurrency` at once
/// (each permit dropped: no outcome, the decision alone).
fn time_manager(
    runtime: &Runtime,
    manager: &ThrottleManager<String>,
    calls: u64,
    concurrency: u64,
) -> Duration {
    let manager = manager.clone();
    runtime.block_on(timed(calls, concurrency, move || {
        let manager = manager.clone();
        async move {
            drop(manager.acquire("host", Priority::HIGH).await.unwrap());
        }
    }))
}

/// How long `calls` of the plain script's decisions take over `plain`,
/// `concurrency` at once.
fn time_plain<C>(runtime: &Runtime, plain: &C, calls: u64, concurrency: u64) -> Duration
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    let (plain, script) = (plain.clone(), redis::Script::new(PLAIN_GCRA));
    runtime.block_on(timed(calls, concurrency, move || {
        let (mut plain, script) = (plain.clone(), script.clone());
        async move {
            let answer: (i64, String) = script
                .key(PLAIN_KEY)
                .arg(RATE)
                .arg(1_000)
                .invoke_async(&mut plain)
                .await
                .unwrap();
            assert_eq!(answer.0, 1);
        }
    }))
}

/// How long `calls` of the store's own decision script take when sent
/// directly over `plain`, `concurrency` at once: the manager's decision
/// without the manager.
fn time_store_script<C>(runtime: &Runtime, plain: &C, calls: u64, concurrency: u64) -> Duration
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    let script = redis::Script::new(concat!(
        include_str!("../src/store/redis/now.lua"),
        include_str!("../src/store/redis/decide.lua")
    ));
    let plain = plain.clone();
    runtime.block_on(timed(calls, concurrency, move || {
        let (mut plain, script) = (plain.clone(), script.clone());
        async move {
            // The arguments the store sends: no pinned time, the rate (a
            // whole number, sent as an integer), the burst, no wait limit,
            // a minute's idle time, one token, the bounds, the longest
            // pause (the default five minutes, in microseconds).
            let answer: String = script
                .key(SCRIPT_KEY)
                .arg("")
                .arg(RATE as u64)
                .arg(1_000)
                .arg(-1)
                .arg(60_000)
                .arg(1)
                .arg(RATE as u64)
                .arg(RATE as u64)
                .arg(300_000_000)
                .invoke_async(&mut plain)
                .await
                .unwrap();
            assert!(answer.starts_with("1 "), "{answer}");
        }
    }))
}

/// Where the manager's time over the plain script goes, 32 callers at
/// once, in interleaved rounds: the store's script over the plain one
/// (Redis's side and the reply), and the manager over its script sent
/// alone (the pipeline and the client's side); the medians.
fn split<C>(runtime: &Runtime, manager: &ThrottleManager<String>, plain: &C) -> (f64, f64)
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    const ROUNDS: usize = 15;
    let (mut script_ratios, mut pipeline_ratios) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let script = time_store_script(runtime, plain, 3_000, 32);
        let theirs = time_plain(runtime, plain, 3_000, 32);
        let ours = time_manager(runtime, manager, 3_000, 32);
        script_ratios.push(script.as_secs_f64() / theirs.as_secs_f64());
        pipeline_ratios.push(ours.as_secs_f64() / script.as_secs_f64());
    }
    script_ratios.sort_by(f64::total_cmp);
    pipeline_ratios.sort_by(f64::total_cmp);
    (script_ratios[ROUNDS / 2], pipeline_ratios[ROUNDS / 2])
}

/// The ratio of the manager's decision to the plain script, in rounds that
/// alternate the two (and which goes first), so that the machine's drift
/// falls on both alike: the median of the rounds' ratios, and the lowest
/// and highest.
fn interleaved<C>(
    runtime: &Runtime,
    manager: &ThrottleManager<String>,
    plain: &C,
    concurrency: u64,
) -> (f64, f64, f64)
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    const ROUNDS: usize = 15;
    let calls = if concurrency == 1 { 300 } else { 3_000 };
    let ours = || time_manager(runtime, manager, calls, concurrency);
    let theirs = || time_plain(runtime, plain, calls, concurrency);
    let mut ratios: Vec<f64> = (0..ROUNDS)
        .map(|round| {
            let (a, b) = rounds::alternate(round, ours, theirs);
            a.as_secs_f64() / b.as_secs_f64()
        })
        .collect();
    ratios.sort_by(f64::total_cmp);
    (ratios[ROUNDS / 2], ratios[0], ratios[ROUNDS - 1])
}

/// The manager's decision next to the plain script over `plain`, one
/// caller at a time and 32 at once, as the group `name`; then the same
/// in interleaved rounds, printed.
fn compare<C>(
    c: &mut Criterion,
    name: &str,
    runtime: &Runtime,
    manager: &ThrottleManager<String>,
    plain: &C,
) where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    let mut group = c.benchmark_group(name);
    group.measurement_time(Duration::from_secs(5));
    for concurrency in [1, 32] {
        group.bench_function(format!("portcullis_acquire/{concurrency}"), |b| {
            b.iter_custom(|calls| time_manager(runtime, manager, calls, concurrency));
        });
        group.bench_function(format!("plain_gcra_script/{concurrency}"), |b| {
            b.iter_custom(|calls| time_plain(runtime, plain, calls, concurrency));
        });
    }
    group.finish();
    let (script, pipeline) = split(runtime, manager, plain);
    println!(
        "{name}, 32 at once, where the time goes: the store's script {script:.2}x the plain \
         one; the manager around it {pipeline:.2}x the script alone"
    );
    for concurrency in [1, 32] {
        let (median, low, high) = interleaved(runtime, manager, plain, concurrency);
        println!(
            "{name}, {concurrency} at once, interleaved rounds: {median:.2}x median \
             ({low:.2}x to {high:.2}x)"
        );
    }
}

/// The same comparison on a three-node Redis Cluster.
fn cluster_decisions(c: &mut Criterion) {
    let Some(cluster) = RedisCluster::start("the store bench on a cluster") else {
        return;
    };
    let urls = cluster.urls();
    let nodes: Vec<&str> = urls.iter().map(String::as_str).collect();
    let runtime = Runtime::new().unwrap();
    let (manager, plain) = runtime.block_on(async {
        let store = RedisStore::connect_cluster(&nodes, "bench").await.unwrap();
        let manager = ThrottleManager::<String>::builder()
            .rate(RateConfig::adaptive(RATE).burst(1_000).bounds(RATE, RATE))
            .rate_store(store)
            .build()
            .unwrap();
        let client = redis::cluster::ClusterClient::new(nodes.clone()).unwrap();
        let plain = client.get_async_connection().await.unwrap();
        (manager, plain)
    });
    compare(c, "shared_decision_cluster", &runtime, &manager, &plain);
}

criterion_group!(benches, decisions, cluster_decisions);
criterion_main!(benches);
