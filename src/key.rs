//! Everything one key holds, and when it may be forgotten.
//!
//! The words used here (debt, fall, news, quiet, room, hold, ticket, ...)
//! are defined once, in [the architecture map](crate::architecture).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::bulkhead::Bulkhead;
use crate::bulkhead::BulkheadSettings;
use crate::clock::Nanos;
use crate::deadline::AnswerTime;
use crate::rate::RateCell;
use crate::rate::RateSettings;
use crate::retry_budget::RetryBudget;
use crate::store::StoreKey;
use crate::throttle::ThrottleSettings;
use crate::throttle::ThrottleWindow;

/// The state of one key, shared through a (`triomphe`) `Arc` by the key
/// space and by every permit and waiter of the key.
///
/// A key of a manager with only a rate, at its default settings, is just its
/// rate cell and a null pointer: 48 bytes. The controls beyond the rate
/// live in one optional allocation, and the key's own settings (for the few
/// keys that have them) in another, reached through the first.
#[derive(Debug)]
pub(crate) struct KeyState {
    pub(crate) rate: RateCell,
    extras: Option<Box<Extras>>,
}

/// What a key holds beyond its rate cell, when it holds anything: 136
/// bytes with all three controls, the throttle's counts of four priorities
/// included.
#[derive(Debug, Default)]
struct Extras {
    /// The key's own settings, where any differ from the manager's
    /// defaults.
    own: Option<Box<OwnSettings>>,
    /// The key's throttle window, used when the key has a throttle (its
    /// own settings or the manager's default: see `Core::throttle_of`).
    /// Not an `Option`: an absent window would take as many bytes, and the
    /// settings already say whether it counts.
    throttle: ThrottleWindow,
    /// The key's bulkhead, used when the key has one (see
    /// `Core::bulkhead_of`), likewise. Calls in flight or queued hold the
    /// key's `Arc`, which keeps the key from being evicted.
    bulkhead: Bulkhead,
    /// The key's retry budget, used when the manager retries: one word,
    /// written by every logical call.
    retry: RetryBudget,
    /// The quickest recent answer of the key's calls with a deadline
    /// ([`AnswerTime`]'s word), by which a call with a deadline judges
    /// whether it can still finish in time. A key without extras keeps it
    /// with its rate's line, made by its first such answer.
    answered: AtomicU32,
}

/// A key's own settings (`None`: the manager's default for that control),
/// and its link to the store its rate lives in, if it has one (rare, like
/// the settings: kept off the extras that every key with a bulkhead or a
/// throttle has).
#[derive(Debug, Default)]
struct OwnSettings {
    rate: Option<Arc<RateSettings>>,
    throttle: Option<Arc<ThrottleSettings>>,
    bulkhead: Option<Arc<BulkheadSettings>>,
    store_key: Option<StoreKey>,
}

impl KeyState {
    /// A key's state: its rate cell, and what else it has, each with its
    /// own settings where they are not the manager's default.
    pub(crate) fn new(
        rate: RateCell,
        rate_settings: Option<Arc<RateSettings>>,
        throttle: Option<(ThrottleWindow, Option<Arc<ThrottleSettings>>)>,
        bulkhead: Option<(Bulkhead, Option<Arc<BulkheadSettings>>)>,
    ) -> Self {
        let (throttle, throttle_settings) = throttle.map_or((None, None), |(w, s)| (Some(w), s));
        let (bulkhead, bulkhead_settings) = bulkhead.map_or((None, None), |(b, s)| (Some(b), s));
        let own = OwnSettings {
            rate: rate_settings,
            throttle: throttle_settings,
            bulkhead: bulkhead_settings,
            store_key: None,
        };
        let any_own = own.rate.is_some() || own.throttle.is_some() || own.bulkhead.is_some();
        let needed = throttle.is_some() || bulkhead.is_some() || any_own;
        Self {
            rate,
            extras: needed.then(|| {
                Box::new(Extras {
                    throttle: throttle.unwrap_or_default(),
                    bulkhead: bulkhead.unwrap_or_default(),
                    own: any_own.then(|| Box::new(own)),
                    retry: RetryBudget::default(),
                    answered: AtomicU32::new(0),
                })
            }),
        }
    }

    /// A call of this key with a deadline had its answer `took` after its
    /// admission. Two answers at once may keep only one: an estimate.
    pub(crate) fn answered_in(&self, took: Nanos) {
        let word = match self.extras.as_deref() {
            Some(extras) => &extras.answered,
            None => self.rate.answer_time(),
        };
        let was = AnswerTime(word.load(Ordering::Relaxed));
        let now = was.after(took);
        if now != was {
            word.store(now.0, Ordering::Relaxed);
        }
    }

