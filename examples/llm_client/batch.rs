//! A batch of prompts through a manager with two limits, requests and
//! tokens a minute, against a metered API: each call estimates its tokens,
//! waits for both limits, and settles its cost from the answer's `usage`.
//! Shared with `tests/metered/provider.rs`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use portcullis::client::limit_readings;
use portcullis::metered::Cost;
use portcullis::{Priority, RateConfig, ThrottleManager};

/// The account's quotas, as the provider states them.
pub(crate) const REQUESTS_PER_MINUTE: u32 = 600;
pub(crate) const TOKENS_PER_MINUTE: u32 = 100_000;
/// What a call asks for at most.
pub(crate) const MAX_TOKENS: u32 = 1_500;
/// What a call is estimated to write before its answer says: a typical
/// answer, not the most it may write.
pub(crate) const TYPICAL_OUTPUT: u32 = 300;

/// How the calls state their cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Costing {
    /// The prompt's tokens and a typical answer's, settled from `usage`.
    Settled,
    /// The prompt's tokens and the most an answer may write, never settled.
    UpFront,
}

/// What the callers send: prompts of how many words, answers of at most
/// how many tokens, and how their costs are stated.
#[derive(Debug, Clone)]
pub(crate) struct Prompts {
    pub(crate) costing: Costing,
    pub(crate) words: std::ops::Range<usize>,
    pub(crate) max_tokens: u32,
}

impl Prompts {
    /// Prompts of 40 to 400 words and answers of up to 1,500 tokens: the
    /// tokens a minute bind.
    pub(crate) fn long(costing: Costing) -> Self {
        Self {
            costing,
            words: 40..400,
            max_tokens: MAX_TOKENS,
        }
    }

    /// Prompts of 8 to 24 words and answers of up to 16 tokens: the
    /// requests a minute bind.
    pub(crate) fn short(costing: Costing) -> Self {
        Self {
            costing,
            words: 8..24,
            max_tokens: 16,
        }
    }
}

/// What the callers saw.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    pub(crate) served: AtomicU64,
    pub(crate) refused: AtomicU64,
    pub(crate) tokens: AtomicU64,
}

/// The manager for one account: its requests as the key's rate, its
/// tokens as a named limit, each a little below the provider's bucket so
/// that the calls in flight, whose answers are not counted yet, fit.
pub(crate) fn manager() -> ThrottleManager<String> {
    limits().build().expect("valid limits")
}

/// [`manager`], its limits shared with every process of `store`: one
/// account's quota for the whole fleet.
#[cfg(feature = "redis")]
pub(crate) fn shared_manager(store: portcullis::store::RedisStore) -> ThrottleManager<String> {
    limits().rate_store(store).build().expect("valid limits")
}

fn limits() -> portcullis::builder::ThrottleManagerBuilder<String> {
    ThrottleManager::<String>::builder()
        .rate(RateConfig::per_minute(REQUESTS_PER_MINUTE).burst(50))
        .limit(
            "tokens",
            RateConfig::per_minute(TOKENS_PER_MINUTE).burst(8_000),
        )
}

/// `callers` loops sending prompts to `address` for `account` until
/// `until`, each through `manager`, their prompts' lengths drawn from
/// `seed`.
pub(crate) async fn run(
    manager: &ThrottleManager<String>,
    address: SocketAddr,
    account: &str,
    prompts: &Prompts,
    callers: usize,
    until: Instant,
    seed: u64,
) -> Arc<Tally> {
    let tally = Arc::new(Tally::default());
    let client = reqwest::Client::new();
    let loops = (0..callers).map(|caller| {
        let (manager, client, tally) = (manager.clone(), client.clone(), Arc::clone(&tally));
        let (account, prompts) = (account.to_owned(), prompts.clone());
        tokio::spawn(async move {
            let mut draw = seed ^ (caller as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            let span = prompts.words.end - prompts.words.start;
            while Instant::now() < until {
                draw = draw.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                let words = prompts.words.start + (draw >> 33) as usize % span;
                let prompt = "word ".repeat(words);
                let call = Call {
                    manager: &manager,
                    client: &client,
                    address,
                    account: &account,
                };
                // No call waits past the batch's end.
                let deadline = tokio::time::Instant::from_std(until);
                portcullis::deadline::with_deadline(deadline, call.send(&prompt, &prompts, &tally))
                    .await;
            }
        })
    });
    for caller in loops.collect::<Vec<_>>() {
        let _ = caller.await;
    }
    tally
}

struct Call<'a> {
    manager: &'a ThrottleManager<String>,
    client: &'a reqwest::Client,
    address: SocketAddr,
    account: &'a str,
}

impl Call<'_> {
    /// One prompt: its limits' room, the request, the cost settled.
    async fn send(&self, prompt: &str, prompts: &Prompts, tally: &Tally) {
        let input = (prompt.len() as u32 / 4).max(1);
        let costing = prompts.costing;
        let estimate = match costing {
            Costing::Settled => input + TYPICAL_OUTPUT.min(prompts.max_tokens),
            Costing::UpFront => input + prompts.max_tokens,
        };
        let cost = Cost::of("tokens", estimate);
        let Ok(permit) = self
            .manager
            .acquire_cost(self.account, Priority::HIGH, cost)
            .await
        else {
            return;
        };
        let body = serde_json::json!({ "prompt": prompt, "max_tokens": prompts.max_tokens });
        let sent = self
            .client
            .post(format!("http://{}/v1/complete", self.address))
            .bearer_auth(self.account)
            .body(body.to_string())
            .send()
            .await;
        let response = match sent {
            Ok(response) => response,
            Err(_) => return permit.unsent(),
        };
        // What the provider says remains of each limit moves ours to match.
        for reading in limit_readings(response.headers(), SystemTime::now())
            .into_iter()
            .flatten()
        {
            let (limit, left, reset) = (reading.name(), reading.remaining(), reading.reset());
            self.manager
                .key(self.account)
                .observe_remaining(limit, left, reset);
        }
        if response.status() == reqwest::StatusCode::TOO_MANY_REQUESTS {
            tally.refused.fetch_add(1, Ordering::Relaxed);
            let retry_after = response
                .headers()
                .get("retry-after")
                .and_then(|value| value.to_str().ok());
            if let Some(seconds) = retry_after.and_then(|value| value.parse().ok()) {
                self.manager
                    .key(self.account)
                    .defer(Duration::from_secs(seconds));
            }
            // Refused, nothing was spent: nothing is owed.
            permit.settle(Cost::of("tokens", 0));
            return permit.overloaded();
        }
        let usage = match response.bytes().await {
            Ok(body) => serde_json::from_slice::<serde_json::Value>(&body).ok(),
            Err(_) => None,
        };
        let tokens = usage.as_ref().and_then(|body| {
            let usage = &body["usage"];
            Some(usage["input_tokens"].as_u64()? + usage["output_tokens"].as_u64()?)
        });
        let Some(tokens) = tokens else {
            return permit.unsent();
        };
        tally.served.fetch_add(1, Ordering::Relaxed);
        tally.tokens.fetch_add(tokens, Ordering::Relaxed);
        if costing == Costing::Settled {
            permit.settle(Cost::of(
                "tokens",
                u32::try_from(tokens).unwrap_or(u32::MAX),
            ));
        }
        permit.success();
    }
}
