//! Redo record bodies: a batch's header fields (the settings its
//! operations read, the latest clock reading, the batch time) and its
//! operations that changed something, each with its time; version byte 1,
//! then varints and length-prefixed bytes.

use std::time::Duration;

use crate::backend::embedded::tables::Limits;
use crate::backend::embedded::writer::Op;
use crate::config::Retention;
use crate::error::{Error, Result};
use crate::item::{ClaimFrom, ItemUpdate, NewItem, Receipt};
use crate::limit::{FlowLimit, RateLimit};

/// The body's format version: 2 adds the retentions of the history (SPEC
/// 3, History; schema 8) to the settings. A body of version 1, written by
/// a build that kept no history, is replayed keeping none.
const BODY_VERSION: u8 = 2;

/// What one batch's record holds.
#[derive(Debug)]
pub(in crate::backend::embedded) struct Batch {
    pub(in crate::backend::embedded) limits: Limits,
    /// The latest clock reading before the batch (SPEC 3, Clock steps).
    pub(in crate::backend::embedded) latest: u64,
    /// The batch's time: the latest of its operations' times.
    pub(in crate::backend::embedded) now: u64,
    /// The operations that changed something, in order, each with its time.
    pub(in crate::backend::embedded) ops: Vec<(Op, u64)>,
}

struct W<'a>(&'a mut Vec<u8>);

impl W<'_> {
    fn u(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }
    fn b(&mut self, bytes: &[u8]) {
        self.u(bytes.len() as u64);
        self.0.extend_from_slice(bytes);
    }
    fn opt(&mut self, v: Option<u64>) {
        match v {
            None => self.u(0),
            Some(v) => {
                self.u(1);
                self.u(v);
            }
        }
    }
    fn receipt(&mut self, r: &Receipt) {
        self.u(r.id);
        self.u(u64::from(r.delivery));
        self.u(r.lease);
    }
    fn receipts(&mut self, rs: &[Receipt]) {
        self.u(rs.len() as u64);
        for r in rs {
            self.receipt(r);
        }
    }
}

/// Append a batch's header fields to `out` (the body begun by
/// `Log::start_record`, empty until now); the operations follow, each
/// appended by [`encode_op`].
pub(in crate::backend::embedded) fn begin_batch(
    out: &mut Vec<u8>,
    limits: &Limits,
    latest: u64,
    now: u64,
) {
    out.push(BODY_VERSION);
    let mut w = W(out);
    w.u(u64::from(limits.max_deliveries));
    w.u(limits.done_ttl_ms);
    w.u(limits.result_ttl_ms);
    w.u(limits.dedup_window_ms);
    w.u(limits.dead_letter_cap);
    w.opt(limits.max_backlog);
    w.u(limits.max_payload_bytes as u64);
    w.u(limits.aging_step.as_secs());
    w.u(u64::from(limits.aging_step.subsec_nanos()));
    for r in [limits.completed_retention, limits.cancelled_retention] {
        w.u(r.count());
        w.u(r.age_ms());
    }
    w.u(latest);
    w.u(now);
}

/// What replaying `op` costs, in single-item operations: the items of an
/// add, the receipts of a batch ack or touch, the count of a claim or
/// reclaim; 1 for the rest. [`Policy::ops`] counts these, so that a few
/// large batches cannot leave a long replay.
pub(in crate::backend::embedded) fn weight(op: &Op) -> u64 {
    let n = match op {
        Op::Add(items) => items.len(),
        Op::AckBatch(rs) | Op::Touch(rs) => rs.len(),
        Op::ScheduleSwap(swap) => swap.items.len(),
        Op::Claim { count, .. } | Op::Reclaim { count, .. } => *count,
        #[cfg(feature = "forward")]
        Op::ForwardDone { ids, .. } => ids.len(),
        _ => 1,
    };
    n.max(1) as u64
}

