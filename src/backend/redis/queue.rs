//! The [`WorkQueue`] implementation of [`RedisQueue`]: each operation
//! is one script call (or one plain command) with its arguments and reply.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::time::Duration;

use redis::Value;

use super::cancel::receipts_of;
use super::reply::{self, array, at, bytes, claims, int, opt_uint, text, uint};
use super::scripts::{DEAD_LETTERED, DEFAULT_FLOW, DELAYED, IS_PENDING, LOST, PARKED};
use super::wait::outcome_in_events;
use super::{MAX_LUA_MS, RedisQueue, bounded, n_arg, receipt_args};
use crate::config::ms;
use crate::error::{Error, Result};
use crate::item::{
    Added, CancelOutcome, ClaimFrom, Claimed, DeadLetter, Item, ItemUpdate, NewItem, Receipt,
    Reclaimed, RetryOutcome, Stats, require_flow,
};
use crate::limit::{FlowLimit, FlowLimits, FlowState, RateLimit, check_limit};
use crate::outcome::{Chunk, Outcome, check_size};
use crate::queue::{Backend, WorkQueue, dispatch};
use crate::request::{Reply, Request};

impl WorkQueue for RedisQueue {
    fn call(&self, request: Request) -> impl Future<Output = Result<Reply>> + Send {
        dispatch(self, request)
    }

    fn max_deliveries(&self) -> u32 {
        self.inner.config.max_deliveries
    }
}

impl Backend for RedisQueue {
    async fn add(&self, item: NewItem) -> Result<Added> {
        self.add_combined(item, None).await
    }

    async fn add_batch(&self, items: Vec<NewItem>) -> Result<Vec<Added>> {
        self.add_many(items.into_iter().map(|i| (i, None)).collect())
            .await
    }

    async fn add_delayed(&self, item: NewItem, not_before_ms: u64) -> Result<Added> {
        self.add_combined(item, Some(not_before_ms)).await
    }

    /// SPEC 3, Timers: one script (`next_due.lua`) that notes the clock
    /// first, so that after a step back it reads the moved timers (SPEC 3,
    /// Clock steps).
    async fn next_due(&self) -> Result<Option<u64>> {
        let v = self
            .run("next_due", &self.inner.scripts.next_due, Vec::new(), false)
            .await?;
        opt_uint(&v, "next_due")
    }

    async fn promote_due(&self) -> Result<u64> {
        let v = self
            .run("promote_due", &self.inner.scripts.promote, Vec::new(), true)
            .await?;
        uint(&v, "promote_due")
    }

    /// SPEC 3, Timers: one script (`control.lua`) moves delayed item `id`
    /// to the due lane's tail as a promotion now would.
    async fn promote(&self, id: u64) -> Result<bool> {
        let args = vec![b"promote".to_vec(), id.to_string().into_bytes()];
        let v = self
            .run("promote", &self.inner.scripts.control, args, true)
            .await?;
        Ok(uint(&v, "promote")? == 1)
    }

    async fn claim(&self, count: usize, wait: Duration, from: ClaimFrom) -> Result<Vec<Claimed>> {
        if count == 0 {
            return Err(Error::invalid("claim count must be at least 1"));
        }
        let deadline = crate::clock::wait_deadline(wait);
        loop {
            let (got, tail, next_due, now) = self.claim_once(count, from).await?;
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if !got.is_empty() || left.is_zero() {
                return Ok(got);
            }
            let block = left;
            let timer = match (next_due, &self.inner.clock) {
                (Some(t), Some(clock)) => Some(clock.sleep_until(t)),
                // Wait for the next due time with a local timer, not with
                // the server's BLOCK timeout: the server checks those only
                // at its `hz` tick (every 100 ms by default), which made
                // timers up to 100 ms late.
                (Some(t), None) => {
                    let due = Duration::from_millis(t.saturating_sub(now).max(1));
                    if due < block {
                        Some(Box::pin(tokio::time::sleep(due)) as crate::clock::Sleep)
                    } else {
                        None
                    }
                }
                (None, _) => None,
            };
            self.wait_for_wake("wake", &tail, 1, block, timer).await?;
        }
    }

