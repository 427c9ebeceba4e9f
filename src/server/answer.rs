//! What the layer answers for a request it refuses, the headers it adds,
//! and how it judges the inner service's answers.

use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use http::{Response, StatusCode};

use super::key::MissingKey;
use crate::deadline::{Expiry, TimeLimit};
use crate::error::{RejectReason, Rejected};
use crate::outcome::Outcome;
use crate::snapshot::RateRemaining;

/// The mark on every answer a [`ThrottleLayer`](super::ThrottleLayer)
/// makes itself rather than its handler (a refusal, a time limit's answer,
/// a 400 for a request without a key): a response extension.
///
/// A portcullis layer around another one reads it, so that one layer's
/// answers never teach the other: an answer it carries is counted by no
/// control of the outer layer (not as the handler's overload, not as its
/// success), only by the layer that made it. A per-client quota and a
/// service guard in two layers each count their own refusals once. Across
/// the wire nothing changes: a client reads a 429 or a 503 as the signal
/// to slow down that it is. A layer of your own can read it too.
///
/// ```
/// use portcullis::server::{KeyExtractor, LayerAnswer, ThrottleLayer};
/// use portcullis::error::RejectReason;
/// use portcullis::{RateConfig, ThrottleManager};
/// use tower::ServiceExt;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let manager = ThrottleManager::<String>::builder().rate(RateConfig::per_second(1)).build()?;
/// let app = axum::Router::new()
///     .route("/", axum::routing::get(|| async { "ok" }))
///     .layer(ThrottleLayer::new(manager, KeyExtractor::header("x-api-key")));
/// let request = || http::Request::get("/").header("x-api-key", "a").body(axum::body::Body::empty()).unwrap();
/// let served = app.clone().oneshot(request()).await?;
/// assert_eq!(served.extensions().get::<LayerAnswer>(), None); // the handler's
/// let refused = app.oneshot(request()).await?;
/// assert_eq!(refused.status(), 429);
/// let mark = refused.extensions().get::<LayerAnswer>().unwrap();
/// assert_eq!(mark.refused_for(), Some(RejectReason::RateLimited));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayerAnswer {
    refused_for: Option<RejectReason>,
}

impl LayerAnswer {
    /// Why the layer refused the request, if it was a refusal; `None` for
    /// its other answers (a missing key, a time limit that ran out).
    ///
    /// ```
    /// # use portcullis::server::LayerAnswer;
    /// # fn check(mark: &LayerAnswer) {
    /// if let Some(reason) = mark.refused_for() {
    ///     println!("refused by a layer: {reason}");
    /// }
    /// # }
    /// ```
    pub fn refused_for(&self) -> Option<RejectReason> {
        self.refused_for
    }
}

/// `answer`, marked as the layer's own ([`LayerAnswer`]).
pub(super) fn marked<B>(mut answer: Response<B>, refused_for: Option<RejectReason>) -> Response<B> {
    answer.extensions_mut().insert(LayerAnswer { refused_for });
    answer
}

/// `RateLimit-Policy`: the key's quota (draft-ietf-httpapi-ratelimit-headers).
pub(super) const RATE_LIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit`: what is left of it now.
pub(super) const RATE_LIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// The default classification of the inner service's answer:
///
/// | answer | outcome |
/// |---|---|
/// | a `grpc-status` in the head (a gRPC call that failed before any message) | by [`grpc::outcome_of`](crate::edge::grpc::outcome_of) |
/// | an answer a `ThrottleLayer` inside this one made ([`LayerAnswer`]) | counted by no control of this layer: that layer counted it (a refusal there gives this layer's rate token back) |
/// | any other | by its status, as [`status_outcome`](crate::edge::status_outcome) reads it for a server: 429, 502, 503, 504 and 408 (tower-http's `TimeoutLayer`) are [`Overloaded`](Outcome::Overloaded), a 500 or any other 4xx or 5xx [`Neutral`](Outcome::Neutral), the rest [`Success`](Outcome::Success) |
///
/// An error from the inner service (rather than an answer) is
/// [`Overloaded`](Outcome::Overloaded). A gRPC answer whose status comes in
/// its trailers is judged again by that status when its body ends. A key whose rate is a fixed quota
/// (`bounds(r, r)`) does not move on any of them.
///
/// ```
/// use http::{HeaderMap, StatusCode};
/// use portcullis::outcome::Outcome;
/// use portcullis::server::classify;
///
/// assert_eq!(classify(StatusCode::OK, &HeaderMap::new()), Outcome::Success);
/// assert_eq!(classify(StatusCode::SERVICE_UNAVAILABLE, &HeaderMap::new()), Outcome::Overloaded);
/// assert_eq!(classify(StatusCode::INTERNAL_SERVER_ERROR, &HeaderMap::new()), Outcome::Neutral);
/// assert_eq!(classify(StatusCode::NOT_FOUND, &HeaderMap::new()), Outcome::Neutral);
/// ```
pub fn classify(status: StatusCode, headers: &HeaderMap) -> Outcome {
    match crate::grpc::status_in(headers) {
        Some(code) => crate::grpc::outcome_of(code),
        None => crate::edge::status_outcome(status, crate::edge::AdmitAs::Server),
    }
}

