//! Reading the items of one state page by page, and finding one item by id
//! (SPEC section 12.1): what a dashboard or an operator's tool needs to show
//! a queue without claiming anything.
//!
//! [`WorkQueue::list`](crate::WorkQueue::list) reads at most
//! [`MAX_LIST_LIMIT`] items per call and, when it filters by payload text, looks at
//! most at [`MAX_SEARCH_SCAN`] positions of the state, so no call copies or
//! walks a whole queue. [`WorkQueue::find`](crate::WorkQueue::find) is one
//! lookup by id.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::item::Item;

/// The most items one [`ListQuery`] returns; a larger `limit` is lowered
/// to it (SPEC 12.1).
pub const MAX_LIST_LIMIT: usize = 500;

/// The most positions of a state one [`ListQuery`] with
/// [`ListQuery::contains`] looks at (SPEC 12.1): a search reads on from
/// [`ItemPage::next_offset`].
pub const MAX_SEARCH_SCAN: usize = 5_000;

/// The state an item is in (SPEC section 2), as listed by
/// [`WorkQueue::list`](crate::WorkQueue::list).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum ItemState {
    /// Ready, in the backlog lane: claim (add) order, then the items held
    /// by flow limits, flow by flow ([`ListedItem::held`]).
    Backlog,
    /// Ready, in the due lane (timers whose time has come): claim order,
    /// then the items held by flow limits, flow by flow.
    Due,
    /// Waiting for `not_before_ms`: soonest first, then by id.
    Delayed,
    /// Claimed and not yet acknowledged: oldest claim first, then by id.
    Pending,
    /// Held for a paused flow: by flow name, then oldest first.
    Parked,
    /// Given up on: newest first, as `dead_letters`.
    DeadLetter,
    /// Finished by an ack, kept by `completed_retention` (SPEC 3,
    /// History): latest finished first, then by id, highest first.
    Completed,
    /// Finished by `cancel`, kept by `cancelled_retention` (SPEC 3,
    /// History): latest finished first, then by id, highest first.
    Cancelled,
}

impl ItemState {
    /// Where an item in a flow's held lane counts (SPEC 3, Flow limits):
    /// in the due lane (`due`) or the backlog it was held from.
    pub(crate) fn held(due: bool) -> ItemState {
        if due {
            ItemState::Due
        } else {
            ItemState::Backlog
        }
    }

    /// Every state, in the order above.
    pub const ALL: [ItemState; 8] = [
        ItemState::Backlog,
        ItemState::Due,
        ItemState::Delayed,
        ItemState::Pending,
        ItemState::Parked,
        ItemState::DeadLetter,
        ItemState::Completed,
        ItemState::Cancelled,
    ];

    /// Whether the state holds finished items, kept for a while (SPEC 3,
    /// History): `completed` and `cancelled`.
    pub fn is_finished(self) -> bool {
        matches!(self, ItemState::Completed | ItemState::Cancelled)
    }

    /// The state's name on the wire and in URLs (`backlog`, `due`,
    /// `delayed`, `pending`, `parked`, `dead_letter`, `completed`,
    /// `cancelled`).
    pub fn name(self) -> &'static str {
        match self {
            ItemState::Backlog => "backlog",
            ItemState::Due => "due",
            ItemState::Delayed => "delayed",
            ItemState::Pending => "pending",
            ItemState::Parked => "parked",
            ItemState::DeadLetter => "dead_letter",
            ItemState::Completed => "completed",
            ItemState::Cancelled => "cancelled",
        }
    }

    /// The state named `name` (as [`ItemState::name`] gives it).
    ///
    /// # Errors
    ///
    /// `InvalidInput` for any other name.
    pub fn parse(name: &str) -> Result<Self> {
        ItemState::ALL
            .into_iter()
            .find(|s| s.name() == name)
            .ok_or_else(|| {
                Error::invalid(format!(
                    "no state named {:?} (backlog, due, delayed, pending, parked, dead_letter, completed, cancelled)",
                    name.chars().take(64).collect::<String>()
                ))
            })
    }
}

