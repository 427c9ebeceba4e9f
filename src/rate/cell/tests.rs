//! The rate cell's tests: unit tests of each operation, the invariant of a
//! moving rate as a property, the whole range of valid rates, and its reversals.

mod operations {
    use super::super::*;
    use crate::RateConfig;

    const MS: Nanos = 1_000_000;

    fn settings(config: RateConfig) -> RateSettings {
        RateSettings::for_test(config)
    }

    #[test]
    fn an_increase_grants_no_fresh_burst() {
        let s = settings(
            RateConfig::adaptive(10.0)
                .burst(5)
                .bounds(1.0, 100.0)
                .increase_by(2.5),
        );
        let cell = RateCell::new(s.starting_rate, 0);
        for _ in 0..5 {
            assert!(cell.take_due(0, 5, 1).is_ok());
        }
        assert_eq!(cell.take_due(0, 5, 1), Err(100 * MS));
        // A quarter more rate shortens the wait for the owed token by a
        // fifth, no more.
        assert_eq!(cell.increase(|| 0, 0, 0, false, 1, &s).to, 12.5);
        assert_eq!(cell.take_due(0, 5, 1), Err(80 * MS));
    }

    #[test]
    fn a_decrease_forgives_no_debt() {
        let s = settings(
            RateConfig::adaptive(10.0)
                .burst(1)
                .bounds(1.0, 100.0)
                .decrease_by(5.0),
        );
        let cell = RateCell::new(s.starting_rate, 0);
        assert!(cell.take_due(0, 1, 1).is_ok());
        assert_eq!(cell.take_due(0, 1, 1), Err(100 * MS));
        assert_eq!(cell.decrease(0, 0, &s).to, 5.0);
        assert_eq!(cell.take_due(0, 1, 1), Err(200 * MS));
    }

    #[test]
    fn a_burst_of_failures_within_the_cooldown_lowers_the_rate_once() {
        let s = settings(
            RateConfig::adaptive(64.0)
                .bounds(1.0, 64.0)
                .increase_by(1.0)
                .decrease_factor(0.5)
                .decrease_cooldown(std::time::Duration::from_millis(100)),
        );
        let cell = RateCell::new(s.starting_rate, 0);
        for _ in 0..10 {
            cell.decrease(10 * MS, 10 * MS, &s);
        }
        assert_eq!(cell.rate(), 32.0);
        cell.decrease(110 * MS, 110 * MS, &s);
        assert_eq!(cell.rate(), 16.0);
    }

    #[test]
    fn a_learned_rate_falls_twice_when_nothing_was_served_since_its_last_fall() {
        let s = settings(RateConfig::adaptive(100.0));
        let cell = RateCell::new(s.starting_rate, 0);
        assert_eq!(cell.decrease(0, 0, &s).to, 70.0);
        // Nothing served since: far above what the host takes.
        let twice = cell.decrease(500 * MS, 500 * MS, &s).to;
        assert!((twice - 34.3).abs() < 1e-9, "{twice}");
        // A success since the last fall: one step.
        let served = cell
            .increase(|| 600 * MS, 600 * MS, 600 * MS, false, 1, &s)
            .to;
        let once = cell.decrease(1_100 * MS, 1_100 * MS, &s).to;
        assert!((once - served * 0.7).abs() < 1e-9, "{once}");
        // A decrease the user set keeps its meaning.
        let s = settings(RateConfig::adaptive(64.0).decrease_factor(0.5));
        let cell = RateCell::new(s.starting_rate, 0);
        assert_eq!(cell.decrease(0, 0, &s).to, 32.0);
        assert_eq!(cell.decrease(500 * MS, 500 * MS, &s).to, 16.0);
    }

    #[test]
    fn a_learned_rate_grows_by_time_after_its_fall_and_a_pause_marks_the_fall() {
        let s = settings(RateConfig::adaptive(100.0).bounds(1.0, 1_000.0));
        let cell = RateCell::new(s.starting_rate, 0);
        // Slow start: one call a second more per success.
        assert_eq!(cell.increase(|| 0, 0, 0, true, 1, &s).to, 101.0);
        // Out of slow start, the fall is earned before that step.
        assert_eq!(cell.decrease(MS, MS, &s).to, 101.0 * 0.7);
        let fall = cell.last_fall().unwrap();
        assert_eq!((fall.from, fall.firm), (100.0, false));
        // The pause the refusal carried marks that fall.
        cell.learn_from_pause(2 * MS, &s);
        assert!(cell.last_fall().unwrap().firm);
        assert_eq!(cell.rate(), 101.0 * 0.7);
    }

