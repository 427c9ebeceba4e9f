//! Wakes those waiting for room in a full key space, and remembers when a
//! full one has none.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use tokio::sync::Notify;

/// Tells those waiting for room in a full key space that there may be some:
/// room given back (a key evicted, a new key that failed), or a key's last
/// call in flight ended (which may let it go). Shared by the registry and
/// the permits, which do not know the key type.
///
/// It also holds the key space's memory of having no room: until when a
/// full key space has none (refusals looked at every live key and found
/// none to evict), so that a new key before then is refused without
/// looking. Every event that may make room ends that memory at once, as it
/// wakes the waiters: the memory is only ever a bound on when the keys
/// looked at could go by time alone.
#[derive(Debug, Default)]
pub(crate) struct RoomSignal {
    /// Callers waiting for room now; a permit's end looks here first, so
    /// without waiters it costs one load.
    waiting: AtomicUsize,
    freed: Notify,
    /// Before this instant a new key finds no room; 0: look.
    no_room_until: AtomicU64,
}

impl RoomSignal {
    /// Room may have appeared: forget "no room", and wake every waiter.
    pub(crate) fn notify(&self) {
        self.no_room_until.store(0, Ordering::Release);
        self.freed.notify_waiters();
    }

    /// Until when a full key space has no room (0: unknown, look).
    pub(crate) fn no_room_until(&self) -> u64 {
        self.no_room_until.load(Ordering::Acquire)
    }

    /// A full key space has no room before `until`, unless something makes
    /// some sooner.
    pub(crate) fn remember_no_room_until(&self, until: u64) {
        self.no_room_until.store(until, Ordering::Release);
    }

    /// A call of a key ended, and nothing else holds the key: if anyone
    /// waits for room, or a refusal remembers there is none, that key may
    /// now make it. Without either, it costs two loads.
    #[inline]
    pub(crate) fn call_ended(&self, last_holder: impl FnOnce() -> bool) {
        let waiting = self.waiting.load(Ordering::Relaxed) > 0;
        let remembered = self.no_room_until.load(Ordering::Relaxed) != 0;
        if (waiting || remembered) && last_holder() {
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
