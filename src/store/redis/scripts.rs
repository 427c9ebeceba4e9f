//! The wire: the two server-side scripts, what they are sent and what they
//! answer, each round trip under the store's deadline.

use std::time::Duration;

use super::{RedisStore, SharedRate, WhenUnavailable, restored_event, unavailable_event};
use crate::clock::{Nanos, nanos};
use crate::rate::aimd::{MAX_RATE_OVER_USE, MAX_RATE_OVER_USE_WAITED};
use crate::rate::config::Decrease;
use crate::store::{RateEvent, RateRules, TokenAnswer, TokenReceipt};

/// The scripts, sent by hash (`EVALSHA`) and loaded again on `NOSCRIPT`.
pub(super) struct Scripts {
    decide: redis::Script,
    outcome: redis::Script,
    peek: redis::Script,
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
            peek: redis::Script::new(concat!(include_str!("now.lua"), include_str!("peek.lua"))),
        }
    }
}

fn micros(nanos: Nanos) -> f64 {
    nanos as f64 / 1e3
}

fn micros_of(duration: Duration) -> f64 {
    micros(nanos(duration))
}

/// Microseconds from a script, as a duration rounded up (never early).
fn duration_of(micros: &str) -> Duration {
    let value: f64 = micros.parse().unwrap_or(0.0);
    Duration::from_nanos((value.max(0.0) * 1e3).ceil() as Nanos)
}

/// A call's receipt: the bucket's state after it, exactly as stored (its
/// tokens go back if the call is cancelled while this is still the
/// last), and the debt its tokens added (its cost in intervals at the rate
/// they were taken at), in microseconds.
fn receipt(tat: &str, interval_us: f64) -> TokenReceipt {
    TokenReceipt::new(format!("{tat}/{interval_us}"))
}

/// The two parts of a [`receipt`]; a receipt not of this store's making
/// gives a state no bucket has, which takes nothing back.
fn parts_of(receipt: &TokenReceipt) -> (&str, f64) {
    let (tat, interval) = receipt.as_str().split_once('/').unwrap_or(("", ""));
    (tat, interval.parse().unwrap_or(0.0))
}

impl RedisStore {
    /// `cost` tokens for the next call of the Redis key `key` if they can
    /// be used within `max_wait` (`None`: however far ahead), decided by
    /// Redis; `pinned` is the time the script uses instead of Redis's
    /// `TIME` (tests only).
    pub(super) async fn decide(
        &self,
        key: &str,
        rules: &RateRules,
        cost: u32,
        max_wait: Option<Nanos>,
        pinned: Option<f64>,
    ) -> TokenAnswer {
        let unavailable = TokenAnswer::Unavailable {
            retry_after: self.settings.recheck_every,
        };
        if !self.health.worth_asking() {
            return unavailable;
        }
        let max_wait = max_wait.map_or(-1.0, micros);
        let mut invocation = self.scripts.decide.key(key);
        invocation
            .arg(pinned.map(|t| t.to_string()).unwrap_or_default())
            .arg(rules.starting_rate)
            .arg(rules.burst)
            .arg(max_wait)
            .arg(self.settings.idle_ttl.as_millis() as u64)
            .arg(cost);
        let mut connection = self.connection.clone();
        let answer = tokio::time::timeout(
            self.settings.deadline,
            invocation.invoke_async::<(i64, String, String, String)>(&mut connection),
        )
        .await;
        let Some((admitted, wait, rate, tat)) = self.settle(answer) else {
            return unavailable;
        };
        let rate: f64 = rate.parse().unwrap_or(0.0);
        let wait = duration_of(&wait);
        if admitted == 1 {
            TokenAnswer::Granted {
                wait,
                receipt: receipt(&tat, f64::from(cost) * 1e6 / rate),
                rate,
            }
        } else {
            TokenAnswer::Refused { wait, rate }
        }
    }

    /// Runs the outcome script for `event` on the Redis key `key`; the
    /// shared rate after it, or `None` if Redis did not answer in time.
    pub(super) async fn send(
        &self,
        key: &str,
        event: &RateEvent,
        rules: &RateRules,
        pinned: Option<f64>,
    ) -> Option<f64> {
        let (kind, first, second, waited, tokens) = match event {
            RateEvent::Success {
                scheduled_ago,
                started_ago,
                waited,
                tokens,
            } => (
                "s",
                micros_of(*scheduled_ago).to_string(),
                micros_of(*started_ago),
                *waited,
                *tokens,
            ),
            RateEvent::Overloaded { scheduled_ago } => {
                ("f", micros_of(*scheduled_ago).to_string(), 0.0, false, 0)
            }
            RateEvent::Cancelled(receipt) => {
                let (tat, interval_us) = parts_of(receipt);
                ("c", tat.to_owned(), interval_us, false, 0)
            }
            RateEvent::Paused(pause) => ("p", micros_of(*pause).to_string(), 0.0, false, 0),
        };
        let (decrease, step) = match rules.decrease {
            Decrease::Subtract(step) => ("sub", step),
            Decrease::Multiply(factor) => ("mul", factor),
        };
        let mut invocation = self.scripts.outcome.key(key);
        invocation
            .arg(pinned.map(|t| t.to_string()).unwrap_or_default())
            .arg(kind)
            .arg(first)
            .arg(second)
            .arg(rules.starting_rate)
            .arg(rules.burst)
            .arg(rules.lower_bound)
            .arg(rules.upper_bound)
            .arg(rules.increment)
            .arg(decrease)
            .arg(step)
            .arg(micros_of(rules.cooldown))
            .arg(self.settings.idle_ttl.as_millis() as u64)
            .arg(if waited {
                MAX_RATE_OVER_USE_WAITED
            } else {
                MAX_RATE_OVER_USE
            })
            .arg(tokens);
        let mut connection = self.connection.clone();
        let answer = tokio::time::timeout(
            self.settings.deadline,
            invocation.invoke_async::<String>(&mut connection),
        )
        .await;
        self.settle(answer).and_then(|rate| rate.parse().ok())
    }

    /// The shared state of the Redis key `key`, or `None` if Redis holds
    /// none for it.
    pub(super) async fn look(&self, key: &str) -> redis::RedisResult<Option<SharedRate>> {
        let mut invocation = self.scripts.peek.key(key);
        invocation.arg("");
        let mut connection = self.connection.clone();
        let (rate, debt) = invocation
            .invoke_async::<(String, String)>(&mut connection)
            .await?;
        let (Ok(rate), Ok(debt)) = (rate.parse::<f64>(), debt.parse::<f64>()) else {
            return Ok(None);
        };
        Ok(Some(SharedRate {
            rate,
            full_in: Duration::from_nanos((debt.max(0.0) * 1e3).ceil() as Nanos),
        }))
    }

    /// A round trip's answer, with the store's health updated from it.
    fn settle<T>(
        &self,
        answer: Result<redis::RedisResult<T>, tokio::time::error::Elapsed>,
    ) -> Option<T> {
        let problem = match answer {
            Ok(Ok(value)) => {
                if self.health.answered() {
                    restored_event(&self.prefix);
                }
                return Some(value);
            }
            Ok(Err(error)) => error.to_string(),
            Err(_) => format!(
                "no answer within the deadline of {:?}",
                self.settings.deadline
            ),
        };
        if self.health.failed(self.settings.recheck_every) {
            let fallback = self.settings.when_unavailable == WhenUnavailable::UseLocalRate;
            unavailable_event(&self.prefix, &problem, fallback);
        }
        None
    }
}
