//! The learned rate converges from any start, on virtual time: a backend
//! of capacity `C` that refuses every call beyond it (a token bucket of
//! `C` a second with a burst of `C / 5`, as nginx's `limit_req` with
//! `burst`), 16 callers through `call`, the crate's default steps, and a
//! start far below, at, or far above `C`, for `C` in {5, 50, 500}/s.
//!
//! What a user relies on: a start below the host's capacity finds 90 % of
//! it within 10 s; a start above it comes down at once (at most 10 % of
//! calls refused over the first 20 s) and for good (at most 3 % from the
//! 10th second on); a capacity that halves or doubles is followed within
//! 10 s; a host that answers its refusals with a pause (`Retry-After`) is
//! still served near its capacity. Each run prints its figures (`cargo
//! test --test rate converge -- --nocapture`).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use portcullis::{CallError, Priority, RateConfig, ThrottleManager, overloaded};
use tokio::time::Instant;

/// How long a call takes at the backend, answered or refused.
const LATENCY: Duration = Duration::from_millis(2);
const CALLERS: usize = 16;

/// A backend of `capacity` calls a second (changed at `change.0` to
/// `change.1`), refusing beyond it, counting what it served and refused
/// second by second.
struct Backend {
    start: Instant,
    state: Mutex<BackendState>,
}

struct BackendState {
    capacity: f64,
    /// The bucket's burst, in calls: `capacity / 5` unless set.
    burst: Option<f64>,
    /// If set, the backend counts its calls over the last second instead
    /// of a bucket: it serves while fewer than `capacity` were served in
    /// it (their times, in seconds since start).
    window: Option<VecDeque<f64>>,
    /// The pause it asks for with each refusal (`Retry-After`), if any.
    pause: Option<Duration>,
    change: Option<(Duration, f64)>,
    /// The token bucket's theoretical arrival time, in seconds since start.
    tat: f64,
    served: Vec<u32>,
    refused: Vec<u32>,
}

impl Backend {
    fn new(capacity: f64, change: Option<(Duration, f64)>, seconds: usize) -> Arc<Self> {
        Arc::new(Self {
            start: Instant::now(),
            state: Mutex::new(BackendState {
                capacity,
                burst: None,
                window: None,
                pause: None,
                change,
                tat: 0.0,
                served: vec![0; seconds],
                refused: vec![0; seconds],
            }),
        })
    }

    /// One call arriving now: served if the bucket has a token.
    fn arrive(&self) -> bool {
        let now = self.start.elapsed();
        let mut state = self.state.lock().unwrap();
        if let Some((at, capacity)) = state.change
            && now >= at
        {
            state.capacity = capacity;
            state.change = None;
        }
        let t = now.as_secs_f64();
        let interval = 1.0 / state.capacity;
        let burst = state
            .burst
            .unwrap_or_else(|| (state.capacity / 5.0).max(1.0));
        let capacity = state.capacity;
        let served = if let Some(window) = &mut state.window {
            while window.front().is_some_and(|&at| at <= t - 1.0) {
                window.pop_front();
            }
            let served = (window.len() as f64) < capacity;
            if served {
                window.push_back(t);
            }
            served
        } else {
            let tat = state.tat.max(t) + interval;
            let served = tat - burst * interval <= t + 1e-9;
            if served {
                state.tat = tat;
            }
            served
        };
        let second = now.as_secs() as usize;
        if let Some(count) = if served {
            state.served.get_mut(second)
        } else {
            state.refused.get_mut(second)
        } {
            *count += 1;
        }
        served
    }

    /// The same backend counting its calls over the last second.
    fn counting_a_second(self: Arc<Self>) -> Arc<Self> {
        self.state.lock().unwrap().window = Some(VecDeque::new());
        self
    }

    /// The same backend asking for a pause of `pause` with each refusal.
    fn asking_pauses(self: Arc<Self>, pause: Duration) -> Arc<Self> {
        self.state.lock().unwrap().pause = Some(pause);
        self
    }

    /// The pause it asks for with each refusal.
    fn pause(&self) -> Option<Duration> {
        self.state.lock().unwrap().pause
    }

    /// The same backend with a bucket of `burst` calls.
    fn with_burst(self: Arc<Self>, burst: f64) -> Arc<Self> {
        self.state.lock().unwrap().burst = Some(burst);
        self
    }

    fn served(&self, seconds: std::ops::Range<usize>) -> u32 {
        self.state.lock().unwrap().served[seconds].iter().sum()
    }

