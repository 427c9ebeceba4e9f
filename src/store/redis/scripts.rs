//! The wire: the two server-side scripts, what they are sent and what they
//! answer, each round trip under the store's deadline.

use std::time::Duration;

use redis::{
    Cmd, ErrorKind, FromRedisValue, RedisResult, RedisWrite, Script, ServerErrorKind, ToRedisArgs,
};

use super::{RedisKey, RedisStore, SharedRate, WhenUnavailable, restored_event, unavailable_event};
use crate::clock::{Nanos, nanos};
use crate::store::Decrease;
use crate::store::{RateEvent, RateRules, TokenAnswer, TokenReceipt};

/// The scripts, sent by hash (`EVALSHA`) and loaded again on `NOSCRIPT`.
pub(super) struct Scripts {
    decide: Script,
    outcome: Script,
    peek: Script,
    pub(super) limits: Script,
    pub(super) settle_limit: Script,
}

impl Scripts {
    pub(super) fn new() -> Self {
        Self {
            decide: Script::new(concat!(include_str!("now.lua"), include_str!("decide.lua"))),
            outcome: Script::new(concat!(
                include_str!("now.lua"),
                include_str!("checks.lua"),
                include_str!("outcome.lua")
            )),
            peek: Script::new(concat!(
                include_str!("now.lua"),
                include_str!("checks.lua"),
                include_str!("peek.lua")
            )),
            limits: Script::new(concat!(include_str!("now.lua"), include_str!("limits.lua"))),
            settle_limit: Script::new(concat!(
                include_str!("now.lua"),
                include_str!("settle_limit.lua")
            )),
        }
    }
}

/// `script` run on the Redis key `key`, as one command whose arguments
/// (`ARGV`) the caller adds: written into one buffer, where the redis
/// crate's `ScriptInvocation` holds each argument in a vector of its own
/// and then copies them all into the command.
fn script_call(script: &Script, key: RedisKey<'_>) -> Cmd {
    let mut call = Cmd::with_capacity(20, 192);
    call.arg("EVALSHA").arg(script.get_hash()).arg(1).arg(key);
    call
}

/// A number as a script's argument: a whole one (most rates, bounds and
/// the "no limit" -1) as an integer, which formats in a fraction of a
/// float's time; Lua's `tonumber` reads both alike.
#[derive(Debug, Clone, Copy)]
pub(super) struct ScriptNumber(pub(super) f64);

impl ToRedisArgs for ScriptNumber {
    fn write_redis_args<W: ?Sized + RedisWrite>(&self, out: &mut W) {
        // Below 2^53 every whole double is exactly an i64.
        if self.0.fract() == 0.0 && self.0.abs() < 9.0e15 {
            (self.0 as i64).write_redis_args(out);
        } else {
            self.0.write_redis_args(out);
        }
    }
}

fn micros(nanos: Nanos) -> f64 {
    nanos as f64 / 1e3
}

pub(super) fn micros_of(duration: Duration) -> f64 {
    micros(nanos(duration))
}

/// Microseconds from a script, as a duration rounded up (never early).
fn duration_of(micros: &str) -> Duration {
    if micros == "0" {
        return Duration::ZERO; // most decisions on a busy key
    }
    let value: f64 = micros.parse().unwrap_or(0.0);
    Duration::from_nanos((value.max(0.0) * 1e3).ceil() as Nanos)
}

/// A call's receipt: the bucket's state after it, exactly as stored (its
/// tokens go back if the call is cancelled while this is still the
/// last), then the call's tokens and the rate they were taken at, as the
/// script sent it; from those two, [`parts_of`] works out the debt they
/// added. Only text is joined here: no number is formatted.
fn receipt(tat: &str, tokens: u32, rate: &str) -> TokenReceipt {
    use std::fmt::Write as _;
    let mut text = String::with_capacity(tat.len() + rate.len() + 12);
    text.push_str(tat);
    let _ = write!(text, "/{tokens}/");
    text.push_str(rate);
    TokenReceipt::new(text)
}

/// The bucket's state a [`receipt`] holds, and the debt its call's tokens
/// added (their cost in intervals at the rate they were taken at), in
/// microseconds; a receipt not of this store's making gives a state no
/// bucket has, which takes nothing back.
fn parts_of(receipt: &TokenReceipt) -> (&str, f64) {
    let mut parts = receipt.as_str().split('/');
    let (tat, tokens, rate) = (parts.next(), parts.next(), parts.next());
    let number = |part: Option<&str>| part.and_then(|text| text.parse::<f64>().ok());
    match (tat, number(tokens), number(rate)) {
        (Some(tat), Some(tokens), Some(rate)) if rate > 0.0 => (tat, tokens * 1e6 / rate),
        _ => ("", 0.0),
    }
}

/// A script's answer without the mark it starts with when it found the
/// key holding what no store of this crate writes (another client's
/// value, an old dump) and mended it: then a `warn` event names the key.
/// A script mends what it finds, so one bad write is reported once.
fn mended<'a>(key: RedisKey<'_>, reply: &'a str) -> &'a str {
    match reply.strip_prefix('!') {
        Some(answer) => {
            tracing::warn!(
                store_key = %key,
                "rate store: the key held what is no rate's state (another client's \
                 write?); what could not be used was read as missing, and the key mended"
            );
            answer
        }
        None => reply,
    }
}