    async fn ack(&self, receipt: Receipt) -> Result<()> {
        Backend::ack_with_result(self, receipt, Vec::new()).await
    }

    async fn ack_with_result(&self, receipt: Receipt, result: Vec<u8>) -> Result<()> {
        check_size("result", result.len(), self.inner.config.max_payload_bytes)?;
        let mut args = vec![self.result_ttl_arg(), self.retention_arg(true)];
        receipt_args(&mut args, &receipt);
        args.push(result);
        let v = self.run("ack", &self.inner.scripts.ack, args, true).await?;
        if uint(&v, "ack")? == 1 {
            Ok(())
        } else {
            Err(self.lost_or_cancelled(&receipt).await)
        }
    }

    async fn outcome(&self, id: u64) -> Result<Option<Outcome>> {
        Ok(self.outcome_once(id).await?.0)
    }

    async fn wait_outcome(&self, id: u64, wait: Duration) -> Result<Option<Outcome>> {
        let deadline = crate::clock::wait_deadline(wait);
        loop {
            let (found, tail) = self.outcome_once(id).await?;
            if found.is_some() || tokio::time::Instant::now() >= deadline {
                return Ok(found);
            }
            // An ack with a small result signals the outcome itself: no
            // second read on the way back.
            let events = self.wait_for_event(&tail, deadline).await?;
            if let Some(outcome) = outcome_in_events(&events, id) {
                return Ok(Some(outcome));
            }
        }
    }

    async fn set_progress(&self, receipt: Receipt, progress: Vec<u8>) -> Result<()> {
        self.publish("progress", receipt, progress)
            .await
            .map(|_| ())
    }

    async fn send_chunk(&self, receipt: Receipt, chunk: Vec<u8>) -> Result<u64> {
        self.publish("chunk", receipt, chunk).await
    }

    async fn progress(&self, id: u64) -> Result<Option<Vec<u8>>> {
        let args = vec![b"get_progress".to_vec(), id.to_string().into_bytes()];
        let v = self
            .run("progress", &self.inner.scripts.result, args, false)
            .await?;
        let a = array(&v, "progress")?;
        if int(at(a, 0, "progress")?, "progress found")? == 0 {
            return Ok(None);
        }
        Ok(Some(bytes(at(a, 1, "progress")?, "progress")?))
    }

    async fn wait_chunks(&self, id: u64, after_seq: u64, wait: Duration) -> Result<Vec<Chunk>> {
        let deadline = crate::clock::wait_deadline(wait);
        loop {
            let (chunks, finished, tail) = self.chunks_once(id, after_seq).await?;
            if !chunks.is_empty() || finished || tokio::time::Instant::now() >= deadline {
                return Ok(chunks);
            }
            self.wait_for_event(&tail, deadline).await?;
        }
    }

    async fn ack_batch(&self, receipts: Vec<Receipt>) -> Result<u64> {
        if receipts.is_empty() {
            return Ok(0);
        }
        let mut args = Vec::with_capacity(2 + receipts.len() * 3);
        args.push(self.result_ttl_arg());
        args.push(self.retention_arg(true));
        for r in &receipts {
            receipt_args(&mut args, r);
            args.push(Vec::new());
        }
        let v = self
            .run("ack_batch", &self.inner.scripts.ack, args, true)
            .await?;
        let n = uint(&v, "ack_batch")?;
        if n < receipts.len() as u64 {
            // SPEC 3, Cancelling: the receipts of marked items end them
            // (not counted). Only when some receipt was not acked.
            if let Err(e) = self.end_cancelled(&receipts).await {
                tracing::warn!(error = %e, "cancelled items could not be ended yet");
            }
        }
        Ok(n)
    }

