//! The right to make one call, and how its outcome is reported.

use std::fmt;
use std::sync::Arc;

use crate::core::{Admitted, Admitting, CallTimes, Core, HeldToken, KeyTelemetry};
use crate::error::RejectReason;
use crate::key::KeyState;
use crate::outcome::Outcome;
use crate::priority::Priority;
use crate::rate::TakeMark;

/// The right to make one call to a key, from
/// [`acquire`](crate::ThrottleManager::acquire) or
/// [`try_acquire`](crate::ThrottleManager::try_acquire).
///
/// Report the call's outcome with [`success`](Permit::success),
/// [`overloaded`](Permit::overloaded) or [`report`](Permit::report). A permit
/// dropped without a report (the caller gave up, a panic unwound through it)
/// counts as [`Outcome::Neutral`]: a request and an accept for the throttle,
/// so it never causes shedding, and the rate is left alone. Either way the
/// permit's bulkhead slot is freed, and goes straight to the head of the
/// key's queue if anyone waits: also when a panic unwinds through the
/// permit.
///
/// The permit borrows its manager, like tokio's `SemaphorePermit`; an
/// [`OwnedPermit`] (`Permit<'static>`, from
/// [`acquire_owned`](crate::ThrottleManager::acquire_owned)) can move into a
/// spawned task on its own.
///
/// # Example
///
/// ```
/// use portcullis::{Priority, ThrottleConfig, ThrottleManager};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let manager = ThrottleManager::<String>::builder().throttle(ThrottleConfig::new()).build()?;
/// let permit = manager.acquire("api", Priority::LOW).await?;
/// // ... the call ...
/// permit.success();
/// # Ok(())
/// # }
/// ```
#[must_use = "a permit is released when dropped; report the call's outcome with success() or overloaded()"]
pub struct Permit<'a> {
    core: CoreRef<'a>,
    ticket: Ticket,
}

/// A [`Permit`] that owns a handle to its manager's shared state instead of
/// borrowing the manager: `'static`, for moving into a spawned task.
///
/// ```
/// use portcullis::manager::OwnedPermit;
/// use portcullis::{Priority, RateConfig, ThrottleManager};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(10.0)).build()?;
/// let permit: OwnedPermit = manager.acquire_owned("api", Priority::LOW).await?;
/// tokio::spawn(async move {
///     // ... the call ...
///     permit.success();
/// })
/// .await?;
/// assert_eq!(manager.key("api").rate(), Some(11.0));
/// # Ok(())
/// # }
/// ```
pub type OwnedPermit = Permit<'static>;

/// The manager's core, borrowed or owned.
enum CoreRef<'a> {
    Borrowed(&'a Core),
    Owned(Arc<Core>),
}

/// What a permit holds besides its core: the key's state and what its
/// outcome will be counted with.
pub(crate) struct Ticket {
    pub(crate) state: triomphe::Arc<KeyState>,
    pub(crate) times: CallTimes,
    marks: TicketMarks,
    /// How the key is named outside; allocated only when debug events or
    /// per-key metrics are on, so a plain permit stays small.
    pub(crate) telemetry: KeyTelemetry,
}

/// A ticket's small fields in one word: the rate tokens the call took (its
/// success counts as that much use of the rate), its priority, whether it
/// holds a slot of the key's bulkhead and whether its outcome is reported.
/// One word, written whole: a ticket is moved as soon as it is made, and
/// a move reads the word whole, which the processor cannot answer from
/// several narrower writes still on their way.
#[derive(Clone, Copy)]
struct TicketMarks(u64);

impl TicketMarks {
    const HOLDS_SLOT: u64 = 1 << 40;
    const REPORTED: u64 = 1 << 41;
    /// Let through by shadow mode: its outcome counts in no control. The
    /// reason it would have been refused is in the byte from
    /// [`WOULD_REFUSE_SHIFT`](Self::WOULD_REFUSE_SHIFT).
    const SHADOWED: u64 = 1 << 42;
    /// Its call was answered by another control (a server layer inside
    /// this one refused it): its outcome counts in no control, as a
    /// shadowed call's.
    const UNCOUNTED: u64 = 1 << 43;
    const WOULD_REFUSE_SHIFT: u32 = 48;

