//! Limits that change while the program runs: a key's own settings, its
//! tier, the whole file, and shadow mode, applied to a live manager without
//! losing what its keys learned.
//!
//! A change is written to the manager's settings (`book`), then reaches the
//! keys it concerns: one key at once (its settings resolved again now), or
//! every key at its next call (a new generation: see `core/settings.rs`).
//! The rules each control keeps across a change are `Core::adopt`'s.

use std::collections::HashSet;
use std::hash::Hash;
use std::sync::atomic::Ordering;
use std::sync::{MutexGuard, RwLockReadGuard, RwLockWriteGuard};

use super::ThrottleManager;
use super::book::{Layer, Resolved, SettingsBook};
use crate::bulkhead::BulkheadConfig;
use crate::clock::Nanos;
use crate::core::{KeySettings, MAX_SETTINGS, SettingsWord};
use crate::error::{ConfigError, ConfigProblem, Problems};
use crate::key::KeyState;
use crate::rate::RateConfig;
use crate::registry::BorrowedKey;
use crate::throttle::ThrottleConfig;

/// # Changing limits on a live manager
impl<K> ThrottleManager<K>
where
    K: Hash + Eq + Send + Sync + 'static,
{
    /// The work of [`KeyHandle::set_rate`](super::KeyHandle::set_rate).
    pub(crate) fn key_set_rate_override<Q>(
        &self,
        key: &Q,
        config: RateConfig,
    ) -> Result<(), ConfigError>
    where
        Q: BorrowedKey<K> + ?Sized,
    {
        let path = self.override_path("rate_override", key);
        let settings = checked(&path, self.core().controls().rate, "a rate", |problems| {
            config.check(problems)
        })?;
        self.room_for_settings(0)?; // a key's own: interned at once if live
        self.change_own(key, |own| own.rate = Some(settings.into()));
        Ok(())
    }

    /// The work of [`KeyHandle::set_throttle`](super::KeyHandle::set_throttle).
    pub(crate) fn key_set_throttle_override<Q>(
        &self,
        key: &Q,
        config: ThrottleConfig,
    ) -> Result<(), ConfigError>
    where
        Q: BorrowedKey<K> + ?Sized,
    {
        let path = self.override_path("throttle_override", key);
        let settings = checked(
            &path,
            self.core().controls().throttle,
            "a throttle",
            |problems| config.check(problems),
        )?;
        self.room_for_settings(0)?; // a key's own: interned at once if live
        self.change_own(key, |own| own.throttle = Some(settings.into()));
        Ok(())
    }

    /// The work of [`KeyHandle::set_bulkhead`](super::KeyHandle::set_bulkhead).
    pub(crate) fn key_set_bulkhead_override<Q>(
        &self,
        key: &Q,
        config: BulkheadConfig,
    ) -> Result<(), ConfigError>
    where
        Q: BorrowedKey<K> + ?Sized,
    {
        let path = self.override_path("bulkhead_override", key);
        let settings = checked(
            &path,
            self.core().controls().bulkhead,
            "a bulkhead",
            |problems| config.check(problems),
        )?;
        self.room_for_settings(0)?; // a key's own: interned at once if live
        self.change_own(key, |own| own.bulkhead = Some(settings.into()));
        Ok(())
    }

    /// The work of [`KeyHandle::set_shadow`](super::KeyHandle::set_shadow).
    pub(crate) fn key_set_shadow_override<Q>(&self, key: &Q, shadow: bool)
    where
        Q: BorrowedKey<K> + ?Sized,
    {
        self.change_own(key, |own| own.shadow = Some(shadow));
    }

    /// The work of [`KeyHandle::remove_overrides`](super::KeyHandle::remove_overrides).
    pub(crate) fn key_remove_overrides<Q>(&self, key: &Q)
    where
        Q: BorrowedKey<K> + ?Sized,
    {
        self.change_own(key, |own| *own = Layer::default());
    }

    /// The work of [`KeyHandle::retier`](super::KeyHandle::retier).
    pub(crate) fn key_retier<Q>(&self, key: &Q)
    where
        Q: BorrowedKey<K> + ?Sized,
    {
        for limit in self.named_limits() {
            limit.manager.key_retier(key);
        }
        let _serial = self.serialize_changes();
        self.resolve_live(key);
    }

    /// Shadow mode for the whole manager, from each key's next call: every
    /// decision is still made and counted (metrics, events, the status page
    /// and snapshots say what would have been refused, by reason), and none
    /// is enforced: a shadowed call goes through as if every control had
    /// admitted it, and the rate still counts the tokens it takes, so the
    /// figures are the ones enforcement would have seen. A key's or a
    /// tier's own shadow setting wins over the manager's.
    ///
    /// ```
    /// use portcullis::{Priority, RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::per_second(1))
    ///     .build()?;
    /// manager.set_shadow(true);
    /// assert!(manager.try_acquire("api", Priority::HIGH).is_ok());
    /// assert!(manager.try_acquire("api", Priority::HIGH).is_ok()); // would refuse
    /// manager.set_shadow(false);
    /// assert!(manager.try_acquire("api", Priority::HIGH).is_err());
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn set_shadow(&self, shadow: bool) {
        let _serial = self.serialize_changes();
        let mut book = self.book_mut();
        book.defaults.shadow = Some(shadow);
        book.defaults_changed();
        self.core().settings_table().next_generation();
    }
}

