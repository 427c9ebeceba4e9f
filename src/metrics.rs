//! Counters, gauges and a histogram through the `metrics` facade, with
//! feature `metrics`; without it, [`ManagerMetrics`] holds nothing and
//! every method is empty and inlined away.
//!
//! | name | kind | labels |
//! | --- | --- | --- |
//! | `portcullis_admitted_total` | counter | (`manager`), (`key`) |
//! | `portcullis_rejected_total` | counter | `reason`, (`manager`), (`key`) |
//! | `portcullis_outcomes_total` | counter | `outcome`, (`manager`), (`key`) |
//! | `portcullis_wait_seconds` | histogram: time a call waited before it was admitted or refused | `reason` (`rate`, `queue`, `room`), (`manager`), (`key`) |
//! | `portcullis_active` | gauge: calls holding a bulkhead slot | (`manager`), (`key`) |
//! | `portcullis_queued` | gauge: calls waiting in a bulkhead queue | (`manager`), (`key`) |
//! | `portcullis_rate` | gauge: a key's rate, set when it changes | `key`, (`manager`); only per key |
//! | `portcullis_concurrency_limit` | gauge: a key's learned limit | `key`, (`manager`); only per key |
//! | `portcullis_retries_total` | counter: retries made | (`manager`), (`key`) |
//! | `portcullis_retries_refused_total` | counter: retries not made | `why` (`budget`, `deadline`, `max_retries`, `no_policy`), (`manager`), (`key`) |
//!
//! The `manager` label is the manager's
//! [`name`](crate::ThrottleManagerBuilder::name), when it has one: two
//! managers of one process (hosts and a database) keep apart. The `key`
//! label (the key's name, from
//! [`key_names`](crate::ThrottleManagerBuilder::key_names)) is added only
//! when the manager asks for it ([`metrics_per_key`]): keys from untrusted
//! input would give a metric unbounded cardinality.
//!
//! Without per-key labels, a manager registers its series once, at its
//! first use, and then only increments them: no allocation per call. The
//! series bind to the recorder installed at that first use, so install the
//! recorder before the manager's first call. Each series is described
//! (`describe_*`) as it is registered.
//!
//! [`metrics_per_key`]: crate::ThrottleManagerBuilder::metrics_per_key

#![cfg_attr(not(feature = "metrics"), allow(unused_variables))]

use std::time::Duration;

use crate::error::RejectReason;
use crate::outcome::Outcome;

/// The key label: `None` when metrics are not per key.
pub(crate) type KeyLabel<'a> = Option<&'a str>;

/// What a call waited for before it was admitted or refused.
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
#[derive(Debug, Default)]
pub(crate) struct ManagerMetrics {
    #[cfg(feature = "metrics")]
    name: Option<metrics::SharedString>,
    #[cfg(feature = "metrics")]
    series: Option<Box<Series>>,
    /// Whether the series were described to a recorder yet.
    #[cfg(feature = "metrics")]
    described: std::sync::atomic::AtomicBool,
}

impl ManagerMetrics {
    /// The metrics of a manager named `name` (the `manager` label).
    pub(crate) fn named(name: Option<String>) -> Self {
        #[cfg(feature = "metrics")]
        {
            let mut metrics = Self {
                name: name.map(metrics::SharedString::from),
                series: None,
                described: std::sync::atomic::AtomicBool::new(false),
            };
            metrics.series = Some(Box::new(Series::new(&metrics)));
            metrics
        }
        #[cfg(not(feature = "metrics"))]
        Self::default()
    }

    #[inline]
    pub(crate) fn admitted(&self, key: KeyLabel<'_>) {
        #[cfg(feature = "metrics")]
        match key {
            None => self.counter(|series| &series.admitted),
            Some(_) => metrics::counter!(ADMITTED, self.labels(key, &[])).increment(1),
        }
    }

    #[inline]
    pub(crate) fn rejected(&self, key: KeyLabel<'_>, reason: RejectReason) {
        #[cfg(feature = "metrics")]
        match key {
            None => self.counter(|series| &series.rejected[index_of(&RejectReason::ALL, reason)]),
            Some(_) => {
                let labels = self.labels(key, &[("reason", reason.label())]);
                metrics::counter!(REJECTED, labels).increment(1);
            }
        }
    }