    fn shadowed(self, reason: RejectReason) -> Self {
        let reason = reason.index() as u64;
        Self(self.0 | Self::SHADOWED | reason << Self::WOULD_REFUSE_SHIFT)
    }

    fn would_refuse(self) -> Option<RejectReason> {
        if !self.has(Self::SHADOWED) {
            return None;
        }
        let index = (self.0 >> Self::WOULD_REFUSE_SHIFT) as u8 as usize;
        RejectReason::ALL.get(index).copied()
    }

    #[inline(always)]
    fn new(cost: u32, priority: Priority, holds_slot: bool) -> Self {
        let slot = if holds_slot { Self::HOLDS_SLOT } else { 0 };
        Self(u64::from(cost) | u64::from(priority.level()) << 32 | slot)
    }

    #[inline(always)]
    fn cost(self) -> u32 {
        self.0 as u32
    }

    #[inline(always)]
    fn priority(self) -> Priority {
        Priority::new((self.0 >> 32) as u8)
    }

    #[inline(always)]
    fn has(self, flag: u64) -> bool {
        self.0 & flag != 0
    }
}

impl Ticket {
    #[inline]
    pub(crate) fn new(
        state: triomphe::Arc<KeyState>,
        priority: Priority,
        times: CallTimes,
        holds_slot: bool,
        cost: u32,
        telemetry: KeyTelemetry,
    ) -> Self {
        Self {
            state,
            times,
            marks: TicketMarks::new(cost, priority, holds_slot),
            telemetry,
        }
    }

    #[inline(always)]
    pub(crate) fn priority(&self) -> Priority {
        self.marks.priority()
    }

    /// Whether the call holds a slot of the key's bulkhead.
    #[inline(always)]
    pub(crate) fn holds_slot(&self) -> bool {
        self.marks.has(TicketMarks::HOLDS_SLOT)
    }

    /// The key's metrics label, if metrics are per key.
    #[inline]
    pub(crate) fn label(&self) -> Option<&str> {
        self.telemetry().label()
    }

    #[inline]
    fn telemetry(&self) -> &KeyTelemetry {
        &self.telemetry
    }
}

impl<'a> Permit<'a> {
    #[inline]
    pub(crate) fn borrowed(core: &'a Core, ticket: Ticket) -> Self {
        Self::counted(CoreRef::Borrowed(core), ticket)
    }

    pub(crate) fn owned(core: &Arc<Core>, ticket: Ticket) -> OwnedPermit {
        Permit::counted(CoreRef::Owned(Arc::clone(core)), ticket)
    }

    /// Counts the slot the permit holds in the metrics.
    #[inline]
    fn counted(core: CoreRef<'a>, ticket: Ticket) -> Self {
        if ticket.holds_slot() {
            let metrics = match &core {
                CoreRef::Borrowed(core) => core.metrics(),
                CoreRef::Owned(core) => core.metrics(),
            };
            metrics.active(ticket.telemetry().label(), 1.0);
        }
        Self { core, ticket }
    }

    /// The call, which had a deadline, had its answer now: its key learns
    /// how quickly its backend answers, for later calls with a deadline to
    /// judge whether they can still finish in time (`deadline::AnswerTime`).
    pub(crate) fn answered(&self) {
        let core = match &self.core {
            CoreRef::Borrowed(core) => *core,
            CoreRef::Owned(core) => core,
        };
        let took = core.now().saturating_sub(self.ticket.times.started);
        self.ticket.state.answered_in(took);
    }

    /// What a store learns of the call's `outcome`, as a call that took
    /// `tokens` (a named limit's part of it, for a metered call).
    pub(crate) fn outcome_event(
        &self,
        outcome: crate::outcome::Outcome,
        tokens: u32,
    ) -> Option<crate::store::RateEvent> {
        self.core()
            .outcome_event(self.ticket.times, tokens, outcome)
    }

    /// The rate tokens the call took.
    pub(crate) fn cost(&self) -> u32 {
        self.ticket.marks.cost()
    }

    /// The call cost `tokens` more rate tokens than it took, as its answer
    /// says: the key's bucket owes them from now. Their mark, to give them
    /// back by.
    pub(crate) fn charge_tokens(&self, tokens: u32) -> TakeMark {
        self.ticket.state.rate.charge(self.core().now(), tokens)
    }

