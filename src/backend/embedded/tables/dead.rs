//! Dead letters: bury an item (within `dead_letter_cap`), list, redrive
//! and purge them.

use redb::{ReadableTable, ReadableTableMetadata};

use super::{Ctx, DEAD_DROPPED, Tables};
use crate::backend::embedded::codec::{self, DeadRecord};
use crate::error::Result;
use crate::item::{DeadLetter, Lane};

impl Tables<'_> {
    pub(super) fn bury(&mut self, id: u64, reason: &str, now: u64) -> Result<()> {
        self.finish(
            id,
            crate::backend::embedded::codec::OUTCOME_DEAD,
            Vec::new(),
            reason,
            now,
        )?;
        let seq = self.next_seq()?;
        let rec = DeadRecord {
            id,
            reason: reason.to_string(),
            failed_at_ms: now,
        };
        self.dead_mut()?
            .insert(seq, codec::encode(&rec)?.as_slice())
            .ctx("write dead letter")?;
        self.dead_by_id_mut()?
            .insert(id, seq)
            .ctx("write dead letter index")?;
        while self.dead()?.len().ctx("count dead letters")? > self.limits.dead_letter_cap {
            let Some((_, bytes)) = self
                .dead_mut()?
                .pop_first()
                .ctx("drop dead letter")?
                .map(|(k, v)| (k.value(), v.value().to_vec()))
            else {
                break;
            };
            let old: DeadRecord = codec::decode("dead letter", &bytes)?;
            self.dead_by_id_mut()?
                .remove(old.id)
                .ctx("drop dead letter index")?;
            self.delete_item(old.id)?;
            self.bump(DEAD_DROPPED, 0)?;
            tracing::warn!(
                id = old.id,
                cap = self.limits.dead_letter_cap,
                "dead letter dropped for good: dead_letter_cap reached"
            );
        }
        Ok(())
    }

    pub(in crate::backend::embedded) fn redrive(&mut self, id: u64, now: u64) -> Result<bool> {
        let Some(seq) = self
            .dead_by_id()?
            .get(id)
            .ctx("read dead letter index")?
            .map(|g| g.value())
        else {
            return Ok(false);
        };
        self.dead_by_id_mut()?
            .remove(id)
            .ctx("delete dead letter index")?;
        self.dead_mut()?.remove(seq).ctx("delete dead letter")?;
        self.forget_outcome(id)?;
        let mut rec = self.record(id)?;
        rec.deliveries = 0;
        rec.not_before_ms = None;
        self.put_record(id, &rec)?;
        self.enter(Lane::Backlog, id, rec.priority, &rec.flow, now, now)?;
        Ok(true)
    }

    pub(in crate::backend::embedded) fn purge_dead_letters(&mut self) -> Result<u64> {
        let mut ids = Vec::new();
        for entry in self.dead_by_id()?.iter().ctx("scan dead letters")? {
            let (k, _) = entry.ctx("scan dead letters")?;
            ids.push(k.value());
        }
        if ids.is_empty() && self.dead()?.is_empty().ctx("count dead letters")? {
            return Ok(0);
        }
        for id in &ids {
            self.delete_item(*id)?;
        }
        self.dead_mut()?
            .retain(|_, _| false)
            .ctx("purge dead letters")?;
        self.dead_by_id_mut()?
            .retain(|_, _| false)
            .ctx("purge dead letters")?;
        Ok(ids.len() as u64)
    }

    pub(in crate::backend::embedded) fn dead_letters(
        &self,
        count: usize,
    ) -> Result<Vec<DeadLetter>> {
        let mut recs = Vec::new();
        for entry in self
            .dead()?
            .iter()
            .ctx("scan dead letters")?
            .rev()
            .take(count)
        {
            let (k, v) = entry.ctx("scan dead letters")?;
            recs.push(codec::decode::<DeadRecord>(
                &format!("dead[{}]", k.value()),
                v.value(),
            )?);
        }
        let mut out = Vec::with_capacity(recs.len());
        for r in recs {
            out.push(DeadLetter {
                item: self.item(r.id)?,
                reason: r.reason,
                failed_at_ms: r.failed_at_ms,
            });
        }
        Ok(out)
    }
}
