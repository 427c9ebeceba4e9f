//! What a user sets for the bulkhead, and its validation.

use std::time::Duration;

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
/// assert_eq!(config.overflow_policy(), Overflow::DropOldest);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
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
    max_queued: u32,
    queue_timeout: Option<Duration>,
    overflow: Overflow,
}

impl BulkheadConfig {
    /// At most `max_concurrent` calls of a key in flight at once (at least 1).
    ///
    /// ```
    /// assert_eq!(portcullis::BulkheadConfig::new(4).max_concurrent(), 4);
    /// ```
    pub fn new(max_concurrent: u32) -> Self {
        Self {
            max_concurrent,
            max_queued: 0,
            queue_timeout: None,
            overflow: Overflow::RejectNew,
        }
    }

    /// Up to `max_queued` calls may wait for a free slot (default 0).
    ///
    /// ```
    /// assert_eq!(portcullis::BulkheadConfig::new(4).queue(16).max_queued(), 16);
    /// ```
    pub fn queue(mut self, max_queued: u32) -> Self {
        self.max_queued = max_queued;
        self
    }

    /// A call that has waited `timeout` in the queue is rejected
    /// ([`QueueTimeout`](crate::RejectReason::QueueTimeout)). Above 0.
    ///
    /// ```
    /// use std::time::Duration;
    /// let config = portcullis::BulkheadConfig::new(4).queue(8).queue_timeout(Duration::from_millis(250));
    /// assert_eq!(config.queue_timeout_value(), Some(Duration::from_millis(250)));
    /// ```
    pub fn queue_timeout(mut self, timeout: Duration) -> Self {
        self.queue_timeout = Some(timeout);
        self
    }

    /// What happens when the queue is full (default
    /// [`Overflow::RejectNew`]).
    ///
    /// ```
    /// use portcullis::{BulkheadConfig, Overflow};
    /// let config = BulkheadConfig::new(4).overflow(Overflow::DropLowestPriority);
    /// assert_eq!(config.overflow_policy(), Overflow::DropLowestPriority);
    /// ```
    pub fn overflow(mut self, policy: Overflow) -> Self {
        self.overflow = policy;
        self
    }

    /// The concurrency limit.
    ///
    /// ```
    /// assert_eq!(portcullis::BulkheadConfig::new(3).max_concurrent(), 3);
    /// ```
    pub fn max_concurrent(&self) -> u32 {
        self.max_concurrent
    }

    /// The queue's size.
    ///
    /// ```
    /// assert_eq!(portcullis::BulkheadConfig::new(3).max_queued(), 0);
    /// ```
    pub fn max_queued(&self) -> u32 {
        self.max_queued
    }

    /// The queue timeout, if any.
    ///
    /// ```
    /// assert_eq!(portcullis::BulkheadConfig::new(3).queue_timeout_value(), None);
    /// ```
    pub fn queue_timeout_value(&self) -> Option<Duration> {
        self.queue_timeout
    }

    /// The overflow policy.
    ///
    /// ```
    /// use portcullis::{BulkheadConfig, Overflow};
    /// assert_eq!(BulkheadConfig::new(3).overflow_policy(), Overflow::RejectNew);
    /// ```
    pub fn overflow_policy(&self) -> Overflow {
        self.overflow
    }

    /// Adds every problem to `problems`; returns the settings when there are none.
    pub(crate) fn check(&self, problems: &mut Problems<'_>) -> Option<BulkheadSettings> {
        let before = problems.len();
        if self.max_concurrent == 0 {
            problems.add("max_concurrent", "must be at least 1, got 0");
        }
        if self.queue_timeout == Some(Duration::ZERO) {
            problems.add("queue_timeout", "must be above 0, got 0ns");
        }
        (problems.len() == before).then(|| BulkheadSettings {
            max_concurrent: self.max_concurrent,
            max_queued: self.max_queued,
            queue_timeout: self.queue_timeout.map(nanos),
            overflow: self.overflow,
        })
    }
}

/// Validated bulkhead settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BulkheadSettings {
    pub(crate) max_concurrent: u32,
    pub(crate) max_queued: u32,
    pub(crate) queue_timeout: Option<Nanos>,
    pub(crate) overflow: Overflow,
}

#[cfg(test)]
mod tests {
    use super::*;

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