    async fn touch(&self, receipts: Vec<Receipt>) -> Result<()> {
        if receipts.is_empty() {
            return Ok(());
        }
        let mut args = Vec::with_capacity(receipts.len() * 2);
        for r in &receipts {
            receipt_args(&mut args, r);
        }
        let v = self
            .run("touch", &self.inner.scripts.touch, args, true)
            .await?;
        let lost = uint(&v, "touch")?;
        if lost == 0 {
            return Ok(());
        }
        let r = usize::try_from(lost - 1)
            .ok()
            .and_then(|i| receipts.get(i))
            .ok_or_else(|| Error::backend(format!("redis touch named receipt {lost}")))?;
        Err(self.lost_or_cancelled(r).await)
    }

    async fn retry(&self, receipt: Receipt, not_before_ms: u64) -> Result<RetryOutcome> {
        let c = &self.inner.config;
        let mut args = Vec::new();
        receipt_args(&mut args, &receipt);
        args.push(not_before_ms.min(MAX_LUA_MS).to_string().into_bytes());
        args.push(c.max_deliveries.to_string().into_bytes());
        args.push(c.dead_letter_cap.min(MAX_LUA_MS).to_string().into_bytes());
        args.push(self.result_ttl_arg());
        let v = self
            .run("retry", &self.inner.scripts.retry, args, true)
            .await?;
        let a = array(&v, "retry")?;
        match int(at(a, 0, "retry")?, "retry")? {
            DELAYED => Ok(RetryOutcome::Delayed),
            DEAD_LETTERED => {
                self.log_dropped(uint(at(a, 1, "retry")?, "retry dropped")?);
                Ok(RetryOutcome::DeadLettered)
            }
            _ => Err(self.lost_or_cancelled(&receipt).await),
        }
    }

    async fn release(&self, receipt: Receipt, not_before_ms: u64) -> Result<()> {
        let mut args = Vec::new();
        receipt_args(&mut args, &receipt);
        args.push(not_before_ms.min(MAX_LUA_MS).to_string().into_bytes());
        let v = self
            .run("release", &self.inner.scripts.release, args, true)
            .await?;
        if int(&v, "release")? < 0 {
            return Err(self.lost_or_cancelled(&receipt).await);
        }
        Ok(())
    }

    async fn dead_letter(&self, receipt: Receipt, reason: &str) -> Result<()> {
        let mut args = Vec::new();
        receipt_args(&mut args, &receipt);
        args.push(reason.as_bytes().to_vec());
        args.push(
            self.inner
                .config
                .dead_letter_cap
                .min(MAX_LUA_MS)
                .to_string()
                .into_bytes(),
        );
        args.push(self.result_ttl_arg());
        let v = self
            .run("dead_letter", &self.inner.scripts.dead_letter, args, true)
            .await?;
        let n = int(&v, "dead_letter")?;
        if n == LOST {
            return Err(self.lost_or_cancelled(&receipt).await);
        }
        self.log_dropped(n.unsigned_abs());
        Ok(())
    }

    async fn reclaim(&self, min_idle: Duration, count: usize) -> Result<Reclaimed> {
        if count == 0 {
            return Err(Error::invalid("reclaim count must be at least 1"));
        }
        let c = &self.inner.config;
        let args = vec![
            self.inner.consumer.clone().into_bytes(),
            ms(min_idle).min(MAX_LUA_MS).to_string().into_bytes(),
            n_arg(count),
            c.max_deliveries.to_string().into_bytes(),
            c.dead_letter_cap.min(MAX_LUA_MS).to_string().into_bytes(),
            self.result_ttl_arg(),
            self.retention_arg(false),
        ];
        let v = self
            .run("reclaim", &self.inner.scripts.reclaim, args, true)
            .await?;
        let a = array(&v, "reclaim")?;
        let got = claims(at(a, 0, "reclaim")?)?;
        self.log_missing(uint(at(a, 1, "reclaim")?, "reclaim missing")?, "reclaim");
        self.log_dropped(uint(at(a, 2, "reclaim")?, "reclaim dropped")?);
        let dead_lettered = receipts_of(at(a, 3, "reclaim")?, "reclaim dead")?;
        let cancelled = receipts_of(at(a, 4, "reclaim")?, "reclaim cancelled")?;
        Ok(Reclaimed {
            claimed: got,
            dead_lettered,
            cancelled,
        })
    }

