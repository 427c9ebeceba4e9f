//! The token bucket as pure maths: GCRA with an emission interval that may
//! change between calls.
//!
//! The whole state of a bucket is one number, the *theoretical arrival time*
//! (`tat`): the time at which the bucket would be full again if nothing else
//! happened. A bucket with `tat <= now` is full. Each admitted call pushes
//! `tat` one interval further for each token it costs (one, unless the
//! caller says otherwise); a call may start once `tat` (after its own
//! push) lies at most `burst` intervals ahead of it. So a call costing
//! more than `burst` tokens never fits: the manager refuses it before it
//! gets here.
//!
//! governor implements the same algorithm, but its interval is fixed for the
//! life of a limiter (`Quota`). Here the interval follows the key's rate, so
//! a rate change [`rescale`]s the debt: the number of *tokens* owed stays the
//! same, and only the time to repay them changes. That is what keeps a rate
//! change from granting a fresh burst (increase) or forgiving debt (decrease).
//!
//! Every function is a total function of integers: no clock, no atomics, no
//! panics (all arithmetic saturates).

use crate::clock::Nanos;

/// The emission interval for `rate` calls per second, in nanoseconds (at
/// least 1). `rate` has been validated: finite and in `(0, 1e9]`.
#[inline]
pub(crate) fn interval(rate: f64) -> Nanos {
    // Float-to-int casts saturate, so even an unvalidated tiny rate yields a
    // huge interval (throttle everything), never a zero one (throttle nothing).
    // `+ 0.5` rounds (the value is positive) without a call to libm's round.
    ((1e9 / rate + 0.5) as Nanos).max(1)
}

/// Where one more call would land in a bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TimeSlot {
    /// The bucket's `tat` once the call is counted.
    pub(crate) tat: Nanos,
    /// The earliest time the call may start (`>= now`).
    pub(crate) start: Nanos,
}

/// Places one call costing `cost` tokens in the bucket described by
/// `tat`, at `now`. A call of cost 0 takes nothing, and may start once
/// the calls ahead of it fit in the burst.
#[inline]
pub(crate) fn slot(tat: Nanos, now: Nanos, interval: Nanos, burst: u32, cost: u32) -> TimeSlot {
    let new_tat = tat
        .max(now)
        .saturating_add(interval.saturating_mul(u64::from(cost)));
    let tolerance = interval.saturating_mul(u64::from(burst));
    TimeSlot {
        tat: new_tat,
        start: new_tat.saturating_sub(tolerance).max(now),
    }
}

/// The `tat` after the interval changes from `old_interval` to
/// `new_interval` at `now`: the tokens owed stay the same, only the time to
/// repay them changes. Rounds up, so no debt is ever forgiven.
///
/// Calls already scheduled by a `wait` keep their start times, the last of
/// them at `tat - burst * old_interval` (a later start would make that
/// waiter's own slot non-conforming). Debt up to that start is theirs and is
/// paid by their sleeping; only the debt after it is rescaled. Rescaling from
/// `now` instead would let an increase schedule newcomers in between sleeping
/// waiters, closer together than either rate allows.
pub(crate) fn rescale(
    tat: Nanos,
    now: Nanos,
    old_interval: Nanos,
    new_interval: Nanos,
    burst: u32,
) -> Nanos {
    let last_scheduled_start = tat.saturating_sub(old_interval.saturating_mul(u64::from(burst)));
    let anchor = now.max(last_scheduled_start);
    if tat <= anchor || old_interval == new_interval {
        return tat;
    }
    let debt = u128::from(tat - anchor);
    let scaled = (debt * u128::from(new_interval)).div_ceil(u128::from(old_interval));
    anchor.saturating_add(u64::try_from(scaled).unwrap_or(u64::MAX))
}

/// The `tat` after a call that took `slot` is cancelled before it started,
/// or `None` when the slot can't be handed back.
///
/// A slot is handed back only while it is still the last one taken (`tat`
/// equals the slot's `tat`): a later waiter already holds the time after it,
/// and moving that waiter earlier is not possible, so the gap stays. This is
/// what golang.org/x/time/rate does on `Reservation.Cancel`, and it means a
/// cancelled wait never delays anyone already waiting.
/// `spacing` is what the slot's call pushed `tat` by: its cost in
/// intervals.
pub(crate) fn cancel(tat: Nanos, slot: TimeSlot, spacing: Nanos) -> Option<Nanos> {
    (tat == slot.tat).then(|| slot.tat.saturating_sub(spacing))
}

/// The `tat` once `spacing` more is owed from `now`: a call's cost,
/// settled above what it took. The debt may pass the burst: later calls
/// wait it out.
pub(crate) fn charged(tat: Nanos, now: Nanos, spacing: Nanos) -> Nanos {
    tat.max(now).saturating_add(spacing)
}

