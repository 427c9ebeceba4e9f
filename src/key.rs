//! Everything one key holds, and when it may be forgotten.

use std::sync::Arc;

use crate::bulkhead::limiter::Bulkhead;
use crate::clock::Nanos;
use crate::rate::cell::RateCell;
use crate::rate::config::RateSettings;
use crate::throttle::config::ThrottleSettings;
use crate::throttle::window::ThrottleWindow;

/// The state of one key, shared through a (`triomphe`) `Arc` by the key
/// space and by every permit and waiter of the key.
///
/// A key of a manager with only a rate, at its default settings, is just its
/// rate cell and a null pointer: 32 bytes. Everything else lives in one
/// optional allocation.
#[derive(Debug)]
pub(crate) struct KeyState {
    pub(crate) rate: RateCell,
    extras: Option<Box<Extras>>,
}

/// What a key holds beyond its rate cell, when it holds anything.
#[derive(Debug, Default)]
struct Extras {
    /// `None`: the manager's default rate settings.
    rate_settings: Option<Arc<RateSettings>>,
    /// Present when the manager has a throttle.
    throttle: Option<ThrottleWindow>,
    /// Present when the manager has a bulkhead. Calls in flight or queued
    /// hold the key's `Arc`, which keeps the key from being evicted.
    bulkhead: Option<Bulkhead>,
}

impl KeyState {
    pub(crate) fn new(
        rate: RateCell,
        rate_settings: Option<Arc<RateSettings>>,
        throttle: Option<ThrottleWindow>,
        bulkhead: Option<Bulkhead>,
    ) -> Self {
        let needed = rate_settings.is_some() || throttle.is_some() || bulkhead.is_some();
        Self {
            rate,
            extras: needed.then(|| {
                Box::new(Extras {
                    rate_settings,
                    throttle,
                    bulkhead,
                })
            }),
        }
    }

    /// The key's own rate settings; `None` for the manager's default.
    pub(crate) fn rate_settings(&self) -> Option<&RateSettings> {
        self.extras.as_ref()?.rate_settings.as_deref()
    }

    pub(crate) fn throttle(&self) -> Option<&ThrottleWindow> {
        self.extras.as_ref()?.throttle.as_ref()
    }

    pub(crate) fn bulkhead(&self) -> Option<&Bulkhead> {
        self.extras.as_ref()?.bulkhead.as_ref()
    }

    /// When forgetting this key loses nothing: once its bucket owes no token
    /// and its throttle is not shedding (see [`ThrottleWindow::quiet_from`]).
    pub(crate) fn quiet_from(&self, throttle: Option<&ThrottleSettings>) -> Nanos {
        let rate_quiet = self.rate.full_from();
        match (self.throttle(), throttle) {
            (Some(window), Some(settings)) => rate_quiet.max(window.quiet_from(settings)),
            _ => rate_quiet,
        }
    }
}
