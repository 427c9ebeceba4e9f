//! The manager and what it hands out: [`ThrottleManager`] (also at the
//! crate root), the permits its `acquire` verbs give ([`Permit`],
//! [`OwnedPermit`], [`JointPermit`]), the handles on one key and on the key
//! space ([`KeyHandle`], [`KeySpace`], [`ManagerSettings`]), what a key's
//! snapshot holds ([`KeySnapshot`]), and the way a key is looked up by its
//! borrowed form ([`BorrowedKey`]).
//!
//! ```
//! use portcullis::manager::Permit;
//! use portcullis::{Priority, RateConfig, ThrottleManager};
//!
//! let manager = ThrottleManager::<String>::builder()
//!     .rate(RateConfig::adaptive(10.0))
//!     .build()?;
//! let permit: Permit<'_> = manager.try_acquire("api", Priority::HIGH).unwrap();
//! permit.success();
//! assert_eq!(manager.key("api").rate(), Some(11.0));
//! # Ok::<(), portcullis::error::ConfigError>(())
//! ```

// [`ThrottleManager`]: the facade that owns the key space and runs each
// call through its key's controls.
//
// One file per concern, each adding its own `impl` block:
// - `keys`: finding or creating a key's state, and how a key is named;
// - `permits`: `acquire`, `try_acquire` and their owned forms;
// - `admission`: the key's `Lookup` for the core's one driver
//   (`core/drive.rs`), and the counting of what it decided;
// - `call`: `call`, `call_all` and their variants, around the driver,
//   and `attempt`: one logical call's attempts under the retry policy;
// - `joint`: calls charged to several keys, all or nothing;
// - `metered`: named limits and a call's cost in each, and `withheld`: a
//   new key's careful first call of a named limit;
// - `rate_only`: `wait`, `check`, `increment`, `decrement`, `defer`;
// - `inspect`: snapshots for health endpoints, and `watch`: what a
//   status page reads of the key space each time it samples;
// - `refusal_hook`: how a watcher (the status page's tally) hears of
//   every refusal;
// - `book` and `changes`: the settings by level, and changing them on a
//   live manager (a reloaded file is checked by the builder's
//   `reload.rs`, and applied here);
// - `server_admission`: `try_acquire_or_queue_owned`, what a server
//   needs, last in the docs' method list;
// - `handles`: the handle on one key ([`KeyHandle`]), `key_settings`: its
//   own settings through it, and `manager_views`: the key space
//   ([`KeySpace`]) and what the manager was built with
//   ([`ManagerSettings`]);
// - `deprecated`: 0.3's names, each a line that calls its new name.
//
// What does not depend on the key type (the clock, the settings, how a
// key's controls decide and count) lives in `crate::core`, which permits
// share.
//
// The words used here (debt, fall, news, quiet, room, hold, ticket, ...)
// are defined once, in [the architecture map](crate::architecture).

use std::fmt;
use std::hash::Hash;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use crate::core::Core;
use crate::key::KeyState;
use crate::registry::Registry;

mod admission;
mod attempt;
mod book;
mod call;
mod changes;
mod deprecated;
mod handles;
mod inspect;
mod joint;
mod key_settings;
mod keys;
mod manager_views;
mod metered;
mod permits;
mod rate_only;
mod server_admission;
// The status page is the one watcher the crate has; without it, nothing
// installs one and the hook stays empty.
#[cfg_attr(not(feature = "status"), allow(dead_code))]
mod refusal_hook;
#[cfg(feature = "status")]
mod watch;
mod withheld;

pub use crate::permit::{JointPermit, OwnedPermit, Permit};
pub use crate::registry::BorrowedKey;
pub(crate) use book::{Layer, SettingsBook, TierOf};
pub use handles::KeyHandle;
pub use inspect::{KeySnapshot, PrioritySnapshot, RateRemaining};
pub(crate) use keys::{KeyNamer, KeyNames};
pub use manager_views::{KeySpace, ManagerSettings};
pub(crate) use metered::NamedLimit;
pub(crate) use refusal_hook::{RefusalWatcher, RefusedKey};
#[cfg(feature = "status")]
pub(crate) use watch::KeyLoad;

