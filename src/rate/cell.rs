//! One key's rate, enforced: the GCRA state and the current rate in atomics.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use once_cell::race::OnceBox;

use super::aimd;
use super::config::RateSettings;
use super::falls;
use super::gcra::{self, TimeSlot};
use super::growth::{self, LastFall};
use super::line::Line;
use super::usage;
use crate::clock::Nanos;
use fall_memory::FallMemory;

/// The rate state of one key: 40 bytes, lock-free but for falls of the
/// rate while calls wait for their tokens (see [`falls`]), with 4 bytes the
/// key keeps here for itself ([`tag`](Self::tag)).
///
/// The rate is the source of truth (an `f64` in an `AtomicU64`), and the
/// emission interval is derived from it on each call, so the two can never
/// disagree. A rate change first swaps the rate, then rescales the bucket's
/// debt (see [`gcra::rescale`]); a call racing with the change is counted at
/// either rate, never twice and never for free.
#[derive(Debug)]
pub(crate) struct RateCell {
    tat: AtomicU64,
    rate: AtomicU64,
    /// When the rate last fell, as a wrapping stamp ([`DecreaseStamp`]);
    /// 0: never.
    decreased_at: AtomicU32,
    /// The owner's word, kept in what would be the cell's padding: the
    /// key's settings (see `crate::key`). The cell never reads it.
    tag: AtomicU32,
    /// How fast calls have recently succeeded ([`usage`]), for rate
    /// validation. Written by every success, unless the rate is fixed.
    used: AtomicU64,
    /// The calls waiting for their turn ([`line`]) and the falls of the
    /// rate that moved calls waiting for their tokens ([`falls`]);
    /// allocated by the first call in line or the first such fall.
    queue: OnceBox<Queue>,
}

/// The calls in line for a turn at a key's tokens, and the falls that moved
/// its booked calls, for those calls to find when they wake.
#[derive(Debug, Default)]
struct Queue {
    line: Line,
    /// Twice the number of falls that moved the queue, plus one while a
    /// fall is being applied: a waiter that saw this number when it took
    /// its token has nowhere to move while it stays the same and even. An
    /// odd number sends a waiter to the lock, which the fall holds, so none
    /// starts unmoved between the debt's stretch and the fall's record (its
    /// predecessors would move past it).
    moves: AtomicU64,
    falls: Mutex<QueueFalls>,
    /// Woken by a rise that moved the waiters earlier ([`moves`]): made
    /// by the first call that sleeps for a booked token, so that a key
    /// whose queue only remembers its last fall carries no more.
    moved_back: OnceBox<tokio::sync::Notify>,
    /// How far give-backs of settled costs have moved the bucket's debt
    /// forward, in all ([`RateCell::give_back`]).
    given_back: AtomicU64,
    /// For a key without extras: the quickest recent answer of its calls
    /// with a deadline (`deadline::AnswerTime`'s word), kept here so that a
    /// key whose calls set no deadline carries no word for it.
    answered: AtomicU32,
    /// A learned rate's last fall, made by its first fall.
    fall: FallMemory,
}

#[derive(Debug, Default)]
struct QueueFalls {
    /// What the last fall set the queue's pace to.
    paced: Option<falls::Paced>,
    /// The falls whose moved calls may still be waiting, oldest first, each
    /// with its number.
    recent: Vec<(u64, falls::Fall)>,
}

/// When a rate last fell, in 32 bits: a stamp of about a microsecond
/// (2^10 ns, read back at most two stamps early), plus one so that 0 says
/// "never". Stamps wrap every 73
/// minutes, so a stamp is read near a time the caller knows (now, or when
/// its call was scheduled), as the one within 36 minutes of it: a call
/// scheduled further than that from the rate's last fall may be judged
/// news, or not, wrongly, once. Its 4 bytes beside the owner's
/// [`tag`](RateCell::tag) keep the cell at 40 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct DecreaseStamp(u32);

impl DecreaseStamp {
    const SHIFT: u32 = 10;

    fn at(now: Nanos) -> Self {
        // The one stamp whose mark would be 0 is read one stamp early.
        let stamp = (now >> Self::SHIFT) as u32;
        Self(stamp.saturating_add(1))
    }

