//! Simulated backends: what a server does with the calls that reach it.
//!
//! Pure state machines: time comes in as an argument (the time since the run
//! began), so they are tested without a runtime.

use std::collections::VecDeque;
use std::ops::Range;
use std::time::Duration;

use crate::rng::SplitMix64;

/// How long a server takes to turn a call away.
pub(crate) const REJECT_LATENCY: Duration = Duration::from_millis(5);

/// Capacity in thousandths of a call, so that rejections can cost a
/// fraction of a call without floating-point drift.
const UNIT: u64 = 1_000;

/// What limits a backend.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum BackendKind {
    /// Serves at most `per_second` calls in any one-second window, each in
    /// `latency`, and answers 429 beyond.
    Rate { per_second: u32, latency: Duration },
    /// Serves at most `max_in_flight` calls at once, each in `service`, and
    /// answers 503 beyond: a capacity of `max_in_flight / service` calls a
    /// second.
    Concurrency {
        max_in_flight: u32,
        service: Duration,
    },
    /// `workers` serve the calls in flight together: a call takes
    /// `service`, stretched by how far the calls in flight outnumber the
    /// workers when it arrives. One that would take longer than `deadline`
    /// fails after it (its client's timeout). A capacity of `workers /
    /// service` calls a second, with latency growing with load.
    Workers {
        workers: u32,
        service: Duration,
        deadline: Duration,
    },
    /// Serves at most `max_in_flight` calls at once and answers 503
    /// beyond, as `Concurrency` does, each call taking a latency of
    /// `shape` whose mean is `mean` at no load.
    Shaped {
        max_in_flight: u32,
        mean: Duration,
        shape: LatencyShape,
    },
}

/// How a [`BackendKind::Shaped`] backend's latency varies from call to
/// call: real backends' latencies are seldom constant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LatencyShape {
    Constant,
    /// Uniform within ±50 % of the mean.
    Uniform,
    Exponential,
    /// A tenth of the calls are cache hits, ten times faster (the rest a
    /// little slower than the mean, which stays the same).
    FastHits,
    /// Slower the more calls are in flight: `mean × (1 + (in_flight − 1) /
    /// max_in_flight)`.
    RisingWithLoad,
}

impl LatencyShape {
    /// A call's latency, from a draw `u` in [0, 1), with `in_flight` calls
    /// (itself included) of at most `max_in_flight`.
    fn latency(self, mean: Duration, u: f64, in_flight: u32, max_in_flight: u32) -> Duration {
        match self {
            LatencyShape::Constant => mean,
            LatencyShape::Uniform => mean.mul_f64(0.5 + u),
            LatencyShape::Exponential => mean.mul_f64(-(1.0 - u).ln()),
            LatencyShape::FastHits if u < 0.1 => mean / 10,
            LatencyShape::FastHits => mean.mul_f64(1.1),
            LatencyShape::RisingWithLoad => mean
                .mul_f64(1.0 + f64::from(in_flight.saturating_sub(1)) / f64::from(max_in_flight)),
        }
    }
}

/// Changes to a backend's capacity during a run.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct CapacityPlan {
    /// Every call fails with 503 during this span.
    pub(crate) outage: Option<Range<Duration>>,
    /// From then on the backend has half its capacity.
    pub(crate) halved_from: Option<Duration>,
    /// From then on every call takes twice as long (workers backends).
    pub(crate) slower_from: Option<Duration>,
}

/// The backend's answer to one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Response {
    Ok,
    TooManyRequests,
    Unavailable,
}

/// One simulated server.
#[derive(Debug)]
pub(crate) struct Backend {
    kind: BackendKind,
    plan: CapacityPlan,
    /// What turning a call away costs a rate-limited backend, in thousandths
    /// of a served call (rejecting is work too: parsing, auth, logging).
    reject_cost: u64,
    /// The work of the last second: (when, cost), oldest first.
    window: VecDeque<(Duration, u64)>,
    window_used: u64,
    in_flight: u32,
    /// The draws of a shaped backend's latencies.
    draws: SplitMix64,
}

impl Backend {
    /// A backend of `kind` following `plan`, for which turning a call away
    /// costs `reject_cost` of serving one (0 to 1; rate-limited backends
    /// only: a full concurrency backend rejects for free), its latencies
    /// (shaped backends) drawn from `seed`.
    pub(crate) fn new(kind: BackendKind, plan: CapacityPlan, reject_cost: f64, seed: u64) -> Self {
        Self {
            kind,
            plan,
            reject_cost: (reject_cost.clamp(0.0, 1.0) * UNIT as f64).round() as u64,
            window: VecDeque::new(),
            window_used: 0,
            in_flight: 0,
            draws: SplitMix64::new(seed),
        }
    }

