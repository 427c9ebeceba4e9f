//! The scenarios: who calls how often, and what the backend can take.

use std::time::Duration;

use portcullis::Priority;

use crate::backend::{BackendKind, CapacityPlan, LatencyShape};
use crate::rng::SplitMix64;
use crate::strategy::{CALLER_PATIENCE, Strategy};

/// Every backend's full capacity, in calls a second.
pub(crate) const CAPACITY: u32 = 100;

const fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// From `from` on, calls arrive at `per_second` on average (Poisson).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Phase {
    pub(crate) from: Duration,
    pub(crate) per_second: f64,
}

/// One experiment: a demand pattern against a backend, for a while.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Scenario {
    /// Short, for file names and `--only`.
    pub(crate) name: &'static str,
    /// A line for tables and plots.
    pub(crate) title: &'static str,
    pub(crate) length: Duration,
    pub(crate) backend: BackendKind,
    pub(crate) plan: CapacityPlan,
    /// Piecewise-constant demand, the first phase from 0.
    pub(crate) demand: Vec<Phase>,
    /// The priorities of the calls, with their shares of the demand.
    pub(crate) mix: Vec<(Priority, f64)>,
    /// Whether the load should settle near the capacity (demand above it),
    /// and from when: the start, or the capacity change.
    pub(crate) settles_from: Option<Duration>,
    /// How long the callers wait for an answer, if they give up: an
    /// answer after it is work the backend did for no one.
    pub(crate) caller_patience: Option<Duration>,
    /// Whether its strategies are the learned rate from five starts
    /// ([`Strategy::STARTS`]): the convergence matrix.
    pub(crate) from_starts: bool,
}

impl Scenario {
    /// The priorities in the mix, most important first.
    pub(crate) fn priorities(&self) -> Vec<Priority> {
        let mut priorities: Vec<Priority> = self.mix.iter().map(|&(p, _)| p).collect();
        priorities.sort_by_key(|p| p.level());
        priorities.dedup();
        priorities
    }

    /// The strategies compared on it.
    pub(crate) fn strategies(&self) -> &'static [Strategy] {
        if self.caller_patience.is_some() {
            return &Strategy::QUEUES;
        }
        if self.from_starts {
            return &Strategy::STARTS;
        }
        match self.backend {
            BackendKind::Workers { .. } => &Strategy::CONCURRENCY,
            BackendKind::Shaped { .. } => &Strategy::SHAPES,
            _ => &Strategy::EVERY,
        }
    }

    /// The same scenario, shortened to `length` (events after it fall away).
    #[cfg(test)]
    pub(crate) fn truncated(mut self, length: Duration) -> Self {
        self.length = length;
        self
    }
}

fn rate_backend() -> BackendKind {
    BackendKind::Rate {
        per_second: CAPACITY,
        latency: Duration::from_millis(50),
    }
}

fn concurrency_backend() -> BackendKind {
    BackendKind::Concurrency {
        max_in_flight: CAPACITY / 10,
        service: Duration::from_millis(100),
    }
}

/// Ten workers of 100 ms (100 calls a second), calls failing past 1 s.
fn workers_backend() -> BackendKind {
    BackendKind::Workers {
        workers: CAPACITY / 10,
        service: Duration::from_millis(100),
        deadline: Duration::from_secs(1),
    }
}

/// Ten slots, calls of 100 ms on average in `shape`, 503 beyond.
fn shaped_backend(shape: LatencyShape) -> BackendKind {
    BackendKind::Shaped {
        max_in_flight: CAPACITY / 10,
        mean: Duration::from_millis(100),
        shape,
    }
}

