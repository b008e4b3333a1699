//! How items, dead-letter reasons, flow limits and times are written for a
//! person (and items as JSON): the text shared by the subcommands.

use std::time::{Duration, UNIX_EPOCH};

use workjournal::Item;

/// `10/1s`: a rate limit as `rate-limit` takes it.
pub(crate) fn show_rate(r: &workjournal::RateLimit) -> String {
    format!(
        "{}/{}",
        r.permits,
        humantime::format_duration(Duration::from_millis(r.period_ms))
    )
}

/// One flow's limits as a tab-separated line: flow, rate, cap, back-off
/// end, pending, held, and `held` while the limits hold the flow.
pub(crate) fn limit_line(l: &workjournal::FlowLimits) -> String {
    format!(
        "{}\trate={}\tconcurrency={}\tbackoff_until={}\tpending={}\theld={}\t{}",
        show_flow(&l.flow),
        l.rate
            .map(|r| format!("{} (used {})", show_rate(&r), l.permits_used))
            .unwrap_or_else(|| "-".to_string()),
        l.concurrency
            .map(|k| k.to_string())
            .unwrap_or_else(|| "-".to_string()),
        l.backoff_until_ms
            .map(rfc3339)
            .unwrap_or_else(|| "-".to_string()),
        l.pending,
        l.held,
        if l.blocked { "blocked" } else { "running" }
    )
}

/// A flow's name for a table: `-` for the default flow.
pub(crate) fn show_flow(flow: &str) -> &str {
    if flow.is_empty() { "-" } else { flow }
}

/// The summary of a failure text or dead-letter reason for a terminal: its
/// first line, tabs and carriage returns as spaces and every other control
/// character escaped, so a command's stderr cannot move the cursor, retitle
/// the terminal or add lines to a one-line message (SPEC section 9).
pub(crate) fn reason_line(reason: &str) -> String {
    let first = reason.lines().next().unwrap_or_default();
    let mut out = String::with_capacity(first.len());
    for c in first.chars() {
        match c {
            '\t' | '\r' => out.push(' '),
            c if c.is_control() => out.extend(c.escape_default()),
            c => out.push(c),
        }
    }
    out
}

/// The payload as one line of at most 80 characters, control characters
/// escaped.
pub(crate) fn preview(payload: &[u8]) -> String {
    let text = String::from_utf8_lossy(payload);
    let mut out = String::new();
    for (i, c) in text.chars().enumerate() {
        if i == 80 {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// An item as JSON: `payload` is its text when the bytes are UTF-8 (else
/// null) and `payload_base64` always the bytes, so no payload is altered
/// (SPEC section 9).
pub(crate) fn item_json(item: &Item) -> serde_json::Value {
    use base64::Engine;
    serde_json::json!({
        "id": item.id,
        "flow": item.flow,
        "payload": std::str::from_utf8(&item.payload).ok(),
        "payload_base64": base64::engine::general_purpose::STANDARD.encode(&item.payload),
        "payload_bytes": item.payload.len(),
        "deliveries": item.deliveries,
        "enqueued_at_ms": item.enqueued_at_ms,
        "priority": item.priority,
        "cost": item.cost,
    })
}

/// A time in ms since the Unix epoch as RFC 3339, whole seconds.
pub(crate) fn rfc3339(ms: u64) -> String {
    let t = UNIX_EPOCH + Duration::from_millis(ms);
    humantime::format_rfc3339_seconds(t).to_string()
}
