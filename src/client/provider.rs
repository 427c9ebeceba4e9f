//! Where a metered API says its caller stands: the remaining count and
//! reset time of each of its limits, in the headers of every answer. Pure
//! functions of the headers and the time.
//!
//! Three families are read, each limit named as a manager's named limits
//! are (`-` read as `_`; `requests` is the key's own rate):
//! - OpenAI's `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`,
//!   resets as durations (`6m0s`, `20ms`);
//! - Anthropic's `anthropic-ratelimit-{requests,tokens,input-tokens,
//!   output-tokens}-{limit,remaining,reset}`, resets as RFC 3339 times;
//! - the IETF fields (draft-ietf-httpapi-ratelimit-headers), several
//!   policies at once: `RateLimit-Policy: "tokens";q=1000;w=60` and
//!   `RateLimit: "tokens";r=250;t=12`.

use std::time::{Duration, SystemTime};

use http::HeaderMap;

use super::headers::InvalidHeader;
use crate::ThrottleManager;

/// The longest reset believed: a provider's limits reset within the day.
/// A longer one (a hostile or broken value) is read as this.
pub const MAX_RESET: Duration = Duration::from_secs(24 * 60 * 60);

/// What a provider's answer says of one of its limits: how much of it is
/// left, and when it is whole again.
///
/// ```
/// use portcullis::client::limit_readings;
/// use std::time::{Duration, SystemTime};
///
/// let mut headers = http::HeaderMap::new();
/// headers.insert("x-ratelimit-limit-tokens", "150000".parse().unwrap());
/// headers.insert("x-ratelimit-remaining-tokens", "149984".parse().unwrap());
/// headers.insert("x-ratelimit-reset-tokens", "6ms".parse().unwrap());
/// let readings: Vec<_> = limit_readings(&headers, SystemTime::now()).into_iter().flatten().collect();
/// assert_eq!(readings[0].name(), "tokens");
/// assert_eq!(readings[0].limit(), Some(150_000));
/// assert_eq!(readings[0].remaining(), 149_984);
/// assert_eq!(readings[0].reset(), Some(Duration::from_millis(6)));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitReading {
    name: String,
    limit: Option<u64>,
    remaining: u64,
    reset: Option<Duration>,
}

impl LimitReading {
    /// The limit's name, as a manager names its limits: `requests`,
    /// `tokens`, `input_tokens`, `output_tokens`, or an IETF policy's name.
    ///
    /// ```
    /// # use portcullis::client::limit_readings;
    /// # let mut headers = http::HeaderMap::new();
    /// headers.insert("anthropic-ratelimit-input-tokens-remaining", "39000".parse().unwrap());
    /// # let reading = limit_readings(&headers, std::time::SystemTime::now()).remove(0).unwrap();
    /// assert_eq!(reading.name(), "input_tokens");
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The limit's size, if the answer says it.
    ///
    /// ```
    /// # use portcullis::client::limit_readings;
    /// # let mut headers = http::HeaderMap::new();
    /// headers.insert("ratelimit-policy", "\"tokens\";q=1000;w=60".parse().unwrap());
    /// headers.insert("ratelimit", "\"tokens\";r=250;t=12".parse().unwrap());
    /// # let reading = limit_readings(&headers, std::time::SystemTime::now()).remove(0).unwrap();
    /// assert_eq!(reading.limit(), Some(1_000));
    /// ```
    pub fn limit(&self) -> Option<u64> {
        self.limit
    }

    /// How much of the limit is left.
    ///
    /// ```
    /// # use portcullis::client::limit_readings;
    /// # let mut headers = http::HeaderMap::new();
    /// headers.insert("ratelimit", "\"tokens\";r=250;t=12".parse().unwrap());
    /// # let reading = limit_readings(&headers, std::time::SystemTime::now()).remove(0).unwrap();
    /// assert_eq!(reading.remaining(), 250);
    /// ```
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// How long until the limit is whole again, if the answer says it (at
    /// most [`MAX_RESET`]).
    ///
    /// ```
    /// # use portcullis::client::limit_readings;
    /// # use std::time::Duration;
    /// # let mut headers = http::HeaderMap::new();
    /// headers.insert("ratelimit", "\"tokens\";r=250;t=12".parse().unwrap());
    /// # let reading = limit_readings(&headers, std::time::SystemTime::now()).remove(0).unwrap();
    /// assert_eq!(reading.reset(), Some(Duration::from_secs(12)));
    /// ```
    pub fn reset(&self) -> Option<Duration> {
        self.reset
    }
}

