//! The figures of a run, and the tables that compare strategies.

use std::fmt::Write as _;
use std::time::Duration;

use crate::converge_table::{ConvergeFigures, converge_table};
use crate::engine::{BUCKET, FINE, REJECT_COST, Series, Settings};
use crate::queue_table::{QueueFigures, queue_table};
use crate::scenario::{CAPACITY, Scenario};
use crate::shape_table::{ShapeFigures, shape_table};
use crate::strategy::{Strategy, THROTTLE_WINDOW};

/// Seconds over which "settled" and "recovered" are judged.
const SMOOTHING: usize = 5;

/// The figures of one strategy on one scenario.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Summary {
    pub(crate) strategy: Strategy,
    /// Successes as a share of what the backend could serve.
    pub(crate) goodput: f64,
    /// The same over the second half of the run, once the controls have
    /// learned (for scenarios where demand exceeds capacity throughout).
    pub(crate) late_goodput: Option<f64>,
    /// Calls reaching the backend, in multiples of what it could serve.
    pub(crate) load: f64,
    /// The share of calls rejected locally.
    pub(crate) shed: f64,
    /// The share of calls reaching the backend that it turned away.
    pub(crate) failed: f64,
    /// Mean wait of the calls that reached the backend.
    pub(crate) mean_wait: Duration,
    /// Per priority of the scenario, the share of its calls served.
    pub(crate) ok_by_priority: Vec<f64>,
    /// For scenarios where demand exceeds capacity: how long after the
    /// start (or the capacity change) until the load stayed within 10 % of
    /// the capacity with goodput at 90 % or more; `Some(None)`: never.
    pub(crate) settled_after: Option<Option<Duration>>,
    /// For an outage: the mean load on the backend (calls/s) from one
    /// throttle window after it began until it ended.
    pub(crate) outage_load: Option<f64>,
    /// For an outage: how long after it ended until goodput was back to 90 %
    /// of what it was before; `Some(None)`: never.
    pub(crate) recovered_after: Option<Option<Duration>>,
    /// For strategies with a rate: the highest learned rate, as a multiple
    /// of the calls that reached the backend in the same second, over the
    /// seconds the rate was above its start (`Some(None)`: never above).
    pub(crate) rate_over_used: Option<Option<f64>>,
    /// For strategies with a rate: the longest stretch during which the
    /// learned rate stayed above twice its use (as for `rate_over_used`,
    /// but sampled every [`FINE`] step).
    pub(crate) above_twice_used: Option<Duration>,
    /// For concurrency scenarios: what the calls were like and what the
    /// limit did ([`Concurrency`]).
    pub(crate) concurrency: Option<Concurrency>,
    /// For latency-shape scenarios.
    pub(crate) shape: Option<ShapeFigures>,
    /// For scenarios whose callers give up ([`QueueFigures`]).
    pub(crate) queue: Option<QueueFigures>,
    /// For the learned-rate scenarios ([`ConvergeFigures`]).
    pub(crate) converge: Option<ConvergeFigures>,
}

/// How a strategy fared against a workers backend whose capacity changes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Concurrency {
    /// Latency of the served calls, from arrival to answer: median and
    /// 99th percentile, over the run.
    pub(crate) p50: Duration,
    pub(crate) p99: Duration,
    /// The same after the change (from 10 s after it); `None` if no call
    /// was served then.
    pub(crate) p99_after: Option<Duration>,
    /// The concurrency limit (median) over the 20 s before the change and
    /// the last 20 s of the run; `None` without a bulkhead.
    pub(crate) limit_before: Option<f64>,
    pub(crate) limit_after: Option<f64>,
    /// How long after the change until the limit stayed within 20 % of
    /// where it ended; `Some(None)`: never.
    pub(crate) followed_after: Option<Option<Duration>>,
}

pub(crate) fn quantile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn median(values: &[Option<f64>]) -> Option<f64> {
    let mut values: Vec<f64> = values.iter().flatten().copied().collect();
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied()
}

