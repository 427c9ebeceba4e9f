//! How a fall of the rate moves the calls already waiting for their tokens,
//! as pure maths.
//!
//! A call that waits for its token holds a start time in the bucket's debt
//! ([`gcra::rescale`] leaves those alone). Many callers keep as many such
//! calls queued, paced at the rate they were placed at; if a fall left
//! them there, a backend that answered "too fast" would go on receiving
//! the queue at the pace it refused.
//!
//! So a fall while calls wait stretches the waiters' part of the debt too,
//! from the time of the fall, halfway to the new pace: the spacing goes
//! from the old interval to the mean of the old and the new one. A waiter
//! due at `s` when the spacing grew `q` times at `f` is next due at
//! `f + (s - f) * q`. The queue keeps its order; the burst after the last
//! waiter is rescaled as debt to the new rate, as any rate change does, so
//! calls placed after the fall go at the new pace. Each waiter looks again
//! when it wakes ([`Fall::moved`]).
//!
//! Why halfway: a decrease lands below what the backend takes, on purpose,
//! and the rate climbs back from there; a queue moved all the way spends
//! its whole length at the bottom of that climb. Halfway keeps most of
//! what the backend refuses off it and most of its capacity used (the
//! simulator's figures for none, all the way and halfway are in
//! `benches/README.md`).
//!
//! Only calls that booked their tokens are moved, and a call books its
//! token only within a few milliseconds of it
//! ([`line`](super::line)): calls further back wait in the key's line,
//! take nothing, and leave at whatever pace the rate has when their turn
//! comes. The queue remembers the pace a fall set it to ([`Paced`]) for as
//! long as the calls it moved are waiting: a later fall stretches it only
//! as far as its own halfway pace is below that, so that a fall, a rise and
//! a fall do not stretch the same queue twice for one net fall; and a rise
//! while they wait moves them back ([`Fall::rise`]): from the time of the
//! rise, the queue's spacing goes from its pace to the new interval (never
//! back further than the falls stretched it), and they are woken to find
//! it. So a dip of the rate costs the waiters the time it lasted, not the
//! length of the queue at the bottom of it. A rise with no moved call
//! waiting moves nobody: a call books only a few milliseconds ahead.
//!
//! A pause ([`RateCell::pause_until`](super::cell::RateCell::pause_until))
//! is debt like a queue: a fall during one stretches it as it does a
//! queue, later, never earlier.
//!
//! A booked call may so start a little later than `max_wait` allowed: a
//! fall by `factor` lengthens its wait (at most the booking horizon) by up
//! to `(1 + 1 / factor) / 2` (1.21x for 0.7).
//!
//! A rate in a [store](crate::store) keeps its waiters' places: they wait
//! on the store's decisions in other processes, which a fall cannot reach,
//! so Redis's script rescales as [`gcra::rescale`] does.
//!
//! [`gcra::rescale`]: super::gcra::rescale

use crate::clock::Nanos;

/// One fall of the rate while calls were waiting (or a rise that moves
/// back the calls a fall moved): the map their starts go through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fall {
    /// When the rate fell.
    at: Nanos,
    /// The start of the last call waiting then. Calls due after it were
    /// placed after the fall, and do not move.
    last_waiter: Nanos,
    /// The waiters' spacing grows `stretch / per` times (below 1 for a
    /// rise).
    stretch: Nanos,
    per: Nanos,
}

/// The pace a fall set the queue to, and until when the calls it moved
/// wait.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Paced {
    interval: Nanos,
    until: Nanos,
    /// How many times, at least, the moves since each was booked have
    /// stretched the waiters' starts (from the time of each move): the
    /// last fall's stretch, times each rise's since. A rise moves them
    /// back by at most this, so none earlier than it was booked. (Kept a
    /// little short, in 32 bits: back less far, never further.)
    stretched: f32,
}

impl Paced {
    /// What the waiters' pace is while the calls moved wait, if they do
    /// at `at`.
    fn at(paced: Option<Self>, at: Nanos) -> Option<Self> {
        paced.filter(|paced| at < paced.until)
    }
}

/// `stretched` in 32 bits, a little short of it.
fn short(stretched: f64) -> f32 {
    (stretched * (1.0 - 1e-6)) as f32
}

/// The fixed point of a rise's ratio ([`Fall::rise`]): `stretch` over
/// this `per`.
const RISE_PER: Nanos = 1 << 32;