/// Every limit `headers` report, as of `now` (for resets given as times):
/// one reading per limit that says what remains of it, or the error of a
/// value that cannot be read (the rest are read still). A reset past
/// [`MAX_RESET`] is read as `MAX_RESET`, a count past `u64::MAX` as
/// `u64::MAX`.
///
/// ```
/// use portcullis::client::limit_readings;
/// use std::time::{Duration, SystemTime};
///
/// let mut headers = http::HeaderMap::new();
/// headers.insert("anthropic-ratelimit-requests-remaining", "49".parse().unwrap());
/// headers.insert("anthropic-ratelimit-requests-reset", "2026-01-01T00:00:30Z".parse().unwrap());
/// headers.insert("anthropic-ratelimit-tokens-remaining", "many".parse().unwrap());
/// let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600); // 2026-01-01T00:00:00Z
/// let read = limit_readings(&headers, now);
/// let requests = read.iter().flatten().find(|reading| reading.name() == "requests").unwrap();
/// assert_eq!((requests.remaining(), requests.reset()), (49, Some(Duration::from_secs(30))));
/// let error = read.iter().find_map(|reading| reading.as_ref().err()).unwrap();
/// assert_eq!(error.value(), "many");
/// ```
pub fn limit_readings(
    headers: &HeaderMap,
    now: SystemTime,
) -> Vec<Result<LimitReading, InvalidHeader>> {
    let mut readings = Vec::new();
    let text = |name: &str| headers.get(name).and_then(|value| value.to_str().ok());
    for name in headers.keys() {
        let name = name.as_str();
        if let Some(limit) = name.strip_prefix("x-ratelimit-remaining-") {
            let value = |what: &str| text(&format!("x-ratelimit-{what}-{limit}"));
            let reset = |reset: &str| go_duration(reset).ok_or("a duration such as 6m0s or 20ms");
            let values = [text(name), value("limit"), value("reset")];
            readings.push(reading(OPENAI, limit, values, reset));
        } else if let Some(limit) = name
            .strip_prefix("anthropic-ratelimit-")
            .and_then(|rest| rest.strip_suffix("-remaining"))
        {
            let value = |what: &str| text(&format!("anthropic-ratelimit-{limit}-{what}"));
            let reset = |reset: &str| {
                let at = humantime::parse_rfc3339_weak(reset.trim())
                    .map_err(|_| "an RFC 3339 time such as 2026-01-01T00:00:30Z")?;
                Ok(at.duration_since(now).unwrap_or(Duration::ZERO))
            };
            let values = [text(name), value("limit"), value("reset")];
            readings.push(reading(ANTHROPIC, limit, values, reset));
        }
    }
    readings.extend(ietf_readings(headers));
    readings
}

/// Moves each of `key`'s limits to what `headers` say remains of it
/// ([`ThrottleManager::observe_remaining`]); a value that cannot be read is
/// skipped, with a debug event naming `key`.
pub(super) fn observe_limits(manager: &ThrottleManager<String>, key: &str, headers: &HeaderMap) {
    for reading in limit_readings(headers, SystemTime::now()) {
        match reading {
            Ok(reading) => {
                let (name, left, reset) = (reading.name(), reading.remaining(), reading.reset());
                manager.key(key).observe_remaining(name, left, reset);
            }
            Err(invalid) => {
                tracing::debug!(key, %invalid, "ignored a header the client cannot read")
            }
        }
    }
}

/// How errors name each family's fields.
const OPENAI: &str = "x-ratelimit-*";
const ANTHROPIC: &str = "anthropic-ratelimit-*";

/// One limit's reading from its family's values (`family`, for errors):
/// what remains of it, its size and its reset, the reset read by
/// `read_reset`.
fn reading(
    family: &'static str,
    name: &str,
    [remaining, limit, reset]: [Option<&str>; 3],
    read_reset: impl Fn(&str) -> Result<Duration, &'static str>,
) -> Result<LimitReading, InvalidHeader> {
    const COUNT: &str = "a count, not negative";
    let counted =
        |value: &str| count(value).ok_or_else(|| InvalidHeader::new(family, value, COUNT));
    let remaining = counted(remaining.unwrap_or(""))?;
    let limit = limit.map(counted).transpose()?;
    let reset = reset
        .map(|value| {
            read_reset(value).map_err(|expected| InvalidHeader::new(family, value, expected))
        })
        .transpose()?
        .map(|reset| reset.min(MAX_RESET));
    let name = name.replace('-', "_");
    Ok(LimitReading {
        name,
        limit,
        remaining,
        reset,
    })
}