/// What [`WorkQueue::list`](crate::WorkQueue::list) reads: one page of one
/// state (SPEC 12.1).
///
/// # Examples
///
/// ```
/// use workjournal::{ItemState, ListQuery};
/// let q = ListQuery::new(ItemState::DeadLetter).offset(50).limit(50).contains(b"invoice");
/// assert_eq!(q.get_limit(), 50);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListQuery {
    pub(crate) state: ItemState,
    pub(crate) offset: u64,
    pub(crate) limit: usize,
    pub(crate) contains: Option<Vec<u8>>,
}

impl ListQuery {
    /// The first page (offset 0, limit 50) of `state`.
    pub fn new(state: ItemState) -> Self {
        ListQuery {
            state,
            offset: 0,
            limit: 50,
            contains: None,
        }
    }

    /// Skip the first `offset` positions of the state's order (the
    /// previous page's [`ItemPage::next_offset`]).
    pub fn offset(mut self, offset: u64) -> Self {
        self.offset = offset;
        self
    }

    /// Return at most `limit` items (at least 1; lowered to
    /// [`MAX_LIST_LIMIT`]).
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = limit;
        self
    }

    /// Keep only items whose payload holds `needle` (bytes; an empty needle
    /// keeps every item), looking at most at [`MAX_SEARCH_SCAN`] positions.
    pub fn contains(mut self, needle: impl Into<Vec<u8>>) -> Self {
        let needle = needle.into();
        self.contains = (!needle.is_empty()).then_some(needle);
        self
    }

    /// The state to list.
    pub fn get_state(&self) -> ItemState {
        self.state
    }

    /// The positions to skip.
    pub fn get_offset(&self) -> u64 {
        self.offset
    }

    /// The largest page asked for.
    pub fn get_limit(&self) -> usize {
        self.limit
    }

    /// The payload text searched for, if any.
    pub fn get_contains(&self) -> Option<&[u8]> {
        self.contains.as_deref()
    }

    /// `InvalidInput` for a limit of 0 (SPEC 12.1).
    pub(crate) fn check(&self) -> Result<()> {
        if self.limit == 0 {
            return Err(Error::invalid("list limit must be at least 1"));
        }
        Ok(())
    }

    /// The limit as applied: at most [`MAX_LIST_LIMIT`].
    pub(crate) fn effective_limit(&self) -> usize {
        self.limit.clamp(1, MAX_LIST_LIMIT)
    }

    /// How many positions one call looks at, at most.
    pub(crate) fn budget(&self) -> usize {
        if self.contains.is_some() {
            MAX_SEARCH_SCAN
        } else {
            self.effective_limit()
        }
    }

    /// Whether `payload` passes the filter.
    pub(crate) fn keeps(&self, payload: &[u8]) -> bool {
        match &self.contains {
            None => true,
            Some(needle) => payload
                .windows(needle.len())
                .any(|w| w == needle.as_slice()),
        }
    }
}

/// One item as [`WorkQueue::list`](crate::WorkQueue::list) and
/// [`WorkQueue::find`](crate::WorkQueue::find) show it: the item, its
/// state, and what the state adds. Made by the queue only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ListedItem {
    /// The item (its payload whole).
    pub item: Item,
    /// Its state.
    pub state: ItemState,
    /// Pending: when it was claimed (ms since the Unix epoch, queue clock):
    /// the claim that handed it out, never moved by a `touch`.
    pub claimed_at_ms: Option<u64>,
    /// Pending: its last touch, the claim or the latest heartbeat
    /// (`touch`), ms since the Unix epoch (queue clock); the lease is
    /// stale `min_idle` after it (SPEC 3, Finishing).
    #[serde(default)]
    pub last_touch_ms: Option<u64>,
    /// Pending: the consumer holding it, where the backend knows one (the
    /// Redis consumer name); `None` on memory and embedded.
    pub consumer: Option<String>,
    /// Dead letter: why it was given up on.
    pub reason: Option<String>,
    /// Dead letter: when, ms since the Unix epoch.
    pub failed_at_ms: Option<u64>,
    /// Backlog or due: the item waits in its flow's held lane (SPEC 3,
    /// Flow limits: the flow has a limit record), listed after the shared
    /// lane's items (SPEC 12.1). `false` in every other state, and for an
    /// item of a limited flow still in the shared lane (no claim met it
    /// since the limit was set).
    #[serde(default)]
    pub held: bool,
    /// Pending: the item is marked cancelled (SPEC 3, Cancelling); its
    /// holder's next call ends it. `false` in every other state.
    #[serde(default)]
    pub cancelling: bool,
    /// Completed or cancelled: when it finished, ms since the Unix epoch
    /// (queue clock). With [`ListedItem::claimed_at_ms`] (the claim of the
    /// delivery that finished it, `None` for an item cancelled before it
    /// ran) and the item's `enqueued_at_ms`, the times of its life (SPEC
    /// 3, History).
    #[serde(default)]
    pub finished_at_ms: Option<u64>,
    /// Completed: the result its ack carried (empty for a plain `ack`).
    /// `None` in every other state.
    #[serde(default)]
    pub result: Option<Vec<u8>>,
}

