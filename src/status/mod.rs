//! A live status page of a manager's key space, as an axum router to mount
//! (feature `status`): which keys are refused most, which wait longest,
//! which are busiest, and for each of those (and any key asked for) its
//! rate, what it served, its shedding and its concurrency over the last
//! minutes.
//!
//! ```no_run
//! use axum::Router;
//! use portcullis::status::StatusPage;
//! use portcullis::{RateConfig, ThrottleManager};
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let manager = ThrottleManager::<String>::builder()
//!     .rate(RateConfig::adaptive(10.0))
//!     .key_names(|host: &String| host.clone()) // what the page may show
//!     .build()?;
//! let app = Router::new().nest("/status", StatusPage::new(&manager)?.router());
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:9000").await?;
//! axum::serve(listener, app).await?;
//! # Ok(())
//! # }
//! ```
//!
//! The router serves:
//! - `GET /`: the page, self-contained (no CDN, no build step), which asks
//!   for the JSON below each second and draws it;
//! - `GET /keys?top=N&sort=refusals|wait|in_flight&from=M`: the top keys
//!   by that measure (refusals a second lately, the wait for the rate's
//!   next call, calls in flight), `N` of them from the `M`th, each with its
//!   [`KeySnapshot`](crate::manager::KeySnapshot), and the manager's
//!   totals (keys live, the cap, evictions, refusals by reason);
//! - `GET /keys/{key}`: one key's snapshot and its history (a sample each
//!   [`sample_every`](StatusPageBuilder::sample_every) over the last
//!   [`history`](StatusPageBuilder::history)), for a key the page shows
//!   (in a top list, or watched) or, with
//!   [`key_from_name`](StatusPageBuilder::key_from_name), any live key by
//!   its name; 404 at once otherwise. The key is then watched for a while.
//!
//! Keys appear only through the manager's
//! [`key_names`](crate::builder::ThrottleManagerBuilder::key_names), so a key that
//! is a secret (an API key, a user's id) never leaves the process unless
//! that function lets it: a page needs key names, and is refused without.
//!
//! **What it costs.** A request costs what it returns, whatever the size
//! of the key space: no handler walks it (a name is looked up among the
//! keys shown, or made into a key by `key_from_name`). Once a page is
//! built, each refusal is counted, whichever method made it (an atomic
//! add, and a key in the sketch below). From the page's first request on,
//! one task samples each `sample_every`: it walks the key space once (a few
//! loads per key under each shard's read lock, keeping the top keys in
//! bounded lists, cloning only the keys that enter them) and records a
//! sample of each watched key, at most
//! [`watch_at_most`](StatusPageBuilder::watch_at_most) of them, each in a
//! ring of bounded length. Refusals are counted by key in a sketch of 64
//! keys (Space-Saving, counts fading with a time constant of ten seconds),
//! not per key: while another thread counts, a refusal is counted by reason
//! only. The task ends when every router of the page is dropped; a task
//! that stopped otherwise is started again by the next request, and a
//! panic while sampling (a `key_names` that panics on a key, which then
//! shows as `<unnamed>`) loses one round, not the page.

mod routes;
mod sampler;
mod tally;

use std::fmt;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use crate::error::ConfigProblem;
use crate::{ConfigError, ThrottleManager};

use tally::RefusalTally;

/// A status page of one manager's keys: build it, then mount its
/// [`router`](Self::router). Cloning it is cheap; clones share one sampler.
///
/// ```
/// use portcullis::status::StatusPage;
/// use portcullis::{BulkheadConfig, ThrottleManager};
/// use std::time::Duration;
///
/// let manager = ThrottleManager::<String>::builder()
///     .bulkhead(BulkheadConfig::new(8))
///     .key_names(|tenant: &String| tenant.clone())
///     .build()?;
/// let page = StatusPage::builder(&manager)
///     .history(Duration::from_secs(600))
///     .watch_at_most(50)
///     .build()?;
/// let router: axum::Router = page.router();
/// # Ok::<(), portcullis::error::ConfigError>(())
/// ```
pub struct StatusPage<K> {
    shared: Arc<sampler::Shared<K>>,
}

impl<K> Clone for StatusPage<K> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<K> fmt::Debug for StatusPage<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StatusPage")
            .field("settings", &self.shared.settings)
            .finish_non_exhaustive()
    }
}

/// How a [`StatusPage`] samples: made by [`StatusPage::builder`].
pub struct StatusPageBuilder<K> {
    manager: ThrottleManager<K>,
    settings: PageSettings,
    key_from_name: Option<Box<sampler::KeyFromName<K>>>,
}

impl<K> fmt::Debug for StatusPageBuilder<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StatusPageBuilder")
            .field("settings", &self.settings)
            .field("key_from_name", &self.key_from_name.is_some())
            .finish_non_exhaustive()
    }
}

/// A page's settings, checked.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PageSettings {
    pub(crate) history: Duration,
    pub(crate) sample_every: Duration,
    pub(crate) watch_at_most: usize,
}

impl<K> StatusPage<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    /// A page with the default settings: five minutes of history, a
    /// sample a second, at most 32 keys watched.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] (field `"key_names"`) when the manager has no
    /// [`key_names`](crate::builder::ThrottleManagerBuilder::key_names): the page
    /// shows keys only as that function names them.
    ///
    /// ```
    /// use portcullis::status::StatusPage;
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let unnamed = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(5.0)).build()?;
    /// let refused = StatusPage::new(&unnamed).unwrap_err();
    /// assert_eq!(refused.problems()[0].field(), "key_names");
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn new(manager: &ThrottleManager<K>) -> Result<Self, ConfigError> {
        Self::builder(manager).build()
    }

    /// A page to tune before [`build`](StatusPageBuilder::build).
    pub fn builder(manager: &ThrottleManager<K>) -> StatusPageBuilder<K> {
        StatusPageBuilder {
            manager: manager.clone(),
            settings: PageSettings {
                history: Duration::from_secs(300),
                sample_every: Duration::from_secs(1),
                watch_at_most: 32,
            },
            key_from_name: None,
        }
    }

    /// The router serving the page and its JSON, to mount with axum's
    /// `Router::nest` (or serve as it is). Sampling starts with the first
    /// request any of the page's routers answers.
    pub fn router(&self) -> axum::Router {
        routes::router(Arc::clone(&self.shared))
    }
}