/// How much of `spacing` a call may give back at `now`: the part of its
/// tokens' time that still lies ahead. Its tokens took the time up to
/// `end`, and earlier give-backs have since moved that time forward by at
/// most `shifted`; the time before `now` has already refilled the bucket
/// (calls after it may have used it), so it is not the call's to give.
///
/// Giving back this much keeps the bucket at or above where it would be
/// had the call cost that much less from the start: what the bucket admits
/// stays within `rate × T + burst` of the settled costs.
pub(crate) fn returnable(end: Nanos, shifted: Nanos, now: Nanos, spacing: Nanos) -> Nanos {
    end.saturating_sub(shifted).saturating_sub(now).min(spacing)
}

/// The `tat` once `returned` (see [`returnable`]) is given back at `now`:
/// the debt shrinks by it, never below an empty one.
pub(crate) fn given_back(tat: Nanos, now: Nanos, returned: Nanos) -> Nanos {
    if tat > now {
        tat.saturating_sub(returned).max(now)
    } else {
        tat
    }
}

/// What a bucket holds at `now`: how many calls could start now, how long
/// until one more could (zero for a full bucket, which gains nothing
/// more), and how long until it is full (the debt).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Remaining {
    pub(crate) available: u32,
    pub(crate) next_in: Nanos,
    pub(crate) full_in: Nanos,
}

