//! The page's one task: each `sample_every` it ranks the keys (refused
//! most, waiting longest, busiest) and records a sample of each watched
//! key in that key's ring.
//!
//! Invariants: at most `watch_at_most` keys are watched, each with at most
//! `history / sample_every` samples; a walk of the key space clones only
//! keys that enter a top list (at most `watch_at_most` a list); the lock on
//! what the handlers read is never held while walking; a handler never
//! walks the key space (a name is found among the keys shown, or by the
//! page's `key_from_name`, in time independent of the key space's size).
//! A panic while sampling (the user's `key_names`, say) loses that round,
//! not the task; a task that stopped anyway is started again by the next
//! request.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::clock::Nanos;
use tokio::task::JoinHandle;

use super::{PageSettings, RefusalTally};
use crate::ThrottleManager;
use crate::manager::{KeyLoad, KeySnapshot};

/// How fast refusal counts fade: a time constant of ten seconds.
const REFUSALS_FADE: Duration = Duration::from_secs(10);

/// What the page ranks keys by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum SortBy {
    /// Refusals a second, lately.
    Refusals,
    /// Until the key's rate lets its next call start.
    Wait,
    /// Calls holding a bulkhead slot.
    InFlight,
}

/// One key in a top list.
#[derive(Debug, Clone)]
pub(crate) struct Ranked<K> {
    pub(crate) key: K,
    pub(crate) name: String,
    pub(crate) score: f64,
}

/// One sample of a watched key.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct KeySample {
    /// When, in milliseconds since the Unix epoch.
    pub(crate) at_ms: u64,
    pub(crate) rate: Option<f64>,
    /// Successes a second as the adaptive rate measures them.
    pub(crate) served: Option<f64>,
    pub(crate) wait_ms: f64,
    pub(crate) in_flight: u32,
    pub(crate) queued: u32,
    pub(crate) concurrency_limit: Option<u32>,
    /// The throttle's probability of shedding, per priority level.
    pub(crate) rejection: Vec<f64>,
    pub(crate) refusals_per_second: f64,
}

/// A watched key and its ring of samples.
#[derive(Debug)]
pub(crate) struct Watched<K> {
    pub(crate) key: K,
    pub(crate) samples: VecDeque<KeySample>,
    /// When it was last in a top list or asked for: it stays watched for
    /// the history's length after. On the manager's clock.
    seen: Nanos,
}

/// What the handlers read: the last ranking, the watched keys, totals.
#[derive(Debug)]
pub(crate) struct Board<K> {
    pub(crate) refusals: Vec<Ranked<K>>,
    pub(crate) wait: Vec<Ranked<K>>,
    pub(crate) in_flight: Vec<Ranked<K>>,
    /// Every key of the three lists, by name: what a reader may ask for
    /// without the page's `key_from_name`.
    shown: HashMap<String, K>,
    pub(crate) watched: HashMap<String, Watched<K>>,
    pub(crate) sampled_at_ms: u64,
}

impl<K> Board<K> {
    pub(crate) fn top(&self, sort: SortBy) -> &[Ranked<K>] {
        match sort {
            SortBy::Refusals => &self.refusals,
            SortBy::Wait => &self.wait,
            SortBy::InFlight => &self.in_flight,
        }
    }
}

/// How the page finds a key by its name: the page's `key_from_name`.
pub(crate) type KeyFromName<K> = dyn Fn(&str) -> Option<K> + Send + Sync;

/// What every router of one page shares.
pub(crate) struct Shared<K> {
    pub(crate) manager: ThrottleManager<K>,
    /// The manager's refusals, counted since the first page was built.
    pub(crate) refusals: Arc<RefusalTally<K>>,
    pub(crate) settings: PageSettings,
    key_from_name: Option<Box<KeyFromName<K>>>,
    /// The sampling task, once started.
    task: Mutex<Option<JoinHandle<()>>>,
    /// Whether a round has panicked (said once).
    panicked: AtomicBool,
    board: Mutex<Board<K>>,
}

