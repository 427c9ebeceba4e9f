//! What each limit admits, on virtual time: over any interval `T`, the
//! settled costs of the calls admitted stay within `rate × T + burst`,
//! plus what their settlements charged beyond what each call held then
//! (for a call settled once, its cost above its estimate). A proptest over
//! random estimates, costs settled once or twice, times and settlement
//! orders.

use std::time::Duration;

use portcullis::clock::{Clock, ManualClock};
use portcullis::metered::{Cost, CostPermit};
use portcullis::{Priority, RateConfig, ThrottleManager};
use proptest::prelude::*;

/// Requests: 20 a second, burst 5. Tokens: 1,000 a second, burst 400.
const REQUESTS: (f64, u32) = (20.0, 5);
const TOKENS: (f64, u32) = (1_000.0, 400);

#[derive(Debug, Clone)]
enum Step {
    /// Time passes.
    Advance(u16),
    /// A call estimated at `estimate` tokens that will cost `actual`,
    /// settled first at `first` if some (a usage read twice); settled at
    /// once, or held (in flight) until a later `Settle`.
    Call {
        estimate: u32,
        first: Option<u32>,
        actual: u32,
        held: bool,
    },
    /// The oldest call in flight settles.
    Settle,
    /// The oldest call in flight never reached the backend.
    Unsent,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0u16..300).prop_map(Step::Advance),
        6 => (0u32..=400, prop::option::of(0u32..=600), 0u32..=600, any::<bool>())
            .prop_map(|(estimate, first, actual, held)| Step::Call { estimate, first, actual, held }),
        2 => Just(Step::Settle),
        1 => Just(Step::Unsent),
    ]
}

/// A call admitted: when (ns), what it cost in the end, and what its
/// settlements charged beyond what it held at each.
#[derive(Debug, Clone, Copy)]
struct Admitted {
    at: u64,
    tokens: u32,
    short: u32,
}

/// What settling a call estimated at `estimate` at `first` (if some), then
/// at `actual`, charges beyond what it holds at each settlement.
fn charged(estimate: u32, first: Option<u32>, actual: u32) -> u32 {
    match first {
        Some(first) => first.saturating_sub(estimate) + actual.saturating_sub(first),
        None => actual.saturating_sub(estimate),
    }
}

/// Settles `permit` as its call's usage is read: at `first`, then at
/// `actual`.
fn settle(permit: &CostPermit<'_>, first: Option<u32>, actual: u32) {
    if let Some(first) = first {
        permit.settle(Cost::of("tokens", first));
    }
    permit.settle(Cost::of("tokens", actual));
}

/// Every interval between two admissions holds `rate × T + burst` plus
/// what the settlements of the calls in it charged.
fn check(
    admitted: &[Admitted],
    (rate, burst): (f64, u32),
    what: &str,
) -> Result<(), TestCaseError> {
    for first in 0..admitted.len() {
        let (mut sum, mut short) = (0u64, 0u64);
        for call in &admitted[first..] {
            sum += u64::from(call.tokens);
            short += u64::from(call.short);
            let span = (call.at - admitted[first].at) as f64 / 1e9;
            let bound = rate * span + f64::from(burst) + short as f64;
            prop_assert!(
                sum as f64 <= bound + 1e-6,
                "{what}: {sum} admitted over {span} s, bound {bound}"
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn settled_costs_stay_within_each_limits_bound(steps in prop::collection::vec(step(), 1..120)) {
        let clock = ManualClock::new();
        let manager = ThrottleManager::<String>::builder()
            .rate(RateConfig::per_second(REQUESTS.0 as u32).burst(REQUESTS.1))
            .limit("tokens", RateConfig::per_second(TOKENS.0 as u32).burst(TOKENS.1))
            .clock(clock.clone())
            .build()
            .unwrap();
        let now = || clock.now_nanos();
        let (mut tokens, mut requests) = (Vec::new(), Vec::new());
        let mut in_flight: Vec<(CostPermit<'_>, Option<u32>, u32, usize)> = Vec::new();
        for step in steps {
            match step {
                Step::Advance(ms) => clock.advance(Duration::from_millis(u64::from(ms))),
                Step::Call { estimate, first, actual, held } => {
                    let left = manager.limit("tokens").unwrap().peek("k").map(|left| left.remaining);
                    match manager.try_acquire_cost("k", Priority::HIGH, Cost::of("tokens", estimate)) {
                        Ok(permit) => {
                            requests.push(Admitted { at: now(), tokens: 1, short: 0 });
                            let short = charged(estimate, first, actual);
                            tokens.push(Admitted { at: now(), tokens: actual, short });
                            if held {
                                in_flight.push((permit, first, actual, tokens.len() - 1));
                            } else {
                                settle(&permit, first, actual);
                                permit.success();
                            }
                        }
                        Err(_) => {
                            // A refusal takes nothing.
                            let after = manager.limit("tokens").unwrap().peek("k").map(|left| left.remaining);
                            prop_assert_eq!(left, after);
                        }
                    }
                }
                Step::Settle if !in_flight.is_empty() => {
                    let (permit, first, actual, _) = in_flight.remove(0);
                    settle(&permit, first, actual);
                    permit.success();
                }
                Step::Unsent if !in_flight.is_empty() => {
                    let (permit, _, _, index) = in_flight.remove(0);
                    permit.unsent();
                    tokens[index].tokens = 0;
                    tokens[index].short = 0;
                    requests[index].tokens = 0;
                }
                Step::Settle | Step::Unsent => {}
            }
        }
        check(&tokens, TOKENS, "tokens")?;
        check(&requests, REQUESTS, "requests")?;
    }
}

/// Issue 80: what the bound counts. A call estimated at 400 that settles at
/// 0 gives its 400 back, which another call takes at once; settled back at
/// 400, it owes them again from now. At that instant 800 tokens went, with
/// a burst of 400: within the bound counted with the settlement's charge
/// (400), beyond it if its under-estimate were read as its final cost less
/// its estimate (0).
#[test]
fn a_cost_settled_down_then_back_up_counts_its_rise_in_the_bound() {
    let clock = ManualClock::new();
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_second(REQUESTS.0 as u32).burst(REQUESTS.1))
        .limit(
            "tokens",
            RateConfig::per_second(TOKENS.0 as u32).burst(TOKENS.1),
        )
        .clock(clock.clone())
        .build()
        .unwrap();
    // The key has heard from its provider: not new, its burst whole.
    clock.advance(Duration::from_millis(1));
    assert!(
        manager
            .key("k")
            .observe_remaining("tokens", u64::from(TOKENS.1), None)
    );
    let at = clock.now_nanos();
    let first = manager
        .try_acquire_cost("k", Priority::HIGH, Cost::of("tokens", 400))
        .unwrap();
    first.settle(Cost::of("tokens", 0));
    let second = manager
        .try_acquire_cost("k", Priority::HIGH, Cost::of("tokens", 400))
        .expect("the 400 given back");
    second.success();
    first.settle(Cost::of("tokens", 400));
    first.success();
    let admitted = |short| {
        [
            Admitted {
                at,
                tokens: 400,
                short,
            },
            Admitted {
                at,
                tokens: 400,
                short: 0,
            },
        ]
    };
    assert!(check(&admitted(charged(400, Some(0), 400)), TOKENS, "charged").is_ok());
    assert!(check(&admitted(400u32.saturating_sub(400)), TOKENS, "naive").is_err());
}