impl<K> StatusPageBuilder<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    /// How far back each watched key's charts go (default five minutes; at
    /// least one sample, at most 10,000 samples).
    ///
    /// ```
    /// # use portcullis::{status::StatusPage, *};
    /// # let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(5.0)).key_names(|k: &String| k.clone()).build()?;
    /// let page = StatusPage::builder(&manager).history(std::time::Duration::from_secs(60)).build()?;
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn history(mut self, history: Duration) -> Self {
        self.settings.history = history;
        self
    }

    /// How often the page samples the key space (default a second; from
    /// 10 ms to a minute).
    ///
    /// ```
    /// # use portcullis::{status::StatusPage, *};
    /// # let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(5.0)).key_names(|k: &String| k.clone()).build()?;
    /// let page = StatusPage::builder(&manager).sample_every(std::time::Duration::from_secs(5)).build()?;
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn sample_every(mut self, every: Duration) -> Self {
        self.settings.sample_every = every;
        self
    }

    /// The most keys watched at once (default 32; from 1 to 1,000): the
    /// top keys by each measure, then keys asked for, each with its ring of
    /// samples.
    ///
    /// ```
    /// # use portcullis::{status::StatusPage, *};
    /// # let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(5.0)).key_names(|k: &String| k.clone()).build()?;
    /// let page = StatusPage::builder(&manager).watch_at_most(8).build()?;
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn watch_at_most(mut self, keys: usize) -> Self {
        self.settings.watch_at_most = keys;
        self
    }

    /// How a name asked for (`GET /keys/{name}`) becomes a key, so that
    /// any live key can be asked for by its name, not only the keys the
    /// page shows. The key found is used only if the manager's
    /// [`key_names`](crate::builder::ThrottleManagerBuilder::key_names) gives it
    /// that same name: a key whose name hides it is not found by its own
    /// value. `None` (or a name with no key) answers 404. Without it, a
    /// key the page does not show answers 404.
    ///
    /// ```
    /// # use portcullis::{status::StatusPage, *};
    /// let manager = ThrottleManager::<u64>::builder()
    ///     .rate(RateConfig::adaptive(5.0))
    ///     .key_names(|user: &u64| user.to_string())
    ///     .build()?;
    /// let page = StatusPage::builder(&manager)
    ///     .key_from_name(|name: &str| name.parse::<u64>().ok())
    ///     .build()?;
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn key_from_name(
        mut self,
        key: impl Fn(&str) -> Option<K> + Send + Sync + 'static,
    ) -> Self {
        self.key_from_name = Some(Box::new(key));
        self
    }

    /// The page.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming each field out of range, and `"key_names"`
    /// when the manager has none.
    ///
    /// ```
    /// use portcullis::status::StatusPage;
    /// use portcullis::{RateConfig, ThrottleManager};
    /// use std::time::Duration;
    ///
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::adaptive(5.0))
    ///     .key_names(|key: &String| key.clone())
    ///     .build()?;
    /// let refused = StatusPage::builder(&manager).sample_every(Duration::ZERO).build().unwrap_err();
    /// assert_eq!(
    ///     refused.to_string(),
    ///     "invalid configuration: sample_every: must be from 10ms to 60s, got 0ns"
    /// );
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn build(self) -> Result<StatusPage<K>, ConfigError> {
        let PageSettings {
            history,
            sample_every,
            watch_at_most,
        } = self.settings;
        let mut found = Vec::new();
        if !self.manager.names_keys() {
            found.push(ConfigProblem::new(
                "key_names",
                "a status page shows keys by name: give the manager .key_names(...)",
            ));
        }
        if !(Duration::from_millis(10)..=Duration::from_secs(60)).contains(&sample_every) {
            found.push(ConfigProblem::new(
                "sample_every",
                format!("must be from 10ms to 60s, got {sample_every:?}"),
            ));
        } else {
            let samples = history.as_secs_f64() / sample_every.as_secs_f64();
            if !(1.0..=10_000.0).contains(&samples) {
                found.push(ConfigProblem::new(
                    "history",
                    format!(
                        "must hold 1 to 10,000 samples of {sample_every:?}, got {history:?} \
                         ({samples:.0})"
                    ),
                ));
            }
        }
        if !(1..=1_000).contains(&watch_at_most) {
            found.push(ConfigProblem::new(
                "watch_at_most",
                format!("must be from 1 to 1,000 keys, got {watch_at_most}"),
            ));
        }
        if let Some(error) = ConfigError::from_problems(found) {
            return Err(error);
        }
        // Refusals are counted from now on, into the one tally every page
        // of this manager shares.
        let tally = self
            .manager
            .watch_refusals(|| Arc::new(RefusalTally::<K>::default()))
            .into_any()
            .downcast::<RefusalTally<K>>()
            .expect("a status page is the only watcher of refusals");
        Ok(StatusPage {
            shared: Arc::new(sampler::Shared::new(
                self.manager,
                tally,
                self.settings,
                self.key_from_name,
            )),
        })
    }
}
