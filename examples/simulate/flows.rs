//! Many flows (users, tenants) calling one shared key, first come first
//! served or fair-queued, on tokio's paused clock: the crowd (40 flows of
//! equal demand, twice the key's capacity, half steady and half bursty)
//! and one heavy flow (16 closed loops) beside 20 light ones.
//!
//! (Also compiled into `tests/bulkhead/fair.rs`, which asserts on what
//! these runs give.)

use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use portcullis::priority::{Flow, with_flow};
use portcullis::{BulkheadConfig, Priority, ThrottleManager};
use tokio::time::Instant;

const MS: Duration = Duration::from_millis(1);

/// A call holds its slot this long on average (from 50 to 150 ms, so the
/// slots come free apart, as real calls' do): [`SLOTS`] slots serve 40
/// calls a second.
pub(crate) const HOLD: Duration = Duration::from_millis(100);
pub(crate) const SLOTS: u32 = 4;

/// How the shared key's queue is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Discipline {
    FirstComeFirstServed,
    Fair,
    /// Fair queuing, with CoDel on the queue (5 ms target, 100 ms interval).
    FairCodel,
}

impl Discipline {
    pub(crate) const ALL: [Self; 3] = [Self::FirstComeFirstServed, Self::Fair, Self::FairCodel];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::FirstComeFirstServed => "first come first served",
            Self::Fair => "fair queuing",
            Self::FairCodel => "fair queuing and CoDel",
        }
    }
}

/// The shared key: 4 slots and a queue of `queue`, served as `discipline`.
fn shared(queue: u32, discipline: Discipline) -> Arc<ThrottleManager<String>> {
    let mut config = BulkheadConfig::new(SLOTS).queue(queue);
    if discipline != Discipline::FirstComeFirstServed {
        config = config.fair_queuing();
    }
    if discipline == Discipline::FairCodel {
        config = config.codel(Duration::from_millis(5), Duration::from_millis(100));
    }
    let manager = ThrottleManager::builder().bulkhead(config).build();
    Arc::new(manager.expect("a valid configuration"))
}

/// What a flow got: calls served, their waits, and calls refused.
#[derive(Debug, Default, Clone)]
pub(crate) struct Tally {
    pub(crate) served: u64,
    pub(crate) waits: Vec<Duration>,
    pub(crate) refused: u64,
}

impl Tally {
    /// The `q` quantile of the waits of the calls served.
    pub(crate) fn wait(&self, q: f64) -> Duration {
        let mut waits = self.waits.clone();
        waits.sort();
        waits
            .get(((waits.len().max(1) - 1) as f64 * q).round() as usize)
            .copied()
            .unwrap_or_default()
    }

    /// The share of its calls a flow lost to refusals.
    pub(crate) fn lost(&self) -> f64 {
        self.refused as f64 / (self.served + self.refused).max(1) as f64
    }
}

type Tallies = Arc<Mutex<HashMap<String, Tally>>>;

/// Random numbers from a fixed seed (xorshift).
struct Random(u64);

impl Random {
    /// Uniform in [0, 1).
    fn uniform(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }

    /// An exponential gap of `mean` (Poisson arrivals).
    fn gap(&mut self, mean: Duration) -> Duration {
        mean.mul_f64(-(1.0 - self.uniform()).ln())
    }

    /// A hold of [`HOLD`] on average, from half to one and a half of it.
    fn hold(&mut self) -> Duration {
        HOLD.mul_f64(0.5 + self.uniform())
    }
}

/// One call of `flow` to the shared key, holding its slot `hold`; counted
/// if it ended (admitted or refused) within `counted`.
async fn one_call(
    manager: Arc<ThrottleManager<String>>,
    flow: String,
    hold: Duration,
    tallies: Tallies,
    counted: Range<Instant>,
) {
    let arrived = Instant::now();
    let admitted = with_flow(Flow::of(&flow), manager.acquire("db", Priority::HIGH)).await;
    if counted.contains(&Instant::now()) {
        let mut tallies = tallies.lock().unwrap();
        let tally = tallies.entry(flow).or_default();
        match &admitted {
            Ok(_) => {
                tally.served += 1;
                tally.waits.push(arrived.elapsed());
            }
            Err(_) => tally.refused += 1,
        }
    }
    if let Ok(permit) = admitted {
        tokio::time::sleep(hold).await;
        permit.success();
    }
}

/// What the crowd got, per flow (`flow-0` to `flow-39`; the odd ones
/// bursty), and the share of the key's capacity used.
#[derive(Debug, Clone)]
pub(crate) struct Crowd {
    pub(crate) flows: HashMap<String, Tally>,
    pub(crate) used: f64,
}

