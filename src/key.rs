//! Everything one key holds, and when it may be forgotten.
//!
//! The words used here (debt, fall, news, quiet, room, hold, ticket, ...)
//! are defined once, in [the architecture map](crate::architecture).

use std::sync::Arc;

use crate::bulkhead::config::BulkheadSettings;
use crate::bulkhead::limiter::Bulkhead;
use crate::clock::Nanos;
use crate::rate::cell::RateCell;
use crate::rate::config::RateSettings;
use crate::retry::budget::RetryBudget;
use crate::store::StoreKey;
use crate::throttle::config::ThrottleSettings;
use crate::throttle::window::ThrottleWindow;

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

/// What a key holds beyond its rate cell, when it holds anything.
///
/// `repr(C)`, in this order, for two threads on one key: what every call
/// only reads (`own`, the throttle's newest bucket, its clean mark and its
/// counters' places) fills the first 64 bytes, and the bulkhead's state
/// word, which every call writes twice, sits at 112. From any 16-byte
/// aligned address (what the allocator gives) the two never share a cache
/// line, so a slot taken on one core does not evict the throttle's fields
/// from the other's cache, wherever the allocator puts the extras. The
/// retry budget's word, written by every call of a manager that retries,
/// follows the bulkhead's, on its line: 128 bytes in all.
#[derive(Debug, Default)]
#[repr(C)]
struct Extras {
    /// The key's own settings, where any differ from the manager's
    /// defaults.
    own: Option<Box<OwnSettings>>,
    /// Present when the manager has a throttle.
    throttle: Option<ThrottleWindow>,
    /// Present when the manager has a bulkhead. Calls in flight or queued
    /// hold the key's `Arc`, which keeps the key from being evicted.
    bulkhead: Option<Bulkhead>,
    /// The key's retry budget, used when the manager retries: one word,
    /// written by every logical call, so beside the bulkhead's.
    retry: RetryBudget,
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
                    throttle,
                    bulkhead,
                    own: any_own.then(|| Box::new(own)),
                    retry: RetryBudget::default(),
                })
            }),
        }
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
            extras.throttle.as_ref()?,
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
            extras.bulkhead.as_ref()?,
            extras
                .own
                .as_deref()
                .and_then(|own| own.bulkhead.as_deref()),
        ))
    }

    pub(crate) fn bulkhead(&self) -> Option<&Bulkhead> {
        self.extras.as_ref()?.bulkhead.as_ref()
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
    use crate::ThrottleConfig;
    use crate::sync::bytes_of;

    /// What every call only reads and the bulkhead's word that every call
    /// writes are never on one cache line, wherever the allocator puts the
    /// extras (at a multiple of 16 bytes): two threads on one key would
    /// otherwise evict each other's reads on every slot taken and freed.
    /// And the extras stay 128 bytes.
    #[test]
    fn the_bulkheads_writes_keep_off_the_cache_line_of_every_calls_reads() {
        let settings = ThrottleSettings::for_test(ThrottleConfig::new());
        let extras = Box::new(Extras {
            own: None,
            throttle: Some(ThrottleWindow::new(4, 0, &settings)),
            bulkhead: Some(Bulkhead::default()),
            retry: RetryBudget::default(),
        });
        let base = bytes_of(&*extras).start;
        let relative = |bytes: std::ops::Range<usize>| bytes.start - base..bytes.end - base;
        let window = extras
            .throttle
            .as_ref()
            .map(ThrottleWindow::read_by_every_call);
        let read = [bytes_of(&extras.own), window.unwrap_or_default()].map(relative);
        let written = relative(extras.bulkhead.as_ref().unwrap().written_by_every_call());
        for start in (0..64).step_by(16) {
            let lines = |bytes: &std::ops::Range<usize>| {
                (start + bytes.start) / 64..=(start + bytes.end - 1) / 64
            };
            for read in &read {
                let (read, written) = (lines(read), lines(&written));
                assert!(
                    read.end() < written.start() || written.end() < read.start(),
                    "at {start} past a line: reads on lines {read:?}, writes on {written:?}"
                );
            }
        }
        assert!(std::mem::size_of::<Extras>() <= 128);
    }
}
