//! The strategies compared: how a client guards its calls, as
//! `ThrottleManager` configurations (none of them knows the capacity).

use std::sync::Arc;
use std::time::Duration;

use portcullis::builder::ThrottleManagerBuilder;
use portcullis::clock::TokioClock;
use portcullis::deadline::TimeLimits;
use portcullis::error::ConfigError;
use portcullis::{BulkheadConfig, Priority, RateConfig, ThrottleConfig, ThrottleManager};

use crate::candidates::Algorithm;
use crate::rng::SplitMix64;

/// The throttle's window in the simulation: a sixth of the library's
/// default (1 min), so that runs stay short. Every throttle timing scales
/// with it.
pub(crate) const THROTTLE_WINDOW: Duration = Duration::from_secs(10);

/// How long a call may wait for its rate token before it is given up (the
/// manager's `max_wait`), unless `--max-wait` says otherwise. The rate acts
/// on calls not yet scheduled, so a deep queue slows its reactions: see the
/// README's table of `max_wait` against goodput.
pub(crate) const MAX_WAIT: Duration = Duration::from_millis(250);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Strategy {
    /// Every call goes to the backend.
    None,
    /// The adaptive rate, additive decrease.
    RateAdditive,
    /// The adaptive rate, multiplicative decrease with a cooldown.
    RateMultiplicative,
    /// Client-side throttling alone (K = 2).
    Throttle,
    /// Rate (multiplicative), throttle and bulkhead together, with a
    /// shorter `max_wait` for LOW calls.
    All,
    /// A fixed bulkhead set too small for the backend (4 in flight).
    BulkheadSmall,
    /// A fixed bulkhead set too large for it (40 in flight).
    BulkheadLarge,
    /// A bulkhead whose limit is learned.
    BulkheadAdaptive,
    /// A fixed bulkhead set to the backend's own limit (10 in flight), as
    /// a user who knew it would: the mark for the learned limits.
    BulkheadKnown,
    /// The backend's limit (10 in flight) with a deep queue served first
    /// come, first served: 400 calls, for up to 10 s (what a semaphore's
    /// queue does).
    QueueFifo,
    /// The FIFO queue, each call carrying its caller's deadline
    /// (`with_deadline`, 1 s from its arrival): a call that could not
    /// start in time is refused at once or leaves the queue.
    QueueFifoDeadline,
    /// The same queue judged by CoDel (5 ms target, 100 ms interval):
    /// while it stays overloaded, a newcomer waits 5 ms at most, and the
    /// newest is served first.
    QueueCodel,
    /// CoDel, and each call carrying its caller's deadline.
    QueueCodelDeadline,
    /// Limits learned by other algorithms (see `candidates.rs`).
    Gradient2,
    Aimd,
    ProbeGradient,
    /// The learned rate with every default (`RateConfig::adaptive(start)`),
    /// from five starts against the backend's capacity `C`: `C / 50` (at
    /// least 1/s), `C / 5`, `C`, `2 C` and `10 C`.
    LearnedFarBelow,
    LearnedBelow,
    LearnedAtCapacity,
    LearnedAbove,
    LearnedFarAbove,
}

/// How long the callers of the queue scenarios wait for an answer: one
/// that comes later is no use to them.
pub(crate) const CALLER_PATIENCE: Duration = Duration::from_secs(1);

/// The queue scenarios' bulkhead: the backend's 10 in flight, and a deep
/// queue, 400 calls for up to 10 s.
fn deep_queue() -> BulkheadConfig {
    BulkheadConfig::new(10)
        .queue(400)
        .queue_timeout(Duration::from_secs(10))
}

/// The queue every bulkhead strategy has: 20 calls, for at most 200 ms
/// (and the other algorithms' limits, in `candidates.rs`).
fn queued(config: BulkheadConfig) -> BulkheadConfig {
    config.queue(20).queue_timeout(Duration::from_millis(200))
}

impl Strategy {
    /// The strategies of the scenarios about rates and failures.
    pub(crate) const EVERY: [Strategy; 5] = [
        Strategy::None,
        Strategy::RateAdditive,
        Strategy::RateMultiplicative,
        Strategy::Throttle,
        Strategy::All,
    ];

    /// The strategies of the scenarios about concurrency (workers
    /// backends).
    pub(crate) const CONCURRENCY: [Strategy; 4] = [
        Strategy::None,
        Strategy::BulkheadSmall,
        Strategy::BulkheadLarge,
        Strategy::BulkheadAdaptive,
    ];