/// Append one operation (with its time) to a batch body; false (and
/// nothing appended) for an operation that never writes.
pub(in crate::backend::embedded) fn encode_op(out: &mut Vec<u8>, op: &Op, now: u64) -> bool {
    if op.is_read() {
        return false;
    }
    let mut w = W(out);
    w.u(now);
    match op {
        Op::Add(items) => {
            w.u(1);
            w.u(items.len() as u64);
            for (item, nb) in items {
                new_item(&mut w, item);
                w.opt(*nb);
            }
        }
        Op::Promote => w.u(2),
        Op::Claim { count, from } => {
            w.u(3);
            w.u(*count as u64);
            w.u(match from {
                ClaimFrom::All => 0,
                ClaimFrom::DueOnly => 1,
            });
        }
        Op::Ack(r, result) => {
            w.u(4);
            w.receipt(r);
            w.b(result);
        }
        Op::SetProgress(r, progress) => {
            w.u(21);
            w.receipt(r);
            w.b(progress);
        }
        Op::SendChunk(r, chunk) => {
            w.u(22);
            w.receipt(r);
            w.b(chunk);
        }
        Op::AckBatch(rs) => {
            w.u(5);
            w.receipts(rs);
        }
        Op::Touch(rs) => {
            w.u(6);
            w.receipts(rs);
        }
        Op::Retry(r, nb) => {
            w.u(7);
            w.receipt(r);
            w.u(*nb);
        }
        Op::Release(r, nb) => {
            w.u(8);
            w.receipt(r);
            w.u(*nb);
        }
        Op::DeadLetter(r, reason) => {
            w.u(9);
            w.receipt(r);
            w.b(reason.as_bytes());
        }
        Op::Reclaim { min_idle_ms, count } => {
            w.u(10);
            w.u(*min_idle_ms);
            w.u(*count as u64);
        }
        Op::Pause(f) => {
            w.u(11);
            w.b(f.as_bytes());
        }
        Op::Resume(f) => {
            w.u(12);
            w.b(f.as_bytes());
        }
        Op::Park(r) => {
            w.u(13);
            w.receipt(r);
        }
        Op::Step(f) => {
            w.u(14);
            w.b(f.as_bytes());
        }
        Op::ClearFlow(f) => {
            w.u(15);
            w.b(f.as_bytes());
        }
        Op::MarkDone(id, step) => {
            w.u(16);
            w.u(*id);
            w.b(step.as_bytes());
        }
        Op::Redrive(id) => {
            w.u(17);
            w.u(*id);
        }
        Op::PurgeDead => w.u(18),
        // Schema 5 (SPEC 6): codes 24-26 are new; a schema-4 build refuses
        // a schema-5 file by its version before it could meet them.
        Op::PromoteId(id) => {
            w.u(24);
            w.u(*id);
        }
        Op::Remove(id) => {
            w.u(25);
            w.u(*id);
        }
        // Schema 7 (SPEC 3, Cancelling): a schema-6 build refuses a
        // schema-7 file by its version before it could meet codes 28-29.
        Op::Cancel(id) => {
            w.u(28);
            w.u(*id);
        }
        Op::EndCancelled(r) => {
            w.u(29);
            w.receipt(r);
        }
        // Schema 7 (SPEC 3, Updating): code 30 is new with schema 7 too.
        Op::Update(id, update) => {
            w.u(30);
            w.u(*id);
            w.opt(update.priority.map(u64::from));
            w.opt(update.not_before_ms);
            match &update.payload {
                None => w.u(0),
                Some(p) => {
                    w.u(1);
                    w.b(p);
                }
            }
        }
        Op::BackOff(flow, duration_ms) => {
            w.u(26);
            w.b(flow.as_bytes());
            w.u(*duration_ms);
        }
        // Schema 6 (SPEC 13): a schema-5 build refuses a schema-6 file by
        // its version before it could meet code 27.
        Op::ScheduleSwap(swap) => {
            w.u(27);
            w.b(swap.name.as_bytes());
            w.u(swap.expect);
            match &swap.write {
                None => w.u(0),
                Some((index, record)) => {
                    w.u(1);
                    w.opt(*index);
                    w.b(record);
                }
            }
            w.u(swap.items.len() as u64);
            for (item, slot) in &swap.items {
                new_item(&mut w, item);
                w.u(*slot);
            }
        }
        #[cfg(feature = "forward")]
        Op::ForwardJournal(candidate) => {
            w.u(19);
            w.u(*candidate);
        }
        #[cfg(feature = "forward")]
        Op::ForwardDone { key, ids, mark } => {
            w.u(20);
            w.b(key.as_bytes());
            w.u(ids.len() as u64);
            for id in ids {
                w.u(*id);
            }
            w.u(*mark);
        }
        Op::SetFlowLimit(flow, limit) => {
            w.u(23);
            w.b(flow.as_bytes());
            match limit {
                FlowLimit::Rate(rate) => {
                    w.u(0);
                    match rate {
                        None => w.u(0),
                        Some(rate) => {
                            w.u(1);
                            w.u(u64::from(rate.permits));
                            w.u(rate.period_ms);
                        }
                    }
                }
                FlowLimit::Concurrency(cap) => {
                    w.u(1);
                    w.opt(cap.map(u64::from));
                }
                FlowLimit::BackOffUntil(until) => {
                    w.u(2);
                    w.opt(*until);
                }
            }
        }
        // Reads are never logged (`is_read` above). Listed one by one, not
        // with `_`, so that a new operation that writes cannot be left out
        // of the log without the compiler saying so.
        Op::Outcome(_)
        | Op::Progress(_)
        | Op::Chunks(..)
        | Op::NextDue
        | Op::Parked(_)
        | Op::PausedFlows
        | Op::FlowLimits
        | Op::WasDone(..)
        | Op::DeadLetters(_)
        | Op::Stats
        | Op::BacklogByFlow(_)
        | Op::Peek(_)
        | Op::List(_)
        | Op::Find(_)
        | Op::Cancelling(_)
        | Op::ScheduleLoad(_) => return false,
        #[cfg(feature = "forward")]
        Op::ForwardRead { .. } | Op::ForwardLag(_) => return false,
        #[cfg(feature = "testing")]
        Op::Locations | Op::Dump | Op::Audit => return false,
    }
    true
}