    async fn pause(&self, flow: &str) -> Result<()> {
        require_flow(flow)?;
        let _: i64 = self
            .simple(
                "SADD",
                redis::cmd("SADD")
                    .arg(format!("{}paused", self.inner.prefix))
                    .arg(flow)
                    .clone(),
            )
            .await?;
        self.wait_replicas().await
    }

    async fn resume(&self, flow: &str) -> Result<u64> {
        require_flow(flow)?;
        let v = self
            .run(
                "resume",
                &self.inner.scripts.resume,
                vec![flow.as_bytes().to_vec()],
                true,
            )
            .await?;
        uint(&v, "resume")
    }

    async fn park(&self, receipt: Receipt) -> Result<()> {
        let mut args = Vec::new();
        receipt_args(&mut args, &receipt);
        let v = self
            .run("park", &self.inner.scripts.park, args, true)
            .await?;
        match int(&v, "park")? {
            PARKED => Ok(()),
            // The script found the item in the default flow, which cannot be
            // parked: the same refusal the other backends give.
            DEFAULT_FLOW => require_flow(""),
            _ => Err(self.lost_or_cancelled(&receipt).await),
        }
    }

    async fn step(&self, flow: &str) -> Result<Option<Claimed>> {
        require_flow(flow)?;
        let args = vec![
            self.inner.consumer.clone().into_bytes(),
            flow.as_bytes().to_vec(),
        ];
        let v = self
            .run("step", &self.inner.scripts.step, args, true)
            .await?;
        Ok(claims(&v)?.pop())
    }

    async fn clear_flow(&self, flow: &str) -> Result<u64> {
        require_flow(flow)?;
        let v = self
            .run(
                "clear_flow",
                &self.inner.scripts.clear_flow,
                vec![flow.as_bytes().to_vec()],
                true,
            )
            .await?;
        uint(&v, "clear_flow")
    }

    async fn parked(&self, flow: &str) -> Result<u64> {
        self.simple(
            "LLEN",
            redis::cmd("LLEN")
                .arg(format!("{}parked:{flow}", self.inner.prefix))
                .clone(),
        )
        .await
    }

    async fn set_flow_limit(&self, flow: &str, limit: FlowLimit) -> Result<()> {
        check_limit(flow, &limit)?;
        let mut args = vec![b"set".to_vec(), flow.as_bytes().to_vec()];
        let (kind, a, b) = match limit {
            FlowLimit::Rate(Some(r)) => (
                "rate",
                r.permits.to_string(),
                r.period_ms.min(MAX_LUA_MS).to_string(),
            ),
            FlowLimit::Rate(None) => ("rate", String::new(), String::new()),
            FlowLimit::Concurrency(k) => (
                "cap",
                k.map(|k| k.to_string()).unwrap_or_default(),
                String::new(),
            ),
            FlowLimit::BackOffUntil(t) => (
                "until",
                t.map(|t| t.min(MAX_LUA_MS).to_string()).unwrap_or_default(),
                String::new(),
            ),
        };
        args.extend([kind.as_bytes().to_vec(), a.into_bytes(), b.into_bytes()]);
        self.run("set_flow_limit", &self.inner.scripts.limit, args, true)
            .await?;
        Ok(())
    }

    /// SPEC 3, Flow limits: one script reads the queue's clock (the
    /// injected one or the server's `TIME`, as every script does), and
    /// sets the hold to now + `duration` unless a longer one is in force.
    async fn back_off(&self, flow: &str, duration: Duration) -> Result<()> {
        check_limit(flow, &FlowLimit::BackOffUntil(None))?;
        let args = vec![
            b"back_off".to_vec(),
            flow.as_bytes().to_vec(),
            ms(duration).min(MAX_LUA_MS).to_string().into_bytes(),
        ];
        self.run("back_off", &self.inner.scripts.limit, args, true)
            .await?;
        Ok(())
    }

