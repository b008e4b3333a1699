//! `GET /`: the page, with the counts of this moment already in it
//! (`assets/index.html` with its placeholders filled in).

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, Uri, header};
use axum::response::{IntoResponse, Response};

use super::api::{param, query_pairs};
use super::auth::{let_in, login, unauthorized};
use super::{Dash, error_response};
use crate::queue::WorkQueue;
use crate::wire::ErrorBody;

const INDEX_HTML: &str = include_str!("../assets/index.html");

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

/// `GET /`: the page for a caller let in; `/?token=<token>` sets the
/// cookie and sends the browser back to `/`.
pub(super) async fn index(State(dash): State<Arc<Dash>>, uri: Uri, headers: HeaderMap) -> Response {
    if !let_in(&headers, &dash.token) {
        let pairs = query_pairs(&uri);
        return login(param(&pairs, "token"), &dash.token).unwrap_or_else(unauthorized);
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
