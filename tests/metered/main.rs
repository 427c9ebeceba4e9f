//! Metered calls: a key's named limits beside its rate, costs stated up
//! front and settled after the call. The public contract as written, what
//! each limit admits (a proptest on virtual time), waiting for the latest
//! limit, and that a refused or cancelled call takes nothing; and with
//! feature `reqwest`, a batch against a stand-in for a metered API.

mod bound;
mod config;
#[cfg(all(feature = "reqwest", feature = "redis"))]
mod fleet;
mod limits;
#[cfg(feature = "reqwest")]
mod middleware;
#[cfg(feature = "reqwest")]
mod provider;
#[cfg(feature = "redis")]
mod store;

#[cfg(feature = "reqwest")]
#[allow(dead_code)] // shared with examples/llm_client, which reads its own part
#[path = "../../examples/llm_client/batch.rs"]
mod batch;
#[cfg(feature = "reqwest")]
#[path = "../support/llm_provider.rs"]
mod llm_provider;
#[cfg(feature = "redis")]
#[path = "../support/redis.rs"]
mod redis_server;
