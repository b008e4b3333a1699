//! The arguments and replies of the script calls that take more than a
//! line: add, one claim attempt, outcomes, chunks and progress.

use redis::Value;

use super::reply::{added, array, at, bytes, claims, int, opt_uint, text, uint};
use super::{MAX_LUA_MS, RedisQueue, n_arg, receipt_args, retention_text};
use crate::config::ms;
use crate::error::{Error, Result};
use crate::item::{Added, ClaimFrom, Claimed, NewItem, Receipt, check_new_item};
use crate::outcome::{Chunk, Outcome, OutcomeKind, check_size};

impl RedisQueue {
    pub(super) fn log_missing(&self, missing: u64, what: &str) {
        if missing > 0 {
            tracing::warn!(
                namespace = %self.inner.prefix,
                missing,
                "{what}: entries without an item record (deleted behind the queue's back) were dropped"
            );
        }
    }

    pub(super) fn log_dropped(&self, dropped: u64) {
        if dropped > 0 {
            tracing::warn!(
                namespace = %self.inner.prefix,
                dropped,
                cap = self.inner.config.dead_letter_cap,
                "oldest dead letters dropped: dead_letter_cap reached"
            );
        }
    }

    pub(super) async fn add_many(&self, items: Vec<(NewItem, Option<u64>)>) -> Result<Vec<Added>> {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let c = &self.inner.config;
        let n = items.len();
        let mut args = Vec::with_capacity(2 + n * 8);
        let step = ms(c.aging_step);
        args.push(ms(c.dedup_window).min(MAX_LUA_MS).to_string().into_bytes());
        args.push(match c.max_backlog {
            Some(l) => l.to_string().into_bytes(),
            None => Vec::new(),
        });
        for (item, nb) in items {
            check_new_item(&item, c.max_payload_bytes)?;
            args.push(item.flow.into_bytes());
            args.push(item.payload);
            match item.dedup_key {
                Some(k) => {
                    args.push(b"1".to_vec());
                    args.push(k.into_bytes());
                }
                None => {
                    args.push(b"0".to_vec());
                    args.push(Vec::new());
                }
            }
            args.push(match nb {
                Some(t) => t.min(MAX_LUA_MS).to_string().into_bytes(),
                None => Vec::new(),
            });
            args.push(item.priority.to_string().into_bytes());
            args.push((u64::from(item.priority) * step).to_string().into_bytes());
            args.push(item.cost.max(1).to_string().into_bytes());
        }
        let v = self.run("add", &self.inner.scripts.add, args, true).await?;
        let a = array(&v, "add")?;
        let status = text(at(a, 0, "add")?, "add status")?;
        if status == "full" {
            return Err(Error::Full {
                limit: uint(at(a, 1, "add")?, "add limit")?,
            });
        }
        added(
            n,
            uint(at(a, 1, "add")?, "add first id")?,
            array(at(a, 2, "add")?, "add duplicates")?,
        )
    }

    /// One claim attempt: the items, the wake-stream tail, the next due time
    /// and `now` as the script saw it.
    pub(super) async fn claim_once(
        &self,
        count: usize,
        from: ClaimFrom,
    ) -> Result<(Vec<Claimed>, String, Option<u64>, u64)> {
        let args = vec![
            self.inner.consumer.clone().into_bytes(),
            n_arg(count),
            match from {
                ClaimFrom::All => b"all".to_vec(),
                ClaimFrom::DueOnly => b"due".to_vec(),
            },
        ];
        let v = self
            .run("claim", &self.inner.scripts.claim, args, true)
            .await?;
        let a = array(&v, "claim")?;
        let got = claims(at(a, 0, "claim")?)?;
        self.log_missing(uint(at(a, 1, "claim")?, "claim missing")?, "claim");
        let tail = text(at(a, 3, "claim")?, "claim wake tail")?;
        let next_due = opt_uint(at(a, 4, "claim")?, "claim next due")?;
        let now = uint(at(a, 5, "claim")?, "claim now")?;
        Ok((got, tail, next_due, now))
    }

