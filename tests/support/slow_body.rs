//! A response body that streams slowly, for tests of calls that end when
//! their body ends: 1 MiB in 16 chunks over about a second, counting how
//! many such bodies are streaming at once.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame};

const CHUNKS: usize = 16;
const CHUNK: usize = 64 * 1024;
const GAP: Duration = Duration::from_micros(62_500);

/// How many [`SlowBody`]s stream now, and the most that ever did at once.
#[derive(Debug, Default)]
pub(crate) struct Streams {
    now: AtomicUsize,
    most: AtomicUsize,
}

impl Streams {
    pub(crate) fn most(&self) -> usize {
        self.most.load(Ordering::SeqCst)
    }

    fn enter(&self) {
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
    }

    fn leave(&self) {
        self.now.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A router whose `/stream` answers a [`SlowBody`] and `/broken` one that
/// breaks off, both counted in `streams`.
pub(crate) fn slow_routes(streams: &Arc<Streams>) -> axum::Router {
    let (whole, broken) = (Arc::clone(streams), Arc::clone(streams));
    axum::Router::new()
        .route(
            "/stream",
            axum::routing::get(move || async move { axum::body::Body::new(SlowBody::new(&whole)) }),
        )
        .route(
            "/broken",
            axum::routing::get(
                move || async move { axum::body::Body::new(SlowBody::failing(&broken)) },
            ),
        )
}

/// A body of 1 MiB sent over about a second, or one that fails after its
/// fourth chunk. It streams from its first poll until it yields its last
/// chunk (or its error), so a body counts as streaming exactly while the
/// call it answers is still going.
pub(crate) struct SlowBody {
    streams: Arc<Streams>,
    left: usize,
    fails: bool,
    streaming: bool,
    gap: Pin<Box<tokio::time::Sleep>>,
}

impl SlowBody {
    pub(crate) fn new(streams: &Arc<Streams>) -> Self {
        Self {
            streams: Arc::clone(streams),
            left: CHUNKS,
            fails: false,
            streaming: false,
            gap: Box::pin(tokio::time::sleep(GAP)),
        }
    }

    pub(crate) fn failing(streams: &Arc<Streams>) -> Self {
        let mut body = Self::new(streams);
        body.fails = true;
        body
    }

    fn stop(&mut self) {
        if std::mem::take(&mut self.streaming) {
            self.streams.leave();
        }
    }
}

impl Body for SlowBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        if self.left == 0 {
            return Poll::Ready(None);
        }
        if !self.streaming && self.left == CHUNKS {
            self.streaming = true;
            self.streams.enter();
        }
        ready!(self.gap.as_mut().poll(cx));
        let next = tokio::time::Instant::now() + GAP;
        self.gap.as_mut().reset(next);
        self.left -= 1;
        if self.fails && self.left == CHUNKS - 4 {
            self.left = 0;
            self.stop();
            return Poll::Ready(Some(Err(std::io::Error::other("the backend broke off"))));
        }
        if self.left == 0 {
            self.stop();
        }
        Poll::Ready(Some(Ok(Frame::data(Bytes::from(vec![0; CHUNK])))))
    }

    fn is_end_stream(&self) -> bool {
        self.left == 0
    }
}

impl Drop for SlowBody {
    fn drop(&mut self) {
        self.stop();
    }
}
