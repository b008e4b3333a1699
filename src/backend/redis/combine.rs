//! Combining concurrent adds into one script call: the Redis counterpart
//! of the embedded backend's group commit (SPEC 7, "Redis add combining").
//!
//! A caller of `add`/`add_delayed` puts its item in a shared list. If no
//! flush is running it starts one, a spawned task (so dropping any caller's
//! future never cuts the script call that carries other callers' items):
//! the task takes the whole list, runs the add script on it once (one round
//! trip, one `WAIT` with replicas), hands each caller its id, and repeats
//! while items arrived in the meantime. Under load many adds share a call;
//! a lone add costs a task spawn more than before.
//!
//! Nothing changes for the caller: payloads and flow names are checked
//! before an item joins the list, so one caller's bad item never fails another's;
//! queues with `max_backlog` do not combine (a combined batch is refused
//! whole when full, where some of its adds alone would fit); an error of
//! the shared call reaches every caller in it with the same meaning (the
//! adds happened whole or not at all).

use std::sync::Mutex;

use tokio::sync::oneshot;

use super::RedisQueue;
use crate::error::{Error, Result};
use crate::item::{Added, NewItem, check_new_item};

/// The most items one combined call carries; more wait for the next.
const MAX_COMBINED: usize = 512;

type Waiter = (NewItem, Option<u64>, oneshot::Sender<Result<Added>>);

/// The adds waiting for a flush, and whether one is running.
#[derive(Default)]
pub(super) struct Combiner {
    state: Mutex<(Vec<Waiter>, bool)>,
}

impl Combiner {
    /// The waiting adds and the running flag; a poisoned lock is taken
    /// over (the list is only ever pushed to and drained).
    fn lock(&self) -> std::sync::MutexGuard<'_, (Vec<Waiter>, bool)> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl std::fmt::Debug for Combiner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Combiner").finish_non_exhaustive()
    }
}

impl RedisQueue {
    /// Add one item (`not_before` for a delayed one), sharing a script call
    /// with concurrent adds of this handle.
    pub(super) async fn add_combined(&self, item: NewItem, nb: Option<u64>) -> Result<Added> {
        let c = &self.inner.config;
        if c.max_backlog.is_some() {
            let mut v = self.add_many(vec![(item, nb)]).await?;
            return v
                .pop()
                .ok_or_else(|| Error::backend("redis add returned no id"));
        }
        check_new_item(&item, c.max_payload_bytes)?;
        self.check_open()?;
        let (tx, rx) = oneshot::channel();
        let start = {
            let mut s = self.inner.combiner.lock();
            s.0.push((item, nb, tx));
            !std::mem::replace(&mut s.1, true)
        };
        if start {
            let q = self.clone();
            tokio::spawn(async move { q.flush_adds().await });
        }
        rx.await
            .map_err(|_| Error::backend("redis add: the combined call ended without an answer"))?
    }

    async fn flush_adds(&self) {
        loop {
            let batch: Vec<Waiter> = {
                let mut s = self.inner.combiner.lock();
                if s.0.is_empty() {
                    s.1 = false;
                    return;
                }
                let n = s.0.len().min(MAX_COMBINED);
                s.0.drain(..n).collect()
            };
            let mut items = Vec::with_capacity(batch.len());
            let mut senders = Vec::with_capacity(batch.len());
            for (item, nb, tx) in batch {
                items.push((item, nb));
                senders.push(tx);
            }
            match self.add_many(items).await {
                Ok(added) if added.len() == senders.len() => {
                    for (tx, a) in senders.into_iter().zip(added) {
                        // A caller that went away no longer needs its id.
                        let _ = tx.send(Ok(a));
                    }
                }
                Ok(added) => {
                    let e = Error::backend(format!(
                        "redis add returned {} ids for {} items",
                        added.len(),
                        senders.len()
                    ));
                    for tx in senders {
                        let _ = tx.send(Err(e.duplicate()));
                    }
                }
                Err(e) => {
                    let mut senders = senders.into_iter();
                    let first = senders.next();
                    for tx in senders {
                        let _ = tx.send(Err(e.duplicate()));
                    }
                    if let Some(tx) = first {
                        let _ = tx.send(Err(e));
                    }
                }
            }
        }
    }
}
