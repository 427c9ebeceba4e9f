//! gRPC at the edges (features `tower` or `reqwest`): how a gRPC status
//! code is judged, and the trailers-only answer a refused gRPC call gets.
//!
//! gRPC carries its outcome in `grpc-status`, not in the HTTP status: in
//! the response headers when the call fails before any message (a
//! "trailers-only" answer, HTTP 200), else in the trailers after the body.
//! The server layer and the client layer read both, so an overloaded gRPC
//! backend is not counted as a success.
//!
//! | `grpc-status` | outcome |
//! |---|---|
//! | 0 `OK` | [`Success`](Outcome::Success) |
//! | 4 `DEADLINE_EXCEEDED`, 8 `RESOURCE_EXHAUSTED`, 14 `UNAVAILABLE` | [`Overloaded`](Outcome::Overloaded) |
//! | 4 `DEADLINE_EXCEEDED` on a call that carried a deadline (`grpc-timeout`) | [`Neutral`](Outcome::Neutral): the caller's deadline ran out ([`outcome_under_deadline`]) |
//! | any other (3 `INVALID_ARGUMENT`, 5 `NOT_FOUND`, 7 `PERMISSION_DENIED`, 16 `UNAUTHENTICATED`, 1 `CANCELLED`, 13 `INTERNAL`, ...) | [`Neutral`](Outcome::Neutral) |
//!
//! A refused gRPC call is answered as gRFC A6 expects: HTTP 200,
//! `grpc-status` 8 for the rate and the key space, 14 for the throttle and
//! the bulkhead, 4 for a call that could not start before its deadline, a
//! `grpc-message` saying why, and `grpc-retry-pushback-ms` when the wait
//! is known.
//!
//! A call's `grpc-timeout` is its deadline: the server layer admits and
//! runs it under [`with_deadline`](crate::deadline::with_deadline), and the client
//! layer sends a caller's deadline on as `grpc-timeout`.

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use http::{Response, StatusCode};

use crate::error::{RejectReason, Rejected};
use crate::outcome::Outcome;

/// `grpc-status`: the call's status code.
const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
/// `grpc-message`: what went wrong, percent-encoded.
const GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");
/// `grpc-retry-pushback-ms`: how long the client should wait (gRFC A6).
const GRPC_PUSHBACK: HeaderName = HeaderName::from_static("grpc-retry-pushback-ms");

/// `RESOURCE_EXHAUSTED`.
const RESOURCE_EXHAUSTED: u8 = 8;
/// `UNAVAILABLE`.
const UNAVAILABLE: u8 = 14;
/// `INVALID_ARGUMENT`.
const INVALID_ARGUMENT: u8 = 3;
/// `INTERNAL`.
const INTERNAL: u8 = 13;
/// `DEADLINE_EXCEEDED`.
const DEADLINE_EXCEEDED: u8 = 4;
/// `grpc-timeout`: how long the caller waits for the call (its deadline).
const GRPC_TIMEOUT: HeaderName = HeaderName::from_static("grpc-timeout");

/// The deadline a gRPC call's `grpc-timeout` header gives, as a time
/// from now: 1 to 8 digits and a unit (`H`, `M`, `S`, `m`, `u`, `n`), as
/// the gRPC wire format has it. Anything else is no timeout (`None`):
/// the header comes from the network.
///
/// ```
/// use http::HeaderMap;
/// use portcullis::edge::grpc;
/// use std::time::Duration;
///
/// let mut headers = HeaderMap::new();
/// headers.insert("grpc-timeout", "250m".parse().unwrap());
/// assert_eq!(grpc::timeout_in(&headers), Some(Duration::from_millis(250)));
/// headers.insert("grpc-timeout", "123456789S".parse().unwrap()); // 9 digits
/// assert_eq!(grpc::timeout_in(&headers), None);
/// ```
pub fn timeout_in(headers: &HeaderMap) -> Option<std::time::Duration> {
    let value = headers.get(GRPC_TIMEOUT)?.as_bytes();
    let (&unit, digits) = value.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let amount: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    let nanos_per = match unit {
        b'H' => 3_600_000_000_000,
        b'M' => 60_000_000_000,
        b'S' => 1_000_000_000,
        b'm' => 1_000_000,
        b'u' => 1_000,
        b'n' => 1,
        _ => return None,
    };
    // 99,999,999 hours do not fit u64 nanoseconds: saturate.
    Some(std::time::Duration::from_nanos(
        amount.saturating_mul(nanos_per),
    ))
}

