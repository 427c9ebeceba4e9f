//! A key's retry budget: a bucket of retry tokens that every first attempt
//! adds a share of a token to (`ratio`), time refills at a small floor rate
//! (`per_second`), and every retry takes a whole token from. Capped, so a
//! long healthy spell cannot save up a storm.
//!
//! The bound it keeps, whatever the outcomes: over any run, the key's
//! retries are at most `cap + ratio × first attempts + per_second × elapsed`
//! (a token is only ever taken after being put in, and nothing puts in more
//! than those three). That is what gRPC's retry throttling (gRFC A6) and
//! Finagle's and tower's `TpsBudget` bound, in one word of state: the
//! bucket's tokens and when it was last refilled, packed so that the key's
//! budget is one atomic, changed with one compare-and-swap.
//!
//! The maths is pure (`Budget` and its steps); [`RetryBudget`] is the
//! atomic cell that applies it.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::clock::Nanos;

/// A token, in the thousandths the bucket counts in.
pub(crate) const TOKEN: u32 = 1_000;

/// Bits of the packed word that hold the tokens (in thousandths); the rest
/// hold the time of the last refill, in milliseconds of the clock (40
/// bits: 34 years).
const TOKEN_BITS: u32 = 24;
const TOKEN_MASK: u64 = (1 << TOKEN_BITS) - 1;

/// The most thousandths of a token the word can hold: the budget's cap is
/// validated below it (see `RetryPolicy::min_retries_per_second`).
pub(crate) const MAX_THOUSANDTHS: u32 = (1 << TOKEN_BITS) - 1;

/// How a key's bucket fills and empties, in thousandths of a token.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct BudgetRules {
    /// What each first attempt puts in (`ratio` tokens).
    pub(crate) deposit: u32,
    /// What each millisecond puts in (`per_second` tokens a second).
    pub(crate) refill_per_ms: f64,
    /// The most the bucket holds; a new key's bucket starts full.
    pub(crate) cap: u32,
}

/// The bucket at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Budget {
    /// In thousandths of a token, at most the cap.
    pub(crate) tokens: u32,
    /// When time last refilled it, in milliseconds of the clock.
    pub(crate) refilled_at: u64,
}

impl Budget {
    /// The bucket the word holds; a word of 0 is a bucket never touched,
    /// full at `now`.
    pub(crate) fn unpack(word: u64, now_ms: u64, rules: &BudgetRules) -> Self {
        if word == 0 {
            return Self {
                tokens: rules.cap,
                refilled_at: now_ms,
            };
        }
        Self {
            tokens: (word & TOKEN_MASK) as u32,
            refilled_at: word >> TOKEN_BITS,
        }
    }

    /// The word for this bucket; never 0 (a refill time of 0 is stored as
    /// 1 ms, which at most gives one millisecond's refill less).
    pub(crate) fn pack(self) -> u64 {
        (self.refilled_at.max(1) << TOKEN_BITS) | u64::from(self.tokens)
    }

    /// The bucket at `now_ms`, with time's refill in. Time that refilled
    /// less than a thousandth is not spent, so a slow floor still fills a
    /// bucket looked at every millisecond.
    pub(crate) fn refilled(self, now_ms: u64, rules: &BudgetRules) -> Self {
        let elapsed = now_ms.saturating_sub(self.refilled_at);
        let refill = (elapsed as f64 * rules.refill_per_ms).floor();
        if refill < 1.0 {
            return self;
        }
        let tokens = (f64::from(self.tokens) + refill).min(f64::from(rules.cap));
        Self {
            tokens: tokens as u32,
            refilled_at: now_ms,
        }
    }

    /// The bucket after a first attempt put its share in.
    pub(crate) fn deposited(self, rules: &BudgetRules) -> Self {
        Self {
            tokens: self.tokens.saturating_add(rules.deposit).min(rules.cap),
            ..self
        }
    }

    /// The bucket after a retry took its token, or `None` if it holds less
    /// than one.
    pub(crate) fn withdrawn(self) -> Option<Self> {
        let tokens = self.tokens.checked_sub(TOKEN)?;
        Some(Self { tokens, ..self })
    }
}

/// A key's retry budget: one word, changed by compare-and-swap (see the
/// module's docs for the bound it keeps).
#[derive(Debug, Default)]
pub(crate) struct RetryBudget(AtomicU64);

impl RetryBudget {
    /// A first attempt puts its share in.
    pub(crate) fn deposit(&self, now: Nanos, rules: &BudgetRules) {
        self.change(now, rules, |budget| Some(budget.deposited(rules)));
    }

