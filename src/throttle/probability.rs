//! The rejection probability, as pure maths.

use super::config::ThrottleSettings;

/// Requests and accepts of one priority over the window.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) struct Counts {
    pub(crate) requests: f64,
    pub(crate) accepts: f64,
}

/// Each level's probability of rejection, most important first, from each
/// level's own counts over the window.
///
/// The backend accepts calls whatever their priority, so what it accepts
/// is one budget for them all: the SRE rule's `K × accepts`, with the
/// accepts of every level. The levels take it in order. A level's
/// allowance is what the requests of the levels above it leave of the
/// budget; it sees its own requests and those the levels above could not
/// be allowed; and it is shed by the SRE rule on what it sees against its
/// allowance:
///
/// ```text
/// allowance_p = max(K × Σ accepts − Σ_{i<p} requests_i, 0)
/// unserved_p  = Σ_{i<p} max(requests_i − allowance_i, 0)
/// seen_p      = requests_p + unserved_p
/// P_p         = clamp((seen_p − allowance_p) / (seen_p + m), 0, max_rejection)
/// ```
///
/// So a level whose demand fits in what the levels above leave is not
/// shed, whatever the backend does to the calls of the levels below: those
/// carry the shedding, the least important first, and a level sheds more
/// the more is unserved above it. With one level this is the SRE rule
/// itself; with any, the calls let through add up to about `K` times what
/// the backend accepts.
///
/// `levels` is read twice: once for the budget, once for the levels.
pub(crate) fn rejections<'s>(
    levels: impl Iterator<Item = Counts> + Clone + 's,
    settings: &'s ThrottleSettings,
) -> impl Iterator<Item = f64> + 's {
    let budget = settings.ratio * levels.clone().map(|level| level.accepts).sum::<f64>();
    let (mut requested_above, mut unserved_above) = (0.0, 0.0);
    levels.map(move |own| {
        let allowance = (budget - requested_above).max(0.0);
        let seen = own.requests + unserved_above;
        requested_above += own.requests;
        unserved_above += (own.requests - allowance).max(0.0);
        rejection(
            Counts {
                requests: seen,
                accepts: allowance / settings.ratio,
            },
            settings,
        )
    })
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

    fn counts(requests: f64, accepts: f64) -> Counts {
        Counts { requests, accepts }
    }

    #[test]
    fn the_backend_s_accepts_are_one_budget_taken_in_order() {
        // HIGH asks 80 and LOW 720 in the window; the backend accepted 100
        // of them, whatever their priority. The budget, K × 100 = 200: HIGH's
        // 80 fit, and LOW is allowed the 120 left, so it is shed its excess,
        // (720 - 120) / (720 + 60).
        let levels = [counts(80.0, 50.0), counts(720.0, 50.0)];
        let p: Vec<f64> = rejections(levels.iter().copied(), &defaults()).collect();
        assert_eq!(p, [0.0, 600.0 / 780.0]);
        // Four levels asking 200 each of a budget of 200: HIGH's fit; each
        // level below sees the calls the levels above could not be allowed,
        // so sheds more than the one above it.
        let levels = [counts(200.0, 25.0); 4];
        let p: Vec<f64> = rejections(levels.iter().copied(), &defaults()).collect();
        assert_eq!(p, [0.0, 200.0 / 260.0, 400.0 / 460.0, 600.0 / 660.0]);
        // 100 failures of HIGH and nothing accepted: HIGH is shed by the SRE
        // rule, and the level below, asking nothing, sees HIGH's 100.
        let levels = [counts(100.0, 0.0), counts(0.0, 0.0)];
        let p: Vec<f64> = rejections(levels.iter().copied(), &defaults()).collect();
        assert_eq!(p, [0.625, 0.625]);
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

        /// With one level the rule is the SRE rule; with several, a level
        /// whose requests and those above it fit in the budget is not
        /// shed, a level's probability does not hang on the requests of the
        /// levels below it, a level never sheds less than the one above it,
        /// and every answer is a probability.
        #[test]
        fn the_levels_take_the_budget_in_order(
            levels in proptest::collection::vec((0u32..10_000, 0u32..10_000), 1..6),
            below in 0u32..10_000,
            ratio in 1.0f64..4.0,
        ) {
            let s = ThrottleSettings::for_test(ThrottleConfig::new().ratio(ratio));
            let levels: Vec<Counts> = levels
                .iter()
                .map(|&(r, a)| counts(f64::from(r.max(a)), f64::from(a.min(r))))
                .collect();
            let p: Vec<f64> = rejections(levels.iter().copied(), &s).collect();
            prop_assert_eq!(p.len(), levels.len());
            if let [one] = levels[..] {
                prop_assert_eq!(p[0], rejection(one, &s));
            }
            let budget = ratio * levels.iter().map(|l| l.accepts).sum::<f64>();
            let mut asked = 0.0;
            for (level, own) in levels.iter().enumerate() {
                prop_assert!((0.0..=1.0).contains(&p[level]), "{}", p[level]);
                asked += own.requests;
                if asked <= budget {
                    prop_assert_eq!(p[level], 0.0, "level {} fits", level);
                }
                if level > 0 {
                    prop_assert!(p[level] >= p[level - 1], "{:?}", p);
                }
            }
            // One more level asking `below`, none of it accepted: the
            // levels above it are shed as before.
            let mut more = levels.clone();
            more.push(counts(f64::from(below), 0.0));
            let with_below: Vec<f64> = rejections(more.iter().copied(), &s).collect();
            prop_assert_eq!(&with_below[..levels.len()], &p[..]);
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
