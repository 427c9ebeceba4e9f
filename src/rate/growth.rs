//! How a learned rate grows (the default, when no `increase_by` step is
//! set), as pure maths: slow start until the first fall, then by the time
//! since the last fall, never by the number of successes.
//!
//! - **Slow start.** Until its first fall, each success that is news adds
//!   [`SLOW_START_STEP`] (one call a second) to the rate. A rate that
//!   limits its calls succeeds about `rate` times a second, so it grows by
//!   about itself each second: `e`-fold a second, as TCP's window doubles
//!   each round trip by adding one segment per acknowledgement. From any
//!   start below a host's capacity, the first fall comes after about
//!   `ln(capacity / start)` seconds.
//! - **After a fall** from `W` (the rate that earned it: [`earned_at`],
//!   mostly the host's measured use, since a host that refuses beyond
//!   its capacity serves about its capacity meanwhile), the rate is a
//!   function of the time `t` since the fall, CUBIC's shape in three
//!   pieces: back from the fallen rate to [`PLATEAU`] `× W` over
//!   [`RECOVERY`], concave (quick at first, flat on arrival); held there
//!   for [`DWELL`]; then a probe that grows `e`-fold a second, so that a
//!   host whose capacity rose is found within seconds. A success moves the
//!   rate up to this curve, never beyond it, so a key with more successes
//!   a second climbs no faster: the decrease (one per round trip of
//!   overload) always outruns the growth, and a rate started far above a
//!   host's capacity comes down for good.
//! - **After a pause** the host asked for (`Retry-After`), the fall it
//!   marks is *firm*: its `W` is the rate the refused call was sent at
//!   ([`sent_at`]), which the host has just called too much; the plateau
//!   is [`FIRM_PLATEAU`] of it, held for [`FIRM_DWELL`], and the probe
//!   adds [`FIRM_PROBE`] of the plateau a second. Each pause costs its
//!   whole length in calls, so the curve trades a little of the plateau
//!   for rare pauses: a gentle probe crosses the capacity slowly and the
//!   host's refusal finds the rate just past it (a host's own burst lets
//!   a steep probe run far past before the first refusal).
//!
//! Where it settles against a host of capacity `C` that refuses beyond it:
//! each cycle starts with a fall earned at about `C` and lasts
//! `RECOVERY` plus the dwell plus the probe's fraction of a second, spent
//! mostly at 95 % of `C`; about one call a cycle is refused, and the dwell
//! of at least [`DWELL_CALLS`] keeps that a small share at low rates. A
//! host that pauses us is paused for once a cycle of 15 s and more, and
//! served near 90 % of `C` between.
//!
//! Every function is total: no clock, no atomics, no panics.

use super::aimd;
use super::config::RateSettings;
use crate::clock::Nanos;

/// What a success adds to a learned rate before its first fall, in calls a
/// second.
pub(crate) const SLOW_START_STEP: f64 = 1.0;

/// How long the rate takes to climb back from its fall to the plateau.
pub(crate) const RECOVERY: Nanos = 1_500_000_000;

/// How long the rate holds at the plateau before it probes beyond.
pub(crate) const DWELL: Nanos = 5_500_000_000;

/// How long the rate holds at the plateau after a firm fall (the host
/// asked for a pause).
pub(crate) const FIRM_DWELL: Nanos = 15_000_000_000;

/// The least number of calls the plateau lasts: at low rates the dwell is
/// longer than [`DWELL`], so that the one call a probe's fall costs stays
/// a small share of the calls.
const DWELL_CALLS: f64 = 50.0;

/// The plateau, as a share of the rate that earned the fall: below it,
/// since a fall is earned just above the host's capacity.
pub(crate) const PLATEAU: f64 = 0.95;

/// How fast the probe grows: `e`-fold in this long.
const PROBE_EFOLD: Nanos = 1_000_000_000;

/// The last fall of a learned rate: from which rate, when, and whether the
/// host marked it with a pause.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct LastFall {
    pub(crate) from: f64,
    pub(crate) at: Nanos,
    pub(crate) firm: bool,
}

/// The rate after one success that is news, for a rate that last fell
/// `fall` (`None`: never), at `now`: the curve's value if above `rate`,
/// clamped into the bounds. The validation ceiling applies after this.
pub(crate) fn grown(rate: f64, fall: Option<LastFall>, now: Nanos, settings: &RateSettings) -> f64 {
    let target = match fall {
        None => rate + SLOW_START_STEP,
        Some(fall) => rate.max(curve(fall, now, settings)),
    };
    target.max(settings.lower_bound).min(settings.upper_bound)
}

