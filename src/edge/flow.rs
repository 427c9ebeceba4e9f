//! [`EdgeCall`]: the one path of a call through an edge (the steps are in
//! the [module's docs](super)). An edge brings what is its own: how it
//! admits ([`AdmitAs`]), how it calls and judges what came back; it
//! answers each [`Passage`] its own way.

use std::future::Future;
use std::hash::Hash;
use std::time::Duration;

use super::BodyPermit;
use crate::ThrottleManager;
use crate::clock::nanos;
use crate::core::Patience;
use crate::deadline::{self, Expiry};
use crate::error::Rejected;
use crate::outcome::Outcome;
use crate::permit::OwnedPermit;
use crate::priority::{Flow, Priority, with_flow, with_priority};
use crate::registry::BorrowedKey;
use crate::with_deadline;
use tokio::time::Instant;

/// How an edge's call is admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum AdmitAs {
    /// As [`acquire`](ThrottleManager::acquire): waiting for the rate's
    /// token and in the bulkhead's queue. A client's way: its caller wants
    /// the call made.
    #[default]
    Client,
    /// As [`try_acquire_or_queue_owned`](ThrottleManager::try_acquire_or_queue_owned):
    /// refused at once if the rate has no token, queued for the bulkhead.
    /// A server's way: a client over its quota is told so, not held.
    Server,
}

/// What came back from a call, as the edge judges it: its outcome, and how
/// long the answer asks the caller to hold off the key (a `Retry-After`),
/// if it does.
///
/// ```
/// use portcullis::outcome::Outcome;
/// use portcullis::edge::Verdict;
/// use std::time::Duration;
///
/// let busy = Verdict { outcome: Outcome::Overloaded, pause: Some(Duration::from_secs(2)) };
/// assert_eq!(Verdict::of(Outcome::Success).pause, None);
/// # let _ = busy;
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Verdict {
    /// The call's outcome for its key.
    pub outcome: Outcome,
    /// How long the answer asks the caller to hold off the key.
    pub pause: Option<Duration>,
}

impl Verdict {
    /// `outcome`, with no pause asked for.
    ///
    /// ```
    /// # use portcullis::{Outcome, edge::Verdict};
    /// assert_eq!(Verdict::of(Outcome::Neutral).outcome, Outcome::Neutral);
    /// ```
    pub fn of(outcome: Outcome) -> Self {
        Self {
            outcome,
            pause: None,
        }
    }
}

/// Whose an answer is, for an edge that passes calls to an inner layer
/// of its own kind (the server layer's, behind another server layer):
/// what [`EdgeCall::pass_judged`]'s judge returns.
///
/// ```
/// use portcullis::edge::{Judged, Verdict};
/// use portcullis::outcome::Outcome;
///
/// /// An answer an inner layer marked is that layer's to count.
/// fn judge(answer: &Result<(u16, bool), std::io::Error>) -> Judged {
///     match answer {
///         Ok((_, true)) => Judged::Elsewhere,
///         Ok((status, false)) if *status >= 500 => Judged::Counted(Verdict::of(Outcome::Overloaded)),
///         Ok(_) => Judged::Counted(Verdict::of(Outcome::Success)),
///         Err(_) => Judged::Counted(Verdict::of(Outcome::Overloaded)),
///     }
/// }
/// assert_eq!(judge(&Ok((200, true))), Judged::Elsewhere);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum Judged {
    /// The call's own answer: reported as the verdict says.
    Counted(Verdict),
    /// Another layer's answer to a call it let through, counted there.
    Elsewhere,
    /// Another layer refused the call: it was not made.
    RefusedElsewhere,
}

/// How a call through an edge went.
#[derive(Debug)]
#[non_exhaustive]
pub enum Passage<T, E> {
    /// The key's controls refused it: it was not made.
    Refused(Rejected),
    /// It had no answer within the manager's call timeout (counted as
    /// overload) or before its caller's deadline (neutral): dropped.
    TimedOut(Expiry),
    /// A success whose body is to carry the [`BodyPermit`] to its end (see
    /// [`EdgeCall::carry_body`]): the call ends, and is reported, when the
    /// permit is.
    Carried(T, BodyPermit),
    /// What came back, already reported as the verdict says (and the key
    /// deferred by its pause).
    Reported(Result<T, E>, Verdict),
}

