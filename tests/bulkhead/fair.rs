//! Fair queuing on a shared key's bulkhead, on virtual time: many flows
//! (users, tenants) calling one key get equal shares of its slots whatever
//! the shape of their demand, its capacity is used in full, and a flow
//! that sends more than its share does not slow those that send less.
//! Each test's rule fails with the queue first come first served.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use portcullis::priority::{Flow, with_flow};
use portcullis::{BulkheadConfig, Priority, ThrottleManager};
use tokio::time::Instant;

const MS: Duration = Duration::from_millis(1);

/// A call holds its slot this long on average (from 50 to 150 ms, so the
/// slots come free apart, as real calls' do): 4 slots serve 40 calls a
/// second.
const HOLD: Duration = Duration::from_millis(100);
const SLOTS: u32 = 4;

/// The shared key: 4 slots, a queue of `queue`, served round the flows if
/// `fair`.
fn shared(queue: u32, fair: bool) -> Arc<ThrottleManager<String>> {
    let mut config = BulkheadConfig::new(SLOTS).queue(queue);
    if fair {
        config = config.fair_queuing();
    }
    Arc::new(ThrottleManager::builder().bulkhead(config).build().unwrap())
}

/// What each flow got: calls served (started after `from`), their waits,
/// and calls refused.
#[derive(Debug, Default, Clone)]
struct Tally {
    served: u64,
    waits: Vec<Duration>,
    refused: u64,
}

type Tallies = Arc<Mutex<HashMap<String, Tally>>>;

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
    let admitted = manager
        .acquire("db", Priority::HIGH.flow(Flow::of(&flow)))
        .await;
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

/// Random times from a fixed seed (xorshift).
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

/// (a) 40 flows of equal demand, twice the key's capacity between them:
/// half send one call every 500 ms, half four at once every 2 s. Run
/// 60 s; the calls admitted over the last 50 s.
async fn forty_flows(fair: bool) -> (HashMap<String, Tally>, f64) {
    let manager = shared(256, fair);
    let tallies = Tallies::default();
    let start = Instant::now();
    let from = start + Duration::from_secs(10);
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
                    let counted = from..until;
                    let call = one_call(
                        Arc::clone(&manager),
                        name,
                        hold,
                        Arc::clone(&tallies),
                        counted,
                    );
                    tokio::spawn(call);
                }
                tokio::time::sleep(every).await;
            }
        }));
    }
    for sender in senders {
        sender.await.unwrap();
    }
    // Calls still queued at the end are not counted as served.
    let tallies = tallies.lock().unwrap().clone();
    let served: u64 = tallies.values().map(|t| t.served).sum();
    let capacity = 50.0 * f64::from(SLOTS) * (1.0 / HOLD.as_secs_f64());
    (tallies, served as f64 / capacity)
}

#[tokio::test(start_paused = true)]
async fn forty_flows_of_equal_demand_share_the_key_evenly_and_use_all_of_it() {
    let (tallies, used) = forty_flows(true).await;
    // The key's capacity over 50 s, shared by 40: 50 calls each.
    let share = 50.0;
    for (flow, tally) in &tallies {
        let off = (tally.served as f64 - share).abs() / share;
        assert!(
            off <= 0.10,
            "{flow} served {} calls, {:.0} % off its share of {share}",
            tally.served,
            off * 100.0
        );
    }
    assert_eq!(tallies.len(), 40);
    assert!(
        used >= 0.95,
        "the key's capacity used: {:.1} %",
        used * 100.0
    );
}

#[tokio::test(start_paused = true)]
async fn first_come_first_served_gives_the_bursty_flows_less() {
    // What fair queuing is for: the same demand, first come first served.
    let (tallies, _) = forty_flows(false).await;
    let bursty = tallies["flow-1"].served;
    let steady = tallies["flow-0"].served;
    eprintln!("first come first served: bursty {bursty}, steady {steady}");
    assert!(bursty * 10 < steady * 9, "bursty {bursty}, steady {steady}");
}

/// (b) 20 light flows, each sending 1.5 calls a second at random (their
/// fair share is 40 / 21 ≈ 1.9), and, if `heavy`, one flow in 16 closed
/// loops. Run 120 s; the light flows' tallies, together.
async fn light_flows(heavy: bool, fair: bool) -> Tally {
    let manager = shared(64, fair);
    let tallies = Tallies::default();
    let start = Instant::now();
    let until = start + Duration::from_secs(120);
    let mut loops = Vec::new();
    if heavy {
        for seed in 0..16 {
            let manager = Arc::clone(&manager);
            let mut random = Random(0xD1B5_4A32_D192_ED03 ^ (seed + 1));
            loops.push(tokio::spawn(with_flow(Flow::of("heavy"), async move {
                while Instant::now() < until {
                    let Ok(permit) = manager.acquire("db", Priority::HIGH).await else {
                        tokio::time::sleep(MS).await;
                        continue;
                    };
                    tokio::time::sleep(random.hold()).await;
                    permit.success();
                }
            })));
        }
    }
    let mut random = Random(0x9E37_79B9_7F4A_7C15);
    let mut flows: Vec<(Instant, u32)> = (0..20)
        .map(|flow| (start + random.gap(MS * 667), flow))
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
        flows[0].0 = at + random.gap(MS * 667);
    }
    for heavy in loops {
        heavy.await.unwrap();
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let tallies = tallies.lock().unwrap();
    let mut light = Tally::default();
    for tally in tallies.values() {
        light.served += tally.served;
        light.refused += tally.refused;
        light.waits.extend(&tally.waits);
    }
    light
}

fn p99(waits: &mut [Duration]) -> Duration {
    waits.sort();
    waits[waits.len() * 99 / 100]
}

#[tokio::test(start_paused = true)]
async fn a_heavy_flow_beside_light_ones_costs_them_neither_calls_nor_waiting() {
    let mut alone = light_flows(false, true).await;
    let mut beside_heavy = light_flows(true, true).await;
    let lost = beside_heavy.refused as f64 / (beside_heavy.served + beside_heavy.refused) as f64;
    assert!(
        lost <= 0.01,
        "the light flows lost {:.1} % of their calls",
        lost * 100.0
    );
    let (alone, beside) = (p99(&mut alone.waits), p99(&mut beside_heavy.waits));
    eprintln!("fair: {beside:?} beside the heavy flow, {alone:?} without it");
    assert!(
        beside.as_secs_f64() <= 1.5 * alone.as_secs_f64(),
        "the light flows' p99 wait: {beside:?} beside the heavy flow, {alone:?} without it"
    );
}

#[tokio::test(start_paused = true)]
async fn first_come_first_served_makes_the_light_flows_wait_behind_the_heavy_one() {
    let mut alone = light_flows(false, false).await;
    let mut beside_heavy = light_flows(true, false).await;
    let (alone, beside) = (p99(&mut alone.waits), p99(&mut beside_heavy.waits));
    eprintln!("first come first served: {beside:?} beside the heavy flow, {alone:?} without it");
    assert!(
        beside > alone * 2,
        "{beside:?} beside the heavy flow, {alone:?} without it"
    );
}
