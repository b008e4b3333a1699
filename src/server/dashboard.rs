//! The web dashboard of `workjournal serve --http` (SPEC 12.2) and the
//! `/metrics` endpoint (SPEC 12.3). Feature `dashboard`.
//!
//! One HTML page rendered here with the counts already in it, a small
//! script and a style sheet built into the binary (`assets/`), and a few
//! JSON routes under `/ui/` that the script reads every 1.5 s. Every route
//! but the two static assets needs the server's token: an
//! `Authorization: Bearer` header, or the cookie that opening
//! `/?token=<token>` once sets. Writes are `POST /ui/action` with a JSON
//! body (a cross-site form cannot send one) and are refused, with their
//! controls left out of the page, in read-only mode.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::{error_response, json_response, same_token, stopped};
use crate::browse::{ItemState, ListQuery, ListedItem};
use crate::error::{Error, Result};
use crate::item::{Receipt, Stats};
use crate::limit::{FlowLimit, FlowLimits};
use crate::metered::{MeteredQueue, OPERATION_DURATION, Totals, record_stats};
use crate::queue::{BoxQueue, WorkQueue};
use crate::wire::{ErrorBody, WireReceipt};

const INDEX_HTML: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const APP_CSS: &str = include_str!("assets/app.css");

/// How often the server samples `stats` for the charts: every 2 s.
pub const SAMPLE_INTERVAL: Duration = Duration::from_secs(2);
/// How many samples the charts keep: one hour at [`SAMPLE_INTERVAL`].
pub const HISTORY_SAMPLES: usize = 1800;
/// The cookie that carries the token after `/?token=` (HttpOnly,
/// SameSite=Strict).
pub const TOKEN_COOKIE: &str = "workjournal_token";
/// How many items in claim order the flow table counts per flow.
pub const FLOW_SAMPLE: usize = 1000;
/// The payload bytes the page shows of each item (the rest is cut).
pub const PREVIEW_BYTES: usize = 256;
/// The most dead letters one "redrive all" moves; more take another click.
pub const REDRIVE_ALL_MAX: usize = 10_000;
/// The back-off of the flow table's "back off" control when the action
/// names no `seconds`: 30 s (SPEC 12.2).
pub const BACK_OFF_DEFAULT: Duration = Duration::from_secs(30);
/// The longest back-off one action sets: one day (SPEC 12.2).
pub const BACK_OFF_MAX: Duration = Duration::from_secs(86_400);
/// The `target` label the server gives `workjournal_forward_lag_items`
/// for the file it serves (SPEC 12.3): forwarding hands items to Redis.
pub const FORWARD_LAG_TARGET: &str = "redis";

/// One sample of the charts.
#[derive(Debug, Clone, Copy)]
struct Sample {
    at_ms: u64,
    stats: Stats,
    totals: Totals,
}

/// What the dashboard routes share.
#[derive(Debug)]
pub(super) struct Dash {
    queue: BoxQueue,
    metered: MeteredQueue<BoxQueue>,
    token: Arc<str>,
    read_only: bool,
    history: Mutex<VecDeque<Sample>>,
    lag: Option<Lag>,
}

/// Where `/metrics` reads the served file's forwarding lag (SPEC 12.3):
/// the server's lag source, when it has one.
#[cfg(feature = "forward")]
pub(super) type Lag = crate::forward::LagSource;
/// Without store and forward there is no lag to read.
#[cfg(not(feature = "forward"))]
pub(super) type Lag = std::convert::Infallible;

impl Dash {
    pub(super) fn new(
        metered: MeteredQueue<BoxQueue>,
        token: Arc<str>,
        read_only: bool,
        lag: Option<Lag>,
    ) -> Self {
        Dash {
            lag,
            queue: BoxQueue::new(metered.clone()),
            metered,
            token,
            read_only,
            history: Mutex::new(VecDeque::with_capacity(HISTORY_SAMPLES)),
        }
    }

    fn samples(&self) -> Vec<Sample> {
        match self.history.lock() {
            Ok(h) => h.iter().copied().collect(),
            Err(p) => p.into_inner().iter().copied().collect(),
        }
    }

