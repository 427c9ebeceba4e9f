//! A fleet of real processes on one metered account, its limits shared
//! through a real `redis-server`: this test binary starts copies of itself
//! (`metered_fleet_worker`), each with its own manager and connection,
//! sending prompts to one stand-in provider. Every named limit of a key is
//! decided in one round trip (`limits.lua`).
//!
//! `cargo test --all-features --test metered fleet -- --nocapture` prints
//! the figures.

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use crate::batch::{self, Costing};
use crate::llm_provider::{Provider, ProviderFigures};
use crate::redis_server::RedisServer;

/// A worker of the fleet tests: started by them, with its job in its
/// environment (run by hand, it has none and does nothing).
#[test]
#[ignore = "a process of the metered fleet, started by the fleet test"]
fn metered_fleet_worker() {
    let var = |name| std::env::var(name).ok();
    let (Some(provider), Some(seconds)) = (var("METERED_PROVIDER"), var("METERED_SECONDS")) else {
        eprintln!("metered_fleet_worker: no job in the environment; the fleet test starts it");
        return;
    };
    let redis = var("METERED_REDIS").filter(|url| !url.is_empty());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let manager = match redis {
            Some(url) => {
                let store = portcullis::store::RedisStore::connect(&url, "metered")
                    .await
                    .unwrap();
                batch::shared_manager(store)
            }
            None => batch::manager(),
        };
        let until = Instant::now() + Duration::from_secs(seconds.parse().unwrap());
        let address = provider.parse().unwrap();
        let seed = u64::from(std::process::id());
        let prompts = match var("METERED_PROMPTS").as_deref() {
            Some("short") => batch::Prompts::short(Costing::Settled),
            _ => batch::Prompts::long(Costing::Settled),
        };
        batch::run(&manager, address, "acct", &prompts, 4, until, seed).await;
    });
}

/// `processes` workers of 4 callers each for `seconds`, sending `prompts`
/// (`long` or `short`), sharing their limits through `redis` (or each
/// alone); what the provider saw from `from` seconds on, to the last
/// second.
async fn fleet(
    redis: Option<&str>,
    prompts: &str,
    (processes, seconds, from): (usize, u64, u64),
) -> ProviderFigures {
    let provider = Provider::start(7).await.unwrap();
    let me = std::env::current_exe().unwrap();
    let workers: Vec<Child> = (0..processes)
        .map(|_| {
            Command::new(&me)
                .args([
                    "fleet::metered_fleet_worker",
                    "--exact",
                    "--ignored",
                    "--test-threads=1",
                ])
                .env("METERED_PROVIDER", provider.address.to_string())
                .env("METERED_REDIS", redis.unwrap_or_default())
                .env("METERED_SECONDS", seconds.to_string())
                .env("METERED_PROMPTS", prompts)
                .spawn()
                .unwrap()
        })
        .collect();
    let start = Instant::now();
    tokio::task::spawn_blocking(move || {
        for mut worker in workers {
            assert!(worker.wait().unwrap().success());
        }
    })
    .await
    .unwrap();
    provider.between(
        start + Duration::from_secs(from),
        (seconds - from - 1) as f64,
    )
}

fn print(what: &str, seen: &ProviderFigures) {
    println!(
        "{what}: {} requests, {:.1} % answered 429, {:.1} % of the token quota, {:.1} % of the request quota",
        seen.requests,
        100.0 * seen.refused_share(),
        100.0 * seen.token_use(),
        100.0 * seen.request_use()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_processes_share_one_accounts_limits() {
    let Some(redis) = RedisServer::start("four_processes_share_one_accounts_limits") else {
        return;
    };
    // Long prompts, the tokens binding; from the 5th second, once the
    // first burst is spent.
    let shared = fleet(Some(&redis.url()), "long", (4, 21, 5)).await;
    print(
        "4 processes sharing the limits, long prompts, from 5 s to 20 s",
        &shared,
    );
    assert!(shared.refused_share() <= 0.02, "{shared:?}");
    assert!(shared.token_use() >= 0.85, "{shared:?}");
    // Short prompts, the requests binding.
    let shared = fleet(Some(&redis.url()), "short", (4, 21, 5)).await;
    print(
        "4 processes sharing the limits, short prompts, from 5 s to 20 s",
        &shared,
    );
    assert!(shared.refused_share() <= 0.02, "{shared:?}");
    assert!(shared.request_use() >= 0.85, "{shared:?}");
    // Each alone, the four send four times the quota until the provider's
    // headers say what remains: printed beside, for the figures.
    let alone = fleet(None, "long", (4, 11, 0)).await;
    print(
        "4 processes each alone, long prompts, from 0 s to 10 s",
        &alone,
    );
}
