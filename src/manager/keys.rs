//! The key space as the manager uses it: a key's state, found or created
//! with its settings, and how the key is named in events and metrics.

use std::collections::HashMap;
use std::hash::Hash;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::ThrottleManager;
use crate::bulkhead::Bulkhead;
use crate::bulkhead::BulkheadSettings;
use crate::clock::Nanos;
use crate::core::{Core, KeyTelemetry};
use crate::events;
use crate::key::KeyState;
use crate::rate::RateCell;
use crate::rate::RateSettings;
use crate::registry::BorrowedKey;
use crate::registry::NoRoom;
use crate::throttle::ThrottleSettings;
use crate::throttle::ThrottleWindow;

/// Which tier a new key is in, by name; `None`: the defaults.
pub(crate) type TierOf<K> = dyn for<'k> Fn(&'k K) -> Option<&'k str> + Send + Sync;

/// How events and per-key metrics name a key.
pub(crate) type KeyNames<K> = dyn Fn(&K) -> String + Send + Sync;

/// What a key is called when its [`KeyNamer`] panicked on it.
pub(crate) const UNNAMED: &str = "<unnamed>";

/// The user's [`key_names`](crate::ThrottleManagerBuilder::key_names), as
/// every part of the manager calls it: a panic in it names that key
/// [`UNNAMED`] instead of unwinding into a call's span, a metric's label or
/// the status page's sampler, and is reported once (an `error` event; the
/// panic hook still prints each panic).
pub(crate) struct KeyNamer<K> {
    names: Box<KeyNames<K>>,
    panicked: AtomicBool,
}

impl<K> KeyNamer<K> {
    pub(crate) fn new(names: Box<KeyNames<K>>) -> Self {
        Self {
            names,
            panicked: AtomicBool::new(false),
        }
    }

    /// `key`'s name, or [`UNNAMED`] if naming it panicked.
    pub(crate) fn name(&self, key: &K) -> String {
        let named = std::panic::catch_unwind(AssertUnwindSafe(|| (self.names)(key)));
        named.unwrap_or_else(|_| {
            if !self.panicked.swap(true, Ordering::Relaxed) {
                events::key_names_panicked();
            }
            UNNAMED.to_owned()
        })
    }
}

/// Per-key settings of every control, where they differ from its default.
pub(crate) struct Overrides<K> {
    pub(crate) rate: ControlOverrides<K, RateSettings>,
    pub(crate) throttle: ControlOverrides<K, ThrottleSettings>,
    pub(crate) bulkhead: ControlOverrides<K, BulkheadSettings>,
    /// Which tier a new key is in.
    pub(crate) tier_of: Option<Box<TierOf<K>>>,
}

/// One control's per-key settings: exact keys first, then the key's tier.
pub(crate) struct ControlOverrides<K, S> {
    pub(crate) exact: HashMap<K, Arc<S>, foldhash::fast::RandomState>,
    pub(crate) by_tier: HashMap<String, Arc<S>, foldhash::fast::RandomState>,
}

impl<K, S> Default for ControlOverrides<K, S> {
    fn default() -> Self {
        Self {
            exact: HashMap::with_hasher(foldhash::fast::RandomState::default()),
            by_tier: HashMap::with_hasher(foldhash::fast::RandomState::default()),
        }
    }
}

impl<K: Hash + Eq, S> ControlOverrides<K, S> {
    /// The settings of `key`, in `tier`, if they are not the default;
    /// `None` means the default (which costs a key nothing to point at).
    fn settings_for(&self, key: &K, tier: Option<&str>) -> Option<Arc<S>> {
        if let Some(settings) = self.exact.get(key) {
            return Some(Arc::clone(settings));
        }
        self.by_tier.get(tier?).map(Arc::clone)
    }

    fn has_tier(&self, tier: &str) -> bool {
        self.by_tier.contains_key(tier)
    }

    /// Whether a tier could give `key` this control's settings: the
    /// manager has the control, and no exact override for the key.
    fn tier_may_apply<C>(&self, control: Option<&C>, key: &K) -> bool {
        control.is_some() && !self.exact.contains_key(key)
    }
}

impl<K: Hash + Eq> Overrides<K> {
    /// The tier `key` is in, if `tier_of` names one that is declared (a
    /// name no tier has is warned about, and is no tier). `tier_of` is not
    /// asked when no tier could apply: every control of the manager
    /// (`core`'s) has an exact override for the key.
    fn tier_for<'k>(&self, core: &Core, key: &'k K) -> Option<&'k str> {
        let tier_of = self.tier_of.as_ref()?;
        let may_apply = self.rate.tier_may_apply(core.rate.as_ref(), key)
            || self.throttle.tier_may_apply(core.throttle.as_ref(), key)
            || self.bulkhead.tier_may_apply(core.bulkhead.as_ref(), key);
        if !may_apply {
            return None;
        }
        let tier = tier_of(key)?;
        let declared = self.rate.has_tier(tier)
            || self.throttle.has_tier(tier)
            || self.bulkhead.has_tier(tier);
        if !declared {
            events::unknown_tier(tier);
        }
        declared.then_some(tier)
    }
}