fn new_item(w: &mut W<'_>, item: &NewItem) {
    w.b(item.flow.as_bytes());
    w.b(&item.payload);
    match &item.dedup_key {
        None => w.u(0),
        Some(k) => {
            w.u(1);
            w.b(k.as_bytes());
        }
    }
    w.u(u64::from(item.priority));
    w.u(u64::from(item.cost));
}

struct R<'a> {
    bytes: &'a [u8],
    at: usize,
}

fn bad(detail: impl Into<String>) -> Error {
    Error::Decode {
        what: "a redo log record".into(),
        detail: detail.into(),
    }
}

impl<'a> R<'a> {
    fn byte(&mut self) -> Result<u8> {
        let b = *self
            .bytes
            .get(self.at)
            .ok_or_else(|| bad("the record ends early"))?;
        self.at += 1;
        Ok(b)
    }
    fn u(&mut self) -> Result<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f)
                .checked_shl(shift)
                .ok_or_else(|| bad("a number overflows"))?;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(bad("a number is too long"))
    }
    fn u32(&mut self) -> Result<u32> {
        u32::try_from(self.u()?).map_err(|_| bad("a number overflows"))
    }
    fn usize(&mut self) -> Result<usize> {
        usize::try_from(self.u()?).map_err(|_| bad("a number overflows"))
    }
    fn b(&mut self) -> Result<&'a [u8]> {
        let n = self.usize()?;
        let end = self
            .at
            .checked_add(n)
            .filter(|e| *e <= self.bytes.len())
            .ok_or_else(|| bad("a field runs past the record"))?;
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn s(&mut self) -> Result<String> {
        String::from_utf8(self.b()?.to_vec()).map_err(|_| bad("a text field is not UTF-8"))
    }
    fn opt(&mut self) -> Result<Option<u64>> {
        match self.u()? {
            0 => Ok(None),
            1 => Ok(Some(self.u()?)),
            t => Err(bad(format!("option tag {t}"))),
        }
    }
    fn receipt(&mut self) -> Result<Receipt> {
        Ok(Receipt {
            id: self.u()?,
            delivery: self.u32()?,
            lease: self.u()?,
        })
    }
    /// A count of things of at least `min` bytes each, checked against the
    /// bytes left, so that a length never allocates more than the record.
    fn count(&mut self, min: usize) -> Result<usize> {
        let n = self.usize()?;
        if n.saturating_mul(min) > self.bytes.len() - self.at {
            return Err(bad("a count exceeds the record"));
        }
        Ok(n)
    }
    fn receipts(&mut self) -> Result<Vec<Receipt>> {
        let n = self.count(3)?;
        (0..n).map(|_| self.receipt()).collect()
    }
}

