//! What a server's response headers ask of the client: `Retry-After`, and the
//! rate-limit headers that say the quota is spent before the server has to
//! refuse anything. Pure functions of the headers and the time.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{HeaderMap, StatusCode};

use crate::outcome::Outcome;

/// A header value the client could not read. The middleware ignores such a
/// value (with a debug event); [`retry_after`] returns it.
///
/// ```
/// use portcullis::client::retry_after;
/// use std::time::SystemTime;
///
/// let error = retry_after("soon", SystemTime::now()).unwrap_err();
/// assert_eq!(error.name(), "Retry-After");
/// assert_eq!(error.value(), "soon");
/// assert_eq!(
///     error.to_string(),
///     "invalid Retry-After header \"soon\": expected delta-seconds or an HTTP-date"
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidHeader {
    name: &'static str,
    value: String,
    expected: &'static str,
}

impl InvalidHeader {
    pub(super) fn new(name: &'static str, value: &str, expected: &'static str) -> Self {
        Self {
            name,
            value: value.to_owned(),
            expected,
        }
    }

    /// The header's name.
    ///
    /// ```
    /// # use portcullis::client::retry_after;
    /// # let error = retry_after("-1", std::time::SystemTime::now()).unwrap_err();
    /// assert_eq!(error.name(), "Retry-After");
    /// ```
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The value as the server sent it.
    ///
    /// ```
    /// # use portcullis::client::retry_after;
    /// # let error = retry_after("-1", std::time::SystemTime::now()).unwrap_err();
    /// assert_eq!(error.value(), "-1");
    /// ```
    pub fn value(&self) -> &str {
        &self.value
    }
}

impl fmt::Display for InvalidHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid {} header {:?}: expected {}",
            self.name, self.value, self.expected
        )
    }
}

impl std::error::Error for InvalidHeader {}

/// How long a `Retry-After` value asks the client to wait, as of `now`.
///
/// HTTP allows two forms (RFC 9110, section 10.2.3): delta-seconds (`120`)
/// and an HTTP-date in any of its three formats (`Sun, 06 Nov 1994 08:49:37
/// GMT`, the obsolete `Sunday, 06-Nov-94 08:49:37 GMT` and `Sun Nov  6
/// 08:49:37 1994`). A date in the past asks for no wait; a number too large
/// for a `Duration` is the longest wait there is (the manager caps a pause
/// at its [`max_defer`](crate::deadline::TimeLimits::max_defer)).
///
/// # Errors
///
/// [`InvalidHeader`] for anything else: a negative or fractional number, a
/// malformed date, an empty value.
///
/// ```
/// use portcullis::client::retry_after;
/// use std::time::{Duration, SystemTime, UNIX_EPOCH};
///
/// let now = UNIX_EPOCH + Duration::from_secs(784_111_770); // Sun, 06 Nov 1994 08:49:30 GMT
/// assert_eq!(retry_after("120", now), Ok(Duration::from_secs(120)));
/// assert_eq!(retry_after("Sun, 06 Nov 1994 08:49:37 GMT", now), Ok(Duration::from_secs(7)));
/// assert_eq!(retry_after("Sun, 06 Nov 1994 08:00:00 GMT", now), Ok(Duration::ZERO)); // past
/// assert!(retry_after("soon", now).is_err());
/// ```
pub fn retry_after(value: &str, now: SystemTime) -> Result<Duration, InvalidHeader> {
    const EXPECTED: &str = "delta-seconds or an HTTP-date";
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // Digits only: too many of them is a very long wait, not garbage.
        return Ok(Duration::from_secs(value.parse().unwrap_or(u64::MAX)));
    }
    let date = httpdate::parse_http_date(value)
        .map_err(|_| InvalidHeader::new("Retry-After", value, EXPECTED))?;
    Ok(date.duration_since(now).unwrap_or(Duration::ZERO))
}

