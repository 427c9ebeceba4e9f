//! A learned limit's settings, checked: the tuning
//! [`BulkheadConfig::adaptive`](super::BulkheadConfig::adaptive) and its
//! setters describe, with every problem named.

use super::{
    AdaptiveSetup, DEFAULT_LEARNED_BOUNDS, DEFAULT_PROBE_CALLS, DEFAULT_PROBE_INTERVAL,
    DEFAULT_PROBE_LIMIT,
};
use crate::bulkhead::adaptive::LimitTuning;
use crate::clock::nanos;
use crate::error::Problems;
use std::time::Duration;

impl AdaptiveSetup {
    /// The tuning, with every problem added to `problems`.
    pub(super) fn check(&self, problems: &mut Problems<'_>) -> LimitTuning {
        let (min, max) = self.bounds.unwrap_or(DEFAULT_LEARNED_BOUNDS);
        if min == 0 {
            problems.add("bounds", "the lower bound must be at least 1, got 0");
        } else if min > max {
            problems.add(
                "bounds",
                format!("the lower bound must not exceed the upper, got {min} and {max}"),
            );
        }
        let probe_interval = self.probe_interval.unwrap_or(DEFAULT_PROBE_INTERVAL);
        if probe_interval < Duration::from_millis(1) {
            problems.add(
                "probe_interval",
                format!("must be at least 1ms, got {probe_interval:?}"),
            );
        }
        let probe_calls = self.probe_calls.unwrap_or(DEFAULT_PROBE_CALLS);
        if probe_calls == 0 {
            problems.add("probe_calls", "must be at least 1, got 0");
        }
        let probe_limit = self.probe_limit.unwrap_or(DEFAULT_PROBE_LIMIT);
        if probe_limit == 0 {
            problems.add("probe_limit", "must be at least 1, got 0");
        } else if probe_limit > max {
            problems.add(
                "probe_limit",
                format!("must not exceed the upper bound ({max}), got {probe_limit}"),
            );
        }
        // By default 15 % of the interval (Envoy's default jitter).
        let probe_jitter = self.probe_jitter.unwrap_or(probe_interval / 20 * 3);
        LimitTuning {
            min,
            max,
            probe_limit,
            probe_calls,
            probe_every: nanos(probe_interval),
            probe_jitter: nanos(probe_jitter),
        }
    }
}
