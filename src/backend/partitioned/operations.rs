//! The operations of a [`PartitionedQueue`] (SPEC 6.1): each one routed
//! to the partition its flow, id or receipt names, or swept over every
//! partition and merged (claims, counts, listings).

use std::collections::BTreeMap;
use std::pin::Pin;
use std::time::Duration;

use super::{PartitionedQueue, first};
use crate::error::{Error, Result};
use crate::item::{
    Added, CancelOutcome, ClaimFrom, Claimed, DeadLetter, Item, ItemUpdate, NewItem, Receipt,
    Reclaimed, RetryOutcome, Stats,
};
use crate::limit::{FlowLimit, FlowLimits};
use crate::outcome::{Chunk, Outcome};
use crate::queue::{Backend, WorkQueue};
use crate::schedule::ScheduleQueue;

impl<Q: WorkQueue> Backend for PartitionedQueue<Q> {
    async fn add(&self, item: NewItem) -> Result<Added> {
        self.add_one(item, None).await
    }

    async fn add_batch(&self, items: Vec<NewItem>) -> Result<Vec<Added>> {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let routes: Vec<Option<usize>> = items.iter().map(|i| self.route(i)).collect();
        let fixed: Vec<usize> = routes.iter().flatten().copied().collect();
        // One partition for the whole batch when its fixed items agree (or
        // there are none): then the batch stays all or none.
        let whole = match fixed.first() {
            None => Some((self.next_turn(), true)),
            Some(&p) if fixed.iter().all(|&q| q == p) => Some((p, false)),
            Some(_) => None,
        };
        if let Some((p, turn)) = whole {
            let added = self.add_to(p, items).await?;
            if turn {
                self.took_turn();
            }
            return Ok(added);
        }
        let mut groups: BTreeMap<usize, Vec<(usize, NewItem)>> = BTreeMap::new();
        for (i, (item, route)) in items.into_iter().zip(routes).enumerate() {
            let p = route.unwrap_or_else(|| self.round_robin(&self.next_add));
            groups.entry(p).or_default().push((i, item));
        }
        let mut out: Vec<Option<Added>> = vec![None; groups.values().map(Vec::len).sum()];
        for (p, group) in groups {
            let (idx, batch): (Vec<usize>, Vec<NewItem>) = group.into_iter().unzip();
            for (i, a) in idx.into_iter().zip(self.add_to(p, batch).await?) {
                out[i] = Some(a);
            }
        }
        out.into_iter()
            .map(|a| a.ok_or_else(|| Error::backend("a partition returned too few ids")))
            .collect()
    }

    async fn add_delayed(&self, item: NewItem, not_before_ms: u64) -> Result<Added> {
        self.add_one(item, Some(not_before_ms)).await
    }

    async fn next_due(&self) -> Result<Option<u64>> {
        let mut soonest = None;
        for q in &self.parts {
            if let Some(t) = q.next_due().await? {
                soonest = Some(soonest.map_or(t, |s: u64| s.min(t)));
            }
        }
        Ok(soonest)
    }

    async fn promote_due(&self) -> Result<u64> {
        let mut n = 0;
        for q in &self.parts {
            n += q.promote_due().await?;
        }
        Ok(n)
    }

    async fn claim(&self, count: usize, wait: Duration, from: ClaimFrom) -> Result<Vec<Claimed>> {
        if count == 0 {
            return Err(Error::invalid("claim count must be at least 1"));
        }
        let got = self
            .sweep(count, |q, n| q.claim(n, Duration::ZERO, from))
            .await?;
        if !got.is_empty() || wait.is_zero() {
            return Ok(got);
        }
        // Nothing ready: wait on every partition at once; the first to
        // answer wins. The others are dropped while they wait, which takes
        // nothing (see `WorkQueue::claim`, cancel safety).
        let waits = self
            .parts
            .iter()
            .enumerate()
            .map(|(p, q)| {
                Box::pin(async move {
                    let got = q
                        .claim(count, wait, from)
                        .await
                        .map_err(|e| self.lift_err(p, e))?;
                    self.lift_claims(p, got)
                })
                    as Pin<Box<dyn Future<Output = Result<Vec<Claimed>>> + Send + '_>>
            })
            .collect();
        first(waits).await
    }

