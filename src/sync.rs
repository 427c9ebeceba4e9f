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

/// The addresses `value` occupies, from its first byte to past its last:
/// for tests of which fields two threads' cache lines share.
#[cfg(test)]
pub(crate) fn bytes_of<T>(value: &T) -> std::ops::Range<usize> {
    let start = std::ptr::from_ref(value).addr();
    start..start + std::mem::size_of_val(value)
}
