//! What a user sets for the bulkhead, and its validation.

use std::time::Duration;

use super::adaptive::LimitTuning;
use super::codel::CodelSettings;
use crate::clock::{Nanos, nanos};
use crate::error::Problems;
use crate::priority::Flow;

/// What happens to a call that finds the queue full.
///
/// # Example
///
/// ```
/// use portcullis::bulkhead::Overflow;
/// use portcullis::BulkheadConfig;
///
/// let config = BulkheadConfig::new(10).queue(50).overflow(Overflow::DropOldest);
/// assert_ne!(config, BulkheadConfig::new(10).queue(50)); // the default is RejectNew
/// assert_eq!(Overflow::default(), Overflow::RejectNew);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Overflow {
    /// The newcomer is rejected ([`Full`](crate::error::RejectReason::Full)). The
    /// default.
    #[default]
    RejectNew,
    /// The call that has waited longest is rejected
    /// ([`Dropped`](crate::error::RejectReason::Dropped)) and the newcomer takes a
    /// place in the queue: for work whose callers give up when it is stale.
    DropOldest,
    /// The newest waiter of the least important priority is rejected
    /// ([`Dropped`](crate::error::RejectReason::Dropped)), but only if the newcomer
    /// is strictly more important; otherwise the newcomer is rejected
    /// ([`Full`](crate::error::RejectReason::Full)).
    DropLowestPriority,
}

/// The longest CoDel interval accepted. CoDel judges a queue over one
/// interval (100 ms in its paper and in Facebook's use): a longer one leaves
/// a standing queue unjudged, and every caller in it waiting, that long.
/// Past a minute no queue wait is worth keeping a caller for.
const LONGEST_CODEL_INTERVAL: Duration = Duration::from_secs(60);

/// The bulkhead of every key: at most `max_concurrent` calls in flight, a
/// few more waiting in a priority queue, everything beyond rejected at once.
///
/// It stops one slow dependency from taking every socket, connection or
/// worker. It does not limit calls per second (that is the rate's job).
///
/// Defaults for `BulkheadConfig::new(n)`: no queue (fail fast: callers
/// usually prefer a quick rejection to a slow one), no queue timeout,
/// [`Overflow::RejectNew`].
///
/// # Example
///
/// ```
/// use portcullis::bulkhead::Overflow;
/// use portcullis::{BulkheadConfig, ThrottleManager};
/// use std::time::Duration;
///
/// let manager = ThrottleManager::<String>::builder()
///     .bulkhead(
///         BulkheadConfig::new(10)
///             .queue(50)
///             .queue_timeout(Duration::from_millis(200))
///             .overflow(Overflow::DropOldest),
///     )
///     .build()?;
/// # Ok::<(), portcullis::error::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BulkheadConfig {
    max_concurrent: u32,
    /// Set for a limit learned between these bounds.
    learned: Option<AdaptiveSetup>,
    /// Settings of a learned limit given to a fixed one, by name: an error
    /// at `build`.
    misplaced: Vec<&'static str>,
    max_queued: u32,
    queue_timeout: Option<Duration>,
    overflow: Overflow,
    /// CoDel's target and interval, when set.
    codel: Option<(Duration, Duration)>,
    /// Newest first while CoDel finds the queue overloaded.
    adaptive_lifo: Option<bool>,
    /// Served round the calls' flows.
    fair: bool,
}

/// How a learned limit is set up: what the user set, `None` for the
/// default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct AdaptiveSetup {
    bounds: Option<(u32, u32)>,
    probe_interval: Option<Duration>,
    probe_jitter: Option<Duration>,
    probe_calls: Option<u32>,
    probe_limit: Option<u32>,
}

/// The bounds of a learned limit unless [`BulkheadConfig::bounds`] says.
const DEFAULT_LEARNED_BOUNDS: (u32, u32) = (1, 1_000);

