//! Where a key finds its settings, and how settings change on a live
//! manager.
//!
//! Every distinct set of a key's settings (each control's, and whether the
//! key is shadowed) is interned once in the manager's [`SettingsTable`] and
//! never moved or freed while the manager lives; a key holds its entry's
//! number and the generation of the manager's settings it was resolved
//! against, in one word ([`SettingsWord`]). So a call reads its settings by
//! plain loads, with no lock, no reference count and nothing to reclaim,
//! and a change is a store of a new word.
//!
//! A change of one key's settings resolves that key again and stores its
//! word. A change for many keys at once (a reload, the defaults, shadow
//! mode) bumps the generation instead: each key finds its word stale at its
//! next call and resolves itself again, so the change costs one resolution
//! per key that calls, not a scan of the key space.
//!
//! The table grows by the distinct settings a manager has used (a few
//! hundred bytes each), not by keys or calls: equal settings share one
//! entry, however many keys or changes make them.
//!
//! When a key moves to new settings, [`Core::adopt`] carries its state
//! across by the rules the guide states: a rate keeps its bucket (its debt
//! rescaled, no fresh burst) and is clamped into the new bounds, a bulkhead
//! admits its waiters if its limit rose, and a throttle keeps its counts
//! unless its window's length changed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use super::Core;
use crate::bulkhead::{Bulkhead, BulkheadSettings};
use crate::key::KeyState;
use crate::rate::RateSettings;
use crate::throttle::{ThrottleSettings, ThrottleWindow};

/// One key's settings, as its calls read them: each control's (`None`:
/// the key does not have it) and whether its decisions are enforced. Held
/// by value in the table, so a call reaches a setting in two loads from
/// the core (the bucket, then the entry).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct KeySettings {
    pub(crate) rate: Option<RateSettings>,
    pub(crate) throttle: Option<ThrottleSettings>,
    pub(crate) bulkhead: Option<BulkheadSettings>,
    /// Every decision is made and counted, and none enforced.
    pub(crate) shadow: bool,
}

impl KeySettings {
    /// `state`'s throttle window and its settings, if the key has a
    /// throttle (its settings say so, and it was made with a window).
    #[inline]
    pub(crate) fn throttle_of<'s>(
        &'s self,
        state: &'s KeyState,
    ) -> Option<(&'s ThrottleWindow, &'s ThrottleSettings)> {
        Some((state.throttle_window()?, self.throttle.as_ref()?))
    }

    /// `state`'s bulkhead and its settings, if the key has a bulkhead.
    #[inline]
    pub(crate) fn bulkhead_of<'s>(
        &'s self,
        state: &'s KeyState,
    ) -> Option<(&'s Bulkhead, &'s BulkheadSettings)> {
        Some((state.bulkhead()?, self.bulkhead.as_ref()?))
    }
}

/// One key's settings as the manager's configuration resolves them, each
/// control's shared with every key it resolves for: what the table
/// interns.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ResolvedSettings {
    pub(crate) rate: Option<Arc<RateSettings>>,
    pub(crate) throttle: Option<Arc<ThrottleSettings>>,
    pub(crate) bulkhead: Option<Arc<BulkheadSettings>>,
    pub(crate) shadow: bool,
}

impl ResolvedSettings {
    fn values(&self) -> KeySettings {
        KeySettings {
            rate: self.rate.as_deref().cloned(),
            throttle: self.throttle.as_deref().cloned(),
            bulkhead: self.bulkhead.as_deref().cloned(),
            shadow: self.shadow,
        }
    }
}

/// The number of an entry of a [`SettingsTable`].
pub(crate) type SettingsId = u32;

/// A key's entry in the table (low half) and the generation of the
/// manager's settings it was resolved against (high half), 16 bits each,
/// kept in the key's rate cell ([`RateCell::tag`](crate::rate::RateCell::tag)).
///
/// Generations are compared in 16 bits: a key that makes no call while
/// the manager starts 65,536 generations (reloads, `set_shadow`) may find
/// its old settings current, and keeps them until its next change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SettingsWord(pub(crate) u32);

impl SettingsWord {
    pub(crate) fn new(id: SettingsId, generation: u32) -> Self {
        Self((generation & 0xFFFF) << 16 | (id & 0xFFFF))
    }

    #[inline]
    pub(crate) fn id(self) -> SettingsId {
        self.0 & 0xFFFF
    }

    #[inline]
    pub(crate) fn generation(self) -> u32 {
        self.0 >> 16
    }
}

/// Entries held in the table itself: most managers use no more, and a key
/// reaches these in one load from the core.
const FIRST: usize = 8;

/// Buckets of the table beyond the first entries: bucket `b` holds `2^b`
/// entries, so `BUCKETS` buckets hold `2^BUCKETS - 1`.
const BUCKETS: usize = 16;