/// One call through an edge: on `key` of `manager`, at a priority,
/// admitted as a client or a server admits, run under the manager's call
/// timeout and the caller's deadline on the manager's clock, judged by the
/// edge, and reported (or its permit handed to the answer's body). What
/// the crate's own edges (the reqwest middleware, the client layer, the
/// server layer) are built on, for an edge of your own: another HTTP
/// client, a websocket, a queue consumer.
///
/// ```
/// use portcullis::edge::{EdgeCall, Passage, Verdict};
/// use portcullis::outcome::Outcome;
/// use portcullis::{Priority, RateConfig, ThrottleManager};
///
/// /// A client of some service the crate does not wrap, whose answers say
/// /// "busy" when it is overloaded.
/// async fn ask(service: &str) -> Result<String, std::io::Error> {
///     Ok(format!("{service}: done"))
/// }
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(10.0)).build()?;
/// let passage = EdgeCall::new(&manager, "jobs")
///     .priority(Priority::LOW)
///     .pass(
///         || ask("jobs"),
///         |answer| match answer {
///             Ok(text) if text.ends_with("busy") => Verdict::of(Outcome::Overloaded),
///             Ok(_) => Verdict::of(Outcome::Success),
///             Err(_) => Verdict::of(Outcome::Overloaded),
///         },
///     )
///     .await;
/// match passage {
///     Passage::Reported(Ok(text), _) => assert_eq!(text, "jobs: done"),
///     other => panic!("{other:?}"),
/// }
/// assert_eq!(manager.key("jobs").rate(), Some(11.0)); // the success was reported
/// # Ok(())
/// # }
/// ```
///
/// The key may be of any key type of the manager's (`EdgeCall::new(&manager,
/// &Key::Client(id))` for a `ThrottleManager<Key>`); a `ThrottleManager<String>`
/// takes a `&str`.
pub struct EdgeCall<'a, K = String, Q: ?Sized = str> {
    manager: &'a ThrottleManager<K>,
    key: &'a Q,
    priority: Priority,
    admit_as: AdmitAs,
    carry: bool,
    deadline: Option<Instant>,
    /// A second manager's key the call must pass too: a service guard.
    guard: Option<(&'a ThrottleManager<String>, &'a str)>,
    /// The requests of the key's rate that the store took already, with
    /// the call's named limits (a metered call's, made by the client
    /// middleware, without a guard): the key's controls do not take them
    /// again.
    rate_taken: Option<u32>,
}

impl<K, Q: ?Sized> Clone for EdgeCall<'_, K, Q> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K, Q: ?Sized> Copy for EdgeCall<'_, K, Q> {}

impl<K, Q: ?Sized> std::fmt::Debug for EdgeCall<'_, K, Q> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EdgeCall")
            .field("priority", &self.priority)
            .field("admit_as", &self.admit_as)
            .field("carry", &self.carry)
            .field("deadline", &self.deadline)
            .field("guarded", &self.guard.is_some())
            .field("rate_taken", &self.rate_taken)
            .finish_non_exhaustive()
    }
}

