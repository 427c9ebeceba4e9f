//! A manager's link to its store: the store with its reports on their
//! way ([`StoreHandle`]), and each key's name there with its shared rate as
//! last answered ([`StoreKey`]).

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::RateStore;

/// The most outcome reports of one manager on their way to its store at
/// once. Beyond it (a store much slower than the calls' outcomes come), an
/// outcome moves only the key's local rate, and the shared rate learns
/// from the others.
pub(crate) const MAX_REPORTS_IN_FLIGHT: u64 = 4_096;

/// One key's link to the store: its name there, and its shared rate as
/// the store last answered it (0: not yet known).
#[derive(Debug)]
pub(crate) struct StoreKey {
    pub(crate) name: Arc<str>,
    /// Shared with reports on their way, which bring the rate back.
    rate: Arc<AtomicU64>,
}

impl StoreKey {
    pub(crate) fn new(name: String) -> Self {
        Self {
            name: name.into(),
            rate: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The shared rate the store last answered, if it has answered.
    pub(crate) fn rate(&self) -> Option<f64> {
        let bits = self.rate.load(Ordering::Acquire);
        (bits != 0).then(|| f64::from_bits(bits))
    }

    pub(crate) fn set_rate(&self, rate: f64) {
        set_rate(&self.rate, rate);
    }

    /// Where a report on its way writes the rate it brings back.
    pub(crate) fn rate_cell(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.rate)
    }
}

/// Stores `rate` in `cell` if it is a rate (finite and above 0).
pub(crate) fn set_rate(cell: &AtomicU64, rate: f64) {
    if rate.is_finite() && rate > 0.0 {
        cell.store(rate.to_bits(), Ordering::Release);
    }
}

/// A manager's store, and its reports on their way.
pub(crate) struct StoreHandle {
    pub(crate) store: Box<dyn RateStore>,
    pub(crate) reports_in_flight: AtomicU64,
}

impl StoreHandle {
    pub(crate) fn new(store: Box<dyn RateStore>) -> Self {
        Self {
            store,
            reports_in_flight: AtomicU64::new(0),
        }
    }

    /// Runs the report `send` makes on a task of the current tokio runtime,
    /// without waiting for it. Nothing is sent outside a runtime, or while
    /// [`MAX_REPORTS_IN_FLIGHT`] are on their way: what the report would
    /// teach the store, the process has learned already.
    pub(crate) fn spawn_report<F>(self: &Arc<Self>, send: impl FnOnce(Arc<Self>) -> F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let in_flight = &self.reports_in_flight;
        if in_flight.fetch_add(1, Ordering::AcqRel) >= MAX_REPORTS_IN_FLIGHT {
            in_flight.fetch_sub(1, Ordering::AcqRel);
            return;
        }
        let handle = Arc::clone(self);
        let report = send(Arc::clone(self));
        runtime.spawn(async move {
            report.await;
            handle.reports_in_flight.fetch_sub(1, Ordering::AcqRel);
        });
    }
}

impl fmt::Debug for StoreHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreHandle")
            .field("available", &self.store.is_available())
            .field("reports_in_flight", &self.reports_in_flight)
            .finish_non_exhaustive()
    }
}