/// The rate a fall from `from` at `now` was earned at, for a key whose
/// calls succeeded `used` times a second lately and whose fall before it
/// was `before`. A host that refuses beyond its capacity serves at about
/// its capacity while the rate is above it, so the use is the estimate,
/// bounded by what the rate's history says:
///
/// - out of slow start: the rate before its last step (which was served: a
///   step at 5/s is a fifth of the rate);
/// - on the probe (after the plateau held its dwell): at least the rate
///   the fall before was earned at (the plateau below it held), at most
///   the rate it fell from;
/// - on the plateau: at most the rate it fell from (the plateau itself was
///   refused, so the capacity is below it);
/// - within [`RECOVERY`] of the fall before: the same overload may still
///   be answered (a host that counts its calls over a window refuses until
///   the window has passed, however far the rate has fallen meanwhile), so
///   at least [`PLATEAU`] of the rate it fell from, at most the rate the
///   fall before was earned at: a cascade of falls leaves the plateau near
///   where the first found the capacity.
///
/// Never below half of `from`, whatever the use: a fall it earns is a fall.
pub(crate) fn earned_at(from: f64, before: Option<LastFall>, used: f64, now: Nanos) -> f64 {
    let Some(before) = before else {
        return before_last_step(from);
    };
    let used = if used > 0.0 { used } else { from };
    let earned = if now.saturating_sub(before.at) < RECOVERY {
        used.max(PLATEAU * from).min(before.from)
    } else if before_probe(before, now) {
        used.min(from)
    } else {
        used.max(before.from).min(from)
    };
    earned.max(from / 2.0)
}

/// A fall from `from` out of slow start: the rate before its last step
/// (which was served), at least half of `from`.
fn before_last_step(from: f64) -> f64 {
    (from - SLOW_START_STEP).max(from / 2.0)
}

/// The rate a fall from `from` at `now` was earned at, should the host
/// mark it with a pause, for a rate whose fall before it was `before`:
/// the rate its failing call was sent at (out of slow start, before its
/// last step), and below that if the fall came on the plateau of a firm
/// fall: that plateau was chosen below a rate the host refused, and the
/// host refused it too.
pub(crate) fn sent_at(from: f64, before: Option<LastFall>, now: Nanos) -> f64 {
    match before {
        None => before_last_step(from),
        Some(before) if before.firm && before_probe(before, now) => FIRM_PLATEAU * from,
        Some(_) => from,
    }
}

/// The plateau after a fall the host marked with a pause, as a share of
/// the rate the failing call was sent at.
const FIRM_PLATEAU: f64 = 0.9;

/// How fast the probe after a firm dwell grows: this share of the
/// plateau a second, added (5 s to cross a capacity 10 % above the
/// plateau).
const FIRM_PROBE: f64 = 0.02;

/// Whether the curve after `fall` is still below or at its plateau at
/// `now` (not yet probing). Until then the rate is not brought down to its
/// measured use: a host's pause or a fall's recovery leaves the key
/// quieter than its rate, which was tested a moment ago.
pub(crate) fn before_probe(fall: LastFall, now: Nanos) -> bool {
    now.saturating_sub(fall.at) < RECOVERY + dwell(fall)
}

fn dwell(fall: LastFall) -> Nanos {
    let dwell = if fall.firm { FIRM_DWELL } else { DWELL };
    dwell.max((DWELL_CALLS / (PLATEAU * fall.from) * 1e9) as Nanos)
}