/// `timeout` as a `grpc-timeout` header value: whole milliseconds,
/// rounded up (at least 1), in as few digits as the format allows.
///
/// ```
/// use portcullis::edge::grpc;
/// use std::time::Duration;
///
/// assert_eq!(grpc::timeout_value(Duration::from_micros(1_500)), "2m");
/// assert_eq!(grpc::timeout_value(Duration::from_secs(3 * 86_400)), "259200S");
/// ```
pub fn timeout_value(timeout: std::time::Duration) -> HeaderValue {
    let millis = timeout.as_nanos().div_ceil(1_000_000).max(1);
    let text = if millis < 100_000_000 {
        format!("{millis}m")
    } else {
        let seconds = millis.div_ceil(1_000);
        if seconds < 100_000_000 {
            format!("{seconds}S")
        } else {
            format!("{}H", seconds.div_ceil(3_600).min(99_999_999))
        }
    };
    HeaderValue::from_str(&text).expect("digits and a unit")
}

/// The outcome of a call that ended with gRPC status `code` (see the
/// module's table).
///
/// ```
/// use portcullis::outcome::Outcome;
/// use portcullis::edge::grpc;
///
/// assert_eq!(grpc::outcome_of(0), Outcome::Success);
/// assert_eq!(grpc::outcome_of(14), Outcome::Overloaded); // UNAVAILABLE
/// assert_eq!(grpc::outcome_of(5), Outcome::Neutral); // NOT_FOUND
/// ```
pub fn outcome_of(code: u32) -> Outcome {
    match code {
        0 => Outcome::Success,
        4 | 8 | 14 => Outcome::Overloaded,
        _ => Outcome::Neutral,
    }
}

/// The outcome of a call that carried a deadline (its `grpc-timeout`)
/// and ended with gRPC status `code`: as [`outcome_of`], but for 4
/// `DEADLINE_EXCEEDED`, which then most likely says the caller's own
/// deadline ran out, part of it spent waiting before the call was sent.
/// That is the caller's budget, not the backend's overload (see [whose
/// time ran out](crate::deadline#whose-time-ran-out)): neutral. The edges
/// judge a call this way whenever it has a deadline.
///
/// ```
/// use portcullis::outcome::Outcome;
/// use portcullis::edge::grpc;
///
/// assert_eq!(grpc::outcome_under_deadline(4), Outcome::Neutral);
/// assert_eq!(grpc::outcome_of(4), Outcome::Overloaded); // no deadline sent: the server's own
/// assert_eq!(grpc::outcome_under_deadline(14), Outcome::Overloaded);
/// ```
pub fn outcome_under_deadline(code: u32) -> Outcome {
    match code {
        4 => Outcome::Neutral,
        code => outcome_of(code),
    }
}

/// The `grpc-status` in `headers` (a trailers-only answer's head, or the
/// trailers), if there is one that reads as a number.
///
/// ```
/// use http::{HeaderMap, HeaderValue};
/// use portcullis::edge::grpc;
///
/// let mut trailers = HeaderMap::new();
/// trailers.insert("grpc-status", HeaderValue::from_static("8"));
/// assert_eq!(grpc::status_in(&trailers), Some(8));
/// assert_eq!(grpc::status_in(&HeaderMap::new()), None);
/// ```
pub fn status_in(headers: &HeaderMap) -> Option<u32> {
    headers.get(GRPC_STATUS)?.to_str().ok()?.trim().parse().ok()
}

/// The wait a gRPC answer asks for in `grpc-retry-pushback-ms`; a negative
/// or unreadable value asks for none (gRFC A6: the client does not retry
/// then). The client layer and middleware defer the key by it.
///
/// ```
/// use http::{HeaderMap, HeaderValue};
/// use portcullis::edge::grpc;
/// use std::time::Duration;
///
/// let mut headers = HeaderMap::new();
/// headers.insert("grpc-retry-pushback-ms", HeaderValue::from_static("250"));
/// assert_eq!(grpc::pushback_in(&headers), Some(Duration::from_millis(250)));
/// headers.insert("grpc-retry-pushback-ms", HeaderValue::from_static("-1"));
/// assert_eq!(grpc::pushback_in(&headers), None);
/// ```
pub fn pushback_in(headers: &HeaderMap) -> Option<std::time::Duration> {
    let ms: u64 = headers
        .get(GRPC_PUSHBACK)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(std::time::Duration::from_millis(ms))
}

/// Whether a request (or response) with these headers is gRPC:
/// `content-type: application/grpc`, `application/grpc+proto`, ...: for an
/// edge that answers gRPC calls in gRPC's way (HTTP 200, the status in
/// `grpc-status`) and others in HTTP's.
///
/// ```
/// use http::{HeaderMap, HeaderValue, header::CONTENT_TYPE};
/// use portcullis::edge::grpc;
///
/// let mut headers = HeaderMap::new();
/// headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc+proto"));
/// assert!(grpc::is_grpc(&headers));
/// headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc-web"));
/// assert!(!grpc::is_grpc(&headers));
/// ```
pub fn is_grpc(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| {
            value
                .strip_prefix("application/grpc")
                .is_some_and(|rest| rest.is_empty() || rest.starts_with(['+', ';']))
        })
}

