//! What a quota promises, as a check a test can run: over any interval
//! `T`, the tokens of the calls admitted are at most `rate × T + burst`.
//! Callers loop through one of the ways in, on tokio's paused clock, and
//! the instants they were let in are checked against the bound.

#![allow(dead_code)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use portcullis::{Priority, ThrottleManager};
use tokio::time::Instant;

/// How a caller is let in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Entry {
    Wait,
    Acquire,
    Call,
}

impl Entry {
    pub(crate) const ALL: [Entry; 3] = [Entry::Wait, Entry::Acquire, Entry::Call];

    /// Lets one call of `cost` tokens in on `key`; whether it was let in.
    pub(crate) async fn let_in(
        self,
        manager: &ThrottleManager<String>,
        key: &str,
        cost: u32,
    ) -> bool {
        match self {
            Entry::Wait => manager.key(key).wait(cost).await.is_ok(),
            Entry::Acquire => match manager.acquire(key, Priority::HIGH.cost(cost)).await {
                Ok(permit) => {
                    permit.success();
                    true
                }
                Err(_) => false,
            },
            Entry::Call => manager
                .call(key, Priority::HIGH.cost(cost), || async {
                    Ok::<_, std::io::Error>(())
                })
                .await
                .is_ok(),
        }
    }
}

/// The calls let in: when (seconds from the start) and their cost.
#[derive(Debug, Clone, Default)]
pub(crate) struct Admitted(Arc<Mutex<Vec<(f64, u32)>>>);

impl Admitted {
    pub(crate) fn record(&self, at: f64, cost: u32) {
        self.0.lock().unwrap().push((at, cost));
    }

    /// The calls let in, in order of time.
    pub(crate) fn sorted(&self) -> Vec<(f64, u32)> {
        let mut admitted = self.0.lock().unwrap().clone();
        admitted.sort_by(|a, b| a.0.total_cmp(&b.0));
        admitted
    }
}

/// A caller: calls `key` of `manager` through `entry` in a loop, each call
/// costing `costs[n % len]`, from now until `until`, recording each call
/// let in before `until` (seconds from `start`).
pub(crate) async fn caller(
    manager: ThrottleManager<String>,
    entry: Entry,
    costs: Vec<u32>,
    start: Instant,
    until: Instant,
    admitted: Admitted,
) {
    for n in 0.. {
        let cost = costs[n % costs.len()];
        let let_in = entry.let_in(&manager, "key", cost).await;
        let now = Instant::now();
        if now >= until {
            return;
        }
        if let_in {
            admitted.record((now - start).as_secs_f64(), cost);
        }
    }
}

/// The calls let in when `callers` callers on each of `managers` call
/// through `entry` for `run_for`.
pub(crate) async fn admissions(
    managers: &[ThrottleManager<String>],
    entry: Entry,
    callers: usize,
    costs: &[u32],
    run_for: Duration,
) -> Vec<(f64, u32)> {
    let start = Instant::now();
    let until = start + run_for;
    let admitted = Admitted::default();
    let mut tasks = Vec::new();
    for manager in managers {
        for _ in 0..callers {
            let task = caller(
                manager.clone(),
                entry,
                costs.to_vec(),
                start,
                until,
                admitted.clone(),
            );
            tasks.push(tokio::spawn(task));
        }
    }
    for task in tasks {
        task.await.unwrap();
    }
    admitted.sorted()
}

/// The most tokens `admitted` (in order of time) put into one interval
/// beyond what `rate × T` allows it; the bound holds when this is at most
/// the burst. For the calls i..=j: the tokens of i..=j, less
/// `rate × (t_j - t_i)`.
pub(crate) fn most_over_rate(admitted: &[(f64, u32)], rate: f64) -> f64 {
    // The lowest, over i so far, of (tokens before i) - rate × t_i.
    let mut lowest = f64::INFINITY;
    let mut before = 0.0;
    let mut most = 0.0_f64;
    for &(at, cost) in admitted {
        lowest = lowest.min(before - rate * at);
        before += f64::from(cost);
        most = most.max(before - rate * at - lowest);
    }
    most
}

/// The tokens of every call in `admitted`.
pub(crate) fn tokens(admitted: &[(f64, u32)]) -> f64 {
    admitted.iter().map(|&(_, cost)| f64::from(cost)).sum()
}

/// How far the bound may seem exceeded at the instants calls start, at
/// `rate`: tokio's timer wakes a sleeper at its deadline rounded up to the
/// millisecond, so a call may start up to 1 ms after its token was due,
/// and an interval that opens with a late call and closes with a punctual
/// one holds up to `rate × 1 ms` tokens more than its length allows.
pub(crate) fn timer_slack(rate: f64) -> f64 {
    rate * 0.001
}

/// The bound, checked: every interval within `rate × T + burst` (and the
/// [`timer_slack`]), and (if
/// the callers asked for more than the quota all along) at least
/// `used_at_least` of `rate × run_for + burst` used.
pub(crate) fn assert_within_quota(
    what: &str,
    admitted: &[(f64, u32)],
    (rate, burst): (f64, u32),
    run_for: Duration,
    used_at_least: f64,
) {
    let over = most_over_rate(admitted, rate);
    let quota = rate * run_for.as_secs_f64() + f64::from(burst);
    let used = tokens(admitted);
    println!("{what}: {used} tokens of {quota}, at most {over:.3} over the rate in one interval");
    assert!(
        over <= f64::from(burst) + timer_slack(rate) + 1e-6,
        "{what}: {over:.3} tokens over the rate in one interval, beyond the burst of {burst}"
    );
    assert!(
        used <= quota + 1e-6,
        "{what}: {used} tokens of a quota of {quota}"
    );
    assert!(
        used >= used_at_least * quota,
        "{what}: only {used} tokens of {quota}"
    );
}

#[cfg(test)]
mod checks {
    use super::most_over_rate;

    #[test]
    fn the_check_finds_the_worst_interval() {
        // Two at once then one a second at 1/s: the two are the burst.
        let calls = [(0.0, 1), (0.0, 1), (1.0, 1), (2.0, 1)];
        assert_eq!(most_over_rate(&calls, 1.0), 2.0);
        // Three within half a second: 3 - 0.5.
        let calls = [(10.0, 1), (10.25, 1), (10.5, 1)];
        assert_eq!(most_over_rate(&calls, 1.0), 2.5);
        // Costs count as tokens.
        assert_eq!(most_over_rate(&[(0.0, 3), (1.0, 1)], 1.0), 3.0);
    }
}
