//! Runs one scenario under one strategy on tokio's paused clock, with the
//! real `ThrottleManager` between the callers and a simulated backend, and
//! records what happened second by second.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use portcullis::deadline::with_deadline;
use portcullis::{CallError, Priority, ThrottleManager, overloaded};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::backend::{Backend, Response};
use crate::candidates::CandidateLimiter;
use crate::rng::SplitMix64;
use crate::scenario::{Arrivals, Scenario};
use crate::strategy::Strategy;

/// The length of one sample.
pub(crate) const BUCKET: Duration = Duration::from_secs(1);

/// The length of one fine sample: of the learned rate and the calls sent,
/// to tell how long the rate stays far above its use (a decrease's
/// cooldown is 500 ms; a second is too coarse for that).
pub(crate) const FINE: Duration = Duration::from_millis(100);
const FINE_PER_BUCKET: u32 = (BUCKET.as_millis() / FINE.as_millis()) as u32;

/// What turning a call away costs the rate-limited backends, as a share of
/// serving one.
pub(crate) const REJECT_COST: f64 = 0.1;

/// The one key every call goes to.
const KEY: &str = "backend";

/// Per bucket of [`BUCKET`], what happened in one run.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Series {
    pub(crate) priorities: Vec<Priority>,
    /// Calls that wanted to be made.
    pub(crate) offered: Vec<u32>,
    /// Calls that reached the backend.
    pub(crate) sent: Vec<u32>,
    /// Calls the backend served.
    pub(crate) ok: Vec<u32>,
    /// Calls rejected locally, by the manager.
    pub(crate) shed: Vec<u32>,
    /// `offered` and `ok` per priority (indexed as `priorities`).
    pub(crate) offered_by: Vec<Vec<u32>>,
    pub(crate) ok_by: Vec<Vec<u32>>,
    /// The backend's capacity (calls/s) at the start of each bucket.
    pub(crate) capacity: Vec<f64>,
    /// The key's learned rate at the end of each bucket.
    pub(crate) rate: Vec<Option<f64>>,
    /// The key's concurrency limit at the end of each bucket.
    pub(crate) limit: Vec<Option<f64>>,
    /// Each served call's bucket (of its arrival) and its latency, from
    /// arrival to answer (waits included).
    pub(crate) latencies: Vec<(u32, Duration)>,
    /// The learned rate at the end of each [`FINE`] step, and the calls
    /// that reached the backend during it.
    pub(crate) fine_rate: Vec<Option<f64>>,
    pub(crate) fine_sent: Vec<u32>,
    /// The throttle's rejection probability at the end of each bucket, per
    /// priority.
    pub(crate) rejection: Vec<Vec<Option<f64>>>,
    /// Total time the calls that reached the backend had waited for it.
    pub(crate) waited: Duration,
}

impl Series {
    pub(crate) fn new(buckets: usize, priorities: Vec<Priority>) -> Self {
        let per_priority = || vec![vec![0; buckets]; priorities.len()];
        Self {
            offered: vec![0; buckets],
            sent: vec![0; buckets],
            ok: vec![0; buckets],
            shed: vec![0; buckets],
            offered_by: per_priority(),
            ok_by: per_priority(),
            capacity: vec![0.0; buckets],
            rate: vec![None; buckets],
            limit: vec![None; buckets],
            latencies: Vec::new(),
            fine_rate: vec![None; buckets * FINE_PER_BUCKET as usize],
            fine_sent: vec![0; buckets * FINE_PER_BUCKET as usize],
            rejection: vec![vec![None; buckets]; priorities.len()],
            waited: Duration::ZERO,
            priorities,
        }
    }

    pub(crate) fn buckets(&self) -> usize {
        self.offered.len()
    }

    /// The bucket of `at`, if it is within the run.
    fn bucket(&self, at: Duration) -> Option<usize> {
        let index = (at.as_nanos() / BUCKET.as_nanos()) as usize;
        (index < self.buckets()).then_some(index)
    }

    fn priority_index(&self, priority: Priority) -> usize {
        self.priorities
            .iter()
            .position(|&p| p == priority)
            .unwrap_or(0)
    }
}

/// The backend and the record, shared by every call of a run.
#[derive(Debug)]
struct World {
    backend: Backend,
    series: Series,
}

type Shared = Arc<Mutex<World>>;

/// What stands between the callers and the backend.
#[derive(Debug, Clone)]
enum Gate {
    Open,
    Manager(ThrottleManager<String>),
    /// Another algorithm's concurrency limit (`candidates.rs`).
    Candidate(Arc<CandidateLimiter>),
}

