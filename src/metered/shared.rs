//! A metered call's parts of its key's named limits when a store keeps
//! them ([`RateStore::take_limits`](crate::store::RateStore::take_limits)),
//! and of its key's rate (its [`REQUESTS`]) when that is in the store too:
//! taken in one round trip, settled by reports sent without waiting.

use std::sync::{Arc, Mutex, PoisonError};

use super::cost::REQUESTS;
use crate::store::{LimitRequest, RateEvent, RateRules, StoreHandle, TokenReceipt};

/// The parts a store took of a call's named limits. Dropped before the
/// call is admitted (its key's own controls refused it, or its caller gave
/// up), every part goes back.
pub(crate) struct SharedLimits {
    handle: Arc<StoreHandle>,
    /// The key's name in the store.
    key: Arc<str>,
    parts: Vec<SharedPart>,
    admitted: bool,
}

/// One limit's part: what the store needs to settle it, and what the call
/// holds of it as settled so far.
struct SharedPart {
    limit: Arc<str>,
    rules: RateRules,
    mark: TokenReceipt,
    holds: Mutex<u32>,
}

impl SharedPart {
    fn holds(&self) -> u32 {
        *self.holds.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl SharedLimits {
    /// The parts `handle`'s store took for `key`: each limit's name, rules,
    /// what it took and its mark, in order.
    pub(crate) fn new(
        handle: Arc<StoreHandle>,
        key: Arc<str>,
        parts: impl IntoIterator<Item = (Arc<str>, RateRules, u32, TokenReceipt)>,
    ) -> Self {
        let parts = parts
            .into_iter()
            .map(|(limit, rules, taken, mark)| SharedPart {
                limit,
                rules,
                mark,
                holds: Mutex::new(taken),
            })
            .collect();
        Self {
            handle,
            key,
            parts,
            admitted: false,
        }
    }

    /// The call was admitted: its parts stay taken when these are dropped.
    pub(crate) fn admitted(mut self) -> Self {
        self.admitted = true;
        self
    }

    /// Each named limit's name and what the call holds of it (the
    /// requests apart: [`requests`](Self::requests)).
    pub(crate) fn each(&self) -> impl Iterator<Item = (String, u32)> + '_ {
        (self.parts.iter())
            .filter(|part| &*part.limit != REQUESTS)
            .map(|part| (part.limit.to_string(), part.holds()))
    }

    /// Whether a part of the limit named `limit` is here.
    pub(crate) fn holds(&self, limit: &str) -> bool {
        self.parts.iter().any(|part| &*part.limit == limit)
    }

    /// What the call holds of its key's rate, if the store took its
    /// requests.
    pub(crate) fn requests(&self) -> Option<u32> {
        let part = self.parts.iter().find(|part| &*part.limit == REQUESTS)?;
        Some(part.holds())
    }

    /// The call now holds `amount` of the limit named `limit`; `false` if
    /// no part of it is here.
    pub(crate) fn settle(&self, limit: &str, amount: u32) -> bool {
        let Some(part) = self.parts.iter().find(|part| &*part.limit == limit) else {
            return false;
        };
        let mut holds = part.holds.lock().unwrap_or_else(PoisonError::into_inner);
        let more = i64::from(amount) - i64::from(*holds);
        *holds = amount;
        drop(holds);
        self.send(part, more);
        true
    }

    /// Every part goes back, the requests too if `requests`: the call
    /// never reached the backend, or was not admitted.
    pub(crate) fn give_back(&self, requests: bool) {
        let parts = self.parts.iter();
        for part in parts.filter(|part| requests || &*part.limit != REQUESTS) {
            let mut holds = part.holds.lock().unwrap_or_else(PoisonError::into_inner);
            let held = std::mem::take(&mut *holds);
            drop(holds);
            self.send(part, -i64::from(held));
        }
    }

    /// The call's outcome, as `event_of` makes it for a part of so many
    /// tokens, told to each adaptive named limit (a fixed one learns
    /// nothing from it; the requests are the key's permit's to report).
    /// Sent without waiting, as the rate's reports are
    /// ([`StoreHandle::spawn_report`]).
    pub(crate) fn report(&self, event_of: impl Fn(u32) -> Option<RateEvent>) {
        let adaptive = (self.parts.iter()).filter(|part| {
            &*part.limit != REQUESTS && part.rules.lower_bound < part.rules.upper_bound
        });
        for part in adaptive {
            let Some(event) = event_of(part.holds()) else {
                return;
            };
            self.handle.spawn_report(|handle| {
                let (key, limit, rules) =
                    (Arc::clone(&self.key), Arc::clone(&part.limit), part.rules);
                async move {
                    handle.store.report_limit(&key, &limit, event, rules).await;
                }
            });
        }
    }

    /// Sends `more` of `part` to the store on a task of the current tokio
    /// runtime, without waiting for it; outside a runtime, nothing is sent
    /// (the store keeps the estimate).
    fn send(&self, part: &SharedPart, more: i64) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if more == 0 {
            return;
        }
        let (handle, key) = (Arc::clone(&self.handle), Arc::clone(&self.key));
        let (limit, rules, mark) = (Arc::clone(&part.limit), part.rules, part.mark.clone());
        runtime.spawn(async move {
            let request = LimitRequest::new(&limit, rules, 0);
            handle.store.settle_limit(&key, request, more, &mark).await;
        });
    }
}

impl Drop for SharedLimits {
    fn drop(&mut self) {
        if !self.admitted {
            self.give_back(true);
        }
    }
}
