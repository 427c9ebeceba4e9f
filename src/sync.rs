//! The synchronisation primitives of the bulkhead: std's, or loom's when the
//! crate is built with `--cfg portcullis_loom` for model checking. A
//! crate-specific cfg, not `cfg(loom)`, so that dependencies which also react
//! to `loom` are left alone.

#[cfg(portcullis_loom)]
pub(crate) use loom::sync::Mutex;
#[cfg(portcullis_loom)]
pub(crate) use loom::sync::atomic::{AtomicU32, AtomicU64};

#[cfg(portcullis_loom)]
pub(crate) use loom::sync::MutexGuard;
#[cfg(not(portcullis_loom))]
pub(crate) use std::sync::Mutex;
#[cfg(not(portcullis_loom))]
pub(crate) use std::sync::MutexGuard;
#[cfg(not(portcullis_loom))]
pub(crate) use std::sync::atomic::{AtomicU32, AtomicU64};

/// A scope of a task-local value (a task's priority, deadline or flow),
/// counted in a process-wide count while it lives. A task's value is
/// visible only while its scope is polled, so while the count is 0 no task
/// has one, and a call reads one relaxed word instead of the task-local:
/// a program that sets none pays nothing for them. (A task polled on
/// another thread than the one that counted its scope was handed over
/// through the scheduler, whose synchronisation makes the count visible
/// there.) Std's atomics even under loom: the counts are process-wide
/// statics, outside any model.
pub(crate) struct CountedScope(&'static std::sync::atomic::AtomicUsize);

impl CountedScope {
    /// A scope counted in `count` until it is dropped.
    pub(crate) fn enter(count: &'static std::sync::atomic::AtomicUsize) -> Self {
        count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Self(count)
    }
}

impl Drop for CountedScope {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}