/// The HTTP status a server answers a refused request with: 429 Too Many
/// Requests for a rate limit (send
/// [`retry_after`](Rejected::retry_after) as `Retry-After`); 500 for a
/// priority out of range that the server itself chose (a priority the
/// client sent is checked before, and answered 400); 408 Request Timeout
/// for a request that could not start before the client's own deadline
/// ([`RejectReason::Deadline`]); 503 Service Unavailable for the rest: a
/// full bulkhead, a shed call, a full key space are capacity problems on
/// the server's side, not the client sending too fast.
///
/// A deadline refusal is a 4xx because the limit that ran out is the
/// client's: clients and proxies read a 5xx (504 Gateway Timeout
/// included) as the server failing, and would slow down or shed against
/// a healthy server; a 4xx they count as no failure of the server's
/// (this crate's client edges, Envoy's admission control, Linkerd,
/// tower-http's `ServerErrorsAsFailures`). 408 is the one 4xx that says
/// time ran out.
///
/// ```
/// use portcullis::server::status_of;
/// use portcullis::{BulkheadConfig, Priority, RateConfig, ThrottleManager};
///
/// let manager = ThrottleManager::<String>::builder()
///     .rate(RateConfig::adaptive(1.0))
///     .bulkhead(BulkheadConfig::new(1))
///     .clock(portcullis::clock::ManualClock::new())
///     .build()?;
/// let busy = manager.try_acquire("client-1", Priority::HIGH).unwrap();
/// assert_eq!(status_of(&manager.try_acquire("client-1", Priority::HIGH).unwrap_err()), 503);
/// drop(busy);
/// assert_eq!(status_of(&manager.try_acquire("client-1", Priority::HIGH).unwrap_err()), 429);
/// # Ok::<(), portcullis::error::ConfigError>(())
/// ```
pub fn status_of(rejected: &Rejected) -> StatusCode {
    match rejected.reason() {
        RejectReason::RateLimited => StatusCode::TOO_MANY_REQUESTS,
        // The caller's own mistakes, not the client's load.
        RejectReason::InvalidPriority | RejectReason::DuplicateKey => {
            StatusCode::INTERNAL_SERVER_ERROR
        }
        RejectReason::Deadline => StatusCode::REQUEST_TIMEOUT,
        _ => StatusCode::SERVICE_UNAVAILABLE,
    }
}

/// The default answer to a refused request: [`status_of`] (429 for the
/// rate, 503 for the throttle, the bulkhead or a full key space),
/// `Retry-After` when the wait is known, and a one-line text body
/// saying why. For a handler that refuses on its own (a database key's
/// refusal inside a request the layer admitted), this is the whole answer;
/// the layer adds the rate-limit headers to its own.
///
/// ```
/// use portcullis::server::refusal;
/// use portcullis::{Priority, RateConfig, ThrottleManager};
///
/// let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(1.0)).build()?;
/// manager.check("client").unwrap();
/// let rejected = manager.try_acquire("client", Priority::HIGH).unwrap_err();
/// let answer = refusal(&rejected);
/// assert_eq!(answer.status(), 429);
/// assert_eq!(answer.headers()["retry-after"], "1");
/// assert_eq!(answer.body(), "429 Too Many Requests: rate limited\n");
/// # Ok::<(), portcullis::error::ConfigError>(())
/// ```
pub fn refusal(rejected: &Rejected) -> Response<Bytes> {
    let mut answer = text(status_of(rejected), &rejected.reason().to_string());
    if let Some(after) = rejected.retry_after() {
        set_retry_after(answer.headers_mut(), after);
    }
    answer
}

