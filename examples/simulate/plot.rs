//! One SVG per scenario: four panels over time, every strategy in its own
//! colour.

use std::path::Path;
use std::time::Duration;

use plotters::prelude::*;

use crate::engine::{BUCKET, Series};
use crate::report::priority_name;
use crate::scenario::Scenario;
use crate::strategy::Strategy;

const WIDTH: u32 = 1100;
/// The top of the concurrency limit's panel.
const LIMIT_MAX: f64 = 50.0;
const PANEL_HEIGHT: u32 = 260;
const TITLE_HEIGHT: u32 = 40;
/// Room right of each panel for its legend.
const LEGEND_WIDTH: u32 = 250;

/// A colour per strategy (the Tableau palette), the same in every plot.
fn colour(strategy: Strategy) -> RGBColor {
    match strategy {
        Strategy::None => RGBColor(127, 127, 127),
        Strategy::RateAdditive => RGBColor(31, 119, 180),
        Strategy::RateMultiplicative => RGBColor(44, 160, 44),
        Strategy::Throttle => RGBColor(255, 127, 14),
        Strategy::All => RGBColor(214, 39, 40),
        Strategy::BulkheadSmall => RGBColor(148, 103, 189),
        Strategy::BulkheadLarge => RGBColor(140, 86, 75),
        Strategy::BulkheadAdaptive => RGBColor(214, 39, 40),
        Strategy::BulkheadKnown => RGBColor(23, 190, 207),
        Strategy::Gradient2 => RGBColor(188, 189, 34),
        Strategy::Aimd => RGBColor(227, 119, 194),
        Strategy::ProbeGradient => RGBColor(0, 0, 128),
        Strategy::QueueFifo => RGBColor(127, 127, 127),
        Strategy::QueueFifoDeadline => RGBColor(255, 127, 14),
        Strategy::QueueCodel => RGBColor(31, 119, 180),
        Strategy::QueueCodelDeadline => RGBColor(44, 160, 44),
        Strategy::LearnedFarBelow => RGBColor(31, 119, 180),
        Strategy::LearnedBelow => RGBColor(44, 160, 44),
        Strategy::LearnedAtCapacity => RGBColor(127, 127, 127),
        Strategy::LearnedAbove => RGBColor(255, 127, 14),
        Strategy::LearnedFarAbove => RGBColor(214, 39, 40),
    }
}

/// One line of a panel.
struct Line {
    label: String,
    style: ShapeStyle,
    points: Vec<(f64, f64)>,
}

/// One panel: a caption, a y range, its lines.
struct Panel {
    caption: &'static str,
    y_label: &'static str,
    y_max: f64,
    lines: Vec<Line>,
}

/// The points of a per-bucket series, at the middle of each bucket, cut at
/// `y_max` (the spike would flatten every other line).
fn points(values: impl Iterator<Item = Option<f64>>, y_max: f64) -> Vec<(f64, f64)> {
    let width = BUCKET.as_secs_f64();
    values
        .enumerate()
        .filter_map(|(i, v)| v.map(|v| ((i as f64 + 0.5) * width, v.min(y_max))))
        .collect()
}

fn per_second(values: &[u32]) -> impl Iterator<Item = Option<f64>> + '_ {
    values
        .iter()
        .map(|&v| Some(f64::from(v) / BUCKET.as_secs_f64()))
}

/// The load panel's first lines: what was offered, and the capacity.
fn offered_and_capacity(first: &Series, load_max: f64) -> Vec<Line> {
    vec![
        Line {
            label: "offered".to_string(),
            style: RGBColor(200, 200, 200).stroke_width(3),
            points: points(per_second(&first.offered), load_max),
        },
        capacity_line(first, load_max),
    ]
}

fn capacity_line(series: &Series, y_max: f64) -> Line {
    Line {
        label: "capacity".to_string(),
        style: BLACK.stroke_width(2),
        points: points(series.capacity.iter().map(|&c| Some(c)), y_max),
    }
}

