//! The JSON routes the page's script reads: `/ui/overview` (counts, flows
//! and the charts' history), `/ui/items` (one page of items in a state)
//! and `/ui/find` (one item by id).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde::{Deserialize, Serialize};

use super::auth::LetIn;
use super::{Dash, FLOW_SAMPLE, PREVIEW_BYTES, SAMPLE_INTERVAL, error_response, json_response};
use crate::browse::{ItemState, ListQuery, ListedItem};
use crate::error::{Error, Result};
use crate::item::Stats;
use crate::limit::FlowLimits;
use crate::queue::{BoxQueue, WorkQueue};
use crate::schedule::ScheduleQueue;
use crate::wire::ErrorBody;

/// A result as JSON, or the error as the API's error body.
pub(super) fn reply<T: Serialize>(r: Result<T>) -> Response {
    match r {
        Ok(v) => json_response(StatusCode::OK, &v),
        Err(e) => error_response(ErrorBody::from_error(&e)),
    }
}

/// A query string serde could not read (a key given twice): invalid
/// input, in the API's error body.
fn bad_query(rejection: &QueryRejection) -> Error {
    Error::invalid(rejection.body_text())
}

#[derive(Debug, Serialize)]
struct FlowRow {
    flow: String,
    /// `paused`, else `backed_off` (a back-off in force), else `limited`
    /// (a rate limit or a concurrency cap), else `running`.
    state: &'static str,
    backlog: u64,
    parked: u64,
    /// The flow's limits (SPEC 3, Flow limits), when it has any in force.
    limits: Option<FlowLimits>,
    actions: Vec<&'static str>,
}

/// One row of the schedules table (SPEC 13).
#[derive(Debug, Serialize)]
struct ScheduleRow {
    name: String,
    /// `cron <expr> <tz>` or `every <ms> ms`.
    spec: String,
    flow: String,
    /// `paused`, `ended` or `active`.
    state: &'static str,
    next_fire_ms: Option<u64>,
    last_fired_ms: Option<u64>,
    fired: u64,
    skipped: u64,
    /// `pause` or `resume`.
    actions: Vec<&'static str>,
}

impl From<crate::schedule::ScheduleInfo> for ScheduleRow {
    fn from(s: crate::schedule::ScheduleInfo) -> Self {
        let state = if s.paused {
            "paused"
        } else if s.next_fire_ms.is_none() {
            "ended"
        } else {
            "active"
        };
        ScheduleRow {
            name: s.schedule.name().to_string(),
            spec: match s.schedule.spec() {
                crate::schedule::Spec::Cron { expr, tz } => format!("cron {expr} {tz}"),
                crate::schedule::Spec::Every { every_ms } => format!("every {every_ms} ms"),
            },
            flow: s.schedule.get_flow().to_string(),
            state,
            next_fire_ms: s.next_fire_ms,
            last_fired_ms: s.last_fired_ms,
            fired: s.fired,
            skipped: s.skipped,
            actions: vec![if s.paused {
                "resume_schedule"
            } else {
                "pause_schedule"
            }],
        }
    }
}

#[derive(Debug, Serialize)]
struct Overview {
    stats: Stats,
    now_ms: u64,
    read_only: bool,
    flows: Vec<FlowRow>,
    /// Every schedule, by name (SPEC 13).
    schedules: Vec<ScheduleRow>,
    flows_sample: usize,
    /// `[at_ms, backlog, pending, delayed, dead_letters, added, acked,
    /// failed]` per sample, oldest first; the last three are running totals.
    history: Vec<[u64; 8]>,
    interval_ms: u64,
}

/// `GET /ui/overview`.
pub(super) async fn overview(_: LetIn, State(dash): State<Arc<Dash>>) -> Response {
    reply(overview_of(&dash).await)
}

async fn overview_of(dash: &Dash) -> Result<Overview> {
    let q = &dash.queue;
    let stats = q.stats().await?;
    let now_ms = q.now_ms().await?;
    let flows = flow_rows(q, now_ms).await?;
    let schedules = q
        .schedules()
        .await?
        .into_iter()
        .map(ScheduleRow::from)
        .collect();
    let mut history: Vec<[u64; 8]> = dash.history.samples().iter().map(|s| s.row()).collect();
    // And this moment, so the charts end now.
    history.push(
        super::sampling::Sample {
            at_ms: now_ms,
            stats,
            totals: dash.metered.totals(),
        }
        .row(),
    );
    Ok(Overview {
        stats,
        now_ms,
        read_only: dash.read_only,
        flows,
        schedules,
        flows_sample: FLOW_SAMPLE,
        history,
        interval_ms: SAMPLE_INTERVAL.as_millis() as u64,
    })
}

