//! The `tracing` events a manager emits: when a key's rate reverses (the
//! event says "rate turned up" or "down"), when its throttle starts or
//! stops shedding, when its bulkhead fills or times a
//! waiter out, when a call is refused; and the span of a call that waits.
//! All at `debug` level, none on the hot path of a healthy key.
//! Each has the `portcullis` span of its key as parent, which names the key
//! if the manager was given [key names](crate::builder::ThrottleManagerBuilder::key_names),
//! and carries the priority where there is one.

use tracing::Span;

use crate::bulkhead::Load;
use crate::error::RejectReason;
use crate::priority::Priority;
use crate::rate::{RateChange, Reversal};

/// Whether debug events are enabled: one global load (`enabled!` would cost
/// a callsite check).
#[inline]
pub(crate) fn enabled() -> bool {
    tracing::level_enabled!(tracing::Level::DEBUG)
}

/// The span of a key's events, with the key's name if it has one. Made only
/// while [`enabled`].
pub(crate) fn key_span(name: Option<&str>) -> Span {
    match name {
        Some(key) => tracing::debug_span!("portcullis", key),
        None => tracing::debug_span!("portcullis"),
    }
}

/// Reports `change` if it reversed the key's direction (`span` names the
/// key). Inlined: most changes reverse nothing, and cost one comparison.
#[inline]
pub(crate) fn rate_changed(span: &Span, change: RateChange) {
    if let Some(reversal) = change.reversed {
        rate_reversed(span, change, reversal);
    }
}

#[cold]
fn rate_reversed(span: &Span, change: RateChange, reversal: Reversal) {
    let (from, to) = (change.from, change.to);
    match reversal {
        Reversal::Down => tracing::debug!(parent: span, from, to, "rate turned down"),
        Reversal::Up => tracing::debug!(parent: span, from, to, "rate turned up"),
    }
}

/// The key's throttle started (`true`) or stopped shedding (`span` names
/// the key).
pub(crate) fn shedding(span: &Span, priority: Priority, probability: f64, started: bool) {
    let priority = priority.level();
    if started {
        tracing::debug!(parent: span, priority, probability, "throttle started shedding");
    } else {
        tracing::debug!(parent: span, priority, "throttle stopped shedding");
    }
}

/// The key's bulkhead has just given out its last free slot (`span` names
/// the key).
pub(crate) fn bulkhead_filled(span: &Span, priority: Priority, max_concurrent: u32) {
    let priority = priority.level();
    tracing::debug!(parent: span, priority, max_concurrent, "bulkhead full");
}

/// The key's learned concurrency limit reversed: it moved from `from` to
/// `to`, the other way than its last move (`span` names the key).
pub(crate) fn concurrency_limit_reversed(span: &Span, from: u32, to: u32) {
    if to > from {
        tracing::debug!(parent: span, from, to, "concurrency limit turned up");
    } else {
        tracing::debug!(parent: span, from, to, "concurrency limit turned down");
    }
}

/// A call waited out the bulkhead's queue timeout (`span` names the key).
pub(crate) fn queue_timed_out(span: &Span, priority: Priority, load: Load) {
    let priority = priority.level();
    let (active, queued) = (load.active, load.queued);
    tracing::debug!(parent: span, priority, active, queued, "bulkhead queue timeout");
}

/// The span of a call that waits (for its rate, a bulkhead slot or room),
/// a child of the caller's span: the key's name (when the manager names
/// keys) and the priority; when the wait ends, [`wait_ended`] records how
/// long it took and, if the call was refused, why. An OpenTelemetry
/// exporter turns it into a span with those attributes.
pub(crate) fn wait_span(key: Option<&str>, priority: Priority) -> Span {
    let span = tracing::debug_span!(
        "portcullis.wait",
        key = tracing::field::Empty,
        priority = priority.level(),
        waited_s = tracing::field::Empty,
        refused = tracing::field::Empty,
    );
    if let Some(key) = key {
        span.record("key", key);
    }
    span
}

/// Records on a call's [`wait_span`] how long it waited and, if it was
/// refused, why.
pub(crate) fn wait_ended(span: &Span, waited: std::time::Duration, refused: Option<RejectReason>) {
    span.record("waited_s", waited.as_secs_f64());
    if let Some(reason) = refused {
        span.record("refused", reason.label());
    }
}

/// A call was refused: an event in the caller's span (so an exporter shows
/// it on the request it refused), with the reason, the priority and when
/// to try again.
#[cold]
pub(crate) fn call_refused(key: Option<&str>, refused: &crate::Rejected, shadow: bool) {
    let reason = refused.reason().label();
    let priority = refused.priority().level();
    let retry_after_s = refused.retry_after().map(|after| after.as_secs_f64());
    match (key, shadow) {
        (Some(key), false) => tracing::debug!(key, reason, priority, retry_after_s, "call refused"),
        (None, false) => tracing::debug!(reason, priority, retry_after_s, "call refused"),
        (Some(key), true) => {
            tracing::debug!(key, reason, priority, "call would be refused (shadow mode)")
        }
        (None, true) => tracing::debug!(reason, priority, "call would be refused (shadow mode)"),
    }
}

/// The manager's `key_names` panicked on a key (said once a manager):
/// that key, and any other it panics on, is named `<unnamed>`.
#[cold]
pub(crate) fn key_names_panicked() {
    tracing::error!("key_names panicked on a key; such keys are named <unnamed>");
}

/// The manager's table of distinct settings is full (changes refuse long
/// before): a key made now gets the first settings.
#[cold]
pub(crate) fn settings_table_full() {
    tracing::error!(
        "the manager holds as many distinct settings as it can; a key made now gets the first"
    );
}

/// A key's `tier_of` named a tier that no `.tier(...)` declares: the key
/// gets the defaults.
pub(crate) fn unknown_tier(tier: &str) {
    tracing::warn!(
        tier,
        "tier_of named an undeclared tier; the key gets the defaults"
    );
}
