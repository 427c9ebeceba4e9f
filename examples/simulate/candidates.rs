//! Concurrency limiters other than the library's, for the latency-shape
//! scenarios: the algorithms the learned limit was chosen against, each
//! behind the same gate as the bulkhead strategies (a queue of 20 for at
//! most 200 ms), with the same bounds (1 to 200).
//!
//! - **Gradient2**, after Netflix's `Gradient2Limit` behind its
//!   `WindowedLimit` (a window of at least 1 s and 10 calls): the window's
//!   mean latency against an exponential average of 600 windows,
//!   `gradient = clamp(long / short, 0.5, 1)`, `limit × gradient + 4`,
//!   smoothed by 0.2; no growth while fewer than half the limit are in
//!   flight; a refusal teaches it nothing. Netflix's default lower bound
//!   is 20; here 1, as for the others.
//! - **AIMD**, after Netflix's `AIMDLimit`: a refusal takes the limit to
//!   90 % (at least one less), a success with at least half the limit in
//!   flight adds one.
//! - **Probe-gradient**, the library's learned limit before issue 30: the
//!   fastest of 10 probe calls (at 2 in flight, every 30 s) as the
//!   baseline, `gradient = clamp(1.2 × baseline / mean, 0.5, 2)` a window,
//!   `√limit` of headroom while the gradient is 1 or more, smoothed by
//!   0.3; a refusal takes 10 % off (once per baseline) and growth is
//!   careful after it.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// Calls that may wait for a slot, and for how long: as
/// `strategy::queued`.
const QUEUE: u32 = 20;
const QUEUE_TIMEOUT: Duration = Duration::from_millis(200);

const MIN_LIMIT: f64 = 1.0;
const MAX_LIMIT: f64 = 200.0;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Algorithm {
    Gradient2,
    Aimd,
    ProbeGradient,
}

/// One call's end, as a limiter sees it.
#[derive(Debug, Clone, Copy)]
struct Sample {
    /// When it ended, since the run began.
    at: Duration,
    /// From its admission to its answer.
    latency: Duration,
    /// Calls in flight when it ended, itself included.
    in_flight: u32,
    /// Whether the limit held calls back then (some queued, or every slot
    /// taken).
    limiting: bool,
    refused: bool,
}

/// The calls of a window, summed.
#[derive(Debug, Clone, Copy, Default)]
struct Window {
    started: Duration,
    calls: u32,
    /// Latencies of the calls not refused, summed, and their number.
    latency: Duration,
    served: u32,
    max_in_flight: u32,
    limiting: bool,
}

impl Window {
    fn add(&mut self, sample: Sample) {
        if self.calls == 0 {
            self.started = sample.at;
        }
        self.calls += 1;
        if !sample.refused {
            self.latency += sample.latency;
            self.served += 1;
        }
        self.max_in_flight = self.max_in_flight.max(sample.in_flight);
        self.limiting |= sample.limiting;
    }

    /// The mean latency of its served calls, in seconds.
    fn mean(&self) -> Option<f64> {
        (self.served > 0).then(|| self.latency.as_secs_f64() / f64::from(self.served))
    }
}

/// What each algorithm has learned.
#[derive(Debug, Clone, Copy)]
enum State {
    Gradient2 {
        limit: f64,
        /// The exponential average of the windows' latencies (s), and how
        /// many windows it has seen (a plain mean for the first ten).
        long: f64,
        seen: u32,
        window: Window,
    },
    Aimd {
        limit: f64,
    },
    ProbeGradient {
        limit: f64,
        /// The fastest probe call (s); 0 before the first probe ends.
        baseline: f64,
        probe_left: u32,
        probe_best: f64,
        probed_at: Duration,
        decreased_at: Option<Duration>,
        overloaded_at_limit: f64,
        window: Window,
    },
}

const PROBE_CALLS: u32 = 10;
const PROBE_LIMIT: f64 = 2.0;
const PROBE_EVERY: Duration = Duration::from_secs(30);