impl<'a, K, Q> EdgeCall<'a, K, Q>
where
    K: Hash + Eq + Send + Sync + 'static,
    Q: BorrowedKey<K> + ?Sized,
{
    /// A call on `key` of `manager`: at [`Priority::HIGH`], admitted as a
    /// client, reported at its answer, under the task's deadline if any.
    ///
    /// ```
    /// # use portcullis::{edge::EdgeCall, *};
    /// # let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(10.0)).build()?;
    /// let call = EdgeCall::new(&manager, "api.example.com");
    /// # let _ = call;
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn new(manager: &'a ThrottleManager<K>, key: &'a Q) -> Self {
        Self {
            manager,
            key,
            priority: Priority::HIGH,
            admit_as: AdmitAs::Client,
            carry: false,
            deadline: None,
            guard: None,
            rate_taken: None,
        }
    }

    /// The call's priority.
    ///
    /// ```
    /// # use portcullis::{edge::EdgeCall, *};
    /// # let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(10.0)).build()?;
    /// let call = EdgeCall::new(&manager, "api").priority(Priority::LOW);
    /// # let _ = call;
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn priority(mut self, priority: Priority) -> Self {
        self.priority = priority;
        self
    }

    /// How the call is admitted: as a client ([`AdmitAs::Client`], the
    /// default) or as a server ([`AdmitAs::Server`]).
    ///
    /// ```
    /// # use portcullis::{edge::{AdmitAs, EdgeCall}, *};
    /// # let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(10.0)).build()?;
    /// let call = EdgeCall::new(&manager, "client-7").admit_as(AdmitAs::Server);
    /// # let _ = call;
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn admit_as(mut self, admit_as: AdmitAs) -> Self {
        self.admit_as = admit_as;
        self
    }

    /// The store took the call's `requests` of its key's rate already, with
    /// its named limits (`None`: they are the key's controls' to take).
    #[cfg_attr(not(feature = "reqwest"), allow(dead_code))]
    pub(crate) fn rate_taken(mut self, requests: Option<u32>) -> Self {
        self.rate_taken = requests;
        self
    }

    /// Whether a success hands its permit on in [`Passage::Carried`], to be
    /// reported when its answer's body ends (default `false`: every call is
    /// reported at its answer).
    ///
    /// ```
    /// # use portcullis::{edge::EdgeCall, *};
    /// # let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(10.0)).build()?;
    /// let streamed = EdgeCall::new(&manager, "downloads").carry_body(true);
    /// # let _ = streamed;
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn carry_body(mut self, carry: bool) -> Self {
        self.carry = carry;
        self
    }

    /// The call's own deadline (a request's `grpc-timeout`, its timeout),
    /// if it brought one: admitted and run under it, as under
    /// [`with_deadline`] (the sooner of it and the task's).
    ///
    /// ```
    /// # use portcullis::{edge::EdgeCall, *};
    /// # use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), ConfigError> {
    /// # let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(10.0)).build()?;
    /// let at = tokio::time::Instant::now() + Duration::from_millis(250);
    /// let call = EdgeCall::new(&manager, "api").deadline(Some(at));
    /// # let _ = call;
    /// # Ok(())
    /// # }
    /// ```
    pub fn deadline(mut self, deadline: Option<Instant>) -> Self {
        self.deadline = deadline;
        self
    }

    /// Once the key's own controls admit the call, `key` of `guard` must
    /// admit it too, as the edge admits ([`AdmitAs`]): a limit every key of
    /// the edge shares, such as a server's service guard, which a
    /// [`ThrottleLayer`](crate::server::ThrottleLayer) builds with
    /// `service_guard`. Refused by the guard, the call's own key gets back
    /// what it gave (its slot, and its rate token as a cancelled
    /// [`wait`](ThrottleManager::wait) gives one back) and counts nothing;
    /// the refusal is the guard's, counted by the guard. Admitted, both
    /// learn the call's outcome. The key's slot is held while the call
    /// waits in the guard's queue.
    ///
    /// ```
    /// use portcullis::edge::{EdgeCall, Passage, Verdict};
    /// use portcullis::error::RejectReason;
    /// use portcullis::outcome::Outcome;
    /// use portcullis::{BulkheadConfig, Priority, RateConfig, ThrottleManager};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let clients = ThrottleManager::<String>::builder().rate(RateConfig::per_second(10)).build()?;
    /// let service = ThrottleManager::<String>::builder().bulkhead(BulkheadConfig::new(1)).build()?;
    /// let _busy = service.try_acquire("all", Priority::HIGH)?; // the service's one slot
    /// let passage = EdgeCall::new(&clients, "client-7")
    ///     .guard(&service, "all")
    ///     .pass(|| async { Ok::<_, std::io::Error>("answer") }, |_| Verdict::of(Outcome::Success))
    ///     .await;
    /// let Passage::Refused(refused) = passage else { panic!("{passage:?}") };
    /// assert_eq!(refused.reason(), RejectReason::Full);
    /// assert_eq!(clients.peek("client-7").unwrap().remaining, 10); // its token is back
    /// # Ok(())
    /// # }
    /// ```
    pub fn guard(mut self, guard: &'a ThrottleManager<String>, key: &'a str) -> Self {
        self.guard = Some((guard, key));
        self
    }

    /// Admits the call, makes it with `call` under the manager's call
    /// timeout and the caller's deadline, judges what came back with
    /// `judge`, and reports it (deferring the key by the verdict's pause)
    /// or hands its permit on. A deadline already passed is refused before
    /// anything is made; a call the deadline ends is dropped as neutral,
    /// one the call timeout ends as overload (see [whose time ran
    /// out](crate::deadline#whose-time-ran-out)).
    ///
    /// # Cancel safety
    ///
    /// Dropped while waiting for admission, it takes nothing from the key;
    /// dropped while `call` runs, it drops that call and frees the key's
    /// slot, counting a neutral outcome.
    pub async fn pass<T, E, F, C>(
        self,
        call: C,
        judge: impl FnOnce(&Result<T, E>) -> Verdict,
    ) -> Passage<T, E>
    where
        C: FnOnce() -> F,
        F: Future<Output = Result<T, E>>,
    {
        self.pass_judged(call, |result| Judged::Counted(judge(result)))
            .await
    }

    /// [`pass`](Self::pass), where `judge` may find the answer is none of
    /// the call's to count ([`Judged`]: another layer made it and counted
    /// it, or refused it): then its controls count nothing, and a call
    /// another layer refused gives back its rate tokens, as if it had not
    /// been admitted.
    ///
    /// ```
    /// use portcullis::edge::{EdgeCall, Judged, Passage};
    /// use portcullis::{Priority, RateConfig, ThrottleManager};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(10.0)).build()?;
    /// // An inner layer of ours refused the call: this key counts nothing.
    /// let passage = EdgeCall::new(&manager, "tenant-a")
    ///     .pass_judged(
    ///         || async { Ok::<_, std::io::Error>("refused inside") },
    ///         |_| Judged::RefusedElsewhere,
    ///     )
    ///     .await;
    /// assert!(matches!(passage, Passage::Reported(Ok(_), _)));
    /// assert_eq!(manager.key("tenant-a").rate(), Some(10.0)); // not raised
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// As [`pass`](Self::pass).
    pub async fn pass_judged<T, E, F, C>(
        self,
        call: C,
        judge: impl FnOnce(&Result<T, E>) -> Judged,
    ) -> Passage<T, E>
    where
        C: FnOnce() -> F,
        F: Future<Output = Result<T, E>>,
    {
        match self.deadline {
            Some(deadline) => with_deadline(deadline, self.pass_by(call, judge)).await,
            None => self.pass_by(call, judge).await,
        }
    }

    /// The call's permits: its key's, and its guard's if it has one.
    async fn admit(&self) -> Result<(OwnedPermit, Option<OwnedPermit>), Rejected> {
        let (manager, key, priority) = (self.manager, self.key, self.priority);
        let Some((guard, guard_key)) = self.guard else {
            // The requests the store took are the key's: its alone.
            if let Some(requests) = self.rate_taken {
                let admitted = manager.acquire_owned_rate_taken(key, priority, requests);
                return Ok((with_priority(priority, admitted).await?, None));
            }
            return Ok((self.admitted_by(manager, key).await?, None));
        };
        let patience = match self.admit_as {
            AdmitAs::Client => Patience::AsConfigured,
            AdmitAs::Server => Patience::QueueOnly,
        };
        let held = manager.admit_provisionally(key, priority, patience);
        let held = with_priority(priority, held).await?;
        // At the guard, every key of the edge is a flow of its own.
        let guarded = with_flow(Flow::of(key), self.admitted_by(guard, guard_key)).await?;
        Ok((manager.confirm(held), Some(guarded)))
    }

    /// A permit of `key` of `manager`, admitted as the edge admits.
    async fn admitted_by<K2, Q2>(
        &self,
        manager: &ThrottleManager<K2>,
        key: &Q2,
    ) -> Result<OwnedPermit, Rejected>
    where
        K2: Hash + Eq + Send + Sync + 'static,
        Q2: BorrowedKey<K2> + ?Sized,
    {
        let priority = self.priority;
        match self.admit_as {
            AdmitAs::Client => with_priority(priority, manager.acquire_owned(key, priority)).await,
            AdmitAs::Server => manager.try_acquire_or_queue_owned(key, priority).await,
        }
    }

    /// [`pass_judged`](Self::pass_judged), under the task's deadline if it
    /// has one.
    async fn pass_by<T, E, F, C>(
        self,
        call: C,
        judge: impl FnOnce(&Result<T, E>) -> Judged,
    ) -> Passage<T, E>
    where
        C: FnOnce() -> F,
        F: Future<Output = Result<T, E>>,
    {
        let (manager, key) = (self.manager, self.key);
        let core = manager.core();
        // The caller's deadline on the manager's clock, read once.
        let deadline = deadline::remaining().map(|left| core.now().saturating_add(nanos(left)));
        let (permit, guard) = match self.admit().await {
            Ok(permits) => permits,
            Err(rejected) => return Passage::Refused(rejected),
        };
        // A server's key is whom the request is for: what its handler
        // calls queues as that key's at a fair queue.
        let flow = (self.admit_as == AdmitAs::Server).then(|| Flow::of(key));
        let made = || under_flow(flow, call());
        let result = match deadline::call_bound(manager.settings().call_timeout(), deadline, || {
            core.now()
        }) {
            None => made().await,
            Some((bound, until)) => match core.before(until, std::pin::pin!(made())).await {
                Some(result) => result,
                None => {
                    let outcome = bound.limit().counts_as();
                    permit.report(outcome);
                    if let Some(guard) = guard {
                        guard.report(outcome);
                    }
                    return Passage::TimedOut(bound);
                }
            },
        };
        let verdict = match judge(&result) {
            Judged::Counted(verdict) => verdict,
            elsewhere => {
                for permit in std::iter::once(permit).chain(guard) {
                    match elsewhere {
                        Judged::RefusedElsewhere => permit.not_made(),
                        _ => permit.uncounted(),
                    }
                }
                return Passage::Reported(result, Verdict::of(Outcome::Neutral));
            }
        };
        let under_deadline = deadline.is_some();
        if under_deadline && verdict.outcome == Outcome::Success {
            permit.answered();
            if let Some(guard) = &guard {
                guard.answered();
            }
        }
        // A success's body carries the permit to its end, unless its head
        // asks for a pause: a report after the pause is set would rescale
        // the pause with the rate's debt.
        let result = match result {
            Ok(answer) if self.carry && verdict == Verdict::of(Outcome::Success) => {
                let permit = BodyPermit::new(permit, guard, Outcome::Success, under_deadline);
                return Passage::Carried(answer, permit);
            }
            result => result,
        };
        // The outcome first: a failure rescales the rate's debt, which must
        // not stretch a pause set after it.
        permit.report(verdict.outcome);
        if let Some(guard) = guard {
            guard.report(verdict.outcome);
        }
        if let Some(pause) = verdict.pause {
            let deferred = manager.key(key).defer(pause);
            tracing::debug!(?pause, ?deferred, "the server asked for a pause");
        }
        Passage::Reported(result, verdict)
    }
}

/// `future`, run under `flow` if there is one.
async fn under_flow<F: Future>(flow: Option<Flow>, future: F) -> F::Output {
    match flow {
        Some(flow) => with_flow(flow, future).await,
        None => future.await,
    }
}
