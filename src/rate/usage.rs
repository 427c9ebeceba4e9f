//! How fast a key's calls have recently succeeded, as pure maths on one
//! packed word: the "use" that rate validation compares the rate against.
//!
//! A success may raise a key's rate only while the rate is what limits the
//! key's calls (TCP's congestion-window validation, RFC 7661, grows the
//! window only while the sender fills it). A key whose calls come at 5/s
//! learns nothing about 50/s from them, however many succeed: without
//! validation, a rate of 10/s climbed past 80/s on such a key, and the
//! first second of a spike then sent the backend far more than it had ever
//! been shown to take.
//!
//! The word holds when the current window started (a 32-bit stamp of about
//! a millisecond) and the successes counted since (in 256ths, so a folded
//! count keeps its fraction). The used rate is the count over the window's
//! length; a window is between [`WINDOW`] and twice that long: once older,
//! it is folded into one of [`WINDOW`] with the same average, so the
//! estimate moves smoothly. A key used less than once a window shows about
//! one success per window: validation lets such a key's rate reach 2/s
//! whatever its use, a bound, not a drift.

use crate::clock::Nanos;

/// The span over which use is measured: between one and two of these.
pub(crate) const WINDOW: Nanos = 1_000_000_000;

/// A count of 1 in the word: counts are kept in 256ths.
const ONE: u32 = 256;

/// One stamp unit: 2^20 ns, about 1.05 ms. 32 bits of them wrap after
/// about 52 days: a key idle that long (and not evicted) may misjudge its
/// first success's window, once.
const STAMP_SHIFT: u32 = 20;

/// The estimate of use, and the word that holds it next.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Used {
    pub(crate) word: u64,
    /// Successes per second over the current window.
    pub(crate) per_second: f64,
}

/// The word of a key created at `now`: an empty window.
pub(crate) fn fresh(now: Nanos) -> u64 {
    pack(stamp(now), 0)
}

/// `word` after one success at `now` of a call that took `tokens` (use
/// is counted in tokens, as the rate is), for a key whose rate is `rate`.
/// The window's length counts one interval at `rate` beyond the elapsed
/// time, so successes at one instant (a new key, a test on a stopped
/// clock) show as use at no more than `count` times the rate.
pub(crate) fn record(word: u64, now: Nanos, rate: f64, tokens: u32) -> Used {
    let (mut start, mut count) = unpack(word);
    let now_stamp = stamp(now);
    let mut elapsed = nanos_of(now_stamp.wrapping_sub(start));
    if elapsed >= 2 * WINDOW {
        // Fold into one window with the same average.
        let kept = f64::from(count) * WINDOW as f64 / elapsed as f64;
        count = kept as u32;
        start = now_stamp.wrapping_sub(stamp(WINDOW));
        elapsed = WINDOW;
    }
    // Saturates at 16.7 million successes a window: use beyond that
    // validates any rate a key can have below 8 million a second.
    count = count.saturating_add(ONE.saturating_mul(tokens));
    let interval = if rate > 0.0 { 1.0 / rate } else { 0.0 };
    let seconds = elapsed as f64 / 1e9 + interval;
    Used {
        word: pack(start, count),
        per_second: f64::from(count) / f64::from(ONE) / seconds,
    }
}

/// The use per second `word` shows at `now`, counting nothing: the
/// successes of its window over the window's length, at least one
/// [`WINDOW`] (a window just begun shows no burst of use).
pub(crate) fn read(word: u64, now: Nanos) -> f64 {
    let (start, count) = unpack(word);
    let elapsed = nanos_of(stamp(now).wrapping_sub(start)).max(WINDOW);
    f64::from(count) / f64::from(ONE) / (elapsed as f64 / 1e9)
}

fn stamp(at: Nanos) -> u32 {
    (at >> STAMP_SHIFT) as u32
}

fn nanos_of(stamps: u32) -> Nanos {
    Nanos::from(stamps) << STAMP_SHIFT
}

fn pack(start: u32, count: u32) -> u64 {
    u64::from(start) << 32 | u64::from(count)
}

