//! A deterministic overload simulator: five ways of guarding calls against
//! nine overload scenarios, three ways of queueing against callers who
//! give up, learned concurrency limits against five latency shapes, the
//! learned rate from five starts against three capacities, and a shared
//! key's queue first come first served against fair queuing, on virtual
//! time, with the real `ThrottleManager`
//! between the callers and a simulated backend (and, for comparison, other
//! algorithms' limits: `candidates.rs`).
//!
//! Run: `cargo run --release --example simulate` (a few seconds). It prints
//! one table per scenario, and writes them as Markdown to
//! `docs/simulation/`, with one SVG plot and one CSV file (every run,
//! second by second) per scenario. The same seed gives the same figures on
//! every machine. `--help` lists the options.
//!
//! - `scenario.rs`: the demand patterns and backends;
//! - `backend.rs`: the simulated servers (429 above a rate, 503 above a
//!   number of calls in flight);
//! - `strategy.rs`: the manager configurations compared;
//! - `candidates.rs`: the other concurrency limiters compared;
//! - `engine.rs`: one run, on tokio's paused clock;
//! - `flows.rs`: many flows at one shared key;
//! - `report.rs`, `shape_table.rs`, `queue_table.rs`, `converge_table.rs`,
//!   `fair_table.rs`, `plot.rs`: the figures, tables and plots.

mod backend;
mod candidates;
mod converge_table;
mod engine;
mod fair_table;
mod flows;
mod plot;
mod queue_table;
mod report;
mod rng;
mod scenario;
mod shape_table;
mod strategy;

use std::io::{IsTerminal, Write as _};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use engine::Settings;
use report::Summary;
use scenario::Scenario;
use strategy::Strategy;

const USAGE: &str = "\
usage: cargo run --release --example simulate -- [options]

  --seed N          seed of the arrivals and the throttle's draws (default 1)
  --max-wait MS     the managers' max_wait in milliseconds (default 250)
  --only NAME       run one scenario: steady, steady-concurrency, spike,
                    outage, capacity-drop, quiet-spike, priorities,
                    workers-halve, service-doubles, queue-overload,
                    shape-constant, shape-uniform, shape-exponential,
                    shape-fast-hits, shape-rising, learned-rate-5,
                    learned-rate-50, learned-rate-500 or fair (both
                    fair-share scenarios)
  --out DIR         where the tables and plots go (default docs/simulation)
  --no-files        print the tables, write nothing
  --help            this text";

/// The command line, parsed.
#[derive(Debug)]
struct Options {
    settings: Settings,
    only: Option<String>,
    out: Option<PathBuf>,
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Options, String> {
    let mut options = Options {
        settings: Settings {
            seed: 1,
            max_wait: strategy::MAX_WAIT,
        },
        only: None,
        out: Some(PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/docs/simulation"
        ))),
    };
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "--seed" => {
                let seed = value("--seed")?;
                options.settings.seed = seed
                    .parse()
                    .map_err(|_| format!("--seed: not a whole number: {seed:?}"))?;
            }
            "--max-wait" => {
                let ms = value("--max-wait")?;
                let ms: u64 = ms
                    .parse()
                    .map_err(|_| format!("--max-wait: not a number of milliseconds: {ms:?}"))?;
                options.settings.max_wait = Duration::from_millis(ms);
            }
            "--only" => {
                let name = value("--only")?;
                if name != "fair" && !scenario::defaults().iter().any(|s| s.name == name) {
                    return Err(format!("--only: no scenario named {name:?}"));
                }
                options.only = Some(name);
            }
            "--out" => options.out = Some(PathBuf::from(value("--out")?)),
            "--no-files" => options.out = None,
            "--help" | "-h" => return Err(USAGE.to_string()),
            other => return Err(format!("unknown argument {other:?}\n\n{USAGE}")),
        }
    }
    Ok(options)
}

fn main() {
    let options = match parse(std::env::args().skip(1)) {
        Ok(options) => options,
        Err(message) => {
            eprintln!("{message}");
            std::process::exit(2);
        }
    };
    if let Err(error) = simulate(&options) {
        eprintln!("simulate: {error}");
        std::process::exit(1);
    }
}

