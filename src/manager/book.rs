//! The manager's settings as configured: the defaults, the tiers and the
//! keys with their own, and how one key's settings are resolved from them.
//! Read when a key is made or must resolve its settings again; written by
//! a change on a live manager (`changes`).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::bulkhead::BulkheadSettings;
use crate::core::{BuiltControls, ResolvedSettings, SettingsId};
use crate::events;
use crate::rate::RateSettings;
use crate::throttle::ThrottleSettings;

/// Which tier a key is in, by name; `None`: the defaults.
pub(crate) type TierOf<K> = dyn for<'k> Fn(&'k K) -> Option<&'k str> + Send + Sync;

type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// Settings at one level: the defaults, a tier's or a key's own. A control
/// (or shadow mode) left `None` is the next level's: a key's own, then its
/// tier's, then the defaults.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Layer {
    pub(crate) rate: Option<Arc<RateSettings>>,
    pub(crate) throttle: Option<Arc<ThrottleSettings>>,
    pub(crate) bulkhead: Option<Arc<BulkheadSettings>>,
    pub(crate) shadow: Option<bool>,
}

impl Layer {
    fn is_empty(&self) -> bool {
        *self == Layer::default()
    }

    /// Takes `was`'s settings where they equal these: the keys that had
    /// them find their settings again by address, not by value (see
    /// `core/settings.rs`).
    pub(crate) fn keep_equal(&mut self, was: &Layer) {
        fn keep<S: PartialEq>(part: &mut Option<Arc<S>>, was: &Option<Arc<S>>) {
            if part == was {
                part.clone_from(was);
            }
        }
        keep(&mut self.rate, &was.rate);
        keep(&mut self.throttle, &was.throttle);
        keep(&mut self.bulkhead, &was.bulkhead);
    }

    /// Whether it sets every control the manager has.
    fn covers(&self, controls: BuiltControls) -> bool {
        (!controls.rate || self.rate.is_some())
            && (!controls.throttle || self.throttle.is_some())
            && (!controls.bulkhead || self.bulkhead.is_some())
    }
}

/// A key's settings, from [`SettingsBook::resolve`].
pub(crate) enum Resolved {
    /// The defaults alone, whose number in the table is this.
    Known(SettingsId),
    /// To intern; `defaults_alone`: they are the defaults'.
    New {
        settings: ResolvedSettings,
        defaults_alone: bool,
    },
}

/// The defaults, the tiers and the keys' own settings.
pub(crate) struct SettingsBook<K> {
    pub(crate) defaults: Layer,
    pub(crate) tiers: Map<String, Layer>,
    pub(crate) keys: Map<K, Layer>,
    /// The number of the defaults' settings in the manager's table, once a
    /// key with the defaults alone was made ([`UNKNOWN`] until then): most
    /// new keys are such keys, and find it here without the table's lock.
    /// Whoever changes the defaults calls [`defaults_changed`](Self::defaults_changed).
    defaults_id: AtomicU32,
}

/// No key with the defaults alone was made since they last changed.
const UNKNOWN: u32 = u32::MAX;

impl<K> Default for SettingsBook<K> {
    fn default() -> Self {
        Self {
            defaults: Layer::default(),
            tiers: Map::default(),
            keys: Map::default(),
            defaults_id: AtomicU32::new(UNKNOWN),
        }
    }
}

impl<K> SettingsBook<K> {
    /// The number of the defaults' settings, if known.
    pub(crate) fn defaults_id(&self) -> Option<SettingsId> {
        let id = self.defaults_id.load(Ordering::Acquire);
        (id != UNKNOWN).then_some(id)
    }

    /// Notes the number of the defaults' settings (under the book's read
    /// lock: a change of the defaults holds the write lock).
    pub(crate) fn note_defaults_id(&self, id: SettingsId) {
        self.defaults_id.store(id, Ordering::Release);
    }

    /// The defaults changed: their number is not known any more.
    pub(crate) fn defaults_changed(&mut self) {
        *self.defaults_id.get_mut() = UNKNOWN;
    }
}

impl<K: Hash + Eq> SettingsBook<K> {
    /// `key`'s settings: for each control, its own, else its tier's, else
    /// the default; `Err` with the defaults' number when the key has the
    /// defaults alone and that number is known.
    pub(crate) fn resolve(
        &self,
        controls: BuiltControls,
        tier_of: Option<&TierOf<K>>,
        key: &K,
    ) -> Resolved {
        let own = self.keys.get(key);
        let tier = self.tier_for(controls, own, tier_of, key);
        let defaults_alone = own.is_none() && tier.is_none();
        if let (true, Some(id)) = (defaults_alone, self.defaults_id()) {
            return Resolved::Known(id);
        }
        let layers = [own, tier, Some(&self.defaults)];
        let layers = || layers.iter().flatten();
        let settings = ResolvedSettings {
            rate: layers().find_map(|layer| layer.rate.clone()),
            throttle: layers().find_map(|layer| layer.throttle.clone()),
            bulkhead: layers().find_map(|layer| layer.bulkhead.clone()),
            shadow: layers().find_map(|layer| layer.shadow).unwrap_or(false),
        };
        Resolved::New {
            settings,
            defaults_alone,
        }
    }

    /// The tier `key` is in, if `tier_of` names one that is declared (a
    /// name no tier has is warned about, and is no tier). `tier_of` is not
    /// asked when no tier could apply: the key's own settings set every
    /// control, and shadow mode unless no tier sets it.
    fn tier_for(
        &self,
        controls: BuiltControls,
        own: Option<&Layer>,
        tier_of: Option<&TierOf<K>>,
        key: &K,
    ) -> Option<&Layer> {
        let tier_of = tier_of?;
        let settled = |own: &Layer| {
            let shadow_settled =
                own.shadow.is_some() || self.tiers.values().all(|t| t.shadow.is_none());
            own.covers(controls) && shadow_settled
        };
        if own.is_some_and(settled) {
            return None;
        }
        let name = tier_of(key)?;
        let tier = self.tiers.get(name);
        if tier.is_none() {
            events::unknown_tier(name);
        }
        tier
    }

    /// `key`'s own settings, made if it has none.
    pub(crate) fn own(&mut self, key: K) -> &mut Layer {
        self.keys.entry(key).or_default()
    }

    /// Changes `key`'s own settings by `change`; a key left with none is
    /// forgotten.
    pub(crate) fn change_own(&mut self, key: K, change: impl FnOnce(&mut Layer)) {
        use std::collections::hash_map::Entry;
        match self.keys.entry(key) {
            Entry::Occupied(mut own) => {
                change(own.get_mut());
                if own.get().is_empty() {
                    own.remove();
                }
            }
            Entry::Vacant(none) => {
                let mut own = Layer::default();
                change(&mut own);
                if !own.is_empty() {
                    none.insert(own);
                }
            }
        }
    }
}
