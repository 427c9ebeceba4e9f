//! What a call asks of its key besides its priority: its cost in rate
//! tokens, and (for [`call`](crate::ThrottleManager::call)) how long it may
//! run. Made from a [`Priority`] (`Priority::HIGH.cost(3)`), so the verbs
//! take one argument for all of it and a plain priority still reads as one.

use std::time::Duration;

use super::Priority;

/// What a call asks to be admitted: its [`Priority`] and its cost in rate
/// tokens (1 unless [`cost`](Self::cost) says otherwise). The verbs that
/// admit ([`acquire`](crate::ThrottleManager::acquire),
/// [`try_acquire`](crate::ThrottleManager::try_acquire), their owned and
/// joint forms) take it, or a plain [`Priority`].
///
/// ```
/// use portcullis::{Priority, RateConfig, ThrottleManager};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let manager = ThrottleManager::<String>::builder()
///     .rate(RateConfig::per_second(10).burst(5))
///     .build()?;
/// // A batch of 3 rows costs 3 tokens of the key's rate.
/// manager.try_acquire("db", Priority::LOW.cost(3))?.success();
/// assert_eq!(manager.peek("db").map(|left| left.remaining), Some(2));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AdmitOptions {
    priority: Priority,
    cost: u32,
}

impl AdmitOptions {
    /// A call of `priority` costing one rate token.
    ///
    /// ```
    /// use portcullis::Priority;
    /// use portcullis::priority::AdmitOptions;
    ///
    /// assert_eq!(AdmitOptions::new(Priority::HIGH), Priority::HIGH.into());
    /// ```
    pub const fn new(priority: Priority) -> Self {
        Self { priority, cost: 1 }
    }

    /// The same call, costing `tokens` rate tokens (a batch of rows, a
    /// request's bytes). A cost of 0 takes no token; a cost above the key's
    /// burst is refused at once
    /// ([`CostAboveBurst`](crate::error::RejectReason::CostAboveBurst)).
    ///
    /// ```
    /// assert_eq!(portcullis::Priority::LOW.cost(3).tokens(), 3);
    /// ```
    pub const fn cost(self, tokens: u32) -> Self {
        Self {
            cost: tokens,
            ..self
        }
    }

    /// The same call, whose run [`call`](crate::ThrottleManager::call)
    /// bounds by `run` instead of the manager's
    /// [call timeout](crate::deadline::TimeLimits::call_timeout).
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let options = portcullis::Priority::LOW.cost(3).timeout(Duration::from_secs(2));
    /// assert_eq!(options.run_timeout(), Some(Duration::from_secs(2)));
    /// ```
    pub const fn timeout(self, run: Duration) -> CallOptions {
        CallOptions {
            admit: self,
            timeout: Some(run),
        }
    }

    /// The same call at `priority` (a retry's).
    pub(crate) const fn at(self, priority: Priority) -> Self {
        Self { priority, ..self }
    }

    /// The call's priority.
    ///
    /// ```
    /// use portcullis::Priority;
    ///
    /// assert_eq!(Priority::LOW.cost(3).priority(), Priority::LOW);
    /// ```
    pub const fn priority(self) -> Priority {
        self.priority
    }

    /// The call's cost in rate tokens.
    ///
    /// ```
    /// assert_eq!(portcullis::Priority::LOW.cost(0).tokens(), 0);
    /// ```
    pub const fn tokens(self) -> u32 {
        self.cost
    }
}

impl From<Priority> for AdmitOptions {
    fn from(priority: Priority) -> Self {
        Self::new(priority)
    }
}