    /// The strategies of the queue scenarios (callers who give up).
    pub(crate) const QUEUES: [Strategy; 4] = [
        Strategy::QueueFifo,
        Strategy::QueueFifoDeadline,
        Strategy::QueueCodel,
        Strategy::QueueCodelDeadline,
    ];

    /// The strategies of the learned-rate scenarios: one start each.
    pub(crate) const STARTS: [Strategy; 5] = [
        Strategy::LearnedFarBelow,
        Strategy::LearnedBelow,
        Strategy::LearnedAtCapacity,
        Strategy::LearnedAbove,
        Strategy::LearnedFarAbove,
    ];

    /// The strategies of the latency-shape scenarios: the known limit,
    /// the library's learned one, and the algorithms it was chosen against.
    pub(crate) const SHAPES: [Strategy; 5] = [
        Strategy::BulkheadKnown,
        Strategy::BulkheadAdaptive,
        Strategy::ProbeGradient,
        Strategy::Gradient2,
        Strategy::Aimd,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Strategy::None => "no control",
            Strategy::RateAdditive => "rate, additive decrease",
            Strategy::RateMultiplicative => "rate, multiplicative decrease",
            Strategy::Throttle => "throttle only",
            Strategy::All => "rate + throttle + bulkhead",
            Strategy::BulkheadSmall => "bulkhead of 4",
            Strategy::BulkheadLarge => "bulkhead of 40",
            Strategy::BulkheadAdaptive => "adaptive bulkhead",
            Strategy::BulkheadKnown => "bulkhead of 10 (the backend's)",
            Strategy::QueueFifo => "FIFO queue (400, 10 s)",
            Strategy::QueueFifoDeadline => "FIFO + callers' deadlines",
            Strategy::QueueCodel => "CoDel (5 ms / 100 ms)",
            Strategy::QueueCodelDeadline => "CoDel + callers' deadlines",
            Strategy::Gradient2 => "Gradient2 (Netflix)",
            Strategy::Aimd => "AIMD (Netflix)",
            Strategy::ProbeGradient => "probe-gradient (before issue 30)",
            Strategy::LearnedFarBelow => "learned, from C/50 (at least 1/s)",
            Strategy::LearnedBelow => "learned, from C/5",
            Strategy::LearnedAtCapacity => "learned, from C",
            Strategy::LearnedAbove => "learned, from 2C",
            Strategy::LearnedFarAbove => "learned, from 10C",
        }
    }

    /// The learned rate's start against a backend of `capacity` calls a
    /// second, for a strategy that starts from one.
    pub(crate) fn start(self, capacity: f64) -> Option<f64> {
        match self {
            Strategy::LearnedFarBelow => Some((capacity / 50.0).max(1.0)),
            Strategy::LearnedBelow => Some(capacity / 5.0),
            Strategy::LearnedAtCapacity => Some(capacity),
            Strategy::LearnedAbove => Some(2.0 * capacity),
            Strategy::LearnedFarAbove => Some(10.0 * capacity),
            _ => None,
        }
    }

    /// Whether the strategy has a bulkhead (for the plots).
    pub(crate) fn has_bulkhead(self) -> bool {
        matches!(
            self,
            Strategy::All
                | Strategy::BulkheadSmall
                | Strategy::BulkheadLarge
                | Strategy::BulkheadAdaptive
                | Strategy::BulkheadKnown
                | Strategy::QueueFifo
                | Strategy::QueueFifoDeadline
                | Strategy::QueueCodel
                | Strategy::QueueCodelDeadline
        ) || self.candidate().is_some()
    }

    /// The deadline each call of the strategy carries, from its arrival.
    pub(crate) fn caller_deadline(self) -> Option<Duration> {
        matches!(
            self,
            Strategy::QueueFifoDeadline | Strategy::QueueCodelDeadline
        )
        .then_some(CALLER_PATIENCE)
    }

    /// The algorithm of a strategy that is not the library's.
    pub(crate) fn candidate(self) -> Option<Algorithm> {
        match self {
            Strategy::Gradient2 => Some(Algorithm::Gradient2),
            Strategy::Aimd => Some(Algorithm::Aimd),
            Strategy::ProbeGradient => Some(Algorithm::ProbeGradient),
            _ => None,
        }
    }

    /// Whether the strategy learns a rate (for the plots).
    pub(crate) fn has_rate(self) -> bool {
        matches!(
            self,
            Strategy::RateAdditive | Strategy::RateMultiplicative | Strategy::All
        ) || Strategy::STARTS.contains(&self)
    }

    /// Whether the strategy sheds by the throttle's probability.
    pub(crate) fn has_throttle(self) -> bool {
        matches!(self, Strategy::Throttle | Strategy::All)
    }

    /// The manager for this strategy, on tokio's (paused) clock, calls
    /// waiting at most `max_wait` for a rate token, the throttle drawing
    /// from `random`, a learned rate starting as [`start`](Self::start)
    /// says against `capacity`; `None` for no control or another
    /// algorithm's limit ([`candidate`](Self::candidate)). Call it inside
    /// the runtime that runs the simulation.
    pub(crate) fn manager(
        self,
        max_wait: Duration,
        random: Arc<SplitMix64>,
        capacity: f64,
    ) -> Result<Option<ThrottleManager<String>>, ConfigError> {
        // Every rate starts at 10/s, a tenth of the capacity, which it does
        // not know. A success adds 0.3/s: the rate grows 30 % a second
        // while all goes well.
        let rate = RateConfig::adaptive(10.0)
            .bounds(1.0, 10_000.0)
            .increase_by(0.3);
        // Additive: a failure takes 3/s off, ten successes' worth. The rate
        // settles where successes and failures balance:
        // capacity * (1 + 0.3 / 3) = 1.1x capacity.
        let additive = rate.clone().decrease_by(3.0);
        // Multiplicative: a fifth off, at most once per 500 ms. The
        // rate-limited backend counts calls over a second, so it goes on
        // refusing for a while after the rate has come down; a shorter
        // cooldown lowers the rate again for the same overshoot (100 ms:
        // 88 % goodput in the priorities scenario, 500 ms: 93 %).
        let multiplicative = rate
            .decrease_factor(0.8)
            .decrease_cooldown(Duration::from_millis(500));
        let throttle = ThrottleConfig::new().window(THROTTLE_WINDOW);
        let builder = ThrottleManager::<String>::builder()
            .clock(TokioClock::new())
            .time_limits(TimeLimits::new().max_wait(max_wait))
            .random_source(move || random.next_f64());
        let builder = match self {
            Strategy::None | Strategy::Gradient2 | Strategy::Aimd | Strategy::ProbeGradient => {
                return Ok(None);
            }
            Strategy::RateAdditive => builder.rate(additive),
            Strategy::RateMultiplicative => builder.rate(multiplicative),
            Strategy::Throttle => builder.throttle(throttle),
            Strategy::All => builder
                .rate(multiplicative)
                .throttle(throttle)
                .bulkhead(
                    // Twice the backend's concurrency in flight, as a guess;
                    // as many waiting, for at most 1 s.
                    BulkheadConfig::new(20)
                        .queue(20)
                        .queue_timeout(Duration::from_secs(1)),
                )
                // LOW calls give up sooner, so HIGH ones find a short queue.
                .time_limits(TimeLimits::new().max_wait_for(Priority::LOW, max_wait / 5)),
            // The bulkheads alone are judged by their queue's own limits
            // (its timeout, CoDel, the callers' deadlines): the manager's
            // budget for the wait to be admitted stays out of their way.
            Strategy::BulkheadSmall => {
                queue_alone(builder).bulkhead(queued(BulkheadConfig::new(4)))
            }
            Strategy::BulkheadLarge => {
                queue_alone(builder).bulkhead(queued(BulkheadConfig::new(40)))
            }
            Strategy::BulkheadKnown => {
                queue_alone(builder).bulkhead(queued(BulkheadConfig::new(10)))
            }
            Strategy::BulkheadAdaptive => {
                queue_alone(builder).bulkhead(queued(BulkheadConfig::adaptive().bounds(1, 200)))
            }
            Strategy::QueueFifo | Strategy::QueueFifoDeadline => {
                queue_alone(builder).bulkhead(deep_queue())
            }
            Strategy::QueueCodel | Strategy::QueueCodelDeadline => queue_alone(builder)
                .bulkhead(deep_queue().codel(Duration::from_millis(5), Duration::from_millis(100))),
            Strategy::LearnedFarBelow
            | Strategy::LearnedBelow
            | Strategy::LearnedAtCapacity
            | Strategy::LearnedAbove
            | Strategy::LearnedFarAbove => {
                let start = self.start(capacity).unwrap_or(capacity);
                builder.rate(RateConfig::adaptive(start))
            }
        };
        builder.build().map(Some)
    }
}

/// `builder` with no budget for the wait to be admitted of its own.
fn queue_alone(builder: ThrottleManagerBuilder<String>) -> ThrottleManagerBuilder<String> {
    builder.time_limits(TimeLimits::new().max_wait(Duration::MAX))
}
