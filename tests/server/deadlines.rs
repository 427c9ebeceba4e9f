#![cfg(feature = "axum")]

//! A client's deadline at the server layer is the client's budget: a
//! handler it cuts short is answered 408 and counted as neutral, so one
//! client's short deadlines never make its key shed for everyone else
//! (real axum server and reqwest client on loopback; what is asserted is
//! counted, not timed).

use std::time::Duration;

use axum::Router;
use axum::routing::get;
use portcullis::server::{KeyExtractor, ThrottleLayer};
use portcullis::{ThrottleConfig, ThrottleManager};

use crate::layer::serve;

/// A tenant's key with a throttle, behind a handler that takes 5 ms.
async fn slow_handler_per_tenant() -> (ThrottleManager<String>, String) {
    let manager = ThrottleManager::<String>::builder()
        .throttle(ThrottleConfig::new())
        .build()
        .unwrap();
    let layer = ThrottleLayer::builder(manager.clone(), KeyExtractor::header("x-tenant"))
        .deadline_header("x-deadline-ms")
        .build()
        .unwrap();
    let app = Router::new()
        .route(
            "/",
            get(|| async {
                tokio::time::sleep(Duration::from_millis(5)).await;
                "done"
            }),
        )
        .layer(layer);
    (manager, serve(app).await)
}

#[tokio::test]
async fn one_clients_short_deadlines_never_make_its_tenant_shed_for_the_others() {
    let (manager, url) = slow_handler_per_tenant().await;
    let client = reqwest::Client::new();
    for _ in 0..40 {
        let response = client
            .get(&url)
            .header("x-tenant", "acme")
            .header("x-deadline-ms", "1")
            .send()
            .await
            .unwrap();
        // 408 at the deadline; 200 only if the handler's answer was ready
        // when a loaded machine got round to both timers. Never a 5xx.
        let status = response.status();
        assert!(
            status == 408 || status == 200,
            "{status}: not the server's failure"
        );
        let body = response.text().await.unwrap();
        if status == 408 {
            assert!(body.contains("caller's deadline"), "{body}");
        }
    }
    let acme = manager.key("acme").snapshot().unwrap();
    for level in &acme.priorities {
        assert_eq!(level.rejection_probability, 0.0, "{acme:?}");
        assert_eq!(level.requests, level.accepts, "nothing counted as overload");
    }
    for _ in 0..40 {
        let response = client
            .get(&url)
            .header("x-tenant", "acme")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
    }
}

#[tokio::test]
async fn a_deadline_already_past_is_answered_408_without_running_the_handler() {
    let (manager, url) = slow_handler_per_tenant().await;
    let response = reqwest::Client::new()
        .get(&url)
        .header("x-tenant", "acme")
        .header("x-deadline-ms", "0")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 408);
    assert_eq!(
        response.text().await.unwrap(),
        "408 Request Timeout: past the caller's deadline\n"
    );
    let acme = manager.key("acme").snapshot().unwrap();
    assert_eq!(acme.priorities[0].requests, 0, "no call was made");
}