fn lock(world: &Shared) -> std::sync::MutexGuard<'_, World> {
    world.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How a run is set up, beyond the scenario and the strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Settings {
    /// Seeds the arrivals and the throttle's draws.
    pub(crate) seed: u64,
    /// The manager's `max_wait`.
    pub(crate) max_wait: Duration,
}

/// Runs `scenario` under `strategy`. The same settings give the same
/// series. `progress` is told how far (in virtual time) the run has come,
/// once a bucket.
pub(crate) fn run(
    scenario: &Scenario,
    strategy: Strategy,
    settings: Settings,
    progress: &mut dyn FnMut(Duration),
) -> Series {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    runtime.block_on(simulate(scenario, strategy, settings, progress))
}

async fn simulate(
    scenario: &Scenario,
    strategy: Strategy,
    settings: Settings,
    progress: &mut dyn FnMut(Duration),
) -> Series {
    let seed = settings.seed;
    let buckets = (scenario.length.as_nanos() / BUCKET.as_nanos()) as usize;
    assert!(buckets > 0, "a scenario lasts at least one {BUCKET:?}");
    let backend = Backend::new(
        scenario.backend,
        scenario.plan.clone(),
        REJECT_COST,
        seed ^ 0xBAC_4E4D,
    );
    let capacity = backend.capacity_per_second(Duration::ZERO);
    let world: Shared = Arc::new(Mutex::new(World {
        backend,
        series: Series::new(buckets, scenario.priorities()),
    }));
    // Arrivals and shedding draw from separate streams: every strategy sees
    // the same calls arrive.
    let shedding = Arc::new(SplitMix64::new(seed ^ 0x5EED));
    let manager = strategy
        .manager(settings.max_wait, shedding, capacity)
        .expect("the strategies' configurations are valid");
    let gate = match (manager, strategy.candidate()) {
        (Some(manager), _) => Gate::Manager(manager),
        (None, Some(algorithm)) => Gate::Candidate(Arc::new(CandidateLimiter::new(algorithm))),
        (None, None) => Gate::Open,
    };

    let start = Instant::now();
    let mut calls = JoinSet::new();
    let mut sampler = Sampler {
        start,
        sampled: 0,
        world: Arc::clone(&world),
        gate: gate.clone(),
    };
    for (at, priority) in Arrivals::new(scenario, seed) {
        sampler.sample_through(at, progress).await;
        tokio::time::sleep_until(start + at).await;
        {
            let mut world = lock(&world);
            let series = &mut world.series;
            if let Some(bucket) = series.bucket(start.elapsed()) {
                let index = series.priority_index(priority);
                series.offered[bucket] += 1;
                series.offered_by[index][bucket] += 1;
            }
        }
        let deadline = strategy
            .caller_deadline()
            .map(|patience| start + at + patience);
        calls.spawn(call(
            Arc::clone(&world),
            gate.clone(),
            priority,
            start,
            deadline,
        ));
        // Reap finished calls as we go, so the set stays small.
        while calls.try_join_next().is_some() {}
    }
    sampler.sample_through(scenario.length, progress).await;
    while calls.join_next().await.is_some() {}
    let world = lock(&world);
    world.series.clone()
}

/// Records, at the end of each bucket, the capacity, the learned rate and
/// the rejection probabilities; and the learned rate at the end of each
/// fine step.
struct Sampler {
    start: Instant,
    /// Fine steps recorded so far.
    sampled: u32,
    world: Shared,
    gate: Gate,
}

impl Sampler {
    /// Records every fine step (and bucket) that ends by `until`, each at
    /// its end.
    async fn sample_through(&mut self, until: Duration, progress: &mut dyn FnMut(Duration)) {
        while FINE * (self.sampled + 1) <= until {
            let end = FINE * (self.sampled + 1);
            tokio::time::sleep_until(self.start + end).await;
            if let Gate::Manager(manager) = &self.gate {
                lock(&self.world).series.fine_rate[self.sampled as usize] = manager.key(KEY).rate();
            }
            self.sampled += 1;
            if self.sampled % FINE_PER_BUCKET == 0 {
                self.sample((self.sampled / FINE_PER_BUCKET - 1) as usize);
                progress(end);
            }
        }
    }

    fn sample(&self, index: usize) {
        let mut world = lock(&self.world);
        let capacity = world.backend.capacity_per_second(BUCKET * index as u32);
        let series = &mut world.series;
        series.capacity[index] = capacity;
        let manager = match &self.gate {
            Gate::Open => return,
            Gate::Candidate(limiter) => {
                series.limit[index] = Some(f64::from(limiter.limit()));
                return;
            }
            Gate::Manager(manager) => manager,
        };
        series.rate[index] = manager.key(KEY).rate();
        series.limit[index] = manager.key(KEY).concurrency_limit().map(f64::from);
        for (i, &priority) in series.priorities.iter().enumerate() {
            series.rejection[i][index] = manager.key(KEY).rejection_probability(priority);
        }
    }
}