    async fn ack(&self, receipt: Receipt) -> Result<()> {
        let (p, q) = self.part(receipt.id);
        q.ack(self.local_receipt(receipt))
            .await
            .map_err(|e| self.lift_err(p, e))
    }

    async fn ack_with_result(&self, receipt: Receipt, result: Vec<u8>) -> Result<()> {
        let (p, q) = self.part(receipt.id);
        q.ack_with_result(self.local_receipt(receipt), result)
            .await
            .map_err(|e| self.lift_err(p, e))
    }

    async fn outcome(&self, id: u64) -> Result<Option<Outcome>> {
        let (p, q) = self.part(id);
        let o = q
            .outcome(self.local(id))
            .await
            .map_err(|e| self.lift_err(p, e))?;
        self.lift_outcome(p, o)
    }

    async fn wait_outcome(&self, id: u64, wait: Duration) -> Result<Option<Outcome>> {
        let (p, q) = self.part(id);
        let o = q
            .wait_outcome(self.local(id), wait)
            .await
            .map_err(|e| self.lift_err(p, e))?;
        self.lift_outcome(p, o)
    }

    async fn set_progress(&self, receipt: Receipt, progress: Vec<u8>) -> Result<()> {
        let (p, q) = self.part(receipt.id);
        q.set_progress(self.local_receipt(receipt), progress)
            .await
            .map_err(|e| self.lift_err(p, e))
    }

    async fn send_chunk(&self, receipt: Receipt, chunk: Vec<u8>) -> Result<u64> {
        let (p, q) = self.part(receipt.id);
        q.send_chunk(self.local_receipt(receipt), chunk)
            .await
            .map_err(|e| self.lift_err(p, e))
    }

    async fn progress(&self, id: u64) -> Result<Option<Vec<u8>>> {
        let (p, q) = self.part(id);
        q.progress(self.local(id))
            .await
            .map_err(|e| self.lift_err(p, e))
    }

    async fn wait_chunks(&self, id: u64, after_seq: u64, wait: Duration) -> Result<Vec<Chunk>> {
        let (p, q) = self.part(id);
        q.wait_chunks(self.local(id), after_seq, wait)
            .await
            .map_err(|e| self.lift_err(p, e))
    }

    async fn ack_batch(&self, receipts: Vec<Receipt>) -> Result<u64> {
        let mut n = 0;
        for (p, group) in self.by_part(receipts) {
            let batch = group.into_iter().map(|(_, r)| r).collect();
            n += self.parts[p]
                .ack_batch(batch)
                .await
                .map_err(|e| self.lift_err(p, e))?;
        }
        Ok(n)
    }

    async fn touch(&self, receipts: Vec<Receipt>) -> Result<()> {
        // All or none per partition only: a lost receipt fails its
        // partition's touch, and the partitions before it stay extended.
        for (p, group) in self.by_part(receipts) {
            let batch = group.into_iter().map(|(_, r)| r).collect();
            self.parts[p]
                .touch(batch)
                .await
                .map_err(|e| self.lift_err(p, e))?;
        }
        Ok(())
    }

    async fn retry(&self, receipt: Receipt, not_before_ms: u64) -> Result<RetryOutcome> {
        let (p, q) = self.part(receipt.id);
        q.retry(self.local_receipt(receipt), not_before_ms)
            .await
            .map_err(|e| self.lift_err(p, e))
    }

    async fn dead_letter(&self, receipt: Receipt, reason: &str) -> Result<()> {
        let (p, q) = self.part(receipt.id);
        q.dead_letter(self.local_receipt(receipt), reason)
            .await
            .map_err(|e| self.lift_err(p, e))
    }

