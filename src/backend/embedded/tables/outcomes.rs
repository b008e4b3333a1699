//! What became of an item (SPEC 3, Outcomes and progress): its outcome
//! for `result_ttl`, its progress and chunks while it runs, and the done
//! markers of its steps (SPEC 3, Idempotency).

use redb::{ReadableTable, ReadableTableMetadata};

use super::batches::RUN_IDS;
use super::{Ctx, Tables};
use crate::backend::embedded::codec::{self, OutcomeRecord};
use crate::error::Result;
use crate::item::Receipt;
use crate::outcome::{Chunk, Outcome, OutcomeKind, check_size};

impl Tables<'_> {
    /// Keep how item `id` finished for `result_ttl`, replacing an earlier
    /// outcome: a plain ack (done, empty result) as a bit of an ack run
    /// (SPEC 6, schema 3), anything else as a row of its own.
    pub(super) fn finish(
        &mut self,
        id: u64,
        kind: u8,
        result: Vec<u8>,
        reason: &str,
        now: u64,
    ) -> Result<()> {
        if kind == codec::OUTCOME_DONE && result.is_empty() {
            return self.append_outcomes(&[id], now);
        }
        self.forget_outcome(id)?;
        if self.limits.result_ttl_ms == 0 {
            // No outcome is kept, so its progress and chunks go at once
            // (they live as long as the outcome, SPEC 3, Outcomes).
            return self.forget_progress_of(&[id]);
        }
        let rec = OutcomeRecord {
            kind,
            result,
            reason: reason.to_string(),
            at_ms: now,
            expires_at_ms: now.saturating_add(self.limits.result_ttl_ms),
        };
        self.outcomes_mut()?
            .insert(id, codec::encode(&rec)?.as_slice())
            .ctx("write outcome")?;
        self.outcome_expiry_mut()?
            .insert((rec.expires_at_ms, id), ())
            .ctx("write outcome expiry")?;
        self.floors.outcomes = self.floors.outcomes.min(rec.expires_at_ms);
        Ok(())
    }

    pub(super) fn outcome_record(&self, id: u64) -> Result<Option<OutcomeRecord>> {
        match self.outcomes()?.get(id).ctx("read outcome")? {
            Some(g) => Ok(Some(codec::decode(
                format_args!("outcomes[{id}]"),
                g.value(),
            )?)),
            None => Ok(None),
        }
    }

    pub(super) fn forget_outcome(&mut self, id: u64) -> Result<()> {
        let expires = self
            .outcomes_mut()?
            .remove(id)
            .ctx("delete outcome")?
            .map(|g| g.value().to_vec());
        if let Some(bytes) = expires {
            let rec: OutcomeRecord = codec::decode(format_args!("outcomes[{id}]"), &bytes)?;
            self.outcome_expiry_mut()?
                .remove((rec.expires_at_ms, id))
                .ctx("delete outcome expiry")?;
        }
        Ok(())
    }

    /// Delete the progress and chunks of the items `ids`, looking at each
    /// only when the tables hold any (so an ack of a queue that publishes
    /// none reads two table lengths).
    pub(super) fn forget_progress_of(&mut self, ids: &[u64]) -> Result<()> {
        if self.progress_table()?.is_empty().ctx("read progress")?
            && self.chunks()?.is_empty().ctx("read chunks")?
        {
            return Ok(());
        }
        for &id in ids {
            self.forget_progress(id)?;
        }
        Ok(())
    }

    /// Delete the progress and chunks of item `id`.
    pub(super) fn forget_progress(&mut self, id: u64) -> Result<()> {
        self.progress_mut()?.remove(id).ctx("delete progress")?;
        self.chunks_mut()?
            .retain_in((id, 0)..=(id, u64::MAX), |_, _| false)
            .ctx("delete chunks")?;
        Ok(())
    }

    /// The outcome of item `id` (SPEC 3, Outcomes and progress): its own
    /// record, else the ack run that holds it; `None` once expired.
    pub(in crate::backend::embedded) fn outcome(
        &self,
        id: u64,
        now: u64,
    ) -> Result<Option<Outcome>> {
        if let Some(r) = self.outcome_record(id)? {
            return Ok((r.expires_at_ms > now).then_some(Outcome {
                id,
                kind: match r.kind {
                    codec::OUTCOME_DONE => OutcomeKind::Done { result: r.result },
                    codec::OUTCOME_DEAD => OutcomeKind::DeadLettered { reason: r.reason },
                    codec::OUTCOME_CANCELLED => OutcomeKind::Cancelled,
                    k => {
                        return Err(crate::error::Error::Decode {
                            what: format!("outcomes[{id}]"),
                            detail: format!("unknown outcome kind {k}"),
                        });
                    }
                },
                at_ms: r.at_ms,
            }));
        }
        Ok(self
            .ack_run_of(id)?
            .filter(|&(_, _, expires_at_ms)| expires_at_ms > now)
            .map(|(_, at_ms, _)| Outcome {
                id,
                kind: OutcomeKind::Done { result: Vec::new() },
                at_ms,
            }))
    }

    /// The ack run that holds item `id`: (first id, at_ms, expires_at_ms).
    /// A run stands for ids below its first + [`RUN_IDS`], so at most that
    /// many runs start in the range looked at.
    pub(super) fn ack_run_of(&self, id: u64) -> Result<Option<(u64, u64, u64)>> {
        let from = id.saturating_sub(RUN_IDS - 1);
        for entry in self.ack_runs()?.range(from..=id).ctx("read ack runs")? {
            let (k, v) = entry.ctx("read ack runs")?;
            let first = k.value();
            let (bits, at_ms, expires_at_ms) = v.value();
            if (bits >> (id - first)) & 1 == 1 {
                return Ok(Some((first, at_ms, expires_at_ms)));
            }
        }
        Ok(None)
    }

    /// Drop the ack run starting at `first` that expired at `t` (with the
    /// progress and chunks of its items).
    pub(super) fn purge_ack_run(&mut self, t: u64, first: u64) -> Result<()> {
        self.ack_run_expiry_mut()?
            .remove((t, first))
            .ctx("purge ack run")?;
        let bits = self
            .ack_runs_mut()?
            .remove(first)
            .ctx("purge ack run")?
            .map(|g| g.value().0);
        let Some(bits) = bits else {
            return Ok(());
        };
        if self.progress_table()?.is_empty().ctx("read progress")?
            && self.chunks()?.is_empty().ctx("read chunks")?
        {
            return Ok(());
        }
        for i in 0..RUN_IDS {
            if (bits >> i) & 1 == 1 {
                self.forget_progress(first + i)?;
            }
        }
        Ok(())
    }

    pub(in crate::backend::embedded) fn set_progress(
        &mut self,
        r: &Receipt,
        progress: &[u8],
    ) -> Result<()> {
        check_size("progress", progress.len(), self.limits.max_payload_bytes)?;
        self.current(r)?;
        self.progress_mut()?
            .insert(r.id, progress)
            .ctx("write progress")?;
        Ok(())
    }

    pub(in crate::backend::embedded) fn send_chunk(
        &mut self,
        r: &Receipt,
        data: &[u8],
    ) -> Result<u64> {
        check_size("chunk", data.len(), self.limits.max_payload_bytes)?;
        self.current(r)?;
        let last = self
            .chunks()?
            .range((r.id, 0)..=(r.id, u64::MAX))
            .ctx("read chunks")?
            .next_back()
            .transpose()
            .ctx("read chunks")?
            .map(|(k, _)| k.value().1);
        let seq = last.map_or(1, |s| s.saturating_add(1));
        self.chunks_mut()?
            .insert((r.id, seq), data)
            .ctx("write chunk")?;
        Ok(seq)
    }

    /// Whether `id` has an outcome that expired by `now` (its progress and
    /// chunks went with it, even before the purge).
    pub(super) fn expired(&self, id: u64, now: u64) -> Result<bool> {
        if let Some(r) = self.outcome_record(id)? {
            return Ok(r.expires_at_ms <= now);
        }
        Ok(self
            .ack_run_of(id)?
            .is_some_and(|(_, _, expires_at_ms)| expires_at_ms <= now))
    }

    pub(in crate::backend::embedded) fn progress(
        &self,
        id: u64,
        now: u64,
    ) -> Result<Option<Vec<u8>>> {
        if self.expired(id, now)? {
            return Ok(None);
        }
        Ok(self
            .progress_table()?
            .get(id)
            .ctx("read progress")?
            .map(|g| g.value().to_vec()))
    }

    /// The chunks of `id` after `after_seq`, and whether it has an outcome.
    pub(in crate::backend::embedded) fn chunks_after(
        &self,
        id: u64,
        after_seq: u64,
        now: u64,
    ) -> Result<(Vec<Chunk>, bool)> {
        let mut out = Vec::new();
        if after_seq < u64::MAX && !self.expired(id, now)? {
            for entry in self
                .chunks()?
                .range((id, after_seq + 1)..=(id, u64::MAX))
                .ctx("read chunks")?
            {
                let (k, v) = entry.ctx("read chunks")?;
                out.push(Chunk {
                    seq: k.value().1,
                    data: v.value().to_vec(),
                });
            }
        }
        Ok((out, self.outcome(id, now)?.is_some()))
    }

    pub(in crate::backend::embedded) fn mark_done(
        &mut self,
        id: u64,
        step: &str,
        now: u64,
    ) -> Result<()> {
        let expires = now.saturating_add(self.limits.done_ttl_ms);
        let replaced = self
            .done_mut()?
            .insert((id, step), expires)
            .ctx("write done marker")?
            .map(|g| g.value());
        if let Some(old) = replaced {
            self.done_expiry_mut()?
                .remove((old, id, step))
                .ctx("move done expiry")?;
        }
        self.done_expiry_mut()?
            .insert((expires, id, step), ())
            .ctx("write done expiry")?;
        self.floors.done = self.floors.done.min(expires);
        Ok(())
    }

    pub(in crate::backend::embedded) fn was_done(
        &self,
        id: u64,
        step: &str,
        now: u64,
    ) -> Result<bool> {
        Ok(self
            .done()?
            .get((id, step))
            .ctx("read done marker")?
            .is_some_and(|g| g.value() > now))
    }
}