/// A count: digits only (too many of them is `u64::MAX`, not garbage).
fn count(value: &str) -> Option<u64> {
    let value = value.trim();
    let digits = !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit());
    digits.then(|| value.parse().unwrap_or(u64::MAX))
}

/// A duration as Go prints it (`1h2m3.5s`, `6m0s`, `20ms`, `0s`), or a plain
/// number of seconds. `None` for anything else.
fn go_duration(value: &str) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<f64>() {
        return (seconds.is_finite() && seconds >= 0.0).then(|| saturating_secs(seconds));
    }
    let mut rest = value;
    let mut total = Duration::ZERO;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let number_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        let number: f64 = rest[..number_end].parse().ok()?;
        rest = &rest[number_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds_per = match &rest[..unit_end] {
            "h" => 3_600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        rest = &rest[unit_end..];
        total = total.saturating_add(saturating_secs(number * seconds_per));
    }
    Some(total)
}

fn saturating_secs(seconds: f64) -> Duration {
    Duration::try_from_secs_f64(seconds)
        .unwrap_or(MAX_RESET)
        .min(MAX_RESET)
}

/// The IETF fields: each `RateLimit` item with its `r` (and `t`), its `q`
/// from the `RateLimit-Policy` item of the same name.
fn ietf_readings(headers: &HeaderMap) -> Vec<Result<LimitReading, InvalidHeader>> {
    const EXPECTED: &str = "a list of quotas such as \"tokens\";r=250;t=12";
    let mut readings = Vec::new();
    let mut sizes: Vec<(String, u64)> = Vec::new();
    for value in headers.get_all("ratelimit-policy") {
        let Ok(value) = value.to_str() else { continue };
        let Ok(policies) = sfv::Parser::new(value).parse::<sfv::List>() else {
            readings.push(Err(InvalidHeader::new("RateLimit-Policy", value, EXPECTED)));
            continue;
        };
        for policy in &policies {
            if let sfv::ListEntry::Item(policy) = policy {
                if let (Some(name), Some(q)) = (item_name(policy), integer(policy, "q")) {
                    sizes.push((name, q));
                }
            }
        }
    }
    for value in headers.get_all("ratelimit") {
        let Ok(value) = value.to_str() else { continue };
        let Ok(quotas) = sfv::Parser::new(value).parse::<sfv::List>() else {
            readings.push(Err(InvalidHeader::new("RateLimit", value, EXPECTED)));
            continue;
        };
        for quota in &quotas {
            let sfv::ListEntry::Item(quota) = quota else {
                continue;
            };
            let (Some(name), Some(remaining)) = (item_name(quota), integer(quota, "r")) else {
                continue;
            };
            let limit = sizes
                .iter()
                .find(|(size, _)| *size == name)
                .map(|(_, q)| *q);
            let reset = integer(quota, "t").map(|t| Duration::from_secs(t).min(MAX_RESET));
            readings.push(Ok(LimitReading {
                name: name.replace('-', "_"),
                limit,
                remaining,
                reset,
            }));
        }
    }
    readings
}

/// An IETF quota's name: its item, a string or a token.
fn item_name(item: &sfv::Item) -> Option<String> {
    match &item.bare_item {
        sfv::BareItem::String(name) => Some(name.as_str().to_owned()),
        sfv::BareItem::Token(name) => Some(name.as_str().to_owned()),
        _ => None,
    }
}

