//! A metered call through the reqwest middleware, against the stand-in
//! provider on loopback: its estimate as a request extension, its named
//! limits' parts taken before it and settled from the answer's usage
//! through the response's `CostSettle`, and given back when the call
//! never reached the provider.

use portcullis::client::ThrottleMiddleware;
use portcullis::error::RejectReason;
use portcullis::metered::{Cost, CostSettle};
use portcullis::{RateConfig, Rejected, ThrottleManager};

use crate::llm_provider::Provider;

/// Tokens: 6,000 a minute (100 a second), burst 2,000.
fn manager() -> ThrottleManager<String> {
    ThrottleManager::<String>::builder()
        .rate(RateConfig::per_minute(600).burst(10))
        .limit("tokens", RateConfig::per_minute(6_000).burst(2_000))
        .build()
        .unwrap()
}

fn client(manager: &ThrottleManager<String>) -> reqwest_middleware::ClientWithMiddleware {
    let middleware = ThrottleMiddleware::new(manager.clone()).key_by(|_| "acct".to_owned());
    reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(middleware)
        .build()
}

fn tokens_left(manager: &ThrottleManager<String>) -> u32 {
    manager
        .limit("tokens")
        .unwrap()
        .peek("acct")
        .map_or(2_000, |left| left.remaining)
}

#[tokio::test]
async fn a_cost_travels_with_the_request_and_is_settled_from_the_answer() {
    let provider = Provider::start(3).await.unwrap();
    let manager = manager();
    // The account has heard from the provider (its count read, a full
    // bucket): not a new key, whose first call would withhold its burst.
    assert!(manager.key("acct").observe_remaining("tokens", 2_000, None));
    let body = serde_json::json!({ "prompt": "word ".repeat(200), "max_tokens": 600 });
    let response = client(&manager)
        .post(format!("http://{}/v1/complete", provider.address))
        .bearer_auth("acct")
        .body(body.to_string())
        .with_extension(Cost::of("tokens", 250 + 300))
        .send()
        .await
        .unwrap();
    let settle = response.extensions().get::<CostSettle>().cloned().unwrap();
    assert_eq!(settle.cost().amount("tokens"), 550); // the estimate, taken
    let usage: serde_json::Value =
        serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
    let used = usage["usage"]["input_tokens"].as_u64().unwrap()
        + usage["usage"]["output_tokens"].as_u64().unwrap();
    settle.settle(Cost::of("tokens", used as u32));
    assert_eq!(settle.cost().amount("tokens"), used as u32);
    // What the limit holds is the answer's usage (within the second's refill).
    let left = tokens_left(&manager);
    assert!(
        (2_000 - used as u32..2_000 - used as u32 + 20).contains(&left),
        "{left} left after {used}"
    );
}

#[tokio::test]
async fn a_call_that_never_reaches_the_backend_gives_its_parts_back() {
    let manager = manager();
    // Nothing listens there: the connection is refused.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let sent = client(&manager)
        .post(format!("http://{closed}/v1/complete"))
        .with_extension(Cost::of("tokens", 1_500))
        .send()
        .await;
    assert!(sent.is_err());
    assert!(tokens_left(&manager) >= 1_999, "{}", tokens_left(&manager));
    // A cost no burst holds is refused before anything is sent.
    let refused = client(&manager)
        .post(format!("http://{closed}/v1/complete"))
        .with_extension(Cost::of("tokens", 2_001))
        .send()
        .await
        .unwrap_err();
    let reqwest_middleware::Error::Middleware(error) = refused else {
        panic!("refused by the middleware: {refused:?}");
    };
    let rejected = error.downcast_ref::<Rejected>().unwrap();
    assert_eq!(
        (rejected.reason(), rejected.limit_index()),
        (RejectReason::CostAboveBurst, Some(0))
    );
}

/// Issue 80: a metered request dropped after its named limits' parts were
/// taken, but before it was sent (here, waiting for its key's one slot
/// while a slow request holds it), gives the parts back: it never reached
/// the backend. The slow request's estimate stays taken.
#[tokio::test]
async fn a_request_dropped_before_it_is_sent_gives_its_parts_back() {
    let slow = axum::Router::new().route(
        "/",
        axum::routing::get(|| async {
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            "done"
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, slow).await });
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_minute(600).burst(10))
        .limit("tokens", RateConfig::per_minute(6_000).burst(2_000))
        .bulkhead(portcullis::BulkheadConfig::new(1).queue(4))
        .build()
        .unwrap();
    assert!(manager.key("acct").observe_remaining("tokens", 2_000, None));
    let client = client(&manager);
    let first = client.get(&url).with_extension(Cost::of("tokens", 500));
    let holding = tokio::spawn(first.send());
    while manager.key("acct").snapshot().and_then(|s| s.active) != Some(1) {
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    let second = client.get(&url).with_extension(Cost::of("tokens", 700));
    let dropped = tokio::time::timeout(std::time::Duration::from_millis(100), second.send());
    assert!(dropped.await.is_err(), "the second waits for the slot");
    let left = tokens_left(&manager);
    assert!(
        (1_500..1_600).contains(&left),
        "{left} left: the 700 given back"
    );
    assert!(holding.await.unwrap().unwrap().status().is_success());
}