/// The [`Remaining`] calls of the bucket described by `tat`, at `now`.
///
/// The `k`-th call from now may start at once while the debt (`tat - now`)
/// plus `k` intervals fits in the tolerance (`burst` intervals).
pub(crate) fn remaining(tat: Nanos, now: Nanos, interval: Nanos, burst: u32) -> Remaining {
    let debt = tat.saturating_sub(now);
    let tolerance = interval.saturating_mul(u64::from(burst));
    let fits = tolerance.saturating_sub(debt) / interval.max(1);
    let available = u32::try_from(fits).unwrap_or(u32::MAX).min(burst);
    let next_in = if debt == 0 {
        0
    } else {
        debt.saturating_add(interval.saturating_mul(u64::from(available) + 1))
            .saturating_sub(tolerance)
    };
    Remaining {
        available,
        next_in,
        full_in: debt,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = 1_000_000;
    const SEC: Nanos = 1_000 * MS;

    #[test]
    fn a_full_bucket_admits_burst_calls_at_once_then_one_per_interval() {
        let (interval, burst) = (100 * MS, 3);
        let mut tat = 0;
        let now = 1_000 * MS;
        for _ in 0..3 {
            let s = slot(tat, now, interval, burst, 1);
            assert_eq!(s.start, now);
            tat = s.tat;
        }
        let fourth = slot(tat, now, interval, burst, 1);
        assert_eq!(fourth.start, now + interval);
    }

    #[test]
    fn a_call_takes_as_many_intervals_as_it_costs() {
        let (interval, burst, now) = (100 * MS, 20, 1_000 * MS);
        // Five tokens from a full bucket of 20: at once, 500 ms of debt.
        let five = slot(0, now, interval, burst, 5);
        assert_eq!((five.tat, five.start), (now + 500 * MS, now));
        // The rest of the burst, 15, still fits; one more token does not.
        let rest = slot(five.tat, now, interval, burst, 15);
        assert_eq!(rest.start, now);
        assert_eq!(
            slot(rest.tat, now, interval, burst, 1).start,
            now + interval
        );
        // Cost 0 takes nothing, and waits only for what is ahead of it.
        assert_eq!(slot(rest.tat, now, interval, burst, 0).tat, rest.tat);
        assert_eq!(slot(rest.tat, now, interval, burst, 0).start, now);
        // Handing back five tokens takes back exactly their debt.
        assert_eq!(cancel(five.tat, five, 5 * interval), Some(now));
    }

    #[test]
    fn interval_is_never_zero_and_saturates_for_tiny_rates() {
        assert_eq!(interval(10.0), 100 * MS);
        assert_eq!(interval(1e9), 1);
        assert_eq!(interval(1e12), 1);
        // An unsigned underflow (a known bug of earlier rate limiters) made a tiny
        // rate unlimited; here it
        // is the slowest rate there is.
        assert_eq!(interval(1e-30), u64::MAX);
        assert_eq!(interval(0.0), u64::MAX);
    }

    #[test]
    fn rescale_keeps_the_tokens_owed() {
        // Two tokens owed at 100 ms each are two tokens owed at 50 ms each.
        assert_eq!(
            rescale(1_200 * MS, 1_000 * MS, 100 * MS, 50 * MS, 2),
            1_100 * MS
        );
        assert_eq!(
            rescale(1_100 * MS, 1_000 * MS, 50 * MS, 100 * MS, 2),
            1_200 * MS
        );
        // A full bucket stays full.
        assert_eq!(
            rescale(900 * MS, 1_000 * MS, 100 * MS, 50 * MS, 1),
            900 * MS
        );
        // Rounds up: a third of a nanosecond is still owed.
        assert_eq!(rescale(1, 0, 3, 1, 1), 1);
    }

    #[test]
    fn rescale_leaves_the_debt_of_scheduled_waiters_alone() {
        // Burst 1, a waiter scheduled at 1_300 ms (tat 1_400 ms): at twice the
        // rate, the next call may start 50 ms after that waiter, not earlier.
        assert_eq!(
            rescale(1_400 * MS, 1_000 * MS, 100 * MS, 50 * MS, 1),
            1_350 * MS
        );
        // At half the rate, 200 ms after it.
        assert_eq!(
            rescale(1_400 * MS, 1_000 * MS, 100 * MS, 200 * MS, 1),
            1_500 * MS
        );
    }

    #[test]
    fn only_the_last_slot_can_be_handed_back() {
        let interval = 100 * MS;
        let first = slot(2_000 * MS, 1_000 * MS, interval, 1, 1);
        let second = slot(first.tat, 1_000 * MS, interval, 1, 1);
        assert_eq!(cancel(second.tat, first, interval), None);
        assert_eq!(cancel(second.tat, second, interval), Some(first.tat));
    }

    #[test]
    fn remaining_counts_the_calls_that_would_start_now() {
        let (interval, burst, now) = (100 * MS, 3, 1_000 * MS);
        let mut tat = 0;
        assert_eq!(
            remaining(tat, now, interval, burst),
            Remaining {
                available: 3,
                next_in: 0,
                full_in: 0,
            }
        );
        // Each call taken leaves one fewer, and what `remaining` says is
        // what slot then does; the bucket is full again once its debt is
        // paid, an interval a call taken.
        for left in (0..3).rev() {
            tat = slot(tat, now, interval, burst, 1).tat;
            let room = remaining(tat, now, interval, burst);
            assert_eq!(room.available, left);
            assert_eq!(room.next_in, 100 * MS);
            assert_eq!(room.full_in, u64::from(3 - left) * 100 * MS);
        }
        assert_eq!(slot(tat, now, interval, burst, 1).start, now + 100 * MS);
        // 30 ms later, the next token is 70 ms away.
        assert_eq!(
            remaining(tat, now + 30 * MS, interval, burst).next_in,
            70 * MS
        );
        // Debt beyond the tolerance (calls scheduled ahead): none now, and
        // the next once the debt is back within it.
        let room = remaining(now + 500 * MS, now, interval, burst);
        assert_eq!(
            room,
            Remaining {
                available: 0,
                next_in: 300 * MS,
                full_in: 500 * MS,
            }
        );
    }

    #[test]
    fn a_settled_cost_is_owed_from_now_or_what_lies_ahead_is_given_back() {
        let now = 10 * SEC;
        // Owed from now, past the burst if need be.
        assert_eq!(charged(now - SEC, now, 200 * MS), now + 200 * MS);
        assert_eq!(charged(now + SEC, now, 200 * MS), now + 1_200 * MS);
        // A call's tokens up to `end`: what lies ahead of now is returnable.
        assert_eq!(returnable(now + SEC, 0, now, 300 * MS), 300 * MS);
        assert_eq!(returnable(now + 100 * MS, 0, now, 300 * MS), 100 * MS);
        assert_eq!(returnable(now - MS, 0, now, 300 * MS), 0);
        // ... less what earlier give-backs may have moved it by.
        assert_eq!(returnable(now + SEC, 950 * MS, now, 300 * MS), 50 * MS);
        // The debt shrinks, never below empty; a full bucket has none.
        assert_eq!(given_back(now + SEC, now, 300 * MS), now + 700 * MS);
        assert_eq!(given_back(now + 100 * MS, now, 300 * MS), now);
        assert_eq!(given_back(now - SEC, now, 300 * MS), now - SEC);
        assert_eq!(charged(u64::MAX - 1, 0, u64::MAX), u64::MAX);
    }

    #[test]
    fn arithmetic_saturates_instead_of_wrapping() {
        let s = slot(u64::MAX - 1, 0, u64::MAX, u32::MAX, u32::MAX);
        assert_eq!(s.tat, u64::MAX);
        assert_eq!(s.start, 0);
        assert_eq!(rescale(u64::MAX, 0, 1, u64::MAX, u32::MAX), u64::MAX);
    }
}