/// One scenario per latency shape: 1.5x demand on ten slots, for a minute.
fn shapes() -> Vec<Scenario> {
    [
        (
            "shape-constant",
            "1.5x demand on 10 slots (503 beyond), every call 100 ms",
            LatencyShape::Constant,
        ),
        (
            "shape-uniform",
            "1.5x demand on 10 slots (503 beyond), calls of 50 to 150 ms, uniform",
            LatencyShape::Uniform,
        ),
        (
            "shape-exponential",
            "1.5x demand on 10 slots (503 beyond), calls of 100 ms on average, exponential",
            LatencyShape::Exponential,
        ),
        (
            "shape-fast-hits",
            "1.5x demand on 10 slots (503 beyond), a tenth of the calls 10 ms (cache hits), the rest 110 ms",
            LatencyShape::FastHits,
        ),
        (
            "shape-rising",
            "1.5x demand on 10 slots (503 beyond), calls of 100 ms, up to 190 ms as the slots fill",
            LatencyShape::RisingWithLoad,
        ),
    ]
    .into_iter()
    .map(|(name, title, shape)| Scenario {
        name,
        title,
        length: secs(60),
        backend: shaped_backend(shape),
        plan: CapacityPlan::default(),
        demand: steady(1.5),
        mix: MEDIUM_ONLY.to_vec(),
        settles_from: None,
        caller_patience: None,
        from_starts: false,
    })
    .collect()
}

/// The learned rate's convergence matrix, one scenario per capacity `C`
/// of 5, 50 and 500 calls a second: twice `C` offered for 20 s to a
/// backend that answers 429 above `C` (calls of 50 ms), the rate started
/// from five guesses of `C` (see [`Strategy::STARTS`]).
fn learned_rates() -> Vec<Scenario> {
    [
        (
            "learned-rate-5",
            "the learned rate from five starts, 2x demand, 429 above 5 calls/s",
            5,
        ),
        (
            "learned-rate-50",
            "the learned rate from five starts, 2x demand, 429 above 50 calls/s",
            50,
        ),
        (
            "learned-rate-500",
            "the learned rate from five starts, 2x demand, 429 above 500 calls/s",
            500,
        ),
    ]
    .into_iter()
    .map(|(name, title, capacity)| Scenario {
        name,
        title,
        length: secs(20),
        backend: BackendKind::Rate {
            per_second: capacity,
            latency: Duration::from_millis(50),
        },
        plan: CapacityPlan::default(),
        demand: vec![Phase {
            from: Duration::ZERO,
            per_second: 2.0 * f64::from(capacity),
        }],
        mix: MEDIUM_ONLY.to_vec(),
        settles_from: None,
        caller_patience: None,
        from_starts: true,
    })
    .collect()
}

fn steady(times_capacity: f64) -> Vec<Phase> {
    vec![Phase {
        from: Duration::ZERO,
        per_second: times_capacity * f64::from(CAPACITY),
    }]
}

const MEDIUM_ONLY: [(Priority, f64); 1] = [(Priority::MEDIUM, 1.0)];