    async fn release(&self, receipt: Receipt, not_before_ms: u64) -> Result<()> {
        let (p, q) = self.part(receipt.id);
        q.release(self.local_receipt(receipt), not_before_ms)
            .await
            .map_err(|e| self.lift_err(p, e))
    }

    async fn reclaim(&self, min_idle: Duration, count: usize) -> Result<Reclaimed> {
        if count == 0 {
            return Err(Error::invalid("reclaim count must be at least 1"));
        }
        let start = self.round_robin(&self.next_claim);
        let mut out = Reclaimed::default();
        for k in 0..self.parts.len() {
            let left = count - out.claimed.len();
            if left == 0 {
                break;
            }
            let p = (start + k) % self.parts.len();
            let r = self.parts[p]
                .reclaim(min_idle, left)
                .await
                .map_err(|e| self.lift_err(p, e))?;
            out.claimed.extend(self.lift_claims(p, r.claimed)?);
            for d in r.dead_lettered {
                out.dead_lettered.push(Receipt {
                    id: self.global(p, d.id)?,
                    ..d
                });
            }
            for d in r.cancelled {
                out.cancelled.push(Receipt {
                    id: self.global(p, d.id)?,
                    ..d
                });
            }
        }
        Ok(out)
    }

    async fn pause(&self, flow: &str) -> Result<()> {
        self.parts[self.flow_part(flow)].pause(flow).await
    }

    async fn resume(&self, flow: &str) -> Result<u64> {
        self.parts[self.flow_part(flow)].resume(flow).await
    }

    async fn park(&self, receipt: Receipt) -> Result<()> {
        let (p, q) = self.part(receipt.id);
        q.park(self.local_receipt(receipt))
            .await
            .map_err(|e| self.lift_err(p, e))
    }

    async fn step(&self, flow: &str) -> Result<Option<Claimed>> {
        let p = self.flow_part(flow);
        match self.parts[p].step(flow).await? {
            Some(c) => Ok(Some(self.lift_claimed(p, c)?)),
            None => Ok(None),
        }
    }

    async fn clear_flow(&self, flow: &str) -> Result<u64> {
        self.parts[self.flow_part(flow)].clear_flow(flow).await
    }

    async fn parked(&self, flow: &str) -> Result<u64> {
        self.parts[self.flow_part(flow)].parked(flow).await
    }

    async fn paused_flows(&self) -> Result<Vec<String>> {
        let mut all = Vec::new();
        for q in &self.parts {
            all.extend(q.paused_flows().await?);
        }
        all.sort();
        all.dedup();
        Ok(all)
    }

    async fn set_flow_limit(&self, flow: &str, limit: FlowLimit) -> Result<()> {
        // SPEC 6.1: a named flow lives in one partition, and so do its
        // limits.
        crate::limit::check_limit(flow, &limit)?;
        self.parts[self.flow_part(flow)]
            .set_flow_limit(flow, limit)
            .await
    }

    async fn back_off(&self, flow: &str, duration: Duration) -> Result<()> {
        crate::limit::check_limit(flow, &FlowLimit::BackOffUntil(None))?;
        self.parts[self.flow_part(flow)]
            .back_off(flow, duration)
            .await
    }

    async fn flow_limits(&self) -> Result<Vec<FlowLimits>> {
        let mut all = Vec::new();
        for q in &self.parts {
            all.extend(q.flow_limits().await?);
        }
        all.sort_by(|a, b| a.flow.cmp(&b.flow));
        Ok(all)
    }

    async fn mark_done(&self, id: u64, step: &str) -> Result<()> {
        let (_, q) = self.part(id);
        q.mark_done(self.local(id), step).await
    }

    async fn was_done(&self, id: u64, step: &str) -> Result<bool> {
        let (_, q) = self.part(id);
        q.was_done(self.local(id), step).await
    }

