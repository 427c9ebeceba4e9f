//! The order of the two sides in the benches' interleaved rounds.

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