/// The longest pause `headers` ask for, as of `now`; `None` if none does.
///
/// - `Retry-After`, on a 429 or a 503 (on other statuses it means
///   something else, or nothing);
/// - the IETF rate-limit fields (draft-ietf-httpapi-ratelimit-headers):
///   `RateLimit: "default";r=0;t=30` is a quota with nothing remaining for
///   30 s; and the earlier drafts' `RateLimit-Remaining: 0` with
///   `RateLimit-Reset: 30`;
/// - the common `X-RateLimit-Remaining: 0` with `X-RateLimit-Reset`, in
///   seconds from now or (from 10^9 on, as GitHub sends it) as a Unix time.
///
/// A `RateLimit` quota whose name is one of the manager's named limits
/// (`named_limit`) is that limit's, not the key's request rate's: it moves
/// that limit ([`observe_remaining`](crate::manager::KeyHandle::observe_remaining))
/// and asks for no pause here. Values that cannot be read are skipped, each
/// with the error, into `invalid`.
pub(super) fn pause_in(
    status: StatusCode,
    headers: &HeaderMap,
    now: SystemTime,
    named_limit: &dyn Fn(&str) -> bool,
    mut invalid: impl FnMut(InvalidHeader),
) -> Option<Duration> {
    let mut longest: Option<Duration> = None;
    let mut ask = |pause: Duration| longest = Some(longest.map_or(pause, |l| l.max(pause)));
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if status == StatusCode::TOO_MANY_REQUESTS || status == StatusCode::SERVICE_UNAVAILABLE {
        if let Some(value) = text("retry-after") {
            match retry_after(value, now) {
                Ok(pause) => ask(pause),
                Err(error) => invalid(error),
            }
        }
    }
    for value in headers.get_all("ratelimit") {
        let Ok(value) = value.to_str() else { continue };
        match spent_quota_reset(value, named_limit) {
            Ok(Some(pause)) => ask(pause),
            Ok(None) => {}
            Err(error) => invalid(error),
        }
    }
    for (remaining, reset) in [
        ("ratelimit-remaining", "ratelimit-reset"),
        ("x-ratelimit-remaining", "x-ratelimit-reset"),
    ] {
        if text(remaining).map(str::trim) != Some("0") {
            continue;
        }
        let Some(value) = text(reset) else { continue };
        match reset_in(reset, value, now) {
            Ok(pause) => ask(pause),
            Err(error) => invalid(error),
        }
    }
    longest
}

/// From 10^9 on (September 2001), a reset is a Unix time, not a number of
/// seconds: no quota window is 31 years long.
const UNIX_TIME_FROM: f64 = 1e9;

/// The pause an answer asks a client for: its `grpc-retry-pushback-ms` if
/// it has one (gRPC's own word, in milliseconds, over HTTP headers that a
/// server may add in whole seconds), else what its HTTP headers say
/// ([`pause_in`]). A value that cannot be read is ignored, with a debug
/// event naming `key`.
pub(super) fn requested_pause(
    key: &str,
    status: StatusCode,
    headers: &HeaderMap,
    named_limit: &dyn Fn(&str) -> bool,
) -> Option<Duration> {
    crate::grpc::pushback_in(headers).or_else(|| {
        pause_in(status, headers, SystemTime::now(), named_limit, |invalid| {
            tracing::debug!(key, %invalid, "ignored a header the client cannot read");
        })
    })
}

/// What an HTTP status says of a client's call: the one table
/// ([`status_outcome`](crate::edge::status_outcome)), read as a client.
pub(super) fn outcome_of_status(status: StatusCode) -> Outcome {
    crate::edge::status_outcome(status, crate::edge::AdmitAs::Client)
}

/// A `*-Reset` value: seconds from now, or a Unix time (fractions allowed,
/// as some APIs send them).
fn reset_in(name: &'static str, value: &str, now: SystemTime) -> Result<Duration, InvalidHeader> {
    let seconds: f64 = value
        .trim()
        .parse()
        .ok()
        .filter(|s: &f64| s.is_finite() && *s >= 0.0)
        .ok_or_else(|| {
            InvalidHeader::new(
                reset_name(name),
                value,
                "seconds, or a Unix time, not negative",
            )
        })?;
    // `seconds` is finite and not negative, so the only way to fail is a
    // number past `Duration::MAX`: the longest wait there is, which the
    // manager caps at its `max_defer`.
    let reset = Duration::try_from_secs_f64(seconds).unwrap_or(Duration::MAX);
    if seconds < UNIX_TIME_FROM {
        return Ok(reset);
    }
    let since_epoch = now.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    Ok(reset.saturating_sub(since_epoch))
}

fn reset_name(name: &str) -> &'static str {
    if name.starts_with('x') {
        "X-RateLimit-Reset"
    } else {
        "RateLimit-Reset"
    }
}

