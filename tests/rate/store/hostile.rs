//! What another client writes into the store's keys (feature `redis`): a
//! shared instance, a bug in another service or a restore from an old
//! dump can put anything there, and none of it may open a key's limit.
//!
//! Each case writes one bad value into a live key of a real `redis-server`
//! (and of a real cluster), then calls the key for a second, reporting
//! each call a success: the key admits no more than its upper bound
//! allows, a refusal's hint is no longer than the longest a bucket can
//! owe, [`peek`](RedisStore::peek) then shows a finite rate within the
//! bounds, the repaired key is named in one `warn` event, and a key beside
//! it is untouched. Redis keeps real time, so the test does; it asserts
//! ceilings, which a slow machine cannot break.

use std::time::Duration;

use portcullis::deadline::TimeLimits;
use portcullis::store::RedisStore;
use portcullis::{Priority, RateConfig, ThrottleManager};
use tokio::time::Instant;

use crate::redis_server::{RedisCluster, RedisServer};
use crate::support;

const LOWER: f64 = 1.0;
const UPPER: f64 = 20.0;
const BURST: u32 = 2;
/// The manager's `max_defer`: the longest pause a server can ask for.
const MAX_DEFER: Duration = Duration::from_secs(1);
/// The longest a bucket can owe: a burst's worth of intervals at the
/// lowest rate, and the longest pause.
const LONGEST_DEBT: Duration = Duration::from_secs(BURST as u64 + 1);

/// One bad state: the commands that write it (`KEY` stands for the Redis
/// key), and whether the store must say it repaired the key (a rate out
/// of the bounds is only clamped, as a process with other bounds would).
struct Garbage {
    writes: Vec<Vec<&'static str>>,
    warns: bool,
}

fn hset(field: &'static str, value: &'static str) -> Garbage {
    Garbage {
        writes: vec![vec!["HSET", "KEY", field, value]],
        warns: true,
    }
}

fn cases() -> Vec<Garbage> {
    let mut cases: Vec<Garbage> = [
        "-5", "0", "inf", "-inf", "nan", "ten", "", "-1e308", "0x10p", " ",
    ]
    .into_iter()
    .map(|rate| hset("r", rate))
    .collect();
    cases.push(Garbage {
        writes: vec![vec!["HSET", "KEY", "r", "1e308"]],
        warns: false,
    });
    for time in ["nan", "1e308", "inf", "-1e308", "-5", "0", "soon", ""] {
        cases.push(hset("t", time));
    }
    // What the outcome script reads: when the rate last fell, and its use.
    for (field, value) in [
        ("x", "nan"),
        ("d", "1e308"),
        ("us", "inf"),
        ("uc", "-1e308"),
    ] {
        cases.push(hset(field, value));
    }
    for other_type in [
        vec!["SET", "KEY", "a string"],
        vec!["RPUSH", "KEY", "a", "list"],
    ] {
        cases.push(Garbage {
            writes: vec![vec!["DEL", "KEY"], other_type],
            warns: true,
        });
    }
    cases
}

fn manager(store: RedisStore) -> ThrottleManager<String> {
    ThrottleManager::<String>::builder()
        .rate(
            RateConfig::adaptive(5.0)
                .burst(BURST)
                .bounds(LOWER, UPPER)
                .increase_by(1.0),
        )
        .time_limits(
            TimeLimits::new()
                .max_wait(Duration::from_millis(100))
                .max_defer(MAX_DEFER),
        )
        .rate_store(store)
        .build()
        .unwrap()
}

