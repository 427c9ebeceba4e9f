//! The README's quick start, as it is there: fetch every URL given on the
//! command line, at once, through a reqwest client that waits for each
//! host's learned rate and slows down on 429 and 503.
//!
//! ```text
//! cargo run --features reqwest --example quick_start -- https://example.com/ https://example.org/
//! ```
//!
//! The crate's examples build reqwest with its `rustls` feature, so
//! `https://` works here as in a program with reqwest's default features.
//! `tests/client/tls.rs` runs it against a local TLS server, `.ci/run`
//! against a local plain-HTTP one.

use portcullis::client::ThrottleMiddleware;
use portcullis::{RateConfig, ThrottleManager};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Every host starts at 10 requests a second and learns its own rate.
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(10.0).bounds(1.0, 200.0))
        .build()?;
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(ThrottleMiddleware::new(manager))
        .build();
    let fetches: Vec<_> = std::env::args()
        .skip(1)
        .map(|url| {
            let client = client.clone();
            tokio::spawn(async move { (client.get(&url).send().await, url) })
        })
        .collect();
    for fetch in fetches {
        match fetch.await? {
            (Ok(response), url) => println!("{url}: {}", response.status()),
            (Err(error), url) => println!("{url}: {error}"),
        }
    }
    Ok(())
}