    fn push(&self, s: Sample) {
        let mut h = match self.history.lock() {
            Ok(h) => h,
            Err(p) => p.into_inner(),
        };
        if h.len() >= HISTORY_SAMPLES {
            h.pop_front();
        }
        h.push_back(s);
    }
}

/// The process's Prometheus recorder, installed as the `metrics` facade's
/// global recorder on first use; `None` if the process already had another
/// one (then its own exporter has the series).
pub(super) fn prometheus() -> Option<&'static PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let buckets = [
                0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                5.0, 10.0, 30.0,
            ];
            let builder = PrometheusBuilder::new().set_buckets_for_metric(
                metrics_exporter_prometheus::Matcher::Full(OPERATION_DURATION.to_string()),
                &buckets,
            );
            let recorder = match builder {
                Ok(b) => b.build_recorder(),
                Err(e) => {
                    tracing::warn!("metrics: {e}");
                    return None;
                }
            };
            let handle = recorder.handle();
            match metrics::set_global_recorder(recorder) {
                Ok(()) => Some(handle),
                Err(_) => {
                    tracing::warn!(
                        "metrics: this process already has a metrics recorder; /metrics stays empty"
                    );
                    None
                }
            }
        })
        .as_ref()
}

/// Sample `stats` every [`SAMPLE_INTERVAL`] until `stop` (which also sets
/// the state gauges of `/metrics`).
pub(super) async fn sample(dash: Arc<Dash>, mut stop: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(SAMPLE_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            () = stopped(&mut stop) => return,
            _ = tick.tick() => {}
        }
        if let Some(h) = prometheus() {
            h.run_upkeep();
        }
        let (Ok(stats), Ok(now)) = (dash.queue.stats().await, dash.queue.now_ms().await) else {
            continue;
        };
        dash.push(Sample {
            at_ms: now,
            stats,
            totals: dash.metered.totals(),
        });
    }
}

/// `/metrics` in Prometheus text format, for any router whose caller has
/// been let in.
pub(super) async fn render_metrics(queue: &BoxQueue, lag: Option<&Lag>) -> Response {
    let Some(handle) = prometheus() else {
        return error_response(ErrorBody::plain(
            "closed",
            "this process has a metrics recorder of its own: scrape that one",
        ));
    };
    // Fresh state gauges for the scrape, whatever the sampler last saw.
    if let Ok(s) = queue.stats().await {
        record_stats(&s);
    }
    // The forwarding lag, from the same source as route `forward_lag`;
    // no source, no series.
    #[cfg(feature = "forward")]
    if let Some(source) = lag
        && let Ok(l) = source.lag(None).await
    {
        crate::metered::record_forward_lag(FORWARD_LAG_TARGET, l.lag.count);
    }
    #[cfg(not(feature = "forward"))]
    let _ = lag;
    handle.run_upkeep();
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        handle.render(),
    )
        .into_response()
}

/// The dashboard listener's routes.
pub(super) fn router(dash: Arc<Dash>) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/assets/app.js", get(app_js))
        .route("/assets/app.css", get(app_css))
        .route("/metrics", get(metrics_route))
        .route("/ui/overview", get(overview))
        .route("/ui/items", get(items))
        .route("/ui/find", get(find))
        .route("/ui/action", post(action))
        .fallback(not_found)
        .with_state(dash)
}

async fn not_found() -> Response {
    error_response(ErrorBody::plain(
        "not_found",
        "no such page; the dashboard is at /",
    ))
}

async fn app_js() -> Response {
    asset("text/javascript; charset=utf-8", APP_JS)
}

async fn app_css() -> Response {
    asset("text/css; charset=utf-8", APP_CSS)
}