impl State {
    fn new(algorithm: Algorithm) -> Self {
        match algorithm {
            // Netflix's default initial limit.
            Algorithm::Gradient2 => State::Gradient2 {
                limit: 20.0,
                long: 0.0,
                seen: 0,
                window: Window::default(),
            },
            Algorithm::Aimd => State::Aimd { limit: 20.0 },
            // A fresh key started at the lower bound, probing.
            Algorithm::ProbeGradient => State::ProbeGradient {
                limit: MIN_LIMIT,
                baseline: 0.0,
                probe_left: PROBE_CALLS,
                probe_best: f64::MAX,
                probed_at: Duration::ZERO,
                decreased_at: None,
                overloaded_at_limit: 0.0,
                window: Window::default(),
            },
        }
    }

    /// The limit in whole calls now.
    fn whole(&self) -> u32 {
        match *self {
            State::Gradient2 { limit, .. } | State::Aimd { limit } => limit as u32,
            State::ProbeGradient {
                limit, probe_left, ..
            } if probe_left > 0 => limit.min(PROBE_LIMIT) as u32,
            State::ProbeGradient { limit, .. } => limit as u32,
        }
    }

    fn learn(&mut self, sample: Sample) {
        match self {
            State::Gradient2 {
                limit,
                long,
                seen,
                window,
            } => {
                window.add(sample);
                if sample.at - window.started < Duration::from_secs(1) || window.calls < 10 {
                    return;
                }
                let closed = std::mem::take(window);
                let Some(short) = closed.mean() else { return };
                *seen += 1;
                *long = if *seen <= 10 {
                    *long + (short - *long) / f64::from(*seen)
                } else {
                    *long + (short - *long) * 2.0 / 601.0
                };
                if *long / short > 2.0 {
                    *long *= 0.9;
                }
                if f64::from(closed.max_in_flight) < *limit / 2.0 {
                    return;
                }
                let gradient = (*long / short).clamp(0.5, 1.0);
                let estimate = *limit * gradient + 4.0;
                *limit = (*limit * 0.8 + estimate * 0.2).clamp(MIN_LIMIT, MAX_LIMIT);
            }
            State::Aimd { limit } => {
                if sample.refused {
                    *limit = (*limit - 1.0).min((*limit * 0.9).floor()).max(MIN_LIMIT);
                } else if f64::from(sample.in_flight) * 2.0 >= *limit {
                    *limit = (*limit + 1.0).min(MAX_LIMIT);
                }
            }
            State::ProbeGradient { .. } => self.learn_probe_gradient(sample),
        }
    }

    fn learn_probe_gradient(&mut self, sample: Sample) {
        let State::ProbeGradient {
            limit,
            baseline,
            probe_left,
            probe_best,
            probed_at,
            decreased_at,
            overloaded_at_limit,
            window,
        } = self
        else {
            return;
        };
        if sample.refused {
            let recently =
                decreased_at.is_some_and(|at| (sample.at - at).as_secs_f64() < *baseline);
            if !recently {
                *overloaded_at_limit = *limit;
                *limit = (*limit * 0.9).max(MIN_LIMIT);
                *decreased_at = Some(sample.at);
            }
            return;
        }
        if *probe_left > 0 {
            if f64::from(sample.in_flight) <= PROBE_LIMIT {
                *probe_best = probe_best.min(sample.latency.as_secs_f64());
                *probe_left -= 1;
                if *probe_left == 0 {
                    *baseline = *probe_best;
                    *probed_at = sample.at;
                    *overloaded_at_limit = 0.0;
                }
            }
            return;
        }
        window.add(sample);
        if window.calls < (*limit as u32).max(10) {
            return;
        }
        let closed = std::mem::take(window);
        let Some(latency) = closed.mean() else { return };
        let gradient = (1.2 * *baseline / latency).clamp(0.5, 2.0);
        let headroom = if gradient >= 1.0 { limit.sqrt() } else { 0.0 };
        let mut next = *limit * 0.7 + (*limit * gradient + headroom) * 0.3;
        if next > *limit && !closed.limiting {
            next = *limit;
        }
        if *overloaded_at_limit > 0.0 && *limit >= 0.9 * *overloaded_at_limit {
            next = next.min(*limit + 0.25);
        }
        *limit = next.clamp(MIN_LIMIT, MAX_LIMIT);
        if sample.at - *probed_at >= PROBE_EVERY {
            *probe_left = PROBE_CALLS;
            *probe_best = f64::MAX;
        }
    }
}