/// The rate `now` lies on after `fall` (see the module's doc).
pub(crate) fn curve(fall: LastFall, now: Nanos, settings: &RateSettings) -> f64 {
    let t = now.saturating_sub(fall.at);
    let plateau = if fall.firm { FIRM_PLATEAU } else { PLATEAU } * fall.from;
    let fallen = aimd::decreased(fall.from, settings).min(plateau);
    if t < RECOVERY {
        let left = 1.0 - t as f64 / RECOVERY as f64;
        return plateau - (plateau - fallen) * left * left;
    }
    let dwell = dwell(fall);
    let probing = t - RECOVERY;
    if probing < dwell {
        return plateau;
    }
    if fall.firm {
        let seconds = (probing - dwell) as f64 / 1e9;
        return plateau * (1.0 + FIRM_PROBE * seconds.min(1e6));
    }
    let efolds = (probing - dwell) as f64 / PROBE_EFOLD as f64;
    // Past about 20 e-folds every rate is beyond any bound; `min` keeps
    // `exp` finite.
    plateau * efolds.min(50.0).exp()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RateConfig;

    const S: Nanos = 1_000_000_000;

    fn learned() -> RateSettings {
        RateSettings::for_test(RateConfig::adaptive(10.0).bounds(1.0, 1_000.0))
    }

    fn fall(firm: bool) -> LastFall {
        LastFall {
            from: 100.0,
            at: 10 * S,
            firm,
        }
    }

    #[test]
    fn slow_start_adds_one_call_a_second_per_success() {
        let s = learned();
        assert_eq!(grown(10.0, None, 0, &s), 11.0);
        assert_eq!(grown(999.5, None, 0, &s), 1_000.0, "within the bounds");
    }

    #[test]
    fn a_fall_out_of_slow_start_is_earned_before_its_last_step() {
        assert_eq!(earned_at(6.0, None, 4.0, 0), 5.0);
        assert_eq!(earned_at(1.5, None, 1.0, 0), 0.75);
    }

    #[test]
    fn a_later_fall_is_earned_at_the_use_within_what_the_rate_held() {
        let before = Some(fall(false)); // from 100, at 10 s
        // On the probe: at least the fall before (its plateau held), at
        // most the rate it fell from.
        let probing = 10 * S + RECOVERY + DWELL;
        assert_eq!(earned_at(120.0, before, 110.0, probing), 110.0);
        assert_eq!(earned_at(120.0, before, 80.0, probing), 100.0);
        assert_eq!(earned_at(120.0, before, 150.0, probing), 120.0);
        assert_eq!(
            earned_at(120.0, before, 0.0, probing),
            120.0,
            "no use measured"
        );
        // On the plateau, refused: at most the use.
        let dwelling = 10 * S + RECOVERY;
        assert_eq!(earned_at(95.0, before, 80.0, dwelling), 80.0);
        assert_eq!(
            earned_at(95.0, before, 10.0, dwelling),
            47.5,
            "at least half"
        );
    }

    #[test]
    fn a_fall_in_the_recovery_from_the_last_is_earned_near_the_first() {
        let soon = 10 * S + RECOVERY - 1;
        let before = Some(fall(false)); // from 100, at 10 s
        // A host still refusing what it refused: it served near 50 a
        // second lately, the rate fell to 20 meanwhile.
        assert_eq!(earned_at(20.0, before, 50.0, soon), 50.0);
        // At most the fall before, at least the plateau of the rate.
        assert_eq!(earned_at(20.0, before, 200.0, soon), 100.0);
        assert_eq!(earned_at(20.0, before, 5.0, soon), 19.0);
    }

    #[test]
    fn after_a_fall_the_rate_recovers_dwells_below_it_and_probes() {
        let s = learned(); // decrease: x 0.7
        let f = fall(false);
        assert_eq!(curve(f, 10 * S, &s), 70.0);
        // Concave: most of the way back in the first half.
        let half = curve(f, 10 * S + RECOVERY / 2, &s);
        assert!((half - 88.75).abs() < 1e-9, "{half}");
        assert_eq!(curve(f, 10 * S + RECOVERY, &s), 95.0);
        assert_eq!(curve(f, 10 * S + RECOVERY + DWELL - 1, &s), 95.0);
        let probe = curve(f, 10 * S + RECOVERY + DWELL + S, &s);
        assert!((probe - 95.0 * std::f64::consts::E).abs() < 1e-9, "{probe}");
    }

    #[test]
    fn after_a_pause_the_rate_dwells_further_below_longer_and_probes_gently() {
        let s = learned();
        let f = fall(true);
        assert_eq!(curve(f, 10 * S + RECOVERY, &s), 90.0);
        assert_eq!(curve(f, 10 * S + RECOVERY + FIRM_DWELL - 1, &s), 90.0);
        // Two percent of the plateau a second, added: 10 s of probing
        // adds a fifth.
        let probe = curve(f, 10 * S + RECOVERY + FIRM_DWELL + 10 * S, &s);
        assert!((probe - 108.0).abs() < 1e-9, "{probe}");
    }

    #[test]
    fn a_paused_fall_is_earned_where_its_call_was_sent() {
        // Out of slow start: before its last step.
        assert_eq!(sent_at(60.0, None, 0), 59.0);
        // After a probe: the rate itself, whatever the use.
        assert_eq!(
            sent_at(60.0, Some(fall(true)), 10 * S + RECOVERY + FIRM_DWELL),
            60.0
        );
        assert_eq!(sent_at(60.0, Some(fall(false)), 11 * S), 60.0);
        // On the plateau of a firm fall: below it, since the host refused
        // the plateau too.
        let on_plateau = sent_at(60.0, Some(fall(true)), 10 * S + RECOVERY);
        assert!((on_plateau - 54.0).abs() < 1e-9, "{on_plateau}");
    }

    #[test]
    fn growth_depends_on_time_not_on_successes() {
        let s = learned();
        let f = Some(fall(false));
        let now = 10 * S + RECOVERY / 3;
        let once = grown(70.0, f, now, &s);
        let many = (0..1_000).fold(70.0, |rate, _| grown(rate, f, now, &s));
        assert_eq!(once, many);
        // A rate above the curve (set by hand, say) is left where it is.
        assert_eq!(grown(99.0, f, now, &s), 99.0);
    }

    #[test]
    fn the_curve_is_total() {
        let s = learned();
        let f = fall(false);
        assert_eq!(curve(f, 0, &s), 70.0, "a time before the fall");
        assert!(curve(f, Nanos::MAX, &s).is_finite());
        assert_eq!(grown(500.0, Some(f), Nanos::MAX, &s), 1_000.0);
    }
}
