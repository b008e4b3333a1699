//! Looking at a Redis queue: `stats` (`scripts/stats.lua`, SPEC 3,
//! Looking), and `list` and `find` (SPEC 12.1) in one read-only script
//! (`scripts/browse.lua`), so a page is one consistent look at the keys; a
//! ready lane reads on into the flows' held lanes (SPEC 3, Flow limits).

use std::sync::LazyLock;
use std::sync::atomic::Ordering;

use redis::Value;

use super::RedisQueue;
use super::reply::{self, array, at, bytes, int, opt_uint, text, uint};
use crate::browse::{ItemPage, ItemState, ListQuery, ListedItem, MAX_SEARCH_SCAN};
use crate::error::{Error, Result};
use crate::item::Stats;

static BROWSE: LazyLock<super::scripts::Script> =
    LazyLock::new(|| super::script(include_str!("scripts/browse.lua")));

/// The state an item hash's `st` field names.
fn state_of(st: &str) -> Result<ItemState> {
    Ok(match st {
        "backlog" => ItemState::Backlog,
        "due" => ItemState::Due,
        "delayed" => ItemState::Delayed,
        "pending" => ItemState::Pending,
        "parked" => ItemState::Parked,
        "dead" => ItemState::DeadLetter,
        "completed" => ItemState::Completed,
        "cancelled" => ItemState::Cancelled,
        other => {
            return Err(Error::Decode {
                what: "redis item state".into(),
                detail: format!("unknown state {other:?}"),
            });
        }
    })
}

/// `{id, flow, payload, enq, nb, dlv, st, ca, owner, reason, failed, pri,
/// cost, held, last touch, cancelling, finished, result}`.
fn listed(v: &Value) -> Result<ListedItem> {
    let item = reply::item(v, 11)?;
    let a = array(v, "listed item")?;
    let state = state_of(&text(at(a, 6, "listed item")?, "state")?)?;
    // SPEC 12.1: waits in its flow's held lane (SPEC 3, Flow limits).
    let held = match a.get(13) {
        None => false,
        Some(h) => text(h, "held")? == "1",
    };
    Ok(match state {
        ItemState::Pending => {
            let owner = text(at(a, 8, "listed item")?, "owner")?;
            let claimed_at = opt_uint(at(a, 7, "listed item")?, "claimed_at")?.unwrap_or(0);
            let touched = match a.get(14) {
                Some(v) => opt_uint(v, "last touch")?,
                None => None,
            };
            let marked = match a.get(15) {
                None => false,
                Some(c) => text(c, "cancelling")? == "1",
            };
            ListedItem::pending(
                item,
                claimed_at,
                touched.unwrap_or(claimed_at),
                (!owner.is_empty()).then_some(owner),
            )
            .cancelling(marked)
        }
        ItemState::DeadLetter => ListedItem::dead(
            item,
            String::from_utf8_lossy(&bytes(at(a, 9, "listed item")?, "reason")?).into_owned(),
            opt_uint(at(a, 10, "listed item")?, "failed_at")?.unwrap_or(0),
        ),
        ItemState::Backlog | ItemState::Due => ListedItem::ready(item, state, held),
        ItemState::Completed | ItemState::Cancelled => {
            let finished = opt_uint(at(a, 16, "listed item")?, "finished_at")?.unwrap_or(0);
            let result = match a.get(17) {
                Some(Value::Nil) | None => None,
                Some(v) => Some(bytes(v, "result")?),
            };
            let claimed = opt_uint(at(a, 7, "listed item")?, "claimed_at")?;
            ListedItem::finished(
                item,
                (state == ItemState::Completed).then(|| result.unwrap_or_default()),
                claimed,
                finished,
            )
        }
        other => ListedItem::new(item, other),
    })
}

impl RedisQueue {
    /// SPEC 3, Looking: `stats.lua`'s counts (the finished items kept
    /// too, SPEC 3, History).
    pub(super) async fn read_stats(&self) -> Result<Stats> {
        let v = self
            .run(
                "stats",
                &self.inner.scripts.stats,
                vec![self.retention_arg(true), self.retention_arg(false)],
                false,
            )
            .await?;
        let a = array(&v, "stats")?;
        // A count is never a reason for stats to fail: one made wrong by
        // keys changed behind the queue's back reads as 0 (SPEC 6, Redis
        // keys changed by hand).
        let n = |i: usize, what: &str| -> Result<u64> {
            Ok(u64::try_from(int(at(a, i, "stats")?, what)?).unwrap_or(0))
        };
        let now = n(7, "stats now")?;
        Ok(Stats {
            backlog: n(0, "stats backlog")?,
            due: n(1, "stats due")?,
            pending: n(2, "stats pending")?,
            delayed: n(3, "stats delayed")?,
            parked: n(4, "stats parked")?,
            dead_letters: n(5, "stats dead letters")?,
            dead_letters_dropped: n(8, "stats dead letters dropped")?,
            limited: match a.get(9) {
                Some(v) => u64::try_from(int(v, "stats limited")?).unwrap_or(0),
                None => 0,
            },
            oldest_pending_age_ms: match a.get(10) {
                Some(v) => opt_uint(v, "stats oldest claim")?,
                None => opt_uint(at(a, 6, "stats")?, "stats oldest")?,
            }
            .map(|t| now.saturating_sub(t)),
            oldest_touch_age_ms: opt_uint(at(a, 6, "stats")?, "stats oldest touch")?
                .map(|t| now.saturating_sub(t)),
            durable: self.inner.durable.load(Ordering::Acquire),
            completed: n(11, "stats completed")?,
            cancelled: n(12, "stats cancelled")?,
        })
    }

    /// SPEC 12.1: one page of `query`'s state.
    pub(super) async fn list_items(&self, query: ListQuery) -> Result<ItemPage> {
        query.check()?;
        let budget = query.budget().min(MAX_SEARCH_SCAN);
        let args = vec![
            b"list".to_vec(),
            query.state.name().as_bytes().to_vec(),
            super::n_arg(usize::try_from(query.offset).unwrap_or(usize::MAX)),
            super::n_arg(budget),
            super::n_arg(query.effective_limit()),
            query.contains.clone().unwrap_or_default(),
            self.retention_arg(query.state == ItemState::Completed),
        ];
        let v = self.run("list", &BROWSE, args, false).await?;
        let a = array(&v, "list")?;
        let ended = uint(at(a, 0, "list")?, "list ended")? == 1;
        let looked = uint(at(a, 1, "list")?, "list looked")?;
        let items = array(at(a, 2, "list")?, "list items")?
            .iter()
            .map(listed)
            .collect::<Result<Vec<_>>>()?;
        let next = (!ended).then(|| query.offset.saturating_add(looked));
        Ok(ItemPage::new(items, next))
    }

    /// SPEC 12.1: item `id` and its state.
    pub(super) async fn find_item(&self, id: u64) -> Result<Option<ListedItem>> {
        let args = vec![
            b"find".to_vec(),
            id.to_string().into_bytes(),
            self.retention_arg(true),
            self.retention_arg(false),
        ];
        let v = self.run("find", &BROWSE, args, false).await?;
        array(&v, "find")?.first().map(listed).transpose()
    }
}