    /// The retention of completed (`completed`) or cancelled items as the
    /// scripts read it: `<count>:<age ms>:<slack>` (SPEC 3, History).
    pub(super) fn retention_arg(&self, completed: bool) -> Vec<u8> {
        let c = &self.inner.config;
        let r = if completed {
            c.completed_retention
        } else {
            c.cancelled_retention
        };
        retention_text(r).into_bytes()
    }

    pub(super) fn result_ttl_arg(&self) -> Vec<u8> {
        ms(self.inner.config.result_ttl)
            .min(MAX_LUA_MS)
            .to_string()
            .into_bytes()
    }

    /// One look at item `id`'s outcome, and the events-stream tail to wait
    /// after.
    pub(super) async fn outcome_once(&self, id: u64) -> Result<(Option<Outcome>, String)> {
        let args = vec![b"outcome".to_vec(), id.to_string().into_bytes()];
        let v = self
            .run("outcome", &self.inner.scripts.result, args, false)
            .await?;
        let a = array(&v, "outcome")?;
        let tail = text(at(a, 4, "outcome")?, "outcome events tail")?;
        if int(at(a, 0, "outcome")?, "outcome found")? == 0 {
            return Ok((None, tail));
        }
        let value = bytes(at(a, 2, "outcome")?, "outcome value")?;
        let kind = match text(at(a, 1, "outcome")?, "outcome kind")?.as_str() {
            "done" => OutcomeKind::Done { result: value },
            "dead" => OutcomeKind::DeadLettered {
                reason: String::from_utf8_lossy(&value).into_owned(),
            },
            "cancelled" => OutcomeKind::Cancelled,
            other => {
                return Err(Error::backend(format!(
                    "redis outcome of item {id} has kind {other:?}"
                )));
            }
        };
        let at_ms = uint(at(a, 3, "outcome")?, "outcome at")?;
        Ok((Some(Outcome { id, kind, at_ms }), tail))
    }

