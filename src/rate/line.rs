//! The line of calls waiting for their turn to take a key's rate token.
//!
//! A call takes its token when the token is due within [`HORIZON`]; one
//! whose token lies further ahead (or that finds others already waiting)
//! joins the key's line instead, first come first served, and takes its
//! token when it reaches the head and its token comes within the horizon.
//! So the bucket is never booked more than the horizon ahead, and a change
//! of the rate applies at once to every call still in line.
//!
//! Why: a call that took its token on arrival, however far ahead, kept
//! that place whatever the rate did next. Thirty-two callers at 10/s booked
//! the bucket 3.2 s ahead, and a rise reached the host only once that
//! queue had drained: the rate, capped at twice the use it had seen,
//! doubled once per queue. A fleet sharing one rate booked the store's
//! bucket as far ahead for every process.
//!
//! The line is allocated by the first call that waits in it; a key whose
//! calls never wait for a token beyond the horizon has none.

use std::sync::atomic::{AtomicU32, Ordering};

use crate::clock::Nanos;

/// How far ahead a call may book the key's own rate token: a few timer
/// ticks, so that at high rates many calls book at once and each sleeps to
/// its slot (one at a time, each head would wait for a timer tick).
pub(crate) const HORIZON: Nanos = 10_000_000;

/// How far ahead a call may book a token of a rate in a store: more than a
/// round trip, since the head of each process's line asks the store one
/// call at a time.
pub(crate) const STORE_HORIZON: Nanos = 100_000_000;

/// One key's line.
#[derive(Debug)]
pub(crate) struct Line {
    /// One permit: the head's. Tokio's semaphore hands it out first come,
    /// first served, and a waiter dropped in it leaves without a trace.
    turn: tokio::sync::Semaphore,
    /// Calls in line, the head included.
    waiting: AtomicU32,
}

impl Default for Line {
    fn default() -> Self {
        Self {
            turn: tokio::sync::Semaphore::new(1),
            waiting: AtomicU32::new(0),
        }
    }
}

/// A call's place in line; at the head once [`Place::head`] returns.
/// Dropped, it leaves the line (and hands the head on).
#[derive(Debug)]
pub(crate) struct Place<'a> {
    line: &'a Line,
    head: Option<tokio::sync::SemaphorePermit<'a>>,
}

impl Line {
    /// Calls in line now, the head included.
    #[inline]
    pub(crate) fn waiting(&self) -> u32 {
        self.waiting.load(Ordering::Acquire)
    }

    /// Joins the line at its end.
    pub(crate) fn join(&self) -> Place<'_> {
        self.waiting.fetch_add(1, Ordering::AcqRel);
        Place {
            line: self,
            head: None,
        }
    }
}

impl Place<'_> {
    /// Waits until this call is at the head of the line.
    ///
    /// # Cancel safety
    ///
    /// Dropped while waiting, the call leaves the line; the calls behind
    /// it move up.
    pub(crate) async fn head(&mut self) {
        if self.head.is_none() {
            // The semaphore is never closed.
            self.head = self.line.turn.acquire().await.ok();
        }
    }
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        self.line.waiting.fetch_sub(1, Ordering::AcqRel);
    }
}

/// When the head of a line, whose token is `wait` from `now` (beyond
/// `horizon`), looks again: when the token comes within the horizon, or
/// after a quarter of the wait if sooner (at least the horizon), so that a
/// rise of the rate meanwhile costs it at most a quarter of its wait.
pub(crate) fn next_look(now: Nanos, wait: Nanos, horizon: Nanos) -> Nanos {
    let within = wait.saturating_sub(horizon);
    now.saturating_add(within.min((wait / 4).max(horizon)))
}

/// How long a call joining a line of `waiting` calls may expect to wait,
/// the next token being `wait` away and each call in line taking `cost`
/// tokens of `interval` each (the rate now; a later change moves it).
pub(crate) fn expected_wait(wait: Nanos, waiting: u32, cost: u32, interval: Nanos) -> Nanos {
    let ahead = u64::from(waiting).saturating_mul(u64::from(cost));
    wait.saturating_add(ahead.saturating_mul(interval))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = 1_000_000;

    #[test]
    fn the_head_looks_again_when_its_token_nears_or_after_a_quarter_of_its_wait() {
        // Far ahead: a quarter of the wait.
        assert_eq!(next_look(0, 1_000 * MS, HORIZON), 250 * MS);
        // Near: when the token comes within the horizon.
        assert_eq!(next_look(5 * MS, 15 * MS, HORIZON), 10 * MS);
        // In between: never sooner than the horizon.
        assert_eq!(next_look(0, 30 * MS, HORIZON), 10 * MS);
    }

    #[test]
    fn the_wait_expected_counts_every_call_in_line_at_its_cost() {
        assert_eq!(expected_wait(40 * MS, 3, 2, 100 * MS), 640 * MS);
        assert_eq!(expected_wait(0, 0, 1, 100 * MS), 0);
        assert_eq!(expected_wait(Nanos::MAX, 9, 9, Nanos::MAX), Nanos::MAX);
    }
}
