//! Each control's file section: plain data that serde reads and writes,
//! turned into the builder's config; and the formats they share (two
//! numbers, durations as text).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::bulkhead::{BulkheadConfig, Overflow};
use crate::rate::RateConfig;
use crate::throttle::ThrottleConfig;

use super::Quota;

/// [`RateConfig`] as a file section: an adaptive rate (`starting_rate`,
/// with its bounds and steps) or a fixed quota (`quota = "600/min"`, with
/// at most a `burst`). Set at most one of `decrease_by` and
/// `decrease_factor`. Files written for 0.2 may still say `increment`
/// and `decrement` for `increase_by` and `decrease_by`.
///
/// ```
/// use portcullis::RateConfig;
/// use portcullis::builder::RateSection;
///
/// let adaptive: RateSection = toml::from_str("starting_rate = 10\ndecrease_by = 2").unwrap();
/// assert_eq!(adaptive.to_config().unwrap(), RateConfig::adaptive(10.0).decrease_by(2.0));
/// let fixed: RateSection = toml::from_str("quota = \"600/min\"\nburst = 20").unwrap();
/// assert_eq!(fixed.to_config().unwrap(), RateConfig::per_minute(600).burst(20));
/// ```
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct RateSection {
    /// Calls per second a new key starts at: an adaptive rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub starting_rate: Option<f64>,
    /// A fixed quota, `"<calls>/<period>"` ([`Quota`]): a rate that never
    /// moves, with a burst of `calls` unless `burst` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota: Option<Quota>,
    /// How many calls may start at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u32>,
    /// `[lower, upper]`: exactly two numbers.
    #[serde(
        default,
        deserialize_with = "two_numbers",
        skip_serializing_if = "Option::is_none"
    )]
    pub bounds: Option<[f64; 2]>,
    /// What a success adds ([`RateConfig::increase_by`]).
    #[serde(default, alias = "increment", skip_serializing_if = "Option::is_none")]
    pub increase_by: Option<f64>,
    /// What a failure subtracts ([`RateConfig::decrease_by`]).
    #[serde(default, alias = "decrement", skip_serializing_if = "Option::is_none")]
    pub decrease_by: Option<f64>,
    /// What a failure multiplies the rate by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decrease_factor: Option<f64>,
    /// How long after a decrease failures leave the rate alone.
    #[serde(
        default,
        with = "opt_duration",
        skip_serializing_if = "Option::is_none"
    )]
    pub decrease_cooldown: Option<Duration>,
}

impl RateSection {
    /// The builder config, or the problems a section alone can have:
    /// neither or both of `starting_rate` and `quota`. (Both kinds of
    /// decrease, and a fixed quota given bounds or steps, are refused by
    /// the builder's validation, which names the field.)
    ///
    /// # Errors
    ///
    /// The message to report under the section's path.
    ///
    /// ```
    /// use portcullis::builder::RateSection;
    ///
    /// let both: RateSection =
    ///     toml::from_str("starting_rate = 10\ndecrease_by = 2\ndecrease_factor = 0.5").unwrap();
    /// assert!(both.to_config().unwrap().validate().is_err());
    /// let neither: RateSection = toml::from_str("burst = 5").unwrap();
    /// assert_eq!(
    ///     neither.to_config().unwrap_err(),
    ///     "set starting_rate (an adaptive rate) or quota (a fixed one, like \"600/min\")"
    /// );
    /// ```
    pub fn to_config(&self) -> Result<RateConfig, String> {
        let mut config = match (self.starting_rate, self.quota) {
            (Some(rate), None) => RateConfig::adaptive(rate),
            (None, Some(quota)) => RateConfig::per(quota.calls, quota.period),
            (Some(_), Some(_)) => {
                return Err(
                    "set one of starting_rate (an adaptive rate) or quota (a fixed one), not both"
                        .into(),
                );
            }
            (None, None) => {
                return Err(
                    "set starting_rate (an adaptive rate) or quota (a fixed one, like \"600/min\")"
                        .into(),
                );
            }
        };
        if let Some(burst) = self.burst {
            config = config.burst(burst);
        }
        if let Some([lower, upper]) = self.bounds {
            config = config.bounds(lower, upper);
        }
        if let Some(step) = self.increase_by {
            config = config.increase_by(step);
        }
        if let Some(step) = self.decrease_by {
            config = config.decrease_by(step);
        }
        if let Some(factor) = self.decrease_factor {
            config = config.decrease_factor(factor);
        }
        if let Some(cooldown) = self.decrease_cooldown {
            config = config.decrease_cooldown(cooldown);
        }
        Ok(config)
    }
}

