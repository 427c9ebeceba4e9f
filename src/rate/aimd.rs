//! How outcomes move a key's rate, as pure maths: additive increase, additive
//! or multiplicative decrease, a cooldown between decreases, clamped bounds.

use super::config::{Decrease, RateSettings};
use crate::clock::Nanos;

/// The rate after one success.
pub(crate) fn increased(rate: f64, settings: &RateSettings) -> f64 {
    clamp(rate + settings.increment, settings)
}

/// How far above a key's use its rate may be: a rate that limits the key's
/// calls runs at its use, so successes may raise it; one this far above it
/// does not limit them, and learns nothing from them. Below 2 by a margin,
/// so that a use measured high by chance (a second of a random stream holds
/// ±20 % around its mean at 20/s) still keeps the rate within twice the
/// true use.
pub(crate) const MAX_RATE_OVER_USE: f64 = 1.5;

/// How far above a key's use a success of a call that waited for its
/// token may raise the rate: the rate limited that call, so the use
/// (measured over one to two seconds) lags a rate that is climbing, not one
/// that nothing tests. Still a bound: under overload every call waits, and
/// without one an additive rate climbed past four times what it was used
/// at, far faster than its steps of decrease could bring it back.
pub(crate) const MAX_RATE_OVER_USE_WAITED: f64 = 2.0;

/// The highest rate one success validates, for a key whose calls succeed
/// at `used` per second: [`MAX_RATE_OVER_USE_WAITED`] times that if the call
/// `waited` between taking its place and starting (for its token: the rate
/// was what limited it, as TCP's window is "cwnd-limited" in RFC 7661; or
/// in a bulkhead's queue, or for a shared rate's answer, which the manager
/// does not tell apart), [`MAX_RATE_OVER_USE`] times it otherwise; or the starting
/// rate if higher.
///
/// The wait is the direct signal that the rate limits: during a climb the
/// use (measured over one to two seconds) lags the rate, and a ceiling of
/// 1.5 times it held a climb from 10/s to 50/s to 8.6 s against a real
/// server (to the first refusal); with the waits, 7.5 s.
pub(crate) fn validated_ceiling(used: f64, waited: bool, settings: &RateSettings) -> f64 {
    let over_use = if waited {
        MAX_RATE_OVER_USE_WAITED
    } else {
        MAX_RATE_OVER_USE
    };
    (over_use * used).max(settings.starting_rate)
}

/// The rate after one success, for a key whose successes validate rates up
/// to `ceiling` (from [`validated_ceiling`]).
///
/// A success that is news (see [`is_news`]) raises the rate by the
/// increment, up to the ceiling. Any success brings a rate above the
/// ceiling down to it: a rate the key's calls no longer use is one they no
/// longer test. Without that, a rate learned at 100/s stayed there through
/// an hour at 10/s, and a rate on a random stream ratcheted up to
/// [`MAX_RATE_OVER_USE`] times the busiest second it had ever seen.
pub(crate) fn after_success(rate: f64, ceiling: f64, news: bool, settings: &RateSettings) -> f64 {
    let raised = if news {
        increased(rate, settings)
    } else {
        rate
    };
    raised.min(ceiling)
}

/// Whether no success can move `rate`: it is at the upper bound, where
/// growth stops, and at or below the starting rate, where validation stops
/// (a fixed rate: starting rate and upper bound the same).
pub(crate) fn success_cannot_move(rate: f64, settings: &RateSettings) -> bool {
    rate >= settings.upper_bound && rate <= settings.starting_rate
}

/// The rate after one failure, ignoring the cooldown.
///
/// Earlier AIMD limiters compared the new rate against the decrement step
/// instead of the lower bound, and could underflow; here the result is
/// clamped into the bounds, whatever the step.
pub(crate) fn decreased(rate: f64, settings: &RateSettings) -> f64 {
    let lowered = match settings.decrease {
        Decrease::Subtract(step) => rate - step,
        Decrease::Multiply(factor) => rate * factor,
    };
    clamp(lowered, settings)
}

/// Whether a failure at `now` may lower the rate, given when the rate last
/// fell: not within `cooldown` of that.
pub(crate) fn may_decrease(now: Nanos, last_decrease: Option<Nanos>, cooldown: Nanos) -> bool {
    last_decrease.is_none_or(|at| now >= at.saturating_add(cooldown))
}

/// Whether the outcome of a call that took its place in the rate's queue at
/// `scheduled_at` is news to a rate that last fell at `last_decrease`.
///
/// A call scheduled before the last decrease was paced at the old rate: its
/// failure is one the decrease already answered, and its success says
/// nothing about the new rate. TCP's NewReno rule ("one reduction per window
/// of data") is the same idea. Without it, waiters already scheduled (up to
/// `max_wait` of them) keep failing after a decrease and lower the rate once
/// per cooldown until the first call paced at the new rate reports: with a
/// 1 s queue and a 100 ms cooldown, ten decreases for one overshoot.
pub(crate) fn is_news(scheduled_at: Nanos, last_decrease: Option<Nanos>) -> bool {
    last_decrease.is_none_or(|at| scheduled_at >= at)
}

