//! [`CallBody`]: a response body that carries its call's permit, so that
//! an HTTP call ends when its body ends, not when its head arrives. Both
//! edges use it: the server layer for the body it sends, the client
//! middleware for the body the caller reads.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use http_body::{Body, Frame, SizeHint};

use crate::outcome::Outcome;
use crate::permit::OwnedPermit;

pin_project_lite::pin_project! {
    /// `body`, holding the permit of the call it answers until it ends.
    ///
    /// The permit is reported once: with the outcome the head was judged
    /// by when the body ends, as [`Overloaded`](Outcome::Overloaded) when
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