    fn refused(&self, seconds: std::ops::Range<usize>) -> u32 {
        self.state.lock().unwrap().refused[seconds].iter().sum()
    }

    /// The share of calls refused over `seconds`.
    fn refused_share(&self, seconds: std::ops::Range<usize>) -> f64 {
        let refused = f64::from(self.refused(seconds.clone()));
        let all = refused + f64::from(self.served(seconds));
        if all == 0.0 { 0.0 } else { refused / all }
    }

    /// The first second from `from` on whose served calls reach `share` of
    /// `capacity`.
    fn first_second_at(&self, from: usize, share: f64, capacity: f64) -> Option<usize> {
        let state = self.state.lock().unwrap();
        (from..state.served.len()).find(|&s| f64::from(state.served[s]) >= share * capacity)
    }

    fn per_second(&self) -> String {
        let state = self.state.lock().unwrap();
        let row = |counts: &[u32]| {
            counts
                .iter()
                .map(|c| c.to_string())
                .collect::<Vec<_>>()
                .join(" ")
        };
        format!(
            "served {}\nrefused {}",
            row(&state.served),
            row(&state.refused)
        )
    }
}

/// `CALLERS` callers through `call` for `seconds` against `backend`,
/// with `config` as the key's rate, honouring each pause the backend asks
/// for (`defer`, as the client layer does); prints and returns the run's
/// figures, headed by `title`, for the assertions' messages.
async fn run(config: RateConfig, backend: &Arc<Backend>, seconds: u64, title: &str) -> String {
    let manager = ThrottleManager::<String>::builder()
        .rate(config)
        .build()
        .unwrap();
    let until = backend.start + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for _ in 0..CALLERS {
        let (manager, backend) = (manager.clone(), backend.clone());
        tasks.push(tokio::spawn(async move {
            while Instant::now() < until {
                let answer = manager
                    .call("host", Priority::MEDIUM, || async {
                        tokio::time::sleep(LATENCY).await;
                        if backend.arrive() {
                            Ok(())
                        } else {
                            Err(overloaded(std::io::Error::other("429")))
                        }
                    })
                    .await;
                if let (Err(CallError::Inner(_)), Some(pause)) = (answer, backend.pause()) {
                    manager.key("host").defer(pause);
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let figures = format!(
        "{title}: rate {:.1}/s at {seconds} s\n{}",
        manager.key("host").rate().unwrap(),
        backend.per_second()
    );
    println!("{figures}\n");
    figures
}

/// The starts of the matrix for `capacity`: far below, below, at, above
/// and far above.
fn starts(capacity: f64) -> [f64; 5] {
    [
        (capacity / 50.0).max(1.0),
        capacity / 5.0,
        capacity,
        2.0 * capacity,
        10.0 * capacity,
    ]
}

/// The promises over one run of 20 s from `start` against `capacity`.
async fn converges(capacity: f64, start: f64) {
    let backend = Backend::new(capacity, None, 20);
    let title = format!("C {capacity}/s, start {start}/s");
    let figures = run(RateConfig::adaptive(start), &backend, 20, &title).await;
    if start < capacity {
        let reached = backend.first_second_at(0, 0.9, capacity);
        assert!(
            reached.is_some_and(|s| s < 10),
            "90 % of capacity first served in second {reached:?}, within 10 s\n{figures}"
        );
    }
    let early = backend.refused_share(0..20);
    assert!(
        early <= 0.10,
        "{:.1} % refused over the first 20 s, at most 10 %\n{figures}",
        100.0 * early
    );
    let late = backend.refused_share(10..20);
    assert!(
        late <= 0.03,
        "{:.1} % refused from the 10th second on, at most 3 %\n{figures}",
        100.0 * late
    );
}

/// The promises after the capacity moves from `capacity` to `to` at 20 s:
/// 90 % of the new capacity served in some second before 30 s, and at
/// most 3 % refused from 30 s to 40 s.
async fn follows(capacity: f64, to: f64) {
    let backend = Backend::new(capacity, Some((Duration::from_secs(20), to)), 40);
    let title = format!("C {capacity}/s, then {to}/s at 20 s");
    let figures = run(RateConfig::adaptive(capacity / 5.0), &backend, 40, &title).await;
    let reached = backend.first_second_at(20, 0.9, to);
    assert!(
        reached.is_some_and(|s| s < 30),
        "90 % of the new capacity first served in second {reached:?}, before 30\n{figures}"
    );
    let late = backend.refused_share(30..40);
    assert!(
        late <= 0.03,
        "{:.1} % refused from 30 s to 40 s, at most 3 %\n{figures}",
        100.0 * late
    );
}

/// Against a host that counts its calls over the last second (a sliding
/// window: it refuses until a second has passed since the overload, however
/// far the rate falls meanwhile), from `C / 5`, `C` and `10 C` at 50/s: at
/// least 85 % of the capacity served and at most 3 % refused from the
/// 10th second on.
#[tokio::test(start_paused = true)]
async fn a_host_that_counts_a_second_of_calls_is_served_near_its_capacity() {
    for start in [10.0, 50.0, 500.0] {
        let backend = Backend::new(50.0, None, 20).counting_a_second();
        let title = format!("C 50/s counted over a second, start {start}/s");
        let figures = run(RateConfig::adaptive(start), &backend, 20, &title).await;
        let served = f64::from(backend.served(10..20)) / 10.0 / 50.0;
        assert!(
            served >= 0.85,
            "{:.1} % served from the 10th second\n{figures}",
            100.0 * served
        );
        let late = backend.refused_share(10..20);
        assert!(
            late <= 0.03,
            "{:.1} % refused from the 10th second\n{figures}",
            100.0 * late
        );
    }
}

macro_rules! matrix {
    ($($name:ident: $capacity:expr, $start:expr;)*) => {$(
        #[tokio::test(start_paused = true)]
        async fn $name() {
            converges($capacity, starts($capacity)[$start]).await;
        }
    )*};
}

matrix! {
    from_far_below_at_5: 5.0, 0;
    from_below_at_5: 5.0, 1;
    from_capacity_at_5: 5.0, 2;
    from_above_at_5: 5.0, 3;
    from_far_above_at_5: 5.0, 4;
    from_far_below_at_50: 50.0, 0;
    from_below_at_50: 50.0, 1;
    from_capacity_at_50: 50.0, 2;
    from_above_at_50: 50.0, 3;
    from_far_above_at_50: 50.0, 4;
    from_far_below_at_500: 500.0, 0;
    from_below_at_500: 500.0, 1;
    from_capacity_at_500: 500.0, 2;
    from_above_at_500: 500.0, 3;
    from_far_above_at_500: 500.0, 4;
}

#[tokio::test(start_paused = true)]
async fn a_capacity_that_halves_is_followed() {
    for capacity in [5.0, 50.0, 500.0] {
        follows(capacity, capacity / 2.0).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_capacity_that_doubles_is_followed() {
    for capacity in [5.0, 50.0, 500.0] {
        follows(capacity, capacity * 2.0).await;
    }
}

/// The promise behind `Retry-After`: a backend of `capacity` with a
/// burst of a tenth of it (as `tests/support/limited_server.rs`) answers
/// each refusal with a pause of `pause`, which the callers honour
/// (`defer`, as the client layer does); from a start of 10/s, at least
/// 80 % of the capacity is served over the last 15 s of 30.
async fn paused_by_host(capacity: f64, pause: Duration) {
    let backend = Backend::new(capacity, None, 30)
        .with_burst((capacity / 10.0).max(1.0))
        .asking_pauses(pause);
    let config = RateConfig::adaptive(10.0).bounds(1.0, 10.0 * capacity);
    let title = format!("Retry-After: {pause:?} at {capacity}/s");
    let figures = run(config, &backend, 30, &title).await;
    let served = f64::from(backend.served(15..30)) / 15.0 / capacity;
    println!(
        "{title}: {:.1} % of capacity served over the last 15 s\n",
        100.0 * served
    );
    assert!(
        served >= 0.8,
        "{:.1} % of capacity served over the last 15 s\n{figures}",
        100.0 * served
    );
}

#[tokio::test(start_paused = true)]
async fn a_host_that_pauses_us_is_served_near_its_capacity() {
    paused_by_host(50.0, Duration::from_secs(2)).await;
}

#[tokio::test(start_paused = true)]
async fn a_host_that_pauses_us_is_served_near_its_capacity_at_other_settings() {
    for capacity in [5.0, 15.0, 500.0] {
        paused_by_host(capacity, Duration::from_secs(2)).await;
    }
    paused_by_host(50.0, Duration::from_secs(1)).await;
    paused_by_host(50.0, Duration::from_secs(5)).await;
}