    /// The time of the fall, taken as the one nearest `near`; `None`:
    /// the rate never fell.
    fn near(self, near: Nanos) -> Option<Nanos> {
        if self.0 == 0 {
            return None;
        }
        let stamp = self.0.wrapping_sub(1);
        let near_stamp = (near >> Self::SHIFT) as u32;
        let ahead = i64::from(stamp.wrapping_sub(near_stamp) as i32);
        let at = ((near >> Self::SHIFT) as i64).saturating_add(ahead).max(0);
        Some((at as u64) << Self::SHIFT)
    }
}

/// The sign bit of the stored rate (rates are positive) records whether the
/// last change was a decrease, so reversals can be reported without more state.
const FELL: u64 = 1 << 63;

/// Which way a rate change went, when it reversed the previous one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reversal {
    /// The first rise after a fall.
    Up,
    /// The first fall after a rise (or ever).
    Down,
}

/// What an outcome did to the rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct RateChange {
    pub(crate) from: f64,
    pub(crate) to: f64,
    /// Set when this change went the other way than the last one.
    pub(crate) reversed: Option<Reversal>,
}

impl RateChange {
    /// No change: the rate stays at `rate`.
    #[inline]
    fn none(rate: f64) -> Self {
        Self {
            from: rate,
            to: rate,
            reversed: None,
        }
    }
}

/// Where a call's tokens lie in a bucket's time, for giving some back:
/// they took the time up to `end`, when give-backs had moved the debt by
/// `shifted` in all (read before they were taken).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TakeMark {
    pub(crate) end: Nanos,
    pub(crate) shifted: Nanos,
}

impl TakeMark {
    /// These tokens, after a give-back that moved the debt by `returned`
    /// from tokens that lay after them: it moved them not.
    pub(crate) fn after_later_given_back(self, returned: Nanos) -> Self {
        Self {
            shifted: self.shifted.saturating_add(returned),
            ..self
        }
    }
}

/// A call placed in the bucket by [`RateCell::reserve`], which may start at
/// `slot.start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reservation {
    pub(crate) slot: TimeSlot,
    /// What the call pushed the bucket's `tat` by: its cost in intervals.
    spacing: Nanos,
    /// For a call not due yet: how many falls had moved the queue before
    /// its token was taken ([`RateCell::moved_start`] moves it by the ones
    /// since).
    pub(crate) moves_seen: u64,
}

impl RateCell {
    /// A full bucket at `starting_rate`, never taken from: its `tat` is 0
    /// until a call takes from it or a debt is owed
    /// ([`take_first_carefully`](Self::take_first_carefully) tells).
    pub(crate) fn new(starting_rate: f64, now: Nanos) -> Self {
        Self {
            tat: AtomicU64::new(0),
            rate: AtomicU64::new(starting_rate.to_bits()),
            decreased_at: AtomicU32::new(0),
            tag: AtomicU32::new(0),
            used: AtomicU64::new(usage::fresh(now)),
            queue: OnceBox::new(),
        }
    }

    /// The current rate, in calls per second.
    #[inline]
    pub(crate) fn rate(&self) -> f64 {
        f64::from_bits(self.rate.load(Ordering::Acquire) & !FELL)
    }

    /// How long from `now` until `cost` tokens are there (0: now). Takes
    /// nothing.
    pub(crate) fn wait(&self, now: Nanos, burst: u32, cost: u32) -> Nanos {
        let tat = self.tat.load(Ordering::Acquire);
        gcra::slot(tat, now, gcra::interval(self.rate()), burst, cost).start - now
    }

    /// What the bucket holds at `now` ([`gcra::remaining`]). Takes nothing.
    pub(crate) fn remaining(&self, now: Nanos, burst: u32) -> gcra::Remaining {
        let tat = self.tat.load(Ordering::Acquire);
        gcra::remaining(tat, now, gcra::interval(self.rate()), burst)
    }

    /// Takes `cost` tokens if they are there at `now`; otherwise says how
    /// long until they would be, and takes nothing. (`check`'s way: a
    /// caller that never waits books nothing ahead, as `reserve` does.)
    #[inline]
    pub(crate) fn take_due(&self, now: Nanos, burst: u32, cost: u32) -> Result<(), Nanos> {
        let mut tat = self.tat.load(Ordering::Acquire);
        loop {
            let slot = gcra::slot(tat, now, gcra::interval(self.rate()), burst, cost);
            if slot.start > now {
                return Err(slot.start - now);
            }
            match self
                .tat
                .compare_exchange_weak(tat, slot.tat, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Ok(()),
                Err(actual) => tat = actual,
            }
        }
    }

