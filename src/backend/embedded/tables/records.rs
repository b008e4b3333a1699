//! Item records, payloads and leases: reading and writing one item's rows.

use redb::{ReadableTable, ReadableTableMetadata};

use super::{Ctx, Tables};
use crate::backend::embedded::codec::{self, ItemRecord, LeaseRecord};
use crate::error::{Error, Result};
use crate::item::{Item, Receipt};

/// The error for an index naming item `id`, whose record is not there.
pub(super) fn missing_record(id: u64) -> Error {
    Error::corrupt(format!("items[{id}] is missing"))
}

impl Tables<'_> {
    pub(super) fn record(&self, id: u64) -> Result<ItemRecord> {
        let guard = self
            .items()?
            .get(id)
            .ctx("read item")?
            .ok_or_else(|| missing_record(id))?;
        // The record's name is formatted only for an error.
        codec::decode_item(format_args!("items[{id}]"), guard.value())
    }

    pub(super) fn put_record(&mut self, id: u64, rec: &ItemRecord) -> Result<()> {
        let bytes = codec::encode_item(rec)?;
        self.items_mut()?
            .insert(id, bytes.as_slice())
            .ctx("write item")?;
        Ok(())
    }

    /// The payload of `id`: inline in its record, or in the payloads table.
    pub(super) fn payload(&self, id: u64, rec: &ItemRecord) -> Result<Vec<u8>> {
        if let Some(p) = &rec.payload {
            return Ok(p.clone());
        }
        Ok(self
            .payloads()?
            .get(id)
            .ctx("read payload")?
            .map(|g| g.value().to_vec())
            .unwrap_or_default())
    }

    pub(super) fn to_item(&self, id: u64, rec: ItemRecord) -> Result<Item> {
        Ok(Item {
            id,
            payload: self.payload(id, &rec)?,
            flow: rec.flow,
            enqueued_at_ms: rec.enqueued_at_ms,
            not_before_ms: rec.not_before_ms,
            deliveries: rec.deliveries,
            priority: rec.priority,
            cost: rec.cost.max(1),
        })
    }

    pub(super) fn item(&self, id: u64) -> Result<Item> {
        let rec = self.record(id)?;
        self.to_item(id, rec)
    }

    pub(super) fn delete_item(&mut self, id: u64) -> Result<()> {
        self.items_mut()?.remove(id).ctx("delete item")?;
        self.remove_payloads([id])
    }

    /// Delete the payload rows of `ids`, if payloads are stored outside
    /// records at all: payloads up to INLINE_PAYLOAD_BYTES are inline, and
    /// with none larger kept there is nothing to look up (one look for the
    /// whole batch).
    pub(super) fn remove_payloads(&mut self, ids: impl IntoIterator<Item = u64>) -> Result<()> {
        if self.payloads()?.is_empty().ctx("read payloads")? {
            return Ok(());
        }
        let table = self.payloads_mut()?;
        for id in ids {
            table.remove(id).ctx("delete payload")?;
        }
        Ok(())
    }

    /// Delete the orphan entries `(claimed_at_ms, id)` of leases. Orphans
    /// exist only between an open and the first reclaim, so the table is
    /// almost always empty and not searched (one look for the whole batch).
    pub(super) fn remove_orphans(
        &mut self,
        entries: impl IntoIterator<Item = (u64, u64)>,
    ) -> Result<()> {
        if self.orphans()?.is_empty().ctx("read orphans")? {
            return Ok(());
        }
        let table = self.orphans_mut()?;
        for entry in entries {
            table.remove(entry).ctx("delete orphan")?;
        }
        Ok(())
    }

    /// The lease of pending item `id`, with its delivery count (for a
    /// version-1 lease, the item record's).
    pub(super) fn lease(&self, id: u64) -> Result<Option<LeaseRecord>> {
        let (mut lease, v1) = match self.pending()?.get(id).ctx("read lease")? {
            Some(g) => codec::decode_lease(format_args!("pending[{id}]"), g.value())?,
            None => return Ok(None),
        };
        if v1 {
            lease.deliveries = self.record(id)?.deliveries;
        }
        Ok(Some(lease))
    }

    /// Item `id`'s record as it leaves pending under `lease`: with the
    /// lease's delivery count, which a claim does not write into the
    /// record (SPEC section 6).
    pub(super) fn record_leaving(&self, id: u64, lease: &LeaseRecord) -> Result<ItemRecord> {
        let mut rec = self.record(id)?;
        rec.deliveries = lease.deliveries;
        Ok(rec)
    }

    /// Write the lease's delivery count into item `id`'s record, for a
    /// move out of pending that keeps the record as it is otherwise.
    /// Returns the record as written.
    pub(super) fn keep_deliveries(&mut self, id: u64, lease: &LeaseRecord) -> Result<ItemRecord> {
        let rec = self.record_leaving(id, lease)?;
        self.put_record(id, &rec)?;
        Ok(rec)
    }

    /// Pending item `id` as its lease shows it (the lease's delivery count).
    pub(super) fn pending_item(&self, id: u64, lease: &LeaseRecord) -> Result<Item> {
        let rec = self.record_leaving(id, lease)?;
        self.to_item(id, rec)
    }

    /// The lease of a receipt that is current (SPEC 3, Finishing): else
    /// `LeaseLost`, or `Cancelled` when its item is marked cancelled (SPEC
    /// 3, Cancelling; nothing is written: the caller's handle ends the
    /// item by [`Tables::end_cancelled`] in an operation of its own).
    pub(super) fn current(&self, r: &Receipt) -> Result<LeaseRecord> {
        match self.lease(r.id)? {
            Some(l) if l.lease == r.lease && l.cancelling => Err(Error::cancelled(r)),
            Some(l) if l.lease == r.lease => Ok(l),
            _ => Err(Error::lease_lost(r)),
        }
    }
}
