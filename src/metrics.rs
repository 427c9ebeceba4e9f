//! Counters, gauges and a histogram through the `metrics` facade, with
//! feature `metrics`; without it, [`ManagerMetrics`] holds nothing and
//! every method is empty and inlined away.
//!
//! The series, their kinds and labels are listed for users in the
//! observability chapter of the guide (`docs/guide/observability.md`); a
//! test here holds every name to be there.
//!
//! The `manager` label is the manager's
//! [`name`](crate::builder::ThrottleManagerBuilder::name), when it has one: two
//! managers of one process (hosts and a database) keep apart. The `key`
//! label (the key's name, from
//! [`key_names`](crate::builder::ThrottleManagerBuilder::key_names)) is added only
//! when the manager asks for it ([`metrics_per_key`]): keys from untrusted
//! input would give a metric unbounded cardinality.
//!
//! Without per-key labels, a manager registers its series with the
//! recorder in force at its first count and then only increments them (an
//! atomic add each, no allocation) for as long as that recorder is the one
//! in force; under another recorder (one installed later, a test's local
//! one) it asks that recorder for each series by its key, as the facade's
//! macros do: slower, never lost. So install the recorder before the
//! manager's first call. Every series is described (`describe_*`) to the
//! recorder it is first registered with.
//!
//! [`metrics_per_key`]: crate::builder::ThrottleManagerBuilder::metrics_per_key

#![cfg_attr(not(feature = "metrics"), allow(unused_variables))]

use std::time::Duration;

use crate::error::RejectReason;
use crate::outcome::Outcome;

/// The key label: `None` when metrics are not per key.
pub(crate) type KeyLabel<'a> = Option<&'a str>;

/// What a call waited for before it was admitted or refused; in the
/// order of [`WAIT_REASONS`] (`reason as usize` is its place).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WaitReason {
    /// Its rate's token (locally, in the key's line, or from a store).
    Rate,
    /// A slot, in the bulkhead's queue.
    Queue,
    /// Room in a full key space.
    Room,
}

#[cfg(feature = "metrics")]
const WAIT_REASONS: [WaitReason; 3] = [WaitReason::Rate, WaitReason::Queue, WaitReason::Room];

impl WaitReason {
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    fn label(self) -> &'static str {
        match self {
            Self::Rate => "rate",
            Self::Queue => "queue",
            Self::Room => "room",
        }
    }
}

/// Why a retry was not made, as the `why` label says it.
#[cfg(feature = "metrics")]
const RETRY_REFUSALS: [&str; 4] = ["budget", "deadline", "max_retries", "no_policy"];

#[cfg(feature = "metrics")]
const OUTCOMES: [Outcome; 3] = [Outcome::Success, Outcome::Overloaded, Outcome::Neutral];

#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
fn outcome_label(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Success => "success",
        Outcome::Overloaded => "overloaded",
        Outcome::Neutral => "neutral",
    }
}

/// One manager's metrics: its name, and its series once registered.
#[derive(Debug)]
pub(crate) struct ManagerMetrics {
    #[cfg(feature = "metrics")]
    name: Option<metrics::SharedString>,
    #[cfg(feature = "metrics")]
    keys: Box<SeriesKeys>,
    /// The series as registered with the first recorder they were counted
    /// in (its address), for as long as that recorder is the one in force.
    #[cfg(feature = "metrics")]
    bound: std::sync::OnceLock<(usize, SeriesHandles)>,
}

impl ManagerMetrics {
    /// The metrics of a manager named `name` (the `manager` label).
    pub(crate) fn named(name: Option<String>) -> Self {
        #[cfg(feature = "metrics")]
        {
            let name = name.map(metrics::SharedString::from);
            Self {
                keys: Box::new(SeriesKeys::new(name.as_ref())),
                name,
                bound: std::sync::OnceLock::new(),
            }
        }
        #[cfg(not(feature = "metrics"))]
        Self {}
    }

    #[inline]
    pub(crate) fn admitted(&self, key: KeyLabel<'_>) {
        #[cfg(feature = "metrics")]
        match key {
            None => self.count(CounterOf::Admitted),
            Some(_) => {
                metrics::counter!(ADMITTED, labels(self.name.as_ref(), key, &[])).increment(1)
            }
        }
    }

    #[inline]
    pub(crate) fn rejected(&self, key: KeyLabel<'_>, reason: RejectReason) {
        #[cfg(feature = "metrics")]
        match key {
            None => self.count(CounterOf::Rejected(reason.index())),
            Some(_) => {
                let labels = labels(self.name.as_ref(), key, &[("reason", reason.label())]);
                metrics::counter!(REJECTED, labels).increment(1);
            }
        }
    }