impl<K> Shared<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    pub(crate) fn new(
        manager: ThrottleManager<K>,
        refusals: Arc<RefusalTally<K>>,
        settings: PageSettings,
        key_from_name: Option<Box<KeyFromName<K>>>,
    ) -> Self {
        Self {
            manager,
            refusals,
            settings,
            key_from_name,
            task: Mutex::new(None),
            panicked: AtomicBool::new(false),
            board: Mutex::new(Board {
                refusals: Vec::new(),
                wait: Vec::new(),
                in_flight: Vec::new(),
                shown: HashMap::new(),
                watched: HashMap::new(),
                sampled_at_ms: 0,
            }),
        }
    }

    pub(crate) fn board(&self) -> MutexGuard<'_, Board<K>> {
        self.board
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Starts sampling unless it runs: a sample now, then one each
    /// `sample_every` from a task that ends when the page is dropped.
    /// Called by every request, so a task that stopped (its runtime shut
    /// down, say) is started again.
    pub(crate) fn start(self: &Arc<Self>) {
        let mut task = self.task.lock().unwrap_or_else(|e| e.into_inner());
        if task.as_ref().is_some_and(|task| !task.is_finished()) {
            return;
        }
        self.sample_round();
        let page: Weak<Self> = Arc::downgrade(self);
        let every = self.settings.sample_every;
        *task = Some(tokio::spawn(async move {
            let mut ticks = tokio::time::interval(every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            ticks.tick().await;
            loop {
                ticks.tick().await;
                let Some(page) = page.upgrade() else { return };
                page.sample_round();
            }
        }));
    }

    /// One [`sample`](Self::sample), whose panic loses the round only
    /// (said once): the board is left as the last round made it.
    fn sample_round(&self) {
        let round = std::panic::catch_unwind(AssertUnwindSafe(|| self.sample()));
        if round.is_err() && !self.panicked.swap(true, Ordering::Relaxed) {
            tracing::error!("the status page's sampling panicked; it goes on with the next round");
        }
    }

    /// Watches `name`'s key (asked for by a reader), if it is live: `true`
    /// if it is watched now. The key is one the page shows, or the one
    /// `key_from_name` gives for `name` if that key is live and named
    /// `name`: never a walk of the key space.
    pub(crate) fn ask_for(&self, name: &str) -> bool {
        let shown = {
            let mut board = self.board();
            if let Some(watched) = board.watched.get_mut(name) {
                watched.seen = self.manager.core().now();
                return true;
            }
            board.shown.get(name).cloned()
        };
        let Some(key) = shown.or_else(|| self.key_named(name)) else {
            return false;
        };
        let Some(sample) = self.sample_of(&key, 0.0) else {
            return false; // evicted since it was shown
        };
        let mut board = self.board();
        make_room(&mut board.watched, self.settings.watch_at_most - 1);
        let watched = board
            .watched
            .entry(name.to_owned())
            .or_insert_with(|| Watched {
                key,
                samples: VecDeque::new(),
                seen: self.manager.core().now(),
            });
        watched.samples.push_back(sample);
        true
    }

    /// The key `key_from_name` gives for `name`, if it is named `name`
    /// (so a key whose name hides it is not found by its own value).
    fn key_named(&self, name: &str) -> Option<K> {
        let key_from_name = self.key_from_name.as_ref()?;
        let key = std::panic::catch_unwind(AssertUnwindSafe(|| key_from_name(name))).ok()??;
        (self.manager.name_of(&key)? == name).then_some(key)
    }

    /// One round: ranks the keys, then samples each watched one.
    pub(crate) fn sample(&self) {
        let every = self.settings.sample_every.as_secs_f64();
        let fade = (-every / REFUSALS_FADE.as_secs_f64()).exp();
        let at_most = self.settings.watch_at_most;
        // A count C after fading holds r·T·f / (1 − f) at a steady r/s.
        let per_second = |count: f64| count * (1.0 - fade) / (every * fade);
        let refusals: Vec<Ranked<K>> = self
            .refusals
            .decay_and_rank(fade)
            .into_iter()
            .take(at_most)
            .filter_map(|(key, count)| self.ranked(key, per_second(count)))
            .collect();
        let (mut wait, mut in_flight) = (TopList::new(at_most), TopList::new(at_most));
        self.manager.visit_loads(|key, load| {
            wait.offer(load.wait.as_secs_f64(), key);
            in_flight.offer(f64::from(load.in_flight), key);
        });
        let wait: Vec<Ranked<K>> = wait.into_ranked(|key, score| self.ranked(key, score));
        let in_flight = in_flight.into_ranked(|key, score| self.ranked(key, score));

        let refused_by_name: HashMap<&str, f64> = refusals
            .iter()
            .map(|ranked| (ranked.name.as_str(), ranked.score))
            .collect();
        let now = self.manager.core().now();
        let history = crate::clock::nanos(self.settings.history);
        let ring = samples_kept(&self.settings);
        let mut board = self.board();
        board
            .watched
            .retain(|_, watched| now.saturating_sub(watched.seen) <= history);
        // The top keys, taken in turn from each list, are watched first;
        // room is made by forgetting the keys seen longest ago, which are
        // never these (they are seen now).
        let mut wanted: Vec<&Ranked<K>> = Vec::with_capacity(at_most);
        for rank in 0..at_most {
            for list in [&refusals, &wait, &in_flight] {
                if let Some(ranked) = list.get(rank) {
                    if wanted.len() < at_most && wanted.iter().all(|w| w.name != ranked.name) {
                        wanted.push(ranked);
                    }
                }
            }
        }
        for ranked in wanted {
            if let Some(watched) = board.watched.get_mut(&ranked.name) {
                watched.seen = now;
                continue;
            }
            make_room(&mut board.watched, at_most - 1);
            board.watched.insert(
                ranked.name.clone(),
                Watched {
                    key: ranked.key.clone(),
                    samples: VecDeque::new(),
                    seen: now,
                },
            );
        }
        let watched: Vec<(String, K)> = board
            .watched
            .iter()
            .map(|(name, watched)| (name.clone(), watched.key.clone()))
            .collect();
        drop(board);
        let samples: Vec<(String, Option<KeySample>)> = watched
            .into_iter()
            .map(|(name, key)| {
                let refused = refused_by_name.get(name.as_str()).copied().unwrap_or(0.0);
                let sample = self.sample_of(&key, refused);
                (name, sample)
            })
            .collect();
        let mut board = self.board();
        for (name, sample) in samples {
            match sample {
                Some(sample) => {
                    if let Some(watched) = board.watched.get_mut(&name) {
                        if watched.samples.len() == ring {
                            watched.samples.pop_front();
                        }
                        watched.samples.push_back(sample);
                    }
                }
                // Evicted: nothing left to watch.
                None => {
                    board.watched.remove(&name);
                }
            }
        }
        board.shown = [&refusals, &wait, &in_flight]
            .into_iter()
            .flatten()
            .map(|ranked| (ranked.name.clone(), ranked.key.clone()))
            .collect();
        board.refusals = refusals;
        board.wait = wait;
        board.in_flight = in_flight;
        board.sampled_at_ms = unix_ms();
    }

    fn ranked(&self, key: K, score: f64) -> Option<Ranked<K>> {
        let name = self.manager.name_of(&key)?;
        Some(Ranked { key, name, score })
    }

    /// A sample of `key` now, or `None` if it is no longer live.
    pub(crate) fn sample_of(&self, key: &K, refusals_per_second: f64) -> Option<KeySample> {
        let (snapshot, load, served) = self.manager.watch_sample(key)?;
        Some(sample_from(&snapshot, load, served, refusals_per_second))
    }
}

