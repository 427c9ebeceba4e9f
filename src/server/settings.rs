//! What a [`ThrottleLayer`](super::ThrottleLayer), its builder and its
//! services share: the layer's settings, in one place that each of them
//! reads (so that the layer and its service do not import each other).

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName};
use http::{Response, StatusCode};

use super::guard::ServiceGuard;
use super::key::{KeyExtractor, LayerKey, MissingKey};
use crate::ThrottleManager;
use crate::error::Rejected;
use crate::outcome::Outcome;
use crate::priority::Priority;

pub(super) type ClassifyStatus = dyn Fn(StatusCode, &HeaderMap) -> Outcome + Send + Sync;
pub(super) type OnRefusal = dyn Fn(&Rejected) -> Response<Bytes> + Send + Sync;
pub(super) type OnMissingKey = dyn Fn(&MissingKey) -> Response<Bytes> + Send + Sync;
pub(super) type PriorityBy = dyn Fn(&http::request::Parts) -> Option<Priority> + Send + Sync;

/// What every clone of a layer and its services share.
pub(super) struct LayerSettings<K> {
    pub(super) manager: ThrottleManager<K>,
    /// Path prefixes with controls of their own, longest first.
    pub(super) routes: Vec<(String, ThrottleManager<K>)>,
    pub(super) extractor: KeyExtractor,
    pub(super) priority: Priority,
    pub(super) priority_header: Option<HeaderName>,
    pub(super) priority_by: Option<Arc<PriorityBy>>,
    /// The service guard, if the layer has one.
    pub(super) guard: Option<ServiceGuard>,
    /// An HTTP request's deadline, in milliseconds from its arrival.
    pub(super) deadline_header: Option<HeaderName>,
    pub(super) classify: Option<Arc<ClassifyStatus>>,
    pub(super) on_refusal: Option<Arc<OnRefusal>>,
    pub(super) on_missing_key: Option<Arc<OnMissingKey>>,
    pub(super) rate_limit_headers: bool,
    /// Whether a call ends when its answer's head is sent (`true`) rather
    /// than when its body ends.
    pub(super) release_at_headers: bool,
}

impl<K> LayerSettings<K> {
    /// A layer's settings with no options set.
    pub(super) fn new(manager: ThrottleManager<K>, extractor: KeyExtractor) -> Self {
        Self {
            manager,
            routes: Vec::new(),
            extractor,
            priority: Priority::HIGH,
            priority_header: None,
            priority_by: None,
            guard: None,
            deadline_header: None,
            classify: None,
            on_refusal: None,
            on_missing_key: None,
            rate_limit_headers: false,
            release_at_headers: false,
        }
    }
}

impl<K: LayerKey> fmt::Debug for LayerSettings<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let custom = |set: bool| if set { "custom" } else { "default" };
        f.debug_struct("ThrottleLayer")
            .field("manager", &self.manager)
            .field("routes", &self.routes)
            .field("extractor", &self.extractor)
            .field("priority", &self.priority)
            .field("priority_header", &self.priority_header)
            .field("priority_by", &custom(self.priority_by.is_some()))
            .field("guard", &self.guard)
            .field("deadline_header", &self.deadline_header)
            .field("classify", &custom(self.classify.is_some()))
            .field("on_refusal", &custom(self.on_refusal.is_some()))
            .field("on_missing_key", &custom(self.on_missing_key.is_some()))
            .field("rate_limit_headers", &self.rate_limit_headers)
            .finish()
    }
}
