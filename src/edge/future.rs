//! What the tower edges answer with: [`ResponseFuture`] and
//! [`ResponseBody`], for the server layer's
//! [`ThrottleService`](crate::server::ThrottleService) and the client
//! layer's [`ThrottleClientService`](crate::client::ThrottleClientService)
//! alike.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

use super::{BodyPermit, CallBody};

type Boxed<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

/// The future of a tower edge's answer
/// ([`ThrottleService`](crate::server::ThrottleService),
/// [`ThrottleClientService`](crate::client::ThrottleClientService)). It
/// holds the request's permit while the inner service runs, so dropping
/// it frees the key's bulkhead slot; a successful answer's
/// [`ResponseBody`] holds it from then on.
pub struct ResponseFuture<T, E> {
    inner: Boxed<T, E>,
}

impl<T, E> ResponseFuture<T, E> {
    pub(crate) fn new(inner: Boxed<T, E>) -> Self {
        Self { inner }
    }
}

impl<T, E> Future for ResponseFuture<T, E> {
    type Output = Result<T, E>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx)
    }
}

impl<T, E> fmt::Debug for ResponseFuture<T, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

pin_project_lite::pin_project! {
    /// The body of a tower edge's answer: the inner service's body, which
    /// holds its call's permit until it ends or is dropped (see
    /// [when a call ends](super#a-call-ends-when-its-body-ends)), or the
    /// layer's own answer to a request it refused.
    #[derive(Debug)]
    pub struct ResponseBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project_lite::pin_project! {
    #[project = KindProjection]
    #[derive(Debug)]
    enum Kind<B> {
        Inner { #[pin] body: CallBody<B> },
        Answer { data: Option<Bytes> },
    }
}

impl<B: Body> ResponseBody<B> {
    /// The inner service's `body`, carrying `permit` until it ends.
    pub(crate) fn carrying(body: B, permit: BodyPermit) -> Self {
        Self::inner(CallBody::new(body, permit))
    }
}

impl<B> ResponseBody<B> {
    /// The inner service's `body`, of a call already reported.
    pub(crate) fn reported(body: B) -> Self {
        Self::inner(CallBody::reported(body))
    }

    fn inner(body: CallBody<B>) -> Self {
        Self {
            kind: Kind::Inner { body },
        }
    }

    /// The layer's own answer, `data`.
    pub(crate) fn answer(data: Bytes) -> Self {
        let data = (!data.is_empty()).then_some(data);
        Self {
            kind: Kind::Answer { data },
        }
    }
}

impl<B> Body for ResponseBody<B>
where
    B: Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match self.project().kind.project() {
            KindProjection::Inner { body } => body.poll_frame(cx),
            KindProjection::Answer { data } => {
                Poll::Ready(data.take().map(|data| Ok(Frame::data(data))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { body } => body.is_end_stream(),
            Kind::Answer { data } => data.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body } => body.size_hint(),
            Kind::Answer { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |data| data.len() as u64))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// hyper reads a body's size hint for `Content-Length` and its end
    /// for an empty body: the layer's own answers give both exactly, and a
    /// handler's body keeps its own.
    #[test]
    fn a_body_says_its_exact_size_and_when_it_is_over() {
        type Answer = ResponseBody<http_body_util::Full<Bytes>>;
        let answer = Answer::answer(Bytes::from_static(b"429 Too Many Requests\n"));
        assert_eq!(answer.size_hint().exact(), Some(22));
        assert!(!answer.is_end_stream());
        let empty = Answer::answer(Bytes::new());
        assert_eq!(empty.size_hint().exact(), Some(0));
        assert!(empty.is_end_stream());
        let inner = ResponseBody::reported(http_body_util::Full::new(Bytes::from_static(b"hello")));
        assert_eq!(inner.size_hint().exact(), Some(5));
        assert!(!inner.is_end_stream());
        let inner_empty = ResponseBody::reported(http_body_util::Empty::<Bytes>::new());
        assert_eq!(inner_empty.size_hint().exact(), Some(0));
        assert!(inner_empty.is_end_stream());
    }
}