/// Per bucket of arrival, the served calls answered within `patience`,
/// and the median latency of the served calls (ms).
fn in_time_and_median(series: &Series, patience: Duration) -> (Vec<Option<f64>>, Vec<Option<f64>>) {
    let mut by_bucket: Vec<Vec<Duration>> = vec![Vec::new(); series.buckets()];
    for &(bucket, latency) in &series.latencies {
        if let Some(latencies) = by_bucket.get_mut(bucket as usize) {
            latencies.push(latency);
        }
    }
    by_bucket
        .iter_mut()
        .map(|latencies| {
            latencies.sort();
            let in_time = latencies.iter().filter(|&&l| l <= patience).count();
            let median = latencies
                .get(latencies.len() / 2)
                .map(|l| l.as_secs_f64() * 1e3);
            (Some(in_time as f64 / BUCKET.as_secs_f64()), median)
        })
        .unzip()
}

/// The panels of a scenario whose callers give up after `patience`: what
/// reached the backend, what reached the callers in time, and how long
/// they waited.
fn queue_panels(runs: &[(Strategy, Series)], patience: Duration) -> Vec<Panel> {
    let first = &runs[0].1;
    let peak_capacity = first.capacity.iter().cloned().fold(0.0, f64::max);
    let load_max = 3.5 * peak_capacity;
    let latency_max = 5_000.0;
    let mut load = offered_and_capacity(first, load_max);
    let mut in_time = vec![capacity_line(first, 1.2 * peak_capacity)];
    let mut latency = Vec::new();
    for (strategy, series) in runs {
        let style = colour(*strategy).stroke_width(2);
        let (answered, median) = in_time_and_median(series, patience);
        load.push(Line {
            label: strategy.name().to_string(),
            style,
            points: points(per_second(&series.sent), load_max),
        });
        in_time.push(Line {
            label: strategy.name().to_string(),
            style,
            points: points(answered.into_iter(), 1.2 * peak_capacity),
        });
        latency.push(Line {
            label: strategy.name().to_string(),
            style,
            points: points(median.into_iter(), latency_max),
        });
    }
    vec![
        Panel {
            caption: "Calls reaching the backend",
            y_label: "calls/s",
            y_max: load_max,
            lines: load,
        },
        Panel {
            caption: "Answered in time for their callers, by second of arrival",
            y_label: "calls/s",
            y_max: 1.2 * peak_capacity,
            lines: in_time,
        },
        Panel {
            caption: "Median time from arrival to answer, by second of arrival",
            y_label: "ms",
            y_max: latency_max,
            lines: latency,
        },
    ]
}