    #[test]
    fn outcomes_of_calls_scheduled_before_the_last_decrease_leave_the_rate_alone() {
        let s = settings(
            RateConfig::adaptive(64.0)
                .bounds(1.0, 64.0)
                .increase_by(1.0)
                .decrease_factor(0.5)
                .decrease_cooldown(std::time::Duration::ZERO),
        );
        let cell = RateCell::new(s.starting_rate, 0);
        // Three calls scheduled at 0, 10 and 20 ms; the first fails at 50 ms.
        assert_eq!(cell.decrease(50 * MS, 0, &s).to, 32.0);
        // The others were paced at 64/s too: old news, either way.
        assert_eq!(cell.decrease(60 * MS, 10 * MS, &s).to, 32.0);
        assert_eq!(
            cell.increase(|| 70 * MS, 20 * MS, 70 * MS, false, 1, &s).to,
            32.0
        );
        // A call scheduled after the decrease is news.
        assert_eq!(
            cell.increase(|| 80 * MS, 50 * MS, 80 * MS, false, 1, &s).to,
            33.0
        );
        assert_eq!(cell.decrease(90 * MS, 60 * MS, &s).to, 16.5);
        // Another call scheduled alongside it: the decrease answered it.
        assert_eq!(cell.decrease(90 * MS, 60 * MS, &s).to, 16.5);
        // Without a cooldown, the next call scheduled after it counts at once.
        assert_eq!(cell.decrease(90 * MS, 90 * MS, &s).to, 8.25);
    }

    #[test]
    fn a_cancelled_reservation_gives_its_token_back_only_if_last() {
        let s = settings(RateConfig::adaptive(10.0).bounds(1.0, 100.0));
        let cell = RateCell::new(s.starting_rate, 0);
        let first = cell.reserve(0, 1, 1, Nanos::MAX).unwrap();
        assert_eq!(first.slot.start, 0);
        let second = cell.reserve(0, 1, 1, Nanos::MAX).unwrap();
        let third = cell.reserve(0, 1, 1, Nanos::MAX).unwrap();
        assert_eq!((second.slot.start, third.slot.start), (100 * MS, 200 * MS));
        cell.cancel(second); // not last: the gap stays, the third keeps its time
        assert_eq!(cell.take_due(0, 1, 1), Err(300 * MS));
        cell.cancel(third); // last: handed back
        assert_eq!(cell.take_due(0, 1, 1), Err(200 * MS));
    }

    #[test]
    fn a_reservation_beyond_max_wait_takes_nothing() {
        let s = settings(RateConfig::adaptive(10.0).bounds(1.0, 100.0));
        let cell = RateCell::new(s.starting_rate, 0);
        for expected in [0, 100 * MS, 200 * MS] {
            assert_eq!(
                cell.reserve(0, 1, 1, 200 * MS).unwrap().slot.start,
                expected
            );
        }
        assert_eq!(cell.reserve(0, 1, 1, 200 * MS), Err(300 * MS));
        assert_eq!(
            cell.reserve(0, 1, 1, 200 * MS),
            Err(300 * MS),
            "the refusal took no token"
        );
        assert_eq!(
            cell.reserve(100 * MS, 1, 1, 200 * MS).unwrap().slot.start,
            300 * MS
        );
    }
}

mod properties {
    //! The invariant of a rate that moves: over any interval, the calls
    //! admitted never exceed what the fastest rate in force could allow plus
    //! one burst, whatever interleaving of calls, waits, cancellations and
    //! rate changes led there.

    use super::super::*;
    use crate::rate::RateConfig;
    use crate::rate::config::Decrease;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum CellOp {
        Check,
        Wait,
        CancelLastWait,
        Increase,
        Decrease,
        Advance(u64),
    }

    fn op() -> impl Strategy<Value = CellOp> {
        prop_oneof![
            4 => Just(CellOp::Check),
            3 => Just(CellOp::Wait),
            1 => Just(CellOp::CancelLastWait),
            2 => Just(CellOp::Increase),
            2 => Just(CellOp::Decrease),
            3 => (1u64..2_000_000_000).prop_map(CellOp::Advance),
        ]
    }

    fn config() -> impl Strategy<Value = RateConfig> {
        (
            0.5f64..50.0,
            1u32..8,
            0.0f64..20.0,
            prop_oneof![
                (0.0f64..30.0).prop_map(Decrease::Subtract),
                (0.05f64..1.0).prop_map(Decrease::Multiply),
            ],
            0u64..500,
        )
            .prop_map(|(start, burst, increment, decrease, cooldown_ms)| {
                let config = RateConfig::adaptive(start)
                    .burst(burst)
                    .bounds(0.5, 100.0)
                    .increase_by(increment)
                    .decrease_cooldown(std::time::Duration::from_millis(cooldown_ms));
                match decrease {
                    Decrease::Subtract(step) => config.decrease_by(step),
                    Decrease::Multiply(factor) => config.decrease_factor(factor),
                }
            })
    }

