//! `call`: the whole protocol around one call. Admitted by the driver,
//! run under its call timeout and its caller's deadline on the manager's
//! clock, its outcome classified and reported; retried as the policy says
//! (`attempt.rs`). `call_all` is the same for a call charged to several
//! keys.

use std::future::Future;
use std::hash::Hash;

use super::ThrottleManager;
use super::attempt::Charged;
use crate::error::CallError;
use crate::outcome::CallFailure;
use crate::priority::{CallOptions, Priority};
use crate::registry::BorrowedKey;
use crate::retry::Retries;

/// # Calls: acquire, run, report
impl<K> ThrottleManager<K>
where
    K: Hash + Eq + Send + Sync + 'static,
{
    /// Runs `call` under every control of `key`: acquires as
    /// [`acquire`](Self::acquire) does (waiting and queueing as configured),
    /// runs it, and reports its outcome. The recommended way to use the
    /// library.
    ///
    /// A success raises the key's rate and counts an accept. An error
    /// marked with [`overloaded`](crate::overloaded) lowers the rate and
    /// counts no accept; so does any error the manager's
    /// [classifier](crate::builder::ThrottleManagerBuilder::classifier) calls
    /// [`Outcome::Overloaded`](crate::outcome::Outcome::Overloaded); every other error is neutral (no shedding, the
    /// rate left alone). With a [call timeout](crate::deadline::TimeLimits::call_timeout),
    /// a call still running then is dropped and counted as a capacity
    /// failure: a hung call would otherwise hold its slot forever. Inside
    /// [`with_deadline`](crate::deadline::with_deadline), a call still running at
    /// the caller's deadline is dropped too, and counted as neutral: the
    /// deadline is the caller's budget, not the backend's (see [whose time
    /// ran out](crate::deadline#whose-time-ran-out)); a deadline already
    /// passed refuses the call before it runs.
    ///
    /// With a [retry policy](crate::builder::ThrottleManagerBuilder::retry), a call
    /// whose outcome is overload (or that timed out) is made again, each
    /// time through the whole pipeline, one priority level lower, after a
    /// backoff, while the key's retry budget and the call's deadline allow
    /// (see [`retry`](crate::retry)); so is a local refusal that says when
    /// to come back before the deadline. A call still running at the
    /// deadline is dropped, as neutral, with [`CallError::TimedOut`]; so is
    /// one ended by the caller's deadline, which is not retried. Without
    /// one, `call` runs once.
    ///
    /// The closure's error can be any `std::error::Error`, an
    /// `anyhow::Error`, a `Box<dyn Error + Send + Sync>`, or a
    /// [`Failure`](crate::outcome::Failure) (what `?` makes of any error next
    /// to [`overloaded`](crate::overloaded)); see
    /// [`CallFailure`]. `CallError` of each is
    /// a `std::error::Error`, so `?` takes it into `anyhow::Result` or
    /// `Box<dyn Error>`.
    ///
    /// # Errors
    ///
    /// [`CallError::Rejected`] when a control refused the call (it never
    /// ran), [`CallError::TimedOut`], or [`CallError::Inner`] with the
    /// call's own error.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe. Dropped while waiting, it takes nothing (as `acquire`);
    /// dropped while the call runs, the call is dropped with it and its slot
    /// freed, and the outcome counts as [`Outcome::Neutral`](crate::outcome::Outcome::Neutral): nothing is left
    /// held or half-recorded.
    ///
    /// ```
    /// use portcullis::{CallError, Priority, RateConfig, ThrottleManager, overloaded};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::adaptive(10.0).increase_by(1.0).decrease_factor(0.5))
    ///     .build()?;
    /// async fn fetch(status: u16) -> Result<String, std::io::Error> {
    ///     Ok(format!("status {status}"))
    /// }
    /// let body = manager
    ///     .call("api.example.com", Priority::MEDIUM, || async {
    ///         let body = fetch(200).await?; // any error converts
    ///         if body.contains("429") {
    ///             return Err(overloaded(std::io::Error::other(body)));
    ///         }
    ///         Ok(body)
    ///     })
    ///     .await?;
    /// assert_eq!(body, "status 200");
    /// assert_eq!(manager.key("api.example.com").rate(), Some(11.0));
    ///
    /// let failed = manager
    ///     .call("api.example.com", Priority::MEDIUM, || async {
    ///         Err::<String, _>(overloaded(std::io::Error::other("503")))
    ///     })
    ///     .await;
    /// assert!(matches!(failed, Err(CallError::Inner(_))));
    /// assert_eq!(manager.key("api.example.com").rate(), Some(5.5));
    /// # Ok(())
    /// # }
    /// ```
    // A plain `fn` that returns `call_charged`'s future, not an `async fn`
    // around it: one state machine, not two nested.
    pub fn call<Q: BorrowedKey<K> + ?Sized, F, Fut, T, E, Via>(
        &self,
        key: &Q,
        options: impl Into<CallOptions>,
        call: F,
    ) -> impl Future<Output = Result<T, CallError<E>>>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: CallFailure<Via>,
    {
        self.call_charged(Charged::One(key), options.into(), call)
    }

    /// Runs `call` under every control of every key of `keys`, as
    /// [`call`](Self::call) runs it under one key's: admitted as
    /// [`acquire_all`](Self::acquire_all) admits it (every key's token
    /// first, waiting for the latest, then every key's slot, so that no
    /// slot is held while a token is waited for), run under the call
    /// timeout and the caller's deadline, classified, and its outcome
    /// reported to every key; retried under the manager's policy, against
    /// the retry budget of the first key.
    ///
    /// # Errors
    ///
    /// As [`call`](Self::call); a refusal is the first key's to refuse
    /// ([`key_index`](crate::Rejected::key_index) names it), and takes nothing from
    /// any key.
    ///
    /// # Cancel safety
    ///
    /// As [`call`](Self::call): dropped while waiting, it takes nothing from
    /// any key; dropped while the call runs, every key's slot is freed and
    /// the outcome counts as neutral.
    ///
    /// ```
    /// use portcullis::{BulkheadConfig, Priority, RateConfig, ThrottleManager};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    /// // A user's own quota, and the database every user shares.
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::per_second(10).burst(2))
    ///     .bulkhead(BulkheadConfig::new(4))
    ///     .build()?;
    /// let rows: u32 = manager
    ///     .call_all(&["user-42", "database"], Priority::HIGH, || async { Ok::<u32, std::io::Error>(1) })
    ///     .await?;
    /// assert_eq!(rows, 1);
    /// assert_eq!(manager.peek("database").unwrap().remaining, 1); // both keys paid
    /// # Ok(())
    /// # }
    /// ```
    pub fn call_all<Q: BorrowedKey<K> + ?Sized, F, Fut, T, E, Via>(
        &self,
        keys: &[&Q],
        options: impl Into<CallOptions>,
        call: F,
    ) -> impl Future<Output = Result<T, CallError<E>>>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: CallFailure<Via>,
    {
        self.call_charged(Charged::All(keys), options.into(), call)
    }

    /// The work of [`KeyHandle::retries`](super::KeyHandle::retries).
    pub(crate) fn key_retries<Q: BorrowedKey<K> + ?Sized>(
        &self,
        key: &Q,
        priority: Priority,
    ) -> Retries<'_> {
        let core = self.core();
        let key_state = match core.retry_settings() {
            Some(_) => self.key_state(key, core.now()).ok(),
            None => None,
        };
        Retries::new(core, core.retry_settings(), key_state, priority)
    }
}
