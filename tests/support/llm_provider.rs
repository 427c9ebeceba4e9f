//! A stand-in for a metered LLM API on loopback: each account may send
//! [`REQUESTS_PER_MINUTE`] requests and [`TOKENS_PER_MINUTE`] tokens a
//! minute, each a bucket that holds ten seconds of its quota and refills
//! continuously, as the big providers describe theirs. A request is
//! answered 429 (with `Retry-After`) when its account lacks a request or
//! the prompt's input tokens; admitted, it takes them, generates a number
//! of output tokens drawn from a seeded distribution (unknown to the
//! caller before the answer), takes those too (the bucket may go below
//! empty: later requests wait) and reports them in a JSON `usage` field,
//! with OpenAI's `x-ratelimit-*` headers on every answer. For
//! `examples/llm_client` and `tests/metered/provider.rs`.

#![allow(dead_code)] // each includer reads its own part

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

/// What each account may send.
pub(crate) const REQUESTS_PER_MINUTE: u32 = 600;
pub(crate) const TOKENS_PER_MINUTE: u32 = 100_000;
/// Each bucket holds this many seconds of its quota.
pub(crate) const HELD_SECONDS: f64 = 10.0;
/// The most output tokens a request may ask for, and what the stand-in
/// generates at most.
pub(crate) const MAX_OUTPUT: u32 = 1_500;

/// One request as the stand-in saw it: when it arrived, whether it was
/// served, and the tokens it took (input and output; 0 if refused).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Seen {
    pub(crate) at: Instant,
    pub(crate) served: bool,
    pub(crate) tokens: u32,
}

/// What the stand-in saw over a span.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ProviderFigures {
    pub(crate) requests: usize,
    pub(crate) refused: usize,
    pub(crate) tokens: u64,
    pub(crate) seconds: f64,
}

impl ProviderFigures {
    /// The share of requests answered 429.
    pub(crate) fn refused_share(&self) -> f64 {
        self.refused as f64 / self.requests.max(1) as f64
    }

    /// Tokens served, over what the token quota allows in the span.
    pub(crate) fn token_use(&self) -> f64 {
        self.tokens as f64 / (f64::from(TOKENS_PER_MINUTE) / 60.0 * self.seconds)
    }

    /// Requests served, over what the request quota allows in the span.
    pub(crate) fn request_use(&self) -> f64 {
        let served = (self.requests - self.refused) as f64;
        served / (f64::from(REQUESTS_PER_MINUTE) / 60.0 * self.seconds)
    }
}

/// A running stand-in: where it listens, and what it saw.
pub(crate) struct Provider {
    pub(crate) address: SocketAddr,
    state: Arc<ProviderState>,
}

impl Provider {
    /// Starts one on a free loopback port; its output tokens are drawn from
    /// `seed`.
    pub(crate) async fn start(seed: u64) -> std::io::Result<Provider> {
        let state = Arc::new(ProviderState {
            accounts: Mutex::new(HashMap::new()),
            seen: Mutex::new(Vec::new()),
            draws: AtomicU64::new(seed),
        });
        let app = Router::new()
            .route("/v1/complete", axum::routing::post(complete))
            .with_state(Arc::clone(&state));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        tokio::spawn(async move { axum::serve(listener, app).await });
        Ok(Provider { address, state })
    }

    /// What arrived from `from` until `seconds` later.
    pub(crate) fn between(&self, from: Instant, seconds: f64) -> ProviderFigures {
        let to = from + Duration::from_secs_f64(seconds);
        let seen = self.state.seen.lock().unwrap();
        let span = seen.iter().filter(|seen| (from..to).contains(&seen.at));
        let mut figures = ProviderFigures {
            requests: 0,
            refused: 0,
            tokens: 0,
            seconds,
        };
        for seen in span {
            figures.requests += 1;
            figures.refused += usize::from(!seen.served);
            figures.tokens += u64::from(seen.tokens);
        }
        figures
    }
}

struct ProviderState {
    accounts: Mutex<HashMap<String, Account>>,
    seen: Mutex<Vec<Seen>>,
    /// The state of the output tokens' random draws (splitmix64).
    draws: AtomicU64,
}

impl ProviderState {
    /// Output tokens for one answer: from 20 to `MAX_OUTPUT`, most of them
    /// short (the square of a uniform draw), 500 on average.
    fn output_tokens(&self, max: u32) -> u32 {
        let mut z = self
            .draws
            .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        let uniform = (z ^ (z >> 31)) as f64 / u64::MAX as f64;
        let tokens = 20.0 + uniform * uniform * f64::from(MAX_OUTPUT - 20);
        (tokens as u32).min(max)
    }
}

/// One account's two buckets.
struct Account {
    requests: Bucket,
    tokens: Bucket,
}