/// # How a change reaches the keys
impl<K> ThrottleManager<K>
where
    K: Hash + Eq + Send + Sync + 'static,
{
    /// Where a change of `key`'s settings names its problems:
    /// `rate_override["KEY"]`, the key as
    /// [`key_names`](crate::builder::ThrottleManagerBuilder::key_names) names it
    /// (keys need not be `Debug`), or `rate_override` without it.
    fn override_path<Q: BorrowedKey<K> + ?Sized>(&self, method: &str, key: &Q) -> String {
        match self.name_of_key(key) {
            Some(name) => format!("{method}[{name:?}]"),
            None => method.to_owned(),
        }
    }

    /// Applies a reloaded file's settings (`file`, checked): each default
    /// it sets, each tier it declares whole, and its overrides in place of
    /// every key's own; every key resolves its settings again at its next
    /// call. Settings equal to those they replace are kept, so the keys
    /// that had them find them again by address.
    pub(crate) fn apply_file(&self, mut file: SettingsBook<K>) {
        let _serial = self.serialize_changes();
        let mut book = self.book_mut();
        file.defaults.keep_equal(&book.defaults);
        let defaults = &mut book.defaults;
        let Layer {
            rate,
            throttle,
            bulkhead,
            shadow,
        } = std::mem::take(&mut file.defaults);
        defaults.rate = rate.or(defaults.rate.take());
        defaults.throttle = throttle.or(defaults.throttle.take());
        defaults.bulkhead = bulkhead.or(defaults.bulkhead.take());
        defaults.shadow = shadow.or(defaults.shadow);
        for (name, tier) in &mut file.tiers {
            if let Some(was) = book.tiers.get(name) {
                tier.keep_equal(was);
            }
        }
        for (key, own) in &mut file.keys {
            if let Some(was) = book.keys.get(key) {
                own.keep_equal(was);
            }
        }
        book.tiers.extend(file.tiers);
        book.keys = file.keys;
        book.defaults_changed();
        self.core().settings_table().next_generation();
    }

    /// Whether the manager puts keys in tiers.
    pub(crate) fn has_tier_of(&self) -> bool {
        self.inner.tier_of.is_some()
    }

    /// The key space's `max_keys`, `idle_ttl` and `max_hold`, as built.
    pub(crate) fn key_space_bounds(&self) -> (usize, Option<Nanos>, Nanos) {
        let keys = &self.inner.keys;
        (keys.max_keys(), keys.idle_ttl(), keys.max_hold())
    }

    /// `key`'s settings as the book says now, interned, with the
    /// generation they belong to.
    pub(super) fn settings_for(&self, key: &K) -> (SettingsWord, &KeySettings) {
        let core = self.core();
        let book = self.book();
        let generation = core.settings_table().generation();
        let id = match book.resolve(core.controls(), self.inner.tier_of.as_deref(), key) {
            Resolved::Known(id) => id,
            Resolved::New {
                settings,
                defaults_alone,
            } => {
                // The table is full only past `MAX_SETTINGS` distinct
                // settings, which changes refuse long before: then the key
                // keeps the first.
                let id = core.settings_table().intern(settings).unwrap_or_else(|_| {
                    crate::events::settings_table_full();
                    0
                });
                if defaults_alone {
                    book.note_defaults_id(id);
                }
                id
            }
        };
        drop(book);
        (
            SettingsWord::new(id, generation),
            core.settings_table().get(id),
        )
    }

    /// Resolves `state`'s settings (`key`'s) again, and moves the key to
    /// them: if they are stale, or always (`made_during_change`: the key
    /// was made while a change of some key's own settings was made).
    #[cold]
    #[inline(never)]
    pub(super) fn resolve_again(&self, key: &K, state: &KeyState, made_during_change: bool) {
        self.move_to_book(key, state, !made_during_change);
    }

    /// Moves `key`'s state to its settings as the book says now (only if
    /// they are stale, with `only_if_stale`), keeping what the key learned.
    fn move_to_book(&self, key: &K, state: &KeyState, only_if_stale: bool) {
        let core = self.core();
        loop {
            let seen = SettingsWord(state.settings_word());
            if only_if_stale && !core.is_stale(state) {
                return;
            }
            let (new, _) = self.settings_for(key);
            if new == seen {
                return;
            }
            // Another change that stored its word since `seen` was read
            // resolved from a book at least as new: resolve again.
            if state.replace_settings(seen.0, new.0).is_ok() {
                return core.adopt(state, seen, new);
            }
        }
    }

    /// Changes `key`'s own settings in the book, then moves the key if it
    /// is live.
    fn change_own<Q>(&self, key: &Q, change: impl FnOnce(&mut Layer))
    where
        Q: BorrowedKey<K> + ?Sized,
    {
        let _serial = self.serialize_changes();
        self.book_mut().change_own(key.to_key(), change);
        self.resolve_live(key);
    }

    /// Refuses a change that sets `added` distinct settings once the
    /// manager would hold, or its changes would have set, half the distinct
    /// settings it can: the rest is kept for the settings its tiers and
    /// keys combine into as they are made. Settings are kept for the
    /// manager's life (see `core/settings.rs`), and a key resolves its
    /// settings only when it calls, so the settings a reload sets are
    /// counted, not only those held. Taken, they count from now on.
    pub(crate) fn room_for_settings(&self, added: usize) -> Result<(), ConfigError> {
        let budget = MAX_SETTINGS / 2;
        let set = &self.inner.settings_set_by_reloads;
        let held = self.core().settings_table().len();
        let taken = set.fetch_update(Ordering::AcqRel, Ordering::Acquire, |before| {
            let after = before.saturating_add(added);
            (held < budget && after <= budget).then_some(after)
        });
        if taken.is_ok() {
            return Ok(());
        }
        let held = held.max(set.load(Ordering::Acquire));
        Err(ConfigError::new(vec![ConfigProblem::new(
            "settings",
            format!(
                "the manager holds or was given {held} distinct settings and this change \
                 sets {added} more: past {}, the most it takes by changes (settings are \
                 kept for its life; build a new manager to start afresh)",
                MAX_SETTINGS / 2
            ),
        )]))
    }

    /// How many distinct settings `file`'s levels (its defaults, tiers and
    /// keys' own) that differ from the manager's now hold: about as many
    /// new settings as applying it may intern, as keys resolve them.
    pub(crate) fn levels_changed_by(&self, file: &SettingsBook<K>) -> usize {
        let book = self.book();
        let defaults = (file.defaults != book.defaults).then_some(&file.defaults);
        let tiers = (file.tiers.iter())
            .filter(|(name, tier)| book.tiers.get(*name) != Some(tier))
            .map(|(_, tier)| tier);
        let keys = (file.keys.iter())
            .filter(|(key, own)| book.keys.get(*key) != Some(own))
            .map(|(_, own)| own);
        let changed = defaults.into_iter().chain(tiers).chain(keys);
        let distinct: HashSet<String> = changed.map(|level| format!("{level:?}")).collect();
        distinct.len()
    }

    /// Moves `key`, if it is live, to its settings as the book says now. A
    /// key being made meanwhile either read the book after the change, or
    /// finds `own_changes` moved once it is in the key space and resolves
    /// itself again (`keys.rs`).
    fn resolve_live<Q>(&self, key: &Q)
    where
        Q: BorrowedKey<K> + ?Sized,
    {
        self.inner.own_changes.fetch_add(1, Ordering::SeqCst);
        if let Some(state) = self.inner.keys.state(key) {
            self.move_to_book(&key.to_key(), &state, false);
        }
    }

    pub(super) fn serialize_changes(&self) -> MutexGuard<'_, ()> {
        self.inner.changes.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn book(&self) -> RwLockReadGuard<'_, SettingsBook<K>> {
        self.inner.book.read().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn book_mut(&self) -> RwLockWriteGuard<'_, SettingsBook<K>> {
        self.inner.book.write().unwrap_or_else(|e| e.into_inner())
    }
}

/// `check`'s settings for a control at `path`, if the manager has the
/// control (`has`; `what` names it).
fn checked<S>(
    path: &str,
    has: bool,
    what: &str,
    check: impl FnOnce(&mut Problems<'_>) -> Option<S>,
) -> Result<S, ConfigError> {
    let mut found = Vec::new();
    if !has {
        found.push(ConfigProblem::new(
            path,
            format!(
                "the manager was built without {what}; a control cannot be added to a live manager"
            ),
        ));
        return Err(ConfigError::new(found));
    }
    let settings = check(&mut Problems::new(path, &mut found));
    match (settings, ConfigError::from_problems(found)) {
        (Some(settings), None) => Ok(settings),
        (_, Some(error)) => Err(error),
        (None, None) => Err(ConfigError::new(vec![ConfigProblem::new(path, "invalid")])),
    }
}
