//! What a learned rate remembers of its last fall
//! ([`growth`](crate::rate::growth)), in the
//! key's `Queue`: made by the first fall, so a key whose rate never fell
//! carries none of it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::clock::Nanos;
use crate::rate::growth::LastFall;

/// The flag of [`FallMemory::from`] for a fall the host marked with a pause.
const FIRM: u64 = 1 << 63;

/// How long after a fall a pause the host asks for marks that fall: the
/// failure that carried the pause is reported just before it.
const PAUSE_MARKS_FALL: Nanos = 1_000_000_000;

/// The last fall: the rate it fell from (an `f64`'s bits, with [`FIRM`]
/// set when the host asked for a pause; 0: it never fell) and when, and
/// whether a call succeeded since. Written by the failure that claimed the
/// fall, then read by successes; a success that reads the two halves of
/// different falls grows once by the wrong one, within the bounds.
#[derive(Debug, Default)]
pub(super) struct FallMemory {
    from: AtomicU64,
    at: AtomicU64,
    /// The rate the fall's failing call was sent at (an `f64`'s bits): where
    /// a fall the host marks with a pause was earned.
    sent: AtomicU64,
    served: AtomicBool,
}

impl FallMemory {
    /// The last fall, if the rate fell.
    pub(super) fn last(&self) -> Option<LastFall> {
        let from = self.from.load(Ordering::Acquire);
        (from != 0).then(|| LastFall {
            from: f64::from_bits(from & !FIRM),
            at: self.at.load(Ordering::Acquire),
            firm: from & FIRM != 0,
        })
    }

    /// Remembers `fall` as the last one, its failing call sent at `sent`.
    pub(super) fn record(&self, fall: LastFall, sent: f64) {
        self.sent.store(sent.to_bits(), Ordering::Release);
        self.record_only(fall);
    }

    fn record_only(&self, fall: LastFall) {
        self.at.store(fall.at, Ordering::Release);
        let firm = if fall.firm { FIRM } else { 0 };
        self.from
            .store(fall.from.to_bits() | firm, Ordering::Release);
    }

    /// A call succeeded since the last fall (a store only the first time).
    pub(super) fn served(&self) {
        if !self.served.load(Ordering::Acquire) {
            self.served.store(true, Ordering::Release);
        }
    }

    /// Whether no call succeeded since the last fall; starts counting anew.
    pub(super) fn take_unserved(&self) -> bool {
        !self.served.swap(false, Ordering::AcqRel)
    }

    /// A pause the host asked for at `now` marks the fall just before it
    /// firm ([`FIRM_DWELL`](crate::rate::growth::FIRM_DWELL)); a pause with no fall just before it
    /// marks nothing.
    pub(super) fn mark_paused(&self, now: Nanos) {
        if let Some(fall) = self
            .last()
            .filter(|fall| now.saturating_sub(fall.at) <= PAUSE_MARKS_FALL)
        {
            self.record_only(LastFall {
                from: f64::from_bits(self.sent.load(Ordering::Acquire)),
                firm: true,
                ..fall
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pause_marks_the_fall_just_before_it_firm_at_the_rate_it_was_sent_at() {
        let memory = FallMemory::default();
        assert_eq!(memory.last(), None);
        let fall = LastFall {
            from: 40.0,
            at: 1_000,
            firm: false,
        };
        memory.record(fall, 60.0);
        assert_eq!(memory.last(), Some(fall));
        memory.mark_paused(1_000 + PAUSE_MARKS_FALL);
        let marked = LastFall {
            from: 60.0,
            firm: true,
            ..fall
        };
        assert_eq!(memory.last(), Some(marked));
        // A pause long after the fall marks nothing.
        memory.record(fall, 60.0);
        memory.mark_paused(1_001 + PAUSE_MARKS_FALL);
        assert_eq!(memory.last(), Some(fall));
    }
}