/// Envoy's adaptive concurrency filter measures its unloaded latency every
/// minute; half that follows a backend that changes sooner, at a cost of
/// one probe's calls held low (about 2 % of a busy key's calls).
const DEFAULT_PROBE_INTERVAL: Duration = Duration::from_secs(30);

/// Enough calls that the mean of an exponential latency is within about a
/// fifth of the true one; each one more costs a slow backend's throughput,
/// made at the probe's low limit.
const DEFAULT_PROBE_CALLS: u32 = 20;

/// Two in flight: one call would make a backend that serves calls in
/// pairs (or pipelines them) look slower unloaded than it is.
const DEFAULT_PROBE_LIMIT: u32 = 2;

impl BulkheadConfig {
    /// A fixed limit: at most `max_concurrent` calls of a key in flight at
    /// once (at least 1). The same as [`fixed`](Self::fixed), which says so
    /// beside [`adaptive`](Self::adaptive).
    ///
    /// ```
    /// use portcullis::{BulkheadConfig, Priority, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder().bulkhead(BulkheadConfig::new(2)).build()?;
    /// let _first = manager.try_acquire("db", Priority::HIGH).unwrap();
    /// let _second = manager.try_acquire("db", Priority::HIGH).unwrap();
    /// assert!(manager.try_acquire("db", Priority::HIGH).is_err()); // two at a time
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn new(max_concurrent: u32) -> Self {
        Self::fixed(max_concurrent)
    }

    /// A fixed limit: at most `max_concurrent` calls of a key in flight at
    /// once (at least 1); [`new`](Self::new) is the same.
    ///
    /// ```
    /// use portcullis::{BulkheadConfig, Priority, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder().bulkhead(BulkheadConfig::fixed(1)).build()?;
    /// let _only = manager.try_acquire("db", Priority::HIGH).unwrap();
    /// assert!(manager.try_acquire("db", Priority::HIGH).is_err());
    /// assert_eq!(BulkheadConfig::fixed(8), BulkheadConfig::new(8));
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn fixed(max_concurrent: u32) -> Self {
        Self {
            max_concurrent,
            learned: None,
            misplaced: Vec::new(),
            max_queued: 0,
            queue_timeout: None,
            overflow: Overflow::RejectNew,
            codel: None,
            adaptive_lifo: None,
            fair: false,
        }
    }

    /// A limit nobody has to know: each key's limit is learned between
    /// [`bounds`](Self::bounds) (default 1 to 1,000) from its calls'
    /// latency, from admission to outcome, and their outcomes.
    ///
    /// Now and then (first of all, then every
    /// [`probe_interval`](Self::probe_interval), 30 s by default, jittered)
    /// the limit is held at [`probe_limit`](Self::probe_limit) (2) for
    /// [`probe_calls`](Self::probe_calls) (20) calls, and their mean latency
    /// is the key's unloaded latency. After each window of calls (at least ten, or the limit),
    /// the calls waiting at the backend are estimated as `limit × (1 −
    /// unloaded / mean latency)`: below 2 steps the limit grows a step,
    /// above 4 it falls one (a step is `log10(limit)`, at least 1). So it
    /// grows while calls are as fast as the unloaded ones, however their
    /// latency varies, and settles a few calls above what the backend
    /// serves at once. An overload (a [`overloaded`](crate::manager::Permit::overloaded))
    /// takes 10 % off at once, at most once per unloaded latency, and
    /// growth is careful after it (never back to the whole limit refused)
    /// until the next probe. A fresh key starts at the lower bound and
    /// doubles each window until calls first queue or are refused. It grows
    /// only while it is what holds calls back: calls waiting in the queue, or every slot taken. A
    /// neutral outcome (a permit dropped unreported) teaches it nothing.
    ///
    /// The latency compared is a mean, not a percentile: the estimate of
    /// calls waiting is Little's law, which holds for means. Measured
    /// beside Netflix's Gradient2 and AIMD on five latency shapes, this is
    /// the controller that keeps near a known limit's goodput with almost
    /// no refusals (the guide's adaptive concurrency section).
    ///
    /// The queue, its timeout and overflow policy work as for a fixed
    /// limit. A limit lowered below the calls in flight lets them finish
    /// and admits no one until they are under it; one that rises gives its
    /// new slots to the queue at once.
    ///
    /// ```
    /// use portcullis::{BulkheadConfig, Priority, ThrottleManager};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let manager = ThrottleManager::<String>::builder()
    ///     .bulkhead(BulkheadConfig::adaptive().bounds(1, 200).queue(32))
    ///     .build()?;
    /// let permit = manager.acquire("db", Priority::HIGH).await?;
    /// assert_eq!(manager.key("db").concurrency_limit(), Some(1)); // probing first, at its lower bound
    /// permit.success();
    /// # Ok(())
    /// # }
    /// ```
    pub fn adaptive() -> Self {
        Self {
            learned: Some(AdaptiveSetup::default()),
            ..Self::fixed(DEFAULT_LEARNED_BOUNDS.0)
        }
    }