    async fn flow_limits(&self) -> Result<Vec<FlowLimits>> {
        let v = self
            .run(
                "flow_limits",
                &self.inner.scripts.limit,
                vec![b"list".to_vec()],
                false,
            )
            .await?;
        let mut out = Vec::new();
        for row in array(&v, "flow_limits")? {
            let r = array(row, "flow limit")?;
            let u = |i: usize, what: &str| -> Result<u64> { uint(at(r, i, "flow limit")?, what) };
            let rate = match (u32::try_from(u(1, "rate permits")?), u(2, "rate period")?) {
                (Ok(permits), period_ms) if permits > 0 && period_ms > 0 => {
                    Some(RateLimit { permits, period_ms })
                }
                _ => None,
            };
            let til = u(4, "back-off")?;
            let mut l = FlowState {
                rate,
                cap: u32::try_from(u(3, "cap")?).ok().filter(|k| *k > 0),
                ..FlowState::default()
            }
            .listing(&text(at(r, 0, "flow limit")?, "flow")?, 0);
            l.backoff_until_ms = (til > 0).then_some(til);
            l.permits_used = u(5, "permits used")?;
            l.pending = u(6, "pending")?;
            l.held = u(7, "held")?;
            l.blocked = u(8, "may run")? == 0;
            out.push(l);
        }
        Ok(out)
    }

    async fn paused_flows(&self) -> Result<Vec<String>> {
        let v: Value = self
            .simple(
                "SMEMBERS",
                redis::cmd("SMEMBERS")
                    .arg(format!("{}paused", self.inner.prefix))
                    .clone(),
            )
            .await?;
        let mut flows = array(&v, "paused_flows")?
            .iter()
            .map(|f| text(f, "paused flow"))
            .collect::<Result<Vec<_>>>()?;
        flows.sort();
        Ok(flows)
    }

    async fn mark_done(&self, id: u64, step: &str) -> Result<()> {
        let args = vec![
            b"mark".to_vec(),
            id.to_string().into_bytes(),
            step.as_bytes().to_vec(),
            ms(self.inner.config.done_ttl)
                .min(MAX_LUA_MS)
                .to_string()
                .into_bytes(),
        ];
        self.run("mark_done", &self.inner.scripts.done, args, true)
            .await?;
        Ok(())
    }

    async fn was_done(&self, id: u64, step: &str) -> Result<bool> {
        let args = vec![
            b"check".to_vec(),
            id.to_string().into_bytes(),
            step.as_bytes().to_vec(),
            b"0".to_vec(),
        ];
        let v = self
            .run("was_done", &self.inner.scripts.done, args, false)
            .await?;
        Ok(uint(&v, "was_done")? == 1)
    }

    async fn dead_letters(&self, count: usize) -> Result<Vec<DeadLetter>> {
        let args = vec![b"list".to_vec(), n_arg(count)];
        let v = self
            .run("dead_letters", &self.inner.scripts.dead, args, false)
            .await?;
        array(&v, "dead_letters")?
            .iter()
            .map(|d| {
                let item = reply::item(d, 8)?;
                let a = array(d, "dead letter")?;
                Ok(DeadLetter {
                    item,
                    reason: String::from_utf8_lossy(&bytes(at(a, 6, "dead letter")?, "reason")?)
                        .into_owned(),
                    failed_at_ms: uint(at(a, 7, "dead letter")?, "failed_at")?,
                })
            })
            .collect()
    }

    async fn redrive(&self, id: u64) -> Result<bool> {
        let args = vec![b"redrive".to_vec(), id.to_string().into_bytes()];
        let v = self
            .run("redrive", &self.inner.scripts.dead, args, true)
            .await?;
        Ok(uint(&v, "redrive")? == 1)
    }

    async fn purge_dead_letters(&self) -> Result<u64> {
        let args = vec![b"purge".to_vec(), Vec::new()];
        let v = self
            .run("purge_dead_letters", &self.inner.scripts.dead, args, true)
            .await?;
        uint(&v, "purge_dead_letters")
    }