fn asset(kind: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// The token from the bearer header or the cookie.
fn let_in(headers: &HeaderMap, token: &str) -> bool {
    if super::authorized(headers, token) {
        return true;
    }
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .any(|(k, v)| k == TOKEN_COOKIE && same_token(v.as_bytes(), token.as_bytes()))
}

fn unauthorized() -> Response {
    error_response(ErrorBody::plain(
        "unauthorized",
        "missing or wrong token: open /?token=<token> once (the token is in the token file of workjournal serve), or send Authorization: Bearer <token>",
    ))
}

/// `key=value` pairs of a query string, percent-decoded (`+` is a space).
fn query_pairs(uri: &Uri) -> Vec<(String, String)> {
    fn decode(s: &str) -> String {
        let b = s.as_bytes();
        let mut out = Vec::with_capacity(b.len());
        let mut i = 0;
        while i < b.len() {
            match b[i] {
                b'+' => out.push(b' '),
                b'%' if i + 2 < b.len() => {
                    let hex = std::str::from_utf8(&b[i + 1..i + 3]).ok();
                    match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                        Some(v) => {
                            out.push(v);
                            i += 2;
                        }
                        None => out.push(b'%'),
                    }
                }
                c => out.push(c),
            }
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    }
    uri.query()
        .unwrap_or("")
        .split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (decode(k), decode(v))
        })
        .collect()
}

fn param<'a>(pairs: &'a [(String, String)], key: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn count_card(id: &str, label: &str, value: &str) -> String {
    format!(
        "<div class=\"count\" id=\"count-{id}\"><b>{}</b><span>{}</span></div>\n",
        html_escape(value),
        html_escape(label)
    )
}

/// The page, with the counts of this moment already in it.
async fn index(State(dash): State<Arc<Dash>>, uri: Uri, headers: HeaderMap) -> Response {
    if !let_in(&headers, &dash.token) {
        let pairs = query_pairs(&uri);
        if let Some(given) = param(&pairs, "token")
            && same_token(given.as_bytes(), dash.token.as_bytes())
        {
            let cookie = format!("{TOKEN_COOKIE}={given}; Path=/; HttpOnly; SameSite=Strict");
            let mut r = Response::new(Body::empty());
            *r.status_mut() = StatusCode::SEE_OTHER;
            r.headers_mut()
                .insert(header::LOCATION, HeaderValue::from_static("/"));
            if let Ok(v) = HeaderValue::from_str(&cookie) {
                r.headers_mut().insert(header::SET_COOKIE, v);
            }
            return r;
        }
        return unauthorized();
    }
    let stats = match dash.queue.stats().await {
        Ok(s) => s,
        Err(e) => return error_response(ErrorBody::from_error(&e)),
    };
    let oldest = stats
        .oldest_pending_age_ms
        .map_or_else(|| "–".to_string(), |ms| format!("{} s", ms / 1000));
    let mut counts = String::new();
    counts.push_str(&count_card(
        "backlog",
        "backlog (ready)",
        &stats.backlog.to_string(),
    ));
    counts.push_str(&count_card("due", "of which due", &stats.due.to_string()));
    counts.push_str(&count_card(
        "pending",
        "pending",
        &stats.pending.to_string(),
    ));
    counts.push_str(&count_card(
        "delayed",
        "delayed",
        &stats.delayed.to_string(),
    ));
    counts.push_str(&count_card("parked", "parked", &stats.parked.to_string()));
    counts.push_str(&count_card(
        "dead_letters",
        "dead letters",
        &stats.dead_letters.to_string(),
    ));
    counts.push_str(&count_card("oldest", "oldest pending", &oldest));
    let (pause_form, dead_controls) = if dash.read_only {
        (String::new(), String::new())
    } else {
        (
            "<form id=\"pause-form\"><input id=\"pause-flow\" type=\"text\" placeholder=\"flow name\" aria-label=\"flow to pause\"><button type=\"submit\">Pause flow</button></form>".to_string(),
            "<div id=\"dead-controls\" hidden><button id=\"redrive-selected\">Redrive selected</button> <button id=\"redrive-all\">Redrive all</button> <button id=\"purge\" class=\"danger\">Purge dead letters</button></div>".to_string(),
        )
    };
    let title = if stats.durable {
        "queue"
    } else {
        "memory queue"
    };
    let page = INDEX_HTML
        .replace("{{TITLE}}", title)
        .replace(
            "{{READ_ONLY}}",
            if dash.read_only { "true" } else { "false" },
        )
        .replace(
            "{{MODE}}",
            if dash.read_only {
                "read-only"
            } else {
                "read-write"
            },
        )
        .replace("{{COUNTS}}", &counts)
        .replace("{{PAUSE_FORM}}", &pause_form)
        .replace("{{DEAD_CONTROLS}}", &dead_controls);
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        page,
    )
        .into_response()
}

