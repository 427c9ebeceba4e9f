//! Wakes those waiting for room in a full key space.

use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Notify;

/// Tells those waiting for room in a full key space that there may be some:
/// room given back (a key evicted, a new key that failed), or a key's last
/// call in flight ended (which may let it go). Shared by the registry and
/// the permits, which do not know the key type.
#[derive(Debug, Default)]
pub(crate) struct RoomSignal {
    /// Callers waiting for room now; a permit's end looks here first, so
    /// without waiters it costs one load.
    waiting: AtomicUsize,
    freed: Notify,
}

impl RoomSignal {
    /// Room may have appeared: wake every waiter.
    pub(crate) fn notify(&self) {
        self.freed.notify_waiters();
    }

    /// A call of a key ended, and nothing else holds the key: if anyone
    /// waits for room, that key may now make it.
    #[inline]
    pub(crate) fn call_ended(&self, last_holder: impl FnOnce() -> bool) {
        if self.waiting.load(Ordering::Relaxed) > 0 && last_holder() {
            self.notify();
        }
    }

    /// Resolves when room may have appeared. (Made after a refusal, it may
    /// miss room that appeared in between, or a key whose last call ended
    /// just before it was released; the caller's retry time bounds that.)
    pub(crate) async fn freed(&self) {
        struct RoomWaiter<'a>(&'a AtomicUsize);
        impl Drop for RoomWaiter<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::Relaxed);
            }
        }
        let notified = self.freed.notified();
        self.waiting.fetch_add(1, Ordering::Relaxed);
        let _waiting = RoomWaiter(&self.waiting);
        notified.await;
    }
}
