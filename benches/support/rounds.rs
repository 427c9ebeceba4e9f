//! The benches' interleaved rounds: the order of the two sides, and the
//! median of what the rounds measured.

#![allow(dead_code)] // each bench uses its own part

/// Runs both sides once, ours first in even rounds and theirs first in odd
/// ones, so that neither always runs on a warmer or a cooler machine;
/// returns (ours, theirs).
pub(crate) fn alternate<T>(
    round: usize,
    ours: impl FnOnce() -> T,
    theirs: impl FnOnce() -> T,
) -> (T, T) {
    if round % 2 == 0 {
        let ours = ours();
        (ours, theirs())
    } else {
        let theirs = theirs();
        (ours(), theirs)
    }
}

/// The median of `values`, with the lowest and the highest: (median,
/// lowest, highest).
pub(crate) fn median(mut values: Vec<f64>) -> (f64, f64, f64) {
    values.sort_by(f64::total_cmp);
    (
        values[values.len() / 2],
        values[0],
        values[values.len() - 1],
    )
}