fn panels(runs: &[(Strategy, Series)]) -> Vec<Panel> {
    let first = &runs[0].1;
    let peak_capacity = first.capacity.iter().cloned().fold(0.0, f64::max);
    let load_max = 3.5 * peak_capacity;
    let mut load = offered_and_capacity(first, load_max);
    let mut goodput = vec![capacity_line(first, 1.2 * peak_capacity)];
    let mut rate = vec![capacity_line(first, 2.0 * peak_capacity)];
    let mut limit = Vec::new();
    let mut rejection = Vec::new();
    let mut served = Vec::new();
    let several_priorities = first.priorities.len() > 1;
    // The full stack first and wider: where another strategy's line is the
    // same, it shows as a red edge around it.
    let mut ordered: Vec<&(Strategy, Series)> = runs.iter().collect();
    ordered.sort_by_key(|(strategy, _)| *strategy != Strategy::All);
    for (strategy, series) in ordered {
        let width = if *strategy == Strategy::All { 4 } else { 2 };
        let style = colour(*strategy).stroke_width(width);
        load.push(Line {
            label: strategy.name().to_string(),
            style,
            points: points(per_second(&series.sent), load_max),
        });
        goodput.push(Line {
            label: strategy.name().to_string(),
            style,
            points: points(per_second(&series.ok), 1.2 * peak_capacity),
        });
        if strategy.has_rate() {
            rate.push(Line {
                label: strategy.name().to_string(),
                style,
                points: points(series.rate.iter().copied(), 2.0 * peak_capacity),
            });
        }
        if strategy.has_bulkhead() {
            limit.push(Line {
                label: strategy.name().to_string(),
                style,
                points: points(series.limit.iter().copied(), LIMIT_MAX),
            });
        }
        if several_priorities {
            for (i, priority) in series.priorities.iter().enumerate() {
                let width = if i == 0 { 3 } else { 1 };
                let shares =
                    series.ok_by[i]
                        .iter()
                        .zip(&series.offered_by[i])
                        .map(|(&ok, &offered)| {
                            (offered > 0).then(|| f64::from(ok) / f64::from(offered))
                        });
                served.push(Line {
                    label: format!("{}, {}", strategy.name(), priority_name(priority.level())),
                    style: colour(*strategy).stroke_width(width),
                    points: points(shares, 1.0),
                });
            }
        }
        if strategy.has_throttle() {
            for (i, priority) in series.priorities.iter().enumerate() {
                // Lower priorities in thinner lines.
                let width = if i == 0 { 3 } else { 1 };
                rejection.push(Line {
                    label: format!("{}, {}", strategy.name(), priority_name(priority.level())),
                    style: colour(*strategy).stroke_width(width),
                    points: points(series.rejection[i].iter().copied(), 1.0),
                });
            }
        }
    }
    let concurrency = runs.iter().any(|(strategy, _)| {
        matches!(
            strategy,
            Strategy::BulkheadAdaptive | Strategy::BulkheadSmall
        )
    });
    let mut panels = vec![
        Panel {
            caption: "Calls reaching the backend",
            y_label: "calls/s",
            y_max: load_max,
            lines: load,
        },
        Panel {
            caption: "Goodput: calls the backend served",
            y_label: "calls/s",
            y_max: 1.2 * peak_capacity,
            lines: goodput,
        },
    ];
    if concurrency {
        panels.push(Panel {
            caption: "Concurrency limit",
            y_label: "calls in flight",
            y_max: LIMIT_MAX,
            lines: limit,
        });
        return panels;
    }
    panels.push(Panel {
        caption: "Learned rate",
        y_label: "calls/s",
        y_max: 2.0 * peak_capacity,
        lines: rate,
    });
    if runs.iter().any(|(strategy, _)| strategy.has_throttle()) {
        panels.push(Panel {
            caption: "Throttle: probability of shedding a call",
            y_label: "probability",
            y_max: 1.0,
            lines: rejection,
        });
    }
    if several_priorities {
        panels.push(Panel {
            caption: "Share of calls served, by priority",
            y_label: "share",
            y_max: 1.0,
            lines: served,
        });
    }
    panels
}

/// The legend of a panel, in the room right of its chart.
fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    lines: &[Line],
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let x = (WIDTH - LEGEND_WIDTH) as i32 + 5;
    for (i, line) in lines.iter().enumerate() {
        let y = 45 + 18 * i as i32;
        area.draw(&PathElement::new(vec![(x, y), (x + 22, y)], line.style))?;
        area.draw(&Text::new(
            line.label.clone(),
            (x + 28, y - 6),
            ("sans-serif", 12).into_font(),
        ))?;
    }
    Ok(())
}

/// Draws the scenario's runs into `path` as an SVG.
pub(crate) fn draw(
    path: &Path,
    scenario: &Scenario,
    runs: &[(Strategy, Series)],
) -> Result<(), Box<dyn std::error::Error>> {
    let panels = match scenario.caller_patience {
        Some(patience) => queue_panels(runs, patience),
        None => panels(runs),
    };
    let height = TITLE_HEIGHT + PANEL_HEIGHT * panels.len() as u32;
    let root = SVGBackend::new(path, (WIDTH, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let (title, body) = root.split_vertically(TITLE_HEIGHT);
    title.titled(scenario.title, ("sans-serif", 20))?;
    let length = scenario.length.as_secs_f64();
    for (area, panel) in body.split_evenly((panels.len(), 1)).iter().zip(panels) {
        let mut chart = ChartBuilder::on(area)
            .caption(panel.caption, ("sans-serif", 16))
            .margin(10)
            .margin_right(LEGEND_WIDTH)
            .x_label_area_size(30)
            .y_label_area_size(55)
            .build_cartesian_2d(0.0..length, 0.0..panel.y_max)?;
        let y_decimals = usize::from(panel.y_max <= 1.0);
        chart
            .configure_mesh()
            .x_desc("time (s)")
            .y_desc(panel.y_label)
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| format!("{y:.y_decimals$}"))
            .light_line_style(RGBColor(240, 240, 240))
            .draw()?;
        for line in &panel.lines {
            chart.draw_series(LineSeries::new(line.points.iter().copied(), line.style))?;
        }
        draw_legend(area, &panel.lines)?;
    }
    root.present()?;
    Ok(())
}
