//! What the throttle promises, on virtual time against a simulated backend
//! that serves a fixed number of calls a second whatever their priority:
//! a higher priority is not shed while its demand fits in what the backend
//! accepts, the lower ones carrying the shedding; `window` means one window;
//! and every priority recovers within two windows of its backend.

use std::time::Duration;

use portcullis::{Priority, ThrottleConfig, ThrottleManager};

use crate::seeded_random;

pub(crate) const PRIORITIES: [Priority; 4] = [
    Priority::HIGH,
    Priority::MEDIUM_HIGH,
    Priority::MEDIUM,
    Priority::LOW,
];

/// Each tick of the simulation: 10 ms.
const TICK: Duration = Duration::from_millis(10);

/// A backend that serves `per_second` calls a second (a bucket of a
/// tenth of a second's calls) and fails the rest, and callers at each
/// priority sending their demand a second, on a throttle of `window`.
struct Simulation {
    manager: ThrottleManager<String>,
    capacity: f64,
    tokens: f64,
    demand: Vec<f64>,
    owed: Vec<f64>,
}

/// What the callers saw over some ticks, by priority.
#[derive(Debug, Default, Clone)]
struct Tally {
    sent: Vec<u32>,
    shed: Vec<u32>,
    forwarded: u32,
    accepted: u32,
}

impl Tally {
    fn shed_share(&self, level: usize) -> f64 {
        f64::from(self.shed[level]) / f64::from(self.sent[level].max(1))
    }
}

impl Simulation {
    fn new(config: ThrottleConfig, capacity: f64, demand: &[f64], seed: u64) -> Self {
        let manager = ThrottleManager::<String>::builder()
            .throttle(config)
            .random_source(seeded_random(seed))
            .build()
            .unwrap();
        Self {
            manager,
            capacity,
            tokens: 0.0,
            demand: demand.to_vec(),
            owed: vec![0.0; demand.len()],
        }
    }

    /// Runs for `seconds`; the backend serves `capacity` calls a second
    /// (`f64::INFINITY`: all of them, 0: none).
    async fn run(&mut self, seconds: f64) -> Tally {
        let levels = self.demand.len();
        let mut tally = Tally {
            sent: vec![0; levels],
            shed: vec![0; levels],
            ..Tally::default()
        };
        let ticks = (seconds / TICK.as_secs_f64()).round() as u32;
        for _ in 0..ticks {
            let refill = self.capacity * TICK.as_secs_f64();
            self.tokens = (self.tokens + refill).min((self.capacity / 10.0).max(1.0));
            for (level, priority) in PRIORITIES.into_iter().enumerate().take(levels) {
                self.owed[level] += self.demand[level] * TICK.as_secs_f64();
                while self.owed[level] >= 1.0 {
                    self.owed[level] -= 1.0;
                    tally.sent[level] += 1;
                    match self.manager.try_acquire("backend", priority) {
                        Ok(permit) => {
                            tally.forwarded += 1;
                            if self.tokens >= 1.0 {
                                self.tokens -= 1.0;
                                tally.accepted += 1;
                                permit.success();
                            } else {
                                permit.overloaded();
                            }
                        }
                        Err(_) => tally.shed[level] += 1,
                    }
                }
            }
            tokio::time::advance(TICK).await;
        }
        tally
    }
}

fn ten_second_window() -> ThrottleConfig {
    ThrottleConfig::new().window(Duration::from_secs(10))
}

/// One HIGH caller at a tenth of the demand, LOW callers at the rest,
/// eight times what the backend serves: HIGH's 40 calls a second fit in
/// the SRE budget (K × the 50 accepted), so it is not shed; LOW carries
/// all the shedding; and about K times what the backend accepts still
/// reaches it.
#[tokio::test(start_paused = true)]
async fn a_higher_priority_whose_demand_fits_is_not_shed_under_a_shared_overload() {
    let mut sim = Simulation::new(ten_second_window(), 50.0, &[40.0, 360.0], 3);
    sim.run(30.0).await; // three windows to settle
    let settled = sim.run(60.0).await;
    let (high, low) = (settled.shed_share(0), settled.shed_share(1));
    let ratio = f64::from(settled.forwarded) / f64::from(settled.accepted);
    assert!(high <= 0.05, "HIGH shed {high:.3}");
    assert!(low >= 0.70, "LOW shed {low:.3}");
    assert!(
        (1.7..=2.3).contains(&ratio),
        "forwarded/accepted {ratio:.2}"
    );
}