fn sample_from(
    snapshot: &KeySnapshot,
    load: KeyLoad,
    served: Option<f64>,
    refusals_per_second: f64,
) -> KeySample {
    KeySample {
        at_ms: unix_ms(),
        rate: snapshot.rate,
        served,
        wait_ms: load.wait.as_secs_f64() * 1e3,
        in_flight: load.in_flight,
        queued: load.queued,
        concurrency_limit: snapshot.concurrency_limit,
        rejection: snapshot
            .priorities
            .iter()
            .map(|priority| priority.rejection_probability)
            .collect(),
        refusals_per_second,
    }
}

/// Samples each watched key keeps.
fn samples_kept(settings: &PageSettings) -> usize {
    (settings.history.as_secs_f64() / settings.sample_every.as_secs_f64()).ceil() as usize
}

/// Forgets the keys seen longest ago until at most `keep` are watched.
fn make_room<K>(watched: &mut HashMap<String, Watched<K>>, keep: usize) {
    while watched.len() > keep {
        let oldest = watched
            .iter()
            .min_by_key(|(_, watched)| watched.seen)
            .map(|(name, _)| name.clone());
        match oldest {
            Some(name) => watched.remove(&name),
            None => return,
        };
    }
}

pub(crate) fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64)
}

/// The `size` keys with the highest scores seen so far (zero scores left
/// out): a key is cloned only when it enters.
struct TopList<K> {
    size: usize,
    entries: Vec<(f64, K)>,
    /// The smallest score held once the list is full.
    floor: f64,
}

