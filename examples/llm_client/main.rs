//! A batch of prompts against a metered LLM API, through one manager with
//! two limits: requests and tokens a minute.
//!
//! ```text
//! cargo run --release --features reqwest --example llm_client
//! ```
//!
//! Starts a local stand-in for a provider (600 requests and 100,000 tokens
//! a minute per account, 429 beyond, OpenAI's `x-ratelimit-*` headers, the
//! output tokens of each answer drawn from a seeded distribution and
//! reported in a JSON `usage` field), and sends it prompts from 16 callers
//! for 20 s, twice at once, on two accounts:
//!
//! - **settled**: each call estimates the prompt's tokens and a typical
//!   answer's, and settles its cost from the answer's `usage`;
//! - **up front**: each call is charged the prompt's tokens and the most
//!   an answer may write, and never settled.
//!
//! For each it prints what the provider served of each quota once the
//! first burst is spent (from 5 s to 20 s) and how many calls it answered
//! 429.

#[allow(dead_code)] // shared with tests/metered/provider.rs, which reads more
mod batch;
#[path = "../../tests/support/llm_provider.rs"]
mod provider;

use std::time::{Duration, Instant};

use batch::Costing;
use provider::Provider;

const CALLERS: usize = 16;
const SECONDS: u64 = 20;
/// The first seconds spend the buckets' bursts: the figures are of the rest.
const SETTLING: u64 = 5;
/// The callers go on a little past the figures' span, so that its last
/// calls are not the batch's last.
const TAIL: u64 = 2;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    println!(
        "{CALLERS} callers for {SECONDS} s against a provider of 600 requests and 100,000 tokens a minute"
    );
    println!(
        "{:<10} {:>9} {:>9} {:>12} {:>9}",
        "costs", "requests", "429s", "token quota", "req quota"
    );
    let start = Instant::now();
    let until = start + Duration::from_secs(SECONDS + TAIL);
    let runs = [Costing::Settled, Costing::UpFront].map(|costing| async move {
        let provider = Provider::start(7).await?;
        let manager = batch::manager();
        let prompts = batch::Prompts::long(costing);
        let address = provider.address;
        let tally = batch::run(&manager, address, "acct", &prompts, CALLERS, until, 11).await;
        let seen = provider.between(
            start + Duration::from_secs(SETTLING),
            (SECONDS - SETTLING) as f64,
        );
        Ok::<_, std::io::Error>((costing, seen, tally))
    });
    let [settled, up_front] = runs;
    let (settled, up_front) = tokio::join!(settled, up_front);
    for (costing, seen, _tally) in [settled?, up_front?] {
        let name = match costing {
            Costing::Settled => "settled",
            Costing::UpFront => "up front",
        };
        println!(
            "{name:<10} {:>9} {:>9} {:>11.1}% {:>8.1}%",
            seen.requests,
            seen.refused,
            100.0 * seen.token_use(),
            100.0 * seen.request_use()
        );
    }
    Ok(())
}