/// One call: through the gate, to the backend, and the outcome reported
/// back. A call with its caller's `deadline` goes through `call` under
/// `with_deadline`, as a caller with a deadline would: the key learns how
/// quickly the backend answers, and admits only calls that can still
/// finish in time.
async fn call(
    world: Shared,
    gate: Gate,
    priority: Priority,
    start: Instant,
    deadline: Option<Instant>,
) {
    let arrived = start.elapsed();
    if let (Gate::Manager(manager), Some(deadline)) = (&gate, deadline) {
        let attempt = || {
            let served = tokio::spawn(serve(Arc::clone(&world), start, arrived, priority));
            async move {
                match served.await {
                    Ok(Response::Ok) => Ok(()),
                    _ => Err(overloaded(std::io::Error::other("turned away"))),
                }
            }
        };
        let called = with_deadline(deadline, manager.call(KEY, priority, attempt)).await;
        if let Err(CallError::Rejected(_)) = called {
            count_shed(&world, start);
        }
        return;
    }
    let admitted = match &gate {
        Gate::Open => Ok(None),
        Gate::Manager(manager) => manager.acquire(KEY, priority).await.map(Some).map_err(drop),
        Gate::Candidate(limiter) => match limiter.acquire().await {
            true => Ok(None),
            false => Err(()),
        },
    };
    let Ok(permit) = admitted else {
        count_shed(&world, start);
        return;
    };
    let now = start.elapsed();
    let response = serve(Arc::clone(&world), start, arrived, priority).await;
    if let Some(permit) = permit {
        match response {
            Response::Ok => permit.success(),
            Response::TooManyRequests | Response::Unavailable => permit.overloaded(),
        }
    }
    if let Gate::Candidate(limiter) = &gate {
        let ended = start.elapsed();
        limiter.release(ended, ended - now, response != Response::Ok);
    }
}

/// A call turned away by the gate, counted.
fn count_shed(world: &Shared, start: Instant) {
    let mut world = lock(world);
    let series = &mut world.series;
    if let Some(bucket) = series.bucket(start.elapsed()) {
        series.shed[bucket] += 1;
    }
}