    /// A retry takes a token, if the bucket holds one: whether it did.
    pub(crate) fn withdraw(&self, now: Nanos, rules: &BudgetRules) -> bool {
        self.change(now, rules, Budget::withdrawn)
    }

    /// The tokens in the bucket at `now` (for snapshots).
    pub(crate) fn tokens(&self, now: Nanos, rules: &BudgetRules) -> f64 {
        let now_ms = now / 1_000_000;
        let budget = Budget::unpack(self.0.load(Ordering::Acquire), now_ms, rules);
        f64::from(budget.refilled(now_ms, rules).tokens) / f64::from(TOKEN)
    }

    /// Refills the bucket to `now`, then applies `step`; `false` (and
    /// nothing changed) if the step refuses.
    fn change(
        &self,
        now: Nanos,
        rules: &BudgetRules,
        step: impl Fn(Budget) -> Option<Budget>,
    ) -> bool {
        let now_ms = now / 1_000_000;
        let mut word = self.0.load(Ordering::Acquire);
        loop {
            let budget = Budget::unpack(word, now_ms, rules).refilled(now_ms, rules);
            let Some(next) = step(budget) else {
                return false;
            };
            match self.0.compare_exchange_weak(
                word,
                next.pack(),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return true,
                Err(actual) => word = actual,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn rules(ratio: f64, per_second: f64) -> BudgetRules {
        BudgetRules {
            deposit: (ratio * f64::from(TOKEN)).round() as u32,
            refill_per_ms: per_second * f64::from(TOKEN) / 1_000.0,
            cap: 10 * TOKEN,
        }
    }

    #[test]
    fn a_new_bucket_is_full_and_a_retry_takes_one_token() {
        let rules = rules(0.1, 1.0);
        let budget = RetryBudget::default();
        assert_eq!(budget.tokens(0, &rules), 10.0);
        for _ in 0..10 {
            assert!(budget.withdraw(0, &rules));
        }
        assert!(!budget.withdraw(0, &rules), "an empty bucket refuses");
        for _ in 0..10 {
            budget.deposit(0, &rules);
        }
        assert!(budget.withdraw(0, &rules), "ten calls at 10 % earn a retry");
        assert!(!budget.withdraw(0, &rules));
    }

    #[test]
    fn time_refills_at_the_floor_even_when_looked_at_every_millisecond() {
        let rules = rules(0.1, 0.5);
        let budget = RetryBudget::default();
        for _ in 0..10 {
            assert!(budget.withdraw(0, &rules));
        }
        // Half a thousandth a millisecond: each look alone refills nothing.
        for ms in 1..=2_002 {
            budget.deposit(
                ms * 1_000_000,
                &BudgetRules {
                    deposit: 0,
                    ..rules
                },
            );
        }
        let now = 2_002 * 1_000_000;
        assert_eq!(budget.tokens(now, &rules), 1.0);
        assert!(budget.withdraw(now, &rules));
        assert!(!budget.withdraw(now, &rules));
    }

    #[test]
    fn the_word_packs_and_unpacks_the_bucket() {
        let rules = rules(0.1, 1.0);
        let budget = Budget {
            tokens: 1_234,
            refilled_at: 987_654_321,
        };
        assert_eq!(Budget::unpack(budget.pack(), 0, &rules), budget);
        assert_ne!(
            Budget {
                tokens: 0,
                refilled_at: 0
            }
            .pack(),
            0
        );
    }

    proptest! {
        /// Whatever the outcomes, the retries a bucket allows never exceed
        /// what was put in: the cap, the ratio of the first attempts, and
        /// the floor over the time that passed.
        #[test]
        fn retries_never_exceed_the_ratio_of_calls_plus_the_floor(
            ratio in 0.0f64..=1.0,
            per_second in 0.0f64..=5.0,
            steps in proptest::collection::vec((0u64..3_000, any::<bool>()), 1..400),
        ) {
            let rules = rules(ratio, per_second);
            let budget = RetryBudget::default();
            let (mut now, mut calls, mut retries) = (0u64, 0u64, 0u64);
            for (advance_ms, retry) in steps {
                now += advance_ms * 1_000_000;
                if retry {
                    retries += u64::from(budget.withdraw(now, &rules));
                } else {
                    budget.deposit(now, &rules);
                    calls += 1;
                }
                let deposit = f64::from(rules.deposit) / f64::from(TOKEN);
                let bound = 10.0 + deposit * calls as f64 + per_second * (now / 1_000_000) as f64 / 1_000.0;
                prop_assert!(retries as f64 <= bound + 1e-9, "{retries} retries > {bound}");
            }
        }
    }
}