/// [`ThrottleConfig`] as a file section; unset fields keep the defaults.
///
/// ```
/// let throttle: portcullis::builder::ThrottleSection = toml::from_str(r#"window = "10s""#).unwrap();
/// let ten_seconds = portcullis::ThrottleConfig::new().window(std::time::Duration::from_secs(10));
/// assert_eq!(throttle.to_config(), ten_seconds);
/// ```
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ThrottleSection {
    /// `K`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ratio: Option<f64>,
    /// Calls per second a failing key still lets through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_rate: Option<f64>,
    /// How far back outcomes count.
    #[serde(
        default,
        with = "opt_duration",
        skip_serializing_if = "Option::is_none"
    )]
    pub window: Option<Duration>,
    /// No shedding below this many requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_requests: Option<u64>,
    /// The highest rejection probability.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rejection: Option<f64>,
}

impl ThrottleSection {
    /// The builder config.
    ///
    /// ```
    /// let config = portcullis::builder::ThrottleSection::default().to_config();
    /// assert_eq!(config, portcullis::ThrottleConfig::new());
    /// ```
    pub fn to_config(&self) -> ThrottleConfig {
        let mut config = ThrottleConfig::new();
        if let Some(ratio) = self.ratio {
            config = config.ratio(ratio);
        }
        if let Some(min_rate) = self.min_rate {
            config = config.min_rate(min_rate);
        }
        if let Some(window) = self.window {
            config = config.window(window);
        }
        if let Some(requests) = self.min_requests {
            config = config.min_requests(requests);
        }
        if let Some(probability) = self.max_rejection {
            config = config.max_rejection(probability);
        }
        config
    }
}

/// [`BulkheadConfig`] as a file section: a fixed limit
/// (`max_concurrent`) or a learned one (`adaptive = true`, with its
/// `bounds` and probe settings). `overflow` is `"reject-new"`,
/// `"drop-oldest"` or `"drop-lowest-priority"`.
///
/// ```
/// use portcullis::builder::BulkheadSection;
/// use portcullis::bulkhead::Overflow;
/// use portcullis::BulkheadConfig;
/// use std::time::Duration;
///
/// let fixed: BulkheadSection =
///     toml::from_str("max_concurrent = 4\nqueue = 8\noverflow = \"drop-oldest\"").unwrap();
/// assert_eq!(fixed.to_config().unwrap(), BulkheadConfig::new(4).queue(8).overflow(Overflow::DropOldest));
/// let learned: BulkheadSection =
///     toml::from_str("adaptive = true\nbounds = [2, 64]\nprobe_interval = \"10s\"\nqueue = 32").unwrap();
/// assert_eq!(
///     learned.to_config().unwrap(),
///     BulkheadConfig::adaptive().bounds(2, 64).probe_interval(Duration::from_secs(10)).queue(32)
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct BulkheadSection {
    /// A fixed limit: calls in flight at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrent: Option<u32>,
    /// `true`: a limit the key learns from its latency
    /// ([`BulkheadConfig::adaptive`]) instead of a fixed one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adaptive: Option<bool>,
    /// The range a learned limit stays in, `[min, max]`.
    #[serde(
        default,
        deserialize_with = "two_numbers",
        skip_serializing_if = "Option::is_none"
    )]
    pub bounds: Option<[u32; 2]>,
    /// How often a learned limit measures its unloaded latency.
    #[serde(
        default,
        with = "opt_duration",
        skip_serializing_if = "Option::is_none"
    )]
    pub probe_interval: Option<Duration>,
    /// How far each probe is moved at random.
    #[serde(
        default,
        with = "opt_duration",
        skip_serializing_if = "Option::is_none"
    )]
    pub probe_jitter: Option<Duration>,
    /// Calls a probe measures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe_calls: Option<u32>,
    /// The limit a probe holds while it measures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe_limit: Option<u32>,
    /// Calls that may wait.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<u32>,
    /// How long a call may wait.
    #[serde(
        default,
        with = "opt_duration",
        skip_serializing_if = "Option::is_none"
    )]
    pub queue_timeout: Option<Duration>,
    /// Who is turned away when the queue is full.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overflow: Option<Overflow>,
    /// Whether the queue is served round the calls' flows
    /// ([`BulkheadConfig::fair_queuing`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fair_queuing: Option<bool>,
}

