//! Issue 80: changes of every kind (rate and bulkhead overrides, reloads,
//! a change of tier, shadow mode) interleaved at random with callers that wait, on virtual
//! time, against the documented bounds: an enforced admission never finds
//! more calls in flight than the limit in force (the calls admitted before
//! a lowering end first); without a bulkhead (whose queue lets calls that
//! took their tokens apart start together), the admissions of any
//! interval stay within the fastest rate that paced it plus the burst; and
//! no caller is left waiting once the changes stop.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use portcullis::builder::{ManagerConfig, Tier};
use portcullis::{BulkheadConfig, Priority, RateConfig, ThrottleManager};
use tokio::time::Instant;

const BURST: u32 = 5;
const RATES: [u32; 4] = [20, 50, 200, 1_000];
const LIMITS: [u32; 4] = [1, 2, 4, 8];
const CALLERS: usize = 12;
const CHANGING: Duration = Duration::from_secs(3);

/// A xorshift: the same seed, the same run.
struct Draws(u64);

impl Draws {
    fn next(&mut self, below: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % below
    }
}

/// What the run saw: each enforced admission's time, each rate set with
/// the time it was set, the key's limit whenever a call ended (a slot
/// handed on then went by that limit: a reload reaches the key only at its
/// next call), and the admissions past the limit.
#[derive(Default)]
struct Seen {
    admitted: Vec<Instant>,
    rates: Vec<(Instant, u32)>,
    limits_at_ends: Vec<(Instant, u32)>,
    over_limit: Vec<String>,
}

fn file(rate: u32, limit: Option<u32>) -> ManagerConfig {
    let mut text = format!("[default.rate]\nquota = \"{rate}/s\"\nburst = {BURST}\n");
    if let Some(limit) = limit {
        text.push_str(&format!(
            "[default.bulkhead]\nmax_concurrent = {limit}\nqueue = 64\n"
        ));
    }
    toml::from_str(&text).unwrap()
}

