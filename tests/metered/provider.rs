//! Against a real stand-in for a metered API on loopback (600 requests and
//! 100,000 tokens a minute, output tokens unknown before the answer): 16
//! callers for 20 s, their costs estimated and settled from the answers'
//! `usage`, beside the same run charged up front and never settled, and
//! beside a client whose limits are the provider's own buckets.

use std::time::{Duration, Instant};

use portcullis::{RateConfig, ThrottleManager};

use crate::batch::{self, Costing};
use crate::llm_provider::{
    HELD_SECONDS, Provider, ProviderFigures, REQUESTS_PER_MINUTE, TOKENS_PER_MINUTE,
};

/// A manager whose limits are the provider's buckets exactly: a burst of
/// `HELD_SECONDS` of each quota.
fn at_the_providers_buckets() -> ThrottleManager<String> {
    let burst = |per_minute: u32| (f64::from(per_minute) / 60.0 * HELD_SECONDS) as u32;
    ThrottleManager::<String>::builder()
        .rate(RateConfig::per_minute(REQUESTS_PER_MINUTE).burst(burst(REQUESTS_PER_MINUTE)))
        .limit(
            "tokens",
            RateConfig::per_minute(TOKENS_PER_MINUTE).burst(burst(TOKENS_PER_MINUTE)),
        )
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settled_costs_use_the_token_quota_with_almost_no_429s() {
    let start = Instant::now();
    let until = start + Duration::from_secs(22);
    let run = |costing, manager: ThrottleManager<String>| async move {
        let provider = Provider::start(7).await.unwrap();
        let prompts = batch::Prompts::long(costing);
        batch::run(&manager, provider.address, "acct", &prompts, 16, until, 11).await;
        // Once the first burst is spent, to the 20th second.
        provider.between(start + Duration::from_secs(5), 15.0)
    };
    let (settled, up_front, at_buckets) = tokio::join!(
        run(Costing::Settled, batch::manager()),
        run(Costing::UpFront, batch::manager()),
        run(Costing::Settled, at_the_providers_buckets()),
    );
    let runs: [(&str, &ProviderFigures); 3] = [
        ("settled", &settled),
        ("up front", &up_front),
        ("settled, the provider's buckets", &at_buckets),
    ];
    for (name, seen) in runs {
        println!(
            "{name:<9} {} requests, {} answered 429 ({:.1} %), {:.1} % of the token quota, {:.1} % of the request quota",
            seen.requests,
            seen.refused,
            100.0 * seen.refused_share(),
            100.0 * seen.token_use(),
            100.0 * seen.request_use(),
        );
    }
    // A new key earns its burst: with the provider's own buckets, a burst
    // spent on estimates at once took the provider's far below empty, and
    // its headers then paused the key for the time its bucket took to fill.
    for seen in [&settled, &at_buckets] {
        assert!(seen.refused_share() <= 0.01, "{seen:?}");
        assert!(seen.token_use() >= 0.9, "{seen:?}");
    }
}