    /// The calls a second the backend can serve at `at`.
    pub(crate) fn capacity_per_second(&self, at: Duration) -> f64 {
        let share = self.share(at);
        match self.kind {
            BackendKind::Rate { per_second, .. } => f64::from(per_second) * share,
            BackendKind::Concurrency {
                max_in_flight,
                service,
            } => (f64::from(max_in_flight) * share).floor() / service.as_secs_f64(),
            // Mean latency at full load: the constant of `RisingWithLoad`
            // grows with the calls in flight.
            BackendKind::Shaped {
                max_in_flight,
                mean,
                shape,
            } => {
                let slots = (f64::from(max_in_flight) * share).floor();
                let full = if shape == LatencyShape::RisingWithLoad {
                    mean.mul_f64(1.0 + (slots - 1.0).max(0.0) / f64::from(max_in_flight))
                } else {
                    mean
                };
                slots / full.as_secs_f64()
            }
            BackendKind::Workers {
                workers, service, ..
            } => (f64::from(workers) * share).floor() / (service.as_secs_f64() * self.slowdown(at)),
        }
    }

    /// How many times its normal service time a call takes at `at`.
    fn slowdown(&self, at: Duration) -> f64 {
        if self.plan.slower_from.is_some_and(|from| at >= from) {
            2.0
        } else {
            1.0
        }
    }

    /// The share of its full capacity the backend has at `at`.
    fn share(&self, at: Duration) -> f64 {
        if self.plan.outage.as_ref().is_some_and(|o| o.contains(&at)) {
            0.0
        } else if self.plan.halved_from.is_some_and(|from| at >= from) {
            0.5
        } else {
            1.0
        }
    }

    /// A call arrives at `now`: the answer, and how long the backend takes
    /// to give it. A served call of a concurrency backend holds its slot
    /// until [`finish`](Self::finish).
    pub(crate) fn offer(&mut self, now: Duration) -> (Response, Duration) {
        let share = self.share(now);
        if share == 0.0 {
            return (Response::Unavailable, REJECT_LATENCY);
        }
        match self.kind {
            BackendKind::Rate {
                per_second,
                latency,
            } => {
                while let Some(&(at, cost)) = self.window.front() {
                    if now.saturating_sub(at) < Duration::from_secs(1) {
                        break;
                    }
                    self.window.pop_front();
                    self.window_used -= cost;
                }
                let limit = (f64::from(per_second) * share) as u64 * UNIT;
                let (response, cost, took) = if self.window_used + UNIT <= limit {
                    (Response::Ok, UNIT, latency)
                } else {
                    (Response::TooManyRequests, self.reject_cost, REJECT_LATENCY)
                };
                if cost > 0 {
                    self.window.push_back((now, cost));
                    self.window_used += cost;
                }
                (response, took)
            }
            BackendKind::Concurrency {
                max_in_flight,
                service,
            } => {
                let limit = (f64::from(max_in_flight) * share) as u32;
                if self.in_flight < limit {
                    self.in_flight += 1;
                    (Response::Ok, service)
                } else {
                    (Response::Unavailable, REJECT_LATENCY)
                }
            }
            BackendKind::Shaped {
                max_in_flight,
                mean,
                shape,
            } => {
                let limit = (f64::from(max_in_flight) * share) as u32;
                if self.in_flight < limit {
                    self.in_flight += 1;
                    let u = self.draws.next_f64();
                    let took = shape.latency(mean, u, self.in_flight, max_in_flight);
                    (Response::Ok, took.max(Duration::from_micros(50)))
                } else {
                    (Response::Unavailable, REJECT_LATENCY)
                }
            }
            BackendKind::Workers {
                workers,
                service,
                deadline,
            } => {
                let workers = (f64::from(workers) * share).max(1.0);
                self.in_flight += 1;
                let stretch = (f64::from(self.in_flight) / workers).max(1.0);
                let took = service.mul_f64(stretch * self.slowdown(now));
                if took <= deadline {
                    (Response::Ok, took)
                } else {
                    (Response::Unavailable, deadline)
                }
            }
        }
    }

    /// A call this backend served has ended.
    pub(crate) fn finish(&mut self) {
        if let BackendKind::Concurrency { .. }
        | BackendKind::Workers { .. }
        | BackendKind::Shaped { .. } = self.kind
        {
            self.in_flight = self.in_flight.saturating_sub(1);
        }
    }

    /// Whether a call answered `response` holds a place until
    /// [`finish`](Self::finish) (a workers backend works on a call it
    /// fails, until its deadline).
    pub(crate) fn holds(&self, response: Response) -> bool {
        match self.kind {
            BackendKind::Workers { .. } => true,
            _ => response == Response::Ok,
        }
    }

