//! Counters and gauges through the `metrics` facade, with feature
//! `metrics`; without it, every function here is empty and inlined away.
//!
//! | name | kind | labels |
//! | --- | --- | --- |
//! | `portcullis_admitted_total` | counter | (`key`) |
//! | `portcullis_rejected_total` | counter | `reason`, (`key`) |
//! | `portcullis_outcomes_total` | counter | `outcome`, (`key`) |
//! | `portcullis_active` | gauge: calls holding a bulkhead slot | (`key`) |
//! | `portcullis_queued` | gauge: calls waiting in a bulkhead queue | (`key`) |
//! | `portcullis_rate` | gauge: a key's rate, set when it changes | `key`, only per key |
//! | `portcullis_retries_total` | counter: retries made | (`key`) |
//! | `portcullis_retries_refused_total` | counter: retries not made | `why` (`budget`, `deadline`, `max_retries`), (`key`) |
//!
//! The `key` label (the key's name, from
//! [`key_names`](crate::ThrottleManagerBuilder::key_names)) is added only
//! when the manager asks for it ([`metrics_per_key`]): keys from untrusted
//! input would give a metric unbounded cardinality.
//!
//! [`metrics_per_key`]: crate::ThrottleManagerBuilder::metrics_per_key

#![cfg_attr(not(feature = "metrics"), allow(unused_variables))]

use crate::error::RejectReason;
use crate::outcome::Outcome;

/// The key label: `None` when metrics are not per key.
pub(crate) type KeyLabel<'a> = Option<&'a str>;

#[cfg(feature = "metrics")]
fn labels(key: KeyLabel<'_>, more: &[(&'static str, &'static str)]) -> Vec<metrics::Label> {
    let mut labels: Vec<metrics::Label> = more
        .iter()
        .map(|(name, value)| metrics::Label::new(*name, *value))
        .collect();
    if let Some(key) = key {
        labels.push(metrics::Label::new("key", key.to_owned()));
    }
    labels
}

#[inline]
pub(crate) fn admitted(key: KeyLabel<'_>) {
    #[cfg(feature = "metrics")]
    metrics::counter!("portcullis_admitted_total", labels(key, &[])).increment(1);
}

#[inline]
pub(crate) fn rejected(key: KeyLabel<'_>, reason: RejectReason) {
    #[cfg(feature = "metrics")]
    {
        let reason = reason.label();
        metrics::counter!(
            "portcullis_rejected_total",
            labels(key, &[("reason", reason)])
        )
        .increment(1);
    }
}

#[inline]
pub(crate) fn outcome(key: KeyLabel<'_>, outcome: Outcome) {
    #[cfg(feature = "metrics")]
    {
        let outcome = match outcome {
            Outcome::Success => "success",
            Outcome::Overloaded => "overloaded",
            Outcome::Neutral => "neutral",
        };
        metrics::counter!(
            "portcullis_outcomes_total",
            labels(key, &[("outcome", outcome)])
        )
        .increment(1);
    }
}

/// A bulkhead slot was taken (`+1`) or given back (`-1`).
#[inline]
pub(crate) fn active(key: KeyLabel<'_>, change: f64) {
    #[cfg(feature = "metrics")]
    metrics::gauge!("portcullis_active", labels(key, &[])).increment(change);
}

/// A call started (`+1`) or stopped (`-1`) waiting in a bulkhead queue.
#[inline]
pub(crate) fn queued(key: KeyLabel<'_>, change: f64) {
    #[cfg(feature = "metrics")]
    metrics::gauge!("portcullis_queued", labels(key, &[])).increment(change);
}

/// A key's rate is now `rate`; recorded only per key.
#[inline]
pub(crate) fn rate(key: KeyLabel<'_>, rate: f64) {
    #[cfg(feature = "metrics")]
    if let Some(key) = key {
        metrics::gauge!("portcullis_rate", labels(Some(key), &[])).set(rate);
    }
}

/// A key's learned concurrency limit is now `limit`; recorded only per key.
#[inline]
pub(crate) fn concurrency_limit(key: KeyLabel<'_>, limit: u32) {
    #[cfg(feature = "metrics")]
    if let Some(key) = key {
        metrics::gauge!("portcullis_concurrency_limit", labels(Some(key), &[]))
            .set(f64::from(limit));
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (key, limit);
}

/// A call waiting in a bulkhead queue, counted in `portcullis_queued` for
/// as long as it lives.
#[derive(Debug)]
pub(crate) struct Queued<'a>(KeyLabel<'a>);

impl<'a> Queued<'a> {
    pub(crate) fn enter(key: KeyLabel<'a>) -> Self {
        queued(key, 1.0);
        Self(key)
    }
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        queued(self.0, -1.0);
    }
}

#[inline]
pub(crate) fn retried(key: KeyLabel<'_>) {
    #[cfg(feature = "metrics")]
    metrics::counter!("portcullis_retries_total", labels(key, &[])).increment(1);
}

#[inline]
pub(crate) fn retry_refused(key: KeyLabel<'_>, why: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!(
        "portcullis_retries_refused_total",
        labels(key, &[("why", why)])
    )
    .increment(1);
}