/// The scenarios of the README, in its order.
pub(crate) fn defaults() -> Vec<Scenario> {
    let capacity = f64::from(CAPACITY);
    [
        Scenario {
            name: "steady",
            title: "steady 3x overload, backend answers 429 above 100 calls/s",
            length: secs(120),
            backend: rate_backend(),
            plan: CapacityPlan::default(),
            demand: steady(3.0),
            mix: MEDIUM_ONLY.to_vec(),
            settles_from: Some(Duration::ZERO),
            caller_patience: None,
            from_starts: false,
        },
        Scenario {
            name: "steady-concurrency",
            title: "steady 3x overload, backend answers 503 above 10 calls in flight (100 ms each)",
            length: secs(120),
            backend: concurrency_backend(),
            plan: CapacityPlan::default(),
            demand: steady(3.0),
            mix: MEDIUM_ONLY.to_vec(),
            settles_from: Some(Duration::ZERO),
            caller_patience: None,
            from_starts: false,
        },
        Scenario {
            name: "spike",
            title: "0.7x demand with a 10x spike from 30 s to 40 s, 503 above 10 in flight",
            length: secs(90),
            backend: concurrency_backend(),
            plan: CapacityPlan::default(),
            demand: vec![
                Phase {
                    from: Duration::ZERO,
                    per_second: 0.7 * capacity,
                },
                Phase {
                    from: secs(30),
                    per_second: 10.0 * capacity,
                },
                Phase {
                    from: secs(40),
                    per_second: 0.7 * capacity,
                },
            ],
            mix: MEDIUM_ONLY.to_vec(),
            settles_from: None,
            caller_patience: None,
            from_starts: false,
        },
        Scenario {
            name: "outage",
            title: "0.7x demand, the backend fails everything from 40 s to 70 s",
            length: secs(120),
            backend: rate_backend(),
            plan: CapacityPlan {
                outage: Some(secs(40)..secs(70)),
                ..CapacityPlan::default()
            },
            demand: steady(0.7),
            mix: MEDIUM_ONLY.to_vec(),
            settles_from: None,
            caller_patience: None,
            from_starts: false,
        },
        Scenario {
            name: "capacity-drop",
            title: "1.5x demand, the backend's capacity halves at 60 s (3x from then on)",
            length: secs(120),
            backend: rate_backend(),
            plan: CapacityPlan {
                halved_from: Some(secs(60)),
                ..CapacityPlan::default()
            },
            demand: steady(1.5),
            mix: MEDIUM_ONLY.to_vec(),
            settles_from: Some(secs(60)),
            caller_patience: None,
            from_starts: false,
        },
        Scenario {
            name: "quiet-spike",
            title: "0.2x demand for 60 s, then 5x from 60 s, 429 above 100 calls/s",
            length: secs(90),
            backend: rate_backend(),
            plan: CapacityPlan::default(),
            demand: vec![
                Phase {
                    from: Duration::ZERO,
                    per_second: 0.2 * capacity,
                },
                Phase {
                    from: secs(60),
                    per_second: 5.0 * capacity,
                },
            ],
            mix: MEDIUM_ONLY.to_vec(),
            settles_from: Some(secs(60)),
            caller_patience: None,
            from_starts: false,
        },
        Scenario {
            name: "priorities",
            title: "3x overload: HIGH at 0.3x capacity, LOW the other 2.7x, 429 above 100 calls/s",
            length: secs(120),
            backend: rate_backend(),
            plan: CapacityPlan::default(),
            demand: steady(3.0),
            mix: vec![(Priority::HIGH, 0.1), (Priority::LOW, 0.9)],
            settles_from: Some(Duration::ZERO),
            caller_patience: None,
            from_starts: false,
        },
        Scenario {
            name: "workers-halve",
            title: "1.5x demand on 10 workers (100 ms a call, slower when more are in flight), half of them gone at 60 s",
            length: secs(120),
            backend: workers_backend(),
            plan: CapacityPlan {
                halved_from: Some(secs(60)),
                ..CapacityPlan::default()
            },
            demand: steady(1.5),
            mix: MEDIUM_ONLY.to_vec(),
            settles_from: None,
            caller_patience: None,
            from_starts: false,
        },
        Scenario {
            name: "service-doubles",
            title: "1.5x demand on 10 workers, every call twice as slow from 60 s",
            length: secs(120),
            backend: workers_backend(),
            plan: CapacityPlan {
                slower_from: Some(secs(60)),
                ..CapacityPlan::default()
            },
            demand: steady(1.5),
            mix: MEDIUM_ONLY.to_vec(),
            settles_from: None,
            caller_patience: None,
            from_starts: false,
        },
        Scenario {
            name: "queue-overload",
            title: "2x demand on 10 workers for a minute, callers who give up after 1 s",
            length: secs(60),
            backend: workers_backend(),
            plan: CapacityPlan::default(),
            demand: steady(2.0),
            mix: MEDIUM_ONLY.to_vec(),
            settles_from: None,
            caller_patience: Some(CALLER_PATIENCE),
            from_starts: false,
        },
    ]
    .into_iter()
    .chain(shapes())
    .chain(learned_rates())
    .collect()
}