/// One row per flow that has a backlog (in the first [`FLOW_SAMPLE`]
/// items), is paused or has limits, by name.
async fn flow_rows(q: &BoxQueue, now_ms: u64) -> Result<Vec<FlowRow>> {
    let by_flow = q.backlog_by_flow(FLOW_SAMPLE).await?;
    let paused = q.paused_flows().await?;
    let limits: BTreeMap<String, FlowLimits> = q
        .flow_limits()
        .await?
        .into_iter()
        .map(|l| (l.flow.clone(), l))
        .collect();
    let mut names: BTreeSet<String> = by_flow.keys().cloned().collect();
    names.extend(paused.iter().cloned());
    names.extend(limits.keys().cloned());
    let mut flows = Vec::new();
    for flow in names {
        let is_paused = paused.contains(&flow);
        let limit = limits.get(&flow).cloned();
        let backed_off = limit
            .as_ref()
            .is_some_and(|l| l.backoff_until_ms.is_some_and(|t| t > now_ms));
        flows.push(FlowRow {
            backlog: by_flow.get(&flow).copied().unwrap_or(0),
            parked: if is_paused { q.parked(&flow).await? } else { 0 },
            state: flow_state(is_paused, backed_off, limit.is_some()),
            actions: flow_actions(&flow, is_paused, backed_off),
            flow,
            limits: limit,
        });
    }
    flows.sort_by(|a, b| a.flow.cmp(&b.flow));
    Ok(flows)
}

/// The state column of a flow row.
fn flow_state(paused: bool, backed_off: bool, limited: bool) -> &'static str {
    if paused {
        "paused"
    } else if backed_off {
        "backed_off"
    } else if limited {
        "limited"
    } else {
        "running"
    }
}

/// The controls of a flow row (none for the unnamed flow).
fn flow_actions(flow: &str, paused: bool, backed_off: bool) -> Vec<&'static str> {
    let mut actions = Vec::new();
    if !flow.is_empty() {
        if paused {
            actions.extend(["resume", "step"]);
        } else {
            actions.push("pause");
        }
        actions.push(if backed_off { "lift" } else { "back_off" });
    }
    actions
}

/// A payload as the page shows it: text when it is UTF-8 without control
/// characters (tabs and newlines allowed), always as hex; both cut at
/// [`PREVIEW_BYTES`].
#[derive(Debug, Serialize)]
struct Preview {
    size: usize,
    truncated: bool,
    text: Option<String>,
    hex: String,
}

fn preview(payload: &[u8]) -> Preview {
    let cut = &payload[..payload.len().min(PREVIEW_BYTES)];
    let text = match std::str::from_utf8(cut) {
        Ok(t) => Some(t),
        // A cut through a character: the valid part.
        Err(e) if e.error_len().is_none() => std::str::from_utf8(&cut[..e.valid_up_to()]).ok(),
        Err(_) => None,
    }
    .filter(|t| {
        !t.chars()
            .any(|c| c.is_control() && c != '\n' && c != '\t' && c != '\r')
    })
    .map(str::to_string);
    let hex = cut
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(" ");
    Preview {
        size: payload.len(),
        truncated: payload.len() > cut.len(),
        text,
        hex,
    }
}

/// An item as the page shows it.
#[derive(Debug, Serialize)]
pub(super) struct ShownItem {
    id: u64,
    flow: String,
    state: ItemState,
    enqueued_at_ms: u64,
    not_before_ms: Option<u64>,
    deliveries: u32,
    priority: u8,
    claimed_at_ms: Option<u64>,
    /// Pending: the claim or the latest touch (SPEC 3, Looking).
    last_touch_ms: Option<u64>,
    consumer: Option<String>,
    reason: Option<String>,
    failed_at_ms: Option<u64>,
    /// Waits in its flow's held lane (SPEC 3, Flow limits).
    held: bool,
    /// Pending and marked cancelled (SPEC 3, Cancelling).
    cancelling: bool,
    /// Completed or cancelled: when it finished (SPEC 3, History).
    finished_at_ms: Option<u64>,
    /// Completed: the ack's result, previewed as payloads are.
    result: Option<Preview>,
    payload: Preview,
}

impl From<ListedItem> for ShownItem {
    fn from(l: ListedItem) -> Self {
        ShownItem {
            payload: preview(&l.item.payload),
            id: l.item.id,
            flow: l.item.flow,
            state: l.state,
            enqueued_at_ms: l.item.enqueued_at_ms,
            not_before_ms: l.item.not_before_ms,
            deliveries: l.item.deliveries,
            priority: l.item.priority,
            claimed_at_ms: l.claimed_at_ms,
            last_touch_ms: l.last_touch_ms,
            consumer: l.consumer,
            reason: l.reason,
            failed_at_ms: l.failed_at_ms,
            held: l.held,
            cancelling: l.cancelling,
            finished_at_ms: l.finished_at_ms,
            result: l.result.as_deref().map(preview),
        }
    }
}

#[derive(Debug, Serialize)]
struct ShownPage {
    items: Vec<ShownItem>,
    next_offset: Option<u64>,
    now_ms: u64,
}

/// The query string of `GET /ui/items`. The numbers stay text here so
/// that an empty one means the default and a bad one is named in the
/// error.
#[derive(Debug, Deserialize)]
pub(super) struct ItemsQuery {
    /// `pending` unless given.
    state: Option<String>,
    /// 0 unless given.
    offset: Option<String>,
    /// 50 unless given.
    limit: Option<String>,
    /// Payload text to look for.
    q: Option<String>,
}

