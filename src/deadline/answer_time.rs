//! How fast a key's backend has answered lately: the quickest recent
//! answer of a call that had a deadline, as pure maths on one 32-bit word
//! (whole microseconds; 0 before the first answer).
//!
//! A call that has to wait for its token, for a slot or for room spends
//! its caller's deadline doing so. Admitted with less time left than its
//! backend takes to answer, it is cut short by the deadline: the backend
//! did the work for nothing, and the call fails anyway. So a call with a
//! deadline waits only while it would keep that long before its deadline
//! (`core/steps.rs`), and is refused at once when it would not.
//!
//! The estimate leans short, so that it refuses only calls that could not
//! have finished: an answer quicker than it is taken at once, a slower one
//! moves it a sixteenth of the way (a backend that slows for good is
//! followed within about forty answers). Only answers that came back in
//! time are seen (a call the deadline cut short tells no answer time), and
//! only those of calls that had a deadline: timing them costs a clock
//! read, which a call without one does not pay.
//!
//! Invariant: the word is 0 exactly until the first answer, then at least
//! 1 µs and at most the slowest answer seen (saturating at about 71
//! minutes).

use crate::clock::Nanos;

const NANOS_PER_MICRO: Nanos = 1_000;

/// The share of the way a slower answer moves the estimate: 1 / 2^SHIFT.
const SHIFT: u32 = 4;

/// The quickest recent answer of a key's calls with a deadline, as a word.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct AnswerTime(pub(crate) u32);

impl AnswerTime {
    /// The estimate after an answer that took `took`.
    pub(crate) fn after(self, took: Nanos) -> Self {
        let micros = u32::try_from(took.div_ceil(NANOS_PER_MICRO))
            .unwrap_or(u32::MAX)
            .max(1);
        Self(match self.0 {
            0 => micros,
            quickest if micros <= quickest => micros,
            quickest => quickest + (micros - quickest).div_ceil(1 << SHIFT),
        })
    }

    /// The estimate, in nanoseconds: 0 before the first answer.
    pub(crate) fn nanos(self) -> Nanos {
        Nanos::from(self.0) * NANOS_PER_MICRO
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MS: Nanos = 1_000_000;

    #[test]
    fn no_answer_no_estimate() {
        assert_eq!(AnswerTime::default().nanos(), 0);
    }

    #[test]
    fn a_quicker_answer_is_taken_at_once_a_slower_one_a_sixteenth_of_the_way() {
        let first = AnswerTime::default().after(30 * MS);
        assert_eq!(first.nanos(), 30 * MS);
        assert_eq!(first.after(10 * MS).nanos(), 10 * MS);
        assert_eq!(first.after(46 * MS).nanos(), 31 * MS);
        // A backend that slows from 30 ms to 300 ms for good is followed
        // most of the way within forty answers.
        let slowed = (0..40).fold(first, |time, _| time.after(300 * MS));
        assert!(slowed.nanos() > 250 * MS, "{}", slowed.nanos());
    }

    #[test]
    fn answers_round_up_to_a_microsecond_and_saturate() {
        assert_eq!(AnswerTime::default().after(0).nanos(), 1_000);
        assert_eq!(AnswerTime::default().after(1).nanos(), 1_000);
        assert_eq!(AnswerTime::default().after(Nanos::MAX).0, u32::MAX);
    }

    proptest! {
        #[test]
        fn the_estimate_stays_between_the_quickest_and_slowest_answers(answers in proptest::collection::vec(0..Nanos::MAX, 1..60)) {
            let time = answers.iter().fold(AnswerTime::default(), |time, &took| time.after(took));
            let micros = |took: Nanos| u32::try_from(took.div_ceil(1_000)).unwrap_or(u32::MAX).max(1);
            let quickest = answers.iter().copied().map(micros).min().unwrap();
            let slowest = answers.iter().copied().map(micros).max().unwrap();
            prop_assert!(time.0 >= quickest && time.0 <= slowest, "{} not in {}..={}", time.0, quickest, slowest);
        }
    }
}