impl Concurrency {
    fn of(series: &Series, change: Duration) -> Self {
        let change = bucket_of(change);
        let mut all: Vec<Duration> = series.latencies.iter().map(|&(_, l)| l).collect();
        all.sort();
        let mut after: Vec<Duration> = series
            .latencies
            .iter()
            .filter(|&&(bucket, _)| bucket as usize >= change + 10)
            .map(|&(_, l)| l)
            .collect();
        after.sort();
        let buckets = series.buckets();
        let limit_before = median(&series.limit[change.saturating_sub(20)..change]);
        let limit_after = median(&series.limit[buckets.saturating_sub(20)..]);
        let followed_after = limit_after.map(|end| {
            let near =
                |i: usize| series.limit[i].is_some_and(|l| (l - end).abs() <= 0.2 * end.max(1.0));
            (change..buckets)
                .find(|&i| (i..buckets).all(near))
                .map(|i| BUCKET * (i - change) as u32)
        });
        Self {
            p50: quantile(&all, 0.5),
            p99: quantile(&all, 0.99),
            p99_after: (!after.is_empty()).then(|| quantile(&after, 0.99)),
            limit_before,
            limit_after,
            followed_after,
        }
    }
}

/// The rate every strategy starts at (see `strategy.rs`).
const STARTING_RATE: f64 = 10.0;

/// The highest `rate / used` over the seconds with the rate above its
/// start, where "used" is the mean of the calls that reached the backend
/// over the last [`SMOOTHING`] seconds (one second alone is noisy: at 20
/// calls/s, a second of random arrivals may hold 11).
fn rate_over_used(series: &Series) -> Option<f64> {
    let sent = per_second(&series.sent);
    (0..series.buckets())
        .filter_map(|i| {
            let rate = series.rate[i].filter(|&r| r > STARTING_RATE)?;
            let recent = &sent[(i + 1).saturating_sub(SMOOTHING)..=i];
            let used = recent.iter().sum::<f64>() / recent.len() as f64;
            Some(rate / used.max(1.0))
        })
        .reduce(f64::max)
}

/// The span "used" is measured over in [`above_twice_used`]: the longest
/// window over which the rate measures its own use (`src/rate/usage.rs`
/// keeps one to two seconds). One second alone is mostly chance at the
/// quiet rates that matter here: at 20 calls/s, a second of random arrivals
/// holds 11 one time in 40, and a rate at 1.4x the mean is then "above
/// twice" for as long as the lull lasts.
const USE_WINDOW: Duration = Duration::from_secs(2);

/// The longest run of [`FINE`] steps with the rate above its start and
/// above twice the calls that reached the backend per second over the
/// [`USE_WINDOW`] before. (A longer window would lag: after a quiet phase,
/// a rate rising with its use would stay above twice a five-second mean for
/// seconds while never above twice what it was being used at.)
fn above_twice_used(series: &Series) -> Duration {
    let window = (USE_WINDOW.as_nanos() / FINE.as_nanos()) as usize;
    let (mut longest, mut current) = (0u32, 0u32);
    let mut recent: u32 = 0;
    for (i, rate) in series.fine_rate.iter().enumerate() {
        recent += series.fine_sent[i];
        if i >= window {
            recent -= series.fine_sent[i - window];
        }
        let span = FINE.as_secs_f64() * (i + 1).min(window) as f64;
        let used = (f64::from(recent) / span).max(1.0);
        let above = rate.is_some_and(|rate| rate > STARTING_RATE && rate > 2.0 * used);
        current = if above { current + 1 } else { 0 };
        longest = longest.max(current);
    }
    FINE * longest
}

fn sum(values: &[u32]) -> f64 {
    values.iter().map(|&v| f64::from(v)).sum()
}

/// The mean of `values[from..from + SMOOTHING]`.
fn smoothed(values: &[f64], from: usize) -> f64 {
    let window = &values[from..(from + SMOOTHING).min(values.len())];
    window.iter().sum::<f64>() / window.len() as f64
}

fn per_second(values: &[u32]) -> Vec<f64> {
    let seconds = BUCKET.as_secs_f64();
    values.iter().map(|&v| f64::from(v) / seconds).collect()
}

fn bucket_of(at: Duration) -> usize {
    (at.as_nanos() / BUCKET.as_nanos()) as usize
}