fn simulate(options: &Options) -> Result<(), Box<dyn std::error::Error>> {
    let scenarios: Vec<Scenario> = scenario::defaults()
        .into_iter()
        .filter(|s| options.only.as_deref().is_none_or(|only| s.name == only))
        .collect();
    if let Some(out) = &options.out {
        std::fs::create_dir_all(out)?;
    }
    let started = Instant::now();
    let runs_in_all: usize = scenarios.iter().map(|s| s.strategies().len()).sum();
    let mut progress = Progress::new(runs_in_all);
    let mut markdown = report::preamble(options.settings);
    for scenario in &scenarios {
        let runs: Vec<(Strategy, engine::Series)> = scenario
            .strategies()
            .iter()
            .map(|&strategy| {
                let series = progress.run(scenario, strategy, options.settings);
                (strategy, series)
            })
            .collect();
        let summaries: Vec<Summary> = runs
            .iter()
            .map(|(strategy, series)| Summary::of(scenario, *strategy, series))
            .collect();
        let section = report::section(scenario, &summaries);
        println!("{section}");
        markdown.push_str(&section);
        if let Some(out) = &options.out {
            let path = out.join(format!("{}.svg", scenario.name));
            plot::draw(&path, scenario, &runs)?;
            std::fs::write(
                out.join(format!("{}.csv", scenario.name)),
                report::csv(&runs),
            )?;
            markdown.push_str(&format!("![{}]({}.svg)\n\n", scenario.title, scenario.name));
        }
    }
    if options.only.is_none() {
        let section = max_wait_section(options.settings, &mut progress);
        println!("{section}");
        markdown.push_str(&section);
    }
    if options.only.as_deref().is_none_or(|only| only == "fair") {
        let started = Instant::now();
        let runs = fair_table::run();
        eprintln!(
            "fair-share scenarios in {:.2} s",
            started.elapsed().as_secs_f64()
        );
        let section = fair_table::section(&runs);
        println!("{section}");
        markdown.push_str(&section);
        if let Some(out) = &options.out {
            fair_table::draw(out, &runs)?;
            let (crowd, heavy) = fair_table::csv(&runs);
            std::fs::write(out.join(format!("{}.csv", fair_table::CROWD)), crowd)?;
            std::fs::write(out.join(format!("{}.csv", fair_table::HEAVY)), heavy)?;
        }
    }
    if let Some(out) = &options.out {
        std::fs::write(out.join("results.md"), markdown)?;
        eprintln!("wrote {}", out.display());
    }
    eprintln!("done in {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// The steady scenario again under every strategy with a rate, for several
/// `max_wait`s: how the depth of the queue of waiters slows the rate's
/// reactions.
fn max_wait_section(settings: Settings, progress: &mut Progress) -> String {
    let steady = scenario::defaults().remove(0);
    let waits = [100, 250, 500, 1_000].map(Duration::from_millis);
    let strategies = [Strategy::RateAdditive, Strategy::RateMultiplicative];
    progress.add(waits.len() * strategies.len());
    let rows: Vec<(Duration, Summary)> = waits
        .iter()
        .flat_map(|&max_wait| strategies.iter().map(move |&strategy| (max_wait, strategy)))
        .map(|(max_wait, strategy)| {
            let settings = Settings {
                max_wait,
                ..settings
            };
            let series = progress.run(&steady, strategy, settings);
            (max_wait, Summary::of(&steady, strategy, &series))
        })
        .collect();
    report::max_wait_table(&steady, &rows)
}

/// Tells how far the runs have come, on one line of the terminal (or a line
/// per run when stderr is not a terminal).
struct Progress {
    done: usize,
    total: usize,
    live: bool,
}

impl Progress {
    fn new(total: usize) -> Self {
        Self {
            done: 0,
            total,
            live: std::io::stderr().is_terminal(),
        }
    }

    fn add(&mut self, runs: usize) {
        self.total += runs;
    }

    fn run(
        &mut self,
        scenario: &Scenario,
        strategy: Strategy,
        settings: Settings,
    ) -> engine::Series {
        self.done += 1;
        let (done, total, live) = (self.done, self.total, self.live);
        let label = format!("[{done:2}/{total}] {} / {}", scenario.name, strategy.name());
        let length = scenario.length.as_secs();
        let started = Instant::now();
        let series = engine::run(scenario, strategy, settings, &mut |at| {
            if live {
                eprint!("\r{label}: {:3} of {length} s simulated", at.as_secs());
                let _ = std::io::stderr().flush();
            }
        });
        if live {
            eprint!("\r\x1b[2K");
        }
        let took = started.elapsed().as_secs_f64();
        eprintln!("{label}: {length} s simulated in {took:.2} s");
        series
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> impl Iterator<Item = String> + '_ {
        line.split_whitespace().map(String::from)
    }

    /// The figures in the README and docs/simulation come from this code:
    /// a change that moves them must regenerate them.
    #[test]
    fn the_committed_results_are_what_the_simulator_gives() {
        let out = std::env::temp_dir().join(format!("portcullis-simulate-{}", std::process::id()));
        let options = parse(args(&format!("--out {}", out.display()))).unwrap();
        simulate(&options).unwrap();
        let committed = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/simulation"));
        let mut files = vec!["results.md".to_string()];
        files.extend([fair_table::CROWD, fair_table::HEAVY].map(|name| format!("{name}.csv")));
        files.extend(
            scenario::defaults()
                .iter()
                .map(|s| format!("{}.csv", s.name)),
        );
        for file in files {
            let fresh = std::fs::read_to_string(out.join(&file)).unwrap();
            let before = std::fs::read_to_string(committed.join(&file)).unwrap();
            assert!(
                fresh == before,
                "docs/simulation/{file} is stale: run `cargo run --release --example simulate`"
            );
        }
        let _ = std::fs::remove_dir_all(&out);
    }

    #[test]
    fn options_are_parsed_and_bad_ones_named() {
        let options = parse(args("--seed 7 --max-wait 1000 --only outage --no-files")).unwrap();
        assert_eq!(options.settings.seed, 7);
        assert_eq!(options.settings.max_wait, Duration::from_secs(1));
        assert_eq!(options.only.as_deref(), Some("outage"));
        assert!(options.out.is_none());
        assert_eq!(
            parse(args("--seed x")).unwrap_err(),
            r#"--seed: not a whole number: "x""#
        );
        assert_eq!(
            parse(args("--only nope")).unwrap_err(),
            r#"--only: no scenario named "nope""#
        );
        assert_eq!(
            parse(args("--max-wait")).unwrap_err(),
            "--max-wait needs a value"
        );
        assert!(
            parse(args("--fast"))
                .unwrap_err()
                .starts_with(r#"unknown argument "--fast""#)
        );
    }
}
