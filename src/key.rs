//! Everything one key holds, and when it may be forgotten.

use std::sync::Arc;

use crate::bulkhead::limiter::Bulkhead;
use crate::clock::Nanos;
use crate::rate::cell::RateCell;
use crate::rate::config::RateSettings;
use crate::throttle::config::ThrottleSettings;
use crate::throttle::window::ThrottleWindow;

/// The state of one key, shared through an `Arc` by the key space and by
/// every permit and waiter of the key.
#[derive(Debug)]
pub(crate) struct KeyState {
    pub(crate) rate: RateCell,
    /// `None`: the manager's default rate settings.
    pub(crate) rate_settings: Option<Arc<RateSettings>>,
    /// Present when the manager has a throttle.
    pub(crate) throttle: Option<Box<ThrottleWindow>>,
    /// Present when the manager has a bulkhead. Calls in flight or queued
    /// hold the key's `Arc`, which keeps the key from being evicted.
    pub(crate) bulkhead: Option<Box<Bulkhead>>,
}

impl KeyState {
    /// When forgetting this key loses nothing: once its bucket owes no token
    /// and its throttle is not shedding (see [`ThrottleWindow::quiet_from`]).
    pub(crate) fn quiet_from(&self, throttle: Option<&ThrottleSettings>) -> Nanos {
        let rate_quiet = self.rate.full_from();
        match (&self.throttle, throttle) {
            (Some(window), Some(settings)) => rate_quiet.max(window.quiet_from(settings)),
            _ => rate_quiet,
        }
    }
}
