//! [`CallBody`]: a response body that carries its call's permit, so that
//! an HTTP call ends when its body ends, not when its head arrives (the
//! rule is in the [module's docs](super)). Every edge uses it: the server
//! layer for the body it sends, the client edges for the body the caller
//! reads.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use http_body::{Body, Frame, SizeHint};

use super::BodyPermit;
use crate::grpc;
use crate::outcome::Outcome;

pin_project_lite::pin_project! {
    /// `body`, holding the permit of the call it answers until it ends.
    ///
    /// The permit is reported once: with the outcome the head was judged
    /// by when the body ends or is dropped (or, for gRPC, the
    /// `grpc-status` of its trailers), and as
    /// [`Overloaded`](Outcome::Overloaded) when it fails midway (a backend
    /// that breaks off a response is in trouble). Until then the call
    /// holds its bulkhead slot, so a stream counts against the key's
    /// concurrency for as long as it flows.
    #[derive(Debug)]
    pub struct CallBody<B> {
        #[pin]
        body: B,
        // `None` once reported, or for a call reported before its body.
        permit: Option<BodyPermit>,
    }
}

impl<B: Body> CallBody<B> {
    /// `body` carrying `permit` to its end; a body already at its end
    /// reports at once.
    pub fn new(body: B, permit: BodyPermit) -> Self {
        let permit = (!body.is_end_stream()).then_some(permit);
        Self { body, permit }
    }
}

#[cfg(feature = "tower")]
impl<B> CallBody<B> {
    /// `body` of a call already reported.
    pub(crate) fn reported(body: B) -> Self {
        Self { body, permit: None }
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
        if let (Some(permit), Some(code)) = (
            this.permit.as_mut(),
            frame
                .as_ref()
                .and_then(|frame| frame.as_ref().ok()?.trailers_ref())
                .and_then(grpc::status_in),
        ) {
            permit.at_end = match permit.under_deadline {
                true => grpc::outcome_under_deadline(code),
                false => grpc::outcome_of(code),
            };
        }
        // The last frame: report before handing it over, so that the slot
        // is free by the time the reader sees the end.
        let failed = matches!(frame, Some(Err(_)));
        if failed || frame.is_none() || this.body.is_end_stream() {
            if let Some(permit) = this.permit.take() {
                let outcome = if failed {
                    Outcome::Overloaded
                } else {
                    permit.at_end
                };
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
    use crate::{Priority, RateConfig, ThrottleConfig, ThrottleManager};

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

    /// What a key's controls learned from one call: its throttle's counts
    /// (requests, accepts) and its rate, from 1/s. A success raises the
    /// rate, an overload counts a request with no accept and lowers it, a
    /// neutral outcome counts an accept and leaves the rate alone.
    #[derive(Debug, PartialEq)]
    enum Learned {
        Success,
        Overloaded,
        Neutral,
    }

    /// Reads a call's body carrying its permit as far as `read` frames,
    /// then drops it; what the key's controls learned.
    async fn learned(frames: Vec<Result<Frame<Bytes>, std::io::Error>>, read: usize) -> Learned {
        learned_under(frames, read, false).await
    }

    /// [`learned`], for a call that carried a deadline if `under_deadline`.
    async fn learned_under(
        frames: Vec<Result<Frame<Bytes>, std::io::Error>>,
        read: usize,
        under_deadline: bool,
    ) -> Learned {
        let manager = ThrottleManager::<String>::builder()
            .rate(RateConfig::adaptive(1.0).bounds(0.5, 100.0))
            .throttle(ThrottleConfig::new())
            .random_source(|| 0.999)
            .build()
            .unwrap();
        let permit = manager.try_acquire_owned("k", Priority::HIGH).unwrap();
        let mut body = CallBody::new(
            Frames(frames.into()),
            BodyPermit::new(permit, None, Outcome::Success, under_deadline),
        );
        for _ in 0..read {
            let _ = body.frame().await;
        }
        drop(body);
        let snapshot = manager.key("k").snapshot().unwrap();
        let high = snapshot.priorities[0];
        let rate = snapshot.rate.unwrap();
        match (high.requests, high.accepts) {
            (1, 1) if rate > 1.0 => Learned::Success,
            (1, 0) if rate < 1.0 => Learned::Overloaded,
            (1, 1) if rate == 1.0 => Learned::Neutral,
            counts => panic!("counts {counts:?} with a rate of {rate}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_read_to_its_end_is_the_heads_outcome() {
        assert_eq!(learned(vec![data(), data()], 2).await, Learned::Success);
    }

    #[tokio::test(start_paused = true)]
    async fn grpc_trailers_say_the_outcome() {
        assert_eq!(
            learned(vec![data(), trailers("0")], 2).await,
            Learned::Success
        );
        assert_eq!(
            learned(vec![data(), trailers("14")], 2).await,
            Learned::Overloaded
        );
        // NOT_FOUND says nothing about capacity.
        assert_eq!(
            learned(vec![data(), trailers("5")], 2).await,
            Learned::Neutral
        );
    }

    /// `DEADLINE_EXCEEDED` on a call that carried a deadline: its caller's
    /// deadline ran out, not the backend's capacity.
    #[tokio::test(start_paused = true)]
    async fn deadline_exceeded_trailers_are_overload_only_without_a_deadline() {
        let frames = || vec![data(), trailers("4")];
        assert_eq!(learned(frames(), 2).await, Learned::Overloaded);
        assert_eq!(learned_under(frames(), 2, true).await, Learned::Neutral);
        let unavailable = vec![data(), trailers("14")];
        assert_eq!(
            learned_under(unavailable, 2, true).await,
            Learned::Overloaded
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_fails_midway_is_overload() {
        let broken = Err(std::io::Error::other("reset"));
        assert_eq!(
            learned(vec![data(), broken, data()], 2).await,
            Learned::Overloaded
        );
    }

    /// The reader's choice says nothing about the backend; the head did.
    #[tokio::test(start_paused = true)]
    async fn a_body_dropped_early_is_the_heads_outcome() {
        assert_eq!(learned(vec![data(), data()], 0).await, Learned::Success);
        assert_eq!(
            learned(vec![data(), data(), data()], 1).await,
            Learned::Success
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_empty_body_reports_at_once() {
        assert_eq!(learned(vec![], 0).await, Learned::Success);
    }
}