impl Summary {
    pub(crate) fn of(scenario: &Scenario, strategy: Strategy, series: &Series) -> Self {
        let capacity: f64 = series.capacity.iter().sum::<f64>() * BUCKET.as_secs_f64();
        let (offered, sent, ok) = (sum(&series.offered), sum(&series.sent), sum(&series.ok));
        let ok_by_priority = series
            .offered_by
            .iter()
            .zip(&series.ok_by)
            .map(|(offered, ok)| sum(ok) / sum(offered).max(1.0))
            .collect();
        let half = series.buckets() / 2;
        // Outage figures need the outage, a window of it, and some time after
        // it within the run.
        let outage = scenario.plan.outage.as_ref().filter(|outage| {
            outage.start + THROTTLE_WINDOW < outage.end
                && bucket_of(outage.end) + SMOOTHING <= series.buckets()
                && bucket_of(outage.start) >= 10
        });
        let late_capacity: f64 = series.capacity[half..].iter().sum::<f64>() * BUCKET.as_secs_f64();
        Self {
            strategy,
            goodput: ok / capacity,
            late_goodput: (scenario.settles_from == Some(Duration::ZERO))
                .then(|| sum(&series.ok[half..]) / late_capacity),
            load: sent / capacity,
            shed: sum(&series.shed) / offered.max(1.0),
            failed: (sent - ok) / sent.max(1.0),
            mean_wait: series.waited.div_f64(sent.max(1.0)),
            ok_by_priority,
            settled_after: scenario
                .settles_from
                .map(|from| settled_after(series, from)),
            outage_load: outage.map(|outage| {
                let from = bucket_of(outage.start + THROTTLE_WINDOW);
                let to = bucket_of(outage.end).max(from + 1);
                sum(&series.sent[from..to]) / ((to - from) as f64 * BUCKET.as_secs_f64())
            }),
            recovered_after: outage.map(|outage| recovered_after(series, outage.start, outage.end)),
            rate_over_used: strategy.has_rate().then(|| rate_over_used(series)),
            above_twice_used: strategy.has_rate().then(|| above_twice_used(series)),
            concurrency: matches!(
                scenario.backend,
                crate::backend::BackendKind::Workers { .. }
            )
            .then(|| {
                let plan = &scenario.plan;
                let change = plan.halved_from.or(plan.slower_from).unwrap_or_default();
                Concurrency::of(series, change)
            }),
            shape: matches!(scenario.backend, crate::backend::BackendKind::Shaped { .. })
                .then(|| ShapeFigures::of(series)),
            queue: scenario
                .caller_patience
                .map(|patience| QueueFigures::of(series, patience)),
            converge: scenario
                .from_starts
                .then(|| {
                    let capacity = series.capacity.first().copied().unwrap_or_default();
                    strategy.start(capacity)
                })
                .flatten()
                .map(|start| ConvergeFigures::of(series, start)),
        }
    }
}

/// The first time from `from` on after which the smoothed load stays within
/// 10 % of capacity and the smoothed goodput at 90 % of it or more, until
/// the end of the run.
fn settled_after(series: &Series, from: Duration) -> Option<Duration> {
    let (sent, ok) = (per_second(&series.sent), per_second(&series.ok));
    let first = bucket_of(from);
    let last = series.buckets().saturating_sub(SMOOTHING);
    let in_band = |i: usize| {
        let capacity = smoothed(&series.capacity, i);
        let load = smoothed(&sent, i) / capacity;
        (0.9..=1.1).contains(&load) && smoothed(&ok, i) >= 0.9 * capacity
    };
    let mut settled = None;
    for i in first..=last {
        match (in_band(i), settled) {
            (true, None) => settled = Some(i),
            (false, _) => settled = None,
            (true, Some(_)) => {}
        }
    }
    settled.map(|i| BUCKET * (i - first) as u32)
}

/// How long after `end` until the smoothed goodput is back to 90 % of its
/// mean over the ten seconds before `start`.
fn recovered_after(series: &Series, start: Duration, end: Duration) -> Option<Duration> {
    let ok = per_second(&series.ok);
    let before = bucket_of(start);
    let baseline = ok[before.saturating_sub(10)..before].iter().sum::<f64>() / 10.0;
    let first = bucket_of(end);
    (first..=series.buckets().saturating_sub(SMOOTHING))
        .find(|&i| smoothed(&ok, i) >= 0.9 * baseline)
        .map(|i| BUCKET * (i - first) as u32)
}

