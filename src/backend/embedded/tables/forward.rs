//! The table side of store and forward (SPEC section 11): read the items a
//! forwarder hands over, in id order, and remove them once Redis has taken
//! them, moving the file's forwarding mark in the same transaction.

pub(crate) use crate::handover::Outgoing;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::ops::Bound;

use redb::{ReadableTable, ReadableTableMetadata};

use super::{Ctx, Tables};
use crate::backend::embedded::codec::{self, ItemRecord};
use crate::error::{Error, Result};

/// The meta key of the file's forwarding journal id: a random number made
/// at the first forward, so that Redis can tell this file from another one
/// forwarding under the same origin name (whose ids start at 1 again).
const JOURNAL_KEY: &str = "forward_journal";

/// What the forwarder has not handed over yet (SPEC section 11, lag).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Unforwarded {
    /// Items of the forwarded flows waiting to be handed over.
    pub(crate) count: u64,
    /// The enqueue time of the oldest of them, ms since the Unix epoch.
    pub(crate) oldest_enqueued_at_ms: Option<u64>,
    /// Whether a forwarder was ever set up on this file (it has a
    /// forwarding journal id).
    pub(crate) forwarded: bool,
}

/// Whether items of `flow` are forwarded (`None`: every flow).
fn selected(flows: Option<&[String]>, flow: &str) -> bool {
    flows.is_none_or(|f| f.iter().any(|x| x == flow))
}

