//! The Redis side of store and forward (SPEC section 11): the script that
//! takes a batch from an edge journal exactly once, and the accessor that
//! tells a consumer where a forwarded item came from.

#[cfg(feature = "forward")]
use redis::Value;

use super::RedisQueue;
#[cfg(feature = "forward")]
use super::reply::{array, at, int, text, uint};
#[cfg(feature = "forward")]
use crate::error::Error;
use crate::error::Result;

/// Where a forwarded item came from (SPEC section 11): the origin name its
/// forwarder was given and the item's id in that origin's local journal.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Origin {
    /// The forwarder's origin name (`workjournal forward --origin`).
    pub name: String,
    /// The item's id in the origin's embedded queue.
    pub id: u64,
}

/// What one forwarded batch did on the Redis side.
#[cfg(feature = "forward")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Taken {
    /// The origin's mark after the batch: the highest normal local id taken.
    pub(crate) mark: u64,
    /// Items journaled in Redis.
    pub(crate) added: u64,
    /// Items whose dedup key Redis already held: journaled nothing, taken.
    pub(crate) duplicates: u64,
    /// Items taken before (a batch sent again): journaled nothing.
    pub(crate) skipped: u64,
}

/// The longest origin name, in bytes.
#[cfg(feature = "forward")]
pub(crate) const MAX_ORIGIN_LEN: usize = 128;

/// Check an origin name (SPEC section 11): 1 to 128 ASCII letters, digits,
/// `.`, `_` or `-` (it is part of Redis key names). [`Forwarder::new`]
/// checks it too; this is for checking early, e.g. before connecting.
///
/// [`Forwarder::new`]: crate::forward::Forwarder::new
///
/// # Errors
///
/// `InvalidInput` naming the rule.
#[cfg(feature = "forward")]
pub fn check_origin(origin: &str) -> Result<()> {
    let ok = !origin.is_empty()
        && origin.len() <= MAX_ORIGIN_LEN
        && origin
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if !ok {
        return Err(Error::invalid(format!(
            "origin name {origin:?} must be 1 to {MAX_ORIGIN_LEN} ASCII letters, digits, '.', '_' or '-'"
        )));
    }
    Ok(())
}

impl RedisQueue {
    /// The namespace's key prefix, `{ns}:`.
    #[cfg(feature = "forward")]
    pub(crate) fn prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// Where item `id` came from, if a forwarder brought it here from an
    /// edge journal (SPEC section 11); `None` for an item added here, or
    /// one no longer in the queue (acked).
    ///
    /// # Errors
    ///
    /// `Backend` if Redis fails or answers with something else than the
    /// two fields; `Closed` after `close`.
    pub async fn origin(&self, id: u64) -> Result<Option<Origin>> {
        let mut cmd = redis::cmd("HMGET");
        cmd.arg(format!("{}item:{id}", self.inner.prefix))
            .arg("origin")
            .arg("oid");
        let (name, oid): (Option<String>, Option<u64>) = self.simple("origin", cmd).await?;
        Ok(match (name, oid) {
            (Some(name), Some(id)) => Some(Origin { name, id }),
            _ => None,
        })
    }

    /// Take a batch from the local journal `journal` of `origin`, skipping
    /// what it took before, all or none; then wait for `min_replicas`.
    ///
    /// # Errors
    ///
    /// `Full` (nothing taken); `InvalidInput` if another journal forwards
    /// under this origin name, or for a payload over `max_payload_bytes`;
    /// `Backend` as every call (the outcome is then unknown: send the same
    /// batch again).
    #[cfg(feature = "forward")]
    pub(crate) async fn take_forwarded(
        &self,
        origin: &str,
        journal: u64,
        items: &[crate::handover::Outgoing],
    ) -> Result<Taken> {
        use super::MAX_LUA_MS;
        use crate::config::ms;
        let c = &self.inner.config;
        let mut args = Vec::with_capacity(4 + items.len() * 11);
        let step = ms(c.aging_step);
        args.push(origin.as_bytes().to_vec());
        args.push(journal.to_string().into_bytes());
        args.push(ms(c.dedup_window).min(MAX_LUA_MS).to_string().into_bytes());
        args.push(
            c.max_backlog
                .map_or_else(Vec::new, |l| l.to_string().into_bytes()),
        );
        for o in items {
            if o.payload.len() > c.max_payload_bytes {
                return Err(Error::invalid(format!(
                    "item {} of origin {origin}: payload of {} bytes is over the Redis queue's max_payload_bytes ({} bytes)",
                    o.id,
                    o.payload.len(),
                    c.max_payload_bytes
                )));
            }
            args.push(o.id.to_string().into_bytes());
            args.push(if o.late { b"1".to_vec() } else { b"0".to_vec() });
            args.push(o.flow.as_bytes().to_vec());
            args.push(o.payload.clone());
            match &o.dedup_key {
                Some(k) => {
                    args.push(b"1".to_vec());
                    args.push(k.as_bytes().to_vec());
                }
                None => {
                    args.push(b"0".to_vec());
                    args.push(Vec::new());
                }
            }
            args.push(
                o.not_before_ms
                    .map_or_else(Vec::new, |t| t.min(MAX_LUA_MS).to_string().into_bytes()),
            );
            args.push(o.enqueued_at_ms.min(MAX_LUA_MS).to_string().into_bytes());
            args.push(o.priority.to_string().into_bytes());
            args.push(
                u64::from(o.priority)
                    .saturating_mul(step)
                    .to_string()
                    .into_bytes(),
            );
            args.push(o.cost.max(1).to_string().into_bytes());
        }
        let v = self
            .run("forward", &self.inner.scripts.forward, args, true)
            .await?;
        let a = array(&v, "forward")?;
        match text(at(a, 0, "forward")?, "forward status")?.as_str() {
            "ok" => Ok(Taken {
                mark: uint(at(a, 1, "forward")?, "forward mark")?,
                added: count(at(a, 2, "forward")?)?,
                duplicates: count(at(a, 3, "forward")?)?,
                skipped: count(at(a, 4, "forward")?)?,
            }),
            "full" => Err(Error::Full {
                limit: uint(at(a, 1, "forward")?, "forward limit")?,
            }),
            "journal" => Err(Error::invalid(format!(
                "origin {origin} is already forwarded into this namespace by another journal (id {}, this file is {journal}); give each queue file its own origin name",
                text(at(a, 1, "forward")?, "forward journal")?
            ))),
            other => Err(Error::backend(format!(
                "redis forward script answered {other:?}"
            ))),
        }
    }
}

#[cfg(feature = "forward")]
fn count(v: &Value) -> Result<u64> {
    u64::try_from(int(v, "forward count")?)
        .map_err(|_| Error::backend("redis forward script answered a negative count"))
}
