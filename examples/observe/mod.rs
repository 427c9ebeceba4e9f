//! What the crawl and api_server examples serve beside their work, on a
//! loopback port of its own: the manager's status page at `/status` and
//! its metrics for Prometheus at `/metrics`.

use std::hash::Hash;
use std::net::SocketAddr;

use axum::Router;
use axum::routing::get;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use portcullis::ThrottleManager;
use portcullis::status::StatusPage;

/// Keeps the page up after the example's work for `STATUS_HOLD_SECS`
/// seconds (default none), for a reader who wants to look at it still.
pub(crate) async fn hold() {
    let secs: u64 = std::env::var("STATUS_HOLD_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    if secs > 0 {
        println!("\nthe status page stays up for {secs} s (STATUS_HOLD_SECS)");
        tokio::time::sleep(std::time::Duration::from_secs(secs)).await;
    }
}

/// Installs the Prometheus recorder as the process's metrics recorder:
/// before the manager's first call, so its series land there.
pub(crate) fn install_metrics() -> Result<PrometheusHandle, Box<dyn std::error::Error>> {
    Ok(PrometheusBuilder::new().install_recorder()?)
}

/// Serves `manager`'s status page and `metrics` on a loopback port; its
/// address.
pub(crate) async fn serve<K>(
    manager: &ThrottleManager<K>,
    metrics: PrometheusHandle,
) -> Result<SocketAddr, Box<dyn std::error::Error>>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    let app = Router::new()
        .nest("/status", StatusPage::new(manager)?.router())
        .route("/metrics", get(move || async move { metrics.render() }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(address)
}