impl ListedItem {
    /// An item in `state` with nothing more to say.
    pub(crate) fn new(item: Item, state: ItemState) -> Self {
        ListedItem {
            item,
            state,
            claimed_at_ms: None,
            last_touch_ms: None,
            consumer: None,
            reason: None,
            failed_at_ms: None,
            held: false,
            cancelling: false,
            finished_at_ms: None,
            result: None,
        }
    }

    /// A ready item (`state` backlog or due) waiting in its flow's held
    /// lane when `held` (SPEC 3, Flow limits).
    pub(crate) fn ready(item: Item, state: ItemState, held: bool) -> Self {
        ListedItem {
            held,
            ..ListedItem::new(item, state)
        }
    }

    /// A pending item claimed at `claimed_at_ms` by `consumer`, last
    /// touched at `last_touch_ms`.
    pub(crate) fn pending(
        item: Item,
        claimed_at_ms: u64,
        last_touch_ms: u64,
        consumer: Option<String>,
    ) -> Self {
        ListedItem {
            claimed_at_ms: Some(claimed_at_ms),
            last_touch_ms: Some(last_touch_ms),
            consumer,
            ..ListedItem::new(item, ItemState::Pending)
        }
    }

    /// This pending item, marked cancelled when `marked` (SPEC 3,
    /// Cancelling).
    pub(crate) fn cancelling(mut self, marked: bool) -> Self {
        self.cancelling = marked && self.state == ItemState::Pending;
        self
    }

    /// A dead letter.
    pub(crate) fn dead(item: Item, reason: String, failed_at_ms: u64) -> Self {
        ListedItem {
            reason: Some(reason),
            failed_at_ms: Some(failed_at_ms),
            ..ListedItem::new(item, ItemState::DeadLetter)
        }
    }

    /// A finished item kept by its state's retention (SPEC 3, History):
    /// `completed` with the ack's `result`, or `cancelled` (`result`
    /// `None`). `claimed_at_ms` is the claim of its last delivery.
    pub(crate) fn finished(
        item: Item,
        result: Option<Vec<u8>>,
        claimed_at_ms: Option<u64>,
        finished_at_ms: u64,
    ) -> Self {
        let state = if result.is_some() {
            ItemState::Completed
        } else {
            ItemState::Cancelled
        };
        ListedItem {
            claimed_at_ms,
            finished_at_ms: Some(finished_at_ms),
            result,
            ..ListedItem::new(item, state)
        }
    }
}

/// One page of a state (SPEC 12.1). Made by the queue only.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ItemPage {
    /// The items, in the state's order.
    pub items: Vec<ListedItem>,
    /// The offset to read on from, or `None` when this page reached the
    /// end of the state.
    pub next_offset: Option<u64>,
}

impl ItemPage {
    /// A page of `items` ending at `next_offset`.
    pub(crate) fn new(items: Vec<ListedItem>, next_offset: Option<u64>) -> Self {
        ItemPage { items, next_offset }
    }
}

