//! An API server that limits each client by API key, with two tiers of
//! quota, and a load generator that shows what each client gets.
//!
//! ```text
//! cargo run --release --features axum,status,metrics --example api_server
//! ```
//!
//! While it runs, the manager's status page is served on a loopback port
//! printed at start (with `/metrics` for Prometheus); API keys appear there
//! masked, through the manager's `key_names` (`STATUS_HOLD_SECS=60` keeps
//! the page up after the run).
//!
//! The server (axum, on a loopback port) puts every request through a
//! `ThrottleLayer`: a fixed quota per API key (free keys 5/s, burst 5; pro
//! keys 50/s, burst 20, from the manager's `tier_of`) and a bulkhead of 4 requests
//! in flight per key (queue of 8, 100 ms queue timeout), as its plans file
//! says (`examples/api_plans.toml`). The load generator then runs six
//! clients at once for 5 s, each sending at its own steady rate whatever
//! the answers, and prints per key what it offered and what came back: 429
//! for requests over the key's rate, 503 for requests that found the key's
//! 4 slots and queue taken for 100 ms, 401 for requests without a key or
//! with one the server never issued (an unknown key gets no plan, not the
//! free one).
//!
//! Behind each key's quota, a service guard protects the whole service:
//! a concurrency limit it learns, which under overload sheds the slow
//! exports (LOW priority, by route) before the reports.
//!
//! The server reloads its plans on SIGHUP (`kill -HUP <pid>`, the pid
//! printed at start). Halfway through the run the example shows it: it
//! writes a copy of the file with free keys raised to 10/s and sends
//! itself SIGHUP; each free key moves to the new quota at its next
//! request, keeping its bucket.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use portcullis::builder::ManagerConfig;
use portcullis::server::{KeyExtractor, ThrottleLayer};
use portcullis::{BulkheadConfig, Priority, ThrottleManager};

#[path = "observe/mod.rs"]
mod observe;

/// Each client: its API key, the path it calls, and how many requests a
/// second it sends.
const CLIENTS: [(&str, &str, f64); 7] = [
    ("free-alice", "/v1/report", 20.0), // four times her quota
    ("free-bob", "/v1/report", 4.0),    // within his
    ("pro-carol", "/v1/report", 80.0),  // over hers
    ("pro-dave", "/v1/report", 30.0),   // within his
    ("pro-erin", "/v1/export", 40.0),   // within her rate, but each call is slow
    ("", "/v1/report", 5.0),            // no key at all
    ("guessed-key", "/v1/report", 5.0), // a key the server never issued
];
const RUN: Duration = Duration::from_secs(5);

/// The plans file, and what the reload halfway through changes in it.
const PLANS: &str = include_str!("api_plans.toml");
const FREE_BEFORE: &str = "quota = \"5/s\"";
const FREE_AFTER: &str = "quota = \"10/s\"";

/// Whether the server issued `key`: the plans' tiers name its keys by
/// their prefix, and a key it never issued has no plan.
fn is_issued(key: &str) -> bool {
    CLIENTS.iter().any(|&(issued, _, _)| issued == key)
        && (key.starts_with("free-") || key.starts_with("pro-"))
}

/// A key's quota: calls a second, before the reload and after it.
fn tier(key: &str) -> (u32, u32) {
    if key.starts_with("pro-") {
        (50, 50)
    } else {
        (5, 10)
    }
}

/// The plans as `path` says them now.
fn read_plans(path: &std::path::Path) -> Result<ManagerConfig, Box<dyn std::error::Error>> {
    let text = std::fs::read_to_string(path)?;
    Ok(ManagerConfig::from_deserializer(
        toml::Deserializer::parse(&text)?,
    )?)
}

/// On each SIGHUP, applies the plans file to the running manager: all of
/// it, or none of it with the error printed.
fn reload_on_sighup(
    manager: ThrottleManager<String>,
    path: std::path::PathBuf,
) -> std::io::Result<()> {
    let mut hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            match read_plans(&path).map(|plans| manager.reload(plans)) {
                Ok(Ok(())) => println!("SIGHUP: reloaded {}", path.display()),
                Ok(Err(refused)) => println!("SIGHUP: {} not applied: {refused}", path.display()),
                Err(unread) => println!("SIGHUP: {} not read: {unread}", path.display()),
            }
        }
    });
    Ok(())
}

