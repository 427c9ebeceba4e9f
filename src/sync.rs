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
