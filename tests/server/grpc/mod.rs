//! The edges with gRPC: a real tonic server behind the server layer and a
//! real tonic client through the client layer, on loopback (feature
//! `tonic`). tonic-health's service stands in for any gRPC service: its
//! `Check` is a unary call, its `Watch` a stream that stays open.

mod client;
mod server;

use std::net::SocketAddr;

use tonic::transport::{Channel, Endpoint};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

/// Issue 32's public contract, exactly as written (it must compile).
#[allow(dead_code)]
async fn grpc() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    use portcullis::client::ThrottleClientLayer;
    use portcullis::server::{KeyExtractor, ThrottleLayer};
    use portcullis::{RateConfig, ThrottleManager};

    let per_client = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_second(20))
        .build()?;
    let (_reporter, health) = tonic_health::server::health_reporter();
    let server = tonic::transport::Server::builder()
        .layer(ThrottleLayer::new(per_client, KeyExtractor::peer_ip()))
        .add_service(health);
    let _ = server;

    let per_host = ThrottleManager::<String>::builder()
        .rate(RateConfig::adaptive(10.0))
        .build()?;
    let channel = tonic::transport::Endpoint::from_static("http://127.0.0.1:50051").connect_lazy();
    let channel = tower::ServiceBuilder::new()
        .layer(ThrottleClientLayer::new(per_host))
        .service(channel);
    let _client = tonic_health::pb::health_client::HealthClient::new(channel);
    Ok(())
}

/// A loopback listener and its address, for a server to take.
async fn listener() -> (tokio::net::TcpListener, SocketAddr) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    (listener, addr)
}

/// A plain channel to `addr`.
async fn channel(addr: SocketAddr) -> Channel {
    Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

fn check() -> HealthCheckRequest {
    HealthCheckRequest {
        service: String::new(),
    }
}

/// One health check through `client`: its status code.
async fn status_of<T>(client: &mut HealthClient<T>) -> tonic::Code
where
    T: tonic::client::GrpcService<tonic::body::Body>,
    T::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    T::ResponseBody: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    <T::ResponseBody as http_body::Body>::Error:
        Into<Box<dyn std::error::Error + Send + Sync>> + Send,
{
    match client.check(check()).await {
        Ok(_) => tonic::Code::Ok,
        Err(status) => status.code(),
    }
}