/// `GET /ui/items?state=&offset=&limit=&q=`.
pub(super) async fn items(
    _: LetIn,
    State(dash): State<Arc<Dash>>,
    query: Result<Query<ItemsQuery>, QueryRejection>,
) -> Response {
    match query {
        Ok(Query(query)) => reply(items_of(&dash, query).await),
        Err(e) => reply::<ShownPage>(Err(bad_query(&e))),
    }
}

/// `value` as a number, `default` when missing or empty.
fn number(key: &str, value: Option<&str>, default: u64) -> Result<u64> {
    match value {
        None | Some("") => Ok(default),
        Some(v) => v
            .parse()
            .map_err(|_| Error::invalid(format!("{key}={v:?} is not a number"))),
    }
}

async fn items_of(dash: &Dash, query: ItemsQuery) -> Result<ShownPage> {
    let state = ItemState::parse(query.state.as_deref().unwrap_or("pending"))?;
    let offset = number("offset", query.offset.as_deref(), 0)?;
    let limit = number("limit", query.limit.as_deref(), 50)?;
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let mut list = ListQuery::new(state).offset(offset).limit(limit);
    if let Some(text) = query.q {
        list = list.contains(text.into_bytes());
    }
    let page = dash.queue.list(list).await?;
    Ok(ShownPage {
        items: page.items.into_iter().map(Into::into).collect(),
        next_offset: page.next_offset,
        now_ms: dash.queue.now_ms().await?,
    })
}

#[derive(Debug, Serialize)]
struct Found {
    item: Option<ShownItem>,
    now_ms: u64,
}

/// The query string of `GET /ui/find`.
#[derive(Debug, Deserialize)]
pub(super) struct FindQuery {
    /// The item's id (spaces around it allowed).
    id: Option<String>,
}

/// `GET /ui/find?id=`.
pub(super) async fn find(
    _: LetIn,
    State(dash): State<Arc<Dash>>,
    query: Result<Query<FindQuery>, QueryRejection>,
) -> Response {
    let found = match query {
        Ok(Query(query)) => find_of(&dash, query).await,
        Err(e) => Err(bad_query(&e)),
    };
    reply(found)
}

async fn find_of(dash: &Dash, query: FindQuery) -> Result<Found> {
    let id: u64 = query
        .id
        .as_deref()
        .unwrap_or("")
        .trim()
        .parse()
        .map_err(|_| Error::invalid("find needs id=<number>"))?;
    Ok(Found {
        item: dash.queue.find(id).await?.map(Into::into),
        now_ms: dash.queue.now_ms().await?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Uri;

    #[test]
    fn previews_cut_and_say_so() {
        let p = preview(b"hello");
        assert_eq!(p.text.as_deref(), Some("hello"));
        assert!(!p.truncated);
        let p = preview(&[0u8, 1, 2]);
        assert_eq!(p.text, None);
        assert_eq!(p.hex, "00 01 02");
        let long = vec![b'a'; 1000];
        let p = preview(&long);
        assert!(p.truncated);
        assert_eq!(p.size, 1000);
    }

    #[test]
    fn query_strings_are_decoded() {
        let uri: Uri = "/ui/items?state=dead_letter&q=a%20b+c&offset=5&bad=%zz"
            .parse()
            .unwrap();
        let Query(q) = Query::<ItemsQuery>::try_from_uri(&uri).unwrap();
        assert_eq!(q.q.as_deref(), Some("a b c"));
        assert_eq!(q.offset.as_deref(), Some("5"));
        assert_eq!(q.state.as_deref(), Some("dead_letter"));
        assert_eq!(q.limit, None);
        let uri: Uri = "/ui/items?q=%4&limit=".parse().unwrap();
        let Query(q) = Query::<ItemsQuery>::try_from_uri(&uri).unwrap();
        assert_eq!(q.q.as_deref(), Some("%4"));
        assert_eq!(number("limit", q.limit.as_deref(), 50).unwrap(), 50);
        let uri: Uri = "/ui/find?id=%2042%20".parse().unwrap();
        let Query(f) = Query::<FindQuery>::try_from_uri(&uri).unwrap();
        assert_eq!(f.id.as_deref(), Some(" 42 "));
    }

    #[test]
    fn a_key_given_twice_is_invalid_input() {
        let uri: Uri = "/ui/items?q=a&q=b".parse().unwrap();
        let Err(rejection) = Query::<ItemsQuery>::try_from_uri(&uri) else {
            panic!("a key given twice is refused");
        };
        let e = bad_query(&rejection);
        assert!(
            matches!(&e, Error::InvalidInput(m) if m.contains("duplicate field `q`")),
            "{e:?}"
        );
    }

    #[test]
    fn numbers_name_the_bad_one() {
        let e = number("offset", Some("x"), 0).unwrap_err();
        assert!(
            e.to_string().contains("offset=\"x\" is not a number"),
            "{e}"
        );
    }
}