    /// A call that was let through: when it was decided and when it started.
    #[derive(Debug, Clone, Copy)]
    struct TakenAt {
        decided: Nanos,
        started: Nanos,
    }

    /// The waiters look at `now`, as `Core::sleep_for_token` does when
    /// its token is due or a rise wakes it: each moves by the changes it
    /// has not seen, and those due by `now` start.
    fn wake(
        cell: &RateCell,
        pending: &mut Vec<(Reservation, usize, u64)>,
        admitted: &mut [TakenAt],
        now: Nanos,
    ) {
        pending.retain_mut(|(_, index, seen)| {
            let call = &mut admitted[*index];
            loop {
                let moved = cell.moved_start(call.started, seen);
                if moved == call.started {
                    return call.started > now;
                }
                call.started = moved;
            }
        });
    }

    /// Over any span between two starts, the calls admitted never exceed
    /// what the fastest rate in force from the earliest decision among them
    /// to the last start allows, plus one burst. `calls`: (decided,
    /// started); `rates`: (from, rate), in time order.
    pub(super) fn within_the_fastest_rate_plus_one_burst(
        mut calls: Vec<(Nanos, Nanos)>,
        rates: &[(Nanos, f64)],
        burst: u32,
    ) -> Result<(), String> {
        calls.sort_by_key(|&(_, started)| started);
        for first in 0..calls.len() {
            let mut decided_from = calls[first].0;
            for last in first..calls.len() {
                decided_from = decided_from.min(calls[last].0);
                let until = calls[last].1;
                let span = (until - calls[first].1) as f64 / 1e9;
                let fastest = rates
                    .iter()
                    .enumerate()
                    .filter(|(i, (from, _))| {
                        *from <= until
                            && rates
                                .get(i + 1)
                                .is_none_or(|(next, _)| *next >= decided_from)
                    })
                    .map(|(_, (_, rate))| *rate)
                    .fold(0.0, f64::max);
                let count = (last - first + 1) as f64;
                let allowed = fastest * span * (1.0 + 1e-6) + f64::from(burst);
                if count > allowed + 1e-9 {
                    return Err(format!(
                        "{count} calls in {span}s at most {fastest}/s with burst {burst}"
                    ));
                }
            }
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn admitted_calls_never_exceed_the_fastest_rate_plus_one_burst(
            config in config(),
            ops in proptest::collection::vec(op(), 1..200),
        ) {
            let settings = RateSettings::for_test(config);
            let cell = RateCell::new(settings.starting_rate, 0);
            let mut now: Nanos = 0;
            let mut admitted: Vec<TakenAt> = Vec::new();
            // Calls waiting for their tokens: what they took, their index
            // in `admitted`, and the falls they have seen move the queue.
            let mut pending: Vec<(Reservation, usize, u64)> = Vec::new();
            // (time, rate from then on)
            let mut rates: Vec<(Nanos, f64)> = vec![(0, settings.starting_rate)];
            for op in ops {
                match op {
                    CellOp::Check => {
                        if cell.take_due(now, settings.burst, 1).is_ok() {
                            admitted.push(TakenAt { decided: now, started: now });
                        }
                    }
                    CellOp::Wait => {
                        let reservation = cell.reserve(now, settings.burst, 1, Nanos::MAX).unwrap();
                        prop_assert!(reservation.slot.start >= now);
                        admitted.push(TakenAt { decided: now, started: reservation.slot.start });
                        // A token due now is used now; only one ahead sleeps.
                        if reservation.slot.start > now {
                            pending.push((reservation, admitted.len() - 1, reservation.moves_seen));
                        }
                    }
                    CellOp::CancelLastWait => {
                        if let Some((reservation, index, _)) = pending.pop() {
                            if admitted[index].started > now {
                                cell.cancel(reservation);
                                admitted.remove(index);
                                pending.retain(|(_, i, _)| *i < index);
                            }
                        }
                    }
                    CellOp::Increase => {
                        rates.push((now, cell.increase(|| now, now, now, false, 1, &settings).to));
                        // A rise that moved waiters back wakes them.
                        wake(&cell, &mut pending, &mut admitted, now);
                    }
                    CellOp::Decrease => rates.push((now, cell.decrease(now, now, &settings).to)),
                    CellOp::Advance(by) => {
                        now += by;
                        wake(&cell, &mut pending, &mut admitted, now);
                    }
                }
                let rate = cell.rate();
                prop_assert!(rate.is_finite());
                prop_assert!((settings.lower_bound..=settings.upper_bound).contains(&rate));
            }
            wake(&cell, &mut pending, &mut admitted, Nanos::MAX);
            let admitted: Vec<(Nanos, Nanos)> =
                admitted.iter().map(|a| (a.decided, a.started)).collect();
            let within = within_the_fastest_rate_plus_one_burst(admitted, &rates, settings.burst);
            prop_assert!(within.is_ok(), "{}", within.unwrap_err());
        }
    }
}

mod slowest_rates {
    //! The whole valid range of rates, down to the slowest one: no rate a
    //! config can hold turns limiting off.