impl RedisStore {
    /// `cost` tokens for the next call of the Redis key `key` if they can
    /// be used within `max_wait` (`None`: however far ahead), decided by
    /// Redis; `pinned` is the time the script uses instead of Redis's
    /// `TIME` (tests only).
    pub(super) async fn decide(
        &self,
        key: RedisKey<'_>,
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
        let mut call = script_call(&self.scripts.decide, key);
        call.arg(pinned.map(|t| t.to_string()).unwrap_or_default())
            .arg(ScriptNumber(rules.starting_rate))
            .arg(rules.burst)
            .arg(ScriptNumber(max_wait))
            .arg(self.settings.idle_ttl.as_millis() as u64)
            .arg(cost)
            .arg(ScriptNumber(rules.lower_bound))
            .arg(ScriptNumber(rules.upper_bound))
            .arg(ScriptNumber(micros_of(rules.max_pause)));
        let answer = tokio::time::timeout(
            self.settings.deadline,
            self.eval::<String>(&self.scripts.decide, &call),
        )
        .await;
        let Some(reply) = self.settle(answer) else {
            return unavailable;
        };
        let reply = mended(key, &reply);
        let mut fields = reply.split(' ');
        let mut field = || fields.next().unwrap_or_default();
        let (admitted, wait, rate_text, tat) = (field(), field(), field(), field());
        let rate: f64 = rate_text.parse().unwrap_or(0.0);
        let wait = duration_of(wait);
        match admitted {
            "1" => TokenAnswer::Granted {
                wait,
                receipt: receipt(tat, cost, rate_text),
                rate,
            },
            "0" => TokenAnswer::Refused { wait, rate },
            // Not this store's script's answer: decide locally meanwhile.
            _ => unavailable,
        }
    }

    /// Runs the outcome script for `event` on the Redis key `key`; the
    /// shared rate after it, or `None` if Redis did not answer in time.
    pub(super) async fn send(
        &self,
        key: RedisKey<'_>,
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
        let mut call = script_call(&self.scripts.outcome, key);
        call.arg(pinned.map(|t| t.to_string()).unwrap_or_default())
            .arg(kind)
            .arg(first)
            .arg(ScriptNumber(second))
            .arg(ScriptNumber(rules.starting_rate))
            .arg(rules.burst)
            .arg(ScriptNumber(rules.lower_bound))
            .arg(ScriptNumber(rules.upper_bound))
            .arg(ScriptNumber(rules.increment))
            .arg(decrease)
            .arg(ScriptNumber(step))
            .arg(ScriptNumber(micros_of(rules.cooldown)))
            .arg(self.settings.idle_ttl.as_millis() as u64)
            .arg(ScriptNumber(if waited {
                rules.max_rate_over_use_waited
            } else {
                rules.max_rate_over_use
            }))
            .arg(tokens)
            .arg(ScriptNumber(micros_of(rules.max_pause)));
        let answer = tokio::time::timeout(
            self.settings.deadline,
            self.eval::<String>(&self.scripts.outcome, &call),
        )
        .await;
        let reply = self.settle(answer)?;
        mended(key, &reply).parse().ok()
    }

    /// The shared state of the Redis key `key`, or `None` if Redis holds
    /// none for it.
    pub(super) async fn look(&self, key: RedisKey<'_>) -> RedisResult<Option<SharedRate>> {
        let mut call = script_call(&self.scripts.peek, key);
        call.arg("");
        let (rate, debt) = self
            .eval::<(String, String)>(&self.scripts.peek, &call)
            .await?;
        let (Ok(rate), Ok(debt)) = (rate.parse::<f64>(), debt.parse::<f64>()) else {
            return Ok(None);
        };
        Ok(Some(SharedRate {
            rate,
            full_in: Duration::from_nanos((debt.max(0.0) * 1e3).ceil() as Nanos),
        }))
    }

    /// The answer to `call`, a call of `script`; when Redis does not know
    /// the script (a restart, `SCRIPT FLUSH`, a new node), it is loaded and
    /// the call sent once more.
    pub(super) async fn eval<T: FromRedisValue>(
        &self,
        script: &Script,
        call: &Cmd,
    ) -> RedisResult<T> {
        let mut connection = self.connection.clone();
        match call.query_async(&mut connection).await {
            Err(error) if error.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                script.load_async(&mut connection).await?;
                call.query_async(&mut connection).await
            }
            answer => answer,
        }
    }

    /// A round trip's answer, with the store's health updated from it.
    pub(super) fn settle<T>(
        &self,
        answer: Result<RedisResult<T>, tokio::time::error::Elapsed>,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn written(number: f64) -> String {
        let mut args: Vec<Vec<u8>> = Vec::new();
        ScriptNumber(number).write_redis_args(&mut args);
        String::from_utf8(args.concat()).unwrap()
    }

    #[test]
    fn whole_numbers_go_as_integers_and_the_rest_read_back_exactly() {
        assert_eq!(written(1e6), "1000000");
        assert_eq!(written(-1.0), "-1");
        assert_eq!(written(0.0), "0");
        for number in [0.5, 1.0 / 3.0, 1e300, 2.5e-7, 9.5e15] {
            assert_eq!(written(number).parse::<f64>().unwrap(), number, "{number}");
        }
    }

    #[test]
    fn a_receipt_gives_back_its_state_and_the_debt_of_its_tokens() {
        let granted = receipt("96269228454165.5", 3, "1000000");
        assert_eq!(parts_of(&granted), ("96269228454165.5", 3.0));
        let slow = receipt("12", 1, "0.25");
        assert_eq!(parts_of(&slow), ("12", 4e6));
        for foreign in ["", "12", "12/1", "12/x/5", "12/1/0"] {
            assert_eq!(
                parts_of(&TokenReceipt::new(foreign)),
                ("", 0.0),
                "{foreign}"
            );
        }
    }
}
