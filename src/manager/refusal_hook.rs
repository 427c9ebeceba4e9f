//! The hook through which the manager tells a watcher (a status page's
//! tally) of every refusal, so the manager names no type of the watcher.

use std::any::Any;
use std::hash::Hash;
use std::sync::Arc;

use super::ThrottleManager;
use crate::error::RejectReason;

/// Whoever watches the manager's refusals (a status page's tally): told
/// of each one once installed ([`watch_refusals`]); until then a refusal
/// costs one load.
///
/// [`watch_refusals`]: ThrottleManager::watch_refusals
pub(crate) trait RefusalWatcher<K>: Send + Sync {
    /// A call of `key` was refused for `reason`, or (`shadow`) would have
    /// been, and went through.
    fn refused(&self, key: RefusedKey<'_, K>, reason: RejectReason, shadow: bool);

    /// Itself, for whoever installed it to find its own type again.
    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync>;
}

/// A refused key as the caller gave it: enough to find it among the keys
/// a watcher holds, and to make a key of its own only when it needs one.
pub(crate) struct RefusedKey<'a, K> {
    /// Whether a held key is this one.
    pub(crate) is: &'a dyn Fn(&K) -> bool,
    /// The key's own value.
    pub(crate) owned: &'a dyn Fn() -> K,
}

/// # The refusal hook
impl<K> ThrottleManager<K>
where
    K: Hash + Eq + Send + Sync + 'static,
{
    /// The watcher of this manager's refusals: the one installed, or else
    /// `install`'s, installed now. Every clone of the manager shares it.
    pub(crate) fn watch_refusals(
        &self,
        install: impl FnOnce() -> Arc<dyn RefusalWatcher<K>>,
    ) -> Arc<dyn RefusalWatcher<K>> {
        Arc::clone(self.inner.refusal_watcher.get_or_init(install))
    }
}