async fn metrics_route(State(dash): State<Arc<Dash>>, headers: HeaderMap) -> Response {
    if !let_in(&headers, &dash.token) {
        return unauthorized();
    }
    render_metrics(&dash.queue, dash.lag.as_ref()).await
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

#[derive(Debug, Serialize)]
struct Overview {
    stats: Stats,
    now_ms: u64,
    read_only: bool,
    flows: Vec<FlowRow>,
    flows_sample: usize,
    /// `[at_ms, backlog, pending, delayed, dead_letters, added, acked,
    /// failed]` per sample, oldest first; the last three are running totals.
    history: Vec<[u64; 8]>,
    interval_ms: u64,
}

fn reply<T: Serialize>(r: Result<T>) -> Response {
    match r {
        Ok(v) => json_response(StatusCode::OK, &v),
        Err(e) => error_response(ErrorBody::from_error(&e)),
    }
}

async fn overview(State(dash): State<Arc<Dash>>, headers: HeaderMap) -> Response {
    if !let_in(&headers, &dash.token) {
        return unauthorized();
    }
    reply(overview_of(&dash).await)
}

async fn overview_of(dash: &Dash) -> Result<Overview> {
    let q = &dash.queue;
    let stats = q.stats().await?;
    let now_ms = q.now_ms().await?;
    let by_flow = q.backlog_by_flow(FLOW_SAMPLE).await?;
    let paused = q.paused_flows().await?;
    let limits: std::collections::BTreeMap<String, FlowLimits> = q
        .flow_limits()
        .await?
        .into_iter()
        .map(|l| (l.flow.clone(), l))
        .collect();
    let mut names: std::collections::BTreeSet<String> = by_flow.keys().cloned().collect();
    names.extend(paused.iter().cloned());
    names.extend(limits.keys().cloned());
    let mut flows = Vec::new();
    for flow in names {
        let is_paused = paused.contains(&flow);
        let limit = limits.get(&flow).cloned();
        let backed_off = limit
            .as_ref()
            .is_some_and(|l| l.backoff_until_ms.is_some_and(|t| t > now_ms));
        let state = if is_paused {
            "paused"
        } else if backed_off {
            "backed_off"
        } else if limit.is_some() {
            "limited"
        } else {
            "running"
        };
        let mut actions = Vec::new();
        if !flow.is_empty() {
            if is_paused {
                actions.extend(["resume", "step"]);
            } else {
                actions.push("pause");
            }
            actions.push(if backed_off { "lift" } else { "back_off" });
        }
        flows.push(FlowRow {
            backlog: by_flow.get(&flow).copied().unwrap_or(0),
            parked: if is_paused { q.parked(&flow).await? } else { 0 },
            flow,
            state,
            limits: limit,
            actions,
        });
    }
    flows.sort_by(|a, b| a.flow.cmp(&b.flow));
    let mut history: Vec<[u64; 8]> = dash
        .samples()
        .iter()
        .map(|s| {
            [
                s.at_ms,
                s.stats.backlog,
                s.stats.pending,
                s.stats.delayed,
                s.stats.dead_letters,
                s.totals.added,
                s.totals.acked,
                s.totals.failed,
            ]
        })
        .collect();
    let t = dash.metered.totals();
    history.push([
        now_ms,
        stats.backlog,
        stats.pending,
        stats.delayed,
        stats.dead_letters,
        t.added,
        t.acked,
        t.failed,
    ]);
    Ok(Overview {
        stats,
        now_ms,
        read_only: dash.read_only,
        flows,
        flows_sample: FLOW_SAMPLE,
        history,
        interval_ms: SAMPLE_INTERVAL.as_millis() as u64,
    })
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

#[derive(Debug, Serialize)]
struct ShownItem {
    id: u64,
    flow: String,
    state: ItemState,
    enqueued_at_ms: u64,
    not_before_ms: Option<u64>,
    deliveries: u32,
    priority: u8,
    claimed_at_ms: Option<u64>,
    consumer: Option<String>,
    reason: Option<String>,
    failed_at_ms: Option<u64>,
    /// Waits in its flow's held lane (SPEC 3, Flow limits).
    held: bool,
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
            consumer: l.consumer,
            reason: l.reason,
            failed_at_ms: l.failed_at_ms,
            held: l.held,
        }
    }
}