/// # The key space
impl<K> ThrottleManager<K>
where
    K: Hash + Eq + Send + Sync + 'static,
{
    /// The state of `key`, created with its settings if it is new.
    ///
    /// # Errors
    ///
    /// [`NoRoom`] when the key is new and the key space has no room for it.
    #[inline(always)]
    pub(super) fn entry<Q: BorrowedKey<K> + ?Sized>(
        &self,
        key: &Q,
        now: Nanos,
    ) -> Result<triomphe::Arc<KeyState>, NoRoom> {
        self.inner.keys.get_or_insert_with(
            key,
            now,
            |key| self.new_key_state(key, now),
            |_, state| triomphe::Arc::clone(state),
        )
    }

    /// The state of `key` and how it is named, for one call.
    ///
    /// # Errors
    ///
    /// [`NoRoom`] when the key is new and the key space has no room for it.
    #[inline(always)]
    pub(super) fn key_state<Q: BorrowedKey<K> + ?Sized>(
        &self,
        key: &Q,
        now: Nanos,
    ) -> Result<(triomphe::Arc<KeyState>, KeyTelemetry), NoRoom> {
        self.inner.keys.get_or_insert_with(
            key,
            now,
            |key| self.new_key_state(key, now),
            |key, state| (triomphe::Arc::clone(state), self.telemetry_of(key)),
        )
    }

    /// Until `retry_at`, or until room is given back in the key space,
    /// whichever comes first.
    pub(super) async fn wait_for_room(&self, retry_at: Nanos) {
        let _ = self
            .core()
            .before(retry_at, self.inner.keys.room_freed())
            .await;
    }

    /// How `key` is named in events (a span, only while debug events are
    /// enabled) and metrics (a label, only with per-key metrics).
    #[inline]
    pub(super) fn telemetry_of(&self, key: &K) -> KeyTelemetry {
        let debug = events::enabled();
        if !debug && !self.inner.metrics_per_key {
            return KeyTelemetry::default();
        }
        let name = self.inner.key_names.as_ref().map(|names| names.name(key));
        let span = debug.then(|| events::key_span(name.as_deref()));
        let label = if self.inner.metrics_per_key {
            name
        } else {
            None
        };
        KeyTelemetry::new(span, label)
    }

    /// `key`'s metrics label, if metrics are per key (never without the
    /// feature); for counting a call refused before its key's state was
    /// found, and a call's waits.
    pub(super) fn label_of<Q: BorrowedKey<K> + ?Sized>(&self, key: &Q) -> Option<String> {
        if !self.inner.metrics_per_key {
            return None;
        }
        let names = self.inner.key_names.as_ref()?;
        Some(names.name(&key.to_key()))
    }

    /// `key`'s name for events, if the manager names keys.
    pub(super) fn name_of_key<Q: BorrowedKey<K> + ?Sized>(&self, key: &Q) -> Option<String> {
        let names = self.inner.key_names.as_ref()?;
        Some(names.name(&key.to_key()))
    }

    /// A new key's state: every control the manager has for it, each with
    /// the key's own settings where they are not the default.
    fn new_key_state(&self, key: &K, now: Nanos) -> KeyState {
        let core = self.core();
        let overrides = &self.inner.overrides;
        let tier = overrides.tier_for(core, key);
        let rate_settings = core
            .rate
            .as_ref()
            .and_then(|_| overrides.rate.settings_for(key, tier));
        let starting = core
            .rate
            .as_ref()
            .and_then(|rate| rate.settings(rate_settings.as_deref()));
        let throttle = core.throttle.as_ref().and_then(|control| {
            let own = overrides.throttle.settings_for(key, tier);
            let settings = control.settings(own.as_deref())?;
            let window = ThrottleWindow::new(now, settings);
            Some((window, own))
        });
        let bulkhead = core.bulkhead.as_ref().and_then(|control| {
            let own = overrides.bulkhead.settings_for(key, tier);
            let bulkhead = Bulkhead::new(control.settings(own.as_deref())?, &core.clock);
            Some((bulkhead, own))
        });
        let has_rate = starting.is_some();
        let state = KeyState::new(
            RateCell::new(starting.map_or(1.0, |s| s.starting_rate), now),
            rate_settings,
            throttle,
            bulkhead,
        );
        let state = if core.retry.is_some() {
            state.with_retry_budget()
        } else {
            state
        };
        if let (Some(_), Some(names), true) = (&core.store, &self.inner.store_names, has_rate) {
            return state.with_store_key(crate::store::StoreKey::new(names(key)));
        }
        state
    }
}
