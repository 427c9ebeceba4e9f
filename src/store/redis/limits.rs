//! A metered call's limits in Redis: every limit of a key (its named
//! limits and its rate's requests) decided in one script (`limits.lua`),
//! and a settled cost applied by another (`settle_limit.lua`).
//!
//! A named limit's bucket is the Redis key `{prefix:name}#limit`: apart
//! from every key's rate (`prefix:name`), and with the rate's key as its
//! hash tag, so that on Redis Cluster every limit of one key is in one
//! slot, the slot of the key's rate (for a name without braces), and one
//! script can decide them all, the rate's requests with them (their part
//! is asked as the limit [`REQUESTS`], whose bucket is the rate's key).

use std::time::Duration;

use redis::Cmd;

use super::scripts::{ScriptNumber, micros_of};
use super::{RedisKey, RedisStore};
use crate::store::{LimitRequest, LimitsAnswer, REQUESTS, TokenReceipt};

/// The Redis key of `name`'s limit `limit` under `prefix`.
fn part_key<'a>(prefix: &'a str, name: &'a str, limit: &'a str) -> RedisKey<'a> {
    RedisKey {
        prefix,
        name,
        limit: (limit != REQUESTS).then_some(limit),
    }
}

impl RedisStore {
    /// The Redis key of `name`'s limit `limit`: its rate's for
    /// [`REQUESTS`].
    pub(super) fn part_key<'a>(&'a self, name: &'a str, limit: &'a str) -> RedisKey<'a> {
        part_key(&self.prefix, name, limit)
    }

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
            call.arg(self.part_key(name, limit.limit));
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
        call.arg(self.part_key(name, limit.limit))
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
        let key = |limit| part_key("llm", "acct-1", limit).to_string();
        assert_eq!(key("tokens"), "{llm:acct-1}#tokens");
        // A rate's key is `prefix:name`, which starts with no brace; the
        // requests are the rate's.
        assert_eq!(key(REQUESTS), "llm:acct-1");
        let written = redis::ToRedisArgs::to_redis_args(&part_key("llm", "acct-1", "tokens"));
        assert_eq!(written, vec![b"{llm:acct-1}#tokens".to_vec()]);
    }
}