/// A parameter that is an integer from 0.
fn integer(item: &sfv::Item, name: &'static str) -> Option<u64> {
    let number = item.params.get(sfv::KeyRef::constant(name))?.as_integer()?;
    u64::try_from(number).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(*name, value.parse().unwrap());
        }
        headers
    }

    fn read(pairs: &[(&'static str, &str)]) -> Vec<Result<LimitReading, InvalidHeader>> {
        limit_readings(
            &headers(pairs),
            SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600),
        )
    }

    fn reading(
        name: &str,
        limit: Option<u64>,
        remaining: u64,
        reset: Option<Duration>,
    ) -> LimitReading {
        LimitReading {
            name: name.to_owned(),
            limit,
            remaining,
            reset,
        }
    }

    #[test]
    fn openai_limits_are_read_with_their_durations() {
        let read = read(&[
            ("x-ratelimit-limit-requests", "60"),
            ("x-ratelimit-remaining-requests", "59"),
            ("x-ratelimit-reset-requests", "1s"),
            ("x-ratelimit-limit-tokens", "150000"),
            ("x-ratelimit-remaining-tokens", "149984"),
            ("x-ratelimit-reset-tokens", "6m0s"),
        ]);
        assert_eq!(
            read,
            [
                Ok(reading(
                    "requests",
                    Some(60),
                    59,
                    Some(Duration::from_secs(1))
                )),
                Ok(reading(
                    "tokens",
                    Some(150_000),
                    149_984,
                    Some(Duration::from_secs(360))
                )),
            ]
        );
    }

    #[test]
    fn go_durations_of_every_unit_are_read() {
        assert_eq!(
            go_duration("1h2m3.5s"),
            Some(Duration::from_millis(3_723_500))
        );
        assert_eq!(go_duration("20ms"), Some(Duration::from_millis(20)));
        assert_eq!(go_duration("0s"), Some(Duration::ZERO));
        assert_eq!(go_duration("1.5"), Some(Duration::from_millis(1_500)));
        assert_eq!(go_duration("7us"), Some(Duration::from_micros(7)));
        assert_eq!(go_duration("100000h"), Some(MAX_RESET));
        for bad in ["", "s", "5x", "-1s", "1..2s", "NaN", "inf", "1e400"] {
            assert_eq!(go_duration(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn anthropic_limits_are_read_with_their_times() {
        let read = read(&[
            ("anthropic-ratelimit-input-tokens-limit", "40000"),
            ("anthropic-ratelimit-input-tokens-remaining", "39000"),
            (
                "anthropic-ratelimit-input-tokens-reset",
                "2026-01-01T00:00:02Z",
            ),
            ("anthropic-ratelimit-output-tokens-remaining", "7000"),
            (
                "anthropic-ratelimit-output-tokens-reset",
                "2025-12-31T23:00:00Z",
            ),
        ]);
        assert_eq!(
            read,
            [
                Ok(reading(
                    "input_tokens",
                    Some(40_000),
                    39_000,
                    Some(Duration::from_secs(2))
                )),
                Ok(reading("output_tokens", None, 7_000, Some(Duration::ZERO))), // in the past
            ]
        );
    }

    #[test]
    fn ietf_fields_of_several_policies_are_read() {
        let read = read(&[
            (
                "ratelimit-policy",
                "\"requests\";q=600;w=60, \"tokens\";q=100000;w=60",
            ),
            ("ratelimit", "\"requests\";r=12;t=3, tokens;r=0;t=40"),
        ]);
        assert_eq!(
            read,
            [
                Ok(reading(
                    "requests",
                    Some(600),
                    12,
                    Some(Duration::from_secs(3))
                )),
                Ok(reading(
                    "tokens",
                    Some(100_000),
                    0,
                    Some(Duration::from_secs(40))
                )),
            ]
        );
    }

    #[test]
    fn unreadable_values_are_errors_and_the_rest_are_read() {
        let read = read(&[
            ("x-ratelimit-remaining-tokens", "-5"),
            ("x-ratelimit-remaining-requests", "3"),
            ("x-ratelimit-reset-requests", "soon"),
            (
                "anthropic-ratelimit-tokens-remaining",
                "99999999999999999999999",
            ),
            ("ratelimit", "((("),
        ]);
        let errors: Vec<_> = read
            .iter()
            .filter_map(|reading| reading.as_ref().err())
            .collect();
        assert_eq!(
            errors.iter().map(|error| error.value()).collect::<Vec<_>>(),
            ["-5", "soon", "((("]
        );
        let readings: Vec<_> = read.iter().flatten().collect();
        assert_eq!(readings, [&reading("tokens", None, u64::MAX, None)]);
    }

    proptest! {
        /// Hostile values: any text in any of the fields, never a panic,
        /// and every reset within `MAX_RESET`.
        #[test]
        fn no_header_value_panics_the_reader_or_resets_past_a_day(
            values in prop::collection::vec("[ -~]{0,40}", 6),
            seconds in any::<u64>(),
        ) {
            let names = [
                "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens",
                "anthropic-ratelimit-tokens-remaining", "anthropic-ratelimit-tokens-reset",
                "ratelimit", "ratelimit-policy",
            ];
            let mut headers = HeaderMap::new();
            for (name, value) in names.iter().zip(&values) {
                if let Ok(value) = value.parse() {
                    headers.insert(*name, value);
                }
            }
            let now = SystemTime::UNIX_EPOCH + Duration::from_secs(seconds % (1 << 40));
            for reading in limit_readings(&headers, now).into_iter().flatten() {
                prop_assert!(reading.reset().is_none_or(|reset| reset <= MAX_RESET));
            }
        }
    }
}
