//! Retries that do not amplify overload: a policy that lives with each
//! key's other controls and learns from the same outcomes.
//!
//! Give the manager a [`RetryPolicy`]
//! ([`retry`](crate::builder::ThrottleManagerBuilder::retry)), and
//! [`call`](crate::ThrottleManager::call) and the client middleware retry
//! a call whose outcome is overload, within three limits:
//! - **the key's budget**: retries are at most a share of the key's calls
//!   (10 % by default), plus a small floor over time, so that during an
//!   outage a logical call costs the backend about one request, not
//!   `1 + max_retries` (the retry storm of the SRE book's "Handling
//!   Overload", and of gRFC A6);
//! - **backoff**: exponential, with full jitter, capped; a pause the backend
//!   asked for (`Retry-After`) replaces the draw when longer;
//! - **the call's deadline**: first attempt, waits and retries together; a
//!   pause past it gives up at once, with the last failure.
//!
//! Retries go in one priority level lower than their first attempt, so a
//! key's throttle sheds them before first attempts. Neutral errors are never
//! retried; nor are local refusals, unless they say when to come back and
//! that is before the deadline.
//!
//! Other edges drive the same rules through [`Retries`], one per logical
//! call, from [`ThrottleManager::retries`](crate::manager::KeyHandle::retries).
//!
//! ```
//! use std::time::Duration;
//! use portcullis::retry::RetryPolicy;
//! use portcullis::{overloaded, BulkheadConfig, Priority, ThrottleManager};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let manager = ThrottleManager::<String>::builder()
//!     .bulkhead(BulkheadConfig::new(8))
//!     .retry(RetryPolicy::new().max_retries(3).backoff(Duration::from_millis(50), Duration::from_secs(5)))
//!     .build()?;
//! let mut attempts = 0;
//! let answer = manager
//!     .call("api", Priority::HIGH, || {
//!         attempts += 1;
//!         let attempt = attempts;
//!         async move {
//!             if attempt < 3 { Err(overloaded(std::io::Error::other("503"))) } else { Ok("fine") }
//!         }
//!     })
//!     .await?;
//! assert_eq!((answer, attempts), ("fine", 3));
//! # Ok(())
//! # }
//! ```

mod retries;

pub use crate::retry_budget::RetryPolicy;
pub use retries::{GaveUp, Retries, RetryCause};