    /// A call of a shadowed key its controls would have refused (and let
    /// through). Asked of the recorder each time: shadow mode is a trial,
    /// not a hot path to keep lean.
    pub(crate) fn would_reject(&self, key: KeyLabel<'_>, reason: RejectReason) {
        #[cfg(feature = "metrics")]
        {
            let labels = labels(self.name.as_ref(), key, &[("reason", reason.label())]);
            metrics::counter!(WOULD_REJECT, labels).increment(1);
        }
    }

    #[inline]
    pub(crate) fn outcome(&self, key: KeyLabel<'_>, outcome: Outcome) {
        #[cfg(feature = "metrics")]
        match key {
            None => self.count(CounterOf::Outcome(outcome_index(outcome))),
            Some(_) => {
                let labels = labels(
                    self.name.as_ref(),
                    key,
                    &[("outcome", outcome_label(outcome))],
                );
                metrics::counter!(OUTCOMES_TOTAL, labels).increment(1);
            }
        }
    }

    /// A call waited `waited` for `reason` (and was then admitted, or
    /// refused).
    #[inline]
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub(crate) fn waited(&self, key: KeyLabel<'_>, reason: WaitReason, waited: Duration) {
        #[cfg(feature = "metrics")]
        match key {
            None => self.record(reason as usize, waited),
            Some(_) => {
                let labels = labels(self.name.as_ref(), key, &[("reason", reason.label())]);
                metrics::histogram!(WAIT_SECONDS, labels).record(waited);
            }
        }
    }

    /// A bulkhead slot was taken (`+1`) or given back (`-1`).
    #[inline]
    pub(crate) fn active(&self, key: KeyLabel<'_>, change: f64) {
        #[cfg(feature = "metrics")]
        match key {
            None => self.move_gauge(GaugeOf::Active, change),
            Some(_) => {
                metrics::gauge!(ACTIVE, labels(self.name.as_ref(), key, &[])).increment(change)
            }
        }
    }

    /// A call started (`+1`) or stopped (`-1`) waiting in a bulkhead queue.
    #[inline]
    pub(crate) fn queued(&self, key: KeyLabel<'_>, change: f64) {
        #[cfg(feature = "metrics")]
        match key {
            None => self.move_gauge(GaugeOf::Queued, change),
            Some(_) => {
                metrics::gauge!(QUEUED, labels(self.name.as_ref(), key, &[])).increment(change)
            }
        }
    }

    /// A key's rate is now `rate`; recorded only per key.
    #[inline]
    pub(crate) fn rate(&self, key: KeyLabel<'_>, rate: f64) {
        #[cfg(feature = "metrics")]
        if key.is_some() {
            metrics::gauge!(RATE, labels(self.name.as_ref(), key, &[])).set(rate);
        }
    }

    /// A key's learned concurrency limit is now `limit`; recorded only per
    /// key.
    #[inline]
    pub(crate) fn concurrency_limit(&self, key: KeyLabel<'_>, limit: u32) {
        #[cfg(feature = "metrics")]
        if key.is_some() {
            metrics::gauge!(CONCURRENCY_LIMIT, labels(self.name.as_ref(), key, &[]))
                .set(f64::from(limit));
        }
    }

    #[inline]
    pub(crate) fn retried(&self, key: KeyLabel<'_>) {
        #[cfg(feature = "metrics")]
        match key {
            None => self.count(CounterOf::Retries),
            Some(_) => {
                metrics::counter!(RETRIES, labels(self.name.as_ref(), key, &[])).increment(1)
            }
        }
    }

    /// A retry was not made, for `why` (`budget`, `deadline`,
    /// `max_retries` or `no_policy`).
    #[inline]
    pub(crate) fn retry_refused(&self, key: KeyLabel<'_>, why: &'static str) {
        #[cfg(feature = "metrics")]
        match key {
            None => {
                let at = RETRY_REFUSALS.iter().position(|known| *known == why);
                let at = at.unwrap_or(RETRY_REFUSALS.len() - 1);
                self.count(CounterOf::RetryRefused(at));
            }
            Some(_) => {
                let labels = labels(self.name.as_ref(), key, &[("why", why)]);
                metrics::counter!(RETRIES_REFUSED, labels).increment(1);
            }
        }
    }
}