/// Builds one page from the positions of a state read in order from the
/// query's offset: every backend's `list` feeds it.
#[derive(Debug)]
pub(crate) struct Pager<'q> {
    query: &'q ListQuery,
    limit: usize,
    budget: usize,
    looked: u64,
    items: Vec<ListedItem>,
}

impl<'q> Pager<'q> {
    /// A pager for `query`.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a limit of 0.
    pub(crate) fn new(query: &'q ListQuery) -> Result<Self> {
        query.check()?;
        Ok(Pager {
            query,
            limit: query.effective_limit(),
            budget: query.budget(),
            looked: 0,
            items: Vec::new(),
        })
    }

    /// Whether the page is done: full, or its scan budget spent.
    pub(crate) fn full(&self) -> bool {
        self.items.len() >= self.limit || self.looked >= self.budget as u64
    }

    /// Count one position looked at, keeping `item` if it passes the
    /// filter.
    pub(crate) fn offer(&mut self, item: ListedItem) {
        self.looked += 1;
        if self.query.keeps(&item.item.payload) {
            self.items.push(item);
        }
    }

    /// Count one position that held nothing to show (an index entry whose
    /// item went away meanwhile, or a payload the filter dropped).
    pub(crate) fn skip(&mut self) {
        self.looked += 1;
    }

    /// The page; `ended` when the state had no position left.
    pub(crate) fn finish(self, ended: bool) -> ItemPage {
        let next = (!ended).then(|| self.query.offset.saturating_add(self.looked));
        ItemPage::new(self.items, next)
    }

    /// Feed positions from `positions` (already past the offset) until the
    /// page is done or they run out.
    ///
    /// # Errors
    ///
    /// The first error a position gives.
    pub(crate) fn fill<I>(mut self, positions: I) -> Result<ItemPage>
    where
        I: IntoIterator<Item = Result<Option<ListedItem>>>,
    {
        let mut it = positions.into_iter();
        loop {
            if self.full() {
                return Ok(self.finish(false));
            }
            match it.next() {
                None => return Ok(self.finish(true)),
                Some(Ok(Some(item))) => self.offer(item),
                Some(Ok(None)) => self.skip(),
                Some(Err(e)) => return Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(id: u64, payload: &str) -> ListedItem {
        ListedItem::new(
            Item {
                id,
                flow: String::new(),
                payload: payload.as_bytes().to_vec(),
                enqueued_at_ms: 0,
                not_before_ms: None,
                deliveries: 0,
                priority: 0,
                cost: 1,
            },
            ItemState::Backlog,
        )
    }

    #[test]
    fn a_page_stops_at_its_limit_and_says_where_to_go_on() {
        let q = ListQuery::new(ItemState::Backlog).offset(10).limit(2);
        let page = Pager::new(&q)
            .unwrap()
            .fill((1..=5).map(|i| Ok(Some(item(i, "x")))))
            .unwrap();
        assert_eq!(page.items.len(), 2);
        assert_eq!(page.next_offset, Some(12));
        let page = Pager::new(&q)
            .unwrap()
            .fill((1..=1).map(|i| Ok(Some(item(i, "x")))))
            .unwrap();
        assert_eq!(page.next_offset, None);
    }

    #[test]
    fn a_search_counts_what_it_looked_at() {
        let q = ListQuery::new(ItemState::Backlog).limit(10).contains("b");
        let page = Pager::new(&q)
            .unwrap()
            .fill(
                ["a", "b", "a", "ab"]
                    .iter()
                    .enumerate()
                    .map(|(i, p)| Ok(Some(item(i as u64, p)))),
            )
            .unwrap();
        assert_eq!(page.items.len(), 2);
        assert_eq!(page.next_offset, None);
        assert!(ListQuery::new(ItemState::Due).limit(0).check().is_err());
        assert_eq!(
            ListQuery::new(ItemState::Due).limit(9999).effective_limit(),
            MAX_LIST_LIMIT
        );
    }

    #[test]
    fn state_names_round_trip() {
        for s in ItemState::ALL {
            assert_eq!(ItemState::parse(s.name()).unwrap(), s);
        }
        assert!(ItemState::parse("nope").is_err());
    }
}