impl<K: Clone> TopList<K> {
    fn new(size: usize) -> Self {
        Self {
            size,
            entries: Vec::with_capacity(size),
            floor: 0.0,
        }
    }

    fn offer(&mut self, score: f64, key: &K) {
        if score <= self.floor {
            return;
        }
        if self.entries.len() < self.size {
            self.entries.push((score, key.clone()));
            if self.entries.len() == self.size {
                self.floor = self.smallest().map_or(0.0, |(_, score)| score);
            }
            return;
        }
        if let Some((at, _)) = self.smallest() {
            self.entries[at] = (score, key.clone());
            self.floor = self.smallest().map_or(0.0, |(_, score)| score);
        }
    }

    fn smallest(&self) -> Option<(usize, f64)> {
        self.entries
            .iter()
            .enumerate()
            .min_by(|a, b| a.1.0.total_cmp(&b.1.0))
            .map(|(at, (score, _))| (at, *score))
    }

    /// The entries, highest first, as `rank` makes them.
    fn into_ranked<R>(mut self, mut rank: impl FnMut(K, f64) -> Option<R>) -> Vec<R> {
        self.entries.sort_by(|a, b| b.0.total_cmp(&a.0));
        self.entries
            .into_iter()
            .filter_map(|(score, key)| rank(key, score))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BulkheadConfig, Priority};
    use proptest::prelude::*;

    /// A page of `manager` that keeps 5 s of history, a sample a second,
    /// for at most 4 keys, sampling already.
    fn started_page(manager: &ThrottleManager<String>) -> Arc<Shared<String>> {
        let settings = PageSettings {
            history: Duration::from_secs(5),
            sample_every: Duration::from_secs(1),
            watch_at_most: 4,
        };
        let page = Arc::new(Shared::new(
            manager.clone(),
            Arc::default(),
            settings,
            Some(Box::new(|name: &str| Some(name.to_owned()))),
        ));
        page.start();
        page
    }

    #[tokio::test(start_paused = true)]
    async fn the_busiest_keys_are_watched_each_with_a_bounded_ring() {
        let manager = ThrottleManager::<String>::builder()
            .bulkhead(BulkheadConfig::new(100))
            .key_names(|key: &String| key.clone())
            .build()
            .unwrap();
        // Key k{i} has i + 1 calls in flight.
        let mut held = Vec::new();
        for i in 0..10 {
            for _ in 0..=i {
                held.push(
                    manager
                        .try_acquire(&format!("k{i}"), Priority::HIGH)
                        .unwrap(),
                );
            }
        }
        let page = started_page(&manager);
        tokio::time::sleep(Duration::from_secs(20)).await;
        // The task holds the page weakly: dropping the routers ends it.
        assert_eq!(Arc::strong_count(&page), 1);
        let board = page.board();
        let mut watched: Vec<&String> = board.watched.keys().collect();
        watched.sort();
        assert_eq!(watched, ["k6", "k7", "k8", "k9"]);
        for watched in board.watched.values() {
            assert_eq!(watched.samples.len(), 5);
        }
        let busiest: Vec<(&str, f64)> = board
            .top(SortBy::InFlight)
            .iter()
            .map(|ranked| (ranked.name.as_str(), ranked.score))
            .collect();
        assert_eq!(
            busiest,
            [("k9", 10.0), ("k8", 9.0), ("k7", 8.0), ("k6", 7.0)]
        );
    }