/// What [`call`](crate::ThrottleManager::call) and
/// [`call_all`](crate::ThrottleManager::call_all) are asked: what the call
/// asks to be admitted ([`AdmitOptions`]) and, if set, how long it may run
/// (else the manager's call timeout).
///
/// ```
/// use portcullis::{BulkheadConfig, CallError, Priority, ThrottleManager};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let manager = ThrottleManager::<String>::builder()
///     .bulkhead(BulkheadConfig::new(4))
///     .build()?;
/// let hung = manager
///     .call("api", Priority::HIGH.timeout(Duration::from_secs(1)), || async {
///         tokio::time::sleep(Duration::from_secs(60)).await;
///         Ok::<_, std::io::Error>(())
///     })
///     .await;
/// assert!(matches!(hung, Err(CallError::TimedOut(_))));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CallOptions {
    admit: AdmitOptions,
    timeout: Option<Duration>,
}

impl CallOptions {
    /// A call of `priority` costing one rate token, run under the
    /// manager's call timeout.
    ///
    /// ```
    /// use portcullis::Priority;
    /// use portcullis::priority::CallOptions;
    ///
    /// assert_eq!(CallOptions::new(Priority::HIGH), Priority::HIGH.into());
    /// ```
    pub const fn new(priority: Priority) -> Self {
        Self {
            admit: AdmitOptions::new(priority),
            timeout: None,
        }
    }

    /// The same call, costing `tokens` rate tokens, as
    /// [`AdmitOptions::cost`].
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let options = portcullis::Priority::LOW.timeout(Duration::from_secs(2)).cost(3);
    /// assert_eq!(options.admit().tokens(), 3);
    /// ```
    pub const fn cost(self, tokens: u32) -> Self {
        Self {
            admit: self.admit.cost(tokens),
            ..self
        }
    }

    /// The same call, its run bounded by `run`, as
    /// [`AdmitOptions::timeout`].
    ///
    /// ```
    /// use portcullis::priority::CallOptions;
    /// use std::time::Duration;
    ///
    /// let options = CallOptions::new(portcullis::Priority::LOW).timeout(Duration::from_secs(2));
    /// assert_eq!(options.run_timeout(), Some(Duration::from_secs(2)));
    /// ```
    pub const fn timeout(self, run: Duration) -> Self {
        Self {
            timeout: Some(run),
            ..self
        }
    }

    /// What the call asks to be admitted.
    ///
    /// ```
    /// use portcullis::Priority;
    ///
    /// assert_eq!(Priority::LOW.cost(2).timeout(Default::default()).admit(), Priority::LOW.cost(2));
    /// ```
    pub const fn admit(self) -> AdmitOptions {
        self.admit
    }

    /// The bound of the call's run set here, if any (else the manager's
    /// call timeout applies).
    ///
    /// ```
    /// use portcullis::priority::CallOptions;
    ///
    /// assert_eq!(CallOptions::new(portcullis::Priority::LOW).run_timeout(), None);
    /// ```
    pub const fn run_timeout(self) -> Option<Duration> {
        self.timeout
    }
}

impl From<Priority> for CallOptions {
    fn from(priority: Priority) -> Self {
        Self::new(priority)
    }
}

impl From<AdmitOptions> for CallOptions {
    fn from(admit: AdmitOptions) -> Self {
        Self {
            admit,
            timeout: None,
        }
    }
}

/// # What else a call asks
impl Priority {
    /// A call of this priority costing `tokens` rate tokens: what
    /// [`acquire`](crate::ThrottleManager::acquire) and
    /// [`call`](crate::ThrottleManager::call) take for a cost other than 1.
    ///
    /// ```
    /// use portcullis::Priority;
    ///
    /// assert_eq!(Priority::HIGH.cost(5).tokens(), 5);
    /// ```
    pub const fn cost(self, tokens: u32) -> AdmitOptions {
        AdmitOptions::new(self).cost(tokens)
    }

    /// A call of this priority whose run
    /// [`call`](crate::ThrottleManager::call) bounds by `run`.
    ///
    /// ```
    /// use portcullis::Priority;
    /// use std::time::Duration;
    ///
    /// assert_eq!(Priority::HIGH.timeout(Duration::from_secs(1)).run_timeout(), Some(Duration::from_secs(1)));
    /// ```
    pub const fn timeout(self, run: Duration) -> CallOptions {
        AdmitOptions::new(self).timeout(run)
    }
}
