//! The README's quick start over `https://`: `cargo run --features reqwest
//! --example quick_start -- https://…`, exactly as the README gives it,
//! against a TLS server on loopback. The server's certificate is signed
//! by a test CA kept beside this file (`tests/support/tls`, valid until
//! 2126), which the example's client trusts through `SSL_CERT_FILE`, as
//! it would trust the system's roots.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

fn tls_dir() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/tls"))
}

/// Serves 200 "hello" over TLS as `localhost` on a loopback port; returns
/// the port and the count of requests served.
async fn serve_tls() -> (u16, Arc<AtomicUsize>) {
    let certs = CertificateDer::pem_file_iter(tls_dir().join("localhost.pem"))
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(tls_dir().join("localhost.key")).unwrap();
    let config = ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let served = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&served);
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let acceptor = acceptor.clone();
            let count = Arc::clone(&count);
            tokio::spawn(async move {
                let Ok(stream) = acceptor.accept(stream).await else {
                    return;
                };
                let hello = service_fn(move |_request| {
                    count.fetch_add(1, Ordering::SeqCst);
                    async {
                        Ok::<_, std::convert::Infallible>(hyper::Response::new(
                            http_body_util::Full::new(bytes::Bytes::from_static(b"hello")),
                        ))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), hello)
                    .await;
            });
        }
    });
    (port, served)
}

#[tokio::test]
async fn the_quick_start_fetches_https_pages() {
    let (port, served) = serve_tls().await;
    let urls: Vec<String> = (0..3)
        .map(|page| format!("https://localhost:{port}/page/{page}"))
        .collect();
    let run = tokio::process::Command::new(env!("CARGO"))
        .args([
            "run",
            "-q",
            "--features",
            "reqwest",
            "--example",
            "quick_start",
            "--",
        ])
        .args(&urls)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("SSL_CERT_FILE", tls_dir().join("ca.pem"))
        .env_remove("SSL_CERT_DIR")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    for url in &urls {
        assert!(stdout.contains(&format!("{url}: 200 OK")), "{stdout}");
    }
    assert_eq!(served.load(Ordering::SeqCst), 3);
}
