//! A new key's careful opening on a named limit: its first metered call
//! leaves room for itself alone, and the rest of the limit's burst is
//! earned at its rate ([`RateCell::take_first_carefully`](crate::rate::RateCell)).

use std::hash::Hash;

use super::ThrottleManager;
use crate::clock::Nanos;
use crate::core::Core;
use crate::key::KeyState;
use crate::rate::TakeMark;
use crate::registry::BorrowedKey;

/// The burst a new key's first call of a named limit withheld
/// ([`RateCell::take_first_carefully`](crate::rate::RateCell)). Given back
/// if the call's part was taken and the call is then not admitted (its key
/// refused it); kept by the call's part once it is admitted; and kept if
/// the call's own part was not taken: another call took the room left for
/// it, so the key has spent what it may before an answer.
pub(super) struct WithheldRoom<'m> {
    core: &'m Core,
    state: triomphe::Arc<KeyState>,
    tokens: u32,
    mark: TakeMark,
    /// The call's own part was taken: dropped, the room goes back.
    armed: bool,
}

impl<'m> WithheldRoom<'m> {
    /// The call's own part was taken.
    pub(super) fn armed(mut self) -> Self {
        self.armed = true;
        self
    }

    /// The call is admitted: its part keeps the room withheld, to give it
    /// back if the call is not made after all.
    pub(super) fn kept(mut self) -> (u32, TakeMark) {
        self.armed = false;
        (self.tokens, self.mark)
    }
}

impl Drop for WithheldRoom<'_> {
    fn drop(&mut self) {
        if self.armed {
            let now = self.core.now();
            self.state.rate.give_back(now, self.tokens, self.mark);
        }
    }
}

/// # Metered calls: a new key's first call
impl<K> ThrottleManager<K>
where
    K: Hash + Eq + Send + Sync + 'static,
{
    /// Before a call of `key` takes its `cost` of this limit, in one look
    /// at the key: how far give-backs have moved the limit's debt so far
    /// (for the part's mark), and, for a new key's first call, the room it
    /// withholds. That key keeps room for its first call alone and earns
    /// the rest of its burst at the limit's rate: its costs are known only
    /// from answers, so a burst spent on estimates before them could go far
    /// past what the provider's bucket holds at the real costs. The room
    /// withheld goes back if the call is not made.
    pub(super) fn before_taking_part<Q: BorrowedKey<K> + ?Sized>(
        &self,
        key: &Q,
        cost: u32,
    ) -> (Nanos, Option<WithheldRoom<'_>>) {
        let core = self.core();
        let now = core.now();
        let Ok(state) = self.entry(key, now) else {
            // No room for the key: it takes nothing, or waits for room.
            return (0, None);
        };
        let shifted = state.rate.given_back();
        let Some(burst) = core.rate_of(&state).map(|settings| settings.burst) else {
            return (shifted, None);
        };
        let mark = (cost > 0)
            .then(|| state.rate.take_first_carefully(now, cost, burst))
            .flatten();
        let withheld = mark.map(|mark| WithheldRoom {
            core,
            state,
            tokens: burst.saturating_sub(cost),
            mark,
            armed: false,
        });
        (shifted, withheld)
    }
}