/// The arrival times and priorities of a scenario's calls: a Poisson
/// process whose rate follows the demand's phases.
#[derive(Debug)]
pub(crate) struct Arrivals<'a> {
    scenario: &'a Scenario,
    rng: SplitMix64,
    /// Seconds since the start.
    now: f64,
}

impl<'a> Arrivals<'a> {
    pub(crate) fn new(scenario: &'a Scenario, seed: u64) -> Self {
        Self {
            scenario,
            rng: SplitMix64::new(seed),
            now: 0.0,
        }
    }

    /// The phase in force at `self.now` and when it ends.
    fn phase(&self) -> (f64, f64) {
        let demand = &self.scenario.demand;
        let index = demand
            .iter()
            .rposition(|phase| phase.from.as_secs_f64() <= self.now)
            .unwrap_or(0);
        let end = demand
            .get(index + 1)
            .map_or(self.scenario.length, |next| next.from)
            .min(self.scenario.length);
        (demand[index].per_second, end.as_secs_f64())
    }

    fn priority(&self) -> Priority {
        let mut draw = self.rng.next_f64();
        for &(priority, share) in &self.scenario.mix {
            if draw < share {
                return priority;
            }
            draw -= share;
        }
        self.scenario
            .mix
            .last()
            .map_or(Priority::MEDIUM, |&(p, _)| p)
    }
}

impl Iterator for Arrivals<'_> {
    type Item = (Duration, Priority);

    fn next(&mut self) -> Option<Self::Item> {
        while self.now < self.scenario.length.as_secs_f64() {
            let (per_second, end) = self.phase();
            let next = if per_second > 0.0 {
                self.now + self.rng.exponential(per_second)
            } else {
                end
            };
            if next >= end {
                // Memoryless: starting afresh at the phase boundary is exact.
                self.now = end;
                continue;
            }
            self.now = next;
            return Some((Duration::from_secs_f64(next), self.priority()));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(arrivals: &[(Duration, Priority)], from: u64, to: u64) -> usize {
        arrivals
            .iter()
            .filter(|(t, _)| (secs(from)..secs(to)).contains(t))
            .count()
    }

    #[test]
    fn arrivals_follow_the_phases_and_the_mix() {
        let spike = defaults().into_iter().find(|s| s.name == "spike").unwrap();
        let arrivals: Vec<_> = Arrivals::new(&spike, 5).collect();
        assert!(arrivals.windows(2).all(|w| w[0].0 <= w[1].0), "in order");
        assert!(arrivals.last().unwrap().0 < spike.length);
        let before = count(&arrivals, 0, 30) as f64 / 30.0;
        let during = count(&arrivals, 30, 40) as f64 / 10.0;
        assert!(
            (63.0..77.0).contains(&before),
            "{before}/s before the spike"
        );
        assert!(
            (960.0..1_040.0).contains(&during),
            "{during}/s during the spike"
        );

        let mixed = defaults()
            .into_iter()
            .find(|s| s.name == "priorities")
            .unwrap();
        let arrivals: Vec<_> = Arrivals::new(&mixed, 5).collect();
        let high = arrivals
            .iter()
            .filter(|(_, p)| *p == Priority::HIGH)
            .count() as f64;
        let share = high / arrivals.len() as f64;
        assert!((0.09..0.11).contains(&share), "HIGH share {share}");
        assert_eq!(mixed.priorities(), vec![Priority::HIGH, Priority::LOW]);
    }

    #[test]
    fn the_same_seed_gives_the_same_arrivals() {
        let steady = defaults().remove(0).truncated(secs(5));
        let a: Vec<_> = Arrivals::new(&steady, 9).collect();
        let b: Vec<_> = Arrivals::new(&steady, 9).collect();
        let c: Vec<_> = Arrivals::new(&steady, 10).collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
    }
}
