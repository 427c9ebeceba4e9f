//! A metered call's named limits in Redis: every limit of a key decided in
//! one script (`limits.lua`), and a settled cost applied by another
//! (`settle_limit.lua`).
//!
//! A named limit's bucket is the Redis key `{prefix:name}#limit`: apart
//! from every key's rate (`prefix:name`), and with the rate's key as its
//! hash tag, so that on Redis Cluster every limit of one key is in one
//! slot, the slot of the key's rate (for a name without braces), and one
//! script can decide them all.

use std::fmt::Write as _;
use std::time::Duration;

use redis::Cmd;

use super::RedisStore;
use super::scripts::{ScriptNumber, micros_of};
use crate::store::{LimitRequest, LimitsAnswer, TokenReceipt};

/// The Redis key of `name`'s limit `limit` under `prefix`.
fn limit_key(prefix: &str, limit: &str, name: &str) -> String {
    let mut key = String::with_capacity(prefix.len() + limit.len() + name.len() + 4);
    let _ = write!(key, "{{{prefix}:{name}}}#{limit}");
    key
}

impl RedisStore {
    /// Every limit of `limits` takes the call's part for `name`, or none
    /// does; `pinned` is the time the scripts use instead of Redis's
    /// (tests only).
    pub(super) async fn take_limits_of(
        &self,
        name: &str,
        limits: &[LimitRequest<'_>],
        pinned: Option<f64>,
    ) -> LimitsAnswer {
        if limits.is_empty() {
            return LimitsAnswer::Taken { marks: Vec::new() };
        }
        if !self.health.worth_asking() {
            return LimitsAnswer::Unavailable;
        }
        let script = &self.scripts.limits;
        let mut call = Cmd::new();
        call.arg("EVALSHA").arg(script.get_hash()).arg(limits.len());
        for limit in limits {
            call.arg(limit_key(&self.prefix, limit.limit, name));
        }
        call.arg(pinned.map(|t| t.to_string()).unwrap_or_default())
            .arg(self.settings.idle_ttl.as_millis() as u64)
            .arg(ScriptNumber(micros_of(limits[0].rules.max_pause)));
        for limit in limits {
            call.arg(ScriptNumber(limit.rules.starting_rate))
                .arg(limit.rules.burst)
                .arg(ScriptNumber(limit.rules.lower_bound))
                .arg(ScriptNumber(limit.rules.upper_bound))
                .arg(limit.cost);
        }
        let answer =
            tokio::time::timeout(self.settings.deadline, self.eval::<String>(script, &call));
        let Some(reply) = self.settle(answer.await) else {
            return LimitsAnswer::Unavailable;
        };
        let mut fields = reply.split(' ');
        match fields.next() {
            Some("1") => {
                let marks: Vec<TokenReceipt> = fields.map(TokenReceipt::new).collect();
                if marks.len() == limits.len() {
                    LimitsAnswer::Taken { marks }
                } else {
                    LimitsAnswer::Unavailable
                }
            }
            Some("0") => {
                let wait: f64 = fields.next().and_then(|w| w.parse().ok()).unwrap_or(0.0);
                let limit = fields.next().and_then(|i| i.parse().ok()).unwrap_or(0);
                let wait = Duration::from_nanos((wait.max(0.0) * 1e3).ceil() as u64);
                LimitsAnswer::Wait {
                    wait,
                    limit: limit.min(limits.len() - 1),
                }
            }
            // Not this store's script's answer: decide locally meanwhile.
            _ => LimitsAnswer::Unavailable,
        }
    }

    /// `more` tokens (negative: fewer) of `name`'s limit than its call
    /// took, by the call's `mark`.
    pub(super) async fn settle_limit_of(
        &self,
        name: &str,
        limit: &LimitRequest<'_>,
        more: i64,
        mark: &TokenReceipt,
        pinned: Option<f64>,
    ) -> Option<f64> {
        if more == 0 || !self.health.worth_asking() {
            return None;
        }
        let (end, shifted) = mark.as_str().split_once(',').unwrap_or(("", ""));
        let script = &self.scripts.settle_limit;
        let mut call = Cmd::new();
        call.arg("EVALSHA").arg(script.get_hash()).arg(1);
        call.arg(limit_key(&self.prefix, limit.limit, name))
            .arg(pinned.map(|t| t.to_string()).unwrap_or_default())
            .arg(more)
            .arg(end)
            .arg(shifted)
            .arg(ScriptNumber(limit.rules.starting_rate))
            .arg(limit.rules.burst)
            .arg(ScriptNumber(limit.rules.lower_bound))
            .arg(ScriptNumber(limit.rules.upper_bound))
            .arg(self.settings.idle_ttl.as_millis() as u64)
            .arg(ScriptNumber(micros_of(limit.rules.max_pause)));
        let answer =
            tokio::time::timeout(self.settings.deadline, self.eval::<String>(script, &call));
        self.settle(answer.await)?.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limits_key_is_apart_from_every_rate_and_tagged_by_its_rates_key() {
        assert_eq!(limit_key("llm", "tokens", "acct-1"), "{llm:acct-1}#tokens");
        // A rate's key is `prefix:name`, which starts with no brace.
        assert_ne!(limit_key("llm", "tokens", "x"), "llm:x");
    }
}