/// Four priorities asking alike, eight times the backend in all (each
/// twice it): each is shed more than the one above it (a level sees what
/// the levels above could not be allowed). A `min_rate` of 5/s lets each
/// level through a little, so their shares part by more than chance.
#[tokio::test(start_paused = true)]
async fn four_priorities_asking_alike_are_shed_in_their_order() {
    let config = ten_second_window().min_rate(5.0);
    let mut sim = Simulation::new(config, 10.0, &[20.0; 4], 5);
    sim.run(30.0).await;
    let settled = sim.run(300.0).await;
    let shed: Vec<f64> = (0..4).map(|level| settled.shed_share(level)).collect();
    // Apart by more than chance (the shares' spread is under half a point
    // over 6,000 calls each).
    assert!(shed.is_sorted_by(|a, b| a + 0.02 < *b), "shed {shed:?}");
}

/// A backend that fails everything, with calls at every priority, until
/// every priority is shed.
async fn fail_hard() -> Simulation {
    let mut sim = Simulation::new(ten_second_window(), 0.0, &[20.0; 4], 9);
    sim.run(5.0).await;
    let shed = probabilities(&sim);
    assert!(shed.iter().all(|&p| p > 0.5), "{shed:?}");
    sim
}

/// Each priority's probability of being shed, now.
fn probabilities(sim: &Simulation) -> Vec<f64> {
    PRIORITIES
        .iter()
        .map(|&priority| {
            sim.manager
                .key("backend")
                .rejection_probability(priority)
                .unwrap()
        })
        .collect()
}

/// 200 calls at each priority, now; how many of each were shed.
fn shed_of_200(sim: &Simulation) -> Vec<u32> {
    PRIORITIES
        .iter()
        .map(|&priority| {
            let shed = (0..200).filter(|_| {
                let admitted = sim.manager.try_acquire("backend", priority);
                admitted.map(|permit| permit.success()).is_err()
            });
            shed.count() as u32
        })
        .collect()
}

/// After a key's failures and then one window (and 1 %) with no call, the
/// next calls at every priority are all admitted: nothing older than a
/// window counts. (The last calls were one tick before the simulation
/// stopped.)
#[tokio::test(start_paused = true)]
async fn a_window_without_calls_forgets_the_failures_at_every_priority() {
    let sim = fail_hard().await;
    tokio::time::advance(Duration::from_millis(10_100) - TICK).await;
    assert_eq!(probabilities(&sim), [0.0; 4]);
    assert_eq!(shed_of_200(&sim), [0, 0, 0, 0]);
}

/// After nine tenths of a window with no call, the failures still count:
/// every priority is still shed, more than half its calls. (The first
/// calls admitted then succeed, and their accepts soon end it.)
#[tokio::test(start_paused = true)]
async fn nine_tenths_of_a_window_without_calls_still_sheds() {
    let sim = fail_hard().await;
    tokio::time::advance(Duration::from_secs(9) - TICK).await;
    let shed = probabilities(&sim);
    assert!(shed.iter().all(|&p| p > 0.5), "{shed:?}");
    assert!(shed_of_200(&sim)[0] > 0);
}

/// A backend that fails everything for two windows, then serves every
/// call: under steady traffic (5 calls a second at each priority), HIGH
/// sheds at most 1 % from a window and a half after the recovery, every
/// priority from two windows after.
#[tokio::test(start_paused = true)]
async fn every_priority_recovers_within_two_windows() {
    let mut sim = Simulation::new(ten_second_window(), 0.0, &[5.0; 4], 13);
    sim.run(20.0).await;
    sim.capacity = f64::INFINITY;
    sim.run(15.0).await;
    let after_one_and_a_half = sim.run(5.0).await;
    assert!(
        after_one_and_a_half.shed_share(0) <= 0.01,
        "HIGH shed {:.3} from 15 s after the recovery",
        after_one_and_a_half.shed_share(0)
    );
    let after_two = sim.run(10.0).await;
    for (level, priority) in PRIORITIES.into_iter().enumerate() {
        let shed = after_two.shed_share(level);
        assert!(
            shed <= 0.01,
            "{priority:?} shed {shed:.3} from 20 s after the recovery"
        );
    }
}