    /// The range an adaptive limit is learned in (at least 1, `min <=
    /// max`). Only for [`adaptive`](Self::adaptive): on a fixed limit,
    /// `build` says so.
    ///
    /// ```
    /// use portcullis::BulkheadConfig;
    ///
    /// let config = BulkheadConfig::adaptive().bounds(4, 64);
    /// # drop(config);
    /// ```
    pub fn bounds(self, min: u32, max: u32) -> Self {
        self.learning("bounds", |setup| setup.bounds = Some((min, max)))
    }

    /// How often a learned limit measures its key's unloaded latency
    /// (default 30 s, at least 1 ms): the limit is held at
    /// [`probe_limit`](Self::probe_limit) for
    /// [`probe_calls`](Self::probe_calls) calls, whose mean latency is the
    /// baseline every later window is compared with. Shorter follows a
    /// backend that changes (a deploy, a cache warmed) sooner; each probe
    /// costs a busy key a few calls' worth of throughput. Only for
    /// [`adaptive`](Self::adaptive).
    ///
    /// ```
    /// use portcullis::BulkheadConfig;
    /// use std::time::Duration;
    ///
    /// let config = BulkheadConfig::adaptive()
    ///     .probe_interval(Duration::from_secs(60))
    ///     .probe_jitter(Duration::from_secs(15))
    ///     .probe_calls(50)
    ///     .probe_limit(3);
    /// # drop(config);
    /// ```
    pub fn probe_interval(self, interval: Duration) -> Self {
        self.learning("probe_interval", |setup| {
            setup.probe_interval = Some(interval);
        })
    }

    /// Each probe comes up to `jitter` later than
    /// [`probe_interval`](Self::probe_interval) says, at random (default
    /// 15 % of the interval), so that keys, or the processes of a fleet,
    /// that started together do not all hold their limits low at once.
    /// Only for [`adaptive`](Self::adaptive).
    ///
    /// ```
    /// use portcullis::BulkheadConfig;
    /// use std::time::Duration;
    ///
    /// // Every 30 s exactly (a single process, one key).
    /// let config = BulkheadConfig::adaptive().probe_jitter(Duration::ZERO);
    /// # drop(config);
    /// ```
    pub fn probe_jitter(self, jitter: Duration) -> Self {
        self.learning("probe_jitter", |setup| setup.probe_jitter = Some(jitter))
    }

    /// How many calls a probe takes (default 20, at least 1): the baseline
    /// is their mean latency. More calls give a steadier baseline for a
    /// backend whose latency varies widely, and cost a slow backend more
    /// throughput, made at the probe's low limit. Only for
    /// [`adaptive`](Self::adaptive).
    ///
    /// ```
    /// use portcullis::BulkheadConfig;
    ///
    /// let config = BulkheadConfig::adaptive().probe_calls(50);
    /// # drop(config);
    /// ```
    pub fn probe_calls(self, calls: u32) -> Self {
        self.learning("probe_calls", |setup| setup.probe_calls = Some(calls))
    }

