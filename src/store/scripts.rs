//! The wire: the two server-side scripts, what they are sent and what they
//! answer, each round trip under the store's deadline.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::{MAX_OUTCOMES_IN_FLIGHT, RedisStore, SharedKey};
use crate::clock::Nanos;
use crate::events;
use crate::rate::aimd::{HEADROOM, LIMITED_HEADROOM};
use crate::rate::config::{Decrease, RateSettings};

/// The scripts, sent by hash (`EVALSHA`) and loaded again on `NOSCRIPT`.
pub(super) struct Scripts {
    decide: redis::Script,
    outcome: redis::Script,
}

impl Scripts {
    pub(super) fn new() -> Self {
        Self {
            decide: redis::Script::new(concat!(
                include_str!("now.lua"),
                include_str!("decide.lua")
            )),
            outcome: redis::Script::new(concat!(
                include_str!("now.lua"),
                include_str!("outcome.lua")
            )),
        }
    }
}

/// What the decision script answered.
#[derive(Debug)]
pub(crate) enum Decision {
    /// A token, which may be used `wait` from now.
    Granted(Grant),
    /// No token within the caller's patience: it would have been `wait`
    /// from now. Nothing was taken.
    Refused { wait: Nanos },
    /// Redis did not answer in time, or is marked down.
    Unavailable,
}

/// A shared token taken for a call.
#[derive(Debug, Clone)]
pub(crate) struct Grant {
    /// How long from now until the call may start.
    pub(crate) wait: Nanos,
    /// The bucket's state after the token, exactly as stored: the token
    /// goes back if the call is cancelled while this is still the last.
    tat: String,
    /// The interval the token was taken at, in microseconds.
    interval_us: f64,
}

/// An outcome, or a token or pause, sent to the shared rate.
#[derive(Debug, Clone)]
pub(crate) enum Report {
    /// A success of a call scheduled and started that long ago.
    Success {
        scheduled_ago: Nanos,
        started_ago: Nanos,
        /// Whether the call waited for its token.
        waited: bool,
    },
    /// A capacity failure of a call scheduled that long ago.
    Failure { scheduled_ago: Nanos },
    /// A token whose call will not happen.
    Cancel(Grant),
    /// No call starts for this long (a server's `Retry-After`).
    Pause(Nanos),
}

fn micros(nanos: Nanos) -> f64 {
    nanos as f64 / 1e3
}

/// Microseconds from a script, as nanoseconds rounded up (never early).
fn nanos_of(micros: &str) -> Nanos {
    let value: f64 = micros.parse().unwrap_or(0.0);
    (value.max(0.0) * 1e3).ceil() as Nanos
}

impl RedisStore {
    /// One token for `shared`'s next call if it can be used within
    /// `max_wait` (`None`: however far ahead), decided by Redis. `now` is
    /// the manager's clock, for the store's health only; `pinned` the time
    /// the script uses instead of Redis's `TIME` (tests only).
    pub(crate) async fn decide(
        &self,
        shared: &SharedKey,
        settings: &RateSettings,
        max_wait: Option<Nanos>,
        now: Nanos,
        pinned: Option<f64>,
    ) -> Decision {
        if !self.health.worth_asking(now) {
            return Decision::Unavailable;
        }
        let max_wait = max_wait.map_or(-1.0, micros);
        let mut invocation = self.scripts.decide.key(&*shared.redis_key);
        invocation
            .arg(pinned.map(|t| t.to_string()).unwrap_or_default())
            .arg(settings.starting_rate)
            .arg(settings.burst)
            .arg(max_wait)
            .arg(self.settings.idle_ttl.as_millis() as u64);
        let mut connection = self.connection.clone();
        let answer = tokio::time::timeout(
            self.settings.deadline,
            invocation.invoke_async::<(i64, String, String, String)>(&mut connection),
        )
        .await;
        match self.settle(answer, now) {
            Some((admitted, wait, rate, tat)) => {
                let rate: f64 = rate.parse().unwrap_or(0.0);
                shared.set_rate(rate);
                let wait = nanos_of(&wait);
                if admitted == 1 {
                    Decision::Granted(Grant {
                        wait,
                        tat,
                        interval_us: 1e6 / rate,
                    })
                } else {
                    Decision::Refused { wait }
                }
            }
            None => Decision::Unavailable,
        }
    }