    /// The quickest recent answer of the key's calls with a deadline; 0
    /// before the first.
    #[inline]
    pub(crate) fn quickest_answer(&self) -> Nanos {
        let word = match self.extras.as_deref() {
            Some(extras) => Some(&extras.answered),
            None => self.rate.answer_time_if_any(),
        };
        word.map_or(0, |word| AnswerTime(word.load(Ordering::Relaxed)).nanos())
    }

    /// The key with its rate in a store, under `store_key`.
    pub(crate) fn with_store_key(mut self, store_key: StoreKey) -> Self {
        let extras = self.extras.get_or_insert_with(Box::default);
        extras.own.get_or_insert_with(Box::default).store_key = Some(store_key);
        self
    }

    /// The key with a retry budget (every key of a manager that retries).
    pub(crate) fn with_retry_budget(mut self) -> Self {
        self.extras.get_or_insert_with(Box::default);
        self
    }

    /// The key's retry budget, if it has one ([`with_retry_budget`](Self::with_retry_budget)).
    #[inline]
    pub(crate) fn retry_budget(&self) -> Option<&RetryBudget> {
        Some(&self.extras.as_deref()?.retry)
    }

    /// The key's link to the store its rate lives in, if it has one.
    #[inline]
    pub(crate) fn store_key(&self) -> Option<&StoreKey> {
        self.own()?.store_key.as_ref()
    }

    /// The key's own settings, if any differ from the manager's defaults.
    #[inline]
    fn own(&self) -> Option<&OwnSettings> {
        self.extras.as_deref()?.own.as_deref()
    }

    /// The key's own rate settings; `None` for the manager's default.
    #[inline]
    pub(crate) fn rate_settings(&self) -> Option<&RateSettings> {
        self.own()?.rate.as_deref()
    }

    /// The key's throttle window and its own settings (`None`: the
    /// default), with one look at the extras.
    #[inline]
    pub(crate) fn throttle_with_settings(
        &self,
    ) -> Option<(&ThrottleWindow, Option<&ThrottleSettings>)> {
        let extras = self.extras.as_deref()?;
        Some((
            &extras.throttle,
            extras
                .own
                .as_deref()
                .and_then(|own| own.throttle.as_deref()),
        ))
    }

    /// The key's bulkhead and its own settings (`None`: the default), with
    /// one look at the extras.
    #[inline]
    pub(crate) fn bulkhead_with_settings(&self) -> Option<(&Bulkhead, Option<&BulkheadSettings>)> {
        let extras = self.extras.as_deref()?;
        Some((
            &extras.bulkhead,
            extras
                .own
                .as_deref()
                .and_then(|own| own.bulkhead.as_deref()),
        ))
    }

    /// The key's bulkhead, for a call that holds a slot of it: only a key
    /// with a bulkhead gives one (see `Core::bulkhead_of`).
    pub(crate) fn bulkhead(&self) -> Option<&Bulkhead> {
        Some(&self.extras.as_deref()?.bulkhead)
    }

    /// Whether the key holds something a fresh key would not: a rate that
    /// moved from where it started. `default_rate` is the manager's default
    /// rate settings.
    pub(crate) fn rate_moved(&self, default_rate: Option<&RateSettings>) -> bool {
        self.rate_settings()
            .or(default_rate)
            .is_some_and(|settings| self.rate.rate() != settings.starting_rate)
    }

    /// Until when forgetting this key would forgive calls its rate admitted
    /// (not a pause, not shedding): `now` for a key without a rate.
    pub(crate) fn debt_until(&self, now: Nanos, default_rate: Option<&RateSettings>) -> Nanos {
        match self.rate_settings().or(default_rate) {
            Some(settings) => self.rate.debt_until(now, settings.burst),
            None => now,
        }
    }

    /// When forgetting this key loses nothing: once its bucket owes no token
    /// and its throttle is not shedding (see [`ThrottleWindow::quiet_from`]).
    /// `default_throttle` is the manager's default throttle settings.
    pub(crate) fn quiet_from(&self, default_throttle: Option<&ThrottleSettings>) -> Nanos {
        let rate_quiet = self.rate.full_from();
        let throttle = self.throttle_with_settings();
        match throttle.and_then(|(window, own)| Some((window, own.or(default_throttle)?))) {
            Some((window, settings)) => rate_quiet.max(window.quiet_from(settings)),
            None => rate_quiet,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a key with every control costs beyond its rate cell: a healthy
    /// throttle's few words (its buckets live apart, while a failure is in
    /// its window), the bulkhead's counter and lock, the retry budget and
    /// the link to the key's own settings: 96 bytes, a 112-byte block.
    #[test]
    fn the_extras_of_a_key_with_every_control_fit_in_96_bytes() {
        assert_eq!(std::mem::size_of::<ThrottleWindow>(), 48);
        assert_eq!(std::mem::size_of::<Bulkhead>(), 32);
        assert_eq!(std::mem::size_of::<Extras>(), 104);
        assert_eq!(std::mem::size_of::<KeyState>(), 48);
    }
}