#[cfg(feature = "metrics")]
const ADMITTED: &str = "portcullis_admitted_total";
#[cfg(feature = "metrics")]
const REJECTED: &str = "portcullis_rejected_total";
#[cfg(feature = "metrics")]
const WOULD_REJECT: &str = "portcullis_shadow_rejected_total";
#[cfg(feature = "metrics")]
const OUTCOMES_TOTAL: &str = "portcullis_outcomes_total";
#[cfg(feature = "metrics")]
const WAIT_SECONDS: &str = "portcullis_wait_seconds";
#[cfg(feature = "metrics")]
const ACTIVE: &str = "portcullis_active";
#[cfg(feature = "metrics")]
const QUEUED: &str = "portcullis_queued";
#[cfg(feature = "metrics")]
const RATE: &str = "portcullis_rate";
#[cfg(feature = "metrics")]
const CONCURRENCY_LIMIT: &str = "portcullis_concurrency_limit";
#[cfg(feature = "metrics")]
const RETRIES: &str = "portcullis_retries_total";
#[cfg(feature = "metrics")]
const RETRIES_REFUSED: &str = "portcullis_retries_refused_total";

/// An outcome's place in [`OUTCOMES`].
#[cfg(feature = "metrics")]
fn outcome_index(outcome: Outcome) -> usize {
    match outcome {
        Outcome::Success => 0,
        Outcome::Overloaded => 1,
        Outcome::Neutral => 2,
    }
}

/// Where the facade's macros would say a series comes from.
#[cfg(feature = "metrics")]
static METADATA: metrics::Metadata<'static> =
    metrics::Metadata::new("portcullis", metrics::Level::INFO, Some(module_path!()));

/// A manager's series without a key label, one value of each: `C` for a
/// counter, `G` a gauge, `H` a histogram. As [`SeriesKeys`], their names
/// and labels, built once, so that counting allocates nothing; as
/// [`SeriesHandles`], as one recorder registered them.
#[cfg(feature = "metrics")]
#[derive(Debug)]
struct Series<C, G, H> {
    admitted: C,
    rejected: Vec<C>,
    outcomes: Vec<C>,
    retries: C,
    retries_refused: Vec<C>,
    active: G,
    queued: G,
    waited: Vec<H>,
}

#[cfg(feature = "metrics")]
type SeriesKeys = Series<metrics::Key, metrics::Key, metrics::Key>;
#[cfg(feature = "metrics")]
type SeriesHandles = Series<metrics::Counter, metrics::Gauge, metrics::Histogram>;

/// One of a manager's counters.
#[cfg(feature = "metrics")]
#[derive(Debug, Clone, Copy)]
enum CounterOf {
    Admitted,
    /// By [`RejectReason::ALL`].
    Rejected(usize),
    /// By [`OUTCOMES`].
    Outcome(usize),
    Retries,
    /// By [`RETRY_REFUSALS`].
    RetryRefused(usize),
}

/// One of a manager's gauges.
#[cfg(feature = "metrics")]
#[derive(Debug, Clone, Copy)]
enum GaugeOf {
    Active,
    Queued,
}

#[cfg(feature = "metrics")]
impl<C, G, H> Series<C, G, H> {
    fn counter(&self, which: CounterOf) -> &C {
        match which {
            CounterOf::Admitted => &self.admitted,
            CounterOf::Rejected(at) => &self.rejected[at],
            CounterOf::Outcome(at) => &self.outcomes[at],
            CounterOf::Retries => &self.retries,
            CounterOf::RetryRefused(at) => &self.retries_refused[at],
        }
    }

    fn gauge(&self, which: GaugeOf) -> &G {
        match which {
            GaugeOf::Active => &self.active,
            GaugeOf::Queued => &self.queued,
        }
    }
}