/// One caller: calls `k` until the changes stop, holding each call a few
/// milliseconds; checks each enforced admission against the limit in
/// force, now or when a call ended while it waited (which may have handed
/// it its slot).
async fn caller(manager: Arc<ThrottleManager<String>>, seen: Rc<RefCell<Seen>>, seed: u64) {
    let mut draws = Draws(seed);
    let end = Instant::now() + CHANGING;
    let limit =
        |manager: &ThrottleManager<String>| manager.key("k").concurrency_limit().unwrap_or(0);
    while Instant::now() < end {
        let asked = Instant::now();
        let permit = manager.acquire("k", Priority::HIGH).await.unwrap();
        if permit.would_refuse().is_none() {
            let mut seen = seen.borrow_mut();
            seen.admitted.push(Instant::now());
            if let Some(active) = manager.key("k").snapshot().unwrap().active {
                let ends = seen.limits_at_ends.iter().rev();
                let while_waiting = ends.take_while(|(at, _)| *at >= asked);
                let handed = while_waiting.map(|(_, limit)| *limit).max();
                let limit = limit(&manager).max(handed.unwrap_or(0));
                if active > limit {
                    seen.over_limit
                        .push(format!("{active} in flight under {limit}"));
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(1 + draws.next(20))).await;
        let ended = (Instant::now(), limit(&manager));
        seen.borrow_mut().limits_at_ends.push(ended);
        permit.success();
    }
}

/// How long before an interval a rate may still pace the calls in it:
/// calls booked their tokens at it (at most 10 ms ahead), and falls since
/// moved them later, halfway to each new pace.
const BOOKED_PACE_LASTS: Duration = Duration::from_millis(500);

/// Every interval between two enforced admissions holds at most the
/// fastest rate that paced it times its length (and a millisecond), plus
/// the burst and a call for the rounding of the rescaled debt. A rate paces the interval if it
/// was in force during it or shortly before (see [`BOOKED_PACE_LASTS`]; a
/// reload reaches the key at its next call, so the rate set before it
/// holds until then).
fn within_the_rates(seen: &Seen) -> Result<(), String> {
    let admitted = &seen.admitted;
    for first in 0..admitted.len() {
        let since = admitted[first] - BOOKED_PACE_LASTS;
        let before = seen.rates.iter().rposition(|(at, _)| *at <= since);
        let from = before.map_or(0, |i| i.saturating_sub(1));
        for last in first..admitted.len() {
            let span = (admitted[last] - admitted[first]).as_secs_f64();
            let fastest = seen.rates[from..]
                .iter()
                .filter(|(at, _)| *at <= admitted[last])
                .map(|(_, rate)| f64::from(*rate))
                .fold(0.0, f64::max);
            let count = (last - first + 1) as f64;
            // Tokio's timer wakes sleepers to the millisecond: calls due
            // within one may be seen at one instant.
            let allowed = fastest * (span + 0.001) + f64::from(BURST) + 1.0;
            if count > allowed + 1e-9 {
                return Err(format!("{count} calls in {span} s at most {fastest}/s"));
            }
        }
    }
    Ok(())
}

/// The tiers the key moves between (when it has no rate of its own).
const TIERS: [(&str, u32); 2] = [("slow", 20), ("fast", 1_000)];

async fn run(seed: u64, bulkhead: bool) {
    let fast = Arc::new(AtomicBool::new(false));
    let in_fast = Arc::clone(&fast);
    let mut builder = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_second(RATES[0]).burst(BURST))
        .tier_of(move |_| Some(TIERS[usize::from(in_fast.load(Ordering::Relaxed))].0));
    for (name, rate) in TIERS {
        builder = builder.tier(
            name,
            Tier::new().rate(RateConfig::per_second(rate).burst(BURST)),
        );
    }
    if bulkhead {
        builder = builder.bulkhead(BulkheadConfig::new(LIMITS[2]).queue(64));
    }
    let manager = Arc::new(builder.build().unwrap());
    let seen = Rc::new(RefCell::new(Seen::default()));
    seen.borrow_mut().rates.push((Instant::now(), TIERS[0].1));
    let callers: Vec<_> = (0..CALLERS as u64)
        .map(|n| {
            let (manager, seen) = (Arc::clone(&manager), Rc::clone(&seen));
            tokio::task::spawn_local(caller(manager, seen, seed * 131 + n + 1))
        })
        .collect();
    let mut draws = Draws(seed);
    let end = Instant::now() + CHANGING;
    let mut shadowed = false;
    while Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(1 + draws.next(40))).await;
        let rate = RATES[draws.next(4) as usize];
        let limit = LIMITS[draws.next(4) as usize];
        match draws.next(7) {
            0 | 1 => {
                let quota = RateConfig::per_second(rate).burst(BURST);
                manager.key("k").set_rate(quota).unwrap();
                seen.borrow_mut().rates.push((Instant::now(), rate));
            }
            2 | 3 if bulkhead => {
                let config = BulkheadConfig::new(limit).queue(64);
                manager.key("k").set_bulkhead(config).unwrap();
            }
            2 | 3 => {}
            4 => {
                // The file drops the key's own settings: its rate is the
                // file's from its next call.
                manager
                    .reload(file(rate, bulkhead.then_some(limit)))
                    .unwrap();
                seen.borrow_mut().rates.push((Instant::now(), rate));
            }
            5 => {
                shadowed = !shadowed;
                manager.set_shadow(shadowed);
            }
            _ => {
                // The key's tier changes: its rate, unless it has its own.
                let to = !fast.load(Ordering::Relaxed);
                fast.store(to, Ordering::Relaxed);
                manager.key("k").retier();
                seen.borrow_mut()
                    .rates
                    .push((Instant::now(), TIERS[usize::from(to)].1));
            }
        }
    }
    manager.set_shadow(false);
    for caller in callers {
        crate::support::bounded("a caller once the changes stopped", caller)
            .await
            .unwrap();
    }
    let seen = seen.borrow();
    assert!(
        seen.admitted.len() > 100,
        "{} admitted",
        seen.admitted.len()
    );
    if bulkhead {
        assert_eq!(seen.over_limit, Vec::<String>::new(), "seed {seed}");
        let snapshot = manager.key("k").snapshot().unwrap();
        assert_eq!((snapshot.active, snapshot.queued), (Some(0), Some(0)));
    } else {
        let within = within_the_rates(&seen);
        assert!(within.is_ok(), "seed {seed}: {}", within.unwrap_err());
    }
}

#[test]
fn changes_of_every_kind_under_load_keep_the_documented_bounds() {
    for seed in 1..=8 {
        for bulkhead in [true, false] {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .start_paused(true)
                .build()
                .unwrap();
            tokio::task::LocalSet::new().block_on(&runtime, run(seed, bulkhead));
        }
    }
}
