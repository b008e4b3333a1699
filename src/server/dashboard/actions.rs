//! `POST /ui/action`: the page's writes, one small function per action.
//! The body is JSON (a cross-site form cannot send one); read-only mode
//! refuses every action.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::Response;
use serde::{Deserialize, Serialize};

use super::api::{ShownItem, reply};
use super::auth::LetIn;
use super::{
    Access, BACK_OFF_DEFAULT, BACK_OFF_MAX, Dash, REDRIVE_ALL_MAX, error_response, read_body,
};
use crate::browse::{ItemState, ListQuery, ListedItem};
use crate::error::{Error, Result};
use crate::item::{ItemUpdate, Receipt};
use crate::limit::FlowLimit;
use crate::queue::{BoxQueue, WorkQueue};
use crate::schedule::ScheduleQueue;
use crate::wire::{ErrorBody, WireReceipt};

/// The largest action body read, in bytes.
const ACTION_BYTES: usize = 64 * 1024;
/// How long the action body may take to arrive.
const ACTION_BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// The body of `POST /ui/action`.
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
    /// For `pause_schedule` and `resume_schedule`: the schedule's name.
    #[serde(default)]
    schedule: Option<String>,
    /// For `priority`: the new tier, 0 to 255.
    #[serde(default)]
    priority: Option<u8>,
}

impl Action {
    /// The flow the action names, which it needs.
    fn flow(&self) -> Result<&str> {
        self.flow
            .as_deref()
            .ok_or_else(|| Error::invalid(format!("{} needs a flow", self.action)))
    }

    /// The schedule the action names, which it needs.
    fn schedule(&self) -> Result<&str> {
        self.schedule
            .as_deref()
            .ok_or_else(|| Error::invalid(format!("{} needs a schedule", self.action)))
    }

    /// The receipt the action names, which it needs.
    fn receipt(&self) -> Result<Receipt> {
        self.receipt
            .map(Into::into)
            .ok_or_else(|| Error::invalid(format!("{} needs a receipt", self.action)))
    }
}

/// The item `step` handed to the page, and its receipt.
#[derive(Debug, Serialize)]
struct Stepped {
    item: ShownItem,
    receipt: WireReceipt,
}

/// The reply to an action.
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

