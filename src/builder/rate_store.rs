//! The builder's rate store: every key's rate shared through a
//! [`RateStore`] (Redis, or any other implementation).

use std::fmt::Display;
use std::hash::Hash;

use super::ThrottleManagerBuilder;
use crate::error::Problems;
use crate::manager::KeyNames;
use crate::store::RateStore;

/// # Rates shared across processes
impl<K> ThrottleManagerBuilder<K>
where
    K: Hash + Eq + Send + Sync + Display + 'static,
{
    /// Keeps every key's rate in `store`, shared with every process that
    /// uses the same store: their calls to a key take tokens from one
    /// bucket, and their outcomes move one rate. The key's name in the
    /// store is the key as `Display` writes it (Redis's store puts its
    /// prefix and `:` before it). The throttle and the bulkhead stay local.
    /// See [`store`](crate::store) for the round trips, what happens when
    /// the store does not answer, and which calls use the shared rate.
    ///
    /// The manager needs a rate ([`rate`](Self::rate) or an override):
    /// [`build`](Self::build) says so otherwise, and names any store
    /// setting out of range (`rate_store.deadline`, ...).
    ///
    /// ```no_run
    /// # #[cfg(feature = "redis")]
    /// # async fn shared() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    /// use portcullis::store::RedisStore;
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let store = RedisStore::connect("redis://127.0.0.1:6379/", "crawler").await?;
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::adaptive(10.0))
    ///     .rate_store(store)
    ///     .build()?;
    /// manager.wait("example.com").await?;
    /// manager.increment("example.com");
    /// let _shared_rate: Option<f64> = manager.key("example.com").rate();
    /// # Ok(())
    /// # }
    /// ```
    ///
    pub fn rate_store<S>(mut self, store: S) -> Self
    where
        S: RateStore + 'static,
    {
        self.store = Some((Box::new(store), Box::new(|key: &K| key.to_string())));
        self
    }
}

/// A rate store, and how it names the manager's keys.
pub(super) type StoreWithNames<K> = (Box<dyn RateStore>, Box<KeyNames<K>>);

/// The store's settings, and that there is a rate to share.
pub(super) fn check(store: &dyn RateStore, has_rate: bool, problems: &mut Problems<'_>) {
    if !has_rate {
        problems.add(
            "rate_store",
            "shares a rate, and the manager has none; call .rate(...)",
        );
    }
    for (field, message) in store.invalid_settings() {
        problems.add(&format!("rate_store.{field}"), message);
    }
}
