//! What several test binaries share: a buffer that a `tracing` subscriber
//! writes its events into, to read them back.

// Each test binary compiles this module on its own and uses part of it.
#![allow(dead_code)]

pub(crate) mod latency_shape;
pub(crate) mod slow_body;

use std::future::Future;
use std::io::Write;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

/// `future`, or a failure naming `what` if it is still pending after a
/// minute of the test's clock. On virtual time the clock jumps there as
/// soon as nothing else can happen, so a call that waits for what never
/// comes fails at once with the test's name, not at CI's timeout.
pub(crate) async fn bounded<F: Future>(what: &str, future: F) -> F::Output {
    match tokio::time::timeout(Duration::from_secs(60), future).await {
        Ok(output) => output,
        Err(_) => panic!("{what}: still waiting after a minute"),
    }
}

/// Held by a test that measures real time or loads the CPU, so that no
/// other such test of its binary runs at once.
pub(crate) fn alone() -> MutexGuard<'static, ()> {
    static ALONE: Mutex<()> = Mutex::new(());
    ALONE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Starts capturing events: the binary's one subscriber (installed at the
/// first call), its buffer cleared, and a lock that keeps every other
/// capturing test out until the guard is dropped.
pub(crate) fn capture() -> (MutexGuard<'static, ()>, Captured) {
    static CAPTURED: OnceLock<Captured> = OnceLock::new();
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let one_at_a_time = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let captured = CAPTURED.get_or_init(Captured::install);
    captured.clear();
    (one_at_a_time, captured.clone())
}

/// Collects everything a `fmt` subscriber writes.
#[derive(Clone, Default)]
pub(crate) struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    /// Installs the process's one global subscriber, at debug level,
    /// writing into a new buffer; returns the buffer. Through
    /// [`capture`], which installs it once.
    fn install() -> Self {
        let captured = Captured::default();
        let writer = captured.clone();
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .without_time()
            .with_writer(move || writer.clone())
            .init();
        captured
    }

    /// A subscriber at debug level for this thread only, until the guard
    /// is dropped, writing into a new buffer (for a test on a
    /// current-thread runtime, whose tasks all run on its thread).
    pub(crate) fn on_this_thread() -> (Self, tracing::subscriber::DefaultGuard) {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .without_time()
            .with_writer(move || writer.clone())
            .finish();
        (captured, tracing::subscriber::set_default(subscriber))
    }

    /// Every line written so far.
    pub(crate) fn lines(&self) -> Vec<String> {
        lines(self.0.lock().unwrap().clone())
    }

    /// Every line written so far, emptying the buffer.
    pub(crate) fn take(&self) -> Vec<String> {
        lines(std::mem::take(&mut *self.0.lock().unwrap()))
    }

    pub(crate) fn clear(&self) {
        self.0.lock().unwrap().clear();
    }
}

fn lines(bytes: Vec<u8>) -> Vec<String> {
    String::from_utf8(bytes)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Starts an HTTP server on a loopback port of its own that serves at most
/// `limit` requests at once, each in `service`, and answers 503 beyond, as
/// a backend with N workers and no queue does. Returns its URL.
pub(crate) async fn serve_at_most(limit: usize, service: std::time::Duration) -> String {
    serve_shaped(limit, latency_shape::Shape::Constant, service).await
}

/// As [`serve_at_most`], each request taking a latency of `shape` whose
/// mean is about `mean` (drawn from a fixed seed).
pub(crate) async fn serve_shaped(
    limit: usize,
    shape: latency_shape::Shape,
    mean: std::time::Duration,
) -> String {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use axum::extract::State;
    use axum::http::StatusCode;
    use latency_shape::{Draws, Shape};

    struct Limited {
        in_flight: AtomicUsize,
        limit: usize,
        shape: Shape,
        mean: std::time::Duration,
        draws: Mutex<Draws>,
    }

    async fn limited(State(server): State<Arc<Limited>>) -> StatusCode {
        let in_flight = server.in_flight.fetch_add(1, Ordering::AcqRel) + 1;
        if in_flight > server.limit {
            server.in_flight.fetch_sub(1, Ordering::AcqRel);
            return StatusCode::SERVICE_UNAVAILABLE;
        }
        let u = server.draws.lock().unwrap().next();
        let latency = server
            .shape
            .latency(server.mean, u, in_flight as u32, server.limit as u32);
        tokio::time::sleep(latency).await;
        server.in_flight.fetch_sub(1, Ordering::AcqRel);
        StatusCode::OK
    }

    let server = Limited {
        in_flight: AtomicUsize::new(0),
        limit,
        shape,
        mean,
        draws: Mutex::new(Draws(7)),
    };
    let app = axum::Router::new()
        .route("/work", axum::routing::get(limited))
        .with_state(Arc::new(server));
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/work")
}
