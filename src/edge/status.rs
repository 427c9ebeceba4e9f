//! The one table by which every HTTP edge judges an answer's status.

use http::StatusCode;

use super::AdmitAs;
use crate::outcome::Outcome;

/// What an HTTP answer's status says of the call, for the client edges
/// (the reqwest middleware, the client layer) and the server layer alike:
///
/// | status | outcome |
/// |---|---|
/// | 1xx, 2xx, 3xx | [`Success`](Outcome::Success) |
/// | 429 Too Many Requests, 503 Service Unavailable | [`Overloaded`](Outcome::Overloaded): the answerer says it is at capacity |
/// | 502 Bad Gateway, 504 Gateway Timeout | [`Overloaded`](Outcome::Overloaded): a gateway's upstream failed or ran out of time |
/// | 408 Request Timeout, read by the server layer (its handler, or a timeout layer inside it, ran out of time) | [`Overloaded`](Outcome::Overloaded) |
/// | 408 Request Timeout, read by a client | [`Neutral`](Outcome::Neutral): the time that ran out was the client's own (a portcullis server answers 408 to a request that could not start before its deadline) |
/// | 500 Internal Server Error | [`Neutral`](Outcome::Neutral): a bug, not a capacity problem; one request that always fails must not slow a healthy service down |
/// | any other 4xx or 5xx (a 404 says nothing about capacity) | [`Neutral`](Outcome::Neutral) |
///
/// `side` is the edge that reads the answer: [`AdmitAs::Client`] or
/// [`AdmitAs::Server`]. A gRPC answer is judged by its `grpc-status`
/// instead ([`grpc`](crate::edge::grpc)). Each edge's classifier
/// (`classify_by`) overrides the table and can fall back on it.
///
/// ```
/// use http::StatusCode;
/// use portcullis::outcome::Outcome;
/// use portcullis::edge::{AdmitAs, status_outcome};
///
/// for side in [AdmitAs::Client, AdmitAs::Server] {
///     assert_eq!(status_outcome(StatusCode::OK, side), Outcome::Success);
///     assert_eq!(status_outcome(StatusCode::SERVICE_UNAVAILABLE, side), Outcome::Overloaded);
///     assert_eq!(status_outcome(StatusCode::INTERNAL_SERVER_ERROR, side), Outcome::Neutral);
/// }
/// assert_eq!(status_outcome(StatusCode::REQUEST_TIMEOUT, AdmitAs::Server), Outcome::Overloaded);
/// assert_eq!(status_outcome(StatusCode::REQUEST_TIMEOUT, AdmitAs::Client), Outcome::Neutral);
/// ```
pub fn status_outcome(status: StatusCode, side: AdmitAs) -> Outcome {
    match status {
        StatusCode::TOO_MANY_REQUESTS
        | StatusCode::SERVICE_UNAVAILABLE
        | StatusCode::BAD_GATEWAY
        | StatusCode::GATEWAY_TIMEOUT => Outcome::Overloaded,
        StatusCode::REQUEST_TIMEOUT if side == AdmitAs::Server => Outcome::Overloaded,
        status if status.is_client_error() || status.is_server_error() => Outcome::Neutral,
        _ => Outcome::Success,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every status from 100 to 599, on both sides: the two sides differ
    /// on 408 alone.
    #[test]
    fn the_sides_agree_on_every_status_but_408() {
        for code in 100..600 {
            let status = StatusCode::from_u16(code).unwrap();
            let (client, server) = (
                status_outcome(status, AdmitAs::Client),
                status_outcome(status, AdmitAs::Server),
            );
            if code == 408 {
                assert_eq!((client, server), (Outcome::Neutral, Outcome::Overloaded));
            } else {
                assert_eq!(client, server, "{code}");
            }
            let expected = match code {
                429 | 502 | 503 | 504 => Outcome::Overloaded,
                408 => client,
                400..=599 => Outcome::Neutral,
                _ => Outcome::Success,
            };
            assert_eq!(client, expected, "{code}");
        }
    }
}