    /// Takes the next `cost` tokens if they can be used within `max_wait`
    /// of `now` (`Nanos::MAX`: however far ahead they lie); otherwise takes
    /// nothing and answers how long the wait would be.
    #[inline]
    pub(crate) fn reserve(
        &self,
        now: Nanos,
        burst: u32,
        cost: u32,
        max_wait: Nanos,
    ) -> Result<Reservation, Nanos> {
        let mut tat = self.tat.load(Ordering::Acquire);
        loop {
            let interval = gcra::interval(self.rate());
            let slot = gcra::slot(tat, now, interval, burst, cost);
            let wait = slot.start - now;
            if wait > max_wait {
                return Err(wait);
            }
            // Read before the token is taken: a fall after this read and
            // before the token may or may not have moved it, and
            // `Fall::moved` tells which.
            let moves_seen = if wait > 0 { self.moves() } else { 0 };
            match self
                .tat
                .compare_exchange_weak(tat, slot.tat, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    return Ok(Reservation {
                        slot,
                        spacing: interval.saturating_mul(u64::from(cost)),
                        moves_seen,
                    });
                }
                Err(actual) => tat = actual,
            }
        }
    }

    /// Calls in the key's line now ([`line`](super::line)).
    #[inline]
    pub(crate) fn waiting_in_line(&self) -> u32 {
        self.queue.get().map_or(0, |queue| queue.line.waiting())
    }

    /// The word of the key's quickest recent answer, made by the first
    /// answer of a call with a deadline (see `KeyState::answered_in`).
    pub(crate) fn answer_time(&self) -> &AtomicU32 {
        &self.queue.get_or_init(Box::default).answered
    }

    /// [`answer_time`](Self::answer_time), if there is one yet.
    #[inline]
    pub(crate) fn answer_time_if_any(&self) -> Option<&AtomicU32> {
        self.queue.get().map(|queue| &queue.answered)
    }

    /// The key's line, made by the first call that joins it.
    pub(crate) fn line(&self) -> &Line {
        &self.queue.get_or_init(Box::default).line
    }

    /// How many falls have moved the queue so far.
    fn moves(&self) -> u64 {
        self.queue
            .get()
            .map_or(0, |queue| queue.moves.load(Ordering::Acquire))
    }

    /// Hands back a reservation whose call will not happen, if no later one
    /// was made since (see [`gcra::cancel`]).
    #[inline]
    pub(crate) fn cancel(&self, reservation: Reservation) {
        let tat = self.tat.load(Ordering::Acquire);
        if let Some(earlier) = gcra::cancel(tat, reservation.slot, reservation.spacing) {
            // Losing this race means a later call took the slot after ours:
            // then the gap stays, exactly as `gcra::cancel` would decide.
            let _ = self
                .tat
                .compare_exchange(tat, earlier, Ordering::AcqRel, Ordering::Relaxed);
        }
    }

    /// A success of a call scheduled at `scheduled_at` and started at
    /// `started_at`, which `waited` for its tokens or not: counted in the
    /// key's use ([`usage`]) as the `tokens` it took; the rate rises by the increment unless the
    /// call was scheduled before the last decrease (see [`aimd::is_news`]),
    /// and, unless the call waited, ends at most [`aimd::MAX_RATE_OVER_USE`] times
    /// the key's recent successes per second (or its starting rate, if that
    /// is higher): see [`aimd::validated_ceiling`] and
    /// [`aimd::after_success`]. Reads the time only if the rate changes; a
    /// rate no success can move (fixed: at its upper bound and starting
    /// rate) counts no use.
    #[inline]
    pub(crate) fn increase(
        &self,
        now: impl FnOnce() -> Nanos,
        scheduled_at: Nanos,
        started_at: Nanos,
        waited: bool,
        tokens: u32,
        settings: &RateSettings,
    ) -> RateChange {
        let rate = self.rate();
        if aimd::success_cannot_move(rate, settings) {
            return RateChange::none(rate);
        }
        let used = self.record_use(started_at, rate, tokens);
        let ceiling = aimd::validated_ceiling(used, waited, settings);
        let news = aimd::is_news(scheduled_at, self.last_decrease(scheduled_at));
        if !settings.learns {
            return self.change_rate(now, settings.burst, |rate| {
                aimd::after_success(rate, ceiling, news, settings)
            });
        }
        let grow = |rate: f64, fall: Option<LastFall>, at: Nanos| {
            let raised = if news {
                growth::grown(rate, fall, at, settings)
            } else {
                rate
            };
            raised.min(ceiling)
        };
        let Some(fall) = self.last_fall() else {
            // Slow start reads no clock.
            return self.change_rate(now, settings.burst, |rate| grow(rate, None, 0));
        };
        // After a fall, growth is by the time since it, and until the probe
        // the rate is not brought down to its use.
        if let Some(queue) = self.queue.get() {
            queue.fall.served();
        }
        let at = now();
        let holds = growth::before_probe(fall, at);
        self.change_rate(
            || at,
            settings.burst,
            |rate| {
                let grown = grow(rate, Some(fall), at);
                if holds { grown.max(rate) } else { grown }
            },
        )
    }

    /// A learned rate's last fall, if it fell.
    fn last_fall(&self) -> Option<LastFall> {
        self.queue.get()?.fall.last()
    }

    fn record_fall(&self, fall: LastFall, sent: f64) {
        self.queue.get_or_init(Box::default).fall.record(fall, sent);
    }

    /// The host asked for a pause at `now` (`Retry-After`): for a learned
    /// rate, where its capacity lies. The fall its refusal caused (reported
    /// just before) is marked firm: earned at the rate its refused call was
    /// sent at, it dwells longer below it ([`growth::FIRM_DWELL`]). A pause
    /// with no fall just before it only pauses.
    pub(crate) fn learn_from_pause(&self, now: Nanos, settings: &RateSettings) {
        if let Some(queue) = self.queue.get().filter(|_| settings.learns) {
            queue.fall.mark_paused(now);
        }
    }

    /// Moves the rate to `to(rate)` at `now`, as a change of the key's
    /// settings does: the bucket is kept, its debt rescaled as any step of
    /// the rate rescales it (no fresh burst, no debt lost).
    pub(crate) fn move_to(&self, now: Nanos, burst: u32, to: impl Fn(f64) -> f64) -> RateChange {
        self.change_rate(|| now, burst, to)
    }

    /// The key's successes per second lately, as rate validation measures
    /// them (successes of an adaptive rate; a fixed rate counts none).
    #[cfg_attr(not(feature = "status"), allow(dead_code))]
    pub(crate) fn used_per_second(&self, now: Nanos) -> f64 {
        usage::read(self.used.load(Ordering::Acquire), now)
    }

    /// Counts a success of `tokens` at `at` in the key's use; returns the
    /// use per second.
    fn record_use(&self, at: Nanos, rate: f64, tokens: u32) -> f64 {
        let mut word = self.used.load(Ordering::Acquire);
        loop {
            let used = usage::record(word, at, rate, tokens);
            match self.used.compare_exchange_weak(
                word,
                used.word,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return used.per_second,
                Err(actual) => word = actual,
            }
        }
    }

    /// A failure at `now` of a call scheduled at `scheduled_at`: the rate
    /// falls, within bounds, unless it already fell within the cooldown or
    /// after the call was scheduled.
    pub(crate) fn decrease(
        &self,
        now: Nanos,
        scheduled_at: Nanos,
        settings: &RateSettings,
    ) -> RateChange {
        let stored = self.decreased_at.load(Ordering::Acquire);
        let last = DecreaseStamp(stored).near(now);
        if !aimd::is_news(scheduled_at, last) || !aimd::may_decrease(now, last, settings.cooldown) {
            return self.unchanged();
        }
        let mark = DecreaseStamp::at(now).0;
        if settings.cooldown > 0 {
            // One failure per cooldown lowers the rate: the one that moves
            // the mark.
            let claimed = self
                .decreased_at
                .compare_exchange(stored, mark, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok();
            if !claimed {
                return self.unchanged();
            }
        } else {
            // The later mark stays.
            let _ = self
                .decreased_at
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                    let later = DecreaseStamp(held).near(now) < Some(now);
                    later.then_some(mark)
                });
        }
        if !settings.learns {
            return self.change_rate(
                || now,
                settings.burst,
                |rate| aimd::decreased(rate, settings),
            );
        }
        let before = self.last_fall();
        // A learned rate that falls again with no call served since its
        // last fall is far above what the host takes: it falls twice.
        let twice = settings.learned_decrease
            && before.is_some()
            && self
                .queue
                .get()
                .is_some_and(|queue| queue.fall.take_unserved());
        let change = self.change_rate(
            || now,
            settings.burst,
            |rate| {
                let once = aimd::decreased(rate, settings);
                if twice {
                    aimd::decreased(once, settings)
                } else {
                    once
                }
            },
        );
        let used = usage::read(self.used.load(Ordering::Acquire), now);
        self.record_fall(
            LastFall {
                from: growth::earned_at(change.from, before, used, now),
                at: now,
                firm: false,
            },
            growth::sent_at(change.from, before, now),
        );
        change
    }

    /// When the rate last fell, read near `near` (see [`DecreaseStamp`]).
    fn last_decrease(&self, near: Nanos) -> Option<Nanos> {
        DecreaseStamp(self.decreased_at.load(Ordering::Acquire)).near(near)
    }

    /// The owner's word ([`RateCell::tag`'s field](Self)).
    #[inline]
    pub(crate) fn tag(&self) -> &AtomicU32 {
        &self.tag
    }

    fn unchanged(&self) -> RateChange {
        RateChange::none(self.rate())
    }

    fn change_rate(
        &self,
        now: impl FnOnce() -> Nanos,
        burst: u32,
        step: impl Fn(f64) -> f64,
    ) -> RateChange {
        let mut old_bits = self.rate.load(Ordering::Acquire);
        loop {
            let old = f64::from_bits(old_bits & !FELL);
            let new = step(old);
            if new.to_bits() == old.to_bits() {
                return RateChange::none(old);
            }
            let fell = new < old;
            let new_bits = new.to_bits() | if fell { FELL } else { 0 };
            match self.rate.compare_exchange_weak(
                old_bits,
                new_bits,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    let (now, old_interval) = (now(), gcra::interval(old));
                    let new_interval = gcra::interval(new);
                    if fell {
                        self.fall(now, old_interval, new_interval, burst);
                    } else {
                        self.rise(now, old_interval, new_interval, burst);
                    }
                    let had_fallen = old_bits & FELL != 0;
                    let reversed = match (had_fallen, fell) {
                        (false, true) => Some(Reversal::Down),
                        (true, false) => Some(Reversal::Up),
                        _ => None,
                    };
                    return RateChange {
                        from: old,
                        to: new,
                        reversed,
                    };
                }
                Err(actual) => old_bits = actual,
            }
        }
    }

    pub(super) fn rescale_debt(
        &self,
        now: Nanos,
        old_interval: Nanos,
        new_interval: Nanos,
        burst: u32,
    ) {
        // Concurrent changes each rescale by their own ratio; the ratios
        // multiply, so the debt ends up scaled from the first rate to the last.
        let _ = self
            .tat
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |tat| {
                let scaled = gcra::rescale(tat, now, old_interval, new_interval, burst);
                (scaled != tat).then_some(scaled)
            });
    }

    /// No call starts before `until`: the bucket's debt runs to then, and
    /// the first call after it finds the bucket empty but for its own token.
    pub(crate) fn pause_until(&self, until: Nanos, burst: u32) {
        let interval = gcra::interval(self.rate());
        let paused = until.saturating_add(interval.saturating_mul(u64::from(burst) - 1));
        self.tat.fetch_max(paused, Ordering::AcqRel);
    }

    /// The time from which this bucket is full: before it, forgetting the
    /// key would forgive debt or end a pause.
    pub(crate) fn full_from(&self) -> Nanos {
        self.tat.load(Ordering::Acquire)
    }

    /// Until when forgetting this bucket would forgive calls it admitted,
    /// seen at `now` with no call waiting for a token: `now` if it owes
    /// nothing that can be told from a pause. Calls take tokens at most
    /// `burst` intervals ahead, so a bucket full later than that is held by
    /// a pause ([`pause_until`](Self::pause_until)), and whatever it owed
    /// before the pause is taken into the pause.
    pub(crate) fn debt_until(&self, now: Nanos, burst: u32) -> Nanos {
        let horizon = gcra::interval(self.rate()).saturating_mul(u64::from(burst));
        let full_from = self.full_from();
        if full_from > now.saturating_add(horizon) {
            now
        } else {
            full_from
        }
    }
}

mod costs;
mod fall_memory;
mod moves;

#[cfg(test)]
mod tests;