fn unpack(word: u64) -> (u32, u32) {
    ((word >> 32) as u32, word as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MS: Nanos = 1_000_000;

    /// Successes at `per_second`, evenly spaced, for `seconds`; the last
    /// estimate.
    fn steady(per_second: f64, seconds: f64, rate: f64) -> f64 {
        let mut word = fresh(0);
        let gap = (1e9 / per_second) as Nanos;
        let calls = (per_second * seconds) as u64;
        let mut last = 0.0;
        for i in 1..=calls {
            let used = record(word, i * gap, rate, 1);
            word = used.word;
            last = used.per_second;
        }
        last
    }

    #[test]
    fn reading_the_use_counts_nothing_and_fades_with_quiet() {
        let mut word = fresh(0);
        for i in 1..=50 {
            word = record(word, i * 20 * MS, 100.0, 1).word;
        }
        let busy = read(word, 1_000 * MS);
        assert!((45.0..=55.0).contains(&busy), "{busy}");
        assert_eq!(read(word, 1_000 * MS), busy);
        // Ten quiet seconds later, the same successes over eleven seconds.
        let quiet = read(word, 11_000 * MS);
        assert!(quiet < 6.0, "{quiet}");
    }

    #[test]
    fn a_steady_stream_is_measured_at_its_rate() {
        // Within one success a window, and 5 %.
        for per_second in [2.0, 5.0, 50.0, 5_000.0] {
            let measured = steady(per_second, 30.0, 100.0);
            let error = (measured - per_second).abs();
            assert!(
                error <= 1.0 + 0.05 * per_second,
                "{per_second}/s measured {measured}"
            );
        }
    }

    #[test]
    fn a_stream_slower_than_a_window_shows_as_about_one_a_window() {
        for per_second in [0.01, 0.1, 0.5] {
            let measured = steady(per_second, 100.0, 100.0);
            assert!(
                (0.9..=2.0).contains(&measured),
                "{per_second}/s measured {measured}"
            );
        }
    }

    #[test]
    fn successes_at_one_instant_count_as_the_rate_times_their_number() {
        let mut word = fresh(0);
        for n in 1..=3 {
            let used = record(word, 0, 10.0, 1);
            assert_eq!(used.per_second, 10.0 * f64::from(n));
            word = used.word;
        }
    }

    #[test]
    fn use_fades_once_calls_stop() {
        let mut word = fresh(0);
        for i in 0..100 {
            word = record(word, i * 10 * MS, 100.0, 1).word;
        }
        // Five seconds later, one success: the hundred are folded away.
        let later = record(word, 6_000 * MS, 100.0, 1);
        assert!(later.per_second < 20.0, "{}", later.per_second);
    }

    proptest! {
        /// Whatever the stream's rate, phase and jitter, once it has run
        /// for a few windows its rate is measured within a factor of two:
        /// validation neither invents use nor misses it. (The key's rate is
        /// at least the stream's: a rate paces its calls, so a faster
        /// stream is a burst, which the window's interval term discounts.)
        #[test]
        fn a_jittered_stream_is_measured_within_a_factor_of_two(
            per_second in 1.0f64..2_000.0,
            phase in 0u64..1_000,
            jitter in proptest::collection::vec(-0.5f64..0.5, 64),
            times_the_stream in 1.0f64..100.0,
        ) {
            let rate = per_second * times_the_stream;
            let gap = 1e9 / per_second;
            let mut word = fresh(phase * MS);
            let calls = (per_second * 4.0).ceil() as usize + 1;
            let mut measured = 0.0;
            for i in 1..=calls {
                let wobble = jitter[i % jitter.len()] * gap;
                let at = phase * MS + (i as f64 * gap + wobble) as Nanos;
                let used = record(word, at, rate, 1);
                word = used.word;
                measured = used.per_second;
            }
            prop_assert!(measured <= 2.0 * per_second && measured >= per_second / 2.0,
                "{per_second}/s measured {measured}");
        }
    }
}