impl BulkheadSection {
    /// The builder config, or the problem a section alone can have:
    /// neither or both of `max_concurrent` and `adaptive = true`. (A probe
    /// setting on a fixed limit is refused by the builder's validation,
    /// which names the field.)
    ///
    /// # Errors
    ///
    /// The message to report under the section's path.
    ///
    /// ```
    /// use portcullis::builder::BulkheadSection;
    ///
    /// let both: BulkheadSection = toml::from_str("max_concurrent = 4\nadaptive = true").unwrap();
    /// assert!(both.to_config().is_err());
    /// let neither: BulkheadSection = toml::from_str("queue = 8").unwrap();
    /// assert_eq!(
    ///     neither.to_config().unwrap_err(),
    ///     "set max_concurrent (a fixed limit) or adaptive = true (a learned one)"
    /// );
    /// ```
    pub fn to_config(&self) -> Result<BulkheadConfig, String> {
        let mut config = match (self.max_concurrent, self.adaptive.unwrap_or(false)) {
            (Some(limit), false) => BulkheadConfig::new(limit),
            (None, true) => BulkheadConfig::adaptive(),
            (Some(_), true) => {
                return Err(
                    "set one of max_concurrent (a fixed limit) or adaptive = true (a learned one), not both"
                        .into(),
                );
            }
            (None, false) => {
                return Err(
                    "set max_concurrent (a fixed limit) or adaptive = true (a learned one)".into(),
                );
            }
        };
        if let Some([min, max]) = self.bounds {
            config = config.bounds(min, max);
        }
        if let Some(interval) = self.probe_interval {
            config = config.probe_interval(interval);
        }
        if let Some(jitter) = self.probe_jitter {
            config = config.probe_jitter(jitter);
        }
        if let Some(calls) = self.probe_calls {
            config = config.probe_calls(calls);
        }
        if let Some(limit) = self.probe_limit {
            config = config.probe_limit(limit);
        }
        if let Some(queue) = self.queue {
            config = config.queue(queue);
        }
        if let Some(timeout) = self.queue_timeout {
            config = config.queue_timeout(timeout);
        }
        if let Some(overflow) = self.overflow {
            config = config.overflow(overflow);
        }
        if self.fair_queuing == Some(true) {
            config = config.fair_queuing();
        }
        Ok(config)
    }
}

/// `bounds`: exactly two numbers. (A fixed-size array alone lets some
/// formats, TOML among them, drop extra elements without a word.)
fn two_numbers<'de, D, T>(d: D) -> Result<Option<[T; 2]>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct TwoNumbers<T>(std::marker::PhantomData<T>);

    impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for TwoNumbers<T> {
        type Value = [T; 2];

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("exactly two numbers, [lower, upper]")
        }

        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<[T; 2], A::Error> {
            use serde::de::Error;
            let lower = seq
                .next_element()?
                .ok_or_else(|| A::Error::invalid_length(0, &self))?;
            let upper = seq
                .next_element()?
                .ok_or_else(|| A::Error::invalid_length(1, &self))?;
            let mut extra = 0;
            while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {
                extra += 1;
            }
            if extra > 0 {
                return Err(A::Error::invalid_length(2 + extra, &self));
            }
            Ok([lower, upper])
        }
    }

    d.deserialize_seq(TwoNumbers(std::marker::PhantomData))
        .map(Some)
}

/// `Duration` as a humantime string.
pub(super) mod duration {
    use std::time::Duration;

    use serde::{Deserializer, Serializer};

    pub(in crate::config) fn serialize<S: Serializer>(
        value: &Duration,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        super::opt_duration::serialize(&Some(*value), s)
    }

    pub(in crate::config) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Duration, D::Error> {
        super::opt_duration::deserialize(d)?
            .ok_or_else(|| serde::de::Error::custom("a duration like \"250ms\" is required"))
    }
}

/// `Option<Duration>` as an optional humantime string.
pub(super) mod opt_duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(in crate::config) fn serialize<S: Serializer>(
        value: &Option<Duration>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            Some(d) => s.serialize_str(&humantime::format_duration(*d).to_string()),
            None => s.serialize_none(),
        }
    }

    pub(in crate::config) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        let text = Option::<String>::deserialize(d)?;
        text.map(|text| {
            humantime::parse_duration(&text).map_err(|e| {
                serde::de::Error::custom(format!(
                    "{e} in {text:?} (a duration like \"250ms\" or \"1m\")"
                ))
            })
        })
        .transpose()
    }
}

/// A table of names (tiers, per-key overrides) that refuses a name given
/// twice: TOML does, but JSON (and serde's maps) would keep the last one,
/// silently.
pub(super) mod unique_names {
    use std::collections::BTreeMap;
    use std::fmt;
    use std::marker::PhantomData;

    use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};

    pub(in crate::config) fn deserialize<'de, D, V>(d: D) -> Result<BTreeMap<String, V>, D::Error>
    where
        D: Deserializer<'de>,
        V: Deserialize<'de>,
    {
        d.deserialize_map(UniqueNames(PhantomData))
    }

    struct UniqueNames<V>(PhantomData<V>);

    impl<'de, V: Deserialize<'de>> Visitor<'de> for UniqueNames<V> {
        type Value = BTreeMap<String, V>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a table of names")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut names = BTreeMap::new();
            while let Some(name) = map.next_key::<String>()? {
                let value = map.next_value()?;
                if names.insert(name.clone(), value).is_some() {
                    return Err(de::Error::custom(format!("{name:?} is given twice")));
                }
            }
            Ok(names)
        }
    }
}
