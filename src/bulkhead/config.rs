//! What a user sets for the bulkhead, and its validation.

use std::time::Duration;

use super::adaptive::Bounds;
use crate::clock::{Nanos, nanos};
use crate::error::Problems;

/// What happens to a call that finds the queue full.
///
/// # Example
///
/// ```
/// use portcullis::{BulkheadConfig, Overflow};
///
/// let config = BulkheadConfig::new(10).queue(50).overflow(Overflow::DropOldest);
/// assert_ne!(config, BulkheadConfig::new(10).queue(50)); // the default is RejectNew
/// assert_eq!(Overflow::default(), Overflow::RejectNew);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Overflow {
    /// The newcomer is rejected ([`Full`](crate::RejectReason::Full)). The
    /// default.
    #[default]
    RejectNew,
    /// The call that has waited longest is rejected
    /// ([`Dropped`](crate::RejectReason::Dropped)) and the newcomer takes a
    /// place in the queue: for work whose callers give up when it is stale.
    DropOldest,
    /// The newest waiter of the least important priority is rejected
    /// ([`Dropped`](crate::RejectReason::Dropped)), but only if the newcomer
    /// is strictly more important; otherwise the newcomer is rejected
    /// ([`Full`](crate::RejectReason::Full)).
    DropLowestPriority,
}

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
/// use portcullis::{BulkheadConfig, Overflow, ThrottleManager};
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
/// # Ok::<(), portcullis::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BulkheadConfig {
    max_concurrent: u32,
    /// Set for a limit learned between these bounds.
    learned: Option<AdaptiveSetup>,
    /// `bounds` set on a fixed limit: an error at `build`.
    misplaced: bool,
    max_queued: u32,
    queue_timeout: Option<Duration>,
    overflow: Overflow,
}

/// How a learned limit is set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct AdaptiveSetup {
    bounds: Option<(u32, u32)>,
}

/// The bounds of a learned limit unless [`BulkheadConfig::bounds`] says.
const DEFAULT_LEARNED_BOUNDS: (u32, u32) = (1, 1_000);

impl BulkheadConfig {
    /// At most `max_concurrent` calls of a key in flight at once (at least 1).
    ///
    /// ```
    /// use portcullis::{BulkheadConfig, Priority, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder().bulkhead(BulkheadConfig::new(2)).build()?;
    /// let _first = manager.try_acquire("db", Priority::HIGH).unwrap();
    /// let _second = manager.try_acquire("db", Priority::HIGH).unwrap();
    /// assert!(manager.try_acquire("db", Priority::HIGH).is_err()); // two at a time
    /// # Ok::<(), portcullis::ConfigError>(())
    /// ```
    pub fn new(max_concurrent: u32) -> Self {
        Self {
            max_concurrent,
            learned: None,
            misplaced: false,
            max_queued: 0,
            queue_timeout: None,
            overflow: Overflow::RejectNew,
        }
    }