    async fn dead_letters(&self, count: usize) -> Result<Vec<DeadLetter>> {
        let mut all = Vec::new();
        for (p, q) in self.parts.iter().enumerate() {
            for mut d in q.dead_letters(count).await? {
                d.item = self.lift_item(p, d.item)?;
                all.push(d);
            }
        }
        // Newest first; a stable sort keeps each partition's own order
        // among letters that failed in the same ms.
        all.sort_by_key(|d| std::cmp::Reverse(d.failed_at_ms));
        all.truncate(count);
        Ok(all)
    }

    async fn redrive(&self, id: u64) -> Result<bool> {
        let (_, q) = self.part(id);
        q.redrive(self.local(id)).await
    }

    async fn promote(&self, id: u64) -> Result<bool> {
        let (_, q) = self.part(id);
        q.promote(self.local(id)).await
    }

    async fn remove(&self, id: u64) -> Result<bool> {
        let (_, q) = self.part(id);
        q.remove(self.local(id)).await
    }

    async fn cancel(&self, id: u64) -> Result<CancelOutcome> {
        let (_, q) = self.part(id);
        q.cancel(self.local(id)).await
    }

    async fn update(&self, id: u64, update: ItemUpdate) -> Result<bool> {
        let (_, q) = self.part(id);
        q.update(self.local(id), update).await
    }

    async fn wait_cancelled(&self, ids: Vec<u64>, wait: Duration) -> Result<Vec<u64>> {
        // Each partition watches its own ids. A look at every partition;
        // while none has a mark, a wait on all of them (the first to answer
        // wins; a dropped wait changes nothing), then a look at all again.
        let mut by_part: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
        for id in ids {
            if (id >> super::LOCAL_BITS) < self.parts.len() as u64 {
                by_part
                    .entry(self.partition_of(id))
                    .or_default()
                    .push(self.local(id));
            }
        }
        if by_part.is_empty() {
            tokio::time::sleep_until(crate::clock::wait_deadline(wait)).await;
            return Ok(Vec::new());
        }
        let look = || async {
            let mut got = Vec::new();
            for (&p, local) in &by_part {
                for id in self.parts[p]
                    .wait_cancelled(local.clone(), Duration::ZERO)
                    .await?
                {
                    got.push(self.global(p, id)?);
                }
            }
            got.sort_unstable();
            Ok::<_, Error>(got)
        };
        let got = look().await?;
        if !got.is_empty() || wait.is_zero() {
            return Ok(got);
        }
        let waits = by_part
            .iter()
            .map(|(&p, local)| {
                let local = local.clone();
                Box::pin(async move {
                    let got = self.parts[p].wait_cancelled(local, wait).await?;
                    got.into_iter().map(|id| self.global(p, id)).collect()
                }) as Pin<Box<dyn Future<Output = Result<Vec<u64>>> + Send + '_>>
            })
            .collect();
        if first(waits).await?.is_empty() {
            return Ok(Vec::new());
        }
        look().await
    }

    async fn purge_dead_letters(&self) -> Result<u64> {
        let mut n = 0;
        for q in &self.parts {
            n += q.purge_dead_letters().await?;
        }
        Ok(n)
    }

    async fn stats(&self) -> Result<Stats> {
        let mut s = Stats {
            durable: true,
            ..Stats::default()
        };
        for q in &self.parts {
            let p = q.stats().await?;
            s.backlog += p.backlog;
            s.due += p.due;
            s.pending += p.pending;
            s.delayed += p.delayed;
            s.parked += p.parked;
            s.dead_letters += p.dead_letters;
            s.dead_letters_dropped += p.dead_letters_dropped;
            s.limited += p.limited;
            s.completed += p.completed;
            s.cancelled += p.cancelled;
            s.oldest_pending_age_ms = s.oldest_pending_age_ms.max(p.oldest_pending_age_ms);
            s.oldest_touch_age_ms = s.oldest_touch_age_ms.max(p.oldest_touch_age_ms);
            s.durable &= p.durable;
        }
        Ok(s)
    }

