//! What each limit admits, on virtual time: over any interval `T`, the
//! settled costs of the calls admitted stay within `rate × T + burst`,
//! plus the under-estimates of the calls that settled late. A proptest
//! over random estimates, actual costs, times and settlement orders.

use std::time::Duration;

use portcullis::clock::{Clock, ManualClock};
use portcullis::{Cost, CostPermit, Priority, RateConfig, ThrottleManager};
use proptest::prelude::*;

/// Requests: 20 a second, burst 5. Tokens: 1,000 a second, burst 400.
const REQUESTS: (f64, u32) = (20.0, 5);
const TOKENS: (f64, u32) = (1_000.0, 400);

#[derive(Debug, Clone)]
enum Step {
    /// Time passes.
    Advance(u16),
    /// A call estimated at `estimate` tokens that will cost `actual`;
    /// settled at once, or held (in flight) until a later `Settle`.
    Call {
        estimate: u32,
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
        6 => (0u32..=400, 0u32..=600, any::<bool>())
            .prop_map(|(estimate, actual, held)| Step::Call { estimate, actual, held }),
        2 => Just(Step::Settle),
        1 => Just(Step::Unsent),
    ]
}

/// A call admitted: when (ns), what it cost in the end, and by how much
/// its estimate fell short of that.
#[derive(Debug, Clone, Copy)]
struct Admitted {
    at: u64,
    tokens: u32,
    short: u32,
}

/// Every interval between two admissions holds `rate × T + burst` plus the
/// shortfalls of the calls in it.
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
        let mut in_flight: Vec<(CostPermit<'_>, u32, usize)> = Vec::new();
        for step in steps {
            match step {
                Step::Advance(ms) => clock.advance(Duration::from_millis(u64::from(ms))),
                Step::Call { estimate, actual, held } => {
                    let left = manager.limit("tokens").unwrap().peek("k").map(|left| left.remaining);
                    match manager.try_acquire_cost("k", Priority::HIGH, Cost::of("tokens", estimate)) {
                        Ok(permit) => {
                            requests.push(Admitted { at: now(), tokens: 1, short: 0 });
                            tokens.push(Admitted { at: now(), tokens: actual, short: actual.saturating_sub(estimate) });
                            if held {
                                in_flight.push((permit, actual, tokens.len() - 1));
                            } else {
                                permit.settle(Cost::of("tokens", actual));
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
                    let (permit, actual, _) = in_flight.remove(0);
                    permit.settle(Cost::of("tokens", actual));
                    permit.success();
                }
                Step::Unsent if !in_flight.is_empty() => {
                    let (permit, _, index) = in_flight.remove(0);
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
