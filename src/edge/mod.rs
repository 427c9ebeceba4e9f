//! The edge kit: the one path a call takes through an edge
//! ([`EdgeCall`]), and the answer that carries a call's permit
//! ([`BodyPermit`], and for HTTP [`CallBody`]). The crate's own edges (the
//! reqwest middleware, the client layer and the server layer, features
//! `reqwest` and `tower`) are built on it alone, and so can an edge of
//! your own: another HTTP client, a websocket, a queue consumer. Each
//! edge keeps only what is its own: how it finds a key and a priority,
//! how it calls, how it judges the answer ([`Verdict`]) and how it answers
//! each [`Passage`].
//!
//! # One call through an edge
//!
//! 1. **Admission.** The key's controls admit the call or refuse it. A
//!    client waits as [`acquire`](crate::ThrottleManager::acquire) does; a
//!    server refuses at once what would wait for the rate, and queues for
//!    the bulkhead. Each edge answers a refusal its own way: a 429 or 503,
//!    a gRPC trailers-only status, a middleware error.
//! 2. **The call**, bounded by the manager's
//!    [`call_timeout`](crate::deadline::TimeLimits::call_timeout) from
//!    its admission to the answer's head. A call still without a head then
//!    is dropped and counted as overload, and its slot is free. A call
//!    with a deadline (a `grpc-timeout`, a deadline header, a request's own
//!    timeout, [`with_deadline`](crate::deadline::with_deadline)) is bounded by it
//!    too, and one it ends first is dropped and counted as neutral: the
//!    caller's budget, part of which went on waiting here, not the
//!    backend's overload (see [whose time ran
//!    out](crate::deadline#whose-time-ran-out)). Neither bounds a body:
//!    once the head is in, a stream flows as long as its reader reads.
//! 3. **The head is judged**: its [`Outcome`](crate::outcome::Outcome), by the
//!    edge's classification, and on a client the pause it asks for
//!    (`Retry-After`, a spent `RateLimit`, `grpc-retry-pushback-ms`).
//! 4. **The report.** A success whose head asks for no pause hands its
//!    permit to the answer's body. Any other answer is reported at once,
//!    and then its pause defers the key (in that order: a failure rescales
//!    the rate's debt, which must not stretch the pause).
//!
//! # A call ends when its body ends
//!
//! A body that carries its call's permit holds the key's bulkhead slot
//! until it ends, so a download or a stream counts against the key's
//! concurrency for as long as it flows. It reports its call once:
//!
//! | the body | the call's outcome |
//! |---|---|
//! | read to its end | what its head was judged by; for gRPC, the `grpc-status` of its trailers, which wins |
//! | failed midway (the connection broke) | [`Overloaded`](crate::outcome::Outcome::Overloaded) |
//! | dropped before its end | what its head was judged by (the trailers' status if they came) |
//!
//! A dropped body reports what its head said because the reader's choice
//! says nothing about the backend, and its head did: a 2xx whose body the
//! reader drops unread is a success, so code that reads only the status
//! still teaches the key's rate. The slot is free at the drop.
//! `release_at_headers` on the middleware and the server layer ends every
//! call at its head instead.

#[cfg(any(feature = "reqwest", feature = "tower"))]
mod body;
mod carried;
mod flow;
#[cfg(feature = "tower")]
mod future;
#[cfg(any(feature = "reqwest", feature = "tower"))]
mod status;

#[cfg(feature = "sqlx")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlx")))]
#[doc(inline)]
pub use crate::database;
#[cfg(any(feature = "reqwest", feature = "tower"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "reqwest", feature = "tower"))))]
#[doc(inline)]
pub use crate::grpc;
#[cfg(any(feature = "reqwest", feature = "tower"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "reqwest", feature = "tower"))))]
pub use body::CallBody;
pub use carried::BodyPermit;
pub use flow::{AdmitAs, EdgeCall, Judged, Passage, Verdict};
#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub use future::{ResponseBody, ResponseFuture};
#[cfg(any(feature = "reqwest", feature = "tower"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "reqwest", feature = "tower"))))]
pub use status::status_outcome;

/// The service to call now, out of a tower service `inner` that was
/// polled ready: tower's rule is that the clone polled ready serves the
/// call, so `inner` keeps a fresh clone for the next one.
#[cfg(feature = "tower")]
pub(crate) fn take_ready<S: Clone>(inner: &mut S) -> S {
    let clone = inner.clone();
    std::mem::replace(inner, clone)
}