/// How an API key is shown outside the process (status page, logs): its
/// tier and a short fingerprint, never the key itself.
fn masked(key: &str) -> String {
    let fingerprint = key.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    });
    let tier = if key.starts_with("pro-") {
        "pro"
    } else {
        "free"
    };
    format!("{tier}-key-{:04x}", fingerprint & 0xffff)
}

/// The API, and its service guard's manager (for its figures).
fn api(
    manager: ThrottleManager<String>,
) -> Result<(Router, ThrottleManager<String>), portcullis::error::ConfigError> {
    // Only keys the server issued have a plan: any other, or none, is 401.
    let issued = KeyExtractor::from_fn(|request| {
        let key = request.headers.get("x-api-key")?.to_str().ok()?;
        is_issued(key).then(|| key.to_owned())
    });
    let layer = ThrottleLayer::builder(manager, issued)
        .on_missing_key(|_| {
            let mut answer = http::Response::new("an issued API key is required\n".into());
            *answer.status_mut() = http::StatusCode::UNAUTHORIZED;
            answer
        })
        .rate_limit_headers(true)
        // Exports can wait; reports are what users look at.
        .priority_by(|request| (request.uri.path() == "/v1/export").then_some(Priority::LOW))
        // Learned from a floor the service is known to take, so that it
        // sheds nothing while it learns.
        .service_guard(BulkheadConfig::adaptive().bounds(16, 256).queue(64))
        .build()?;
    let guard = layer.service_guard().expect("a guard").clone();
    let app = Router::new()
        .route(
            "/v1/report",
            get(|| async {
                // The work a request costs: a few milliseconds.
                tokio::time::sleep(Duration::from_millis(3)).await;
                "{\"report\":\"ok\"}"
            }),
        )
        .route(
            "/v1/export",
            get(|| async {
                // A slow one: 40/s of these keep 10 in flight, over the 4
                // a key may have.
                tokio::time::sleep(Duration::from_millis(250)).await;
                "{\"export\":\"ok\"}"
            }),
        )
        .layer(layer);
    Ok((app, guard))
}

