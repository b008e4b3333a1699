//! `GET /`: the page, with the counts of this moment already in it, as a
//! `maud` template (which escapes every value it splices in). The ids and
//! classes here are what `assets/app.js` and the style sheet look for.

use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use maud::{DOCTYPE, Markup, html};
use serde::Deserialize;

use super::Access;
use super::auth::{let_in, login, unauthorized};
use super::{Dash, error_response};
use crate::item::Stats;
use crate::queue::WorkQueue;
use crate::wire::ErrorBody;

/// The query string of `GET /`.
#[derive(Debug, Deserialize)]
pub(super) struct PageQuery {
    /// The server's token, once: answered with the cookie and a redirect.
    token: Option<String>,
}

/// `GET /`: the page for a caller let in; `/?token=<token>` sets the
/// cookie and sends the browser back to `/`.
pub(super) async fn index(
    State(dash): State<Arc<Dash>>,
    headers: HeaderMap,
    query: Result<Query<PageQuery>, QueryRejection>,
) -> Response {
    let Some(access) = let_in(&headers, &dash) else {
        let given = query.ok().and_then(|Query(q)| q.token);
        return login(given.as_deref(), &dash).unwrap_or_else(|| {
            if wants_html(&headers) {
                sign_in_page()
            } else {
                unauthorized()
            }
        });
    };
    let stats = match dash.queue.stats().await {
        Ok(s) => s,
        Err(e) => return error_response(ErrorBody::from_error(&e)),
    };
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        // The read-only token sees the page as `--read-only` shows it.
        page(&stats, dash.read_only || access == Access::Read).into_string(),
    )
        .into_response()
}

/// Whether the caller is a browser asking for a page (`Accept: text/html`).
fn wants_html(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("text/html"))
}

/// 401 for a browser without the token: a page saying how to get in (SPEC
/// 12.2), not the JSON error body the API's callers read.
fn sign_in_page() -> Response {
    let body = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { "workjournal: unauthorized" }
            }
            body {
                h1 { "unauthorized" }
                p {
                    "This dashboard needs the token of its "
                    code { "workjournal serve" }
                    ": open "
                    code { "/?token=<token>" }
                    " once (the token is in the token file the server named at start, by default the socket path with "
                    code { ".token" }
                    "); the page then keeps it in a cookie."
                }
            }
        }
    };
    (
        axum::http::StatusCode::UNAUTHORIZED,
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body.into_string(),
    )
        .into_response()
}

/// One count of the row at the top: `#count-{id}`, its value in `<b>`.
fn count_card(id: &str, label: &str, value: &str) -> Markup {
    html! {
        div.count id={ "count-" (id) } {
            b { (value) }
            span { (label) }
        }
    }
}

/// The counts per state, in the order the page shows them.
fn counts(stats: &Stats) -> Markup {
    let oldest = stats
        .oldest_pending_age_ms
        .map_or_else(|| "–".to_string(), |ms| format!("{} s", ms / 1000));
    html! {
        (count_card("backlog", "backlog (ready)", &stats.backlog.to_string()))
        (count_card("due", "of which due", &stats.due.to_string()))
        (count_card("pending", "pending", &stats.pending.to_string()))
        (count_card("delayed", "delayed", &stats.delayed.to_string()))
        (count_card("parked", "parked", &stats.parked.to_string()))
        (count_card("dead_letters", "dead letters", &stats.dead_letters.to_string()))
        (count_card("oldest", "oldest pending", &oldest))
    }
}

/// The whole page; the write controls only when not `read_only`.
fn page(stats: &Stats, read_only: bool) -> Markup {
    let title = if stats.durable {
        "queue"
    } else {
        "memory queue"
    };
    let mode = if read_only { "read-only" } else { "read-write" };
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { "workjournal · " (title) }
                link rel="stylesheet" href="/assets/app.css";
            }
            body data-read-only=(read_only) {
                header {
                    h1 { "workjournal " small { (title) } }
                    span #mode .badge { (mode) }
                    span #updated .muted {}
                }
                div #error role="alert" hidden {}
                div #notice role="status" hidden {}
                main {
                    section #counts aria-label="Counts per state" { (counts(stats)) }
                    (charts())
                    (flows(read_only))
                    (schedules())
                    (items(read_only))
                }
                footer.muted { "Refreshes every 1.5 s. " a href="/metrics" { "/metrics" } }
                script src="/assets/app.js" {}
            }
        }
    }
}

/// The two charts, which the script draws.
fn charts() -> Markup {
    html! {
        section {
            h2 { "Throughput " small.muted { "per second, last hour" } }
            div.legend {
                span.k.added { "added" }
                span.k.acked { "acked" }
                span.k.failed { "failed" }
            }
            svg #chart-rate .chart viewBox="0 0 600 120" preserveAspectRatio="none" role="img"
                aria-label="added, acked and failed per second" {}
            h2 { "Backlog " small.muted { "ready items, last hour" } }
            svg #chart-backlog .chart viewBox="0 0 600 120" preserveAspectRatio="none" role="img"
                aria-label="backlog" {}
        }
    }
}