impl Fall {
    /// The interval grows from `old_interval` to `new_interval` at `at`,
    /// with calls waiting until `last_waiter` (after `at`): they move to
    /// [`halfway`] between the two. `paced` is what the last such fall
    /// left; returns the fall and what it leaves.
    pub(crate) fn new(
        at: Nanos,
        last_waiter: Nanos,
        old_interval: Nanos,
        new_interval: Nanos,
        paced: Option<Paced>,
    ) -> (Self, Paced) {
        // The slowest pace the queue holds: a fall earlier in its wait may
        // have set it slower than the rate has since risen to.
        let paced = Paced::at(paced, at);
        let queue_interval = paced.map_or(old_interval, |paced| paced.interval.max(old_interval));
        let target = halfway(old_interval, new_interval);
        let (stretch, per) = if target > queue_interval {
            (target, queue_interval)
        } else {
            (1, 1)
        };
        let fall = Self {
            at,
            last_waiter,
            stretch,
            per,
        };
        // The call booked last before this fall was moved by it alone.
        let paced = Paced {
            interval: target.max(queue_interval),
            until: fall.moved(last_waiter),
            stretched: short(stretch as f64 / per as f64),
        };
        (fall, paced)
    }

    /// The interval shrinks from `old_interval` to `new_interval` at `at`,
    /// with calls waiting until `last_waiter` (after `at`) and `paced`
    /// what the last fall left. If calls a fall moved still wait, they move
    /// back by the ratio of the intervals, but no further than the moves
    /// since they were booked stretched them (so none earlier than it was
    /// booked); returns that move. Calls booked after the last fall, at
    /// the pace they were booked at, stay. `None` if no call moves.
    pub(crate) fn rise(
        at: Nanos,
        last_waiter: Nanos,
        old_interval: Nanos,
        new_interval: Nanos,
        paced: Option<Paced>,
    ) -> Option<(Self, Paced)> {
        let paced = Paced::at(paced, at)?;
        let last_waiter = last_waiter.min(paced.until);
        let ratio =
            (new_interval as f64 / old_interval as f64).max(1.0 / f64::from(paced.stretched));
        // Rounded up: back a little less far, never further.
        let stretch = (ratio * RISE_PER as f64).ceil() as Nanos;
        if stretch >= RISE_PER {
            return None;
        }
        let fall = Self {
            at,
            last_waiter,
            stretch,
            per: RISE_PER,
        };
        let interval = u128::from(paced.interval) * u128::from(stretch);
        let paced = Paced {
            interval: u64::try_from(interval.div_ceil(u128::from(RISE_PER))).unwrap_or(u64::MAX),
            until: fall.moved(last_waiter),
            stretched: short(f64::from(paced.stretched) * stretch as f64 / RISE_PER as f64),
        };
        Some((fall, paced))
    }

    /// Where a call due at `start` is due after this fall.
    pub(crate) fn moved(&self, start: Nanos) -> Nanos {
        if start <= self.at || start > self.last_waiter {
            return start;
        }
        let ahead = u128::from(start - self.at) * u128::from(self.stretch);
        let ahead = ahead.div_ceil(u128::from(self.per));
        self.at
            .saturating_add(u64::try_from(ahead).unwrap_or(u64::MAX))
    }

    /// The bucket's `tat` after this fall, from `tat` before it: the
    /// waiters' part moves with them, the burst after the last waiter
    /// (`tat - last_waiter`) is rescaled as debt from `old_interval` to
    /// `new_interval`, rounded up.
    /// `last_waiter`: the last call waiting now, which a rise may not
    /// have moved (it moves only the calls a fall moved).
    pub(crate) fn tat(
        &self,
        tat: Nanos,
        last_waiter: Nanos,
        old_interval: Nanos,
        new_interval: Nanos,
    ) -> Nanos {
        let tail = u128::from(tat.saturating_sub(last_waiter)) * u128::from(new_interval);
        let tail = tail.div_ceil(u128::from(old_interval));
        self.moved(last_waiter)
            .saturating_add(u64::try_from(tail).unwrap_or(u64::MAX))
    }

    /// Whether the fall moves any waiter: not when the queue is already at
    /// its pace or slower.
    pub(crate) fn moves_anyone(&self) -> bool {
        self.stretch != self.per
    }

    /// When the calls this fall moved have all started.
    pub(crate) fn moved_until(&self) -> Nanos {
        self.moved(self.last_waiter)
    }
}

