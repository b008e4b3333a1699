//! Paused flows and their parked lists (SPEC 3, Flows): pause, resume,
//! park, step and clear.

use redb::ReadableTable;

use super::{Ctx, Tables};
use crate::error::Result;
use crate::item::{Claimed, Lane, Receipt, require_flow};

impl Tables<'_> {
    pub(super) fn is_paused(&self, flow: &str) -> Result<bool> {
        Ok(self.paused()?.get(flow).ctx("read paused")?.is_some())
    }

    pub(super) fn park_id(&mut self, flow: &str, id: u64) -> Result<()> {
        let seq = self.next_seq()?;
        self.parked_mut()?
            .insert((flow, seq), id)
            .ctx("write parked")?;
        Ok(())
    }

    pub(in crate::backend::embedded) fn pause(&mut self, flow: &str) -> Result<()> {
        require_flow(flow)?;
        if self.is_paused(flow)? {
            return Ok(());
        }
        self.paused_mut()?.insert(flow, ()).ctx("write paused")?;
        Ok(())
    }

    pub(super) fn parked_ids(&self, flow: &str) -> Result<Vec<(u64, u64)>> {
        let mut out = Vec::new();
        for entry in self
            .parked()?
            .range((flow, 0u64)..=(flow, u64::MAX))
            .ctx("scan parked")?
        {
            let (k, v) = entry.ctx("scan parked")?;
            out.push((k.value().1, v.value()));
        }
        Ok(out)
    }

    pub(in crate::backend::embedded) fn resume(&mut self, flow: &str, now: u64) -> Result<u64> {
        require_flow(flow)?;
        if self.is_paused(flow)? {
            self.paused_mut()?.remove(flow).ctx("delete paused")?;
        }
        let ids = self.parked_ids(flow)?;
        for (seq, id) in &ids {
            self.parked_mut()?
                .remove((flow, *seq))
                .ctx("delete parked")?;
            let tier = self.record(*id)?.priority;
            self.enter(Lane::Backlog, *id, tier, flow, now, now)?;
        }
        Ok(ids.len() as u64)
    }

    pub(in crate::backend::embedded) fn park(&mut self, r: &Receipt, now: u64) -> Result<()> {
        let lease = self.current(r)?;
        let flow = self.record(r.id)?.flow;
        require_flow(&flow)?;
        self.remove_pending(r.id, &lease, now)?;
        self.keep_deliveries(r.id, &lease)?;
        self.park_id(&flow, r.id)
    }

    pub(in crate::backend::embedded) fn step(
        &mut self,
        flow: &str,
        now: u64,
    ) -> Result<Option<Claimed>> {
        require_flow(flow)?;
        let first = self
            .parked()?
            .range((flow, 0u64)..=(flow, u64::MAX))
            .ctx("scan parked")?
            .next()
            .transpose()
            .ctx("scan parked")?
            .map(|(k, v)| (k.value().1, v.value()));
        let Some((seq, id)) = first else {
            return Ok(None);
        };
        self.parked_mut()?
            .remove((flow, seq))
            .ctx("delete parked")?;
        Ok(Some(self.hand_out(id, Lane::Parked, now)?))
    }

    pub(in crate::backend::embedded) fn clear_flow(&mut self, flow: &str) -> Result<u64> {
        require_flow(flow)?;
        if self.is_paused(flow)? {
            self.paused_mut()?.remove(flow).ctx("delete paused")?;
        }
        let ids = self.parked_ids(flow)?;
        for (seq, id) in &ids {
            self.parked_mut()?
                .remove((flow, *seq))
                .ctx("delete parked")?;
            self.delete_item(*id)?;
            self.forget_progress(*id)?;
        }
        Ok(ids.len() as u64)
    }

    pub(in crate::backend::embedded) fn parked_count(&self, flow: &str) -> Result<u64> {
        Ok(self.parked_ids(flow)?.len() as u64)
    }

    pub(in crate::backend::embedded) fn paused_flows(&self) -> Result<Vec<String>> {
        let mut out = Vec::new();
        for entry in self.paused()?.iter().ctx("scan paused")? {
            let (k, _) = entry.ctx("scan paused")?;
            out.push(k.value().to_string());
        }
        Ok(out)
    }
}