    /// A manager with a bulkhead and one key, "quiet", in no top list.
    fn with_a_quiet_key() -> ThrottleManager<String> {
        let manager = ThrottleManager::<String>::builder()
            .bulkhead(BulkheadConfig::new(10))
            .key_names(|key: &String| key.clone())
            .build()
            .unwrap();
        manager.increment("quiet");
        manager
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_asked_for_is_watched_until_the_history_has_passed() {
        let manager = with_a_quiet_key();
        let page = started_page(&manager);
        assert!(!page.ask_for("unknown"));
        assert!(page.ask_for("quiet"));
        tokio::time::sleep(Duration::from_millis(3_500)).await;
        assert_eq!(page.board().watched["quiet"].samples.len(), 4);
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(page.board().watched.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_sampler_that_stopped_is_started_again_by_the_next_request() {
        let manager = with_a_quiet_key();
        let page = started_page(&manager);
        assert!(page.ask_for("quiet"));
        // Watched for the history's 5 s: sampled when asked for, then each
        // second.
        let samples = || page.board().watched["quiet"].samples.len();
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        assert_eq!(samples(), 2);
        // The task stops (as when its runtime shuts down): nothing is
        // sampled until a request starts it again, with a sample at once.
        page.task.lock().unwrap().as_ref().unwrap().abort();
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(samples(), 2);
        page.start();
        assert_eq!(samples(), 3);
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        assert_eq!(samples(), 4);
        assert!(!page.task.lock().unwrap().as_ref().unwrap().is_finished());
    }

    /// A key whose `Clone` panics while a switch is on (any of a key
    /// type's traits may panic; the sampler clones keys it ranks).
    #[derive(Debug, PartialEq, Eq, Hash)]
    struct Touchy(String);

    static TOUCHY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

    impl Clone for Touchy {
        fn clone(&self) -> Self {
            assert!(
                !TOUCHY.load(Ordering::Relaxed),
                "a key that cannot be cloned now"
            );
            Self(self.0.clone())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_round_that_panics_is_lost_and_the_next_ones_go_on() {
        let manager = ThrottleManager::<Touchy>::builder()
            .bulkhead(BulkheadConfig::new(10))
            .key_names(|key: &Touchy| key.0.clone())
            .build()
            .unwrap();
        let busy = Touchy("busy".to_owned());
        let _held = manager.try_acquire(&busy, Priority::HIGH).unwrap();
        let settings = PageSettings {
            history: Duration::from_secs(5),
            sample_every: Duration::from_secs(1),
            watch_at_most: 4,
        };
        let page = Arc::new(Shared::new(manager.clone(), Arc::default(), settings, None));
        TOUCHY.store(true, Ordering::Relaxed);
        page.start(); // its first round panics
        tokio::time::sleep(Duration::from_millis(2_500)).await; // and two more
        assert!(page.board().watched.is_empty());
        assert!(!page.task.lock().unwrap().as_ref().unwrap().is_finished());
        TOUCHY.store(false, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_secs(2)).await;
        let board = page.board();
        assert_eq!(board.top(SortBy::InFlight)[0].name, "busy");
        assert_eq!(board.watched["busy"].samples.len(), 2);
    }

    proptest! {
        /// The list holds exactly the highest non-zero scores offered.
        #[test]
        fn a_top_list_keeps_the_highest_scores(
            scores in proptest::collection::vec(0u32..50, 0..300),
            size in 1usize..20,
        ) {
            let mut top = TopList::new(size);
            for (key, score) in scores.iter().enumerate() {
                top.offer(f64::from(*score), &key);
            }
            let kept: Vec<f64> = top.into_ranked(|_, score| Some(score));
            let mut expected: Vec<f64> =
                scores.iter().filter(|s| **s > 0).map(|s| f64::from(*s)).collect();
            expected.sort_by(|a, b| b.total_cmp(a));
            expected.truncate(size);
            prop_assert_eq!(kept, expected);
        }
    }
}
