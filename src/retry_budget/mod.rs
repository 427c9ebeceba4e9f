//! The retry budget: a key's retries kept to a share of its calls, the
//! policy that sets it, and the backoff between attempts.
//!
//! `policy` is what users set ([`RetryPolicy`], re-exported by
//! [`retry`](crate::retry)) and the validated [`RetrySettings`]; `budget`
//! the per-key counter of calls and retries, on atomics; `backoff` the
//! pure maths of the wait between attempts. The driver of one call's
//! retries ([`Retries`](crate::retry::Retries)) is the manager's: it needs
//! the call's key and its controls.

mod backoff;
mod budget;
mod policy;

pub use policy::RetryPolicy;

// The facade: all the core, a key's state and the manager's retries use.
pub(crate) use backoff::{ceiling, jittered};
pub(crate) use budget::RetryBudget;
pub(crate) use policy::RetrySettings;
