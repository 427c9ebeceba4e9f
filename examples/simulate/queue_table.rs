//! The figures of the scenarios whose callers give up: what reached them
//! in time, and the work the backend did for no one.

use std::fmt::Write as _;
use std::time::Duration;

use crate::engine::{BUCKET, Series};
use crate::report::{Summary, percent, quantile};

/// How a strategy fared for callers who give up after their patience.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct QueueFigures {
    /// Calls answered within the callers' patience, as a share of what the
    /// backend could serve.
    pub(crate) in_time: f64,
    /// Calls the backend served after their callers had given up, as a
    /// share of all it served: work done for no one.
    pub(crate) too_late: f64,
    /// Latency of the served calls, from arrival to answer: median and
    /// 99th percentile.
    pub(crate) p50: Duration,
    pub(crate) p99: Duration,
}

impl QueueFigures {
    /// The figures of `series`, over the calls that arrived before its last
    /// second (the last second's are answered after the run, when the
    /// backend has time to spare: they would count more than it served).
    pub(crate) fn of(series: &Series, patience: Duration) -> Self {
        let last = series.buckets().saturating_sub(1);
        let capacity: f64 = series.capacity[..last].iter().sum::<f64>() * BUCKET.as_secs_f64();
        let mut latencies: Vec<Duration> = series
            .latencies
            .iter()
            .filter(|&&(bucket, _)| (bucket as usize) < last)
            .map(|&(_, latency)| latency)
            .collect();
        latencies.sort();
        let in_time = latencies.iter().filter(|&&l| l <= patience).count();
        Self {
            in_time: in_time as f64 / capacity.max(1.0),
            too_late: (latencies.len() - in_time) as f64 / (latencies.len().max(1)) as f64,
            p50: quantile(&latencies, 0.5),
            p99: quantile(&latencies, 0.99),
        }
    }
}

/// The table of a scenario whose callers give up: what reached them in
/// time, and the work done for no one.
pub(crate) fn queue_table(summaries: &[Summary]) -> String {
    let mut out = String::from(
        "| strategy | answered in time (of capacity) | served too late | shed locally | p50 latency | p99 latency |\n\
         | --- | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for summary in summaries {
        let Some(q) = &summary.queue else {
            continue;
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} ms | {} ms |",
            summary.strategy.name(),
            percent(q.in_time),
            percent(q.too_late),
            percent(summary.shed),
            q.p50.as_millis(),
            q.p99.as_millis(),
        );
    }
    out
}
