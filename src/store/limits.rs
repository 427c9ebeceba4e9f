//! What a store may do for a metered call: take its part of each limit of
//! a key at once, its named limits and its requests of the key's rate
//! ([`RateStore::take_limits`](super::RateStore::take_limits)); settle what
//! it cost once its answer says
//! ([`RateStore::settle_limit`](super::RateStore::settle_limit)); and
//! teach an adaptive limit its outcome
//! ([`RateStore::report_limit`](super::RateStore::report_limit)). Each is
//! optional: a store without them leaves the named limits local to each
//! process.

use std::time::Duration;

use super::{RateRules, TokenReceipt};

/// The name by which a [`Cost`](crate::metered::Cost) means the key's own rate (its
/// [`rate`](crate::builder::ThrottleManagerBuilder::rate)): the requests. Reserved:
/// no named limit may take it. A store asked for a part of this name
/// ([`take_limits`](super::RateStore::take_limits)) takes it from the
/// key's rate.
///
/// ```
/// assert_eq!(portcullis::metered::Cost::requests(2).amount(portcullis::metered::REQUESTS), 2);
/// assert_eq!(portcullis::store::REQUESTS, portcullis::metered::REQUESTS);
/// ```
pub const REQUESTS: &str = "requests";

/// One named limit of a metered call's key, as a store is asked to take
/// the call's part of it.
///
/// ```
/// use portcullis::RateConfig;
/// use portcullis::store::{LimitRequest, RateRules};
///
/// let rules = RateRules::of(&RateConfig::per_minute(100_000).burst(8_000))?;
/// let part = LimitRequest::new("tokens", rules, 700);
/// assert_eq!((part.limit, part.cost), ("tokens", 700));
/// # Ok::<(), portcullis::error::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct LimitRequest<'a> {
    /// The limit's name; [`REQUESTS`] for the
    /// call's tokens of the key's own rate.
    pub limit: &'a str,
    /// The limit's rules: its rate, burst and bounds.
    pub rules: RateRules,
    /// The call's part of it, in the limit's tokens.
    pub cost: u32,
}

impl<'a> LimitRequest<'a> {
    /// A call's `cost` of the limit named `limit`, under `rules`.
    pub fn new(limit: &'a str, rules: RateRules, cost: u32) -> Self {
        Self { limit, rules, cost }
    }
}

/// A store's answer to [`take_limits`](super::RateStore::take_limits).
///
/// ```
/// use portcullis::store::{LimitsAnswer, TokenReceipt};
/// use std::time::Duration;
///
/// let waits = LimitsAnswer::Wait { wait: Duration::from_secs(2), limit: 1 };
/// let taken = LimitsAnswer::Taken { marks: vec![TokenReceipt::new("12,0")] };
/// # drop((waits, taken));
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum LimitsAnswer {
    /// Every limit took the call's part, each with the mark by which the
    /// store gives back what the call does not use (in the order asked).
    Taken {
        /// What identifies each part to the store.
        marks: Vec<TokenReceipt>,
    },
    /// Not every limit has room now: the one at index `limit` waits
    /// longest, `wait`. Nothing was taken.
    Wait {
        /// How long until every limit has room.
        wait: Duration,
        /// The index, in the order asked, of the limit that waits longest.
        limit: usize,
    },
    /// The store cannot answer now (or does not keep named limits): the
    /// process decides on its own limits.
    Unavailable,
}