/// The longest reset among the spent quotas (`r=0`) of a `RateLimit` field
/// value: a Structured Fields list (RFC 9651) of quota names with
/// parameters, such as `"default";r=0;t=30, "daily";r=700;t=3600`. `r` and
/// `t` are integers, not negative; other parameters (`pk`, ...) say
/// nothing of a pause. A quota `named_limit` names is skipped. `None`: no
/// quota of the requests is spent.
fn spent_quota_reset(
    value: &str,
    named_limit: &dyn Fn(&str) -> bool,
) -> Result<Option<Duration>, InvalidHeader> {
    const EXPECTED: &str = "a list of quotas such as \"default\";r=0;t=30";
    let invalid = || InvalidHeader::new("RateLimit", value, EXPECTED);
    let quotas: sfv::List = sfv::Parser::new(value).parse().map_err(|_| invalid())?;
    // A parameter present but not an integer from 0 is a broken value, not
    // a missing one.
    let count = |quota: &sfv::Item, name: &sfv::KeyRef| match quota.params.get(name) {
        None => Ok(None),
        Some(number) => number
            .as_integer()
            .and_then(|n| u64::try_from(n).ok())
            .map(Some)
            .ok_or_else(invalid),
    };
    let mut longest = None;
    for quota in &quotas {
        let sfv::ListEntry::Item(quota) = quota else {
            return Err(invalid());
        };
        let name = match &quota.bare_item {
            sfv::BareItem::String(name) => Some(name.as_str()),
            sfv::BareItem::Token(name) => Some(name.as_str()),
            _ => None,
        };
        let remaining = count(quota, sfv::KeyRef::constant("r"))?;
        if name.is_some_and(named_limit) {
            continue;
        }
        let reset = count(quota, sfv::KeyRef::constant("t"))?;
        if let (Some(0), Some(reset)) = (remaining, reset) {
            longest = longest.max(Some(Duration::from_secs(reset)));
        }
    }
    Ok(longest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    /// Sun, 06 Nov 1994 08:49:37 GMT, the example date of RFC 9110.
    fn rfc_date() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(784_111_777)
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn retry_after_reads_delta_seconds() {
        let now = SystemTime::now();
        assert_eq!(retry_after("0", now), Ok(Duration::ZERO));
        assert_eq!(retry_after("2", now), Ok(secs(2)));
        assert_eq!(retry_after(" 120 ", now), Ok(secs(120)));
    }

    #[test]
    fn retry_after_reads_the_three_http_date_forms() {
        let now = rfc_date() - secs(10);
        for form in [
            "Sun, 06 Nov 1994 08:49:37 GMT",  // IMF-fixdate
            "Sunday, 06-Nov-94 08:49:37 GMT", // obsolete RFC 850
            "Sun Nov  6 08:49:37 1994",       // ANSI C's asctime()
        ] {
            assert_eq!(retry_after(form, now), Ok(secs(10)), "{form}");
        }
    }

    #[test]
    fn a_date_in_the_past_asks_for_no_wait() {
        let now = rfc_date() + secs(3_600);
        assert_eq!(
            retry_after("Sun, 06 Nov 1994 08:49:37 GMT", now),
            Ok(Duration::ZERO)
        );
    }

    #[test]
    fn a_number_too_large_is_the_longest_wait_not_garbage() {
        let now = SystemTime::now();
        let huge = "99999999999999999999999999";
        assert_eq!(retry_after(huge, now), Ok(secs(u64::MAX)));
        assert_eq!(retry_after(&u64::MAX.to_string(), now), Ok(secs(u64::MAX)));
    }

    #[test]
    fn garbage_is_an_error_naming_the_value() {
        let now = SystemTime::now();
        for garbage in [
            "",
            "   ",
            "-1",
            "1.5",
            "+3",
            "soon",
            "Sun, 06 Nov 1994",
            "Sun, 32 Nov 1994 08:49:37 GMT",
            "12s",
        ] {
            let error = retry_after(garbage, now).unwrap_err();
            assert_eq!(error.name(), "Retry-After");
            assert_eq!(error.value(), garbage.trim(), "{garbage:?}");
        }
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    fn pause(status: u16, pairs: &[(&'static str, &str)]) -> (Option<Duration>, Vec<String>) {
        let mut invalid = Vec::new();
        let status = StatusCode::from_u16(status).unwrap();
        let pause = pause_in(status, &headers(pairs), rfc_date(), &|_| false, |e| {
            invalid.push(e.to_string())
        });
        (pause, invalid)
    }

    #[test]
    fn retry_after_counts_on_429_and_503_only() {
        assert_eq!(pause(429, &[("retry-after", "2")]).0, Some(secs(2)));
        assert_eq!(pause(503, &[("retry-after", "3")]).0, Some(secs(3)));
        assert_eq!(pause(301, &[("retry-after", "2")]).0, None);
        assert_eq!(pause(200, &[("retry-after", "2")]).0, None);
        // A client's mistake or a server's bug carrying one says nothing
        // of capacity.
        for status in [400, 404, 500] {
            assert_eq!(pause(status, &[("retry-after", "2")]).0, None, "{status}");
        }
    }

    #[test]
    fn every_ratelimit_line_is_read_not_only_the_first() {
        let lines = [
            ("ratelimit", "\"burst\";r=4;t=1"),
            ("ratelimit", "\"daily\";r=0;t=60"),
        ];
        assert_eq!(pause(200, &lines), (Some(secs(60)), vec![]));
    }

    #[test]
    fn a_spent_ratelimit_quota_asks_for_its_reset() {
        let spent = [("ratelimit", "\"default\";r=0;t=1")];
        assert_eq!(pause(200, &spent).0, Some(secs(1)));
        // The longest of the spent ones; a quota with room left asks nothing.
        let two = [(
            "ratelimit",
            "\"burst\";r=0;t=2, \"daily\";r=0;t=60, x;r=5;t=900",
        )];
        assert_eq!(pause(200, &two).0, Some(secs(60)));
        assert_eq!(pause(200, &[("ratelimit", "\"default\";r=3;t=30")]).0, None);
        // Commas and semicolons inside a quoted name are part of the name.
        let quoted = [("ratelimit", "\"a,b;c\";r=0;t=4")];
        assert_eq!(pause(200, &quoted), (Some(secs(4)), vec![]));
    }

    /// `RateLimit` is a Structured Field (RFC 9651): escapes in a quoted
    /// name, a byte-sequence `pk`, bare boolean parameters and spaces
    /// after `;` are all well-formed; a negative or fractional count, an
    /// inner list or an upper-case parameter name are not.
    #[test]
    fn ratelimit_is_read_as_a_structured_field() {
        for value in [
            r#""a\"b";r=0;t=4"#,
            r#""default";r=0;t=4;pk=:cHJvZ3JhbW1hdGljIGtleQ==:"#,
            r#""default";fresh;r=0;t=4"#,
            r#""default"; r=0; t=4"#,
            "default;r=0;t=4",
        ] {
            assert_eq!(
                pause(200, &[("ratelimit", value)]),
                (Some(secs(4)), vec![]),
                "{value}"
            );
        }
        for value in [
            r#""default";r=-1;t=4"#,
            r#""default";r=0;t=1.5"#,
            r#"("a" "b");r=0;t=4"#,
            r#""default";R=0;t=4"#,
            r#""default";r = 0;t=4"#,
            r#""unclosed;r=0;t=4"#,
        ] {
            let (found, invalid) = pause(200, &[("ratelimit", value)]);
            assert_eq!((found, invalid.len()), (None, 1), "{value}");
        }
    }

    #[test]
    fn remaining_zero_with_a_reset_asks_for_the_reset() {
        let earlier_draft = [("ratelimit-remaining", "0"), ("ratelimit-reset", "7")];
        assert_eq!(pause(200, &earlier_draft).0, Some(secs(7)));
        // A Unix time, as GitHub sends it (2027-01-15T08:00:00Z).
        let now = UNIX_EPOCH + secs(1_800_000_000);
        let github = headers(&[
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "1800000042"),
        ]);
        let found = pause_in(StatusCode::OK, &github, now, &|_| false, |e| panic!("{e}"));
        assert_eq!(found, Some(secs(42)));
        let fractional = [
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "0.25"),
        ];
        assert_eq!(pause(200, &fractional).0, Some(Duration::from_millis(250)));
        // 10^9 itself is a Unix time (2001-09-09T01:46:40Z): past, no wait.
        let at_the_line = headers(&[
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "1000000000"),
        ]);
        let found = pause_in(StatusCode::OK, &at_the_line, now, &|_| false, |e| {
            panic!("{e}")
        });
        assert_eq!(found, Some(Duration::ZERO));
        let just_below = headers(&[
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "999999999"),
        ]);
        let found = pause_in(StatusCode::OK, &just_below, now, &|_| false, |e| {
            panic!("{e}")
        });
        assert_eq!(found, Some(secs(999_999_999)));
        let left = [("x-ratelimit-remaining", "12"), ("x-ratelimit-reset", "7")];
        assert_eq!(pause(200, &left).0, None);
    }

    #[test]
    fn every_hint_counts_and_the_longest_wins() {
        let all = [
            ("retry-after", "5"),
            ("ratelimit", "\"default\";r=0;t=9"),
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "3"),
        ];
        assert_eq!(pause(429, &all).0, Some(secs(9)));
    }

    /// A reset past what a `Duration` holds (the server's number, or its
    /// Unix time) is the longest wait there is, never a panic.
    #[test]
    fn a_reset_too_large_for_a_duration_is_the_longest_wait() {
        for (remaining, reset, value) in [
            ("x-ratelimit-remaining", "x-ratelimit-reset", "1e300"),
            ("x-ratelimit-remaining", "x-ratelimit-reset", "2e19"),
            ("ratelimit-remaining", "ratelimit-reset", "5e20"),
            (
                "ratelimit-remaining",
                "ratelimit-reset",
                "1.8446744073709552e19",
            ),
        ] {
            let (found, invalid) = pause(200, &[(remaining, "0"), (reset, value)]);
            // Read as a Unix time, less the time since the epoch.
            let found = found.unwrap_or_default();
            assert!(found > secs(u64::MAX / 2), "{reset}: {value} is {found:?}");
            assert!(invalid.is_empty(), "{invalid:?}");
        }
    }

    #[test]
    fn unreadable_values_are_reported_and_skipped() {
        let (found, invalid) = pause(
            429,
            &[
                ("retry-after", "later"),
                ("ratelimit", "\"default\";r=zero;t=1"),
                ("x-ratelimit-remaining", "0"),
                ("x-ratelimit-reset", "-3"),
                ("ratelimit-remaining", "0"),
                ("ratelimit-reset", "2"),
            ],
        );
        assert_eq!(found, Some(secs(2)));
        assert_eq!(
            invalid,
            [
                "invalid Retry-After header \"later\": expected delta-seconds or an HTTP-date",
                "invalid RateLimit header \"\\\"default\\\";r=zero;t=1\": expected a list of quotas such as \"default\";r=0;t=30",
                "invalid X-RateLimit-Reset header \"-3\": expected seconds, or a Unix time, not negative",
            ]
        );
    }

    mod hostile {
        use super::*;
        use proptest::prelude::*;

        /// What a hostile or broken server may put in a header: any text,
        /// and numbers of every shape (huge, tiny, negative, exponents,
        /// fractions, NaN and infinity spelled out), and dates.
        fn header_value() -> impl Strategy<Value = String> {
            prop_oneof![
                any::<String>(),
                "[ -~]{0,40}",
                any::<f64>().prop_map(|x| x.to_string()),
                any::<f64>().prop_map(|x| format!("{x:e}")),
                any::<u64>().prop_map(|x| x.to_string()),
                any::<i64>().prop_map(|x| x.to_string()),
                "[0-9]{1,400}",
                "-?[0-9]{0,30}(\\.[0-9]{0,30})?(e[+-]?[0-9]{1,4})?",
                Just("NaN".to_owned()),
                Just("inf".to_owned()),
                Just("-inf".to_owned()),
                "(Sun|Mon), [0-9]{2} (Nov|Feb) [0-9]{1,6} [0-9]{2}:[0-9]{2}:[0-9]{2} GMT",
                "\"[a-z,;]{0,5}\";r=[0-9-]{0,25};t=[0-9e.-]{0,25}",
                "[\"a-z(); =,:?*0-9.\\\\-]{0,40}",
            ]
        }

        fn status() -> impl Strategy<Value = u16> {
            prop_oneof![Just(200), Just(429), Just(503), 100u16..1000]
        }

        proptest! {
            /// No value of any header the client reads panics it, whatever
            /// the clock says.
            #[test]
            fn no_header_value_panics_the_reader(
                status in status(),
                values in proptest::collection::vec(header_value(), 7),
                now in any::<u64>(),
            ) {
                let names = [
                    "retry-after",
                    "ratelimit",
                    "ratelimit-remaining",
                    "ratelimit-reset",
                    "x-ratelimit-remaining",
                    "x-ratelimit-reset",
                    "ratelimit",
                ];
                let mut map = HeaderMap::new();
                for (name, value) in names.into_iter().zip(&values) {
                    // The reset headers only count with nothing remaining.
                    let value = if name.ends_with("remaining") && value.len() % 2 == 0 {
                        "0"
                    } else {
                        value
                    };
                    if let Ok(value) = HeaderValue::from_str(value) {
                        map.append(name, value);
                    }
                }
                let now = UNIX_EPOCH + Duration::from_secs(now % (1 << 40));
                let status = StatusCode::from_u16(status).unwrap();
                let _ = pause_in(status, &map, now, &|_| false, |_| {});
                let _ = retry_after(&values[0], now);
            }
        }
    }
}
