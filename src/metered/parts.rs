//! What a metered call holds of its key's named limits ([`NamedParts`]),
//! as a [`CostPermit`](super::CostPermit) or a [`CostSettle`] holds it:
//! each limit's part, settled as the call's answer says.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::cost::{Cost, REQUESTS};
use super::shared::SharedLimits;
use crate::outcome::Outcome;
use crate::permit::Permit;
use crate::rate::TakeMark;

/// What a call holds of its key's named limits: each limit's part in this
/// process, or in the store that keeps them, and the limits that would
/// have refused it (its key shadowed: they hold nothing).
pub(crate) struct NamedParts<'a> {
    limits: Vec<LimitPart<'a>>,
    shared: Option<SharedLimits>,
    would_refuse: Vec<Arc<str>>,
}

impl<'a> NamedParts<'a> {
    pub(crate) fn new(
        limits: Vec<LimitPart<'a>>,
        shared: Option<SharedLimits>,
        would_refuse: Vec<Arc<str>>,
    ) -> Self {
        Self {
            limits,
            shared: shared.map(SharedLimits::admitted),
            would_refuse,
        }
    }

    /// Each named limit `cost` names now holds that amount.
    pub(crate) fn settle(&self, cost: &Cost) {
        for (name, amount) in cost.named() {
            let shared = self.shared.as_ref();
            match self.limits.iter().find(|part| &*part.name == name) {
                Some(part) => lock(&part.held).settle(&part.permit, amount),
                None if shared.is_some_and(|shared| shared.settle(name, amount)) => {}
                // Shadowed, the limit refused the call: it holds nothing.
                None if self.would_refuse.iter().any(|limit| &**limit == name) => {}
                None => tracing::warn!(
                    limit = name,
                    "a settled cost names a limit the manager does not have; skipped"
                ),
            }
        }
    }

    /// The call now holds `amount` of its key's rate, if the store took its
    /// requests with its named limits; `false` if it did not (they are
    /// the key's own permit's).
    pub(crate) fn settle_requests(&self, amount: u32) -> bool {
        (self.shared.as_ref()).is_some_and(|shared| shared.settle(REQUESTS, amount))
    }

    /// What the call holds of its key's rate, if the store took its
    /// requests with its named limits.
    pub(crate) fn requests_taken(&self) -> Option<u32> {
        self.shared.as_ref()?.requests()
    }

    /// What the call holds of each named limit: `cost` and those amounts.
    pub(crate) fn add_to(&self, cost: Cost) -> Cost {
        let local =
            (self.limits.iter()).map(|part| (part.name.to_string(), lock(&part.held).amount()));
        let shared = self.shared.iter().flat_map(SharedLimits::each);
        local
            .chain(shared)
            .fold(cost, |cost, (name, amount)| cost.and(name, amount))
    }

    /// Whether a limit would have refused the call (its key shadowed).
    pub(crate) fn any_would_refuse(&self) -> bool {
        !self.would_refuse.is_empty()
    }

    /// The call's outcome, told to each limit it holds a part of here, and
    /// to each adaptive one the store keeps; `key_permit` is the call's own
    /// permit, whose times the store's report carries.
    pub(crate) fn report(self, outcome: Outcome, key_permit: &Permit<'_>) {
        if let Some(shared) = &self.shared {
            shared.report(|tokens| key_permit.outcome_event(outcome, tokens));
        }
        for part in self.limits {
            part.permit.report(outcome);
        }
    }

    /// The call never reached the backend: every named limit's part goes
    /// back, counted by no control. (The requests are the key's permit's
    /// to give back, where the store took them too:
    /// [`settle_requests`](Self::settle_requests).)
    pub(crate) fn unsent(self) {
        self.give_back(false);
    }

    /// The call's key refused it after its parts were taken: every part
    /// goes back, the requests the store took with them too.
    #[cfg_attr(not(feature = "reqwest"), allow(dead_code))]
    pub(crate) fn refused(self) {
        self.give_back(true);
    }

    fn give_back(self, requests: bool) {
        if let Some(shared) = &self.shared {
            shared.give_back(requests);
        }
        for part in self.limits {
            let mut held = lock(&part.held);
            // The withheld room lies before the call's own tokens: given
            // back first, it is not counted as moved by theirs.
            if let Some((tokens, mark)) = held.withheld.take() {
                part.permit.give_back_tokens(tokens, mark);
            }
            held.settle(&part.permit, 0);
            drop(held);
            part.permit.uncounted();
        }
    }
}

