//! The figures of the latency-shape scenarios: how close each learned
//! limit comes to the backend's own limit, over the second half of a run.

use std::fmt::Write as _;
use std::time::Duration;

use crate::engine::Series;
use crate::report::Summary;
use crate::strategy::Strategy;

/// Over the second half of a run against a shaped backend.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ShapeFigures {
    /// Successes as a share of what the backend could serve.
    pub(crate) goodput: f64,
    /// The share of calls reaching the backend that it answered 503.
    pub(crate) refused: f64,
    /// The concurrency limit's 5th and 95th percentiles, sampled each
    /// second.
    pub(crate) limit: Option<(f64, f64)>,
    /// Of the served calls that arrived then, from arrival to answer.
    pub(crate) p99: Duration,
}

fn sum(values: &[u32]) -> f64 {
    values.iter().map(|&v| f64::from(v)).sum()
}

impl ShapeFigures {
    pub(crate) fn of(series: &Series) -> Self {
        let half = series.buckets() / 2;
        let capacity: f64 = series.capacity[half..].iter().sum();
        let (sent, ok) = (sum(&series.sent[half..]), sum(&series.ok[half..]));
        let mut limits: Vec<f64> = series.limit[half..].iter().flatten().copied().collect();
        limits.sort_by(f64::total_cmp);
        let tail = limits.len() / 20;
        let mut latencies: Vec<Duration> = series
            .latencies
            .iter()
            .filter(|&&(bucket, _)| bucket as usize >= half)
            .map(|&(_, latency)| latency)
            .collect();
        latencies.sort();
        Self {
            goodput: ok / capacity,
            refused: (sent - ok) / sent.max(1.0),
            limit: (!limits.is_empty()).then(|| (limits[tail], limits[limits.len() - 1 - tail])),
            p99: latencies
                .get(latencies.len().saturating_sub(1) * 99 / 100)
                .copied()
                .unwrap_or_default(),
        }
    }
}

/// The table of a latency-shape scenario, each learned limit's goodput
/// also as a share of the known limit's.
pub(crate) fn shape_table(summaries: &[Summary]) -> String {
    let known = summaries
        .iter()
        .find(|s| s.strategy == Strategy::BulkheadKnown)
        .and_then(|s| s.shape.as_ref())
        .map(|known| known.goodput);
    let mut out = String::from(
        "Over the second half of the run:\n\n\
         | strategy | goodput (of capacity) | vs the bulkhead of 10 | answered 503 | limit (5th..95th) | p99 latency |\n\
         | --- | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for summary in summaries {
        let Some(figures) = &summary.shape else {
            continue;
        };
        let versus = known.map_or("-".to_string(), |known| {
            format!("{:.0} %", 100.0 * figures.goodput / known)
        });
        let limit = figures.limit.map_or("-".to_string(), |(low, high)| {
            format!("{low:.0}..{high:.0}")
        });
        let _ = writeln!(
            out,
            "| {} | {:.1} % | {versus} | {:.1} % | {limit} | {} ms |",
            summary.strategy.name(),
            100.0 * figures.goodput,
            100.0 * figures.refused,
            figures.p99.as_millis(),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use portcullis::Priority;

    use super::*;

    #[test]
    fn the_figures_are_of_the_second_half_only() {
        let mut series = Series::new(40, vec![Priority::MEDIUM]);
        series.capacity = vec![100.0; 40];
        // A bad first half (learning), then 90 of 100 served and 10 of
        // every 100 sent refused.
        for i in 20..40 {
            series.sent[i] = 100;
            series.ok[i] = 90;
        }
        series.limit = (0..40)
            .map(|i| Some(if i < 20 { 1.0 } else { 10.0 }))
            .collect();
        series.limit[39] = Some(30.0); // one second above: outside the 95th
        series.latencies = (0..40)
            .map(|i| (i, Duration::from_millis(100 + i as u64)))
            .collect();
        let figures = ShapeFigures::of(&series);
        assert_eq!(figures.goodput, 0.9);
        assert_eq!(figures.refused, 0.1);
        assert_eq!(figures.limit, Some((10.0, 10.0)));
        assert_eq!(figures.p99, Duration::from_millis(138));
    }
}