#[derive(Debug, Default, Clone)]
struct Tally {
    offered: u32,
    ok: u32,
    too_many: u32,
    unavailable: u32,
    unknown_key: u32,
    /// One refusal's headers, to show.
    sample: Option<String>,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let metrics = observe::install_metrics()?;
    // The server's own copy of its plans, which the reload below edits.
    let plans = std::env::temp_dir().join(format!("api_plans-{}.toml", std::process::id()));
    std::fs::write(&plans, PLANS)?;
    let manager = ThrottleManager::<String>::builder()
        .config(read_plans(&plans)?)
        .tier_of(|key: &String| key.starts_with("pro-").then_some("pro"))
        .name("api")
        .key_names(|key: &String| masked(key))
        .build()?;
    reload_on_sighup(manager.clone(), plans.clone())?;
    let page = observe::serve(&manager, metrics).await?;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let (app, guard) = api(manager.clone())?;
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
    });
    println!("API server on http://{addr} (/v1/report, /v1/export), limiting by x-api-key");
    println!("free keys: 5/s, burst 5; pro keys: 50/s, burst 20; 4 in flight per key");
    println!(
        "plans: {} (kill -HUP {} reloads them)",
        plans.display(),
        std::process::id()
    );
    println!("status page: http://{page}/status   metrics: http://{page}/metrics\n");

    // Halfway through: free keys raised to 10/s in the file, and SIGHUP.
    let raise = tokio::spawn({
        let plans = plans.clone();
        async move {
            tokio::time::sleep(RUN / 2).await;
            std::fs::write(&plans, PLANS.replacen(FREE_BEFORE, FREE_AFTER, 1))?;
            let pid = std::process::id().to_string();
            std::process::Command::new("kill")
                .args(["-HUP", &pid])
                .status()?;
            std::io::Result::Ok(())
        }
    });

    let tallies: Arc<Mutex<BTreeMap<&str, Tally>>> = Arc::default();
    let client = reqwest::Client::new();
    let base = format!("http://{addr}");
    let start = Instant::now();
    let mut loads = Vec::new();
    for (key, path, per_second) in CLIENTS {
        let url = format!("{base}{path}");
        let (client, tallies) = (client.clone(), Arc::clone(&tallies));
        loads.push(tokio::spawn(async move {
            let mut ticks = tokio::time::interval(Duration::from_secs_f64(1.0 / per_second));
            let mut requests = Vec::new();
            while start.elapsed() < RUN {
                ticks.tick().await;
                let (client, url, tallies) = (client.clone(), url.clone(), Arc::clone(&tallies));
                requests.push(tokio::spawn(async move {
                    let mut request = client.get(&url);
                    if !key.is_empty() {
                        request = request.header("x-api-key", key);
                    }
                    let response = request.send().await;
                    let mut tallies = tallies.lock().unwrap();
                    let tally = tallies.entry(key).or_default();
                    tally.offered += 1;
                    let Ok(response) = response else { return };
                    match response.status().as_u16() {
                        200 => tally.ok += 1,
                        429 => tally.too_many += 1,
                        503 => tally.unavailable += 1,
                        401 => tally.unknown_key += 1,
                        _ => {}
                    }
                    if response.status() == 429 && tally.sample.is_none() {
                        let header = |name: &str| {
                            let value = response.headers().get(name);
                            value
                                .and_then(|v| v.to_str().ok())
                                .unwrap_or("-")
                                .to_owned()
                        };
                        tally.sample = Some(format!(
                            "Retry-After: {}\n    RateLimit-Policy: {}\n    RateLimit: {}",
                            header("retry-after"),
                            header("ratelimit-policy"),
                            header("ratelimit")
                        ));
                    }
                }));
            }
            for request in requests {
                let _ = request.await;
            }
        }));
    }
    for load in loads {
        load.await?;
    }
    raise.await??;
    let _ = std::fs::remove_file(&plans);
    let seconds = RUN.as_secs_f64();

    println!(
        "{:<12} {:<11} {:>9} {:>9} {:>9} {:>9} {:>6} {:>6} {:>11}",
        "api key",
        "path",
        "quota/s",
        "offered/s",
        "offered",
        "admitted",
        "429",
        "503",
        "401 (no/unknown key)"
    );
    print_tallies(&tallies.lock().unwrap(), seconds);
    println!("\nkeys held by the manager: {}", manager.keys().len());
    if let Some(whole) = guard.key("/").snapshot() {
        let limit = whole.concurrency_limit.unwrap_or_default();
        println!(
            "service guard: a learned limit of {limit} requests in flight for the whole service"
        );
    }
    observe::hold().await;
    Ok(())
}

/// What each client offered and got back.
fn print_tallies(tallies: &BTreeMap<&str, Tally>, seconds: f64) {
    for (key, path, _) in CLIENTS {
        let tally = tallies.get(key).cloned().unwrap_or_default();
        let quota = match tier(key) {
            _ if !is_issued(key) => "-".to_owned(),
            (before, after) if before != after => format!("{before}->{after}"),
            (rate, _) => rate.to_string(),
        };
        println!(
            "{:<12} {:<11} {:>9} {:>9.1} {:>9} {:>9} {:>6} {:>6} {:>11}",
            if key.is_empty() { "(none)" } else { key },
            path,
            quota,
            f64::from(tally.offered) / seconds,
            tally.offered,
            tally.ok,
            tally.too_many,
            tally.unavailable,
            tally.unknown_key,
        );
    }
    if let Some(sample) = tallies.get("free-alice").and_then(|t| t.sample.clone()) {
        println!("\na 429 for free-alice carries:\n    {sample}");
    }
}