/// The most distinct settings one manager interns: what a key's word
/// numbers in 16 bits.
pub(crate) const MAX_SETTINGS: usize = 1 << 16;

/// What [`SettingsTable::get`] answers for a number no entry has (none
/// reaches it: a key's number comes from `intern`).
static NO_SETTINGS: KeySettings = KeySettings {
    rate: None,
    throttle: None,
    bulkhead: None,
    shadow: false,
};

/// Every distinct [`KeySettings`] a manager has used, by number: appended
/// to, never changed or shrunk while the manager lives, so a reference to
/// an entry lives as long as the table.
#[derive(Debug)]
pub(crate) struct SettingsTable {
    first: [OnceLock<KeySettings>; FIRST],
    buckets: [OnceLock<Box<[OnceLock<KeySettings>]>>; BUCKETS],
    /// The manager's settings generation: a key whose word holds another
    /// resolves its settings again.
    generation: AtomicU32,
    /// For appending: each entry's number, found by its parts' addresses,
    /// else by its printed form.
    interned: Mutex<Interned>,
    /// Whether any entry is shadowed: until one is, a refusal looks no
    /// further.
    any_shadowed: AtomicBool,
}

/// The entries' numbers, for [`SettingsTable::intern`].
#[derive(Debug, Default)]
struct Interned {
    /// By the addresses of the settings an entry was resolved from:
    /// settings resolved from the same configured values (the common case)
    /// are found here without printing them. An address is never reused
    /// while `held` holds it.
    by_address: HashMap<(usize, usize, usize, bool), SettingsId>,
    held: Vec<ResolvedSettings>,
    /// By the printed form: every field of every control printed exactly,
    /// so equal forms are equal values.
    by_form: HashMap<String, SettingsId>,
}

/// An entry's settings' addresses (0 for a control it lacks).
fn addresses(settings: &ResolvedSettings) -> (usize, usize, usize, bool) {
    fn address<S>(part: &Option<Arc<S>>) -> usize {
        part.as_ref().map_or(0, |part| Arc::as_ptr(part) as usize)
    }
    let ResolvedSettings {
        rate,
        throttle,
        bulkhead,
        shadow,
    } = settings;
    (address(rate), address(throttle), address(bulkhead), *shadow)
}

/// Where entry `id` (past the first) lives: its bucket and its place in it.
#[inline]
fn place(id: SettingsId) -> (usize, usize) {
    let n = id as usize - FIRST + 1;
    let bucket = usize::BITS as usize - 1 - n.leading_zeros() as usize;
    (bucket, n - (1 << bucket))
}

/// The table is full: a manager interned [`MAX_SETTINGS`] distinct settings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TableFull;

impl SettingsTable {
    pub(crate) fn new() -> Self {
        Self {
            first: std::array::from_fn(|_| OnceLock::new()),
            buckets: std::array::from_fn(|_| OnceLock::new()),
            generation: AtomicU32::new(0),
            interned: Mutex::default(),
            any_shadowed: AtomicBool::new(false),
        }
    }

    /// Entry `id`. Only numbers [`intern`](Self::intern) returned exist.
    #[inline]
    pub(crate) fn get(&self, id: SettingsId) -> &KeySettings {
        // Entry 0 (the first settings interned: without tiers or
        // overrides, every key's) behind a branch the processor predicts:
        // its loads start before the key's number is read, not after.
        if id == 0 {
            return self.first[0].get().unwrap_or(&NO_SETTINGS);
        }
        let entry = match self.first.get(id as usize) {
            Some(first) => first.get(),
            None => self.later(id),
        };
        entry.unwrap_or(&NO_SETTINGS)
    }

    #[cold]
    fn later(&self, id: SettingsId) -> Option<&KeySettings> {
        let (bucket, at) = place(id);
        self.buckets[bucket].get()?.get(at)?.get()
    }

    /// Where entry `id` is set.
    fn slot(&self, id: SettingsId) -> &OnceLock<KeySettings> {
        if let Some(first) = self.first.get(id as usize) {
            return first;
        }
        let (bucket, at) = place(id);
        let entries = self.buckets[bucket]
            .get_or_init(|| (0..1usize << bucket).map(|_| OnceLock::new()).collect());
        &entries[at]
    }