#[derive(Debug, Serialize)]
struct ShownPage {
    items: Vec<ShownItem>,
    next_offset: Option<u64>,
    now_ms: u64,
}

async fn items(State(dash): State<Arc<Dash>>, uri: Uri, headers: HeaderMap) -> Response {
    if !let_in(&headers, &dash.token) {
        return unauthorized();
    }
    reply(items_of(&dash, &uri).await)
}

async fn items_of(dash: &Dash, uri: &Uri) -> Result<ShownPage> {
    let pairs = query_pairs(uri);
    let state = ItemState::parse(param(&pairs, "state").unwrap_or("pending"))?;
    let number = |key: &str, default: u64| -> Result<u64> {
        match param(&pairs, key) {
            None | Some("") => Ok(default),
            Some(v) => v
                .parse()
                .map_err(|_| Error::invalid(format!("{key}={v:?} is not a number"))),
        }
    };
    let offset = number("offset", 0)?;
    let limit = usize::try_from(number("limit", 50)?).unwrap_or(usize::MAX);
    let mut query = ListQuery::new(state).offset(offset).limit(limit);
    if let Some(text) = param(&pairs, "q") {
        query = query.contains(text.as_bytes().to_vec());
    }
    let page = dash.queue.list(query).await?;
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

async fn find(State(dash): State<Arc<Dash>>, uri: Uri, headers: HeaderMap) -> Response {
    if !let_in(&headers, &dash.token) {
        return unauthorized();
    }
    let pairs = query_pairs(&uri);
    let found = async {
        let id: u64 = param(&pairs, "id")
            .unwrap_or("")
            .trim()
            .parse()
            .map_err(|_| Error::invalid("find needs id=<number>"))?;
        Ok::<_, Error>(Found {
            item: dash.queue.find(id).await?.map(Into::into),
            now_ms: dash.queue.now_ms().await?,
        })
    }
    .await;
    reply(found)
}

/// `POST /ui/action`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Action {
    action: String,
    #[serde(default)]
    flow: Option<String>,
    #[serde(default)]
    ids: Vec<u64>,
    #[serde(default)]
    receipt: Option<WireReceipt>,
    /// For `back_off`: how long, in seconds (default 30, at most a day).
    #[serde(default)]
    seconds: Option<u64>,
}

#[derive(Debug, Serialize)]
struct Stepped {
    item: ShownItem,
    receipt: WireReceipt,
}

#[derive(Debug, Serialize)]
struct Done {
    message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    stepped: Option<Stepped>,
}

fn done(message: String) -> Done {
    Done {
        message,
        stepped: None,
    }
}

async fn action(State(dash): State<Arc<Dash>>, headers: HeaderMap, body: Body) -> Response {
    if !let_in(&headers, &dash.token) {
        return unauthorized();
    }
    if dash.read_only {
        return error_response(ErrorBody::plain(
            "forbidden",
            "this dashboard is read-only (workjournal serve --read-only)",
        ));
    }
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !json {
        return error_response(ErrorBody::plain(
            "bad_request",
            "send the action as JSON (content-type: application/json)",
        ));
    }
    let bytes = match super::read_body(body, 64 * 1024, Duration::from_secs(10)).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let a: Action = match serde_json::from_slice(&bytes) {
        Ok(a) => a,
        Err(e) => {
            return error_response(ErrorBody::plain(
                "bad_request",
                format!("not an action: {e}"),
            ));
        }
    };
    reply(run_action(&dash.queue, a).await)
}

fn flow_of(a: &Action) -> Result<&str> {
    a.flow
        .as_deref()
        .ok_or_else(|| Error::invalid(format!("{} needs a flow", a.action)))
}

fn receipt_of(a: &Action) -> Result<Receipt> {
    a.receipt
        .map(Into::into)
        .ok_or_else(|| Error::invalid(format!("{} needs a receipt", a.action)))
}