impl Tables<'_> {
    /// The forwarding mark under `key`: every forwarded-flow item with an
    /// id at or below it has been handed over (or was held locally then).
    pub(crate) fn forward_mark(&self, key: &str) -> Result<u64> {
        self.counter(key, 0)
    }

    /// The file's forwarding journal id, made on first use from
    /// `candidate` (random, non-zero, drawn by the caller so that a replay
    /// of the redo log makes the same one).
    pub(crate) fn forward_journal(&mut self, candidate: u64) -> Result<u64> {
        if let Some(v) = self.meta()?.get(JOURNAL_KEY).ctx("read journal id")? {
            return Ok(v.value());
        }
        let id = candidate.max(1);
        self.meta_mut()?
            .insert(JOURNAL_KEY, id)
            .ctx("write journal id")?;
        Ok(id)
    }

    /// Ids held locally in parked lists (usually few).
    fn all_parked_ids(&self) -> Result<HashSet<u64>> {
        let mut out = HashSet::new();
        for e in self.parked()?.iter().ctx("read parked")? {
            out.insert(e.ctx("read parked")?.1.value());
        }
        Ok(out)
    }

    /// Whether item `id` is in local hands: pending, parked or dead.
    fn held(&self, id: u64, parked: &HashSet<u64>) -> Result<bool> {
        Ok(parked.contains(&id)
            || self.pending()?.get(id).ctx("read lease")?.is_some()
            || self
                .dead_by_id()?
                .get(id)
                .ctx("read dead letter index")?
                .is_some())
    }

    /// Visit, in id order within `range`, every item of the selected flows
    /// that waits in the backlog, the due lane or delayed; `visit` returns
    /// false to stop.
    fn each_waiting(
        &self,
        range: (Bound<u64>, Bound<u64>),
        flows: Option<&[String]>,
        mut visit: impl FnMut(u64, ItemRecord) -> Result<bool>,
    ) -> Result<()> {
        let parked = self.all_parked_ids()?;
        for e in self.items()?.range(range).ctx("read items")? {
            let (k, v) = e.ctx("read item")?;
            let id = k.value();
            // A deferred delete's record is a finished item's (SPEC 6,
            // schema 4): nothing to forward.
            if self.is_deferred(id)? {
                continue;
            }
            let rec: ItemRecord = codec::decode_item(format_args!("items[{id}]"), v.value())?;
            if !selected(flows, &rec.flow) || self.held(id, &parked)? {
                continue;
            }
            if !visit(id, rec)? {
                break;
            }
        }
        Ok(())
    }

    /// Live dedup keys of the items `ids`.
    fn dedup_keys_of(&self, ids: &BTreeSet<u64>, now: u64) -> Result<BTreeMap<u64, String>> {
        let mut out = BTreeMap::new();
        if ids.is_empty() || self.dedup()?.is_empty().ctx("read dedup keys")? {
            return Ok(out);
        }
        for e in self.dedup()?.iter().ctx("read dedup keys")? {
            let (k, v) = e.ctx("read dedup key")?;
            let (id, expires) = v.value();
            if expires > now && ids.contains(&id) {
                out.insert(id, k.value().to_string());
            }
        }
        Ok(out)
    }

    /// The next items to hand over under mark `key`, in id order: up to
    /// `max_items`, and up to `max_bytes` of payload and flow (at least one
    /// item whatever its size). With `late`, only items at or below the
    /// mark (which were held locally when the mark passed them).
    pub(crate) fn forward_read(
        &self,
        key: &str,
        flows: Option<&[String]>,
        max_items: usize,
        max_bytes: usize,
        late: bool,
        now: u64,
    ) -> Result<Vec<Outgoing>> {
        let mark = self.forward_mark(key)?;
        let range = if late {
            (Bound::Unbounded, Bound::Included(mark))
        } else {
            (Bound::Excluded(mark), Bound::Unbounded)
        };
        let mut out = Vec::new();
        let mut bytes = 0usize;
        self.each_waiting(range, flows, |id, rec| {
            let payload = self.payload(id, &rec)?;
            let size = payload.len().saturating_add(rec.flow.len());
            if !out.is_empty() && (out.len() >= max_items || bytes.saturating_add(size) > max_bytes)
            {
                return Ok(false);
            }
            bytes = bytes.saturating_add(size);
            out.push(Outgoing {
                id,
                flow: rec.flow,
                payload,
                enqueued_at_ms: rec.enqueued_at_ms,
                not_before_ms: rec.not_before_ms,
                priority: rec.priority,
                cost: rec.cost.max(1),
                dedup_key: None,
                late,
            });
            Ok(out.len() < max_items)
        })?;
        let ids = out.iter().map(|o| o.id).collect();
        let mut keys = self.dedup_keys_of(&ids, now)?;
        for o in &mut out {
            o.dedup_key = keys.remove(&o.id);
        }
        Ok(out)
    }

    /// What waits to be handed over: count and oldest enqueue time.
    pub(crate) fn forward_lag(&self, flows: Option<&[String]>) -> Result<Unforwarded> {
        let mut lag = Unforwarded {
            forwarded: self
                .meta()?
                .get(JOURNAL_KEY)
                .ctx("read journal id")?
                .is_some(),
            ..Unforwarded::default()
        };
        let all = (Bound::Unbounded, Bound::Unbounded);
        if flows.is_none() {
            // Every waiting item is forwarded: count the lanes, and find the
            // oldest by id (ids follow enqueue order).
            lag.count = self.waiting()?;
            self.each_waiting(all, None, |_, rec| {
                lag.oldest_enqueued_at_ms = Some(rec.enqueued_at_ms);
                Ok(false)
            })?;
            return Ok(lag);
        }
        self.each_waiting(all, flows, |_, rec| {
            lag.count += 1;
            lag.oldest_enqueued_at_ms = Some(
                lag.oldest_enqueued_at_ms
                    .map_or(rec.enqueued_at_ms, |t| t.min(rec.enqueued_at_ms)),
            );
            Ok(true)
        })?;
        Ok(lag)
    }

    /// Take item `id` out of the dead-letter index; its dead-letter key.
    fn remove_dead_index(&mut self, id: u64) -> Result<Option<u64>> {
        Ok(self
            .dead_by_id_mut()?
            .remove(id)
            .ctx("delete dead letter index")?
            .map(|g| g.value()))
    }

    /// Take item `id` out of delayed if it is there.
    fn remove_delayed(&mut self, id: u64, not_before: Option<u64>) -> Result<bool> {
        let Some(t) = not_before else {
            return Ok(false);
        };
        Ok(self
            .delayed_mut()?
            .remove((t, id))
            .ctx("delete delayed")?
            .is_some())
    }

    /// Remove the items `ids`, which Redis has taken, whatever state they
    /// have reached since they were read (a local claim in between loses
    /// its lease: the work has moved to the fleet), and raise mark `key` to
    /// `mark`. Ids already gone are skipped. Returns how many were removed.
    pub(crate) fn forward_done(&mut self, key: &str, ids: &[u64], mark: u64) -> Result<u64> {
        let mut rest = BTreeSet::new();
        let mut removed = 0;
        for &id in ids {
            if self.items()?.get(id).ctx("read item")?.is_none() || self.is_deferred(id)? {
                continue;
            }
            let rec = self.record(id)?;
            if let Some(lease) = self.lease(id)? {
                // The latest time the file has seen stands for now (SPEC 3,
                // Flow limits: the flow's slot is freed).
                let now = self.counter(super::CLOCK_HIGH, 0)?;
                self.remove_pending(id, &lease, now)?;
            } else if let Some(seq) = self.remove_dead_index(id)? {
                self.dead_mut()?.remove(seq).ctx("delete dead letter")?;
            } else if !self.remove_delayed(id, rec.not_before_ms)? {
                rest.insert(id);
            }
            self.delete_item(id)?;
            removed += 1;
        }
        // The rest are in a lane or parked: forwarded items are near the
        // head of their lane, so the scans end early.
        let due = lane_keys(self.due()?, &mut rest)?;
        for seq in due {
            self.due_mut()?.remove(seq).ctx("delete due")?;
        }
        let backlog = lane_keys(self.backlog()?, &mut rest)?;
        for seq in backlog {
            self.backlog_mut()?.remove(seq).ctx("delete backlog")?;
        }
        if !rest.is_empty() {
            let mut parked = Vec::new();
            for e in self.parked()?.iter().ctx("read parked")? {
                let (k, v) = e.ctx("read parked")?;
                if rest.remove(&v.value()) {
                    let (flow, seq) = k.value();
                    parked.push((flow.to_string(), seq));
                }
            }
            for (flow, seq) in parked {
                self.parked_mut()?
                    .remove((flow.as_str(), seq))
                    .ctx("delete parked")?;
            }
        }
        if let Some(id) = rest.first() {
            return Err(Error::corrupt(format!(
                "item {id} is in no state of the queue"
            )));
        }
        let mark = mark.max(self.forward_mark(key)?);
        self.meta_mut()?
            .insert(key, mark)
            .ctx("write forwarding mark")?;
        Ok(removed)
    }
}

/// The keys of lane entries naming ids in `rest`, taking those ids out of
/// `rest`; stops once `rest` is empty.
fn lane_keys(
    lane: &redb::Table<'_, (i64, u64), u64>,
    rest: &mut BTreeSet<u64>,
) -> Result<Vec<(i64, u64)>> {
    let mut keys = Vec::new();
    if rest.is_empty() {
        return Ok(keys);
    }
    for e in lane.iter().ctx("read lane")? {
        let (k, v) = e.ctx("read lane")?;
        if rest.remove(&v.value()) {
            keys.push(k.value());
            if rest.is_empty() {
                break;
            }
        }
    }
    Ok(keys)
}