    /// Calls in flight at most during a probe (default 2, at least 1, at
    /// most the upper bound; the lower bound wins if it is higher): few
    /// enough that nothing queues at the backend. Only for
    /// [`adaptive`](Self::adaptive).
    ///
    /// ```
    /// use portcullis::BulkheadConfig;
    ///
    /// let config = BulkheadConfig::adaptive().probe_limit(1);
    /// # drop(config);
    /// ```
    pub fn probe_limit(self, limit: u32) -> Self {
        self.learning("probe_limit", |setup| setup.probe_limit = Some(limit))
    }

    /// Sets a learned limit's setting `field`, or notes that it was given
    /// to a fixed limit.
    fn learning(mut self, field: &'static str, set: impl FnOnce(&mut AdaptiveSetup)) -> Self {
        match &mut self.learned {
            Some(setup) => set(setup),
            None => self.misplaced.push(field),
        }
        self
    }

    /// Up to `max_queued` calls may wait for a free slot (default 0).
    ///
    /// ```
    /// use portcullis::{BulkheadConfig, Priority, ThrottleManager};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let manager = ThrottleManager::<String>::builder().bulkhead(BulkheadConfig::new(1).queue(1)).build()?;
    /// let busy = manager.acquire("db", Priority::HIGH).await?;
    /// let (waiter, _) = tokio::join!(manager.acquire("db", Priority::HIGH), async {
    ///     assert!(manager.acquire("db", Priority::HIGH).await.is_err()); // the queue holds one
    ///     drop(busy); // the slot goes to the one waiting
    /// });
    /// assert!(waiter.is_ok());
    /// # Ok(())
    /// # }
    /// ```
    pub fn queue(mut self, max_queued: u32) -> Self {
        self.max_queued = max_queued;
        self
    }

    /// A call that has waited `timeout` in the queue is rejected
    /// ([`QueueTimeout`](crate::error::RejectReason::QueueTimeout)). Above 0.
    ///
    /// How this limit meets the other six (what each bounds, on which
    /// clock, what its expiry counts as): the [time
    /// limits](crate::guide::getting_started#time-limits).
    ///
    /// ```
    /// use portcullis::error::RejectReason;
    /// use portcullis::{BulkheadConfig, Priority, ThrottleManager};
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let config = BulkheadConfig::new(1).queue(8).queue_timeout(Duration::from_millis(250));
    /// let manager = ThrottleManager::<String>::builder().bulkhead(config).build()?;
    /// let _busy = manager.acquire("db", Priority::HIGH).await?;
    /// let start = tokio::time::Instant::now();
    /// let timed_out = manager.acquire("db", Priority::HIGH).await.unwrap_err();
    /// assert_eq!(timed_out.reason(), RejectReason::QueueTimeout);
    /// assert_eq!(start.elapsed(), Duration::from_millis(250));
    /// # Ok(())
    /// # }
    /// ```
    pub fn queue_timeout(mut self, timeout: Duration) -> Self {
        self.queue_timeout = Some(timeout);
        self
    }

    /// What happens when the queue is full (default
    /// [`Overflow::RejectNew`]).
    ///
    /// ```
    /// use portcullis::bulkhead::Overflow;
    /// use portcullis::error::RejectReason;
    /// use portcullis::{BulkheadConfig, Priority, ThrottleManager};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let config = BulkheadConfig::new(1).queue(1).overflow(Overflow::DropLowestPriority);
    /// let manager = ThrottleManager::<String>::builder().bulkhead(config).build()?;
    /// let busy = manager.acquire("db", Priority::HIGH).await?;
    /// let (low, high) = tokio::join!(manager.acquire("db", Priority::LOW), async {
    ///     let high = manager.acquire("db", Priority::HIGH); // pushes the LOW waiter out
    ///     let (high, ()) = tokio::join!(high, async { drop(busy) });
    ///     high
    /// });
    /// assert_eq!(low.unwrap_err().reason(), RejectReason::Dropped);
    /// assert!(high.is_ok());
    /// # Ok(())
    /// # }
    /// ```
    pub fn overflow(mut self, policy: Overflow) -> Self {
        self.overflow = policy;
        self
    }