    /// SPEC 3, Removing: one script (`control.lua`) takes item `id` out of
    /// whichever lane, list or set holds it and deletes its record,
    /// progress and chunks; a dead letter's outcome stays (as with a purge)
    /// and a dedup key is left to expire.
    async fn remove(&self, id: u64) -> Result<bool> {
        let args = vec![b"remove".to_vec(), id.to_string().into_bytes()];
        let v = self
            .run("remove", &self.inner.scripts.control, args, true)
            .await?;
        match int(&v, "remove")? {
            1 => Ok(true),
            0 => Ok(false),
            IS_PENDING => Err(Error::invalid(format!(
                "item {id} is pending: a consumer holds it, so it is finished through its receipt (ack, retry, dead_letter), not removed"
            ))),
            other => Err(Error::backend(format!(
                "redis remove script answered {other}"
            ))),
        }
    }

    async fn cancel(&self, id: u64) -> Result<CancelOutcome> {
        self.cancel_item(id).await
    }

    async fn wait_cancelled(&self, ids: Vec<u64>, wait: Duration) -> Result<Vec<u64>> {
        self.wait_marked(&ids, wait).await
    }

    async fn update(&self, id: u64, update: ItemUpdate) -> Result<bool> {
        self.update_item(id, update).await
    }

    async fn schedule_load(
        &self,
        scan: crate::schedule::fire::ScheduleScan,
    ) -> Result<crate::schedule::fire::ScheduleRows> {
        self.schedule_load_rows(scan).await
    }

    async fn schedule_swap(
        &self,
        swap: crate::schedule::fire::ScheduleSwap,
    ) -> Result<Option<Vec<u64>>> {
        match self.schedule_swaps(vec![swap]).await?.pop() {
            Some(one) => one,
            None => Err(Error::backend("redis schedule script answered no swap")),
        }
    }

    async fn schedule_swap_many(
        &self,
        swaps: Vec<crate::schedule::fire::ScheduleSwap>,
    ) -> Result<Vec<Result<Option<Vec<u64>>>>> {
        self.schedule_swaps(swaps).await
    }

    async fn stats(&self) -> Result<Stats> {
        self.read_stats().await
    }

    async fn backlog_by_flow(&self, sample: usize) -> Result<BTreeMap<String, u64>> {
        let mut out = BTreeMap::new();
        if sample == 0 {
            return Ok(out);
        }
        let v = self.look("flows", sample).await?;
        for f in array(&v, "backlog_by_flow")? {
            *out.entry(text(f, "flow")?).or_insert(0) += 1;
        }
        Ok(out)
    }

    async fn peek(&self, count: usize) -> Result<Vec<Item>> {
        if count == 0 {
            return Ok(Vec::new());
        }
        let v = self.look("peek", count).await?;
        array(&v, "peek")?
            .iter()
            .map(|i| reply::item(i, 6))
            .collect()
    }

    async fn list(&self, query: crate::ListQuery) -> Result<crate::ItemPage> {
        self.list_items(query).await
    }

    async fn find(&self, id: u64) -> Result<Option<crate::ListedItem>> {
        self.find_item(id).await
    }

    async fn now_ms(&self) -> Result<u64> {
        self.check_open()?;
        if let Some(c) = &self.inner.clock {
            return Ok(c.now_ms());
        }
        self.check_open()?;
        let mut conn = self.inner.conn.clone();
        // The clock of the primary that runs the scripts (any node's, else).
        let (secs, micros): (u64, u64) = bounded(
            "TIME",
            self.limit(),
            conn.at_primary_of(&self.inner.prefix, redis::cmd("TIME")),
        )
        .await?;
        Ok(secs.saturating_mul(1000).saturating_add(micros / 1000))
    }

    async fn close(&self) -> Result<()> {
        self.inner.closed.store(true, Ordering::Release);
        self.inner.close_signal.notify_waiters();
        self.inner
            .blockers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        Ok(())
    }
}