/// The gRPC status code a refused call is answered with: 8
/// `RESOURCE_EXHAUSTED` when the client asked for more than its share (the
/// rate, a cost above the burst, a full key space), 14 `UNAVAILABLE` when
/// the service is short of capacity (the throttle, the bulkhead), 4
/// `DEADLINE_EXCEEDED` when the call could not start before its deadline
/// ([`with_deadline`](crate::deadline::with_deadline)), 13 `INTERNAL` for the
/// server's own mistakes (an invalid priority it chose, a key named
/// twice).
///
/// ```
/// use portcullis::{RateConfig, Priority, ThrottleManager, grpc};
///
/// let manager = ThrottleManager::<String>::builder().rate(RateConfig::per_second(1)).build()?;
/// manager.check("client").unwrap();
/// let rejected = manager.try_acquire("client", Priority::HIGH).unwrap_err();
/// assert_eq!(grpc::code_of(&rejected), 8);
/// # Ok::<(), portcullis::error::ConfigError>(())
/// ```
pub fn code_of(rejected: &Rejected) -> u32 {
    u32::from(match rejected.reason() {
        RejectReason::RateLimited | RejectReason::CostAboveBurst | RejectReason::KeySpaceFull => {
            RESOURCE_EXHAUSTED
        }
        RejectReason::InvalidPriority | RejectReason::DuplicateKey => INTERNAL,
        RejectReason::Deadline => DEADLINE_EXCEEDED,
        _ => UNAVAILABLE,
    })
}

/// The trailers-only gRPC answer to a refused call: HTTP 200,
/// `grpc-status` [`code_of`] the refusal, a `grpc-message` saying why, and
/// `grpc-retry-pushback-ms` when the wait is known. A gRPC client reads it
/// as that status (tonic: `Code::ResourceExhausted`, `Code::Unavailable`),
/// with the pushback in its metadata.
///
/// ```
/// use portcullis::{RateConfig, Priority, ThrottleManager, grpc};
///
/// let manager = ThrottleManager::<String>::builder()
///     .rate(RateConfig::per_second(1))
///     .clock(portcullis::clock::ManualClock::new()) // time stands still here
///     .build()?;
/// manager.check("client").unwrap();
/// let rejected = manager.try_acquire("client", Priority::HIGH).unwrap_err();
/// let answer = grpc::refusal(&rejected);
/// assert_eq!(answer.status(), 200);
/// assert_eq!(answer.headers()["grpc-status"], "8");
/// assert_eq!(answer.headers()["grpc-message"], "rate limited");
/// assert_eq!(answer.headers()["grpc-retry-pushback-ms"], "1000");
/// # Ok::<(), portcullis::error::ConfigError>(())
/// ```
pub fn refusal(rejected: &Rejected) -> Response<Bytes> {
    let mut answer = trailers_only(code_of(rejected), &rejected.reason().to_string());
    if let Some(after) = rejected.retry_after() {
        let ms = u64::try_from(after.as_millis()).unwrap_or(u64::MAX);
        answer
            .headers_mut()
            .insert(GRPC_PUSHBACK, HeaderValue::from(ms));
    }
    answer
}

/// The trailers-only answer to a gRPC call the request itself got wrong
/// (no key, a priority that is not a level): 3 `INVALID_ARGUMENT`, with
/// `problem` as its `grpc-message`.
///
/// ```
/// use portcullis::edge::grpc;
///
/// let answer = grpc::invalid_argument("no x-api-key");
/// assert_eq!(answer.status(), 200);
/// assert_eq!(answer.headers()["grpc-status"], "3");
/// assert_eq!(answer.headers()["grpc-message"], "no x-api-key");
/// ```
pub fn invalid_argument(problem: &str) -> Response<Bytes> {
    trailers_only(u32::from(INVALID_ARGUMENT), problem)
}

/// The trailers-only answer to a gRPC call dropped unfinished when a time
/// limit ran out (the call timeout, or the caller's deadline; an edge
/// has it as [`Passage::TimedOut`](crate::edge::Passage::TimedOut)): 4
/// `DEADLINE_EXCEEDED`, its message naming the limit.
///
/// ```
/// use portcullis::deadline::TimeLimits;
/// use portcullis::edge::grpc;
/// use portcullis::{CallError, Priority, RateConfig, ThrottleManager};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let manager = ThrottleManager::<String>::builder()
///     .rate(RateConfig::adaptive(10.0))
///     .time_limits(TimeLimits::new().call_timeout(Duration::from_secs(1)))
///     .build()?;
/// let slow = manager.call("api", Priority::HIGH, || async {
///     tokio::time::sleep(Duration::from_secs(2)).await;
///     Ok::<_, std::io::Error>(())
/// });
/// let Err(CallError::TimedOut(expiry)) = slow.await else { panic!("ran out") };
/// let answer = grpc::timed_out(expiry);
/// assert_eq!(answer.headers()["grpc-status"], "4");
/// # Ok(())
/// # }
/// ```
pub fn timed_out(expiry: crate::deadline::Expiry) -> Response<Bytes> {
    trailers_only(u32::from(DEADLINE_EXCEEDED), &expiry.to_string())
}