    use super::super::*;
    use crate::rate::{RateConfig, slowest_rate};
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Calls at random times, some years apart, against a rate between
        /// the slowest valid one and a million times that: in any span T,
        /// at most burst + rate * T + 1 are admitted.
        #[test]
        fn admitted_calls_stay_within_the_rate_down_to_the_slowest(
            burst in 1u32..64,
            times_slowest in 1.0f64..1e6,
            gaps in proptest::collection::vec(0u64..(1 << 54), 1..200),
        ) {
            let rate = slowest_rate(burst) * times_slowest;
            let config = RateConfig::adaptive(rate).burst(burst).bounds(rate, rate);
            let settings = RateSettings::for_test(config);
            let cell = RateCell::new(settings.starting_rate, 0);
            let mut now: Nanos = 0;
            let mut admitted: Vec<Nanos> = Vec::new();
            for gap in gaps {
                now += gap;
                if cell.take_due(now, burst, 1).is_ok() {
                    admitted.push(now);
                }
            }
            for (i, &first) in admitted.iter().enumerate() {
                for (j, &last) in admitted.iter().enumerate().skip(i) {
                    let calls = (j - i + 1) as f64;
                    let span = (last - first) as f64 / 1e9;
                    let allowed = f64::from(burst) + rate * span * (1.0 + 1e-9) + 1.0;
                    prop_assert!(calls <= allowed, "{calls} calls in {span}s at {rate}/s, burst {burst}");
                }
            }
        }
    }

    #[test]
    fn a_rate_too_slow_to_count_is_refused_naming_the_smallest() {
        let error = RateConfig::adaptive(1e-9).burst(20).validate().unwrap_err();
        let problems = error.problems();
        assert_eq!(problems.len(), 1, "{error}");
        assert_eq!(problems[0].field(), "rate.starting_rate");
        assert!(
            problems[0]
                .message()
                .contains(&format!("{:e}", slowest_rate(20))),
            "{error}"
        );
        let error = RateConfig::adaptive(1.0)
            .bounds(1e-12, 2.0)
            .validate()
            .unwrap_err();
        assert_eq!(error.problems()[0].field(), "rate.lower_bound");
    }
}

mod reversals {
    use super::super::*;
    use crate::RateConfig;

    #[test]
    fn a_change_reports_a_reversal_only_when_it_reverses_the_last() {
        let s = RateSettings::for_test(
            RateConfig::adaptive(10.0)
                .bounds(1.0, 20.0)
                .increase_by(1.0)
                .decrease_by(1.0),
        );
        let cell = RateCell::new(s.starting_rate, 0);
        assert_eq!(cell.increase(|| 0, 0, 0, false, 1, &s).reversed, None);
        assert_eq!(cell.decrease(0, 0, &s).reversed, Some(Reversal::Down));
        assert_eq!(cell.decrease(0, 0, &s).reversed, None);
        assert_eq!(
            cell.increase(|| 0, 0, 0, false, 1, &s).reversed,
            Some(Reversal::Up)
        );
        assert_eq!(
            cell.rate(),
            10.0,
            "the direction bit never shows in the rate"
        );
    }
}

mod concurrent_falls {
    //! Real threads on a clock they share: calls wait for their tokens and
    //! move at falls of the rate, while the rate falls and rises under
    //! them. The single-threaded property above, under real interleavings.
    //! (Its bound counts the fastest rate since a window's earliest
    //! decision, so it is loose for calls placed before a fall: moving
    //! twice, which the single-threaded property catches, passes here.
    //! What this adds is the interleavings.)

    use super::super::*;
    use super::properties::within_the_fastest_rate_plus_one_burst;
    use crate::rate::RateConfig;
    use std::sync::Mutex as StdMutex;

    /// Virtual time a tick.
    const STEP: Nanos = 200_000;
    /// The last time a waiter takes a token.
    const END: Nanos = 2_000_000_000;
    const WAITERS: usize = 6;

