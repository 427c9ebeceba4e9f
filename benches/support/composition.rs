//! What a user builds from peers for the same work as a key's three
//! controls, the side every bench judges portcullis by: per key, in one
//! `DashMap` entry, governor's direct limiter (the rate), a tokio
//! `Semaphore` (the bulkhead) and the SRE book's two counters, requests
//! and accepts (the throttle, unwindowed).

#![allow(dead_code)] // each bench uses its own part

use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use dashmap::DashMap;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use tokio::sync::Semaphore;

/// The SRE book's multiplier: shed once requests exceed twice the accepts.
const K: f64 = 2.0;

/// One key's controls.
pub(crate) struct Controls {
    rate: DefaultDirectRateLimiter,
    slots: Semaphore,
    requests: AtomicU64,
    accepts: AtomicU64,
}

/// Every key's controls, made on a key's first call.
pub(crate) struct Composition {
    keys: DashMap<String, Arc<Controls>>,
    quota: Quota,
    slots: usize,
}

impl Composition {
    /// `per_second` calls a second (as burst too) and `slots` at once, per key.
    pub(crate) fn new(per_second: u32, slots: usize) -> Self {
        let rate = NonZeroU32::new(per_second).unwrap();
        Self {
            keys: DashMap::new(),
            quota: Quota::per_second(rate).allow_burst(rate),
            slots,
        }
    }

    /// One call to `key` that succeeds at once: the rate, the throttle's
    /// draw (`draw` in [0, 1)), a slot, then the outcome counted and the
    /// slot given back. `false` if a control refused it.
    #[inline]
    pub(crate) fn call(&self, key: &str, draw: f64) -> bool {
        let controls = self.controls(key);
        if controls.rate.check().is_err() {
            return false;
        }
        let requests = controls.requests.load(Ordering::Relaxed) as f64;
        let accepts = controls.accepts.load(Ordering::Relaxed) as f64;
        let shed = ((requests - K * accepts) / (requests + 1.0)).max(0.0);
        if draw < shed {
            controls.requests.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let Ok(slot) = controls.slots.try_acquire() else {
            return false;
        };
        // The call succeeded.
        controls.requests.fetch_add(1, Ordering::Relaxed);
        controls.accepts.fetch_add(1, Ordering::Relaxed);
        drop(slot);
        true
    }

    /// `key`'s controls, held past the map's lock as a permit would hold
    /// them across an awaited call.
    #[inline]
    fn controls(&self, key: &str) -> Arc<Controls> {
        if let Some(controls) = self.keys.get(key) {
            return Arc::clone(controls.value());
        }
        let made = self.keys.entry(key.to_owned()).or_insert_with(|| {
            Arc::new(Controls {
                rate: RateLimiter::direct(self.quota),
                slots: Semaphore::new(self.slots),
                requests: AtomicU64::new(0),
                accepts: AtomicU64::new(0),
            })
        });
        Arc::clone(made.value())
    }
}