#[derive(Debug)]
struct Gate {
    in_flight: u32,
    queued: u32,
    state: State,
}

/// One key's limiter: its algorithm's limit, and the queue in front of it.
#[derive(Debug)]
pub(crate) struct CandidateLimiter {
    gate: Mutex<Gate>,
    freed: Notify,
}

impl CandidateLimiter {
    pub(crate) fn new(algorithm: Algorithm) -> Self {
        Self {
            gate: Mutex::new(Gate {
                in_flight: 0,
                queued: 0,
                state: State::new(algorithm),
            }),
            freed: Notify::new(),
        }
    }

    fn gate(&self) -> std::sync::MutexGuard<'_, Gate> {
        self.gate.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The limit in whole calls now.
    pub(crate) fn limit(&self) -> u32 {
        self.gate().state.whole()
    }

    /// Waits for a slot: `false` if the queue is full or the wait times
    /// out (the call is shed).
    pub(crate) async fn acquire(&self) -> bool {
        let deadline = Instant::now() + QUEUE_TIMEOUT;
        let mut queued = false;
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            {
                let mut gate = self.gate();
                // A newcomer does not pass the calls already waiting.
                if gate.in_flight < gate.state.whole() && (queued || gate.queued == 0) {
                    gate.in_flight += 1;
                    if queued {
                        gate.queued -= 1;
                    }
                    return true;
                }
                if !queued {
                    if gate.queued >= QUEUE {
                        return false;
                    }
                    gate.queued += 1;
                    queued = true;
                }
            }
            if tokio::time::timeout_at(deadline, freed).await.is_err() {
                self.gate().queued -= 1;
                return false;
            }
        }
    }

    /// A call admitted by [`acquire`](Self::acquire) ended at `at` (since
    /// the run began), `latency` after its admission, refused or served.
    pub(crate) fn release(&self, at: Duration, latency: Duration, refused: bool) {
        {
            let mut gate = self.gate();
            let in_flight = gate.in_flight;
            let limiting = gate.queued > 0 || in_flight >= gate.state.whole();
            gate.state.learn(Sample {
                at,
                latency,
                in_flight,
                limiting,
                refused,
            });
            gate.in_flight -= 1;
        }
        self.freed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(at_ms: u64, latency_ms: u64, in_flight: u32, refused: bool) -> Sample {
        Sample {
            at: Duration::from_millis(at_ms),
            latency: Duration::from_millis(latency_ms),
            in_flight,
            limiting: true,
            refused,
        }
    }

    #[test]
    fn aimd_adds_one_when_busy_and_takes_a_tenth_on_a_refusal() {
        let mut state = State::new(Algorithm::Aimd);
        state.learn(sample(1, 10, 10, false));
        assert_eq!(state.whole(), 21);
        state.learn(sample(2, 10, 3, false)); // fewer than half in flight
        assert_eq!(state.whole(), 21);
        state.learn(sample(3, 1, 21, true));
        assert_eq!(state.whole(), 18); // floor(21 × 0.9)
    }

    #[test]
    fn gradient2_grows_while_latency_holds_and_ignores_refusals() {
        let mut state = State::new(Algorithm::Gradient2);
        for i in 0..400 {
            state.learn(sample(i * 100, 10, 20, i % 2 == 0));
        }
        // Windows of steady latency: + 4 × 0.2 each, refusals or not,
        // until the 20 in flight are less than half the limit.
        assert_eq!(state.whole(), 40, "{state:?}");
    }

    #[test]
    fn probe_gradient_probes_first_then_grows_on_fast_windows() {
        let mut state = State::new(Algorithm::ProbeGradient);
        assert_eq!(state.whole(), 1);
        for i in 0..10 {
            state.learn(sample(i, 10 + i, 1, false));
        }
        let State::ProbeGradient { baseline, .. } = state else {
            unreachable!()
        };
        assert_eq!(baseline, 0.010);
        for i in 0..100 {
            state.learn(sample(100 + i, 10, 8, false));
        }
        assert!(state.whole() > 5, "{state:?}");
    }
}