/// The flow table, which the script fills, and the pause form.
fn flows(read_only: bool) -> Markup {
    html! {
        section {
            h2 { "Flows" }
            @if !read_only {
                form #pause-form {
                    input #pause-flow type="text" placeholder="flow name" aria-label="flow to pause";
                    button type="submit" { "Pause flow" }
                }
            }
            div.scroll {
                table #flows {
                    thead {
                        tr {
                            th { "flow" }
                            th { "state" }
                            th.num { "backlog" }
                            th.num { "parked" }
                            th { "limits" }
                            th {}
                        }
                    }
                    tbody {}
                }
            }
            p.muted #flows-note {}
            div #stepped hidden {}
        }
    }
}

/// The schedules table (SPEC 13), which the script fills; its pause and
/// resume buttons only when not read-only.
fn schedules() -> Markup {
    html! {
        section {
            h2 { "Schedules" }
            div.scroll {
                table #schedules {
                    thead {
                        tr {
                            th { "schedule" }
                            th { "spec" }
                            th { "flow" }
                            th { "state" }
                            th { "next fire" }
                            th { "last fired" }
                            th.num { "fired" }
                            th.num { "skipped" }
                            th {}
                        }
                    }
                    tbody {}
                }
            }
            p.muted #schedules-note {}
        }
    }
}

/// The item tabs, the search form, the dead-letter controls and the
/// item table with its pager, which the script fills.
fn items(read_only: bool) -> Markup {
    let tabs = [
        ("pending", "pending"),
        ("delayed", "delayed"),
        ("dead_letter", "dead letters"),
        ("backlog", "backlog"),
        ("due", "due"),
        ("parked", "parked"),
        ("completed", "completed"),
        ("cancelled", "cancelled"),
    ];
    html! {
        section {
            h2 { "Items" }
            nav #tabs role="tablist" {
                @for (i, (state, label)) in tabs.iter().enumerate() {
                    button data-state=(state) class=[(i == 0).then_some("on")] { (label) }
                }
            }
            form #search autocomplete="off" {
                input #search-text type="search" placeholder="id or payload text"
                    aria-label="search by id or payload text";
                button type="submit" { "Search" }
                label { input #hex type="checkbox"; " hex" }
            }
            @if !read_only {
                div #dead-controls hidden {
                    button #redrive-selected { "Redrive selected" }
                    " "
                    button #redrive-all { "Redrive all" }
                    " "
                    button #purge .danger { "Purge dead letters" }
                }
            }
            div.scroll {
                table #items {
                    thead {}
                    tbody {}
                }
            }
            div.pager {
                button #prev disabled { "← newer" }
                span #page-info .muted {}
                button #next disabled { "older →" }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONTROLS: [&str; 5] = [
        "id=\"pause-form\"",
        "id=\"dead-controls\"",
        "id=\"redrive-selected\"",
        "id=\"redrive-all\"",
        "id=\"purge\"",
    ];

    #[test]
    fn the_page_has_the_counts_and_the_controls() {
        let stats = Stats {
            backlog: 3,
            dead_letters: 2,
            oldest_pending_age_ms: Some(65_400),
            durable: true,
            ..Stats::default()
        };
        let rw = page(&stats, false).into_string();
        assert!(
            rw.contains(
                "<div class=\"count\" id=\"count-backlog\"><b>3</b><span>backlog (ready)</span></div>"
            ),
            "{rw}"
        );
        assert!(rw.contains("id=\"count-dead_letters\"><b>2</b>"), "{rw}");
        assert!(rw.contains("id=\"count-oldest\"><b>65 s</b>"), "{rw}");
        assert!(rw.contains("<title>workjournal · queue</title>"), "{rw}");
        assert!(rw.contains("data-read-only=\"false\""), "{rw}");
        assert!(rw.contains(">read-write</span>"), "{rw}");
        for control in CONTROLS {
            assert!(rw.contains(control), "no {control}: {rw}");
        }
        let ro = page(&Stats::default(), true).into_string();
        assert!(
            ro.contains("<title>workjournal · memory queue</title>"),
            "{ro}"
        );
        assert!(ro.contains("data-read-only=\"true\""), "{ro}");
        assert!(ro.contains(">read-only</span>"), "{ro}");
        assert!(ro.contains("id=\"count-oldest\"><b>–</b>"), "{ro}");
        for control in CONTROLS {
            assert!(!ro.contains(control), "read-only page has {control}: {ro}");
        }
    }

    #[test]
    fn spliced_text_is_escaped() {
        let card = count_card("x", "<i>&\"", "1").into_string();
        assert_eq!(
            card,
            "<div class=\"count\" id=\"count-x\"><b>1</b><span>&lt;i&gt;&amp;&quot;</span></div>"
        );
    }
}