    #[test]
    fn waiters_moved_by_concurrent_falls_never_exceed_the_fastest_rate_plus_one_burst() {
        let settings = RateSettings::for_test(
            RateConfig::adaptive(400.0)
                .burst(4)
                .bounds(50.0, 1_000.0)
                .increase_by(30.0)
                .decrease_factor(0.7)
                .decrease_cooldown(std::time::Duration::ZERO),
        );
        let cell = RateCell::new(settings.starting_rate, 0);
        let clock = AtomicU64::new(0);
        // When each waiter is next due (`Nanos::MAX`: gone). Time moves only
        // once no waiter is due and not yet woken.
        let due: Vec<AtomicU64> = (0..WAITERS).map(|_| AtomicU64::new(0)).collect();
        // (decided, started) of every call, and (time, rate from then on).
        let calls = StdMutex::new(Vec::new());
        let rates = StdMutex::new(vec![(0, settings.starting_rate)]);
        std::thread::scope(|scope| {
            for due in &due {
                let (cell, clock, calls, settings) = (&cell, &clock, &calls, &settings);
                scope.spawn(move || {
                    let mut mine = Vec::new();
                    loop {
                        let decided = clock.load(Ordering::Acquire);
                        if decided >= END {
                            break;
                        }
                        let reservation = cell
                            .reserve(decided, settings.burst, 1, Nanos::MAX)
                            .unwrap();
                        let (mut start, mut seen) =
                            (reservation.slot.start, reservation.moves_seen);
                        loop {
                            due.store(start, Ordering::Release);
                            while clock.load(Ordering::Acquire) < start {
                                std::thread::yield_now();
                                // A rise that moves it back wakes it.
                                let moved = cell.moved_start(start, &mut seen);
                                if moved != start {
                                    start = moved;
                                    due.store(start, Ordering::Release);
                                }
                            }
                            let moved = cell.moved_start(start, &mut seen);
                            if moved == start {
                                break;
                            }
                            start = moved;
                        }
                        mine.push((decided, start));
                    }
                    calls.lock().unwrap().extend(mine);
                    due.store(Nanos::MAX, Ordering::Release);
                });
            }
            // A change of the rate comes right after each tick, while the
            // waiters it woke look again.
            scope.spawn(|| {
                let mut state = 0x9E37_79B9_7F4A_7C15u64;
                loop {
                    let now = clock.load(Ordering::Acquire);
                    while due.iter().any(|due| due.load(Ordering::Acquire) <= now) {
                        std::thread::yield_now();
                    }
                    if due
                        .iter()
                        .all(|due| due.load(Ordering::Acquire) == Nanos::MAX)
                    {
                        break;
                    }
                    let now = clock.fetch_add(STEP, Ordering::AcqRel) + STEP;
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    let change = match state % 32 {
                        0 => cell.decrease(now, now, &settings),
                        1..=3 => cell.increase(|| now, now, now, true, 1, &settings),
                        _ => continue,
                    };
                    if change.to != change.from {
                        rates.lock().unwrap().push((now, change.to));
                    }
                }
            });
        });
        let calls = calls.into_inner().unwrap();
        let rates = rates.into_inner().unwrap();
        // About 280 calls, 1,300 changes and 135 falls that moved waiters
        // in a run (`moves` counts two a fall): the test is about the moves.
        assert!(calls.len() > 150, "{} calls", calls.len());
        assert!(
            cell.moves() > 80,
            "{} (two a fall that moved waiters)",
            cell.moves()
        );
        let within = within_the_fastest_rate_plus_one_burst(calls, &rates, settings.burst);
        assert!(within.is_ok(), "{}", within.unwrap_err());
    }
}

#[test]
fn a_decrease_stamp_reads_back_near_any_time_across_its_wrap() {
    use super::{DecreaseStamp, Nanos};
    let wrap: Nanos = 1 << 42;
    for at in [
        0,
        1_000,
        5 * wrap + 123_456_789,
        7 * wrap - 2_048,
        u64::MAX / 2,
    ] {
        let stamp = DecreaseStamp::at(at);
        let unit = 1 << DecreaseStamp::SHIFT;
        for near in [
            at,
            at + 30 * 60 * 1_000_000_000,
            at.saturating_sub(30 * 60 * 1_000_000_000),
        ] {
            let read = stamp.near(near).unwrap();
            assert!(
                read <= at && at - read < 2 * unit,
                "{at} read near {near} as {read}"
            );
        }
    }
    assert_eq!(DecreaseStamp(0).near(12_345), None);
}