    /// A limit nobody has to know: each key's limit is learned between
    /// [`bounds`](Self::bounds) (default 1 to 1,000) from its calls'
    /// latency, from admission to outcome, and their outcomes.
    ///
    /// Now and then (first of all, and every 30 s) the limit is held at 2
    /// for twenty calls, and their mean latency is the key's unloaded
    /// latency. After each window of calls (at least ten, or the limit),
    /// the calls waiting at the backend are estimated as `limit × (1 −
    /// unloaded / mean latency)`: below 2 steps the limit grows a step,
    /// above 4 it falls one (a step is `log10(limit)`, at least 1). So it
    /// grows while calls are as fast as the unloaded ones, however their
    /// latency varies, and settles a few calls above what the backend
    /// serves at once. An overload (a [`failure`](crate::Permit::failure))
    /// takes 10 % off at once, at most once per unloaded latency, and
    /// growth is careful after it (never back to the whole limit refused)
    /// until the next probe. A fresh key starts at the lower bound and
    /// doubles each window until calls first queue or are refused. It grows only while it is what holds
    /// calls back: calls waiting in the queue, or every slot taken. A
    /// neutral outcome (a permit dropped unreported) teaches it nothing.
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
    /// assert_eq!(manager.concurrency_limit("db"), Some(1)); // probing first, at its lower bound
    /// permit.success();
    /// # Ok(())
    /// # }
    /// ```
    pub fn adaptive() -> Self {
        Self {
            learned: Some(AdaptiveSetup { bounds: None }),
            ..Self::new(DEFAULT_LEARNED_BOUNDS.0)
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
    pub fn bounds(mut self, min: u32, max: u32) -> Self {
        match &mut self.learned {
            Some(learned) => learned.bounds = Some((min, max)),
            None => self.misplaced = true,
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
    /// ([`QueueTimeout`](crate::RejectReason::QueueTimeout)). Above 0.
    ///
    /// ```
    /// use portcullis::{BulkheadConfig, Priority, RejectReason, ThrottleManager};
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
    /// use portcullis::{BulkheadConfig, Overflow, Priority, RejectReason, ThrottleManager};
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

    /// Adds every problem to `problems`; returns the settings when there are none.
    pub(crate) fn check(&self, problems: &mut Problems<'_>) -> Option<BulkheadSettings> {
        let before = problems.len();
        let learned = self.learned.map(|learned| {
            let (min, max) = learned.bounds.unwrap_or(DEFAULT_LEARNED_BOUNDS);
            if min == 0 {
                problems.add("bounds", "the lower bound must be at least 1, got 0");
            } else if min > max {
                problems.add(
                    "bounds",
                    format!("the lower bound must not exceed the upper, got {min} and {max}"),
                );
            }
            LearnedSettings {
                bounds: Bounds { min, max },
            }
        });
        if self.misplaced {
            problems.add(
                "bounds",
                "bounds are for a learned limit (BulkheadConfig::adaptive), not a fixed one",
            );
        }
        if learned.is_none() && self.max_concurrent == 0 {
            problems.add("max_concurrent", "must be at least 1, got 0");
        }
        if self.queue_timeout == Some(Duration::ZERO) {
            problems.add("queue_timeout", "must be above 0, got 0ns");
        }
        (problems.len() == before).then(|| BulkheadSettings {
            max_concurrent: learned.map_or(self.max_concurrent, |learned| learned.bounds.min),
            learned,
            max_queued: self.max_queued,
            queue_timeout: self.queue_timeout.map(nanos),
            overflow: self.overflow,
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
}

/// How a key's limit is learned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LearnedSettings {
    pub(crate) bounds: Bounds,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn learned_bounds_are_checked_and_only_for_a_learned_limit() {
        let fields = |config: BulkheadConfig| {
            let mut found = Vec::new();
            let _ = config.check(&mut Problems::new("bulkhead", &mut found));
            found.iter().map(|p| p.to_string()).collect::<Vec<_>>()
        };
        assert_eq!(
            fields(BulkheadConfig::adaptive().bounds(0, 10)),
            ["bulkhead.bounds: the lower bound must be at least 1, got 0"]
        );
        assert_eq!(
            fields(BulkheadConfig::adaptive().bounds(10, 5)),
            ["bulkhead.bounds: the lower bound must not exceed the upper, got 10 and 5"]
        );
        assert_eq!(
            fields(BulkheadConfig::new(4).bounds(1, 10)),
            [
                "bulkhead.bounds: bounds are for a learned limit (BulkheadConfig::adaptive), not a fixed one"
            ]
        );
        assert!(fields(BulkheadConfig::adaptive().bounds(1, 200).queue(32)).is_empty());
    }

    #[test]
    fn bad_values_are_named() {
        let mut found = Vec::new();
        let config = BulkheadConfig::new(0).queue_timeout(Duration::ZERO);
        assert!(
            config
                .check(&mut Problems::new("bulkhead", &mut found))
                .is_none()
        );
        let found: Vec<String> = found.iter().map(|p| p.to_string()).collect();
        assert_eq!(
            found,
            [
                "bulkhead.max_concurrent: must be at least 1, got 0",
                "bulkhead.queue_timeout: must be above 0, got 0ns"
            ]
        );
    }
}