    async fn backlog_by_flow(&self, sample: usize) -> Result<BTreeMap<String, u64>> {
        let mut out = BTreeMap::new();
        let mut left = sample;
        for q in &self.parts {
            if left == 0 {
                break;
            }
            let part = q.backlog_by_flow(left).await?;
            for (flow, n) in part {
                left = left.saturating_sub(n as usize);
                *out.entry(flow).or_insert(0) += n;
            }
        }
        Ok(out)
    }

    async fn peek(&self, count: usize) -> Result<Vec<Item>> {
        // Partition by partition, each in its own claim order: there is
        // no order across partitions (SPEC 6.1).
        let mut all = Vec::new();
        for (p, q) in self.parts.iter().enumerate() {
            if all.len() >= count {
                break;
            }
            for item in q.peek(count - all.len()).await? {
                all.push(self.lift_item(p, item)?);
            }
        }
        Ok(all)
    }

    async fn list(&self, query: crate::ListQuery) -> Result<crate::ItemPage> {
        self.list_items(query).await
    }

    async fn find(&self, id: u64) -> Result<Option<crate::ListedItem>> {
        self.find_item(id).await
    }

    async fn now_ms(&self) -> Result<u64> {
        self.parts[0].now_ms().await
    }

    // SPEC 6.1 and 13: a schedule lives in the partition its items go to
    // (its flow's; a default-flow schedule's by its name), so its items
    // and the move of its next fire time are one write of one partition.

    async fn upsert_schedule(&self, schedule: crate::Schedule) -> Result<bool> {
        schedule.check()?;
        let p = self.schedule_part(&schedule);
        for q in 0..self.parts.len() {
            if q != p && self.holds_schedule(q, schedule.name()).await? {
                return Err(Error::invalid(format!(
                    "schedule {:?} lives in partition {q} and its new flow belongs to partition {p}: remove it first",
                    schedule.name()
                )));
            }
        }
        self.parts[p].upsert_schedule(schedule).await
    }

    async fn remove_schedule(&self, name: String) -> Result<bool> {
        for q in &self.parts {
            if q.remove_schedule(&name).await? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    async fn pause_schedule(&self, name: String) -> Result<bool> {
        for q in &self.parts {
            if q.pause_schedule(&name).await? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    async fn resume_schedule(&self, name: String) -> Result<bool> {
        for q in &self.parts {
            if q.resume_schedule(&name).await? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    async fn schedules(&self) -> Result<Vec<crate::ScheduleInfo>> {
        let mut out = Vec::new();
        for (p, q) in self.parts.iter().enumerate() {
            for mut s in q.schedules().await? {
                s.last_item = s.last_item.map(|id| self.global(p, id)).transpose()?;
                out.push(s);
            }
        }
        out.sort_by(|a, b| a.schedule.name().cmp(b.schedule.name()));
        Ok(out)
    }

    async fn preview_schedule(&self, name: String, count: usize) -> Result<Vec<u64>> {
        for (p, q) in self.parts.iter().enumerate() {
            if self.holds_schedule(p, &name).await? {
                return q.preview_schedule(&name, count).await;
            }
        }
        Err(Error::invalid(format!("no schedule named {name:?}")))
    }

    async fn fire_schedules(&self) -> Result<crate::Fired> {
        let mut items = 0;
        let mut next: Option<u64> = None;
        for q in &self.parts {
            let f = q.fire_schedules().await?;
            items += f.items;
            next = match (next, f.next_fire_ms) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        Ok(crate::Fired::new(items, next))
    }

    async fn compact(&self) -> Result<bool> {
        let mut any = false;
        for q in &self.parts {
            any |= q.compact().await?;
        }
        Ok(any)
    }

    async fn close(&self) -> Result<()> {
        let mut first_err = None;
        for q in &self.parts {
            if let Err(e) = q.close().await {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}