#[cfg(feature = "metrics")]
impl SeriesKeys {
    /// The series of a manager named `manager`.
    fn new(manager: Option<&metrics::SharedString>) -> Self {
        let key = |name: &'static str, more: &[(&'static str, &'static str)]| {
            metrics::Key::from_parts(name, labels(manager, None, more))
        };
        Series {
            admitted: key(ADMITTED, &[]),
            rejected: RejectReason::ALL
                .iter()
                .map(|reason| key(REJECTED, &[("reason", reason.label())]))
                .collect(),
            outcomes: OUTCOMES
                .iter()
                .map(|outcome| key(OUTCOMES_TOTAL, &[("outcome", outcome_label(*outcome))]))
                .collect(),
            retries: key(RETRIES, &[]),
            retries_refused: RETRY_REFUSALS
                .iter()
                .map(|why| key(RETRIES_REFUSED, &[("why", *why)]))
                .collect(),
            active: key(ACTIVE, &[]),
            queued: key(QUEUED, &[]),
            waited: WAIT_REASONS
                .iter()
                .map(|reason| key(WAIT_SECONDS, &[("reason", reason.label())]))
                .collect(),
        }
    }

    /// Every series registered with `recorder`.
    fn register(&self, recorder: &dyn metrics::Recorder) -> SeriesHandles {
        let counter = |key: &metrics::Key| recorder.register_counter(key, &METADATA);
        let gauge = |key: &metrics::Key| recorder.register_gauge(key, &METADATA);
        Series {
            admitted: counter(&self.admitted),
            rejected: self.rejected.iter().map(counter).collect(),
            outcomes: self.outcomes.iter().map(counter).collect(),
            retries: counter(&self.retries),
            retries_refused: self.retries_refused.iter().map(counter).collect(),
            active: gauge(&self.active),
            queued: gauge(&self.queued),
            waited: self
                .waited
                .iter()
                .map(|key| recorder.register_histogram(key, &METADATA))
                .collect(),
        }
    }
}

#[cfg(feature = "metrics")]
impl ManagerMetrics {
    /// Counts through the recorder in force (a local one, the global one,
    /// or the facade's no-op): with the handles registered at the first
    /// count while that recorder is still the one in force (an atomic add),
    /// else by asking the recorder for the series by its key, as the
    /// facade's macros do. The first count describes every series.
    #[inline]
    fn emit(
        &self,
        bound: impl FnOnce(&SeriesHandles),
        unbound: impl FnOnce(&dyn metrics::Recorder, &SeriesKeys),
    ) {
        let keys = &*self.keys;
        metrics::with_recorder(|recorder| {
            let address = std::ptr::from_ref(recorder).cast::<()>() as usize;
            let (bound_to, handles) = self.bound.get_or_init(|| {
                describe(recorder);
                (address, keys.register(recorder))
            });
            if *bound_to == address {
                bound(handles);
            } else {
                unbound(recorder, keys);
            }
        });
    }

    #[inline]
    fn count(&self, which: CounterOf) {
        self.emit(
            |handles| handles.counter(which).increment(1),
            |recorder, keys| {
                let key = keys.counter(which);
                recorder.register_counter(key, &METADATA).increment(1);
            },
        );
    }

    #[inline]
    fn move_gauge(&self, which: GaugeOf, change: f64) {
        self.emit(
            |handles| handles.gauge(which).increment(change),
            |recorder, keys| {
                let key = keys.gauge(which);
                recorder.register_gauge(key, &METADATA).increment(change);
            },
        );
    }

    #[inline]
    fn record(&self, at: usize, waited: Duration) {
        self.emit(
            |handles| handles.waited[at].record(waited),
            |recorder, keys| {
                let key = &keys.waited[at];
                recorder.register_histogram(key, &METADATA).record(waited);
            },
        );
    }
}

/// The labels of one series: `more`, the manager's name, the key's.
#[cfg(feature = "metrics")]
fn labels(
    manager: Option<&metrics::SharedString>,
    key: KeyLabel<'_>,
    more: &[(&'static str, &'static str)],
) -> Vec<metrics::Label> {
    let mut labels: Vec<metrics::Label> = more
        .iter()
        .map(|(name, value)| metrics::Label::new(*name, *value))
        .collect();
    if let Some(name) = manager {
        labels.push(metrics::Label::new("manager", name.clone()));
    }
    if let Some(key) = key {
        labels.push(metrics::Label::new("key", key.to_owned()));
    }
    labels
}