    #[inline]
    pub(crate) fn outcome(&self, key: KeyLabel<'_>, outcome: Outcome) {
        #[cfg(feature = "metrics")]
        match key {
            None => self.counter(|series| &series.outcomes[index_of(&OUTCOMES, outcome)]),
            Some(_) => {
                let labels = self.labels(key, &[("outcome", outcome_label(outcome))]);
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
            None => self.with(|recorder, series| {
                let key = &series.waited[index_of(&WAIT_REASONS, reason)];
                recorder.register_histogram(key, &METADATA).record(waited);
            }),
            Some(_) => {
                let labels = self.labels(key, &[("reason", reason.label())]);
                metrics::histogram!(WAIT_SECONDS, labels).record(waited);
            }
        }
    }

    /// A bulkhead slot was taken (`+1`) or given back (`-1`).
    #[inline]
    pub(crate) fn active(&self, key: KeyLabel<'_>, change: f64) {
        #[cfg(feature = "metrics")]
        match key {
            None => self.with(|recorder, series| {
                recorder
                    .register_gauge(&series.active, &METADATA)
                    .increment(change);
            }),
            Some(_) => metrics::gauge!(ACTIVE, self.labels(key, &[])).increment(change),
        }
    }

    /// A call started (`+1`) or stopped (`-1`) waiting in a bulkhead queue.
    #[inline]
    pub(crate) fn queued(&self, key: KeyLabel<'_>, change: f64) {
        #[cfg(feature = "metrics")]
        match key {
            None => self.with(|recorder, series| {
                recorder
                    .register_gauge(&series.queued, &METADATA)
                    .increment(change);
            }),
            Some(_) => metrics::gauge!(QUEUED, self.labels(key, &[])).increment(change),
        }
    }

    /// A key's rate is now `rate`; recorded only per key.
    #[inline]
    pub(crate) fn rate(&self, key: KeyLabel<'_>, rate: f64) {
        #[cfg(feature = "metrics")]
        if key.is_some() {
            metrics::gauge!(RATE, self.labels(key, &[])).set(rate);
        }
    }

    /// A key's learned concurrency limit is now `limit`; recorded only per
    /// key.
    #[inline]
    pub(crate) fn concurrency_limit(&self, key: KeyLabel<'_>, limit: u32) {
        #[cfg(feature = "metrics")]
        if key.is_some() {
            metrics::gauge!(CONCURRENCY_LIMIT, self.labels(key, &[])).set(f64::from(limit));
        }
    }

    #[inline]
    pub(crate) fn retried(&self, key: KeyLabel<'_>) {
        #[cfg(feature = "metrics")]
        match key {
            None => self.counter(|series| &series.retries),
            Some(_) => metrics::counter!(RETRIES, self.labels(key, &[])).increment(1),
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
                self.counter(|series| &series.retries_refused[at]);
            }
            Some(_) => {
                let labels = self.labels(key, &[("why", why)]);
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

#[cfg(feature = "metrics")]
fn index_of<T: PartialEq>(all: &[T], one: T) -> usize {
    all.iter().position(|known| *known == one).unwrap_or(0)
}

/// Where the facade's macros would say a series comes from.
#[cfg(feature = "metrics")]
static METADATA: metrics::Metadata<'static> =
    metrics::Metadata::new("portcullis", metrics::Level::INFO, Some(module_path!()));

/// A manager's series without a key label: their keys (name and labels),
/// built once, so that counting allocates nothing. Each count asks the
/// recorder in force (local or global) for the series by its key, as the
/// facade's macros do.
#[cfg(feature = "metrics")]
#[derive(Debug)]
struct Series {
    admitted: metrics::Key,
    rejected: Vec<metrics::Key>,
    outcomes: Vec<metrics::Key>,
    waited: Vec<metrics::Key>,
    active: metrics::Key,
    queued: metrics::Key,
    retries: metrics::Key,
    retries_refused: Vec<metrics::Key>,
}

#[cfg(feature = "metrics")]
impl Series {
    fn new(metrics: &ManagerMetrics) -> Self {
        let key = |name: &'static str, more: &[(&'static str, &'static str)]| {
            metrics::Key::from_parts(name, metrics.labels(None, more))
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
            waited: WAIT_REASONS
                .iter()
                .map(|reason| key(WAIT_SECONDS, &[("reason", reason.label())]))
                .collect(),
            active: key(ACTIVE, &[]),
            queued: key(QUEUED, &[]),
            retries: key(RETRIES, &[]),
            retries_refused: RETRY_REFUSALS
                .iter()
                .map(|why| key(RETRIES_REFUSED, &[("why", *why)]))
                .collect(),
        }
    }
}

#[cfg(feature = "metrics")]
impl ManagerMetrics {
    /// Runs `emit` with the recorder in force and the manager's series,
    /// describing every series the first time.
    #[inline]
    fn with(&self, emit: impl FnOnce(&dyn metrics::Recorder, &Series)) {
        use std::sync::atomic::Ordering;
        let Some(series) = self.series.as_deref() else {
            return;
        };
        if !self.described.load(Ordering::Relaxed) && !self.described.swap(true, Ordering::Relaxed)
        {
            describe();
        }
        metrics::with_recorder(|recorder| emit(recorder, series));
    }

    /// Adds one to the counter `pick` chooses.
    #[inline]
    fn counter(&self, pick: impl FnOnce(&Series) -> &metrics::Key) {
        self.with(|recorder, series| {
            recorder
                .register_counter(pick(series), &METADATA)
                .increment(1);
        });
    }

    /// The labels of one series: `more`, the manager's name, the key's.
    fn labels(
        &self,
        key: KeyLabel<'_>,
        more: &[(&'static str, &'static str)],
    ) -> Vec<metrics::Label> {
        let mut labels: Vec<metrics::Label> = more
            .iter()
            .map(|(name, value)| metrics::Label::new(*name, *value))
            .collect();
        if let Some(name) = &self.name {
            labels.push(metrics::Label::new("manager", name.clone()));
        }
        if let Some(key) = key {
            labels.push(metrics::Label::new("key", key.to_owned()));
        }
        labels
    }
}

/// Describes every series to the recorder (units and help text).
#[cfg(feature = "metrics")]
fn describe() {
    use metrics::Unit;
    metrics::describe_counter!(ADMITTED, Unit::Count, "Calls admitted");
    metrics::describe_counter!(REJECTED, Unit::Count, "Calls refused locally, by reason");
    metrics::describe_counter!(OUTCOMES_TOTAL, Unit::Count, "Outcomes reported, by kind");
    metrics::describe_histogram!(
        WAIT_SECONDS,
        Unit::Seconds,
        "Time a call waited (for its rate, a bulkhead slot or room) before it was admitted or refused"
    );
    metrics::describe_gauge!(ACTIVE, Unit::Count, "Calls holding a bulkhead slot");
    metrics::describe_gauge!(QUEUED, Unit::Count, "Calls waiting in a bulkhead queue");
    metrics::describe_gauge!(RATE, "A key's rate, in calls a second");
    metrics::describe_gauge!(
        CONCURRENCY_LIMIT,
        Unit::Count,
        "A key's learned concurrency limit"
    );
    metrics::describe_counter!(RETRIES, Unit::Count, "Retries made");
    metrics::describe_counter!(RETRIES_REFUSED, Unit::Count, "Retries not made, by why");
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
            let total = &mut self.waited[index_of(&WAIT_REASONS, reason)];
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
pub(crate) struct Queued<'a> {
    metrics: &'a ManagerMetrics,
    key: KeyLabel<'a>,
}

impl<'a> Queued<'a> {
    pub(crate) fn enter(metrics: &'a ManagerMetrics, key: KeyLabel<'a>) -> Self {
        metrics.queued(key, 1.0);
        Self { metrics, key }
    }
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.metrics.queued(self.key, -1.0);
    }
}
