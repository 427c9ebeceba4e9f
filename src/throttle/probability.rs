//! The rejection probability, as pure maths.

use super::config::ThrottleSettings;

/// Requests and accepts of one priority over the window.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) struct Counts {
    pub(crate) requests: f64,
    pub(crate) accepts: f64,
}

/// What a priority sees: its `own` requests plus the calls of every more
/// important priority (`above`) that the backend did not accept; its own
/// accepts.
pub(crate) fn seen_by(above: impl IntoIterator<Item = Counts>, own: Counts) -> Counts {
    let unaccepted_above: f64 = above.into_iter().map(unaccepted).sum();
    Counts {
        requests: own.requests + unaccepted_above,
        accepts: own.accepts,
    }
}

/// The calls of `counts` the backend did not accept, which every less
/// important priority sees as its own requests.
pub(crate) fn unaccepted(counts: Counts) -> f64 {
    (counts.requests - counts.accepts).max(0.0)
}

/// `clamp((requests - ratio * accepts) / (requests + floor), 0, max)`, or 0
/// below the minimum sample. Always finite and in `[0, 1]`: `floor` is
/// validated above 0, and NaN inputs give 0.
pub(crate) fn rejection(seen: Counts, settings: &ThrottleSettings) -> f64 {
    let excess = seen.requests - settings.ratio * seen.accepts;
    // Healthy (or NaN, which `partial_cmp` leaves unordered): no division.
    // The common case.
    if excess.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater)
        || seen.requests < settings.min_requests
    {
        return 0.0;
    }
    let p = excess / (seen.requests + settings.floor);
    // `max` first: it maps NaN to 0.
    p.max(0.0).min(settings.max_rejection)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ThrottleConfig;
    use proptest::prelude::*;

    fn defaults() -> ThrottleSettings {
        ThrottleSettings::for_test(ThrottleConfig::new())
    }

    #[test]
    fn a_hundred_failures_with_the_defaults() {
        // K = 2, window 60 s, min_rate 1: 100 / (100 + 60).
        let seen = Counts {
            requests: 100.0,
            accepts: 0.0,
        };
        assert_eq!(rejection(seen, &defaults()), 0.625);
    }

    #[test]
    fn healthy_traffic_is_never_shed() {
        let seen = Counts {
            requests: 1_000.0,
            accepts: 600.0,
        };
        assert_eq!(rejection(seen, &defaults()), 0.0);
    }

    #[test]
    fn lower_priorities_inherit_the_failures_above() {
        // Priority 0 had 30 of its 100 calls accepted: only the 70 it did
        // not get accepted count against the priorities below it.
        let counts = [
            Counts {
                requests: 100.0,
                accepts: 30.0,
            },
            Counts {
                requests: 0.0,
                accepts: 0.0,
            },
            Counts {
                requests: 50.0,
                accepts: 40.0,
            },
        ];
        let seen = |p: usize| seen_by(counts[..p].iter().copied(), counts[p]);
        assert_eq!(seen(0), counts[0]);
        assert_eq!(
            seen(1),
            Counts {
                requests: 70.0,
                accepts: 0.0
            }
        );
        assert_eq!(
            seen(2),
            Counts {
                requests: 120.0,
                accepts: 40.0
            }
        );
        // (70 - 2 * 0) / (70 + 60)
        assert_eq!(rejection(seen(1), &defaults()), 70.0 / 130.0);
    }

    #[test]
    fn the_minimum_sample_and_the_cap() {
        let s =
            ThrottleSettings::for_test(ThrottleConfig::new().min_requests(10).max_rejection(0.5));
        assert_eq!(
            rejection(
                Counts {
                    requests: 9.0,
                    accepts: 0.0
                },
                &s
            ),
            0.0
        );
        // Exactly the minimum sample is a sample: (10 - 0) / (10 + 60).
        assert_eq!(
            rejection(
                Counts {
                    requests: 10.0,
                    accepts: 0.0
                },
                &s
            ),
            10.0 / 70.0
        );
        assert_eq!(
            rejection(
                Counts {
                    requests: 1e9,
                    accepts: 0.0
                },
                &s
            ),
            0.5
        );
    }

    proptest! {
        /// More failures never lower the probability, more accepts never
        /// raise it, and a key whose accepts keep up with `requests / ratio`
        /// is never shed; whatever the inputs, the answer is a probability.
        #[test]
        fn failures_raise_it_accepts_lower_it(
            (requests, accepts) in (0u32..1_000_000).prop_flat_map(|r| (Just(r), 0..=r)),
            more in 1u32..1_000_000,
            ratio in 1.0f64..10.0,
            min_rate in 1e-3f64..1e3,
        ) {
            // Window counts are whole numbers.
            let (requests, accepts, more) = (f64::from(requests), f64::from(accepts), f64::from(more));
            let s = ThrottleSettings::for_test(ThrottleConfig::new().ratio(ratio).min_rate(min_rate));
            let p = rejection(Counts { requests, accepts }, &s);
            prop_assert!((0.0..=1.0).contains(&p), "{p}");
            let failed_more = rejection(Counts { requests: requests + more, accepts }, &s);
            prop_assert!(failed_more >= p, "{more} more failures lowered {p} to {failed_more}");
            let accepted_more = rejection(
                Counts { requests: requests + more, accepts: accepts + more },
                &s,
            );
            prop_assert!(accepted_more <= p, "{more} more accepts raised {p} to {accepted_more}");
            if ratio * accepts >= requests {
                prop_assert_eq!(p, 0.0);
            }
        }

        #[test]
        fn any_input_gives_a_probability(
            requests in proptest::num::f64::ANY,
            accepts in proptest::num::f64::ANY,
        ) {
            let p = rejection(Counts { requests, accepts }, &defaults());
            prop_assert!((0.0..=1.0).contains(&p), "{p}");
        }
    }
}