    /// The call cost `tokens` fewer rate tokens than it took, those marked
    /// by `mark`: as much of them as still lies ahead goes back. Returns
    /// how far that moved the bucket's debt.
    pub(crate) fn give_back_tokens(&self, tokens: u32, mark: TakeMark) -> crate::clock::Nanos {
        self.ticket
            .state
            .rate
            .give_back(self.core().now(), tokens, mark)
    }

    fn core(&self) -> &Core {
        match &self.core {
            CoreRef::Borrowed(core) => core,
            CoreRef::Owned(core) => core,
        }
    }

    /// The call succeeded: [`Outcome::Success`].
    ///
    /// ```
    /// # use portcullis::*;
    /// # let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(10.0).increase_by(1.0)).clock(clock::ManualClock::new()).build()?;
    /// manager.try_acquire("api", Priority::HIGH).unwrap().success();
    /// assert_eq!(manager.key("api").rate(), Some(11.0));
    /// # Ok::<(), ConfigError>(())
    /// ```
    #[inline]
    pub fn success(self) {
        self.report(Outcome::Success);
    }

    /// The backend was over capacity ([`Outcome::Overloaded`]: a 429, a
    /// 503, a timeout): the key's rate falls and its throttle counts a
    /// failure. Only overload: a failure that says nothing about capacity
    /// (a bad request, a 404, a bug of the caller's) is
    /// `report(Outcome::Neutral)`, or the permit's drop.
    ///
    /// ```
    /// # use portcullis::*;
    /// # let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(10.0).decrease_by(1.0)).clock(clock::ManualClock::new()).build()?;
    /// manager.try_acquire("api", Priority::HIGH).unwrap().overloaded();
    /// assert_eq!(manager.key("api").rate(), Some(9.0));
    /// # Ok::<(), ConfigError>(())
    /// ```
    #[inline]
    pub fn overloaded(self) {
        self.report(Outcome::Overloaded);
    }

