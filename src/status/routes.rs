//! The page's routes: the HTML, the top keys and one key, as JSON.

use std::collections::BTreeMap;
use std::hash::Hash;
use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;

use super::sampler::{KeySample, Shared, SortBy};
use crate::manager::KeySnapshot;

/// The page: one file, its script and styles inline.
const PAGE: &str = include_str!("page.html");

/// The most keys one answer lists.
const MAX_TOP: usize = 1_000;

pub(crate) fn router<K>(shared: Arc<Shared<K>>) -> Router
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    Router::new()
        .route("/", get(page::<K>))
        .route("/keys", get(top_keys::<K>))
        .route("/keys/{key}", get(one_key::<K>))
        .with_state(shared)
}

async fn page<K>(State(shared): State<Arc<Shared<K>>>) -> Html<&'static str>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    shared.start();
    Html(PAGE)
}

#[derive(Debug, serde::Deserialize)]
struct TopQuery {
    top: Option<usize>,
    sort: Option<SortBy>,
    from: Option<usize>,
}

/// The manager as a whole.
#[derive(Debug, serde::Serialize)]
struct Totals {
    /// The manager's name, if it has one.
    manager: Option<String>,
    keys_live: usize,
    max_keys: usize,
    evicted: u64,
    /// Refusals since the page was built, by reason.
    refusals: BTreeMap<&'static str, u64>,
    /// Calls of shadowed keys that would have been refused since the page
    /// was built, by reason (and went through).
    would_refuse: BTreeMap<&'static str, u64>,
}

/// One key in a top list, as it is now.
#[derive(Debug, serde::Serialize)]
struct KeyRow {
    key: String,
    /// What the list is sorted by, at the last sample.
    score: f64,
    refusals_per_second: f64,
    wait_ms: f64,
    in_flight: u32,
    queued: u32,
    snapshot: KeySnapshot,
}

#[derive(Debug, serde::Serialize)]
struct TopAnswer {
    sort: SortBy,
    from: usize,
    /// Keys in the list (the answer holds `top` of them from `from`).
    total: usize,
    sampled_at_ms: u64,
    sample_every_ms: u64,
    totals: Totals,
    keys: Vec<KeyRow>,
}

#[derive(Debug, serde::Serialize)]
struct KeyAnswer {
    key: String,
    wait_ms: f64,
    in_flight: u32,
    queued: u32,
    served: Option<f64>,
    snapshot: KeySnapshot,
    sample_every_ms: u64,
    /// Oldest first.
    history: Vec<KeySample>,
}

fn refused(status: StatusCode, message: String) -> Response {
    let body = Json(serde_json::json!({ "error": message }));
    (status, no_store(), body).into_response()
}

fn no_store() -> [(header::HeaderName, &'static str); 1] {
    [(header::CACHE_CONTROL, "no-store")]
}

async fn top_keys<K>(
    State(shared): State<Arc<Shared<K>>>,
    Query(query): Query<TopQuery>,
) -> Response
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    let top = query.top.unwrap_or(10);
    if !(1..=MAX_TOP).contains(&top) {
        return refused(
            StatusCode::BAD_REQUEST,
            format!("top: must be from 1 to {MAX_TOP}, got {top}"),
        );
    }
    let (sort, from) = (
        query.sort.unwrap_or(SortBy::Refusals),
        query.from.unwrap_or(0),
    );
    shared.start();
    let (listed, total, refusals, sampled_at_ms) = {
        let board = shared.board();
        let list = board.top(sort);
        let listed: Vec<_> = list
            .iter()
            .skip(from)
            .take(top)
            .map(|ranked| (ranked.key.clone(), ranked.name.clone(), ranked.score))
            .collect();
        let refusals: BTreeMap<String, f64> = board
            .refusals
            .iter()
            .map(|ranked| (ranked.name.clone(), ranked.score))
            .collect();
        (listed, list.len(), refusals, board.sampled_at_ms)
    };
    let keys = listed
        .into_iter()
        .filter_map(|(key, name, score)| {
            let (snapshot, load, _) = shared.manager.watch_sample(&key)?;
            Some(KeyRow {
                refusals_per_second: refusals.get(&name).copied().unwrap_or(0.0),
                key: name,
                score,
                wait_ms: load.wait.as_secs_f64() * 1e3,
                in_flight: load.in_flight,
                queued: load.queued,
                snapshot,
            })
        })
        .collect();
    let (max_keys, evicted) = shared.manager.key_space_totals();
    let answer = TopAnswer {
        sort,
        from,
        total,
        sampled_at_ms,
        sample_every_ms: shared.settings.sample_every.as_millis() as u64,
        totals: Totals {
            manager: shared.manager.settings().name().map(str::to_owned),
            keys_live: shared.manager.keys().len(),
            max_keys,
            evicted,
            refusals: shared.refusals.totals().into_iter().collect(),
            would_refuse: shared.refusals.would_refuse().into_iter().collect(),
        },
        keys,
    };
    (no_store(), Json(answer)).into_response()
}

async fn one_key<K>(State(shared): State<Arc<Shared<K>>>, Path(name): Path<String>) -> Response
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    shared.start();
    let not_live = || {
        refused(
            StatusCode::NOT_FOUND,
            format!("no live key is named {name:?}"),
        )
    };
    if !shared.ask_for(&name) {
        return not_live();
    }
    let (key, history) = {
        let board = shared.board();
        let Some(watched) = board.watched.get(&name) else {
            return not_live();
        };
        (
            watched.key.clone(),
            watched.samples.iter().cloned().collect(),
        )
    };
    let Some((snapshot, load, served)) = shared.manager.watch_sample(&key) else {
        return not_live();
    };
    let answer = KeyAnswer {
        key: name,
        wait_ms: load.wait.as_secs_f64() * 1e3,
        in_flight: load.in_flight,
        queued: load.queued,
        served,
        snapshot,
        sample_every_ms: shared.settings.sample_every.as_millis() as u64,
        history,
    };
    (no_store(), Json(answer)).into_response()
}