    /// The overflow policy set by [`overflow`](Self::overflow): for an
    /// edge that builds a bulkhead from a user's config and needs to know
    /// whom a full queue drops.
    ///
    /// ```
    /// use portcullis::bulkhead::{BulkheadConfig, Overflow};
    ///
    /// let config = BulkheadConfig::new(4).queue(8);
    /// assert_eq!(config.overflow_policy(), Overflow::RejectNew);
    /// let config = config.overflow(Overflow::DropOldest);
    /// assert_eq!(config.overflow_policy(), Overflow::DropOldest);
    /// ```
    pub fn overflow_policy(&self) -> Overflow {
        self.overflow
    }

    /// Runs CoDel on the queue: while the shortest wait of any call served
    /// over `interval` stays above `target`, the queue is overloaded, and a
    /// call that has waited `target` is dropped
    /// ([`QueueOverloaded`](crate::error::RejectReason::QueueOverloaded)) instead of
    /// waiting out the queue timeout; the newest call is served first
    /// ([`adaptive_lifo`](Self::adaptive_lifo), on by default), priorities
    /// keeping their order. Once the queue drains, it serves first come
    /// first served again under the queue timeout. Facebook's "Fail at
    /// scale" (2015) gives 5 ms and 100 ms for a server's queue. Works with
    /// a fixed limit and a learned one.
    ///
    /// How this limit meets the other six (what each bounds, on which
    /// clock, what its expiry counts as): the [time
    /// limits](crate::guide::getting_started#time-limits).
    ///
    /// Settings under which CoDel could never act are refused at build,
    /// naming the field: it needs a [`queue`](Self::queue);
    /// `0 < target <= interval`; an interval of at most a minute; and a
    /// [`queue_timeout`](Self::queue_timeout), if set, above the target.
    ///
    /// ```
    /// use portcullis::{BulkheadConfig, ThrottleManager};
    /// use std::time::Duration;
    ///
    /// let manager = ThrottleManager::<String>::builder()
    ///     .bulkhead(BulkheadConfig::new(8).queue(64).codel(Duration::from_millis(5), Duration::from_millis(100)))
    ///     .build()?;
    /// # drop(manager);
    /// let no_queue = BulkheadConfig::new(8).codel(Duration::from_millis(5), Duration::from_millis(100));
    /// assert_eq!(
    ///     no_queue.validate().unwrap_err().to_string(),
    ///     "invalid configuration: bulkhead.codel: needs a queue (BulkheadConfig::queue) to judge, got a queue of 0"
    /// );
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn codel(mut self, target: Duration, interval: Duration) -> Self {
        self.codel = Some((target, interval));
        self
    }

    /// With [`codel`](Self::codel), whether an overloaded queue serves its
    /// newest call first (default `true`): the calls served are then those
    /// whose callers are most likely still waiting. `false` keeps first
    /// come first served throughout. Set without `codel` it would do
    /// nothing, and is refused at build.
    ///
    /// ```
    /// use portcullis::BulkheadConfig;
    /// use std::time::Duration;
    ///
    /// let fifo = BulkheadConfig::new(8)
    ///     .queue(64)
    ///     .codel(Duration::from_millis(5), Duration::from_millis(100))
    ///     .adaptive_lifo(false);
    /// assert!(fifo.validate().is_ok());
    /// ```
    pub fn adaptive_lifo(mut self, newest_first: bool) -> Self {
        self.adaptive_lifo = Some(newest_first);
        self
    }

