//! The figures of the learned-rate scenarios: from each start, how soon
//! the rate finds the backend's capacity and how many calls it refused on
//! the way (the promises `tests/rate/converge.rs` checks).

use std::fmt::Write as _;

use crate::engine::{BUCKET, Series};
use crate::report::Summary;

/// One run of the learned rate from one start.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ConvergeFigures {
    /// The rate it started from, in calls a second.
    pub(crate) start: f64,
    /// The first second in which the backend served 90 % of its capacity.
    pub(crate) reached: Option<usize>,
    /// The share of the calls reaching the backend that it answered 429:
    /// over the whole run, and from the 10th second on.
    pub(crate) refused: f64,
    pub(crate) refused_late: f64,
    /// Successes as a share of the capacity, over the second half.
    pub(crate) late_goodput: f64,
    /// The learned rate at the end.
    pub(crate) rate_at_end: Option<f64>,
}

fn sum(values: &[u32]) -> f64 {
    values.iter().map(|&v| f64::from(v)).sum()
}

/// The share of the calls sent over `range` (buckets) that failed.
fn refused_share(series: &Series, range: std::ops::Range<usize>) -> f64 {
    let sent = sum(&series.sent[range.clone()]);
    (sent - sum(&series.ok[range])) / sent.max(1.0)
}

impl ConvergeFigures {
    pub(crate) fn of(series: &Series, start: f64) -> Self {
        let buckets = series.buckets();
        let seconds = BUCKET.as_secs_f64();
        let reached =
            (0..buckets).find(|&i| f64::from(series.ok[i]) / seconds >= 0.9 * series.capacity[i]);
        let late = (10.0 / seconds) as usize;
        let half = buckets / 2;
        let capacity: f64 = series.capacity[half..].iter().sum::<f64>() * seconds;
        Self {
            start,
            reached: reached.map(|i| (i as f64 * seconds) as usize),
            refused: refused_share(series, 0..buckets),
            refused_late: refused_share(series, late.min(buckets)..buckets),
            late_goodput: sum(&series.ok[half..]) / capacity.max(1.0),
            rate_at_end: series.rate.last().copied().flatten(),
        }
    }
}

/// The table of a learned-rate scenario: one row per start.
pub(crate) fn converge_table(summaries: &[Summary]) -> String {
    let mut out = String::from(
        "| start | 90 % of capacity first served in second | answered 429 | 429 from the 10th second | goodput, 2nd half | rate at the end |\n\
         | --- | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for summary in summaries {
        let Some(figures) = &summary.converge else {
            continue;
        };
        let reached = figures
            .reached
            .map_or("never".to_string(), |second| second.to_string());
        let rate = figures
            .rate_at_end
            .map_or("-".to_string(), |rate| format!("{rate:.1}/s"));
        let _ = writeln!(
            out,
            "| {} ({}/s) | {reached} | {:.1} % | {:.1} % | {:.1} % | {rate} |",
            summary.strategy.name(),
            figures.start,
            100.0 * figures.refused,
            100.0 * figures.refused_late,
            100.0 * figures.late_goodput,
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use portcullis::Priority;

    use super::*;

    #[test]
    fn the_figures_read_the_run_second_by_second() {
        let mut series = Series::new(20, vec![Priority::MEDIUM]);
        series.capacity = vec![50.0; 20];
        for i in 0..20 {
            // Climbing 10 a second to 50, then 46 served of 48 sent.
            series.sent[i] = if i < 5 { 10 * i as u32 } else { 48 };
            series.ok[i] = if i < 5 { 10 * i as u32 } else { 46 };
        }
        series.rate[19] = Some(47.5);
        let figures = ConvergeFigures::of(&series, 1.0);
        assert_eq!(figures.reached, Some(5));
        assert_eq!(figures.refused_late, 2.0 / 48.0);
        assert_eq!(figures.late_goodput, 46.0 / 50.0);
        assert_eq!(figures.rate_at_end, Some(47.5));
    }
}
