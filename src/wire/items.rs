//! The values requests and replies carry: new items, items, claims,
//! receipts, dead letters, add results, claim lanes.

use serde::{Deserialize, Serialize};

use super::{Base64, is_one, one_permit};
use crate::item::{Added, ClaimFrom, Claimed, DeadLetter, Item, Lane, NewItem, Receipt};

/// An item to add.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct WireNewItem {
    /// The flow; default `""`.
    #[serde(default)]
    pub flow: String,
    /// The payload bytes, base64.
    pub payload: Base64,
    /// The deduplication key, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedup_key: Option<String>,
    /// The priority tier, 0 to 255 (higher runs earlier; SPEC section 3,
    /// Priority). Default 0.
    #[serde(default)]
    pub priority: u8,
    /// Rate-limit permits a claim of the item takes (SPEC section 3, Flow
    /// limits). Default 1.
    #[serde(default = "one_permit", skip_serializing_if = "is_one")]
    #[cfg_attr(feature = "server", schemars(extend("default" = 1)))]
    pub cost: u32,
}

impl From<NewItem> for WireNewItem {
    fn from(n: NewItem) -> Self {
        WireNewItem {
            flow: n.flow,
            payload: Base64(n.payload),
            dedup_key: n.dedup_key,
            priority: n.priority,
            cost: n.cost.max(1),
        }
    }
}

impl From<WireNewItem> for NewItem {
    fn from(w: WireNewItem) -> Self {
        NewItem {
            flow: w.flow,
            payload: w.payload.0,
            dedup_key: w.dedup_key,
            priority: w.priority,
            cost: w.cost.max(1),
        }
    }
}

/// Which lanes a claim may take from, as on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum WireClaimFrom {
    /// Due lane, then backlog.
    #[default]
    All,
    /// Due lane only.
    DueOnly,
}

/// A receipt as on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct WireReceipt {
    /// The item's id.
    pub id: u64,
    /// The delivery number of the claim.
    pub delivery: u32,
    /// The claim's lease number.
    pub lease: u64,
}

impl From<Receipt> for WireReceipt {
    fn from(r: Receipt) -> Self {
        WireReceipt {
            id: r.id,
            delivery: r.delivery,
            lease: r.lease,
        }
    }
}

impl From<WireReceipt> for Receipt {
    fn from(r: WireReceipt) -> Self {
        Receipt {
            id: r.id,
            delivery: r.delivery,
            lease: r.lease,
        }
    }
}

/// An item as on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
pub struct WireItem {
    /// The item's id.
    pub id: u64,
    /// Its flow.
    pub flow: String,
    /// Its payload, base64.
    pub payload: Base64,
    /// When it was added, ms since the Unix epoch.
    pub enqueued_at_ms: u64,
    /// Its due time, ms since the Unix epoch, if delayed or retried.
    pub not_before_ms: Option<u64>,
    /// How many times it was handed out.
    pub deliveries: u32,
    /// Its priority tier (SPEC section 3, Priority); 0 when a server too old
    /// to send it leaves it out.
    #[serde(default)]
    pub priority: u8,
    /// Its cost in rate-limit permits (SPEC section 3, Flow limits); 1 when
    /// left out.
    #[serde(default = "one_permit")]
    pub cost: u32,
}

impl From<Item> for WireItem {
    fn from(i: Item) -> Self {
        WireItem {
            id: i.id,
            flow: i.flow,
            payload: Base64(i.payload),
            enqueued_at_ms: i.enqueued_at_ms,
            not_before_ms: i.not_before_ms,
            deliveries: i.deliveries,
            priority: i.priority,
            cost: i.cost.max(1),
        }
    }
}

impl From<WireItem> for Item {
    fn from(w: WireItem) -> Self {
        Item {
            id: w.id,
            flow: w.flow,
            payload: w.payload.0,
            enqueued_at_ms: w.enqueued_at_ms,
            not_before_ms: w.not_before_ms,
            deliveries: w.deliveries,
            priority: w.priority,
            cost: w.cost.max(1),
        }
    }
}

/// A lane as on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum WireLane {
    Backlog,
    Due,
    Parked,
}

/// A claimed item as on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
pub struct WireClaimed {
    /// The item.
    pub item: WireItem,
    /// The lane it was first claimed from.
    pub lane: WireLane,
    /// When this claim happened, ms since the Unix epoch.
    pub claimed_at_ms: u64,
    /// The receipt for ack, touch, retry, park and dead_letter.
    pub receipt: WireReceipt,
}

impl From<Claimed> for WireClaimed {
    fn from(c: Claimed) -> Self {
        WireClaimed {
            item: c.item.into(),
            lane: match c.lane {
                Lane::Backlog => WireLane::Backlog,
                Lane::Due => WireLane::Due,
                Lane::Parked => WireLane::Parked,
            },
            claimed_at_ms: c.claimed_at_ms,
            receipt: c.receipt.into(),
        }
    }
}

impl From<WireClaimed> for Claimed {
    fn from(w: WireClaimed) -> Self {
        Claimed {
            item: w.item.into(),
            lane: match w.lane {
                WireLane::Backlog => Lane::Backlog,
                WireLane::Due => Lane::Due,
                WireLane::Parked => Lane::Parked,
            },
            claimed_at_ms: w.claimed_at_ms,
            receipt: w.receipt.into(),
        }
    }
}

/// A dead letter as on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
pub struct WireDeadLetter {
    /// The item as it was when it failed.
    pub item: WireItem,
    /// Why it was given up on.
    pub reason: String,
    /// When, ms since the Unix epoch.
    pub failed_at_ms: u64,
}

impl From<DeadLetter> for WireDeadLetter {
    fn from(d: DeadLetter) -> Self {
        WireDeadLetter {
            item: d.item.into(),
            reason: d.reason,
            failed_at_ms: d.failed_at_ms,
        }
    }
}

impl From<WireDeadLetter> for DeadLetter {
    fn from(w: WireDeadLetter) -> Self {
        DeadLetter {
            item: w.item.into(),
            reason: w.reason,
            failed_at_ms: w.failed_at_ms,
        }
    }
}

/// The result of an add.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
pub struct WireAdded {
    /// The item's id (the first item's for a duplicate).
    pub id: u64,
    /// Whether nothing was journaled because of the dedup key.
    pub duplicate: bool,
}

impl From<Added> for WireAdded {
    fn from(a: Added) -> Self {
        WireAdded {
            id: a.id,
            duplicate: a.duplicate,
        }
    }
}

impl From<WireAdded> for Added {
    fn from(a: WireAdded) -> Self {
        Added {
            id: a.id,
            duplicate: a.duplicate,
        }
    }
}

impl From<WireClaimFrom> for ClaimFrom {
    fn from(w: WireClaimFrom) -> Self {
        match w {
            WireClaimFrom::All => ClaimFrom::All,
            WireClaimFrom::DueOnly => ClaimFrom::DueOnly,
        }
    }
}

impl From<ClaimFrom> for WireClaimFrom {
    fn from(c: ClaimFrom) -> Self {
        match c {
            ClaimFrom::All => WireClaimFrom::All,
            ClaimFrom::DueOnly => WireClaimFrom::DueOnly,
        }
    }
}