pub(crate) fn percent(share: f64) -> String {
    format!("{:.1} %", share * 100.0)
}

fn seconds(after: Option<Duration>) -> String {
    after.map_or_else(|| "never".to_string(), |d| format!("{} s", d.as_secs()))
}

/// What every table below assumes, as Markdown.
pub(crate) fn preamble(settings: Settings) -> String {
    format!(
        "# Overload simulation\n\n\
         Generated by `cargo run --release --example simulate` (seed {seed}, \
         `max_wait` {max_wait} ms); the same seed gives the same figures.\n\n\
         Every backend serves {CAPACITY} calls/s. A rate-limited backend spends \
         {cost:.0} % of a call's work on each 429 it answers. Calls arrive at \
         random (Poisson) and give up if they would wait more than `max_wait` \
         for a rate token. The throttle's window is {window} s. Goodput and \
         backend load are relative to the capacity the backend had over the run; \
         \"served\" is the share of offered calls that succeeded; \"rate peak / \
         used\" is the highest learned rate as a multiple of the calls that \
         reached the backend per second over the {SMOOTHING} seconds before, while \
         the rate was above its start of {STARTING_RATE:.0}/s, sampled each second; \
         \"above 2x used\" is the longest the rate stayed above twice the calls \
         that reached the backend per second over the {use_window} seconds before \
         (the span over which the rate measures its use; one second of random \
         arrivals at 20/s holds 20 ± 4.5), sampled every {fine} ms (a decrease's \
         cooldown is 500 ms).\n\n",
        use_window = USE_WINDOW.as_secs(),
        seed = settings.seed,
        fine = FINE.as_millis(),
        max_wait = settings.max_wait.as_millis(),
        cost = REJECT_COST * 100.0,
        window = THROTTLE_WINDOW.as_secs(),
    )
}

/// A scenario's heading and table, as Markdown.
pub(crate) fn section(scenario: &Scenario, summaries: &[Summary]) -> String {
    format!(
        "## {} ({})\n\n{}\n",
        scenario.title,
        scenario.name,
        table(scenario, summaries)
    )
}

/// The steady scenario under several `max_wait`s, as Markdown.
pub(crate) fn max_wait_table(scenario: &Scenario, rows: &[(Duration, Summary)]) -> String {
    let mut out = format!(
        "## How deep a queue: `max_wait` ({})\n\n\
         Calls wait in their key's line and take their tokens at most 10 ms ahead, \
         so a change of the rate reaches every call in line at once, and a deep \
         queue does not hold the pace of an old rate.\n\n\
         | max_wait | strategy | goodput | backend load | failed at backend | mean wait | settled after |\n\
         | ---: | --- | ---: | ---: | ---: | ---: | ---: |\n",
        scenario.name
    );
    for (max_wait, summary) in rows {
        let _ = writeln!(
            out,
            "| {} ms | {} | {} | {:.2}x | {} | {} ms | {} |",
            max_wait.as_millis(),
            summary.strategy.name(),
            percent(summary.goodput),
            summary.load,
            percent(summary.failed),
            summary.mean_wait.as_millis(),
            summary.settled_after.map_or("-".to_string(), seconds),
        );
    }
    out.push('\n');
    out
}