    /// The number of `settings`, appended if no equal entry exists.
    ///
    /// # Errors
    ///
    /// [`TableFull`] when it would be the manager's
    /// [`MAX_SETTINGS`]`+ 1`th distinct settings.
    pub(crate) fn intern(&self, settings: ResolvedSettings) -> Result<SettingsId, TableFull> {
        let address = addresses(&settings);
        let mut interned = self.interned.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&id) = interned.by_address.get(&address) {
            return Ok(id);
        }
        let form = format!("{settings:?}");
        if let Some(&id) = interned.by_form.get(&form) {
            return Ok(id);
        }
        if interned.by_form.len() >= MAX_SETTINGS {
            return Err(TableFull);
        }
        let id = interned.by_form.len() as SettingsId;
        if settings.shadow {
            self.any_shadowed.store(true, Ordering::Release);
        }
        let _ = self.slot(id).set(settings.values());
        interned.by_address.insert(address, id);
        interned.by_form.insert(form, id);
        interned.held.push(settings);
        Ok(id)
    }

    /// How many distinct settings the table holds.
    pub(crate) fn len(&self) -> usize {
        let interned = self.interned.lock().unwrap_or_else(|e| e.into_inner());
        interned.by_form.len()
    }

    /// Whether any key may be shadowed.
    #[inline]
    pub(crate) fn any_shadowed(&self) -> bool {
        self.any_shadowed.load(Ordering::Acquire)
    }

    /// The manager's settings generation now.
    #[inline]
    pub(crate) fn generation(&self) -> u32 {
        self.generation.load(Ordering::Acquire)
    }

    /// Starts a new generation: every key resolves its settings again at
    /// its next call. Called with the manager's settings locked for
    /// writing, so a key resolved under the read lock pairs the settings
    /// with their generation.
    pub(crate) fn next_generation(&self) -> u32 {
        self.generation
            .fetch_add(1, Ordering::AcqRel)
            .wrapping_add(1)
    }
}

/// # A key's settings
impl Core {
    /// The settings `state` was last resolved to.
    #[inline]
    pub(crate) fn settings_of(&self, state: &KeyState) -> &KeySettings {
        self.settings.get(SettingsWord(state.settings_word()).id())
    }

    /// Whether `state`'s settings were resolved before the manager's last
    /// change of many keys' settings.
    #[inline]
    pub(crate) fn is_stale(&self, state: &KeyState) -> bool {
        SettingsWord(state.settings_word()).generation() != self.settings.generation() & 0xFFFF
    }

    /// Moves `state` from the settings it had (`was`) to `now`'s, keeping
    /// what it learned: see the [module](self).
    pub(crate) fn adopt(&self, state: &KeyState, was: SettingsWord, now: SettingsWord) {
        if was.id() == now.id() {
            return;
        }
        let (before, after) = (self.settings.get(was.id()), self.settings.get(now.id()));
        let time = self.now();
        if let Some(rate) = &after.rate {
            let (lower, upper) = (rate.lower_bound, rate.upper_bound);
            let start = rate.starting_rate;
            let had_rate = before.rate.is_some();
            state.rate.move_to(time, rate.burst, |current| {
                if had_rate {
                    current.clamp(lower, upper)
                } else {
                    start
                }
            });
        }
        if let (Some((window, new)), Some(old)) = (after.throttle_of(state), &before.throttle) {
            if old.bucket != new.bucket {
                window.restart(time, new);
            }
        }
        if let Some((bulkhead, settings)) = after.bulkhead_of(state) {
            bulkhead.grant_waiters(settings);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_found_by_the_number_intern_gave_and_equal_settings_share_one() {
        let table = SettingsTable::new();
        let mut ids = Vec::new();
        for n in 0..100u32 {
            let settings = ResolvedSettings {
                shadow: n % 2 == 0,
                rate: Some(Arc::new(RateSettings::for_test(
                    crate::RateConfig::adaptive(f64::from(n) + 1.0),
                ))),
                ..ResolvedSettings::default()
            };
            ids.push(table.intern(settings).unwrap());
        }
        for (n, &id) in ids.iter().enumerate() {
            let entry = table.get(id);
            assert_eq!(entry.shadow, n % 2 == 0);
            assert_eq!(entry.rate.as_ref().unwrap().starting_rate, n as f64 + 1.0);
        }
        let again = ResolvedSettings {
            shadow: true,
            rate: Some(Arc::new(RateSettings::for_test(
                crate::RateConfig::adaptive(1.0),
            ))),
            ..ResolvedSettings::default()
        };
        assert_eq!(table.intern(again).unwrap(), ids[0]);
    }

    #[test]
    fn a_word_keeps_its_number_and_generation_apart() {
        let word = SettingsWord::new(65_534, 7);
        assert_eq!((word.id(), word.generation()), (65_534, 7));
        let wrapped = SettingsWord::new(3, 65_536 + 7);
        assert_eq!((wrapped.id(), wrapped.generation()), (3, 7));
        let first = FIRST as SettingsId;
        assert_eq!(place(first), (0, 0));
        assert_eq!(place(first + 1), (1, 0));
        assert_eq!(place(first + 2), (1, 1));
        assert_eq!(place(first + 3), (2, 0));
    }
}