async fn run_action(q: &BoxQueue, a: Action) -> Result<Done> {
    match a.action.as_str() {
        "pause" => {
            let flow = flow_of(&a)?;
            q.pause(flow).await?;
            Ok(done(format!("flow {flow:?} paused")))
        }
        "resume" => {
            let flow = flow_of(&a)?;
            let n = q.resume(flow).await?;
            Ok(done(format!(
                "flow {flow:?} resumed: {n} parked items back in the backlog"
            )))
        }
        "step" => {
            let flow = flow_of(&a)?;
            match q.step(flow).await? {
                None => Ok(done(format!("flow {flow:?} has nothing parked"))),
                Some(c) => Ok(Done {
                    message: format!(
                        "item {} of flow {flow:?} is pending under this page: ack it or give it back",
                        c.item.id
                    ),
                    stepped: Some(Stepped {
                        receipt: c.receipt.into(),
                        item: ListedItem::pending(c.item, c.claimed_at_ms, None).into(),
                    }),
                }),
            }
        }
        "back_off" => {
            let flow = flow_of(&a)?;
            let d = a.seconds.map_or(BACK_OFF_DEFAULT, Duration::from_secs);
            if d.is_zero() || d > BACK_OFF_MAX {
                return Err(Error::invalid(format!(
                    "back_off takes 1 to {} seconds",
                    BACK_OFF_MAX.as_secs()
                )));
            }
            q.back_off(flow, d).await?;
            Ok(done(format!(
                "flow {flow:?} backed off for {} s",
                d.as_secs()
            )))
        }
        "lift" => {
            let flow = flow_of(&a)?;
            q.set_flow_limit(flow, FlowLimit::BackOffUntil(None))
                .await?;
            Ok(done(format!("flow {flow:?}: back-off lifted")))
        }
        "ack" => {
            let r = receipt_of(&a)?;
            q.ack(r).await?;
            Ok(done(format!("item {} acknowledged", r.id)))
        }
        "release" => {
            let r = receipt_of(&a)?;
            let now = q.now_ms().await?;
            q.release(r, now).await?;
            Ok(done(format!("item {} given back", r.id)))
        }
        "redrive" => {
            if a.ids.is_empty() {
                return Err(Error::invalid("redrive needs ids"));
            }
            let mut moved = 0u64;
            let mut missing = Vec::new();
            for id in &a.ids {
                if q.redrive(*id).await? {
                    moved += 1;
                } else {
                    missing.push(id.to_string());
                }
            }
            let mut m = format!("{moved} dead letters redriven to the backlog");
            if !missing.is_empty() {
                m.push_str(&format!(
                    "; not dead letters (any more): {}",
                    missing.join(", ")
                ));
            }
            Ok(done(m))
        }
        "redrive_all" => {
            let mut moved = 0usize;
            while moved < REDRIVE_ALL_MAX {
                let page = q
                    .list(ListQuery::new(ItemState::DeadLetter).limit(crate::MAX_LIST_LIMIT))
                    .await?;
                if page.items.is_empty() {
                    break;
                }
                let mut any = false;
                for l in page.items {
                    if q.redrive(l.item.id).await? {
                        moved += 1;
                        any = true;
                    }
                }
                if !any {
                    break;
                }
            }
            Ok(done(format!(
                "{moved} dead letters redriven to the backlog"
            )))
        }
        "purge" => {
            let n = q.purge_dead_letters().await?;
            Ok(done(format!("{n} dead letters deleted")))
        }
        other => Err(Error::invalid(format!(
            "no action named {:?} (pause, resume, step, back_off, lift, ack, release, redrive, redrive_all, purge)",
            other.chars().take(64).collect::<String>()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let pairs = query_pairs(&uri);
        assert_eq!(param(&pairs, "q"), Some("a b c"));
        assert_eq!(param(&pairs, "offset"), Some("5"));
        assert_eq!(param(&pairs, "bad"), Some("%zz"));
        let uri: Uri = "/?q=%4".parse().unwrap();
        assert_eq!(param(&query_pairs(&uri), "q"), Some("%4"));
    }
}
