//! The arguments and replies of the script calls that take more than a
//! line: add, one claim attempt, outcomes, chunks and progress.

use redis::Value;

use super::reply::{added, array, at, bytes, claims, int, opt_uint, text, uint};
use super::{MAX_LUA_MS, RedisQueue, n_arg, receipt_args};
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
            0 => Err(Error::lease_lost(&receipt)),
            n => Ok(n),
        }
    }

    pub(super) async fn look(&self, mode: &str, n: usize) -> Result<Value> {
        let args = vec![mode.as_bytes().to_vec(), n_arg(n)];
        self.run("look", &self.inner.scripts.look, args, false)
            .await
    }
}