/// HTTP 200 with the call's whole status in its head and no body.
fn trailers_only(code: u32, message: &str) -> Response<Bytes> {
    let mut answer = Response::new(Bytes::new());
    *answer.status_mut() = StatusCode::OK;
    let headers = answer.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    headers.insert(GRPC_STATUS, HeaderValue::from(code));
    if let Ok(message) = HeaderValue::from_str(&percent_encoded(message)) {
        headers.insert(GRPC_MESSAGE, message);
    }
    answer
}

/// `message` as `grpc-message` carries it: bytes outside printable ASCII,
/// and `%`, as `%XX` (the gRPC over HTTP/2 spec).
fn percent_encoded(message: &str) -> String {
    let mut encoded = String::with_capacity(message.len());
    for byte in message.bytes() {
        if (0x20..=0x7e).contains(&byte) && byte != b'%' {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::time::Duration;

    fn timeout_of(value: &[u8]) -> Option<Duration> {
        let mut headers = HeaderMap::new();
        headers.insert(GRPC_TIMEOUT, HeaderValue::from_bytes(value).ok()?);
        timeout_in(&headers)
    }

    proptest! {
        /// A `grpc-timeout` from the network never panics, and is a
        /// timeout only in the wire format.
        #[test]
        fn any_grpc_timeout_header_is_read_without_panic(value in proptest::collection::vec(any::<u8>(), 0..12)) {
            if let Some(left) = timeout_of(&value) {
                let (unit, digits) = value.split_last().unwrap();
                prop_assert!(b"HMSmun".contains(unit));
                prop_assert!((1..=8).contains(&digits.len()) && digits.iter().all(u8::is_ascii_digit));
                prop_assert!(left <= Duration::from_nanos(u64::MAX));
            }
        }

        /// What the client layer sends reads back as at least the time
        /// left, within a millisecond (or a second, an hour, for long ones).
        #[test]
        fn a_sent_timeout_reads_back_rounded_up(nanos in 0u64..u64::MAX / 4) {
            let sent = Duration::from_nanos(nanos);
            let value = timeout_value(sent);
            let read = timeout_of(value.as_bytes()).unwrap();
            prop_assert!(read >= sent.min(Duration::from_nanos(u64::MAX)));
            let slack = if read < Duration::from_secs(100_000) {
                Duration::from_millis(1)
            } else {
                Duration::from_secs(3_600)
            };
            prop_assert!(read <= sent.max(Duration::from_millis(1)) + slack, "{sent:?} sent as {value:?}, read {read:?}");
        }
    }

    #[test]
    #[cfg(feature = "tower")]
    fn only_the_grpc_content_types_are_grpc() {
        let with = |value: &'static str| {
            let mut headers = HeaderMap::new();
            headers.insert(CONTENT_TYPE, HeaderValue::from_static(value));
            is_grpc(&headers)
        };
        assert!(with("application/grpc"));
        assert!(with("application/grpc+proto"));
        assert!(with("application/grpc;charset=utf-8"));
        assert!(!with("application/grpc-web"));
        assert!(!with("application/json"));
        assert!(!is_grpc(&HeaderMap::new()));
    }

    #[test]
    fn a_message_is_percent_encoded_outside_printable_ascii() {
        assert_eq!(percent_encoded("rate limited"), "rate limited");
        assert_eq!(percent_encoded("100% full\né"), "100%25 full%0A%C3%A9");
    }

    #[test]
    fn a_pushback_is_whole_milliseconds_and_nothing_else() {
        let with = |value: &'static str| {
            let mut headers = HeaderMap::new();
            headers.insert(GRPC_PUSHBACK, HeaderValue::from_static(value));
            pushback_in(&headers)
        };
        assert_eq!(with("250"), Some(std::time::Duration::from_millis(250)));
        assert_eq!(with("-1"), None);
        assert_eq!(with("soon"), None);
    }

    #[test]
    fn overload_codes_are_overload_and_the_callers_mistakes_are_neutral() {
        for code in [4, 8, 14] {
            assert_eq!(outcome_of(code), Outcome::Overloaded, "{code}");
        }
        for code in [1, 2, 3, 5, 6, 7, 9, 10, 11, 12, 13, 15, 16, 99] {
            assert_eq!(outcome_of(code), Outcome::Neutral, "{code}");
        }
        assert_eq!(outcome_of(0), Outcome::Success);
    }
}