/// The default answer to a request without a key: 400 Bad Request, naming
/// what was missing.
///
/// ```
/// use portcullis::server::{MissingKey, missing_key};
///
/// let answer = missing_key(&MissingKey::new("header `x-api-key`"));
/// assert_eq!(answer.status(), 400);
/// assert_eq!(answer.body(), "400 Bad Request: missing client key: header `x-api-key`\n");
/// ```
pub fn missing_key(missing: &MissingKey) -> Response<Bytes> {
    bad_request(&missing.to_string())
}

/// The most characters of a client's input an answer quotes back: enough
/// to recognise it, never a header as long as a client cares to send.
const QUOTED_AT_MOST: usize = 32;

/// `input`, from the request, as an answer quotes it: escaped in quotes,
/// and past [`QUOTED_AT_MOST`] characters cut, with its whole length.
pub(super) fn quoted(input: &str) -> String {
    match input.char_indices().nth(QUOTED_AT_MOST) {
        None => format!("{input:?}"),
        Some((cut, _)) => format!("{:?}... ({} bytes)", &input[..cut], input.len()),
    }
}

/// The answer to a request whose inner service was dropped unfinished
/// when a time limit ran out: 503 Service Unavailable past the manager's
/// call timeout (the service was too slow), 408 Request Timeout past the
/// client's own deadline (see [`status_of`]).
pub(super) fn timed_out(expiry: Expiry) -> Response<Bytes> {
    let status = match expiry.limit() {
        TimeLimit::CallTimeout => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::REQUEST_TIMEOUT,
    };
    text(status, &expiry.to_string())
}

/// 400 Bad Request, saying what is wrong with the request.
pub(super) fn bad_request(problem: &str) -> Response<Bytes> {
    text(StatusCode::BAD_REQUEST, problem)
}

