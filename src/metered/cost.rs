//! [`Cost`]: what one call costs in each of its key's limits.

use std::borrow::Cow;
use std::fmt;

pub use crate::store::REQUESTS;

/// What one call costs in each limit of its key: the key's rate (its
/// requests: 1 unless said otherwise) and the named limits the manager
/// declares with [`limit`](crate::builder::ThrottleManagerBuilder::limit). A limit
/// the cost leaves out costs nothing.
///
/// Given to [`acquire_cost`](crate::ThrottleManager::acquire_cost) as an
/// estimate before the call, and to [`settle`](crate::metered::CostPermit::settle)
/// as what the call cost, once its answer says.
///
/// ```
/// use portcullis::metered::Cost;
///
/// let cost = Cost::of("input_tokens", 1_200).and("output_tokens", 500);
/// assert_eq!(cost.amount("input_tokens"), 1_200);
/// assert_eq!(cost.amount("output_tokens"), 500);
/// assert_eq!(cost.amount("requests"), 1); // one request, unless said otherwise
/// assert_eq!(Cost::of("tokens", 10).and("tokens", 5).amount("tokens"), 15); // amounts add up
/// assert_eq!(Cost::requests(3).amount("requests"), 3);
/// ```
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Cost {
    /// The key's rate tokens, if said (`None`: one at admission, unchanged
    /// when settled).
    requests: Option<u32>,
    /// Each named limit's amount, in the order first named, each name once.
    limits: Vec<(Cow<'static, str>, u32)>,
}

impl Cost {
    /// `amount` of the limit named `limit` (and one request). The name
    /// [`"requests"`](REQUESTS) means the key's rate.
    ///
    /// ```
    /// let estimate = portcullis::metered::Cost::of("tokens", 500);
    /// # drop(estimate);
    /// ```
    pub fn of(limit: impl Into<Cow<'static, str>>, amount: u32) -> Self {
        Self::default().and(limit, amount)
    }

    /// `calls` of the key's rate alone (a batch that counts as several
    /// requests), and nothing of a named limit.
    ///
    /// ```
    /// let batch = portcullis::metered::Cost::requests(10).and("tokens", 4_000);
    /// assert_eq!(batch.amount("requests"), 10);
    /// ```
    pub fn requests(calls: u32) -> Self {
        Self {
            requests: Some(calls),
            limits: Vec::new(),
        }
    }

    /// This cost and `amount` more of `limit`: the amounts of one limit add
    /// up (saturating).
    ///
    /// ```
    /// let cost = portcullis::metered::Cost::of("input_tokens", 900).and("output_tokens", 300);
    /// assert_eq!(cost.amount("output_tokens"), 300);
    /// ```
    #[must_use]
    pub fn and(mut self, limit: impl Into<Cow<'static, str>>, amount: u32) -> Self {
        let limit = limit.into();
        if limit == REQUESTS {
            self.requests = Some(self.requests.unwrap_or(0).saturating_add(amount));
        } else if let Some((_, sum)) = self.limits.iter_mut().find(|(name, _)| *name == limit) {
            *sum = sum.saturating_add(amount);
        } else {
            self.limits.push((limit, amount));
        }
        self
    }

    /// What this cost takes of `limit`: 0 for a limit it leaves out, and of
    /// [`"requests"`](REQUESTS) 1 unless said otherwise.
    ///
    /// ```
    /// assert_eq!(portcullis::metered::Cost::of("tokens", 7).amount("images"), 0);
    /// ```
    pub fn amount(&self, limit: &str) -> u32 {
        if limit == REQUESTS {
            return self.requests.unwrap_or(1);
        }
        self.named()
            .find(|(name, _)| *name == limit)
            .map_or(0, |(_, amount)| amount)
    }

    /// The requests, if the cost says them.
    pub(crate) fn said_requests(&self) -> Option<u32> {
        self.requests
    }

    /// Each named limit the cost names, with its amount.
    pub(crate) fn named(&self) -> impl Iterator<Item = (&str, u32)> {
        self.limits
            .iter()
            .map(|(name, amount)| (name.as_ref(), *amount))
    }
}

impl fmt::Debug for Cost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut map = f.debug_map();
        map.entry(&REQUESTS, &self.amount(REQUESTS));
        for (name, amount) in self.named() {
            map.entry(&name, &amount);
        }
        map.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_named_as_a_limit_are_the_requests() {
        let cost = Cost::of("requests", 2).and("tokens", 9);
        assert_eq!(cost.said_requests(), Some(2));
        assert_eq!(cost.named().collect::<Vec<_>>(), [("tokens", 9)]);
        assert_eq!(Cost::of("tokens", 9).said_requests(), None);
        assert_eq!(
            format!("{:?}", Cost::of("tokens", u32::MAX).and("tokens", 1)),
            "{\"requests\": 1, \"tokens\": 4294967295}"
        );
    }
}