/// The table of a concurrency scenario: latency and the limit.
fn concurrency_table(summaries: &[Summary]) -> String {
    let mut out = String::from(
        "| strategy | goodput (of capacity) | shed locally | failed at backend | p50 latency | p99 latency | p99 after the change | limit before | limit after | limit followed after |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    let ms = |d: Duration| format!("{} ms", d.as_millis());
    let limit = |l: Option<f64>| l.map_or("-".to_string(), |l| format!("{l:.0}"));
    for summary in summaries {
        let Some(c) = &summary.concurrency else {
            continue;
        };
        let followed = match c.followed_after {
            None => "-".to_string(),
            Some(after) => seconds(after),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            summary.strategy.name(),
            percent(summary.goodput),
            percent(summary.shed),
            percent(summary.failed),
            ms(c.p50),
            ms(c.p99),
            c.p99_after.map_or("-".to_string(), ms),
            limit(c.limit_before),
            limit(c.limit_after),
            followed,
        );
    }
    out
}

/// A Markdown table, one row per strategy, with only the columns that apply
/// to the scenario.
pub(crate) fn table(scenario: &Scenario, summaries: &[Summary]) -> String {
    if summaries.first().is_some_and(|s| s.queue.is_some()) {
        return queue_table(summaries);
    }
    if summaries.first().is_some_and(|s| s.concurrency.is_some()) {
        return concurrency_table(summaries);
    }
    if summaries.first().is_some_and(|s| s.shape.is_some()) {
        return shape_table(summaries);
    }
    if summaries.first().is_some_and(|s| s.converge.is_some()) {
        return converge_table(summaries);
    }
    let mut header = vec!["strategy".to_string(), "goodput (of capacity)".to_string()];
    let first = &summaries[0];
    if first.late_goodput.is_some() {
        header.push("goodput, 2nd half".to_string());
    }
    header.extend(
        [
            "backend load",
            "shed locally",
            "failed at backend",
            "mean wait",
        ]
        .map(String::from),
    );
    let priorities = scenario.priorities();
    if priorities.len() > 1 {
        header.extend(
            priorities
                .iter()
                .map(|p| format!("{} served", priority_name(p.level()))),
        );
    } else {
        header.push("served".to_string());
    }
    if first.settled_after.is_some() {
        header.push("settled after".to_string());
    }
    if first.outage_load.is_some() {
        header.push("load in outage".to_string());
        header.push("recovered after".to_string());
    }
    header.push("rate peak / used".to_string());
    header.push("above 2x used".to_string());
    let mut out = String::new();
    let _ = writeln!(out, "| {} |", header.join(" | "));
    let _ = writeln!(
        out,
        "|{}",
        header
            .iter()
            .enumerate()
            .map(|(i, _)| if i == 0 { " --- |" } else { " ---: |" })
            .collect::<String>()
    );
    for summary in summaries {
        let mut row = vec![
            summary.strategy.name().to_string(),
            percent(summary.goodput),
        ];
        row.extend(summary.late_goodput.map(percent));
        row.extend([
            format!("{:.2}x", summary.load),
            percent(summary.shed),
            percent(summary.failed),
            format!("{} ms", summary.mean_wait.as_millis()),
        ]);
        row.extend(summary.ok_by_priority.iter().map(|&share| percent(share)));
        if let Some(after) = summary.settled_after {
            row.push(seconds(after));
        }
        if let (Some(load), Some(after)) = (summary.outage_load, summary.recovered_after) {
            row.push(format!("{load:.1}/s"));
            row.push(seconds(after));
        }
        row.push(match summary.rate_over_used {
            None => "-".to_string(),
            Some(None) => "never above start".to_string(),
            Some(Some(peak)) => format!("{peak:.1}x"),
        });
        row.push(match summary.above_twice_used {
            None => "-".to_string(),
            Some(longest) => format!("{} ms", longest.as_millis()),
        });
        let _ = writeln!(out, "| {} |", row.join(" | "));
    }
    out
}

pub(crate) fn priority_name(level: u8) -> String {
    match level {
        0 => "HIGH".to_string(),
        1 => "MEDIUM_HIGH".to_string(),
        2 => "MEDIUM".to_string(),
        3 => "LOW".to_string(),
        other => format!("P{other}"),
    }
}

/// Every run of a scenario second by second, as CSV: one row per strategy
/// and second.
pub(crate) fn csv(runs: &[(Strategy, Series)]) -> String {
    let priorities = &runs[0].1.priorities;
    let mut out = String::from("strategy,second,offered,sent,ok,shed,capacity,rate");
    for priority in priorities {
        let name = priority_name(priority.level());
        let _ = write!(out, ",offered_{name},ok_{name},shed_probability_{name}");
    }
    out.push('\n');
    let optional = |value: Option<f64>| value.map_or(String::new(), |v| format!("{v:.3}"));
    for (strategy, series) in runs {
        for i in 0..series.buckets() {
            let _ = write!(
                out,
                "\"{}\",{},{},{},{},{},{},{}",
                strategy.name(),
                i,
                series.offered[i],
                series.sent[i],
                series.ok[i],
                series.shed[i],
                series.capacity[i],
                optional(series.rate[i]),
            );
            for p in 0..priorities.len() {
                let (offered, ok) = (series.offered_by[p][i], series.ok_by[p][i]);
                let _ = write!(out, ",{offered},{ok},{}", optional(series.rejection[p][i]));
            }
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use portcullis::Priority;

    use super::*;

    /// A series of `buckets` seconds at a capacity of 100/s.
    fn series(sent: &[u32], ok: &[u32]) -> Series {
        let mut series = Series::new(sent.len(), vec![Priority::MEDIUM]);
        series.sent = sent.to_vec();
        series.ok = ok.to_vec();
        series.offered = vec![300; sent.len()];
        series.capacity = vec![100.0; sent.len()];
        series
    }

    #[test]
    fn settled_is_the_start_of_the_last_stretch_in_the_band() {
        // Overloaded for 10 s, then within 10 % of capacity, but for a
        // blip at 15 s that the 5 s smoothing absorbs.
        let mut sent = [vec![300; 10], vec![100; 20]].concat();
        sent[15] = 130;
        let ok = [vec![70; 10], vec![95; 20]].concat();
        assert_eq!(
            settled_after(&series(&sent, &ok), Duration::ZERO),
            Some(Duration::from_secs(10))
        );
        // Measured from a later start, the same moment is 4 s after it.
        assert_eq!(
            settled_after(&series(&sent, &ok), Duration::from_secs(6)),
            Some(Duration::from_secs(4))
        );
        // Back out of the band at the end: never settled.
        let mut late = sent.clone();
        late[29] = 400;
        late[28] = 400;
        assert_eq!(settled_after(&series(&late, &ok), Duration::ZERO), None);
    }

    #[test]
    fn recovered_is_when_goodput_is_back_to_nine_tenths_of_before() {
        // 80/s before an outage from 10 s to 20 s, then back over 5 s.
        let ok = [
            vec![80; 10],
            vec![0; 10],
            vec![20, 40, 60, 80, 80],
            vec![80; 10],
        ]
        .concat();
        let s = series(&vec![80; ok.len()], &ok);
        let from = |secs| Duration::from_secs(secs);
        // The first 5 s window at 72/s or more starts 2 s after the end:
        // (60 + 80 + 80 + 80 + 80) / 5 = 76.
        assert_eq!(recovered_after(&s, from(10), from(20)), Some(from(2)));
    }

    #[test]
    fn the_table_has_only_the_columns_that_apply() {
        let steady = crate::scenario::defaults().remove(0);
        let sent = vec![100; 120];
        let summary = Summary::of(
            &steady,
            Strategy::RateAdditive,
            &series(&sent, &vec![98; 120]),
        );
        assert!((summary.goodput - 0.98).abs() < 1e-9);
        assert_eq!(summary.late_goodput, Some(0.98));
        assert!((summary.load - 1.0).abs() < 1e-9);
        assert!(summary.outage_load.is_none() && summary.recovered_after.is_none());
        let table = table(&steady, &[summary]);
        let header = table.lines().next().unwrap();
        assert!(
            header.contains("settled after") && !header.contains("outage"),
            "{header}"
        );
        assert!(
            table.contains("| rate, additive decrease | 98.0 % | 98.0 % | 1.00x |"),
            "{table}"
        );
    }

    #[test]
    fn the_csv_has_a_row_per_strategy_and_second_with_names_quoted() {
        let run = series(&[100, 90], &[95, 90]);
        let csv = csv(&[(Strategy::RateAdditive, run)]);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(
            lines,
            [
                "strategy,second,offered,sent,ok,shed,capacity,rate,offered_MEDIUM,ok_MEDIUM,shed_probability_MEDIUM",
                "\"rate, additive decrease\",0,300,100,95,0,100,,0,0,",
                "\"rate, additive decrease\",1,300,90,90,0,100,,0,0,",
            ]
        );
    }
}