/// Decode a record body written by [`begin_batch`] and [`encode_op`].
///
/// # Errors
///
/// `Decode` for a body this build cannot read (a newer format, an unknown
/// operation, a malformed field).
pub(in crate::backend::embedded) fn decode_batch(body: &[u8]) -> Result<Batch> {
    let mut r = R { bytes: body, at: 0 };
    let version = r.byte()?;
    if version != BODY_VERSION && version != 1 {
        return Err(bad(format!(
            "record format {version}; this build reads {BODY_VERSION}: upgrade workjournal"
        )));
    }
    let limits = Limits {
        max_deliveries: r.u32()?,
        done_ttl_ms: r.u()?,
        result_ttl_ms: r.u()?,
        dedup_window_ms: r.u()?,
        dead_letter_cap: r.u()?,
        max_backlog: r.opt()?,
        max_payload_bytes: r.usize()?,
        aging_step: {
            let secs = r.u()?;
            let nanos = r.u32()?;
            if nanos >= 1_000_000_000 {
                return Err(bad("aging step nanoseconds out of range"));
            }
            Duration::new(secs, nanos)
        },
        completed_retention: Retention::none(),
        cancelled_retention: Retention::none(),
    };
    let mut limits = limits;
    if version >= 2 {
        limits.completed_retention = Retention::new(r.u()?, Duration::from_millis(r.u()?));
        limits.cancelled_retention = Retention::new(r.u()?, Duration::from_millis(r.u()?));
    }
    let latest = r.u()?;
    let now = r.u()?;
    let mut ops = Vec::new();
    while r.at < body.len() {
        let t = r.u()?;
        ops.push((decode_op(&mut r)?, t));
    }
    Ok(Batch {
        limits,
        latest,
        now,
        ops,
    })
}

fn read_new_item(r: &mut R<'_>) -> Result<NewItem> {
    let flow = r.s()?;
    let payload = r.b()?.to_vec();
    let dedup_key = match r.u()? {
        0 => None,
        1 => Some(r.s()?),
        t => return Err(bad(format!("option tag {t}"))),
    };
    let priority = u8::try_from(r.u()?).map_err(|_| bad("priority tier out of range"))?;
    let cost = u32::try_from(r.u()?).map_err(|_| bad("item cost out of range"))?;
    Ok(NewItem {
        flow,
        payload,
        dedup_key,
        priority,
        cost,
    })
}