fn text(status: StatusCode, message: &str) -> Response<Bytes> {
    let mut response = Response::new(Bytes::from(format!("{status}: {message}\n")));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// Sets `Retry-After` (whole seconds, rounded up) unless the answer has one.
pub(super) fn set_retry_after(headers: &mut HeaderMap, after: Duration) {
    if !headers.contains_key(RETRY_AFTER) {
        headers.insert(RETRY_AFTER, HeaderValue::from(whole_seconds(after)));
    }
}

/// Sets `RateLimit-Policy` and `RateLimit` for `rate`, unless the answer
/// has them:
///
/// - `RateLimit-Policy: "default";q=Q;w=W;portcullis-burst=B`: `Q` calls
///   per `W` seconds, `W` the shortest of 1 s, 1 min, 1 h and 1 day in
///   which the rate allows a whole call (for a rate slower than one a
///   day, `q=1` and `W` the seconds one call takes); `B` calls may come at
///   once;
/// - `RateLimit: "default";r=R;t=T`: `R` calls would be admitted now,
///   and `T` seconds (rounded up) until one more would be.
pub(super) fn set_rate_limit(headers: &mut HeaderMap, rate: &RateRemaining) {
    if headers.contains_key(RATE_LIMIT_POLICY) || headers.contains_key(RATE_LIMIT) {
        return;
    }
    let window = [1u64, 60, 3_600, 86_400]
        .into_iter()
        .find(|&window| whole_calls(rate.rate, window) >= 1);
    // A float-to-int cast saturates; rates are at most 1e9 a second, and
    // above 0 (at least `rate::slowest_rate`), so one call takes a finite
    // number of seconds.
    let (quota, window) = match window {
        Some(window) => (whole_calls(rate.rate, window), window),
        None => (1, (1.0 / rate.rate).ceil() as u64),
    };
    let name = sfv::StringRef::constant("default");
    let mut policy = sfv::ListSerializer::new();
    let _ = policy
        .bare_item(name)
        .parameter(sfv::KeyRef::constant("q"), sf_integer(quota))
        .parameter(sfv::KeyRef::constant("w"), sf_integer(window))
        .parameter(sfv::KeyRef::constant("portcullis-burst"), rate.burst);
    let mut now = sfv::ListSerializer::new();
    let _ = now
        .bare_item(name)
        .parameter(sfv::KeyRef::constant("r"), rate.remaining)
        .parameter(
            sfv::KeyRef::constant("t"),
            sf_integer(whole_seconds(rate.next_in)),
        );
    for (name, value) in [(RATE_LIMIT_POLICY, policy), (RATE_LIMIT, now)] {
        if let Some(Ok(value)) = value.finish().map(HeaderValue::try_from) {
            headers.insert(name, value);
        }
    }
}

/// The whole calls `rate` allows in `window` seconds: `rate × window`
/// rounded down, except that a product within a billionth of a whole
/// number is that number. A quota's rate is its calls over its period in
/// floating point, so `per(11, one day)` is 11 calls a day although
/// `11.0 / 86400.0 * 86400.0` is 10.999999999999998.
fn whole_calls(rate: f64, window: u64) -> u64 {
    let calls = rate * window as f64;
    let nearest = calls.round();
    if (calls - nearest).abs() <= nearest * 1e-9 {
        nearest as u64
    } else {
        calls.floor() as u64
    }
}

/// `n` as a Structured Fields integer, which holds up to 15 digits: more
/// is more calls or seconds than any client counts, so the largest.
fn sf_integer(n: u64) -> sfv::Integer {
    sfv::Integer::try_from(n).unwrap_or(sfv::Integer::MAX)
}

/// Seconds, rounded up: a client that waits that long finds what it was
/// told to wait for.
fn whole_seconds(duration: Duration) -> u64 {
    duration
        .as_secs()
        .saturating_add(u64::from(duration.subsec_nanos() > 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_is_quoted_short() {
        assert_eq!(quoted("urgent"), "\"urgent\"");
        assert_eq!(quoted("a\"b\n"), "\"a\\\"b\\n\"");
        let long = "é".repeat(40);
        let shown = quoted(&long);
        assert_eq!(shown, format!("{:?}... (80 bytes)", "é".repeat(32)));
        assert_eq!(quoted(&"1".repeat(32)), format!("\"{}\"", "1".repeat(32)));
    }

    fn headers_for(rate: f64, burst: u32, available: u32, next_in: Duration) -> HeaderMap {
        let mut headers = HeaderMap::new();
        let rate = RateRemaining {
            rate,
            burst,
            remaining: available,
            next_in,
            full_in: Duration::ZERO,
        };
        set_rate_limit(&mut headers, &rate);
        headers
    }

    #[test]
    fn rate_limit_headers_follow_the_draft_syntax() {
        let headers = headers_for(20.0, 5, 3, Duration::from_millis(30));
        assert_eq!(
            headers[&RATE_LIMIT_POLICY],
            "\"default\";q=20;w=1;portcullis-burst=5"
        );
        assert_eq!(headers[&RATE_LIMIT], "\"default\";r=3;t=1");
        // A full bucket gains nothing more: t=0.
        let full = headers_for(20.0, 5, 5, Duration::ZERO);
        assert_eq!(full[&RATE_LIMIT], "\"default\";r=5;t=0");
    }

    #[test]
    fn slow_rates_are_given_per_minute_hour_or_day() {
        let q = |rate: f64| headers_for(rate, 1, 0, Duration::ZERO)[&RATE_LIMIT_POLICY].clone();
        assert_eq!(q(0.5), "\"default\";q=30;w=60;portcullis-burst=1");
        assert_eq!(q(0.01), "\"default\";q=36;w=3600;portcullis-burst=1");
        assert_eq!(q(2e-5), "\"default\";q=1;w=86400;portcullis-burst=1");
    }

    /// Slower than one call a day: one call per the seconds it takes,
    /// never a quota of 0 (which says no call is allowed at all).
    #[test]
    fn rates_slower_than_one_a_day_are_one_call_per_their_interval() {
        let q = |rate: f64| headers_for(rate, 1, 0, Duration::ZERO)[&RATE_LIMIT_POLICY].clone();
        assert_eq!(q(1e-5), "\"default\";q=1;w=100000;portcullis-burst=1");
        assert_eq!(q(1e-9), "\"default\";q=1;w=1000000000;portcullis-burst=1");
    }

    /// The one quota of a `RateLimit` field the layer wrote, read back
    /// with sfv: its name and each integer parameter.
    fn read_back(value: &HeaderValue) -> (String, Vec<(String, i64)>) {
        let list: sfv::List = sfv::Parser::new(value.as_bytes()).parse().unwrap();
        let [sfv::ListEntry::Item(quota)] = list.as_slice() else {
            panic!("not one quota: {value:?}");
        };
        let name = quota.bare_item.as_string().unwrap().as_str().to_owned();
        let parameters = quota
            .params
            .iter()
            .map(|(k, v)| (k.as_str().to_owned(), i64::from(v.as_integer().unwrap())))
            .collect();
        (name, parameters)
    }

    proptest::proptest! {
        /// What the layer writes is a well-formed Structured Field that
        /// reads back as the values it wrote, for every rate the key space
        /// allows (up to 1e9 a second) and any wait.
        #[test]
        fn the_rate_limit_fields_read_back_as_written(
            rate in 1e-9f64..1e9,
            burst in 1u32..,
            spent in 0.0f64..=1.0,
            next_in in proptest::prelude::any::<u64>(),
        ) {
            let remaining = (f64::from(burst) * (1.0 - spent)) as u32;
            let next_in = Duration::from_nanos(next_in);
            let headers = headers_for(rate, burst, remaining, next_in);
            let (name, policy) = read_back(&headers[&RATE_LIMIT_POLICY]);
            proptest::prop_assert_eq!(name, "default");
            let [(q, quota), (w, window), (b, written_burst)] = policy.as_slice() else {
                panic!("{policy:?}");
            };
            proptest::prop_assert_eq!((q.as_str(), w.as_str(), b.as_str()), ("q", "w", "portcullis-burst"));
            proptest::prop_assert!(*quota >= 1 && *window >= 1, "{policy:?}");
            proptest::prop_assert_eq!(*written_burst, i64::from(burst));
            let (name, now) = read_back(&headers[&RATE_LIMIT]);
            proptest::prop_assert_eq!(name, "default");
            let t = i64::try_from(whole_seconds(next_in)).unwrap().min(999_999_999_999_999);
            let expected = vec![("r".to_owned(), i64::from(remaining)), ("t".to_owned(), t)];
            proptest::prop_assert_eq!(now, expected);
        }
    }

    /// The policy the IETF draft defines for a quota of `calls` per
    /// `period` seconds, in exact integers: `w` the shortest of 1 s, 1 min,
    /// 1 h and 1 day in which the quota allows a whole call, `q` the whole
    /// calls it allows in `w` (never more than the quota does); slower
    /// than one a day, one call per the seconds one takes.
    fn policy_of(calls: u64, period: u64) -> (u64, u64) {
        [1u64, 60, 3_600, 86_400]
            .into_iter()
            .find(|&window| calls * window >= period)
            .map_or((1, period.div_ceil(calls)), |window| {
                (calls * window / period, window)
            })
    }

    /// The `q` and `w` the layer writes for a quota of `calls` per
    /// `period` seconds, as the manager's own rate gives them.
    fn written(calls: u32, period: u64) -> (i64, i64) {
        let manager = crate::ThrottleManager::<String>::builder()
            .rate(crate::RateConfig::per(calls, Duration::from_secs(period)).burst(1))
            .clock(crate::clock::ManualClock::new())
            .build()
            .unwrap();
        let _ = manager.check("key"); // the key, made
        let mut headers = HeaderMap::new();
        set_rate_limit(&mut headers, &manager.peek("key").unwrap());
        let (_, policy) = read_back(&headers[&RATE_LIMIT_POLICY]);
        (policy[0].1, policy[1].1)
    }

    /// An answer that set either field itself keeps what it set, and gets
    /// neither from the layer: the two describe one policy.
    #[test]
    fn an_answers_own_rate_limit_field_is_kept_and_not_mixed() {
        let rate = RateRemaining {
            rate: 20.0,
            burst: 5,
            remaining: 3,
            next_in: Duration::ZERO,
            full_in: Duration::ZERO,
        };
        for own in [RATE_LIMIT_POLICY, RATE_LIMIT] {
            let mut headers = HeaderMap::new();
            headers.insert(own.clone(), HeaderValue::from_static("\"app\";q=1;w=1"));
            set_rate_limit(&mut headers, &rate);
            assert_eq!(headers.len(), 1, "{own}: {headers:?}");
            assert_eq!(headers[&own], "\"app\";q=1;w=1");
        }
    }

    #[test]
    fn a_window_boundary_is_the_shorter_window() {
        // Exactly one call a second, a minute, an hour, a day.
        for period in [1, 60, 3_600, 86_400] {
            assert_eq!(written(1, period), (1, period as i64), "1 per {period} s");
        }
        // Just below: the next window up.
        assert_eq!(written(59, 60), (59, 60));
        assert_eq!(written(3_599, 3_600), (59, 60));
        // 11 / 86400 × 86400 is 10.999999999999998 in floating point.
        assert_eq!(written(11, 86_400), (11, 86_400));
    }

    proptest::proptest! {
        /// Any quota of whole calls per whole seconds, around each window's
        /// boundary and far from it: the policy the layer writes is the
        /// draft's, computed in exact integers.
        #[test]
        fn the_policy_is_the_quotas_at_every_window_boundary(
            window in proptest::sample::select(vec![1u64, 60, 3_600, 86_400]),
            calls in 1u32..=1_000_000,
            step in -3i64..=3,
            scale in proptest::sample::select(vec![1u64, 2, 7, 60, 1_000]),
            on_the_boundary in proptest::prelude::any::<bool>(),
        ) {
            // `calls` per (a multiple of the window, nudged by `step`); on
            // the boundary, as many calls as windows in the period.
            let period = (window * scale).saturating_add_signed(step).max(1);
            let calls = if on_the_boundary { scale as u32 } else { calls };
            let (q, w) = policy_of(u64::from(calls), period);
            let expected = (i64::try_from(q).unwrap(), i64::try_from(w).unwrap());
            proptest::prop_assert_eq!(written(calls, period), expected, "{} per {} s", calls, period);
        }
    }

    #[test]
    fn retry_after_rounds_up_and_keeps_a_value_already_set() {
        let mut headers = HeaderMap::new();
        set_retry_after(&mut headers, Duration::from_millis(1_001));
        assert_eq!(headers[RETRY_AFTER], "2");
        set_retry_after(&mut headers, Duration::from_secs(30));
        assert_eq!(headers[RETRY_AFTER], "2");
        let mut exact = HeaderMap::new();
        set_retry_after(&mut exact, Duration::from_secs(3));
        assert_eq!(exact[RETRY_AFTER], "3");
    }

    /// A priority the manager refuses is the server's own mistake (its
    /// code chose it), not the client's load: 500, never a 503 that asks
    /// the client to come back.
    #[test]
    fn an_invalid_priority_is_a_server_error() {
        let manager = crate::ThrottleManager::<String>::builder()
            .throttle(crate::ThrottleConfig::new())
            .priority_levels(2)
            .out_of_range(crate::priority::OutOfRange::Reject)
            .build()
            .unwrap();
        let rejected = manager
            .try_acquire("api", crate::Priority::LOW)
            .unwrap_err();
        assert_eq!(status_of(&rejected), StatusCode::INTERNAL_SERVER_ERROR);
    }

    #[test]
    fn answers_are_judged_by_status() {
        let judge =
            |status: u16| classify(StatusCode::from_u16(status).unwrap(), &HeaderMap::new());
        assert_eq!(judge(204), Outcome::Success);
        assert_eq!(judge(302), Outcome::Success);
        assert_eq!(judge(404), Outcome::Neutral);
        assert_eq!(judge(429), Outcome::Overloaded);
        assert_eq!(judge(408), Outcome::Overloaded);
        assert_eq!(judge(500), Outcome::Neutral);
        assert_eq!(judge(503), Outcome::Overloaded);
    }
}