/// Seconds of the crowd's run that are measured (after 10 s to fill the
/// queue), and the calls each flow's fair share of them is.
pub(crate) const CROWD_MEASURED: u64 = 50;
pub(crate) const CROWD_SHARE: f64 = 50.0;

/// The crowd: 40 flows of equal demand, twice the key's capacity between
/// them: the even ones send one call every 500 ms, the odd ones four at
/// once every 2 s. A queue of 256. Run 60 s; the calls admitted in the
/// last 50 s.
pub(crate) async fn crowd(discipline: Discipline) -> Crowd {
    let manager = shared(256, discipline);
    let tallies = Tallies::default();
    let start = Instant::now();
    let from = start + Duration::from_secs(60 - CROWD_MEASURED);
    let until = start + Duration::from_secs(60);
    let mut senders = Vec::new();
    for flow in 0..40u32 {
        let (manager, tallies) = (Arc::clone(&manager), Arc::clone(&tallies));
        senders.push(tokio::spawn(async move {
            let name = format!("flow-{flow}");
            let (every, burst) = match flow % 2 {
                0 => (Duration::from_millis(500), 1),
                _ => (Duration::from_secs(2), 4),
            };
            let mut random = Random(0x9E37_79B9_7F4A_7C15 ^ u64::from(flow + 1));
            tokio::time::sleep(MS * (flow * 13)).await;
            while Instant::now() < until {
                for _ in 0..burst {
                    let (name, hold) = (name.clone(), random.hold());
                    let tallies = Arc::clone(&tallies);
                    let call = one_call(Arc::clone(&manager), name, hold, tallies, from..until);
                    tokio::spawn(call);
                }
                tokio::time::sleep(every).await;
            }
        }));
    }
    for sender in senders {
        sender.await.unwrap();
    }
    let flows = tallies.lock().unwrap().clone();
    let served: u64 = flows.values().map(|t| t.served).sum();
    let capacity = CROWD_MEASURED as f64 * f64::from(SLOTS) / HOLD.as_secs_f64();
    Crowd {
        flows,
        used: served as f64 / capacity,
    }
}

/// What the light flows got together, and the heavy flow's calls served.
#[derive(Debug, Clone)]
pub(crate) struct Light {
    pub(crate) light: Tally,
    pub(crate) heavy_served: u64,
}

/// 20 light flows, each sending 1.5 calls a second at random (their fair
/// share is 40 / 21 ≈ 1.9), and, if `heavy`, one flow in 16 closed loops.
/// A queue of 64. Run 120 s.
pub(crate) async fn light_flows(heavy: bool, discipline: Discipline) -> Light {
    let manager = shared(64, discipline);
    let tallies = Tallies::default();
    let start = Instant::now();
    let until = start + Duration::from_secs(120);
    let heavy_served = Arc::new(Mutex::new(0));
    let mut loops = Vec::new();
    for seed in (0..16).filter(|_| heavy) {
        let (manager, served) = (Arc::clone(&manager), Arc::clone(&heavy_served));
        let mut random = Random(0xD1B5_4A32_D192_ED03 ^ (seed + 1));
        loops.push(tokio::spawn(with_flow(Flow::of("heavy"), async move {
            while Instant::now() < until {
                let Ok(permit) = manager.acquire("db", Priority::HIGH).await else {
                    tokio::time::sleep(MS).await;
                    continue;
                };
                *served.lock().unwrap() += 1;
                tokio::time::sleep(random.hold()).await;
                permit.success();
            }
        })));
    }
    let mut random = Random(0x9E37_79B9_7F4A_7C15);
    let mean_gap = MS * 667;
    let mut flows: Vec<(Instant, u32)> = (0..20)
        .map(|flow| (start + random.gap(mean_gap), flow))
        .collect();
    loop {
        flows.sort();
        let (at, flow) = flows[0];
        if at >= until {
            break;
        }
        tokio::time::sleep_until(at).await;
        let (name, hold) = (format!("light-{flow}"), random.hold());
        let counted = start..until + Duration::from_secs(60);
        let call = one_call(
            Arc::clone(&manager),
            name,
            hold,
            Arc::clone(&tallies),
            counted,
        );
        tokio::spawn(call);
        flows[0].0 = at + random.gap(mean_gap);
    }
    for heavy in loops {
        heavy.await.unwrap();
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut light = Tally::default();
    for tally in tallies.lock().unwrap().values() {
        light.served += tally.served;
        light.refused += tally.refused;
        light.waits.extend(&tally.waits);
    }
    let heavy_served = *heavy_served.lock().unwrap();
    Light {
        light,
        heavy_served,
    }
}
