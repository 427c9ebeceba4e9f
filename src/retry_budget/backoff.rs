//! How long a retry waits: exponential backoff with full jitter (AWS's
//! "Exponential Backoff And Jitter"): retry `n` waits a uniform draw from
//! `[0, min(cap, base × 2^(n-1)))`. Full jitter spreads the retries of
//! calls that failed together across the whole interval, so they do not
//! come back together; a pause the backend asked for replaces the draw
//! when it is longer (see `Retries`).

use std::time::Duration;

/// The longest retry `retry` (1 for the first) may wait: `base × 2^(retry-1)`,
/// at most `cap`.
pub(crate) fn ceiling(retry: u32, base: Duration, cap: Duration) -> Duration {
    let base = base.as_nanos();
    let doublings = retry.saturating_sub(1);
    // Past the `u128`'s width any base above 0 is past any cap.
    let grown = match base.checked_shl(doublings) {
        Some(grown) if grown >> doublings == base => grown,
        _ if base == 0 => 0,
        _ => u128::MAX,
    };
    if grown >= cap.as_nanos() {
        return cap;
    }
    // Below the cap, which is a `Duration`: fits one.
    let seconds = u64::try_from(grown / 1_000_000_000).unwrap_or(u64::MAX);
    Duration::new(seconds, (grown % 1_000_000_000) as u32)
}

/// A full-jitter wait below `ceiling`, from `unit`, a draw in `[0, 1)`.
pub(crate) fn jittered(ceiling: Duration, unit: f64) -> Duration {
    ceiling.mul_f64(unit.clamp(0.0, 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_ceiling_doubles_from_the_base_up_to_the_cap() {
        let (base, cap) = (Duration::from_millis(50), Duration::from_millis(5_000));
        let ceilings: Vec<_> = (1..=9).map(|retry| ceiling(retry, base, cap)).collect();
        assert_eq!(
            ceilings,
            [50, 100, 200, 400, 800, 1_600, 3_200, 5_000, 5_000].map(Duration::from_millis)
        );
        assert_eq!(ceiling(u32::MAX, base, cap), cap, "no overflow far out");
        assert_eq!(ceiling(40, Duration::from_secs(u64::MAX / 4), cap), cap);
    }

    proptest! {
        /// Every wait lies in `[0, min(cap, base × 2^(retry-1))]`.
        #[test]
        fn waits_stay_within_their_bounds(
            retry in 1u32..80,
            base_ms in 0u64..10_000,
            cap_ms in 0u64..100_000,
            unit in 0.0f64..1.0,
        ) {
            let (base, cap) = (Duration::from_millis(base_ms), Duration::from_millis(cap_ms));
            let wait = jittered(ceiling(retry, base, cap), unit);
            prop_assert!(wait <= cap);
            let exact = u128::from(base_ms) << (retry - 1).min(100);
            prop_assert!(wait.as_millis() <= exact.min(u128::from(cap_ms)));
        }
    }
}
