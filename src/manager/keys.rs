//! The key space as the manager uses it: a key's state, found or created
//! with its settings, and how the key is named in events and metrics.

use std::cell::Cell;
use std::hash::Hash;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};

use super::ThrottleManager;
use crate::bulkhead::Bulkhead;
use crate::clock::Nanos;
use crate::core::KeyTelemetry;
use crate::events;
use crate::key::KeyState;
use crate::rate::RateCell;
use crate::registry::BorrowedKey;
use crate::registry::NoRoom;
use crate::throttle::ThrottleWindow;

/// How events and per-key metrics name a key.
pub(crate) type KeyNames<K> = dyn Fn(&K) -> String + Send + Sync;

/// What a key is called when its [`KeyNamer`] panicked on it.
pub(crate) const UNNAMED: &str = "<unnamed>";

/// The user's [`key_names`](crate::builder::ThrottleManagerBuilder::key_names), as
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
        self.found_or_made(
            key,
            now,
            |_, state| triomphe::Arc::clone(state),
            |state| state,
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
        self.found_or_made(
            key,
            now,
            |key, state| (triomphe::Arc::clone(state), self.telemetry_of(key)),
            |(state, _)| state,
        )
    }

    /// `then` of `key` and its state (`state` finds it in what `then`
    /// made), created with its settings if it is new; a key whose settings
    /// are stale, or that was made while a change of some key's own
    /// settings was made (which may not have found it yet), resolves its
    /// settings again first.
    #[inline(always)]
    fn found_or_made<Q: BorrowedKey<K> + ?Sized, T>(
        &self,
        key: &Q,
        now: Nanos,
        then: impl FnOnce(&K, &triomphe::Arc<KeyState>) -> T,
        state: impl FnOnce(&T) -> &triomphe::Arc<KeyState>,
    ) -> Result<T, NoRoom> {
        let made_at = Cell::new(None);
        let found = self.inner.keys.get_or_insert_with(
            key,
            now,
            |key| {
                made_at.set(Some(self.inner.own_changes.load(Ordering::SeqCst)));
                self.new_key_state(key, now)
            },
            then,
        )?;
        let state = state(&found);
        let changed = made_at
            .get()
            .is_some_and(|at| at != self.inner.own_changes.load(Ordering::SeqCst));
        if changed || self.core().is_stale(state) {
            self.resolve_again(&key.to_key(), state, changed);
        }
        Ok(found)
    }

    /// Until `retry_at`, or until room is given back in the key space,
    /// whichever comes first.
    pub(super) async fn wait_for_room(&self, retry_at: Nanos) {
        let _ = self
            .core()
            .before(retry_at, std::pin::pin!(self.inner.keys.room_freed()))
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

    /// A new key's state: every control its settings have.
    fn new_key_state(&self, key: &K, now: Nanos) -> KeyState {
        let core = self.core();
        let (word, settings) = self.settings_for(key);
        let throttle = settings
            .throttle
            .as_ref()
            .map(|settings| ThrottleWindow::new(now, settings));
        let bulkhead = settings
            .bulkhead
            .as_ref()
            .map(|settings| Bulkhead::new(settings, core.clock()));
        let starting = settings.rate.as_ref().map_or(1.0, |s| s.starting_rate);
        let has_rate = settings.rate.is_some();
        let state = KeyState::new(RateCell::new(starting, now), word.0, throttle, bulkhead);
        let state = if core.retry_settings().is_some() {
            state.with_retry_budget()
        } else {
            state
        };
        if let (Some(_), Some(names), true) = (core.store(), &self.inner.store_names, has_rate) {
            return state.with_store_key(crate::store::StoreKey::new(names(key)));
        }
        state
    }
}