impl Account {
    fn new(now: Instant) -> Self {
        Self {
            requests: Bucket::full(REQUESTS_PER_MINUTE, now),
            tokens: Bucket::full(TOKENS_PER_MINUTE, now),
        }
    }
}

/// A bucket that refills continuously, and may go below empty.
struct Bucket {
    level: f64,
    capacity: f64,
    per_second: f64,
    at: Instant,
}

impl Bucket {
    fn full(per_minute: u32, now: Instant) -> Self {
        let per_second = f64::from(per_minute) / 60.0;
        Self {
            level: per_second * HELD_SECONDS,
            capacity: per_second * HELD_SECONDS,
            per_second,
            at: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let seconds = now.saturating_duration_since(self.at).as_secs_f64();
        self.level = (self.level + seconds * self.per_second).min(self.capacity);
        self.at = now;
    }

    /// How long until `amount` is there.
    fn wait_for(&self, amount: f64) -> Duration {
        Duration::from_secs_f64(((amount - self.level) / self.per_second).max(0.0))
    }

    /// The `x-ratelimit-*-{name}` headers: the limit, what remains (none
    /// below empty) and when it is full again, as a Go duration.
    fn headers(&self, name: &str, per_minute: u32, headers: &mut HeaderMap) {
        let full_in = self.wait_for(self.capacity).as_secs_f64();
        let pairs = [
            ("limit", per_minute.to_string()),
            ("remaining", (self.level.max(0.0) as u64).to_string()),
            ("reset", format!("{full_in:.3}s")),
        ];
        for (what, value) in pairs {
            let name = axum::http::HeaderName::try_from(format!("x-ratelimit-{what}-{name}"));
            if let (Ok(name), Ok(value)) = (name, HeaderValue::try_from(value)) {
                headers.insert(name, value);
            }
        }
    }
}

fn limit_headers(account: &Account) -> HeaderMap {
    let mut headers = HeaderMap::new();
    account
        .requests
        .headers("requests", REQUESTS_PER_MINUTE, &mut headers);
    account
        .tokens
        .headers("tokens", TOKENS_PER_MINUTE, &mut headers);
    headers
}

/// The request's body: `{"prompt": "...", "max_tokens": 500}`.
#[derive(serde::Deserialize)]
struct Completion {
    prompt: String,
    max_tokens: u32,
}

/// The input tokens of a prompt: one for every four bytes.
pub(crate) fn input_tokens(prompt: &str) -> u32 {
    (prompt.len() as u32 / 4).max(1)
}

async fn complete(
    State(state): State<Arc<ProviderState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let arrived = Instant::now();
    let Some(account) = headers
        .get("authorization")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .map(str::to_owned)
    else {
        return (StatusCode::UNAUTHORIZED, "no API key").into_response();
    };
    let Ok(completion) = serde_json::from_slice::<Completion>(&body) else {
        return (
            StatusCode::BAD_REQUEST,
            "a JSON body with prompt and max_tokens",
        )
            .into_response();
    };
    let input = input_tokens(&completion.prompt);
    // Admission: a request and the input tokens, now or 429.
    let refused = {
        let mut accounts = state.accounts.lock().unwrap();
        let limits = accounts
            .entry(account.clone())
            .or_insert_with(|| Account::new(arrived));
        limits.requests.refill(arrived);
        limits.tokens.refill(arrived);
        if limits.requests.level < 1.0 || limits.tokens.level < f64::from(input) {
            let wait = limits
                .requests
                .wait_for(1.0)
                .max(limits.tokens.wait_for(f64::from(input)));
            Some((wait, limit_headers(limits)))
        } else {
            limits.requests.level -= 1.0;
            limits.tokens.level -= f64::from(input);
            None
        }
    };
    if let Some((wait, mut headers)) = refused {
        state.seen.lock().unwrap().push(Seen {
            at: arrived,
            served: false,
            tokens: 0,
        });
        let seconds = wait.as_secs_f64().ceil().max(1.0) as u64;
        headers.insert("retry-after", HeaderValue::from(seconds));
        return (StatusCode::TOO_MANY_REQUESTS, headers, "rate limited").into_response();
    }
    // Generation: the output tokens, known only now, taken when done.
    let output = state.output_tokens(completion.max_tokens);
    tokio::time::sleep(Duration::from_millis(20 + u64::from(output) / 20)).await;
    let headers = {
        let mut accounts = state.accounts.lock().unwrap();
        let limits = accounts.get_mut(&account).expect("made at admission");
        limits.tokens.refill(Instant::now());
        limits.tokens.level -= f64::from(output);
        limit_headers(limits)
    };
    let tokens = input + output;
    state.seen.lock().unwrap().push(Seen {
        at: arrived,
        served: true,
        tokens,
    });
    let usage = serde_json::json!({
        "text": "…",
        "usage": { "input_tokens": input, "output_tokens": output },
    });
    (StatusCode::OK, headers, usage.to_string()).into_response()
}
