//! Metered APIs: a key's named limits beside its rate, what a call costs
//! in each ([`Cost`]), and the permit whose cost is settled once the call's
//! answer says what it was ([`CostPermit`]).
//!
//! An LLM provider limits each account by requests a minute and by tokens
//! a minute, and a call's tokens are known only from its answer. A manager
//! declares each further limit with
//! [`limit`](crate::builder::ThrottleManagerBuilder::limit); a call states its
//! estimate ([`acquire_cost`](crate::ThrottleManager::acquire_cost)) and
//! settles the actual cost ([`CostPermit::settle`]). The manager for the
//! limits lives in `manager/metered.rs`.

mod cost;
mod parts;
mod permit;
mod shared;

pub use cost::{Cost, REQUESTS};
pub use parts::CostSettle;
pub(crate) use parts::{LimitPart, NamedParts};
pub use permit::CostPermit;
pub(crate) use shared::SharedLimits;