    /// [`overloaded`](Self::overloaded), under a name that read as any
    /// failure.
    #[deprecated(
        since = "0.3.0",
        note = "use Permit::overloaded: it reports overload, not any failure (report Outcome::Neutral for those)"
    )]
    #[inline]
    pub fn failure(self) {
        self.overloaded();
    }

    /// Reports how the call ended.
    ///
    /// ```
    /// # use portcullis::*;
    /// # let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(10.0)).clock(clock::ManualClock::new()).build()?;
    /// manager.try_acquire("api", Priority::HIGH).unwrap().report(Outcome::Neutral);
    /// assert_eq!(manager.key("api").rate(), Some(10.0));
    /// # Ok::<(), ConfigError>(())
    /// ```
    #[inline]
    pub fn report(mut self, outcome: Outcome) {
        self.finish(outcome);
    }

    /// Counts the outcome, then frees the bulkhead slot (which may hand it to
    /// the head of the queue).
    #[inline]
    fn finish(&mut self, outcome: Outcome) {
        let marks = self.ticket.marks;
        self.ticket.marks = TicketMarks(marks.0 & !TicketMarks::HOLDS_SLOT | TicketMarks::REPORTED);
        let ticket = &self.ticket;
        let core = match &self.core {
            CoreRef::Borrowed(core) => *core,
            CoreRef::Owned(core) => core,
        };
        // One look at the key's settings for every control.
        let settings = core.settings_of(&ticket.state);
        // A call shadow mode let through would not have run: its outcome
        // teaches no control, as enforcement's would not have.
        if !marks.has(TicketMarks::SHADOWED | TicketMarks::UNCOUNTED) {
            core.record_outcome(
                &ticket.state,
                settings,
                marks.priority(),
                ticket.times,
                marks.cost(),
                outcome,
                ticket.telemetry(),
            );
        }
        if marks.has(TicketMarks::HOLDS_SLOT) {
            core.release_slot_after_call(
                &ticket.state,
                settings,
                ticket.times.started,
                outcome,
                ticket.telemetry(),
            );
        }
        // The key space's references and this permit's: once the permit is
        // gone, the key may make room.
        core.room().call_ended(|| {
            triomphe::Arc::strong_count(&ticket.state) <= crate::registry::HOLDERS + 1
        });
    }

    /// Ends a call another layer refused, so that it was never made: its
    /// rate tokens go back (as far as they still lie ahead; a rate in a
    /// store keeps them), and it counts in no control, as
    /// [`uncounted`](Self::uncounted).
    pub(crate) fn not_made(self) {
        let (tokens, shadowed) = (self.cost(), self.would_refuse().is_some());
        let state = &self.ticket.state;
        if tokens > 0 && !shadowed && self.core().store_of(state).is_none() {
            state.rate.give_back_last(self.core().now(), tokens);
        }
        self.uncounted();
    }

    /// Ends the call with its outcome counted by no control (its slot goes
    /// back, and a learned limit learns nothing): another layer answered
    /// it, and counted it there.
    pub(crate) fn uncounted(mut self) {
        self.ticket.marks = TicketMarks(self.ticket.marks.0 | TicketMarks::UNCOUNTED);
        self.finish(Outcome::Neutral);
    }

    /// The priority the call was admitted at (after the task-local priority
    /// and the out-of-range policy).
    ///
    /// ```
    /// # use portcullis::*;
    /// # let manager = ThrottleManager::<String>::builder().throttle(ThrottleConfig::new()).build()?;
    /// let permit = manager.try_acquire("api", Priority::new(9)).unwrap();
    /// assert_eq!(permit.priority(), Priority::LOW); // clamped to the lowest of 4 levels
    /// # Ok::<(), ConfigError>(())
    /// ```
    #[inline]
    pub fn priority(&self) -> Priority {
        self.ticket.priority()
    }

    /// Why the controls would have refused this call, if its key is in
    /// shadow mode and they would have (then it was let through holding
    /// nothing, and its outcome teaches no control); `None` for a call
    /// they admitted.
    ///
    /// ```
    /// # use portcullis::*;
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::per_second(1))
    ///     .shadow(true)
    ///     .build()?;
    /// let first = manager.try_acquire("api", Priority::HIGH).unwrap();
    /// assert_eq!(first.would_refuse(), None);
    /// let second = manager.try_acquire("api", Priority::HIGH).unwrap();
    /// assert_eq!(second.would_refuse(), Some(error::RejectReason::RateLimited));
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn would_refuse(&self) -> Option<RejectReason> {
        self.ticket.marks.would_refuse()
    }
}

impl Drop for Permit<'_> {
    #[inline]
    fn drop(&mut self) {
        if !self.ticket.marks.has(TicketMarks::REPORTED) {
            self.finish(Outcome::Neutral);
        }
    }
}

impl fmt::Debug for Permit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit")
            .field("priority", &self.ticket.priority())
            .field("owned", &matches!(self.core, CoreRef::Owned(_)))
            .field("reported", &self.ticket.marks.has(TicketMarks::REPORTED))
            .finish_non_exhaustive()
    }
}

/// The right to make one call charged to several keys, from
/// [`acquire_all`](crate::ThrottleManager::acquire_all): one [`Permit`] of
/// each key, in the order the keys were given.
///
/// Its outcome is every key's: [`success`](Self::success),
/// [`overloaded`](Self::overloaded) and [`report`](Self::report) count it in each
/// key's controls, and free each key's slot. Dropped without a report, it
/// counts as [`Outcome::Neutral`] for each key, as a dropped permit does.
/// Where the keys should learn different things (the tenant's backend
/// failed, but the user's quota only counts), report each key's own permit
/// with [`into_permits`](Self::into_permits).
///
/// ```
/// use portcullis::outcome::Outcome;
/// use portcullis::{Priority, RateConfig, ThrottleManager};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let manager = ThrottleManager::<String>::builder()
///     .rate(RateConfig::adaptive(10.0).increase_by(1.0).decrease_by(1.0))
///     .build()?;
/// let permit = manager.acquire_all(&["tenant-a", "user-7"], Priority::HIGH).await?;
/// let [tenant, user]: [_; 2] = permit.into_permits().try_into().unwrap();
/// tenant.overloaded(); // the tenant's backend was over capacity
/// user.report(Outcome::Neutral); // the user did nothing wrong
/// assert_eq!(manager.key("tenant-a").rate(), Some(9.0));
/// assert_eq!(manager.key("user-7").rate(), Some(10.0));
/// # Ok(())
/// # }
/// ```
#[must_use = "a permit is released when dropped; report the call's outcome with success() or overloaded()"]
pub struct JointPermit<'a> {
    permits: Vec<Permit<'a>>,
}