/// The spacing the waiters move to when the interval grows from `old` to
/// `new`: the mean of the two, rounded up.
fn halfway(old: Nanos, new: Nanos) -> Nanos {
    let sum = u128::from(old) + u128::from(new);
    u64::try_from(sum.div_ceil(2)).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rate::gcra;
    use proptest::prelude::*;

    const MS: Nanos = 1_000_000;

    #[test]
    fn waiters_move_by_the_fall_from_its_time_and_later_calls_stay() {
        // Burst 1 at 10/s: waiters due at 1.1, 1.2 and 1.3 s (tat 1.4 s);
        // the rate halves at 1 s, and the waiters move to 150 ms apart.
        let (fall, paced) = Fall::new(1_000 * MS, 1_300 * MS, 100 * MS, 200 * MS, None);
        let moved: Vec<Nanos> = [1_100, 1_200, 1_300].map(|s| fall.moved(s * MS)).to_vec();
        assert_eq!(moved, [1_150 * MS, 1_300 * MS, 1_450 * MS]);
        // The next call goes one new interval after the last waiter.
        assert_eq!(
            fall.tat(1_400 * MS, 1_300 * MS, 100 * MS, 200 * MS),
            1_650 * MS
        );
        // A call due before the fall (a late wake), or placed after it.
        assert_eq!(fall.moved(900 * MS), 900 * MS);
        assert_eq!(fall.moved(1_700 * MS), 1_700 * MS);
        assert_eq!(paced.until, 1_450 * MS);
    }

    #[test]
    fn a_fall_a_rise_and_a_fall_stretch_the_queue_once() {
        // 10/s to 5/s at 1 s (queue to 1.3 s, moved to 1.45 s, 150 ms
        // apart); the rate rises back to 10/s (waiters stay) and falls to
        // 5/s again at once.
        let (first, paced) = Fall::new(1_000 * MS, 1_300 * MS, 100 * MS, 200 * MS, None);
        assert_eq!(first.moved(1_300 * MS), 1_450 * MS);
        let (second, paced) = Fall::new(1_000 * MS, 1_450 * MS, 100 * MS, 200 * MS, Some(paced));
        assert_eq!(second.moved(1_450 * MS), 1_450 * MS, "already 150 ms apart");
        // Below that pace, the queue stretches only by the rest: 10/s to
        // 4/s moves it to 175 ms apart, 7/6 of 150.
        let (third, _) = Fall::new(1_000 * MS, 1_450 * MS, 100 * MS, 250 * MS, Some(paced));
        assert_eq!(third.moved(1_450 * MS), 1_525 * MS);
        // Once the moved calls have all started, a fall stretches in full.
        let (later, _) = Fall::new(1_700 * MS, 1_900 * MS, 100 * MS, 200 * MS, Some(paced));
        assert_eq!(later.moved(1_900 * MS), 2_000 * MS);
    }

    #[test]
    fn a_rise_moves_back_the_calls_a_fall_moved_from_its_own_time() {
        // 10/s to 5/s at 1 s moves the waiters to 150 ms apart (to 1.45 s);
        // back to 10/s at 1.15 s, they go 100 ms apart from there.
        let (fall, paced) = Fall::new(1_000 * MS, 1_300 * MS, 100 * MS, 200 * MS, None);
        assert_eq!(fall.moved(1_300 * MS), 1_450 * MS);
        let (rise, back) = Fall::rise(1_150 * MS, 1_450 * MS, 200 * MS, 100 * MS, Some(paced))
            .expect("moved calls wait");
        // Rounded up, within a microsecond: back a little less far.
        let moved: Vec<Nanos> = [1_150, 1_300, 1_450].map(|s| rise.moved(s * MS)).to_vec();
        for (moved, to) in moved.iter().zip([1_150 * MS, 1_250 * MS, 1_350 * MS]) {
            assert!((to..to + 1_000).contains(moved), "{moved} for {to}");
        }
        assert!((1_350 * MS..1_350 * MS + 1_000).contains(&back.until));
        // The same rise after they have all started, or with none moved,
        // moves nobody.
        let after = Fall::rise(1_500 * MS, 1_600 * MS, 200 * MS, 100 * MS, Some(paced));
        assert_eq!(after, None);
        assert_eq!(
            Fall::rise(1_150 * MS, 1_450 * MS, 200 * MS, 100 * MS, None),
            None
        );
        // Moved back to where they were booked, a faster rate still moves
        // them no further.
        let further = Fall::rise(1_200 * MS, 1_350 * MS, 100 * MS, 50 * MS, Some(back));
        assert_eq!(further, None);
    }

    proptest! {
        /// The waiters keep their order and end at least halfway between
        /// the old and the new interval apart; the next call placed after the
        /// fall goes after the last of them by at least the new interval
        /// (as GCRA would place it at the new rate).
        #[test]
        fn a_moved_queue_keeps_its_order_and_the_halfway_pace(
            at in 0u64..1 << 40,
            first in 0u64..1_000_000_000,
            waiters in 1usize..20,
            old in 1u64..100_000_000,
            times in 1.0f64..50.0,
            burst in 1u32..8,
        ) {
            let new = ((old as f64 * times) as Nanos).max(old + 1);
            let starts: Vec<Nanos> = (0..waiters as u64).map(|i| at + first + i * old).collect();
            let last = *starts.last().unwrap();
            prop_assume!(last > at);
            let tat = last + old * u64::from(burst);
            let (fall, _) = Fall::new(at, last, old, new, None);
            let moved: Vec<Nanos> = starts.iter().map(|&s| fall.moved(s)).collect();
            let pace = halfway(old, new);
            for pair in moved.windows(2) {
                prop_assert!(pair[1] >= pair[0] + pace - 1, "{pair:?} at {pace}");
            }
            let next = gcra::slot(fall.tat(tat, last, old, new), at, new, burst, 1);
            prop_assert!(next.start >= *moved.last().unwrap() + new - 1);
        }
    }
}
