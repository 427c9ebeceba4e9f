//! The builder's settings of the key space and of time: how many keys, how
//! long an idle key is kept, and the clock.

use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use super::{KeySpaceConfig, ThrottleManagerBuilder};
use crate::clock::{Clock, default_clock, nanos};
use crate::error::{ConfigProblem, Problems};
use crate::key::KeyState;
use crate::registry::{QuietFrom, Registry, RoomSignal};

/// The default cap on live keys.
const DEFAULT_MAX_KEYS: usize = 1_000_000;

/// The default idle TTL: a key quiet this long is forgotten.
const DEFAULT_IDLE_TTL: Duration = Duration::from_secs(10 * 60);

/// Under pressure, the longest a key's debt, pause or shedding holds its
/// place in a full key space (see `max_hold`).
const DEFAULT_MAX_HOLD: Duration = Duration::from_secs(60);

/// The shortest `idle_ttl`: below it, sweeps of the whole key space would
/// run on nearly every new key (at `idle_ttl(0)`, on every one: quadratic).
const MIN_IDLE_TTL: Duration = Duration::from_secs(1);

/// The key space as set, and the clock.
#[derive(Debug)]
pub(super) struct KeySpaceParts {
    pub(super) max_keys: usize,
    /// `None`: the default.
    pub(super) idle_ttl: Option<Duration>,
    /// Idle keys are kept: no idle TTL at all.
    pub(super) keep_idle_keys: bool,
    pub(super) max_hold: Duration,
    pub(super) clock: Option<Arc<dyn Clock>>,
    /// The prefix of its fields in errors: none, or a file's `keys`.
    pub(super) path: &'static str,
}

impl Default for KeySpaceParts {
    fn default() -> Self {
        Self {
            max_keys: DEFAULT_MAX_KEYS,
            idle_ttl: None,
            keep_idle_keys: false,
            max_hold: DEFAULT_MAX_HOLD,
            clock: None,
            path: "",
        }
    }
}

/// The key space, checked, and the clock every control reads.
pub(super) struct CheckedKeySpace {
    pub(super) max_keys: usize,
    /// `None`: idle keys are kept.
    pub(super) idle_ttl: Option<Duration>,
    max_hold: Duration,
    pub(super) clock: Arc<dyn Clock>,
}

impl KeySpaceParts {
    /// Checks the cap and the idle TTL.
    pub(super) fn check(self, found: &mut Vec<ConfigProblem>) -> CheckedKeySpace {
        if let (Some(ttl), true) = (self.idle_ttl, self.keep_idle_keys) {
            Problems::new(self.path, found).add(
                "idle_ttl",
                format!(
                    "set one of idle_ttl (forget keys idle that long) or keep_idle_keys \
                     (never forget them), not both; got idle_ttl {ttl:?} and keep_idle_keys"
                ),
            );
        }
        if let Some(ttl) = self.idle_ttl.filter(|&ttl| ttl < MIN_IDLE_TTL) {
            Problems::new(self.path, found).add(
                "idle_ttl",
                format!(
                    "must be at least 1s (a shorter one forgets a key's learned rate \
                     between two of its calls), got {ttl:?}"
                ),
            );
        }
        if self.max_keys == 0 {
            Problems::new(self.path, found).add("max_keys", "must be at least 1, got 0");
        }
        CheckedKeySpace {
            max_keys: self.max_keys,
            idle_ttl: match self.keep_idle_keys {
                true => None,
                false => Some(self.idle_ttl.unwrap_or(DEFAULT_IDLE_TTL)),
            },
            max_hold: self.max_hold,
            clock: self.clock.unwrap_or_else(default_clock),
        }
    }
}

impl CheckedKeySpace {
    /// The key space, which asks `quiet_from` when a key may go and tells
    /// `room` when a place frees.
    pub(super) fn registry<K: Hash + Eq>(
        &self,
        quiet_from: Box<QuietFrom<KeyState>>,
        room: Arc<RoomSignal>,
    ) -> Registry<K, KeyState> {
        Registry::new(
            self.max_keys,
            self.idle_ttl.map(nanos),
            nanos(self.max_hold),
            quiet_from,
            room,
        )
    }
}

/// # The key space and time
impl<K> ThrottleManagerBuilder<K>
where
    K: Hash + Eq + Send + Sync + 'static,
{
    /// `key_space(KeySpaceConfig::new().max_keys(max_keys))`.
    #[deprecated(
        since = "0.4.0",
        note = "replaced by `key_space(KeySpaceConfig::new().max_keys(max_keys))`"
    )]
    pub fn max_keys(self, max_keys: usize) -> Self {
        self.key_space(KeySpaceConfig::new().max_keys(max_keys))
    }

    /// `key_space(KeySpaceConfig::new().idle_ttl(ttl))`.
    #[deprecated(
        since = "0.4.0",
        note = "replaced by `key_space(KeySpaceConfig::new().idle_ttl(ttl))`"
    )]
    pub fn idle_ttl(self, ttl: Duration) -> Self {
        self.key_space(KeySpaceConfig::new().idle_ttl(ttl))
    }

    /// `key_space(KeySpaceConfig::new().max_hold(hold))`.
    #[deprecated(
        since = "0.4.0",
        note = "replaced by `key_space(KeySpaceConfig::new().max_hold(hold))`"
    )]
    pub fn max_hold(self, hold: Duration) -> Self {
        self.key_space(KeySpaceConfig::new().max_hold(hold))
    }

    /// `key_space(KeySpaceConfig::new().keep_idle_keys())`.
    #[deprecated(
        since = "0.4.0",
        note = "replaced by `key_space(KeySpaceConfig::new().keep_idle_keys())`"
    )]
    pub fn keep_idle_keys(self) -> Self {
        self.key_space(KeySpaceConfig::new().keep_idle_keys())
    }

    /// The time source for every control. Default: [`default_clock`], chosen
    /// when `build` runs ([`QuantaClock`](crate::clock::QuantaClock), or
    /// [`TokioClock`](crate::clock::TokioClock) inside paused tokio time).
    ///
    /// ```
    /// use portcullis::clock::ManualClock;
    /// use portcullis::{RateConfig, ThrottleManager};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::adaptive(1.0))
    ///     .clock(clock.clone())
    ///     .build()?;
    /// manager.check("api").unwrap();
    /// assert!(manager.check("api").is_err());
    /// clock.advance(Duration::from_secs(1));
    /// assert!(manager.check("api").is_ok());
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.key_space.clock = Some(Arc::new(clock));
        self
    }

    /// [`clock`](Self::clock), shared with another manager (a server
    /// layer's guard reads its clients' manager's, a named limit its
    /// manager's).
    pub(crate) fn shared_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.key_space.clock = Some(clock);
        self
    }
}
