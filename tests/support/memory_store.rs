//! A rate store kept in memory, written against the public trait alone, as
//! a user's own backend (or a test double) would be: a GCRA bucket per key
//! on tokio's clock (so paused time moves it), an additive increase and
//! the rules' decrease with its cooldown, and a switch that makes it
//! unavailable.

#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use portcullis::rate::Decrease;
use portcullis::store::{
    RateEvent, RateRules, RateStore, StoreFuture, TokenAnswer, TokenReceipt, TokenRequest,
    WhenUnavailable,
};
use tokio::time::Instant;

/// One key's bucket: the time its next token is free from (GCRA's
/// theoretical arrival time), its rate, and when it last fell.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tat: Duration,
    rate: f64,
    last_fall: Option<Duration>,
}

/// Every key's rate in one map.
#[derive(Debug)]
pub(crate) struct MemoryStore {
    epoch: Instant,
    buckets: Mutex<HashMap<String, Bucket>>,
    available: AtomicBool,
    when_unavailable: WhenUnavailable,
    /// How long each question and report takes there and back, half each
    /// way: a slow network, on the paused clock.
    round_trip: Duration,
    /// How often `take_token` was asked.
    pub(crate) asked: AtomicUsize,
    /// How many reports came, by event: success, overload, cancel, pause.
    pub(crate) reports: [AtomicUsize; 4],
}

/// How long an unavailable store asks callers to wait.
pub(crate) const RECHECK: Duration = Duration::from_millis(250);

impl MemoryStore {
    pub(crate) fn new(when_unavailable: WhenUnavailable) -> Self {
        Self {
            epoch: Instant::now(),
            buckets: Mutex::new(HashMap::new()),
            available: AtomicBool::new(true),
            when_unavailable,
            round_trip: Duration::ZERO,
            asked: AtomicUsize::new(0),
            reports: Default::default(),
        }
    }

    /// The store, `round_trip` away.
    pub(crate) fn round_trip(mut self, round_trip: Duration) -> Self {
        self.round_trip = round_trip;
        self
    }

    /// Half a round trip on the paused clock, if the store is any away.
    async fn half_way(&self) {
        if !self.round_trip.is_zero() {
            tokio::time::sleep(self.round_trip / 2).await;
        }
    }

    /// Makes the store answer, or not.
    pub(crate) fn set_available(&self, available: bool) {
        self.available.store(available, Ordering::Release);
    }

    /// The key's shared rate, if the store has the key.
    pub(crate) fn rate(&self, key: &str) -> Option<f64> {
        self.buckets.lock().unwrap().get(key).map(|b| b.rate)
    }

    pub(crate) fn reports(&self, kind: usize) -> usize {
        self.reports[kind].load(Ordering::Acquire)
    }

    fn now(&self) -> Duration {
        self.epoch.elapsed()
    }

    fn decide(&self, key: &str, request: TokenRequest) -> TokenAnswer {
        self.asked.fetch_add(1, Ordering::AcqRel);
        if !self.available.load(Ordering::Acquire) {
            return TokenAnswer::Unavailable {
                retry_after: RECHECK,
            };
        }
        let now = self.now();
        let rules = request.rules;
        let mut buckets = self.buckets.lock().unwrap();
        let fresh = Bucket {
            tat: now,
            rate: rules.starting_rate,
            last_fall: None,
        };
        let bucket = buckets.entry(key.to_owned()).or_insert(fresh);
        let interval = Duration::from_secs_f64(1.0 / bucket.rate);
        let spacing = interval * request.cost;
        let tat = bucket.tat.max(now) + spacing;
        let start = tat.saturating_sub(interval * rules.burst).max(now);
        let wait = start - now;
        if request.max_wait.is_some_and(|max| wait > max) {
            return TokenAnswer::Refused {
                wait,
                rate: bucket.rate,
            };
        }
        bucket.tat = tat;
        TokenAnswer::Granted {
            wait,
            receipt: TokenReceipt::new(format!("{}/{}", tat.as_nanos(), spacing.as_nanos())),
            rate: bucket.rate,
        }
    }

    fn apply(&self, key: &str, event: RateEvent, rules: RateRules) -> Option<f64> {
        if !self.available.load(Ordering::Acquire) {
            return None;
        }
        let now = self.now();
        let mut buckets = self.buckets.lock().unwrap();
        let bucket = buckets.get_mut(key)?;
        let interval = Duration::from_secs_f64(1.0 / bucket.rate);
        let kind = match event {
            RateEvent::Success { .. } => {
                bucket.rate = (bucket.rate + rules.increment).min(rules.upper_bound);
                0
            }
            RateEvent::Overloaded { scheduled_ago } => {
                let scheduled = now.saturating_sub(scheduled_ago);
                let news = bucket.last_fall.is_none_or(|fell| scheduled >= fell);
                let cooled = bucket
                    .last_fall
                    .is_none_or(|fell| now >= fell + rules.cooldown);
                if news && cooled {
                    bucket.rate = match rules.decrease {
                        Decrease::Subtract(step) => bucket.rate - step,
                        Decrease::Multiply(factor) => bucket.rate * factor,
                        _ => bucket.rate,
                    }
                    .max(rules.lower_bound);
                    bucket.last_fall = Some(now);
                }
                1
            }
            RateEvent::Cancelled(receipt) => {
                // Only the last call's tokens go back.
                let (tat, spacing) = receipt.as_str().split_once('/')?;
                if tat == bucket.tat.as_nanos().to_string() {
                    let spacing = Duration::from_nanos(spacing.parse().ok()?);
                    bucket.tat = bucket.tat.saturating_sub(spacing);
                }
                2
            }
            RateEvent::Paused(pause) => {
                let burst = interval * rules.burst;
                bucket.tat = bucket.tat.max(now + pause + burst - interval);
                3
            }
            _ => return Some(bucket.rate),
        };
        self.reports[kind].fetch_add(1, Ordering::AcqRel);
        Some(bucket.rate)
    }
}

impl RateStore for MemoryStore {
    fn take_token<'a>(
        &'a self,
        key: &'a str,
        request: TokenRequest,
    ) -> StoreFuture<'a, TokenAnswer> {
        if self.round_trip.is_zero() {
            let answer = self.decide(key, request);
            return Box::pin(async move { answer });
        }
        Box::pin(async move {
            self.half_way().await;
            let answer = self.decide(key, request);
            self.half_way().await;
            answer
        })
    }

    fn report<'a>(
        &'a self,
        key: &'a str,
        event: RateEvent,
        rules: RateRules,
    ) -> StoreFuture<'a, Option<f64>> {
        if self.round_trip.is_zero() {
            let rate = self.apply(key, event, rules);
            return Box::pin(async move { rate });
        }
        Box::pin(async move {
            self.half_way().await;
            let rate = self.apply(key, event, rules);
            self.half_way().await;
            rate
        })
    }

    fn when_unavailable(&self) -> WhenUnavailable {
        self.when_unavailable
    }

    fn is_available(&self) -> bool {
        self.available.load(Ordering::Acquire)
    }
}
