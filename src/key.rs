//! Everything one key holds, and when it may be forgotten.
//!
//! The words used here (debt, fall, news, quiet, room, hold, ticket, ...)
//! are defined once, in [the architecture map](crate::guide::architecture).

use std::sync::atomic::{AtomicU32, Ordering};

use crate::bulkhead::Bulkhead;
use crate::clock::Nanos;
use crate::deadline::AnswerTime;
use crate::rate::{RateCell, RateSettings};
use crate::retry_budget::RetryBudget;
use crate::store::StoreKey;
use crate::throttle::{ThrottleSettings, ThrottleWindow};

/// The state of one key, shared through a (`triomphe`) `Arc` by the key
/// space and by every permit and waiter of the key.
///
/// A key of a manager with only a rate is just its rate cell (with its
/// settings' number in it) and a null pointer: 48 bytes. The controls beyond the rate live
/// in one optional allocation, and the key's link to a rate store (for a
/// manager with one) in another, reached through the first.
#[derive(Debug)]
pub(crate) struct KeyState {
    /// The key's rate, and in its cell's spare word ([`RateCell::tag`])
    /// where the key's settings are in the manager's table and their
    /// generation (the core's `SettingsWord`), changed by a change of its
    /// settings.
    pub(crate) rate: RateCell,
    extras: Option<Box<Extras>>,
}

/// What a key holds beyond its rate cell, when it holds anything: 136
/// bytes with all three controls, the throttle's counts of four priorities
/// included.
#[derive(Debug, Default)]
struct Extras {
    /// The key's link to the store its rate lives in, if it has one (rare:
    /// kept off the extras that every key with a bulkhead or a throttle
    /// has).
    store_key: Option<Box<StoreKey>>,
    /// The key's throttle window, used while its settings have a throttle
    /// (see `Core::throttle_of`).
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

impl KeyState {
    /// A key's state: its rate cell, its settings (`settings`), and its
    /// throttle window and bulkhead if its settings have them.
    pub(crate) fn new(
        rate: RateCell,
        settings: u32,
        throttle: Option<ThrottleWindow>,
        bulkhead: Option<Bulkhead>,
    ) -> Self {
        let needed = throttle.is_some() || bulkhead.is_some();
        rate.tag().store(settings, Ordering::Release);
        Self {
            rate,
            extras: needed.then(|| {
                Box::new(Extras {
                    throttle: throttle.unwrap_or_default(),
                    bulkhead: bulkhead.unwrap_or_default(),
                    store_key: None,
                    retry: RetryBudget::default(),
                    answered: AtomicU32::new(0),
                })
            }),
        }
    }

    /// Where the key's settings are, and their generation.
    #[inline]
    pub(crate) fn settings_word(&self) -> u32 {
        self.rate.tag().load(Ordering::Acquire)
    }

    /// Moves the key to `new` settings if its word is still `seen`; the
    /// word it holds otherwise.
    pub(crate) fn replace_settings(&self, seen: u32, new: u32) -> Result<(), u32> {
        self.rate
            .tag()
            .compare_exchange(seen, new, Ordering::AcqRel, Ordering::Acquire)
            .map(drop)
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
        extras.store_key = Some(Box::new(store_key));
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
        self.extras.as_deref()?.store_key.as_deref()
    }

    /// The key's throttle window, if it was made with one.
    #[inline]
    pub(crate) fn throttle_window(&self) -> Option<&ThrottleWindow> {
        Some(&self.extras.as_deref()?.throttle)
    }

    /// The key's bulkhead, if it was made with one, for a call that holds a
    /// slot of it or a change of its settings (see `Core::bulkhead_of`).
    pub(crate) fn bulkhead(&self) -> Option<&Bulkhead> {
        Some(&self.extras.as_deref()?.bulkhead)
    }

    /// Whether the key holds something a fresh key would not: a rate that
    /// moved from where it started. `rate` is the key's rate settings.
    pub(crate) fn rate_moved(&self, rate: Option<&RateSettings>) -> bool {
        rate.is_some_and(|rate| self.rate.rate() != rate.starting_rate)
    }

    /// Until when forgetting this key would forgive calls its rate admitted
    /// (not a pause, not shedding): `now` for a key without a rate.
    pub(crate) fn debt_until(&self, now: Nanos, rate: Option<&RateSettings>) -> Nanos {
        match rate {
            Some(rate) => self.rate.debt_until(now, rate.burst),
            None => now,
        }
    }

    /// When forgetting this key loses nothing: once its bucket owes no token
    /// and its throttle is not shedding (see [`ThrottleWindow::quiet_from`]).
    /// `throttle` is the key's throttle settings.
    pub(crate) fn quiet_from(&self, throttle: Option<&ThrottleSettings>) -> Nanos {
        let rate_quiet = self.rate.full_from();
        match (self.throttle_window(), throttle) {
            (Some(window), Some(settings)) => rate_quiet.max(window.quiet_from(settings)),
            _ => rate_quiet,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a key with every control costs beyond its rate cell: a healthy
    /// throttle's few words (its buckets live apart, while a failure is in
    /// its window), the bulkhead's counter and lock, the retry budget and
    /// the link to a rate store: 104 bytes, a 112-byte block. The key's
    /// state: 48 bytes, 56 with the `Arc`'s count (the allocator's 64-byte
    /// block).
    #[test]
    fn the_extras_of_a_key_with_every_control_fit_in_104_bytes() {
        assert_eq!(std::mem::size_of::<ThrottleWindow>(), 48);
        assert_eq!(std::mem::size_of::<Bulkhead>(), 32);
        assert_eq!(std::mem::size_of::<Extras>(), 104);
        assert_eq!(std::mem::size_of::<KeyState>(), 48);
    }
}