    /// Serves the queue round the calls' flows (fair queuing): each flow
    /// (whom a call is for: a user, a tenant; see
    /// [`Flow`]) waits in its own line, and a slot
    /// given back goes to the next flow in turn, priorities still first.
    /// So when many callers share one key (users at one database), a flow
    /// that sends more than its share waits behind those that send less:
    /// each flow that waits is served once a round, and a flow that had
    /// been quiet may start up to 8 rounds ahead (so one below its share
    /// rarely waits behind one that waits all the time); while two flows
    /// both wait, the slots handed to them differ by at most ten. A full
    /// queue makes room first by dropping the newest waiter
    /// of the flow with the most waiters, if it has two more than the
    /// newcomer's ([`Dropped`](crate::error::RejectReason::Dropped)); the
    /// [`overflow`](Self::overflow) policy decides the rest.
    ///
    /// A call's flow is its task's ([`with_flow`](crate::priority::with_flow):
    /// the server layer sets its key's for the handler), else, for a key
    /// of [`call_all`](crate::ThrottleManager::call_all), the keys before
    /// it; calls with none share one flow. It costs a queued call a search
    /// of its priority's waiters, and the queue a map of the flows that
    /// wait; taking a free slot costs nothing more. With [`codel`](Self::codel), CoDel runs
    /// per flow, as fq_codel does: a flow whose own waits stand above the
    /// target has its waiters that waited it dropped, and no other flow's;
    /// a flow keeps first come first served (adaptive LIFO would undo the
    /// turns). Since a waiter also waits for the other flows' turns, set
    /// the target above a round (the flows that wait, times a call's time,
    /// over the slots). Refused at build without a [`queue`](Self::queue).
    ///
    /// ```
    /// use portcullis::priority::{Flow, with_flow};
    /// use portcullis::{BulkheadConfig, Priority, ThrottleManager};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let manager = ThrottleManager::<String>::builder()
    ///     .bulkhead(BulkheadConfig::new(1).queue(8).fair_queuing())
    ///     .build()?;
    /// let busy = manager.acquire("db", Priority::HIGH).await?;
    /// let order = std::sync::Mutex::new(Vec::new());
    /// let call = |name: &'static str| {
    ///     let (manager, order) = (&manager, &order);
    ///     with_flow(Flow::of(name), async move {
    ///         let permit = manager.acquire("db", Priority::HIGH).await.unwrap();
    ///         order.lock().unwrap().push(name);
    ///         tokio::task::yield_now().await;
    ///         permit.success();
    ///     })
    /// };
    /// // Three of the heavy flow queue, then one of the light flow...
    /// tokio::join!(call("heavy"), call("heavy"), call("heavy"), call("light"), async {
    ///     tokio::task::yield_now().await;
    ///     drop(busy);
    /// });
    /// // ...which is served second, not last.
    /// assert_eq!(*order.lock().unwrap(), ["heavy", "light", "heavy", "heavy"]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn fair_queuing(mut self) -> Self {
        self.fair = true;
        self
    }

    /// Checks the bulkhead as [`build`](crate::builder::ThrottleManagerBuilder::build)
    /// will.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`](crate::error::ConfigError) listing every invalid field,
    /// named `bulkhead.<field>`.
    ///
    /// ```
    /// use portcullis::BulkheadConfig;
    ///
    /// assert!(BulkheadConfig::new(4).validate().is_ok());
    /// assert!(BulkheadConfig::new(0).validate().is_err());
    /// ```
    pub fn validate(&self) -> Result<(), crate::ConfigError> {
        let mut found = Vec::new();
        let settings = self.check(&mut Problems::new("bulkhead", &mut found));
        match settings {
            Some(_) if found.is_empty() => Ok(()),
            _ => Err(crate::ConfigError::from_problems(found).expect("a problem was found")),
        }
    }

    /// CoDel's settings, with their problems added to `problems`.
    fn check_codel(&self, problems: &mut Problems<'_>) -> Option<CodelSettings> {
        let Some((target, interval)) = self.codel else {
            if let Some(newest_first) = self.adaptive_lifo {
                problems.add(
                    "adaptive_lifo",
                    format!("only with CoDel (BulkheadConfig::codel), which decides when the queue is overloaded; got adaptive_lifo({newest_first}) without it"),
                );
            }
            return None;
        };
        let before = problems.len();
        if target.is_zero() || target > interval {
            problems.add(
                "codel",
                format!("the target must be above 0 and at most the interval, got target {target:?} and interval {interval:?}"),
            );
        }
        if interval > LONGEST_CODEL_INTERVAL {
            problems.add(
                "codel",
                format!("the interval must be at most {LONGEST_CODEL_INTERVAL:?}: a standing queue would go unjudged that long; got {interval:?}"),
            );
        }
        match self.queue_timeout {
            Some(timeout) if timeout <= target => problems.add(
                "queue_timeout",
                format!("must be above CoDel's target, or no call would wait the target and CoDel could never act; got {timeout:?} with a target of {target:?}"),
            ),
            _ => {}
        }
        if self.max_queued == 0 {
            problems.add(
                "codel",
                "needs a queue (BulkheadConfig::queue) to judge, got a queue of 0",
            );
        }
        if self.fair && self.adaptive_lifo == Some(true) {
            problems.add(
                "adaptive_lifo",
                "a fair queue serves its flows in turn, first come first served within one; newest first would undo the turns: leave adaptive_lifo unset with fair_queuing",
            );
        }
        (problems.len() == before).then(|| CodelSettings {
            target: nanos(target),
            interval: nanos(interval),
            lifo: self.adaptive_lifo.unwrap_or(!self.fair),
        })
    }

    /// Adds every problem to `problems`; returns the settings when there are none.
    pub(crate) fn check(&self, problems: &mut Problems<'_>) -> Option<BulkheadSettings> {
        let before = problems.len();
        let learned = self.learned.map(|setup| LearnedSettings {
            tuning: setup.check(problems),
        });
        for field in &self.misplaced {
            problems.add(
                field,
                "only for a learned limit (BulkheadConfig::adaptive), not a fixed one",
            );
        }
        if learned.is_none() && self.max_concurrent == 0 {
            problems.add("max_concurrent", "must be at least 1, got 0");
        }
        if self.queue_timeout == Some(Duration::ZERO) {
            problems.add("queue_timeout", "must be above 0, got 0ns");
        }
        if self.fair && self.max_queued == 0 {
            problems.add(
                "fair_queuing",
                "needs a queue (BulkheadConfig::queue) to serve in turn, got a queue of 0",
            );
        }
        let codel = self.check_codel(problems);
        (problems.len() == before).then(|| BulkheadSettings {
            max_concurrent: learned.map_or(self.max_concurrent, |learned| learned.tuning.min),
            learned,
            max_queued: self.max_queued,
            queue_timeout: self.queue_timeout.map(nanos),
            overflow: self.overflow,
            codel,
            fair: self.fair,
        })
    }
}

/// Validated bulkhead settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BulkheadSettings {
    /// The fixed limit; for a learned one, where it starts.
    pub(crate) max_concurrent: u32,
    /// Set when the limit is learned.
    pub(crate) learned: Option<LearnedSettings>,
    pub(crate) max_queued: u32,
    pub(crate) queue_timeout: Option<Nanos>,
    pub(crate) overflow: Overflow,
    pub(crate) codel: Option<CodelSettings>,
    /// The queue is served round the calls' flows.
    pub(crate) fair: bool,
}

impl BulkheadSettings {
    /// The flow a waiter of `flow` queues as: at a fair queue, its own (or
    /// the one shared by calls without one); elsewhere none.
    pub(crate) fn flow_of(&self, flow: Option<Flow>) -> Option<u64> {
        self.fair.then(|| flow.map_or(0, Flow::id))
    }
}

/// How a key's limit is learned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LearnedSettings {
    pub(crate) tuning: LimitTuning,
}

mod adaptive_setup;

#[cfg(test)]
mod tests;