/// The backend's side of a call admitted now, which arrived at `arrived`:
/// offered, held as long as the backend says, and counted. (A caller that
/// gives up does not stop it: the backend's work goes on.)
async fn serve(world: Shared, start: Instant, arrived: Duration, priority: Priority) -> Response {
    let now = start.elapsed();
    let (response, took) = {
        let mut world = lock(&world);
        let (response, took) = world.backend.offer(now);
        let series = &mut world.series;
        if let Some(bucket) = series.bucket(now) {
            series.sent[bucket] += 1;
            series.fine_sent[(now.as_nanos() / FINE.as_nanos()) as usize] += 1;
            series.waited += now - arrived;
            if response == Response::Ok {
                let index = series.priority_index(priority);
                series.ok[bucket] += 1;
                series.ok_by[index][bucket] += 1;
            }
        }
        (response, took)
    };
    tokio::time::sleep(took).await;
    let mut world = lock(&world);
    if world.backend.holds(response) {
        world.backend.finish();
    }
    if response == Response::Ok {
        let bucket = (arrived.as_nanos() / BUCKET.as_nanos()) as u32;
        let latency = start.elapsed() - arrived;
        world.series.latencies.push((bucket, latency));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Summary;
    use crate::scenario::{self, CAPACITY};

    fn settings(seed: u64) -> Settings {
        Settings {
            seed,
            max_wait: crate::strategy::MAX_WAIT,
        }
    }

    fn scenario(name: &str, secs: u64) -> Scenario {
        scenario::defaults()
            .into_iter()
            .find(|s| s.name == name)
            .unwrap()
            .truncated(Duration::from_secs(secs))
    }

    #[test]
    fn the_same_seed_gives_the_same_run_and_another_seed_another() {
        let outage = scenario("outage", 50);
        let run = |seed| run(&outage, Strategy::All, settings(seed), &mut |_| {});
        let (a, b, c) = (run(3), run(3), run(4));
        assert_eq!(a, b);
        assert_ne!(a, c);
        let table = |series: &Series| {
            crate::report::table(&outage, &[Summary::of(&outage, Strategy::All, series)])
        };
        assert_eq!(table(&a), table(&b));
    }

    #[test]
    fn progress_is_told_once_a_second_of_virtual_time() {
        let spike = scenario("spike", 5);
        let mut told = Vec::new();
        run(&spike, Strategy::None, settings(1), &mut |at| {
            told.push(at.as_secs())
        });
        assert_eq!(told, [1, 2, 3, 4, 5]);
    }

    /// The whole steady 3x overload: once learned (the second half), a
    /// rate with multiplicative decrease serves at least 97.5 % of the
    /// backend's capacity, alone and with the other two controls, and
    /// the backend refuses few of its calls. (Calls waiting in the key's
    /// line leave at the pace of the moment, so a fall slows all of them
    /// at once, where calls that had booked their tokens used to move only
    /// halfway to the new pace.)
    #[test]
    fn a_learned_rate_serves_97_percent_of_capacity_under_steady_overload() {
        let steady = scenario("steady", 120);
        for strategy in [Strategy::RateMultiplicative, Strategy::All] {
            let series = run(&steady, strategy, settings(1), &mut |_| {});
            let summary = Summary::of(&steady, strategy, &series);
            assert!(summary.late_goodput.unwrap() >= 0.975, "{summary:?}");
            assert!(summary.failed < 0.05, "{summary:?}");
        }
    }

    /// A queue under sustained overload, its callers giving up after 1 s:
    /// first come, first served, every call waits out the whole queue and
    /// is answered too late; judged by CoDel, or with the callers'
    /// deadlines, most calls are answered in time, and with CoDel quickly.
    #[test]
    fn under_sustained_overload_codel_and_deadlines_answer_in_time() {
        let queue = scenario("queue-overload", 20);
        let summary = |strategy| {
            let series = run(&queue, strategy, settings(1), &mut |_| {});
            Summary::of(&queue, strategy, &series).queue.unwrap()
        };
        let fifo = summary(Strategy::QueueFifo);
        assert!(fifo.in_time < 0.2 && fifo.too_late > 0.8, "{fifo:?}");
        for strategy in [
            Strategy::QueueFifoDeadline,
            Strategy::QueueCodel,
            Strategy::QueueCodelDeadline,
        ] {
            let figures = summary(strategy);
            assert!(figures.in_time > 0.9, "{strategy:?}: {figures:?}");
            assert!(figures.too_late < 0.01, "{strategy:?}: {figures:?}");
        }
        let codel = summary(Strategy::QueueCodel);
        assert!(codel.p99 < Duration::from_millis(200), "{codel:?}");
    }

    /// A minute of steady 3x overload: the figures the README reports, on a
    /// shorter run.
    #[test]
    fn steady_overload_figures() {
        let steady = scenario("steady", 60);
        let summary = |strategy| {
            let series = run(&steady, strategy, settings(1), &mut |_| {});
            // However the calls come, the backend never serves more than
            // its capacity in a second.
            assert!(
                series.ok.iter().all(|&ok| ok <= CAPACITY),
                "{:?}",
                series.ok
            );
            // Every call reached the backend or was shed, but for those still
            // waiting when the run ended.
            let settled = series.sent.iter().sum::<u32>() + series.shed.iter().sum::<u32>();
            let offered = series.offered.iter().sum::<u32>();
            let last_second = series.offered[series.buckets() - 1];
            assert!(
                settled <= offered && offered - settled <= last_second,
                "{settled} of {offered}"
            );
            Summary::of(&steady, strategy, &series)
        };
        // No control: all of the 3x reaches the backend, whose rejections
        // (a tenth of a call's work each) cost it about a fifth of its
        // capacity: 100 = served + 0.1 * (300 - served).
        let none = summary(Strategy::None);
        assert!((2.9..3.1).contains(&none.load), "{none:?}");
        assert!((0.74..0.81).contains(&none.goodput), "{none:?}");
        // The throttle alone lets through about K = 2 times what succeeds.
        let throttle = summary(Strategy::Throttle);
        assert!((1.6..2.1).contains(&throttle.load), "{throttle:?}");
        assert!(throttle.goodput > none.goodput, "{throttle:?}");
        // Everything: near capacity, little wasted, once learned.
        let all = summary(Strategy::All);
        assert!((0.9..1.2).contains(&all.load), "{all:?}");
        assert!(all.late_goodput.unwrap() >= 0.93, "{all:?}");
        assert!(all.failed < 0.1, "{all:?}");
        assert!(all.shed > 0.6, "{all:?}");
        // A fall moves the calls already waiting back by up to 1.125x,
        // halfway to 1 / 0.8.
        assert!(
            all.mean_wait <= crate::strategy::MAX_WAIT.mul_f64(1.125),
            "{all:?}"
        );
    }
}