/// Calls `key` for a second, each admitted call a success; the calls
/// admitted and the seconds it took. Every refusal's hint is at most the
/// longest debt.
async fn hammer(manager: &ThrottleManager<String>, key: &str) -> (u32, f64) {
    let start = Instant::now();
    let mut admitted = 0;
    while start.elapsed() < Duration::from_secs(1) {
        match manager.acquire(key, Priority::HIGH).await {
            Ok(permit) => {
                admitted += 1;
                permit.success();
            }
            Err(refused) => {
                let hint = refused.retry_after().unwrap_or_default();
                assert!(hint <= LONGEST_DEBT, "{key}: refused for {hint:?}");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
    (admitted, start.elapsed().as_secs_f64())
}

/// Runs every case on its own key of `store`'s manager at once, with a
/// key beside them left alone; `command` runs a command where the key
/// lives.
async fn garbage_cannot_open_a_key(
    connect: impl AsyncFn() -> RedisStore,
    command: impl Fn(&[&str]) -> String,
) {
    let (events, _guard) = support::Captured::on_this_thread();
    let manager = manager(connect().await);
    let cases = cases();
    let key = |i: usize| format!("garbage-{i}");
    for i in 0..cases.len() {
        // Live keys, in debt, whose rate has moved once.
        manager
            .acquire(&key(i), Priority::HIGH)
            .await
            .unwrap()
            .success();
    }
    drop(manager.acquire("beside", Priority::HIGH).await.unwrap()); // neutral: its rate stays
    tokio::time::sleep(Duration::from_millis(100)).await; // the reports land
    let beside_before = command(&["HGETALL", "hostile:beside"]);

    for (i, case) in cases.iter().enumerate() {
        let redis_key = format!("hostile:{}", key(i));
        for write in &case.writes {
            let write: Vec<&str> = write
                .iter()
                .map(|arg| {
                    if *arg == "KEY" {
                        redis_key.as_str()
                    } else {
                        arg
                    }
                })
                .collect();
            let reply = command(&write);
            assert!(!reply.starts_with('-'), "{write:?}: {reply}");
        }
    }
    // At once, each on its own task (of this thread, which the events
    // are captured on).
    let tasks: Vec<_> = (0..cases.len())
        .map(|i| {
            let manager = manager.clone();
            tokio::spawn(async move { hammer(&manager, &key(i)).await })
        })
        .collect();
    let mut runs = Vec::new();
    for task in tasks {
        runs.push(task.await.unwrap());
    }

    let store = connect().await;
    let lines = events.lines();
    for (i, ((admitted, seconds), case)) in runs.into_iter().zip(&cases).enumerate() {
        let what = format!("{:?}", case.writes.last().unwrap());
        let most = UPPER * seconds + f64::from(BURST) + 1.0;
        assert!(
            f64::from(admitted) <= most,
            "{what}: {admitted} calls admitted in {seconds:.2} s, at most {most:.0} allowed"
        );
        let shared = store.peek(&key(i)).await.unwrap().expect("the key's state");
        assert!(
            shared.rate.is_finite() && (LOWER..=UPPER).contains(&shared.rate),
            "{what}: peek shows a rate of {}",
            shared.rate
        );
        assert!(shared.full_in <= LONGEST_DEBT, "{what}: {shared:?}");
        let named = format!("store_key=hostile:{}", key(i));
        let warned = lines
            .iter()
            .filter(|line| line.contains("WARN") && line.split(' ').any(|word| word == named))
            .count();
        let expected = usize::from(case.warns);
        assert_eq!(warned, expected, "{what}: {warned} warnings\n{lines:#?}");
    }
    assert_eq!(
        command(&["HGETALL", "hostile:beside"]),
        beside_before,
        "the key beside them changed"
    );
}

#[tokio::test]
async fn garbage_in_a_key_cannot_open_its_limit() {
    let _alone = crate::support::alone();
    let Some(server) = RedisServer::start("garbage_in_a_key_cannot_open_its_limit") else {
        return;
    };
    let url = server.url();
    garbage_cannot_open_a_key(
        async || RedisStore::connect(&url, "hostile").await.unwrap(),
        |args| server.command(args),
    )
    .await;
}

#[tokio::test]
async fn garbage_in_a_key_cannot_open_its_limit_on_a_cluster() {
    let _alone = crate::support::alone();
    let Some(cluster) = RedisCluster::start("garbage_in_a_key_cannot_open_its_limit_on_a_cluster")
    else {
        return;
    };
    let urls = cluster.urls();
    let nodes: Vec<&str> = urls.iter().map(String::as_str).collect();
    garbage_cannot_open_a_key(
        async || {
            RedisStore::connect_cluster(&nodes, "hostile")
                .await
                .unwrap()
        },
        |args| cluster.command(args),
    )
    .await;
}
