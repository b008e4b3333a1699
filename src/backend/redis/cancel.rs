//! SPEC 3, Cancelling on Redis: `cancel` (one `control.lua` call) and
//! `wait_cancelled` (a look, then a blocking read of the events stream
//! woken by the cancel's own entry), and the receipts a script lists.

use std::time::Duration;

use super::RedisQueue;
use super::reply::{array, int, u32_of, uint};
use super::scripts::{ENDED, IS_DEAD, MARKED};
use super::wait::cancels_in_events;
use crate::error::{Error, Result};
use crate::item::{CancelOutcome, Receipt};

impl RedisQueue {
    /// SPEC 3, Cancelling: `control.lua` ends a waiting item (as `remove`
    /// takes it out, keeping a `cancelled` outcome) or marks a pending one.
    pub(super) async fn cancel_item(&self, id: u64) -> Result<CancelOutcome> {
        let args = vec![
            b"cancel".to_vec(),
            id.to_string().into_bytes(),
            self.result_ttl_arg(),
            self.retention_arg(false),
        ];
        let v = self
            .run("cancel", &self.inner.scripts.control, args, true)
            .await?;
        match int(&v, "cancel")? {
            ENDED => Ok(CancelOutcome::Ended),
            MARKED => Ok(CancelOutcome::Marked),
            0 => Ok(CancelOutcome::NotFound),
            IS_DEAD => Err(Error::invalid(format!(
                "item {id} is a dead letter: it has finished, so it cannot be cancelled (remove deletes it, redrive runs it again)"
            ))),
            other => Err(Error::backend(format!(
                "redis cancel script answered {other}"
            ))),
        }
    }

    /// SPEC 3, Cancelling: look, then wait on the events stream for a cancel
    /// mark of one of `ids`, looking again only when one comes.
    pub(super) async fn wait_marked(&self, ids: &[u64], wait: Duration) -> Result<Vec<u64>> {
        let deadline = crate::clock::wait_deadline(wait);
        let (mut marked, mut tail) = self.cancelled_once(ids).await?;
        loop {
            if !marked.is_empty() || tokio::time::Instant::now() >= deadline {
                return Ok(marked);
            }
            let events = self.wait_for_event(&tail, deadline).await?;
            match cancels_in_events(&events, ids) {
                (Some(last), false) => tail = last,
                (None, false) => {}
                (_, true) => (marked, tail) = self.cancelled_once(ids).await?,
            }
        }
    }
}

/// Receipts from a script's flat list of id, delivery, lease triples.
pub(super) fn receipts_of(v: &redis::Value, what: &str) -> Result<Vec<Receipt>> {
    let flat = array(v, what)?;
    let mut out = Vec::with_capacity(flat.len() / 3);
    for d in flat.chunks(3) {
        let [id, delivery, lease] = d else {
            return Err(Error::Decode {
                what: format!("redis reply ({what})"),
                detail: format!("{} values, not a multiple of 3", flat.len()),
            });
        };
        out.push(Receipt {
            id: uint(id, what)?,
            delivery: u32_of(delivery, what)?,
            lease: uint(lease, what)?,
        });
    }
    Ok(out)
}
