//! Against a real stand-in for a metered API on loopback (600 requests and
//! 100,000 tokens a minute, output tokens unknown before the answer): 16
//! callers for 20 s, their costs estimated and settled from the answers'
//! `usage`, beside the same run charged up front and never settled.

use std::time::{Duration, Instant};

use crate::batch::{self, Costing};
use crate::llm_provider::Provider;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settled_costs_use_the_token_quota_with_almost_no_429s() {
    let start = Instant::now();
    let until = start + Duration::from_secs(22);
    let run = |costing| async move {
        let provider = Provider::start(7).await.unwrap();
        let manager = batch::manager();
        let prompts = batch::Prompts::long(costing);
        batch::run(&manager, provider.address, "acct", &prompts, 16, until, 11).await;
        // Once the first burst is spent, to the 20th second.
        provider.between(start + Duration::from_secs(5), 15.0)
    };
    let (settled, up_front) = tokio::join!(run(Costing::Settled), run(Costing::UpFront));
    for (name, seen) in [("settled", &settled), ("up front", &up_front)] {
        println!(
            "{name:<9} {} requests, {} answered 429 ({:.1} %), {:.1} % of the token quota, {:.1} % of the request quota",
            seen.requests,
            seen.refused,
            100.0 * seen.refused_share(),
            100.0 * seen.token_use(),
            100.0 * seen.request_use(),
        );
    }
    assert!(settled.refused_share() <= 0.01, "{settled:?}");
    assert!(settled.token_use() >= 0.9, "{settled:?}");
}