fn decode_op(r: &mut R<'_>) -> Result<Op> {
    let code = r.u()?;
    Ok(match code {
        1 => {
            let n = r.count(5)?;
            let mut items = Vec::with_capacity(n);
            for _ in 0..n {
                let item = read_new_item(r)?;
                items.push((item, r.opt()?));
            }
            Op::Add(items)
        }
        2 => Op::Promote,
        3 => Op::Claim {
            count: r.usize()?,
            from: match r.u()? {
                0 => ClaimFrom::All,
                1 => ClaimFrom::DueOnly,
                t => return Err(bad(format!("claim lane {t}"))),
            },
        },
        4 => Op::Ack(r.receipt()?, r.b()?.to_vec()),
        21 => Op::SetProgress(r.receipt()?, r.b()?.to_vec()),
        22 => Op::SendChunk(r.receipt()?, r.b()?.to_vec()),
        5 => Op::AckBatch(r.receipts()?),
        6 => Op::Touch(r.receipts()?),
        7 => Op::Retry(r.receipt()?, r.u()?),
        8 => Op::Release(r.receipt()?, r.u()?),
        9 => Op::DeadLetter(r.receipt()?, r.s()?),
        10 => Op::Reclaim {
            min_idle_ms: r.u()?,
            count: r.usize()?,
        },
        11 => Op::Pause(r.s()?),
        12 => Op::Resume(r.s()?),
        13 => Op::Park(r.receipt()?),
        14 => Op::Step(r.s()?),
        15 => Op::ClearFlow(r.s()?),
        16 => Op::MarkDone(r.u()?, r.s()?),
        17 => Op::Redrive(r.u()?),
        18 => Op::PurgeDead,
        24 => Op::PromoteId(r.u()?),
        25 => Op::Remove(r.u()?),
        28 => Op::Cancel(r.u()?),
        29 => Op::EndCancelled(r.receipt()?),
        30 => {
            let id = r.u()?;
            let priority = match r.opt()? {
                None => None,
                Some(t) => Some(u8::try_from(t).map_err(|_| bad(format!("update priority {t}")))?),
            };
            let not_before_ms = r.opt()?;
            let payload = match r.u()? {
                0 => None,
                1 => Some(r.b()?.to_vec()),
                f => return Err(bad(format!("update payload flag {f}"))),
            };
            Op::Update(
                id,
                ItemUpdate {
                    priority,
                    not_before_ms,
                    payload,
                },
            )
        }
        26 => Op::BackOff(r.s()?, r.u()?),
        27 => {
            let name = r.s()?;
            let expect = r.u()?;
            let write = match r.u()? {
                0 => None,
                1 => Some((r.opt()?, r.b()?.to_vec())),
                t => return Err(bad(format!("option tag {t}"))),
            };
            let n = r.count(5)?;
            let mut items = Vec::with_capacity(n);
            for _ in 0..n {
                items.push((read_new_item(r)?, r.u()?));
            }
            Op::ScheduleSwap(crate::schedule::fire::ScheduleSwap {
                name,
                expect,
                write,
                items,
            })
        }
        23 => {
            let flow = r.s()?;
            let limit = match r.u()? {
                0 => FlowLimit::Rate(match r.u()? {
                    0 => None,
                    1 => Some(RateLimit {
                        permits: r.u32()?,
                        period_ms: r.u()?,
                    }),
                    t => return Err(bad(format!("option tag {t}"))),
                }),
                1 => FlowLimit::Concurrency(
                    r.opt()?
                        .map(|k| u32::try_from(k).map_err(|_| bad("concurrency cap out of range")))
                        .transpose()?,
                ),
                2 => FlowLimit::BackOffUntil(r.opt()?),
                t => return Err(bad(format!("flow limit kind {t}"))),
            };
            Op::SetFlowLimit(flow, limit)
        }
        #[cfg(feature = "forward")]
        19 => Op::ForwardJournal(r.u()?),
        #[cfg(feature = "forward")]
        20 => {
            let key = r.s()?;
            let n = r.count(1)?;
            let ids = (0..n).map(|_| r.u()).collect::<Result<Vec<u64>>>()?;
            Op::ForwardDone {
                key,
                ids,
                mark: r.u()?,
            }
        }
        #[cfg(not(feature = "forward"))]
        19 | 20 => {
            return Err(bad(
                "a store-and-forward operation: open the file with a build that has the `forward` feature",
            ));
        }
        other => return Err(bad(format!("unknown operation {other}"))),
    })
}

#[cfg(test)]
mod tests;
