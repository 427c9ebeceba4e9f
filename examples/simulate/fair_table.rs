//! Many flows at one shared key, first come first served against fair
//! queuing (`flows.rs`): the tables, a CSV of every flow's figures, and a
//! plot of each scenario.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use plotters::prelude::*;

use crate::flows::{self, CROWD_SHARE, Crowd, Discipline, Light, Tally};

/// The names the two scenarios' files take.
pub(crate) const CROWD: &str = "fair-crowd";
pub(crate) const HEAVY: &str = "fair-heavy";

/// Every run of both scenarios.
pub(crate) struct FairRuns {
    crowd: Vec<(Discipline, Crowd)>,
    /// The light flows alone, then beside the heavy one, per discipline.
    light: Vec<(Discipline, Light, Light)>,
}

/// Runs both scenarios under both disciplines, on a paused clock.
pub(crate) fn run() -> FairRuns {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    runtime.block_on(async {
        let mut runs = FairRuns {
            crowd: Vec::new(),
            light: Vec::new(),
        };
        for discipline in Discipline::ALL {
            runs.crowd
                .push((discipline, flows::crowd(discipline).await));
            let alone = flows::light_flows(false, discipline).await;
            let beside = flows::light_flows(true, discipline).await;
            runs.light.push((discipline, alone, beside));
        }
        runs
    })
}

fn ms(wait: Duration) -> String {
    format!("{} ms", wait.as_millis())
}

/// Served calls of the steady (even) or the bursty (odd) flows, per flow.
fn served_by(crowd: &Crowd, bursty: bool) -> Vec<u64> {
    let mut served: Vec<(u32, u64)> = crowd
        .flows
        .iter()
        .map(|(name, tally)| (name[5..].parse::<u32>().expect("flow-N"), tally.served))
        .filter(|(flow, _)| (flow % 2 == 1) == bursty)
        .collect();
    served.sort();
    served.into_iter().map(|(_, served)| served).collect()
}

/// The section of `results.md`: both tables, with what they show.
pub(crate) fn section(runs: &FairRuns) -> String {
    let mut out = String::from(
        "## Fair share of a shared key\n\n\
         Many flows (users, tenants) call one key of 4 slots, each call holding its slot \
         50 to 150 ms (40 calls a second); its queue served first come first served, or \
         round the flows (`BulkheadConfig::fair_queuing`). \
         The runs are `examples/simulate/flows.rs`, which `tests/bulkhead/fair.rs` asserts on.\n\n\
         **The crowd**: 40 flows of equal demand, twice the capacity between them: 20 send one \
         call every 500 ms, 20 four at once every 2 s; a queue of 256. Calls admitted over 50 s; \
         each flow's fair share is 50.\n\n\
         | discipline | capacity used | steady flows: min / mean / max served | bursty flows: min / mean / max served |\n\
         | --- | ---: | ---: | ---: |\n",
    );
    for (discipline, crowd) in &runs.crowd {
        let figures = |served: Vec<u64>| {
            let mean = served.iter().sum::<u64>() as f64 / served.len().max(1) as f64;
            let (min, max) = (served.iter().min(), served.iter().max());
            format!("{} / {mean:.1} / {}", min.unwrap_or(&0), max.unwrap_or(&0))
        };
        let _ = writeln!(
            out,
            "| {} | {:.1} % | {} | {} |",
            discipline.name(),
            crowd.used * 100.0,
            figures(served_by(crowd, false)),
            figures(served_by(crowd, true)),
        );
    }
    out.push_str(
        "\n**One heavy flow**: 20 light flows, each sending 1.5 calls a second at random (their \
         fair share is 40 / 21 ≈ 1.9), alone and beside one flow in 16 closed loops; a queue of \
         64, 120 s.\n\n\
         | discipline | light flows alone: p50 / p99 wait | beside the heavy flow: p50 / p99 wait | light calls lost | heavy calls served |\n\
         | --- | ---: | ---: | ---: | ---: |\n",
    );
    for (discipline, alone, beside) in &runs.light {
        let waits = |tally: &Tally| format!("{} / {}", ms(tally.wait(0.5)), ms(tally.wait(0.99)));
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.1} % | {} |",
            discipline.name(),
            waits(&alone.light),
            waits(&beside.light),
            beside.light.lost() * 100.0,
            beside.heavy_served,
        );
    }
    out.push_str(&format!(
        "\n![{CROWD}]({CROWD}.svg)\n\n![{HEAVY}]({HEAVY}.svg)\n\n"
    ));
    out
}