/// A metered call's settlement, for a call made through the client
/// middleware with a [`Cost`] among its request's extensions: the
/// middleware took the call's part of each named limit of its key, and
/// puts this among the response's extensions. Read the answer's usage,
/// then [`settle`](Self::settle); a call answered 429 or never sent got
/// its parts back already. Clones share one settlement; the parts are
/// held until the last is dropped (unsettled, the estimate stays).
///
/// ```
/// use portcullis::metered::{Cost, CostSettle};
///
/// // `settle`: `response.extensions().get::<CostSettle>()`, for a response
/// // of the reqwest middleware; `tokens`: what the body's usage says.
/// fn settle_from(settle: Option<&CostSettle>, tokens: u32) {
///     if let Some(settle) = settle {
///         settle.settle(Cost::of("tokens", tokens));
///     }
/// }
/// # settle_from(None, 0);
/// ```
#[derive(Clone)]
pub struct CostSettle(Arc<NamedParts<'static>>);

impl CostSettle {
    #[cfg_attr(not(feature = "reqwest"), allow(dead_code))]
    pub(crate) fn new(parts: NamedParts<'static>) -> Self {
        Self(Arc::new(parts))
    }

    /// The call cost `cost` in each named limit it names, as
    /// [`CostPermit::settle`](super::CostPermit::settle) says (the requests
    /// are the middleware's, counted as sent).
    pub fn settle(&self, cost: Cost) {
        self.0.settle(&cost);
    }

    /// What the call holds of each named limit, as settled so far.
    pub fn cost(&self) -> Cost {
        self.0.add_to(Cost::requests(0))
    }
}

impl fmt::Debug for CostSettle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("CostSettle").field(&self.cost()).finish()
    }
}

/// What a call took of one named limit: the limit's own permit, and what
/// the call holds of it as settled so far.
pub(crate) struct LimitPart<'a> {
    name: Arc<str>,
    permit: Permit<'a>,
    held: Mutex<Held>,
}

impl<'a> LimitPart<'a> {
    /// `permit`'s `taken` tokens of the limit named `name`, marked `mark`.
    pub(crate) fn new(name: Arc<str>, permit: Permit<'a>, taken: u32, mark: TakeMark) -> Self {
        Self {
            name,
            permit,
            held: Mutex::new(Held::new(taken, mark)),
        }
    }

    /// The part of its key's first call, which withheld `withheld` of the
    /// limit's burst (its tokens and their mark): given back with the
    /// part if the call is not made, kept whatever it settles at.
    pub(crate) fn withholding(self, withheld: Option<(u32, TakeMark)>) -> Self {
        lock(&self.held).withheld = withheld;
        self
    }
}

/// What a call holds of one limit: what is left of the tokens taken when
/// it was admitted, and the tokens charged since, each with its mark in
/// the bucket's time (what may be given back depends on where tokens
/// lie: see `gcra::returnable`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Held {
    taken: u32,
    taken_mark: TakeMark,
    charged: u32,
    charged_mark: TakeMark,
    /// The burst withheld by the key's first call of the limit.
    withheld: Option<(u32, TakeMark)>,
}

impl Held {
    /// `taken` tokens, marked `mark`.
    pub(crate) fn new(taken: u32, mark: TakeMark) -> Self {
        Self {
            taken,
            taken_mark: mark,
            charged: 0,
            charged_mark: mark,
            withheld: None,
        }
    }

    /// What is held now.
    pub(crate) fn amount(&self) -> u32 {
        self.taken.saturating_add(self.charged)
    }

    /// `permit`'s call now holds `amount`: more is charged from now; less
    /// gives back what was charged last first, then what was taken.
    pub(crate) fn settle(&mut self, permit: &Permit<'_>, amount: u32) {
        let holds = self.amount();
        if amount >= holds {
            let more = amount - holds;
            if more > 0 {
                self.charged_mark = permit.charge_tokens(more);
                self.charged = self.charged.saturating_add(more);
            }
            return;
        }
        let mut back = holds - amount;
        let from_charged = back.min(self.charged);
        if from_charged > 0 {
            let returned = permit.give_back_tokens(from_charged, self.charged_mark);
            // Charged after the call was admitted, they lay after the
            // tokens it took then: giving them back moved those not.
            self.taken_mark = self.taken_mark.after_later_given_back(returned);
            self.charged -= from_charged;
            back -= from_charged;
        }
        if back > 0 {
            permit.give_back_tokens(back, self.taken_mark);
            self.taken -= back;
        }
    }
}

pub(crate) fn lock(held: &Mutex<Held>) -> MutexGuard<'_, Held> {
    held.lock().unwrap_or_else(PoisonError::into_inner)
}