    /// Calls being served now (concurrency backends).
    #[cfg(test)]
    pub(crate) fn in_flight(&self) -> u32 {
        self.in_flight
    }
}

#[cfg(test)]
mod workers_tests {
    use super::*;

    #[test]
    fn a_workers_backend_slows_with_load_and_fails_past_its_deadline() {
        let kind = BackendKind::Workers {
            workers: 2,
            service: Duration::from_millis(100),
            deadline: Duration::from_millis(250),
        };
        let plan = CapacityPlan {
            slower_from: Some(Duration::from_secs(10)),
            ..CapacityPlan::default()
        };
        let mut backend = Backend::new(kind, plan, 0.0, 1);
        let at = Duration::ZERO;
        assert_eq!(
            backend.offer(at),
            (Response::Ok, Duration::from_millis(100))
        );
        assert_eq!(
            backend.offer(at),
            (Response::Ok, Duration::from_millis(100))
        );
        // Three in flight on two workers: half as fast again.
        assert_eq!(
            backend.offer(at),
            (Response::Ok, Duration::from_millis(150))
        );
        assert_eq!(
            backend.offer(at),
            (Response::Ok, Duration::from_millis(200))
        );
        // Five: 250 ms, the deadline; six: past it, failed at the deadline.
        assert_eq!(
            backend.offer(at),
            (Response::Ok, Duration::from_millis(250))
        );
        assert_eq!(
            backend.offer(at),
            (Response::Unavailable, Duration::from_millis(250))
        );
        assert!(backend.holds(Response::Unavailable));
        for _ in 0..6 {
            backend.finish();
        }
        // Twice as slow from 10 s: a capacity of 2 / 200 ms.
        let later = Duration::from_secs(10);
        assert_eq!(
            backend.offer(later),
            (Response::Ok, Duration::from_millis(200))
        );
        assert_eq!(backend.capacity_per_second(later), 10.0);
    }
}

#[cfg(test)]
mod tests {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    use super::*;
    use crate::rng::SplitMix64;

    const SECOND: Duration = Duration::from_secs(1);

    /// Offers Poisson arrivals at `per_second` for `secs` seconds, finishing
    /// served calls when their time comes; returns when each served call
    /// was accepted.
    fn accepted_times(
        backend: &mut Backend,
        per_second: f64,
        secs: f64,
        seed: u64,
    ) -> Vec<Duration> {
        let rng = SplitMix64::new(seed);
        let (mut now, mut accepted) = (0.0, Vec::new());
        let mut ends = BinaryHeap::new();
        loop {
            now += rng.exponential(per_second);
            if now >= secs {
                return accepted;
            }
            let at = Duration::from_secs_f64(now);
            while ends.peek().is_some_and(|Reverse(end)| *end <= at) {
                ends.pop();
                backend.finish();
            }
            if let (Response::Ok, took) = backend.offer(at) {
                accepted.push(at);
                ends.push(Reverse(at + took));
            }
        }
    }

    /// The most calls accepted in any window `[t, t + 1 s)`.
    fn most_in_any_second(accepted: &[Duration]) -> usize {
        let mut most = 0;
        let mut end = 0;
        for (start, &t) in accepted.iter().enumerate() {
            while end < accepted.len() && accepted[end] < t + SECOND {
                end += 1;
            }
            most = most.max(end - start);
        }
        most
    }

    fn rate_backend(per_second: u32, plan: CapacityPlan, reject_cost: f64) -> Backend {
        let kind = BackendKind::Rate {
            per_second,
            latency: Duration::from_millis(50),
        };
        Backend::new(kind, plan, reject_cost, 1)
    }

    #[test]
    fn a_rate_backend_never_accepts_more_than_its_capacity_in_any_second() {
        for seed in 0..5 {
            let mut backend = rate_backend(100, CapacityPlan::default(), 0.0);
            let accepted = accepted_times(&mut backend, 500.0, 30.0, seed);
            assert!(most_in_any_second(&accepted) <= 100);
            // ... and, offered five times its capacity, serves all of it.
            assert!(accepted.len() >= 100 * 29, "{}", accepted.len());
        }
    }