/// Every flow's figures, one row per discipline and flow.
pub(crate) fn csv(runs: &FairRuns) -> (String, String) {
    let mut crowd = String::from("discipline,flow,served,refused\n");
    for (discipline, run) in &runs.crowd {
        let mut flows: Vec<_> = run.flows.iter().collect();
        flows.sort_by_key(|(name, _)| name[5..].parse::<u32>().expect("flow-N"));
        for (name, tally) in flows {
            let (served, refused) = (tally.served, tally.refused);
            let _ = writeln!(crowd, "\"{}\",{name},{served},{refused}", discipline.name());
        }
    }
    let mut heavy = String::from("discipline,heavy,served,refused,p50_ms,p90_ms,p99_ms\n");
    for (discipline, alone, beside) in &runs.light {
        for (with_heavy, run) in [(false, alone), (true, beside)] {
            let tally = &run.light;
            let _ = writeln!(
                heavy,
                "\"{}\",{with_heavy},{},{},{},{},{}",
                discipline.name(),
                tally.served,
                tally.refused,
                tally.wait(0.5).as_millis(),
                tally.wait(0.9).as_millis(),
                tally.wait(0.99).as_millis(),
            );
        }
    }
    (crowd, heavy)
}

fn colour(discipline: Discipline) -> RGBColor {
    match discipline {
        Discipline::FirstComeFirstServed => RGBColor(127, 127, 127),
        Discipline::Fair => RGBColor(31, 119, 180),
        Discipline::FairCodel => RGBColor(44, 160, 44),
    }
}

/// The plots: each flow's calls served in the crowd, and the light flows'
/// waits (the share of calls that waited longer than each time).
pub(crate) fn draw(out: &Path, runs: &FairRuns) -> Result<(), Box<dyn std::error::Error>> {
    let path = out.join(format!("{CROWD}.svg"));
    let root = SVGBackend::new(&path, (1100, 400)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "The crowd: calls served per flow over 50 s (fair share 50; odd flows bursty)",
            ("sans-serif", 18),
        )
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(45)
        .build_cartesian_2d(0u32..40u32, 0.0..(CROWD_SHARE * 2.0))?;
    chart
        .configure_mesh()
        .x_desc("flow")
        .y_desc("calls served")
        .draw()?;
    for (discipline, crowd) in &runs.crowd {
        let mut points: Vec<(u32, f64)> = crowd
            .flows
            .iter()
            .map(|(name, tally)| (name[5..].parse().expect("flow-N"), tally.served as f64))
            .collect();
        points.sort_by_key(|(flow, _)| *flow);
        let style = colour(*discipline).stroke_width(2);
        chart
            .draw_series(LineSeries::new(points, style))?
            .label(discipline.name())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
    }
    chart.configure_series_labels().border_style(BLACK).draw()?;
    root.present()?;

    let path = out.join(format!("{HEAVY}.svg"));
    let root = SVGBackend::new(&path, (1100, 400)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Light flows' waits beside a heavy flow: share of calls that waited longer",
            ("sans-serif", 18),
        )
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(55)
        .build_cartesian_2d(0.0..2_000.0, (0.001..1.0).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("wait (ms)")
        .y_desc("share longer")
        .draw()?;
    for (discipline, alone, beside) in &runs.light {
        for (label, tally, dashed) in [
            ("alone", &alone.light, true),
            ("beside the heavy flow", &beside.light, false),
        ] {
            // The wait at 200 shares, from all to the longest one in a thousand.
            let points: Vec<(f64, f64)> = (0..=200)
                .map(|step| 0.001_f64.powf(f64::from(step) / 200.0))
                .map(|longer| (tally.wait(1.0 - longer).as_secs_f64() * 1e3, longer))
                .collect();
            let width = if dashed { 1 } else { 2 };
            let style = colour(*discipline).stroke_width(width);
            chart
                .draw_series(LineSeries::new(points, style))?
                .label(format!("{}, {label}", discipline.name()))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        }
    }
    chart.configure_series_labels().border_style(BLACK).draw()?;
    root.present()?;
    Ok(())
}
