//! Requests and replies of the listing routes, `list` and `find` (SPEC
//! 12.1).

use serde::{Deserialize, Serialize};

use super::{Base64, WireItem};

/// `list`: one page of one state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ListRequest {
    /// The state to list.
    pub state: crate::browse::ItemState,
    /// Positions to skip (the previous page's `next_offset`).
    #[serde(default)]
    pub offset: u64,
    /// The most items to return (at least 1; lowered to
    /// [`MAX_LIST_LIMIT`](crate::MAX_LIST_LIMIT)).
    pub limit: usize,
    /// Keep only items whose payload holds these bytes, base64.
    #[serde(default)]
    pub contains: Option<Base64>,
}

impl From<&crate::browse::ListQuery> for ListRequest {
    fn from(q: &crate::browse::ListQuery) -> Self {
        ListRequest {
            state: q.state,
            offset: q.offset,
            limit: q.limit,
            contains: q.contains.clone().map(Base64),
        }
    }
}

impl From<ListRequest> for crate::browse::ListQuery {
    fn from(r: ListRequest) -> Self {
        let q = crate::browse::ListQuery::new(r.state)
            .offset(r.offset)
            .limit(r.limit);
        match r.contains {
            Some(c) => q.contains(c.0),
            None => q,
        }
    }
}

/// An item with its state, as `list` and `find` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
pub struct WireListedItem {
    /// The item.
    pub item: WireItem,
    /// Its state.
    pub state: crate::browse::ItemState,
    /// Pending: when claimed, ms since the Unix epoch.
    pub claimed_at_ms: Option<u64>,
    /// Pending: the claim or the latest touch, ms since the Unix epoch.
    /// Absent (a server from before) reads as `claimed_at_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_touch_ms: Option<u64>,
    /// Pending: the consumer holding it, where known.
    pub consumer: Option<String>,
    /// Dead letter: why.
    pub reason: Option<String>,
    /// Dead letter: when, ms since the Unix epoch.
    pub failed_at_ms: Option<u64>,
    /// Backlog or due: waits in its flow's held lane (SPEC 3, Flow limits;
    /// SPEC 12.1). Absent reads as `false`.
    #[serde(default)]
    pub held: bool,
    /// Pending: marked cancelled (SPEC 3, Cancelling); its holder's next
    /// call ends it. Absent (a server from before) reads as `false`.
    #[serde(default)]
    pub cancelling: bool,
    /// Completed or cancelled: when it finished, ms since the Unix epoch
    /// (SPEC 3, History). Absent in every other state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at_ms: Option<u64>,
    /// Completed: the result its ack carried, base64. Absent in every
    /// other state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Base64>,
}

impl From<crate::browse::ListedItem> for WireListedItem {
    fn from(l: crate::browse::ListedItem) -> Self {
        WireListedItem {
            item: l.item.into(),
            state: l.state,
            claimed_at_ms: l.claimed_at_ms,
            last_touch_ms: l.last_touch_ms,
            consumer: l.consumer,
            reason: l.reason,
            failed_at_ms: l.failed_at_ms,
            held: l.held,
            cancelling: l.cancelling,
            finished_at_ms: l.finished_at_ms,
            result: l.result.map(Base64),
        }
    }
}

impl From<WireListedItem> for crate::browse::ListedItem {
    fn from(w: WireListedItem) -> Self {
        crate::browse::ListedItem {
            item: w.item.into(),
            state: w.state,
            claimed_at_ms: w.claimed_at_ms,
            last_touch_ms: w.last_touch_ms.or(w.claimed_at_ms),
            consumer: w.consumer,
            reason: w.reason,
            failed_at_ms: w.failed_at_ms,
            held: w.held,
            cancelling: w.cancelling,
            finished_at_ms: w.finished_at_ms,
            result: w.result.map(|r| r.0),
        }
    }
}

/// Reply of `list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
pub struct ItemPageReply {
    /// The items, in the state's order.
    pub items: Vec<WireListedItem>,
    /// Where to read on, or `null` at the end of the state.
    pub next_offset: Option<u64>,
}

impl From<crate::browse::ItemPage> for ItemPageReply {
    fn from(p: crate::browse::ItemPage) -> Self {
        ItemPageReply {
            items: p.items.into_iter().map(Into::into).collect(),
            next_offset: p.next_offset,
        }
    }
}

impl From<ItemPageReply> for crate::browse::ItemPage {
    fn from(r: ItemPageReply) -> Self {
        crate::browse::ItemPage::new(r.items.into_iter().map(Into::into).collect(), r.next_offset)
    }
}

/// Reply of `find`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
pub struct FoundReply {
    /// The item with its state, or `null`.
    pub item: Option<WireListedItem>,
}