impl<'a> JointPermit<'a> {
    pub(crate) fn new(permits: Vec<Permit<'a>>) -> Self {
        Self { permits }
    }

    /// The call, which had a deadline, had its answer now: every key
    /// learns how quickly (see [`Permit::answered`]).
    pub(crate) fn answered(&self) {
        self.permits.iter().for_each(Permit::answered);
    }

    /// The call succeeded, for every key: [`Outcome::Success`].
    ///
    /// ```
    /// # use portcullis::*;
    /// # let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(10.0).increase_by(1.0)).clock(clock::ManualClock::new()).build()?;
    /// manager.try_acquire_all(&["tenant-a", "user-7"], Priority::HIGH).unwrap().success();
    /// assert_eq!((manager.key("tenant-a").rate(), manager.key("user-7").rate()), (Some(11.0), Some(11.0)));
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn success(self) {
        self.report(Outcome::Success);
    }

    /// The backend was over capacity, for every key:
    /// [`Outcome::Overloaded`] (only overload, as
    /// [`Permit::overloaded`] says).
    ///
    /// ```
    /// # use portcullis::*;
    /// # let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(10.0).decrease_by(1.0)).clock(clock::ManualClock::new()).build()?;
    /// manager.try_acquire_all(&["tenant-a", "user-7"], Priority::HIGH).unwrap().overloaded();
    /// assert_eq!((manager.key("tenant-a").rate(), manager.key("user-7").rate()), (Some(9.0), Some(9.0)));
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn overloaded(self) {
        self.report(Outcome::Overloaded);
    }

    /// [`overloaded`](Self::overloaded), under a name that read as any
    /// failure.
    #[deprecated(
        since = "0.3.0",
        note = "use JointPermit::overloaded: it reports overload, not any failure (report Outcome::Neutral for those)"
    )]
    pub fn failure(self) {
        self.overloaded();
    }

    /// Reports how the call ended to every key, in the order the keys were
    /// given.
    ///
    /// ```
    /// # use portcullis::*;
    /// # let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(10.0)).clock(clock::ManualClock::new()).build()?;
    /// manager.try_acquire_all(&["tenant-a", "user-7"], Priority::HIGH).unwrap().report(Outcome::Neutral);
    /// assert_eq!(manager.key("user-7").rate(), Some(10.0));
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn report(self, outcome: Outcome) {
        for permit in self.permits {
            permit.report(outcome);
        }
    }

    /// Each key's own permit, in the order the keys were given, to report
    /// each key's outcome apart (see the type's example).
    ///
    /// ```
    /// # use portcullis::*;
    /// # let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(10.0)).clock(clock::ManualClock::new()).build()?;
    /// let permits = manager.try_acquire_all(&["tenant-a", "user-7"], Priority::HIGH).unwrap().into_permits();
    /// assert_eq!(permits.len(), 2);
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn into_permits(self) -> Vec<Permit<'a>> {
        self.permits
    }
}

impl fmt::Debug for JointPermit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JointPermit")
            .field("keys", &self.permits.len())
            .finish_non_exhaustive()
    }
}

/// A permit's: the ticket, its token spent and its slot held.
impl<'c> Admitted<'c> for Ticket {
    const COUNTED: bool = true;
    const KEEPS_TOKEN: bool = false;

    #[inline(always)]
    fn from_call(call: Admitting<'c>) -> Self {
        let call = call.admitted();
        // A token the call still holds is spent: only the store's needs
        // freeing.
        if let Some(HeldToken::Store(token)) = call.token {
            drop(token);
        }
        Ticket::new(
            call.state,
            call.priority,
            call.times,
            call.holds_slot,
            call.cost,
            call.telemetry,
        )
    }

    fn shadowed(call: Admitting<'c>, reason: RejectReason) -> Self {
        let mut ticket = Self::from_call(call);
        ticket.marks = ticket.marks.shadowed(reason);
        ticket
    }

    #[inline(always)]
    fn label(&self) -> Option<&str> {
        Ticket::label(self)
    }
}
