//! The web dashboard of `workjournal serve --http` (SPEC 12.2) and the
//! `/metrics` endpoint (SPEC 12.3). Feature `dashboard`.
//!
//! One HTML page rendered here with the counts already in it
//! ([`page`]), a small script and a style sheet built into the binary
//! ([`assets`]), and a few JSON routes under `/ui/` that the script reads
//! every 1.5 s ([`api`]). Every route but the two static assets needs the
//! server's token ([`auth`]): an `Authorization: Bearer` header, or the
//! cookie that opening `/?token=<token>` once sets. Writes are
//! `POST /ui/action` with a JSON body (a cross-site form cannot send one)
//! and are refused, with their controls left out of the page, in
//! read-only mode ([`actions`]). [`sampling`] keeps the charts' history
//! and [`scrape`] renders `/metrics`.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::response::Response;
use axum::routing::{get, post};

use super::{Access, access_of, bearer_access, error_response, json_response, read_body, stopped};
use crate::metered::MeteredQueue;
use crate::queue::BoxQueue;
use crate::wire::ErrorBody;

mod actions;
mod api;
mod assets;
mod auth;
mod page;
mod sampling;
mod scrape;

pub(super) use sampling::sample;
pub(super) use scrape::{prometheus, render_metrics};

use sampling::History;

/// How often the server samples `stats` for the charts: every 2 s.
pub(crate) const SAMPLE_INTERVAL: Duration = Duration::from_secs(2);
/// How many samples the charts keep: one hour at [`SAMPLE_INTERVAL`].
pub(crate) const HISTORY_SAMPLES: usize = 1800;
/// The cookie that carries the token after `/?token=` (HttpOnly,
/// SameSite=Strict).
pub(crate) const TOKEN_COOKIE: &str = "workjournal_token";
/// How many items in claim order the flow table counts per flow.
pub(crate) const FLOW_SAMPLE: usize = 1000;
/// The payload bytes the page shows of each item (the rest is cut).
pub(crate) const PREVIEW_BYTES: usize = 256;
/// The most dead letters one "redrive all" moves; more take another click.
pub(crate) const REDRIVE_ALL_MAX: usize = 10_000;
/// The back-off of the flow table's "back off" control when the action
/// names no `seconds`: 30 s (SPEC 12.2).
pub(crate) const BACK_OFF_DEFAULT: Duration = Duration::from_secs(30);
/// The longest back-off one action sets: one day (SPEC 12.2).
pub(crate) const BACK_OFF_MAX: Duration = Duration::from_secs(86_400);
/// The `target` label the server gives `workjournal_forward_lag_items`
/// for the file it serves (SPEC 12.3): forwarding hands items to Redis.
#[cfg(feature = "forward")]
pub(crate) const FORWARD_LAG_TARGET: &str = "redis";

/// What the dashboard routes share.
#[derive(Debug)]
pub(super) struct Dash {
    queue: BoxQueue,
    metered: MeteredQueue<BoxQueue>,
    token: Arc<str>,
    /// The read-only token: lets a viewer in without the write controls.
    read_token: Option<Arc<str>>,
    read_only: bool,
    history: History,
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
    /// The dashboard of the queue that `metered` counts the calls of,
    /// let in with `token` (or `read_token`, read-only), refusing writes
    /// when `read_only`.
    pub(super) fn new(
        metered: MeteredQueue<BoxQueue>,
        token: Arc<str>,
        read_token: Option<Arc<str>>,
        read_only: bool,
        lag: Option<Lag>,
    ) -> Self {
        Dash {
            lag,
            queue: BoxQueue::new(metered.clone()),
            metered,
            token,
            read_token,
            read_only,
            history: History::default(),
        }
    }
}

/// The dashboard listener's routes.
pub(super) fn router(dash: Arc<Dash>) -> Router {
    Router::new()
        .route("/", get(page::index))
        .route("/assets/app.js", get(assets::app_js))
        .route("/assets/app.css", get(assets::app_css))
        .route("/metrics", get(scrape::metrics_route))
        .route("/ui/overview", get(api::overview))
        .route("/ui/items", get(api::items))
        .route("/ui/find", get(api::find))
        .route("/ui/action", post(actions::action))
        .fallback(not_found)
        .with_state(dash)
}

async fn not_found() -> Response {
    error_response(ErrorBody::plain(
        "not_found",
        "no such page; the dashboard is at /",
    ))
}