    #[test]
    fn a_concurrency_backend_never_serves_more_than_its_slots_allow() {
        let kind = BackendKind::Concurrency {
            max_in_flight: 10,
            service: Duration::from_millis(100),
        };
        let mut backend = Backend::new(kind, CapacityPlan::default(), 0.0, 1);
        assert_eq!(backend.capacity_per_second(Duration::ZERO), 100.0);
        let accepted = accepted_times(&mut backend, 500.0, 30.0, 3);
        assert!(most_in_any_second(&accepted) <= 100);
        assert!(accepted.len() >= 100 * 29, "{}", accepted.len());
        // Ten calls at one instant fill it; the eleventh is turned away.
        let mut backend = Backend::new(kind, CapacityPlan::default(), 0.0, 1);
        for _ in 0..10 {
            assert_eq!(backend.offer(Duration::ZERO).0, Response::Ok);
        }
        assert_eq!(
            backend.offer(Duration::ZERO),
            (Response::Unavailable, REJECT_LATENCY)
        );
        backend.finish();
        assert_eq!(backend.in_flight(), 9);
        assert_eq!(backend.offer(Duration::ZERO).0, Response::Ok);
    }

    #[test]
    fn rejections_use_up_capacity_at_their_cost() {
        // 300 calls a second against 100: with free rejections the backend
        // serves 100 a second; when a rejection costs a tenth of a call,
        // 100 = served + 0.1 * (300 - served), so it serves about 78.
        let free = accepted_times(
            &mut rate_backend(100, CapacityPlan::default(), 0.0),
            300.0,
            60.0,
            1,
        );
        let costly = accepted_times(
            &mut rate_backend(100, CapacityPlan::default(), 0.1),
            300.0,
            60.0,
            1,
        );
        let (free, costly) = (free.len() as f64 / 60.0, costly.len() as f64 / 60.0);
        assert!((98.0..=100.0).contains(&free), "{free}");
        assert!((74.0..=82.0).contains(&costly), "{costly}");
    }

    #[test]
    fn an_outage_fails_everything_and_a_halving_halves_the_capacity() {
        let plan = CapacityPlan {
            outage: Some(Duration::from_secs(10)..Duration::from_secs(20)),
            halved_from: Some(Duration::from_secs(30)),
            slower_from: None,
        };
        let mut backend = rate_backend(100, plan, 0.0);
        let accepted = accepted_times(&mut backend, 300.0, 40.0, 2);
        let in_span = |from: u64, to: u64| {
            accepted
                .iter()
                .filter(|t| (Duration::from_secs(from)..Duration::from_secs(to)).contains(t))
                .count()
        };
        assert_eq!(in_span(10, 20), 0);
        assert!(
            (900..=1_000).contains(&in_span(0, 10)),
            "{}",
            in_span(0, 10)
        );
        assert!(
            (450..=500).contains(&in_span(30, 40)),
            "{}",
            in_span(30, 40)
        );
        assert_eq!(backend.capacity_per_second(Duration::from_secs(15)), 0.0);
        assert_eq!(backend.capacity_per_second(Duration::from_secs(35)), 50.0);
    }

    #[test]
    fn a_shaped_backend_serves_its_slots_with_the_mean_of_its_shape() {
        let mean = Duration::from_millis(100);
        for shape in [
            LatencyShape::Constant,
            LatencyShape::Uniform,
            LatencyShape::Exponential,
            LatencyShape::FastHits,
        ] {
            let kind = BackendKind::Shaped {
                max_in_flight: 10,
                mean,
                shape,
            };
            let mut backend = Backend::new(kind, CapacityPlan::default(), 0.0, 7);
            let mut total = Duration::ZERO;
            for _ in 0..4_000 {
                let (response, took) = backend.offer(Duration::ZERO);
                assert_eq!(response, Response::Ok);
                total += took;
                backend.finish();
            }
            let average = total / 4_000;
            assert!(
                average.abs_diff(mean) < Duration::from_millis(5),
                "{shape:?}: {average:?}"
            );
            assert_eq!(backend.capacity_per_second(Duration::ZERO), 100.0);
        }
        // Ten at once, 503 beyond; rising with the calls in flight.
        let kind = BackendKind::Shaped {
            max_in_flight: 10,
            mean,
            shape: LatencyShape::RisingWithLoad,
        };
        let mut backend = Backend::new(kind, CapacityPlan::default(), 0.0, 7);
        let took: Vec<Duration> = (0..10).map(|_| backend.offer(Duration::ZERO).1).collect();
        assert_eq!(took[0], mean);
        assert_eq!(took[9], Duration::from_millis(190));
        assert_eq!(
            backend.offer(Duration::ZERO),
            (Response::Unavailable, REJECT_LATENCY)
        );
        assert_eq!(backend.in_flight(), 10);
        // At full load every call takes 190 ms: 10 / 0.19 s.
        let capacity = backend.capacity_per_second(Duration::ZERO);
        assert!((capacity - 52.6).abs() < 0.1, "{capacity}");
    }
}