    /// Sends `report` for `shared` without waiting for the answer (a task
    /// on the current tokio runtime), unless Redis is marked down, too many
    /// are on their way, or there is no runtime: then only the local rate
    /// counted it.
    pub(crate) fn report(
        self: &Arc<Self>,
        shared: &SharedKey,
        report: Report,
        settings: &RateSettings,
        now: Nanos,
    ) {
        if !self.health.worth_asking(now) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if self.outcomes_in_flight.fetch_add(1, Ordering::AcqRel) >= MAX_OUTCOMES_IN_FLIGHT {
            self.outcomes_in_flight.fetch_sub(1, Ordering::AcqRel);
            return;
        }
        let store = Arc::clone(self);
        let key = Arc::clone(&shared.redis_key);
        let shared_rate = Arc::clone(&shared.rate);
        let settings = settings.clone();
        runtime.spawn(async move {
            if let Some(rate) = store.send(&key, &report, &settings, now, None).await {
                super::set_rate(&shared_rate, rate);
            }
            store.outcomes_in_flight.fetch_sub(1, Ordering::AcqRel);
        });
    }

    /// Runs the outcome script for `report` on the Redis key `key`; the
    /// shared rate after it, or `None` if Redis did not answer in time.
    pub(crate) async fn send(
        &self,
        key: &str,
        report: &Report,
        settings: &RateSettings,
        now: Nanos,
        pinned: Option<f64>,
    ) -> Option<f64> {
        let (kind, first, second, waited) = match report {
            Report::Success {
                scheduled_ago,
                started_ago,
                waited,
            } => (
                "s",
                micros(*scheduled_ago).to_string(),
                micros(*started_ago),
                *waited,
            ),
            Report::Failure { scheduled_ago } => {
                ("f", micros(*scheduled_ago).to_string(), 0.0, false)
            }
            Report::Cancel(grant) => ("c", grant.tat.clone(), grant.interval_us, false),
            Report::Pause(pause) => ("p", micros(*pause).to_string(), 0.0, false),
        };
        let (decrease, step) = match settings.decrease {
            Decrease::Subtract(step) => ("sub", step),
            Decrease::Multiply(factor) => ("mul", factor),
        };
        let mut invocation = self.scripts.outcome.key(key);
        invocation
            .arg(pinned.map(|t| t.to_string()).unwrap_or_default())
            .arg(kind)
            .arg(first)
            .arg(second)
            .arg(settings.starting_rate)
            .arg(settings.burst)
            .arg(settings.lower_bound)
            .arg(settings.upper_bound)
            .arg(settings.increment)
            .arg(decrease)
            .arg(step)
            .arg(micros(settings.cooldown))
            .arg(self.settings.idle_ttl.as_millis() as u64)
            .arg(if waited { LIMITED_HEADROOM } else { HEADROOM });
        let mut connection = self.connection.clone();
        let answer = tokio::time::timeout(
            self.settings.deadline,
            invocation.invoke_async::<String>(&mut connection),
        )
        .await;
        self.settle(answer, now).and_then(|rate| rate.parse().ok())
    }

    /// A round trip's answer, with the store's health updated from it.
    fn settle<T>(
        &self,
        answer: Result<redis::RedisResult<T>, tokio::time::error::Elapsed>,
        now: Nanos,
    ) -> Option<T> {
        let problem = match answer {
            Ok(Ok(value)) => {
                if self.health.answered() {
                    events::store_restored(&self.prefix);
                }
                return Some(value);
            }
            Ok(Err(error)) => error.to_string(),
            Err(_) => format!(
                "no answer within the deadline of {:?}",
                self.settings.deadline
            ),
        };
        if self.health.failed(now, self.settings.recheck_every) {
            let fallback = self.settings.when_unavailable == super::WhenUnavailable::UseLocalRate;
            events::store_unavailable(&self.prefix, &problem, fallback);
        }
        None
    }
}