/// Guards calls to many keys (hosts, users, tenants) at once: for each key it
/// sees, it lazily creates the controls configured (an adaptive rate, an
/// adaptive throttle, a bulkhead), which learn from the outcomes you report.
///
/// Clones share all state. Keys are looked up by their borrowed form: a
/// `ThrottleManager<String>` or `ThrottleManager<Arc<str>>` takes a `&str`.
/// Keys need not be `Debug`: events and metrics name a key only as
/// [`key_names`](crate::builder::ThrottleManagerBuilder::key_names) says, so keys
/// that are secrets (API tokens) never reach a log.
///
/// # Which method to reach for
///
/// - [`call`](Self::call): the call as a closure, with every control,
///   its outcome judged from its result, and retries if configured. Start
///   here.
/// - [`acquire`](Self::acquire): a [`Permit`] for a call you
///   make yourself; tell it [`success`](crate::manager::Permit::success) or
///   [`overloaded`](crate::manager::Permit::overloaded).
/// - [`wait`](Self::wait), then [`increment`](Self::increment) or
///   [`decrement`](Self::decrement): the rate alone, for code that reports
///   outcomes itself (the crate's first shape: wait before the call, say
///   how it went after). These skip the throttle and the bulkhead, and
///   return at once for a manager without a rate; [`check`](Self::check)
///   takes a token if one is due now, [`peek`](Self::peek) only looks.
///
/// Every way in reads the same way: a `try_` method never waits (it is
/// refused with the wait as [`retry_after`](crate::Rejected::retry_after)),
/// `_owned` gives a `'static` permit to move into a task, `_all` charges
/// several keys at once, and what else a call asks rides on its priority:
/// `Priority::HIGH.cost(3)` for three rate tokens,
/// `Priority::HIGH.timeout(d)` for `call`'s bound on its run. What
/// concerns one key (its readings, overrides, tier, a provider's pause) is
/// on [`key`](Self::key); the key space on [`keys`](Self::keys). A
/// server's admission,
/// [`try_acquire_or_queue_owned`](Self::try_acquire_or_queue_owned), is the
/// one `try_` that waits, only for a place in the bulkhead's queue, as its
/// name says.
///
/// # Example
///
/// ```
/// use portcullis::{Priority, RateConfig, ThrottleManager, overloaded};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let manager = ThrottleManager::<String>::builder()
///     .rate(RateConfig::adaptive(10.0).burst(5).bounds(1.0, 200.0).decrease_factor(0.5))
///     .build()?;
/// # async fn fetch(_: &str) -> Result<u16, std::io::Error> { Ok(200) }
/// let status = manager
///     .call("example.com", Priority::MEDIUM, || async {
///         match fetch("https://example.com/").await? {
///             429 | 503 => Err(overloaded(std::io::Error::other("slow down"))), // the rate falls
///             status => Ok(status), // the rate rises
///         }
///     })
///     .await?;
/// assert_eq!(status, 200);
/// assert_eq!(manager.key("example.com").rate(), Some(11.0));
/// # Ok(())
/// # }
/// ```
pub struct ThrottleManager<K> {
    inner: Arc<ManagerState<K>>,
}

/// What all clones of a manager share.
pub(crate) struct ManagerState<K> {
    /// What permits share too.
    pub(crate) core: Arc<Core>,
    pub(crate) keys: Registry<K, KeyState>,
    /// The settings as configured, by level: written by changes on a live
    /// manager, read when a key is made or resolves its settings again.
    pub(crate) book: RwLock<SettingsBook<K>>,
    /// Which tier a key is in.
    pub(crate) tier_of: Option<Arc<TierOf<K>>>,
    /// Taken by each change of the settings, so changes apply in one order.
    pub(crate) changes: Mutex<()>,
    /// How many changes of one key's settings were made: a key made while
    /// one was made resolves itself again (see `changes.rs`).
    pub(crate) own_changes: AtomicU64,
    /// How many distinct settings reloads of the live manager have set (a
    /// key's own, a tier's, the defaults'): each may be interned as keys
    /// resolve it, and the table keeps it for the manager's life, so
    /// changes are refused past a budget (see `changes.rs`).
    pub(crate) settings_set_by_reloads: std::sync::atomic::AtomicUsize,
    /// How events and per-key metrics name a key; `None`: they do not.
    pub(crate) key_names: Option<KeyNamer<K>>,
    /// Whether metrics carry a `key` label (then `key_names` is set).
    pub(crate) metrics_per_key: bool,
    /// The manager's name ([`name`](crate::builder::ThrottleManagerBuilder::name)).
    pub(crate) name: Option<String>,
    /// How the rate store names a key (present with a store).
    pub(crate) store_names: Option<Box<KeyNames<K>>>,
    /// Further limits of every key beside its rate, in the order declared.
    pub(crate) limits: Box<[NamedLimit<K>]>,
    /// Told of every refusal once installed (a status page's tally).
    pub(crate) refusal_watcher: OnceLock<Arc<dyn RefusalWatcher<K>>>,
}

impl<K> Clone for ThrottleManager<K> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<K: Hash + Eq> fmt::Debug for ThrottleManager<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThrottleManager")
            .field("keys", &self.inner.keys.len())
            .field("core", &self.inner.core)
            .finish_non_exhaustive()
    }
}

/// # Housekeeping
impl<K> ThrottleManager<K>
where
    K: Hash + Eq + Send + Sync + 'static,
{
    pub(crate) fn from_state(state: ManagerState<K>) -> Self {
        Self {
            inner: Arc::new(state),
        }
    }

    pub(crate) fn core(&self) -> &Core {
        &self.inner.core
    }

    /// The work of the handles' `priority_levels`.
    pub(crate) fn levels(&self) -> u8 {
        self.core().priorities().levels
    }

    /// The work of the handles' `call_timeout`.
    pub(crate) fn configured_call_timeout(&self) -> Option<std::time::Duration> {
        self.core().call_timeout()
    }

    /// The work of the handles' `name`.
    pub(crate) fn manager_name(&self) -> Option<&str> {
        self.inner.name.as_deref()
    }

    /// The work of the handles' `len`.
    pub(crate) fn key_count(&self) -> usize {
        self.inner.keys.len()
    }

    /// The work of [`KeyHandle::forget`](KeyHandle::forget).
    pub(crate) fn key_forget<Q: BorrowedKey<K> + ?Sized>(&self, key: &Q) -> bool {
        let limits = self.inner.limits.iter();
        let in_limits = limits.fold(false, |live, limit| limit.manager.key_forget(key) | live);
        self.inner.keys.remove(key) | in_limits
    }

    /// The work of the handles' `evict_idle`.
    pub(crate) fn evict_idle_keys(&self) -> usize {
        self.inner.keys.evict_idle(self.core().now())
    }
}