/// `POST /ui/action` with a JSON [`Action`].
pub(super) async fn action(
    LetIn(access): LetIn,
    State(dash): State<Arc<Dash>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    if dash.read_only {
        return error_response(ErrorBody::plain(
            "forbidden",
            "this dashboard is read-only (workjournal serve --read-only)",
        ));
    }
    if access == Access::Read {
        return error_response(ErrorBody::plain(
            "forbidden",
            "this token is read-only (for looking); open the dashboard with the full token to act",
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
    let bytes = match read_body(body, ACTION_BYTES, ACTION_BODY_TIMEOUT).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    match serde_json::from_slice(&bytes) {
        Ok(a) => reply(run_action(&dash.queue, a).await),
        Err(e) => error_response(ErrorBody::plain(
            "bad_request",
            format!("not an action: {e}"),
        )),
    }
}

async fn run_action(q: &BoxQueue, a: Action) -> Result<Done> {
    match a.action.as_str() {
        "pause" => pause(q, a.flow()?).await,
        "resume" => resume(q, a.flow()?).await,
        "step" => step(q, a.flow()?).await,
        "back_off" => back_off(q, a.flow()?, a.seconds).await,
        "lift" => lift(q, a.flow()?).await,
        "ack" => ack(q, a.receipt()?).await,
        "release" => release(q, a.receipt()?).await,
        "redrive" => redrive(q, &a.ids).await,
        "cancel" => cancel(q, &a.ids).await,
        "promote" => promote(q, &a.ids).await,
        "priority" => priority(q, &a.ids, a.priority).await,
        "remove" => remove(q, &a.ids).await,
        "redrive_all" => redrive_all(q).await,
        "purge" => purge(q).await,
        "pause_schedule" => pause_schedule(q, a.schedule()?, true).await,
        "resume_schedule" => pause_schedule(q, a.schedule()?, false).await,
        other => Err(Error::invalid(format!(
            "no action named {:?} (pause, resume, step, back_off, lift, ack, release, redrive, redrive_all, purge, cancel, priority, promote, remove, pause_schedule, resume_schedule)",
            other.chars().take(64).collect::<String>()
        ))),
    }
}

/// SPEC 13: pause or resume a schedule.
async fn pause_schedule(q: &BoxQueue, name: &str, pause: bool) -> Result<Done> {
    let found = if pause {
        q.pause_schedule(name).await?
    } else {
        q.resume_schedule(name).await?
    };
    if !found {
        return Err(Error::invalid(format!("no schedule named {name:?}")));
    }
    let what = if pause { "paused" } else { "resumed" };
    Ok(done(format!("schedule {name:?} {what}")))
}

async fn pause(q: &BoxQueue, flow: &str) -> Result<Done> {
    q.pause(flow).await?;
    Ok(done(format!("flow {flow:?} paused")))
}

async fn resume(q: &BoxQueue, flow: &str) -> Result<Done> {
    let n = q.resume(flow).await?;
    Ok(done(format!(
        "flow {flow:?} resumed: {n} parked items back in the backlog"
    )))
}

/// Hand the flow's oldest parked item to the page, pending under it.
async fn step(q: &BoxQueue, flow: &str) -> Result<Done> {
    let Some(c) = q.step(flow).await? else {
        return Ok(done(format!("flow {flow:?} has nothing parked")));
    };
    Ok(Done {
        message: format!(
            "item {} of flow {flow:?} is pending under this page: ack it or give it back",
            c.item.id
        ),
        stepped: Some(Stepped {
            receipt: c.receipt.into(),
            item: ListedItem::pending(c.item, c.claimed_at_ms, c.claimed_at_ms, None).into(),
        }),
    })
}

/// Back the flow off for `seconds` ([`BACK_OFF_DEFAULT`] when `None`, at
/// most [`BACK_OFF_MAX`]).
async fn back_off(q: &BoxQueue, flow: &str, seconds: Option<u64>) -> Result<Done> {
    let d = seconds.map_or(BACK_OFF_DEFAULT, Duration::from_secs);
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

async fn lift(q: &BoxQueue, flow: &str) -> Result<Done> {
    q.set_flow_limit(flow, FlowLimit::BackOffUntil(None))
        .await?;
    Ok(done(format!("flow {flow:?}: back-off lifted")))
}

async fn ack(q: &BoxQueue, r: Receipt) -> Result<Done> {
    q.ack(r).await?;
    Ok(done(format!("item {} acknowledged", r.id)))
}

async fn release(q: &BoxQueue, r: Receipt) -> Result<Done> {
    let now = q.now_ms().await?;
    q.release(r, now).await?;
    Ok(done(format!("item {} given back", r.id)))
}

/// Redrive the dead letters `ids`, naming those that are not (any more).
async fn redrive(q: &BoxQueue, ids: &[u64]) -> Result<Done> {
    if ids.is_empty() {
        return Err(Error::invalid("redrive needs ids"));
    }
    let mut moved = 0u64;
    let mut missing = Vec::new();
    for id in ids {
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

/// SPEC 3, Cancelling: cancel the items `ids`, saying what became of each.
async fn cancel(q: &BoxQueue, ids: &[u64]) -> Result<Done> {
    let ids = needs_ids("cancel", ids)?;
    let (mut ended, mut marked, mut missing) = (Vec::new(), Vec::new(), Vec::new());
    for id in ids {
        match q.cancel(*id).await? {
            crate::item::CancelOutcome::Ended => ended.push(id.to_string()),
            crate::item::CancelOutcome::Marked => marked.push(id.to_string()),
            crate::item::CancelOutcome::NotFound => missing.push(id.to_string()),
        }
    }
    let mut parts = Vec::new();
    if !ended.is_empty() {
        parts.push(format!("cancelled {}", ended.join(", ")));
    }
    if !marked.is_empty() {
        parts.push(format!(
            "cancelling {} (running: its worker stops it)",
            marked.join(", ")
        ));
    }
    if !missing.is_empty() {
        parts.push(format!("not in the queue: {}", missing.join(", ")));
    }
    Ok(done(parts.join("; ")))
}

/// SPEC 3, Updating: give the waiting items `ids` the priority tier
/// `tier`, each re-ranked where it waits.
async fn priority(q: &BoxQueue, ids: &[u64], tier: Option<u8>) -> Result<Done> {
    let ids = needs_ids("priority", ids)?;
    let tier = tier.ok_or_else(|| Error::invalid("priority needs a priority (0 to 255)"))?;
    each_id(
        ids,
        &format!("priority {tier}: "),
        "not in the queue",
        |id| q.update(id, ItemUpdate::new().priority(tier)),
    )
    .await
}

/// SPEC 3, Timers: make the delayed items `ids` due now.
async fn promote(q: &BoxQueue, ids: &[u64]) -> Result<Done> {
    let ids = needs_ids("promote", ids)?;
    each_id(ids, "due now: ", "not delayed (any more)", |id| {
        q.promote(id)
    })
    .await
}

/// SPEC 3, Removing: delete the items `ids` unrun (a pending one is
/// refused with `InvalidInput`, before any is removed).
async fn remove(q: &BoxQueue, ids: &[u64]) -> Result<Done> {
    let ids = needs_ids("remove", ids)?;
    each_id(ids, "removed ", "not in the queue", |id| q.remove(id)).await
}

/// Call `call` for each of `ids` in turn, stopping at the first error;
/// the message lists the ids it answered true for after `did`, and the
/// others after `; {not}: `.
async fn each_id<F, Fut>(ids: &[u64], did: &str, not: &str, mut call: F) -> Result<Done>
where
    F: FnMut(u64) -> Fut,
    Fut: std::future::Future<Output = Result<bool>>,
{
    let (mut yes, mut no) = (Vec::new(), Vec::new());
    for &id in ids {
        if call(id).await? {
            yes.push(id.to_string());
        } else {
            no.push(id.to_string());
        }
    }
    let mut m = format!("{did}{}", yes.join(", "));
    if !no.is_empty() {
        m.push_str(&format!("; {not}: {}", no.join(", ")));
    }
    Ok(done(m))
}

/// `ids`, refused when empty or longer than a page.
fn needs_ids<'a>(action: &str, ids: &'a [u64]) -> Result<&'a [u64]> {
    if ids.is_empty() {
        return Err(Error::invalid(format!("{action} needs ids")));
    }
    if ids.len() > crate::MAX_LIST_LIMIT {
        return Err(Error::invalid(format!(
            "{action} takes at most {} ids at once",
            crate::MAX_LIST_LIMIT
        )));
    }
    Ok(ids)
}

/// Redrive dead letters a page at a time, up to [`REDRIVE_ALL_MAX`].
async fn redrive_all(q: &BoxQueue) -> Result<Done> {
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

async fn purge(q: &BoxQueue) -> Result<Done> {
    let n = q.purge_dead_letters().await?;
    Ok(done(format!("{n} dead letters deleted")))
}
