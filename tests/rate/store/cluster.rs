//! Rates shared through a real three-node Redis Cluster (feature `redis`):
//! every key's decision runs on the node that holds its slot; a node that
//! dies sends the store to its local fallback, and once the node is back
//! the keys are shared again. Also a store over a connection the
//! application already has, and `reset`.

use std::time::Duration;

use portcullis::deadline::TimeLimits;
use portcullis::store::RedisStore;
use portcullis::{Priority, RateConfig, ThrottleManager};
use tokio::time::Instant;

use crate::redis_server::{RedisCluster, RedisServer};

/// A manager whose rate (one call an hour per key) lives in `store`; a
/// call that cannot go at once is refused.
fn hourly(store: RedisStore) -> ThrottleManager<String> {
    ThrottleManager::<String>::builder()
        .rate(RateConfig::per_hour(1))
        .time_limits(TimeLimits::new().max_wait(Duration::ZERO))
        .rate_store(store.recheck_every(Duration::from_millis(100)))
        .build()
        .unwrap()
}

/// Whether a call of `key` was admitted.
async fn admitted(manager: &ThrottleManager<String>, key: &str) -> bool {
    manager.acquire(key, Priority::HIGH).await.is_ok()
}

/// Keys enough to land on every node's slots.
fn keys(round: &str) -> Vec<String> {
    (0..24).map(|i| format!("{round}-{i}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_managers_share_each_keys_quota_on_a_cluster_and_survive_a_node() {
    let _alone = crate::support::alone();
    let Some(mut cluster) = RedisCluster::start("two_managers_share_each_keys_quota_on_a_cluster")
    else {
        return;
    };
    let urls = cluster.urls();
    let nodes: Vec<&str> = urls.iter().map(String::as_str).collect();
    let one = hourly(RedisStore::connect_cluster(&nodes, "fleet").await.unwrap());
    let other = hourly(RedisStore::connect_cluster(&nodes, "fleet").await.unwrap());

    // Each key's one call an hour is shared: whoever goes first takes it.
    for key in keys("before") {
        assert!(admitted(&one, &key).await, "{key}");
        assert!(!admitted(&other, &key).await, "{key} went twice");
    }

    // A node dies: the store falls back to each manager's local rate, so
    // calls still go (each manager's own hourly call per key), and none
    // hangs past the store's deadline.
    cluster.kill(0);
    let mut went_locally = 0;
    for key in keys("during") {
        let started = Instant::now();
        if admitted(&other, &key).await {
            went_locally += 1;
        }
        assert!(started.elapsed() < Duration::from_secs(3), "{key} hung");
    }
    assert!(went_locally > 0, "no call fell back to the local rate");

    // The node comes back (empty, with its slots): the keys are shared
    // again, on every node.
    cluster.restart(0);
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut round = 0;
    loop {
        round += 1;
        let fresh = keys(&format!("after-{round}"));
        let mut shared = 0;
        for key in &fresh {
            if admitted(&one, key).await && !admitted(&other, key).await {
                shared += 1;
            }
        }
        if shared == fresh.len() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{shared} of {} keys shared again",
            fresh.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn a_store_over_the_applications_connection_shares_and_resets_a_key() {
    let _alone = crate::support::alone();
    let Some(server) = RedisServer::start("a_store_over_the_applications_connection") else {
        return;
    };
    let client = redis::Client::open(server.url()).unwrap();
    let connection = redis::aio::ConnectionManager::new(client).await.unwrap();
    let own = hourly(
        RedisStore::with_connection(connection, "app")
            .await
            .unwrap(),
    );
    let other = hourly(RedisStore::connect(&server.url(), "app").await.unwrap());
    assert!(admitted(&own, "tenant").await);
    assert!(
        !admitted(&other, "tenant").await,
        "shared through the same key"
    );

    let store = RedisStore::connect(&server.url(), "app").await.unwrap();
    // A look changes nothing: the hour's call is taken, the bucket full in
    // about an hour.
    let shared = store
        .peek("tenant")
        .await
        .unwrap()
        .expect("state for the key");
    assert_eq!(shared.rate, 1.0 / 3600.0);
    assert!(shared.full_in > Duration::from_secs(3590), "{shared:?}");
    assert_eq!(shared.remaining(1), 0);
    assert!(
        !admitted(&other, "tenant").await,
        "looking gave nothing back"
    );
    // With a burst: three of ten taken, seven left.
    let bursty = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_hour(10))
        .rate_store(RedisStore::connect(&server.url(), "app").await.unwrap())
        .build()
        .unwrap();
    for _ in 0..3 {
        assert!(admitted(&bursty, "batch").await);
    }
    assert_eq!(store.peek("batch").await.unwrap().unwrap().remaining(10), 7);
    assert!(store.reset("tenant").await.unwrap(), "it held state");
    assert!(!store.reset("tenant").await.unwrap(), "nothing left");
    assert_eq!(server.command(&["EXISTS", "app:tenant"]), ":0\r\n");
    assert_eq!(store.peek("tenant").await.unwrap(), None);
    // Afresh: the next call of either manager goes.
    assert!(admitted(&other, "tenant").await);
}
