//! A fixed quota as a file writes it: `"600/min"`, `"50/s"`, `"100/10s"`.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// `calls` per `period`: the `quota` of a [`RateSection`](super::RateSection),
/// written `"<calls>/<period>"`, the period a unit (`s`, `min`, `h`, `day`,
/// and their long forms) or a duration (`10s`, `500ms`, `1h 30m`).
///
/// ```
/// use portcullis::builder::Quota;
/// use std::time::Duration;
///
/// let quota: Quota = "600/min".parse()?;
/// assert_eq!((quota.calls, quota.period), (600, Duration::from_secs(60)));
/// assert_eq!("100/10s".parse::<Quota>()?.period, Duration::from_secs(10));
/// assert_eq!(quota.to_string(), "600/1m");
/// let err = "600 a minute".parse::<Quota>().unwrap_err();
/// assert_eq!(err, r#"invalid quota "600 a minute": expected <calls>/<period>, like "600/min" or "100/10s""#);
/// # Ok::<(), String>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Quota {
    /// How many calls each period allows.
    pub calls: u32,
    /// The period.
    pub period: Duration,
}

impl Quota {
    /// `calls` per `period`.
    ///
    /// ```
    /// use portcullis::builder::Quota;
    /// use std::time::Duration;
    ///
    /// assert_eq!(Quota::new(50, Duration::from_secs(1)).to_string(), "50/1s");
    /// ```
    pub fn new(calls: u32, period: Duration) -> Self {
        Self { calls, period }
    }
}

/// The period of a quota written as a unit alone (`600/min`).
fn unit(text: &str) -> Option<Duration> {
    let seconds = match text {
        "s" | "sec" | "second" => 1,
        "m" | "min" | "minute" => 60,
        "h" | "hr" | "hour" => 3_600,
        "d" | "day" => 86_400,
        _ => return None,
    };
    Some(Duration::from_secs(seconds))
}

impl FromStr for Quota {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let invalid = |why: &str| format!("invalid quota {text:?}: {why}");
        let expected = || invalid("expected <calls>/<period>, like \"600/min\" or \"100/10s\"");
        let (calls, period) = text.split_once('/').ok_or_else(expected)?;
        let calls = calls.trim().replace('_', "");
        let calls: u32 = calls.parse().map_err(|_| {
            invalid(&format!(
                "the calls must be a whole number from 0 to {}, got {calls:?}",
                u32::MAX
            ))
        })?;
        let period = period.trim();
        let period = match unit(period) {
            Some(period) => period,
            None => humantime::parse_duration(period).map_err(|e| {
                invalid(&format!(
                    "the period must be a unit (s, min, h, day) or a duration (10s), got {period:?}: {e}"
                ))
            })?,
        };
        Ok(Self { calls, period })
    }
}

impl fmt::Display for Quota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{}",
            self.calls,
            humantime::format_duration(self.period)
        )
    }
}

impl Serialize for Quota {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Quota {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_unit_and_duration_reads() {
        for (text, calls, seconds) in [
            ("600/min", 600, 60),
            ("50/s", 50, 1),
            ("1000/hour", 1_000, 3_600),
            ("10_000 / day", 10_000, 86_400),
            ("100/10s", 100, 10),
            ("5/1h 30m", 5, 5_400),
        ] {
            let quota: Quota = text.parse().unwrap();
            assert_eq!(
                quota,
                Quota::new(calls, Duration::from_secs(seconds)),
                "{text}"
            );
            // What it writes reads back as the same quota.
            assert_eq!(quota.to_string().parse::<Quota>().unwrap(), quota);
        }
    }

    #[test]
    fn a_bad_quota_says_which_part_is_wrong() {
        let err = |text: &str| text.parse::<Quota>().unwrap_err();
        assert!(err("600").contains("expected <calls>/<period>"));
        assert!(
            err("-1/min")
                .contains(r#"the calls must be a whole number from 0 to 4294967295, got "-1""#)
        );
        assert!(err("ten/min").contains(r#"got "ten""#));
        assert!(err("600/fortnight").contains(
            r#"the period must be a unit (s, min, h, day) or a duration (10s), got "fortnight""#
        ));
    }
}