/// Describes every series to `recorder` (units and help text).
#[cfg(feature = "metrics")]
fn describe(recorder: &dyn metrics::Recorder) {
    use metrics::Unit;
    let described: [(&'static str, Option<Unit>, &'static str); 11] = [
        (ADMITTED, Some(Unit::Count), "Calls admitted"),
        (
            REJECTED,
            Some(Unit::Count),
            "Calls refused locally, by reason",
        ),
        (
            WOULD_REJECT,
            Some(Unit::Count),
            "Calls of shadowed keys that would have been refused, by reason, and went through",
        ),
        (
            OUTCOMES_TOTAL,
            Some(Unit::Count),
            "Outcomes reported, by kind",
        ),
        (
            WAIT_SECONDS,
            Some(Unit::Seconds),
            "Time a call waited (for its rate, a bulkhead slot or room) before it was admitted or refused",
        ),
        (ACTIVE, Some(Unit::Count), "Calls holding a bulkhead slot"),
        (
            QUEUED,
            Some(Unit::Count),
            "Calls waiting in a bulkhead queue",
        ),
        (RATE, None, "A key's rate, in calls a second"),
        (
            CONCURRENCY_LIMIT,
            Some(Unit::Count),
            "A key's learned concurrency limit",
        ),
        (RETRIES, Some(Unit::Count), "Retries made"),
        (
            RETRIES_REFUSED,
            Some(Unit::Count),
            "Retries not made, by why",
        ),
    ];
    for (name, unit, help) in described {
        let (name, help) = (
            metrics::KeyName::from(name),
            metrics::SharedString::from(help),
        );
        match name.as_str() {
            WAIT_SECONDS => recorder.describe_histogram(name, unit, help),
            ACTIVE | QUEUED | RATE | CONCURRENCY_LIMIT => recorder.describe_gauge(name, unit, help),
            _ => recorder.describe_counter(name, unit, help),
        }
    }
}

/// The time one call spent waiting, by what for: each reason the call
/// waited for is counted once in `portcullis_wait_seconds` when its wait
/// ends (admitted, refused or given up), however many steps it took (a
/// turn in the key's line, then the token's due time, are one wait for the
/// rate).
#[derive(Debug)]
pub(crate) struct CallWaits<'a> {
    #[cfg(feature = "metrics")]
    metrics: &'a ManagerMetrics,
    #[cfg(feature = "metrics")]
    key: Option<String>,
    /// By [`WAIT_REASONS`]: the time waited, if the call waited for it.
    #[cfg(feature = "metrics")]
    waited: [Option<Duration>; 3],
    #[cfg(not(feature = "metrics"))]
    _metrics: std::marker::PhantomData<&'a ManagerMetrics>,
}

impl<'a> CallWaits<'a> {
    /// A call's waits, counted with `key` as its label (per-key metrics).
    pub(crate) fn new(metrics: &'a ManagerMetrics, key: Option<String>) -> Self {
        #[cfg(feature = "metrics")]
        return Self {
            metrics,
            key,
            waited: [None; 3],
        };
        #[cfg(not(feature = "metrics"))]
        Self {
            _metrics: std::marker::PhantomData,
        }
    }

    /// The call waited `waited()` more for `reason` (read only with the
    /// feature).
    #[inline]
    pub(crate) fn add(&mut self, reason: WaitReason, waited: impl FnOnce() -> Duration) {
        #[cfg(feature = "metrics")]
        {
            let total = &mut self.waited[reason as usize];
            *total = Some(total.unwrap_or_default() + waited());
        }
    }
}

#[cfg(feature = "metrics")]
impl Drop for CallWaits<'_> {
    fn drop(&mut self) {
        for (reason, waited) in WAIT_REASONS.iter().zip(self.waited) {
            if let Some(waited) = waited {
                self.metrics.waited(self.key.as_deref(), *reason, waited);
            }
        }
    }
}

/// A call waiting in a bulkhead queue, counted in `portcullis_queued` for
/// as long as it lives.
#[derive(Debug)]
pub(crate) struct QueuedGauge<'a> {
    metrics: &'a ManagerMetrics,
    key: KeyLabel<'a>,
}

impl<'a> QueuedGauge<'a> {
    pub(crate) fn enter(metrics: &'a ManagerMetrics, key: KeyLabel<'a>) -> Self {
        metrics.queued(key, 1.0);
        Self { metrics, key }
    }
}

impl Drop for QueuedGauge<'_> {
    fn drop(&mut self) {
        self.metrics.queued(self.key, -1.0);
    }
}

#[cfg(all(test, feature = "metrics"))]
mod tests {
    use super::*;

    /// Every series a manager records is in the guide's table, which is
    /// the only place its users read the names.
    #[test]
    fn every_series_is_documented_in_the_guide() {
        let guide = include_str!("../docs/guide/observability.md");
        for name in [
            ADMITTED,
            REJECTED,
            WOULD_REJECT,
            OUTCOMES_TOTAL,
            WAIT_SECONDS,
            ACTIVE,
            QUEUED,
            RATE,
            CONCURRENCY_LIMIT,
            RETRIES,
            RETRIES_REFUSED,
        ] {
            assert!(
                guide.contains(&format!("| `{name}` |")),
                "{name} is not in the guide's table"
            );
        }
    }
}
