//! Costs settled after a call (metered limits): tokens charged beyond
//! what a call took, given back when it used less, or owed when another's
//! count says they are spent.

use std::sync::atomic::Ordering;

use super::super::gcra;
use super::{RateCell, TakeMark};
use crate::clock::Nanos;

/// # Settled costs
impl RateCell {
    /// How far give-backs have moved this bucket's debt forward, in all
    /// (see [`give_back`](Self::give_back)).
    pub(crate) fn given_back(&self) -> Nanos {
        self.queue
            .get()
            .map_or(0, |queue| queue.given_back.load(Ordering::Acquire))
    }

    /// `tokens` more are owed from `now` (a call's cost, settled above what
    /// it took); the mark of their time, to give them back by.
    pub(crate) fn charge(&self, now: Nanos, tokens: u32) -> TakeMark {
        let shifted = self.given_back();
        let spacing = gcra::interval(self.rate()).saturating_mul(u64::from(tokens));
        let mut tat = self.tat.load(Ordering::Acquire);
        loop {
            let charged = gcra::charged(tat, now, spacing);
            match self
                .tat
                .compare_exchange_weak(tat, charged, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    return TakeMark {
                        end: charged,
                        shifted,
                    };
                }
                Err(actual) => tat = actual,
            }
        }
    }

    /// Gives back `tokens` of a call whose tokens `mark` marks, as much of
    /// them as still lies ahead of `now` ([`gcra::returnable`]); returns
    /// how far that moved the debt. What is given back is counted before
    /// the debt moves, so a later give-back never counts on time this one
    /// moved.
    pub(crate) fn give_back(&self, now: Nanos, tokens: u32, mark: TakeMark) -> Nanos {
        let spacing = gcra::interval(self.rate()).saturating_mul(u64::from(tokens));
        let moved = self.given_back().saturating_sub(mark.shifted);
        let returned = gcra::returnable(mark.end, moved, now, spacing);
        if returned == 0 {
            return 0;
        }
        let queue = self.queue.get_or_init(Box::default);
        queue.given_back.fetch_add(returned, Ordering::AcqRel);
        let _ = self
            .tat
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |tat| {
                let after = gcra::given_back(tat, now, returned);
                (after != tat).then_some(after)
            });
        returned
    }

    /// Gives back `tokens` of a call that was not made, from the end of
    /// the debt: as much of them as still lies ahead of `now`. (Tokens are
    /// alike: the bucket owes as if the call had not been admitted.)
    pub(crate) fn give_back_last(&self, now: Nanos, tokens: u32) {
        let mark = TakeMark {
            end: self.tat.load(Ordering::Acquire),
            shifted: self.given_back(),
        };
        self.give_back(now, tokens, mark);
    }

    /// The bucket owes at least `tokens` from `now` (what another's count
    /// of the same limit says is spent); it owes more if it already did.
    pub(crate) fn owe_at_least(&self, now: Nanos, tokens: u64) {
        let owed = gcra::interval(self.rate()).saturating_mul(tokens);
        self.tat
            .fetch_max(now.saturating_add(owed), Ordering::AcqRel);
    }

    /// Before the first call of a bucket nothing has taken from or owed to
    /// (a new key of a metered limit, whose costs are known only from the
    /// answers): withholds all but that call's `cost` of the burst, so that
    /// the key earns the rest at its rate instead of spending it on
    /// estimates before any answer. The mark of the withheld tokens, to
    /// give them back by if the call is not made; `None` if the bucket was
    /// not new. Two first calls at once may both find the first's room.
    pub(crate) fn take_first_carefully(
        &self,
        now: Nanos,
        cost: u32,
        burst: u32,
    ) -> Option<TakeMark> {
        let shifted = self.given_back();
        let room = u64::from(burst.saturating_sub(cost));
        if room == 0 {
            return None;
        }
        let end = now.saturating_add(gcra::interval(self.rate()).saturating_mul(room));
        self.tat
            .compare_exchange(0, end, Ordering::AcqRel, Ordering::Relaxed)
            .ok()
            .map(|_| TakeMark { end, shifted })
    }
}
