//! [`BodyPermit`]: a call's permit on its way to the end of its answer.

use crate::outcome::Outcome;
use crate::permit::OwnedPermit;

/// A call's permit on its way to the end of its answer's body (from
/// [`Passage::Carried`](super::Passage::Carried)), with the outcome it
/// reports there. However it goes (reported, or dropped with the body), it
/// reports once; dropped, it reports the outcome the answer's head was
/// judged by. An HTTP body carries it in a [`CallBody`](super::CallBody);
/// an edge of another protocol keeps it while its answer streams, and
/// [`report`](Self::report)s how the stream ended.
///
/// ```
/// use portcullis::edge::{EdgeCall, Passage, Verdict};
/// use portcullis::outcome::Outcome;
/// use portcullis::{RateConfig, ThrottleManager};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(10.0)).build()?;
/// let passage = EdgeCall::new(&manager, "feed")
///     .carry_body(true)
///     .pass(|| async { Ok::<_, std::io::Error>("a stream") }, |_| Verdict::of(Outcome::Success))
///     .await;
/// let Passage::Carried(_stream, permit) = passage else { panic!() };
/// // ... the stream broke off midway:
/// permit.report(Outcome::Overloaded);
/// assert!(manager.key("feed").rate().unwrap() < 10.0);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct BodyPermit {
    // `None` once reported.
    permit: Option<OwnedPermit>,
    /// The guard's permit, if the call passed one ([`EdgeCall::guard`](super::EdgeCall::guard)):
    /// reported with the key's.
    guard: Option<OwnedPermit>,
    pub(super) at_end: Outcome,
    /// Whether the call carried a deadline: a gRPC `DEADLINE_EXCEEDED` in
    /// its trailers is then its caller's, not overload.
    #[cfg_attr(not(any(feature = "tower", feature = "reqwest")), allow(dead_code))]
    pub(super) under_deadline: bool,
}

impl BodyPermit {
    /// `permit`, to report `at_end` when the body ends or is dropped; for a
    /// call that carried a deadline if `under_deadline`.
    pub(crate) fn new(
        permit: OwnedPermit,
        guard: Option<OwnedPermit>,
        at_end: Outcome,
        under_deadline: bool,
    ) -> Self {
        Self {
            permit: Some(permit),
            guard,
            at_end,
            under_deadline,
        }
    }

    /// Reports `outcome` now, in place of the head's: how the answer ended
    /// (a stream that broke off midway is [`Outcome::Overloaded`]).
    pub fn report(mut self, outcome: Outcome) {
        self.report_once(outcome);
    }

    fn report_once(&mut self, outcome: Outcome) {
        if let Some(permit) = self.permit.take() {
            permit.report(outcome);
        }
        if let Some(guard) = self.guard.take() {
            guard.report(outcome);
        }
    }
}

impl Drop for BodyPermit {
    fn drop(&mut self) {
        self.report_once(self.at_end);
    }
}