fn clamp(rate: f64, settings: &RateSettings) -> f64 {
    // Bounds are validated finite with lower <= upper; `max`/`min` also map a
    // NaN rate to a bound instead of propagating it.
    rate.max(settings.lower_bound).min(settings.upper_bound)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RateConfig;

    fn seed() -> RateSettings {
        RateSettings::for_test(
            RateConfig::adaptive(10.0)
                .bounds(1.0, 20.0)
                .increase_by(2.0)
                .decrease_by(1.0),
        )
    }

    #[test]
    fn the_go_seed_example() {
        let s = seed();
        let mut rate = 10.0;
        rate = increased(increased(rate, &s), &s);
        assert_eq!(rate, 14.0);
        rate = decreased(rate, &s);
        assert_eq!(rate, 13.0);
        for _ in 0..4 {
            rate = increased(rate, &s);
        }
        assert_eq!(rate, 20.0);
        for _ in 0..20 {
            rate = decreased(rate, &s);
        }
        assert_eq!(rate, 1.0);
    }

    #[test]
    fn a_decrease_smaller_than_the_step_lands_on_the_lower_bound() {
        // Regression (a known bug elsewhere): the decrease was refused when the rate was
        // below the step, instead of being clamped to the lower bound.
        let s = RateSettings::for_test(
            RateConfig::adaptive(1.5)
                .bounds(0.25, 20.0)
                .decrease_by(1.0),
        );
        assert_eq!(decreased(1.5, &s), 0.5);
        assert_eq!(decreased(0.5, &s), 0.25);
    }

    #[test]
    fn a_huge_step_never_underflows_into_an_unlimited_rate() {
        // Regression (a known bug elsewhere): an unsigned underflow made the rate huge.
        let s = RateSettings::for_test(
            RateConfig::adaptive(2.0)
                .bounds(0.5, 20.0)
                .decrease_by(1e300),
        );
        assert_eq!(decreased(2.0, &s), 0.5);
    }

    #[test]
    fn multiplicative_decrease_halves_within_bounds() {
        let s = RateSettings::for_test(
            RateConfig::adaptive(16.0)
                .bounds(3.0, 20.0)
                .decrease_factor(0.5),
        );
        assert_eq!(decreased(16.0, &s), 8.0);
        assert_eq!(decreased(5.0, &s), 3.0);
    }

    #[test]
    fn a_success_raises_up_to_the_ceiling_and_brings_a_rate_above_it_down() {
        let s = seed(); // starts at 10, bounds 1 to 20, +2
        assert_eq!(after_success(10.0, 20.0, true, &s), 12.0);
        assert_eq!(after_success(11.0, 12.0, true, &s), 12.0);
        // Old news does not raise the rate, but its use still counts.
        assert_eq!(after_success(10.0, 20.0, false, &s), 10.0);
        assert_eq!(after_success(18.0, 15.0, false, &s), 15.0);
        assert_eq!(after_success(18.0, 15.0, true, &s), 15.0);
        // The ceiling never drops below the starting rate.
        assert_eq!(validated_ceiling(1.0, false, &s), 10.0);
        assert_eq!(
            after_success(18.0, validated_ceiling(1.0, false, &s), true, &s),
            10.0
        );
        assert_eq!(validated_ceiling(10.0, false, &s), 15.0);
        // A call that waited for its token: the rate limited it, so the
        // ceiling is twice the use, not 1.5 times.
        assert_eq!(validated_ceiling(8.0, true, &s), 16.0);
        assert_eq!(validated_ceiling(8.0, false, &s), 12.0);
        assert_eq!(validated_ceiling(1.0, true, &s), 10.0);
    }

    #[test]
    fn only_a_fixed_rate_at_its_bound_is_beyond_any_success() {
        let fixed = RateSettings::for_test(RateConfig::adaptive(20.0).bounds(1.0, 20.0));
        assert!(success_cannot_move(20.0, &fixed));
        assert!(!success_cannot_move(19.0, &fixed));
        // Learned up to the bound from below: it may still fall to its use.
        assert!(!success_cannot_move(20.0, &seed()));
    }

    #[test]
    fn cooldown() {
        assert!(may_decrease(0, None, 100));
        assert!(!may_decrease(99, Some(0), 100));
        assert!(may_decrease(100, Some(0), 100));
        assert!(may_decrease(0, Some(0), 0));
    }

    #[test]
    fn only_calls_scheduled_since_the_last_decrease_are_news() {
        assert!(is_news(0, None));
        assert!(!is_news(99, Some(100)));
        assert!(is_news(100, Some(100)));
    }
}