    /// One read of item `id`'s chunks after `after_seq`: the chunks, whether
    /// it has an outcome, and the events-stream tail.
    pub(super) async fn chunks_once(
        &self,
        id: u64,
        after_seq: u64,
    ) -> Result<(Vec<Chunk>, bool, String)> {
        let after = after_seq.min(MAX_LUA_MS);
        let args = vec![
            b"chunks".to_vec(),
            id.to_string().into_bytes(),
            after.to_string().into_bytes(),
        ];
        let v = self
            .run("chunks", &self.inner.scripts.result, args, false)
            .await?;
        let a = array(&v, "chunks")?;
        let chunks = array(at(a, 0, "chunks")?, "chunks list")?
            .iter()
            .zip(after + 1..)
            .map(|(c, seq)| {
                Ok(Chunk {
                    seq,
                    data: bytes(c, "chunk")?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let finished = int(at(a, 1, "chunks")?, "chunks finished")? == 1;
        let tail = text(at(a, 2, "chunks")?, "chunks events tail")?;
        Ok((chunks, finished, tail))
    }

    /// Publish progress (`op` "progress") or a chunk ("chunk"); fenced.
    pub(super) async fn publish(&self, op: &str, receipt: Receipt, data: Vec<u8>) -> Result<u64> {
        check_size(op, data.len(), self.inner.config.max_payload_bytes)?;
        let mut args = vec![op.as_bytes().to_vec()];
        receipt_args(&mut args, &receipt);
        args.push(data);
        let v = self.run(op, &self.inner.scripts.result, args, true).await?;
        match uint(&v, op)? {
            0 => Err(self.lost_or_cancelled(&receipt).await),
            n => Ok(n),
        }
    }

    /// The error for a holder's call that found `receipt` not current
    /// (SPEC 3, Cancelling): when its item is marked cancelled, end it
    /// (`cancelled.lua`) and answer `Cancelled`; else `LeaseLost`. When
    /// that second call fails (the connection was cut), it is not known
    /// which of the two is true: the call's own error is the answer, and
    /// a mark stays for the holder's next call or a reclaim. Answering
    /// `LeaseLost` then would tell a holder its item was lost when it may
    /// have been cancelled, and a fenced call cut mid-way must answer a
    /// backend error (tests/crash.rs, connection cuts).
    pub(super) async fn lost_or_cancelled(&self, receipt: &Receipt) -> Error {
        match self.end_cancelled(std::slice::from_ref(receipt)).await {
            Ok(ended) if ended.contains(&receipt.id) => Error::cancelled(receipt),
            Ok(_) => Error::lease_lost(receipt),
            Err(e) => e,
        }
    }

    /// End the items of `receipts` that are pending under them and marked
    /// cancelled; the ids ended.
    pub(super) async fn end_cancelled(&self, receipts: &[Receipt]) -> Result<Vec<u64>> {
        let mut args = vec![
            b"end".to_vec(),
            self.result_ttl_arg(),
            self.retention_arg(false),
        ];
        for r in receipts {
            receipt_args(&mut args, r);
        }
        let v = self
            .run("cancel", &self.inner.scripts.cancelled, args, true)
            .await?;
        array(&v, "cancelled end")?
            .iter()
            .map(|id| uint(id, "cancelled id"))
            .collect()
    }

    /// The ids among `ids` that are pending and marked cancelled, and the
    /// events-stream tail to wait after.
    pub(super) async fn cancelled_once(&self, ids: &[u64]) -> Result<(Vec<u64>, String)> {
        let mut args = Vec::with_capacity(ids.len() + 1);
        args.push(b"look".to_vec());
        args.extend(ids.iter().map(|id| id.to_string().into_bytes()));
        let v = self
            .run("wait_cancelled", &self.inner.scripts.cancelled, args, false)
            .await?;
        let a = array(&v, "cancelled look")?;
        let mut marked = array(at(a, 0, "cancelled look")?, "cancelled ids")?
            .iter()
            .map(|id| uint(id, "cancelled id"))
            .collect::<Result<Vec<u64>>>()?;
        marked.sort_unstable();
        marked.dedup();
        let tail = text(at(a, 1, "cancelled look")?, "cancelled events tail")?;
        Ok((marked, tail))
    }

    pub(super) async fn look(&self, mode: &str, n: usize) -> Result<Value> {
        let args = vec![mode.as_bytes().to_vec(), n_arg(n)];
        self.run("look", &self.inner.scripts.look, args, false)
            .await
    }

    /// SPEC 13: the `load` op of `schedule.lua`.
    pub(super) async fn schedule_load_rows(
        &self,
        scan: crate::schedule::fire::ScheduleScan,
    ) -> Result<crate::schedule::fire::ScheduleRows> {
        use crate::schedule::fire::{ScheduleRows, ScheduleScan, StoredSchedule};
        let mut args = vec![b"load".to_vec()];
        match scan {
            ScheduleScan::All => args.push(b"all".to_vec()),
            ScheduleScan::One(name) => {
                args.push(b"one".to_vec());
                args.push(name.into_bytes());
            }
            ScheduleScan::Due { limit, .. } => {
                args.push(b"due".to_vec());
                args.push(n_arg(limit));
            }
        }
        let v = self
            .run("schedules", &self.inner.scripts.schedule, args, false)
            .await?;
        let a = array(&v, "schedules")?;
        let later = text(at(a, 0, "schedules")?, "schedules later")?;
        let mut out = ScheduleRows {
            rows: Vec::new(),
            later_ms: if later.is_empty() {
                None
            } else {
                Some(later.parse().map_err(|_| {
                    Error::backend(format!("redis schedules script answered time {later:?}"))
                })?)
            },
        };
        for row in a.get(1..).unwrap_or_default().chunks(3) {
            let [name, meta, record] = row else {
                return Err(Error::backend(
                    "redis schedules script answered a partial row",
                ));
            };
            let name = text(name, "schedule name")?;
            let meta = text(meta, "schedule meta")?;
            let (generation, last) = meta.split_once(':').unwrap_or((meta.as_str(), ""));
            let bad = || Error::Decode {
                what: format!("schedule {name:?} in redis"),
                detail: format!("meta {meta:?} is not <generation>:<last item>"),
            };
            out.rows.push(StoredSchedule {
                generation: generation.parse().map_err(|_| bad())?,
                last_item: if last.is_empty() {
                    None
                } else {
                    Some(last.parse().map_err(|_| bad())?)
                },
                record: bytes(record, "schedule record")?,
                name,
            });
        }
        Ok(out)
    }

    /// SPEC 13: the `swaps` op of `schedule.lua`: every swap in one
    /// script call, each answered on its own (`None` on a generation
    /// conflict, else the ids of the items added; `Full` past
    /// `max_backlog`).
    ///
    /// # Errors
    ///
    /// The call's: the connection, or a reply this build cannot read
    /// (then no swap's answer is known).
    pub(super) async fn schedule_swaps(
        &self,
        swaps: Vec<crate::schedule::fire::ScheduleSwap>,
    ) -> Result<Vec<Result<Option<Vec<u64>>>>> {
        let c = &self.inner.config;
        let step = ms(c.aging_step);
        let count = swaps.len();
        let mut args = Vec::with_capacity(2 + swaps.len() * 12);
        args.push(b"swaps".to_vec());
        args.push(match c.max_backlog {
            Some(l) => l.to_string().into_bytes(),
            None => Vec::new(),
        });
        for swap in swaps {
            args.push(swap.name.into_bytes());
            args.push(swap.expect.to_string().into_bytes());
            match swap.write {
                Some((index, record)) => {
                    args.push(b"1".to_vec());
                    args.push(match index {
                        Some(t) => t.min(MAX_LUA_MS).to_string().into_bytes(),
                        None => Vec::new(),
                    });
                    args.push(record);
                }
                None => {
                    args.push(b"0".to_vec());
                    args.push(Vec::new());
                    args.push(Vec::new());
                }
            }
            args.push(swap.items.len().to_string().into_bytes());
            for (item, slot) in swap.items {
                check_new_item(&item, c.max_payload_bytes)?;
                args.push(item.flow.into_bytes());
                args.push(item.payload);
                args.push(slot.min(MAX_LUA_MS).to_string().into_bytes());
                args.push(item.priority.to_string().into_bytes());
                args.push((u64::from(item.priority) * step).to_string().into_bytes());
                args.push(item.cost.max(1).to_string().into_bytes());
            }
        }
        let v = self
            .run("schedule", &self.inner.scripts.schedule, args, true)
            .await?;
        let a = array(&v, "schedule")?;
        let mut out = Vec::with_capacity(count);
        let mut rest = a;
        while let [status, n, tail @ ..] = rest {
            let n = usize::try_from(uint(n, "schedule count")?)
                .map_err(|_| Error::backend("redis schedule script answered a huge count"))?;
            let (values, after) = tail
                .split_at_checked(n)
                .ok_or_else(|| Error::backend("redis schedule script answered a partial swap"))?;
            rest = after;
            out.push(match text(status, "schedule status")?.as_str() {
                "ok" => values
                    .iter()
                    .map(|v| uint(v, "schedule item id"))
                    .collect::<Result<Vec<u64>>>()
                    .map(Some),
                "conflict" => Ok(None),
                "full" => Err(Error::Full {
                    limit: uint(at(values, 0, "schedule")?, "schedule limit")?,
                }),
                other => Err(Error::backend(format!(
                    "redis schedule script answered {other:?}"
                ))),
            });
        }
        if !rest.is_empty() || out.len() != count {
            return Err(Error::backend(format!(
                "redis schedule script answered {} swaps for {count}",
                out.len()
            )));
        }
        Ok(out)
    }
}
