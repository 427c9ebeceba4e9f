//! [`CallBody`]: a response body that carries its call's permit, so that
//! an HTTP call ends when its body ends, not when its head arrives. Both
//! edges use it: the server layer for the body it sends, the client
//! middleware for the body the caller reads.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use http_body::{Body, Frame, SizeHint};

use crate::grpc;
use crate::outcome::Outcome;
use crate::permit::OwnedPermit;

pin_project_lite::pin_project! {
    /// `body`, holding the permit of the call it answers until it ends.
    ///
    /// The permit is reported once: with the outcome the head was judged
    /// by when the body ends (or, for gRPC, the `grpc-status` of its
    /// trailers), as [`Overloaded`](Outcome::Overloaded) when
    /// it fails midway (a backend that breaks off a response is in
    /// trouble), and as neutral when it is dropped before its end (the
    /// reader's choice says nothing about the backend). Until then the
    /// call holds its bulkhead slot, so a stream counts against the key's
    /// concurrency for as long as it flows.
    #[derive(Debug)]
    pub(crate) struct CallBody<B> {
        #[pin]
        body: B,
        // `None` once reported.
        permit: Option<OwnedPermit>,
        at_end: Outcome,
    }
}

impl<B: Body> CallBody<B> {
    /// `body` carrying `permit`, to be reported `at_end` when the body
    /// ends; a body already at its end reports at once.
    pub(crate) fn new(body: B, permit: OwnedPermit, at_end: Outcome) -> Self {
        let permit = if body.is_end_stream() {
            permit.report(at_end);
            None
        } else {
            Some(permit)
        };
        Self {
            body,
            permit,
            at_end,
        }
    }
}

#[cfg(feature = "tower")]
impl<B> CallBody<B> {
    /// `body` of a call already reported.
    pub(crate) fn reported(body: B) -> Self {
        Self {
            body,
            permit: None,
            at_end: Outcome::Neutral,
        }
    }
}

impl<B: Body> Body for CallBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let mut this = self.project();
        let frame = ready!(this.body.as_mut().poll_frame(cx));
        // A gRPC call's status comes in its trailers, and is its outcome.
        if let Some(code) = frame
            .as_ref()
            .and_then(|frame| frame.as_ref().ok()?.trailers_ref())
            .and_then(grpc::status_in)
        {
            *this.at_end = grpc::outcome_of(code);
        }
        let ended = match &frame {
            None => Some(*this.at_end),
            Some(Err(_)) => Some(Outcome::Overloaded),
            // The last frame: report before handing it over, so that the
            // slot is free by the time the reader sees the end.
            Some(Ok(_)) if this.body.is_end_stream() => Some(*this.at_end),
            Some(Ok(_)) => None,
        };
        if let Some(outcome) = ended {
            if let Some(permit) = this.permit.take() {
                permit.report(outcome);
            }
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use bytes::Bytes;
    use http::{HeaderMap, HeaderValue};
    use http_body_util::BodyExt;

    use super::*;
    use crate::{Priority, ThrottleConfig, ThrottleManager};

    /// A body that yields its frames, then ends.
    struct Frames(VecDeque<Result<Frame<Bytes>, std::io::Error>>);

    impl Body for Frames {
        type Data = Bytes;
        type Error = std::io::Error;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
            Poll::Ready(self.0.pop_front())
        }

        fn is_end_stream(&self) -> bool {
            self.0.is_empty()
        }
    }

    fn data() -> Result<Frame<Bytes>, std::io::Error> {
        Ok(Frame::data(Bytes::from_static(b"message")))
    }

    fn trailers(grpc_status: &'static str) -> Result<Frame<Bytes>, std::io::Error> {
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", HeaderValue::from_static(grpc_status));
        Ok(Frame::trailers(trailers))
    }

    /// Reads a call's body carrying its permit as far as `read` frames,
    /// then drops it; what the key's throttle counted (requests, accepts).
    async fn counted(frames: Vec<Result<Frame<Bytes>, std::io::Error>>, read: usize) -> (u64, u64) {
        let manager = ThrottleManager::<String>::builder()
            .throttle(ThrottleConfig::new())
            .random_source(|| 0.999)
            .build()
            .unwrap();
        let permit = manager.try_acquire_owned("k", Priority::HIGH).unwrap();
        let mut body = CallBody::new(Frames(frames.into()), permit, Outcome::Success);
        for _ in 0..read {
            let _ = body.frame().await;
        }
        drop(body);
        let high = manager.snapshot("k").unwrap().priorities[0];
        (high.requests, high.accepts)
    }

    #[tokio::test]
    async fn a_body_read_to_its_end_is_the_heads_outcome() {
        assert_eq!(counted(vec![data(), data()], 2).await, (1, 1));
    }

    #[tokio::test]
    async fn grpc_trailers_say_the_outcome() {
        assert_eq!(counted(vec![data(), trailers("0")], 2).await, (1, 1));
        assert_eq!(counted(vec![data(), trailers("14")], 2).await, (1, 0));
        // NOT_FOUND: neutral, a request and an accept.
        assert_eq!(counted(vec![data(), trailers("5")], 2).await, (1, 1));
    }

    #[tokio::test]
    async fn a_body_that_fails_midway_is_overload() {
        let broken = Err(std::io::Error::other("reset"));
        assert_eq!(counted(vec![data(), broken, data()], 2).await, (1, 0));
    }

    #[tokio::test]
    async fn a_body_dropped_early_is_neutral_even_if_it_would_have_failed() {
        assert_eq!(counted(vec![data(), trailers("14")], 1).await, (1, 1));
    }
}
