//! The `tracing` events a manager emits: when a key's rate turns, when its
//! throttle starts or stops shedding, when its bulkhead fills or times a
//! waiter out. All at `debug` level, none on the hot path of a healthy key.
//! Each carries the key (directly, or through the `portcullis` span of the
//! permit it concerns) and the priority where there is one.

use std::fmt::Debug;

use tracing::Span;

use crate::Priority;
use crate::bulkhead::limiter::Load;
use crate::rate::cell::{RateChange, Turn};

/// A span naming `key`, for events that happen when a permit is released;
/// `None` (no work at all) unless debug events are enabled.
#[inline]
pub(crate) fn key_span(key: &dyn Debug) -> Option<Span> {
    // `level_enabled!` is one global load; `enabled!` costs a callsite check.
    tracing::level_enabled!(tracing::Level::DEBUG)
        .then(|| tracing::debug_span!("portcullis", key = ?key))
}

/// Reports `change` if it reversed the key's direction (`span` names the
/// key).
pub(crate) fn rate_changed(span: &Span, change: RateChange) {
    let Some(turn) = change.turned else { return };
    let (from, to) = (change.from, change.to);
    match turn {
        Turn::Down => tracing::debug!(parent: span, from, to, "rate turned down"),
        Turn::Up => tracing::debug!(parent: span, from, to, "rate turned up"),
    }
}

/// The key's throttle started (`true`) or stopped shedding.
pub(crate) fn shedding(key: &dyn Debug, priority: Priority, probability: f64, started: bool) {
    let priority = priority.level();
    if started {
        tracing::debug!(key = ?key, priority, probability, "throttle started shedding");
    } else {
        tracing::debug!(key = ?key, priority, "throttle stopped shedding");
    }
}

/// The key's bulkhead has just given out its last free slot.
pub(crate) fn bulkhead_filled(key: &dyn Debug, priority: Priority, max_concurrent: u32) {
    let priority = priority.level();
    tracing::debug!(key = ?key, priority, max_concurrent, "bulkhead full");
}

/// A call waited out the bulkhead's queue timeout (`span` names the key).
pub(crate) fn queue_timed_out(span: &Span, priority: Priority, load: Load) {
    let priority = priority.level();
    let (active, queued) = (load.active, load.queued);
    tracing::debug!(parent: span, priority, active, queued, "bulkhead queue timeout");
}
