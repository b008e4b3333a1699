//! Blocking waits: `XREAD BLOCK` on the wake or events stream after the
//! tail a script returned, on connections of their own (SPEC 3, claim with
//! `wait`; Outcomes and progress).

use std::time::Duration;

use redis::Value;

use super::connection::Conn;
use super::reply::{array, bytes};
use super::tls::connect_what;
use super::{BLOCK_ROUND, EVENTS_PER_READ, RedisQueue, bounded};
use crate::config::ms;
use crate::error::{Error, Result};
use crate::outcome::{Outcome, OutcomeKind};

impl RedisQueue {
    pub(super) fn take_blocker(&self) -> Option<Conn> {
        self.inner
            .blockers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop()
    }

    pub(super) fn give_blocker(&self, conn: Conn) {
        let mut pool = self
            .inner
            .blockers
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if pool.len() < 4 {
            pool.push(conn);
        }
    }

    /// Wait up to `block` (real time) for a signal on `stream` after `tail`,
    /// or until `timer` fires (an injected clock's next due time). Returns
    /// the `XREAD` reply (up to `count` entries; nil when the block ran out),
    /// or `None` when the timer fired first.
    pub(super) async fn wait_for_wake(
        &self,
        stream: &str,
        tail: &str,
        count: usize,
        block: Duration,
        timer: Option<crate::clock::Sleep>,
    ) -> Result<Option<Value>> {
        // Registered before the flag is read, so a close() in between is
        // not missed.
        let closing = self.inner.close_signal.notified();
        tokio::pin!(closing);
        closing.as_mut().enable();
        self.check_open()?;
        let mut conn = match self.take_blocker() {
            Some(c) => c,
            None => {
                bounded(
                    connect_what(&self.inner.client),
                    self.limit(),
                    self.inner
                        .client
                        .blocker(self.inner.options.connect_timeout),
                )
                .await?
            }
        };
        let block_ms = ms(block).clamp(1, ms(BLOCK_ROUND));
        let cmd = redis::cmd("XREAD")
            .arg("BLOCK")
            .arg(block_ms)
            .arg("COUNT")
            .arg(count)
            .arg("STREAMS")
            .arg(format!("{}{stream}", self.inner.prefix))
            .arg(tail)
            .clone();
        let limit = Duration::from_millis(block_ms) + self.limit();
        let read = bounded("XREAD BLOCK", limit, async {
            match cmd.query_async::<Value>(&mut conn).await {
                // The node stopped serving the slot under the wait (a
                // failover made it a replica, or the slot moved): end the
                // wait as if woken. The claim runs again on the shared
                // connection, which follows the slot, and the next wait
                // opens a fresh connection to the new owner.
                Err(e) if matches!(e.code(), Some("UNBLOCKED" | "MOVED")) => Ok(None),
                r => r.map(Some),
            }
        });
        let timer = async move {
            match timer {
                Some(t) => t.await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            r = read => {
                match r? {
                    Some(reply) => {
                        self.give_blocker(conn);
                        Ok(Some(reply))
                    }
                    // Cut by a failover or a slot move: as woken with nothing
                    // read (the caller looks again); this connection is not
                    // reused, so the next wait reaches the slot's new owner.
                    None => Ok(Some(Value::Nil)),
                }
            }
            _ = timer => {
                // The XREAD is still blocked on the server: drop this
                // connection (closing it ends the block) rather than reuse it.
                Ok(None)
            }
            // As for the timer: the connection is dropped, ending the block.
            _ = closing => Err(Error::Closed),
        }
    }

    /// Block until an event after `tail` or `deadline`, at most one round;
    /// the events read (nil when none came).
    pub(super) async fn wait_for_event(
        &self,
        tail: &str,
        deadline: tokio::time::Instant,
    ) -> Result<Value> {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let reply = self
            .wait_for_wake("events", tail, EVENTS_PER_READ, left, None)
            .await?;
        Ok(reply.unwrap_or(Value::Nil))
    }
}

/// The outcome of item `id` if an entry of the events `XREAD` reply `v`
/// carries it. An entry is a run of groups, each starting with field `id`
/// (one group per item the script finished, SPEC 3, Outcomes and
/// progress); a group with `kind`, `value` and `at` carries an outcome
/// whose result or reason is at most 1 KiB, a bare `id` is a signal only.
/// `None` for anything else, malformed replies included: the caller then
/// reads the outcome itself.
pub(super) fn outcome_in_events(v: &Value, id: u64) -> Option<Outcome> {
    let want = id.to_string().into_bytes();
    let streams = array(v, "events").ok()?;
    let entries = streams
        .first()
        .and_then(|s| array(s, "events stream").ok())
        .and_then(|s| s.get(1))
        .and_then(|e| array(e, "events entries").ok())?;
    for entry in entries {
        let Some(fields) = array(entry, "event")
            .ok()
            .and_then(|e| e.get(1))
            .and_then(|f| array(f, "event fields").ok())
        else {
            continue;
        };
        let pairs: Vec<(Vec<u8>, Vec<u8>)> = fields
            .chunks(2)
            .filter_map(|kv| {
                let k = bytes(kv.first()?, "field").ok()?;
                let v = bytes(kv.get(1)?, "field").ok()?;
                Some((k, v))
            })
            .collect();
        let mut start = 0;
        while start < pairs.len() {
            let end = pairs
                .iter()
                .skip(start + 1)
                .position(|(k, _)| k == b"id")
                .map_or(pairs.len(), |i| start + 1 + i);
            let group = pairs.get(start..end).unwrap_or_default();
            start = end;
            let field = |name: &str| {
                group
                    .iter()
                    .find(|(k, _)| k == name.as_bytes())
                    .map(|(_, v)| v.clone())
            };
            if field("id").as_deref() != Some(want.as_slice()) {
                continue;
            }
            let (Some(kind), Some(value), Some(at)) = (field("kind"), field("value"), field("at"))
            else {
                continue;
            };
            let at_ms = std::str::from_utf8(&at).ok()?.parse().ok()?;
            let kind = match kind.as_slice() {
                b"done" => OutcomeKind::Done { result: value },
                b"dead" => OutcomeKind::DeadLettered {
                    reason: String::from_utf8_lossy(&value).into_owned(),
                },
                b"cancelled" => OutcomeKind::Cancelled,
                _ => return None,
            };
            return Some(Outcome { id, kind, at_ms });
        }
    }
    None
}

/// What an events `XREAD` reply `v` says to a `wait_cancelled` of `ids`
/// (SPEC 3, Cancelling): the id of its last entry (where the wait goes on
/// from), and whether an entry carries a cancel mark (a group `id`,
/// `cancel`) of one of `ids`. A malformed reply reads as a mark, so the
/// caller looks again rather than miss one.
pub(super) fn cancels_in_events(v: &Value, ids: &[u64]) -> (Option<String>, bool) {
    let entries = array(v, "events")
        .ok()
        .and_then(|streams| streams.first())
        .and_then(|s| array(s, "events stream").ok())
        .and_then(|s| s.get(1))
        .and_then(|e| array(e, "events entries").ok());
    let Some(entries) = entries else {
        return (None, !matches!(v, Value::Nil));
    };
    let mut last = None;
    let mut hit = false;
    for entry in entries {
        let Some(e) = array(entry, "event").ok() else {
            return (last, true);
        };
        if let Some(id) = e.first().and_then(|i| bytes(i, "event id").ok()) {
            last = Some(String::from_utf8_lossy(&id).into_owned());
        }
        let Some(fields) = e.get(1).and_then(|f| array(f, "event fields").ok()) else {
            continue;
        };
        let mut item = None;
        for kv in fields.chunks(2) {
            let (Some(k), Some(val)) = (kv.first(), kv.get(1)) else {
                continue;
            };
            let (Ok(k), Ok(val)) = (bytes(k, "field"), bytes(val, "field")) else {
                continue;
            };
            if k == b"id" {
                item = std::str::from_utf8(&val)
                    .ok()
                    .and_then(|s| s.parse::<u64>().ok());
            } else if k == b"cancel" && item.is_some_and(|i| ids.contains(&i)) {
                hit = true;
            }
        }
    }
    (last, hit)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    /// An `XREAD` reply of the events stream with one entry per field list.
    fn events(entries: Vec<Vec<&str>>) -> Value {
        let entries = entries
            .into_iter()
            .enumerate()
            .map(|(i, f)| {
                Value::Array(vec![
                    s(&format!("{i}-0")),
                    Value::Array(f.into_iter().map(s).collect()),
                ])
            })
            .collect();
        Value::Array(vec![Value::Array(vec![
            s("{ns}:events"),
            Value::Array(entries),
        ])])
    }

    #[test]
    fn an_outcome_riding_on_its_signal_is_read_from_the_events() {
        let v = events(vec![
            vec!["id", "7"],
            vec!["id", "8", "kind", "done", "value", "answer", "at", "42"],
            vec!["id", "9", "kind", "dead", "value", "bad", "at", "43"],
        ]);
        let done = outcome_in_events(&v, 8).unwrap();
        assert_eq!((done.result(), done.at_ms), (Some(&b"answer"[..]), 42));
        assert_eq!(outcome_in_events(&v, 9).unwrap().reason(), Some("bad"));
        // A bare signal (progress, a chunk, a large result) carries nothing.
        assert_eq!(outcome_in_events(&v, 7), None);
        assert_eq!(outcome_in_events(&v, 10), None);
        assert_eq!(outcome_in_events(&Value::Nil, 8), None);
        let odd = events(vec![vec![
            "id", "8", "kind", "odd", "value", "x", "at", "1",
        ]]);
        assert_eq!(outcome_in_events(&odd, 8), None);
        let bad_time = events(vec![vec![
            "id", "8", "kind", "done", "value", "x", "at", "soon",
        ]]);
        assert_eq!(outcome_in_events(&bad_time, 8), None);
    }

    // An ack batch signals all its outcomes in one entry: a group per item,
    // each starting with `id`, bare for a large result.
    #[test]
    fn outcomes_of_a_batch_are_read_from_one_signal() {
        let v = events(vec![vec![
            "id", "7", "kind", "done", "value", "seven", "at", "40", "id", "8", "id", "9", "kind",
            "dead", "value", "nine", "at", "41",
        ]]);
        let seven = outcome_in_events(&v, 7).unwrap();
        assert_eq!((seven.result(), seven.at_ms), (Some(&b"seven"[..]), 40));
        assert_eq!(outcome_in_events(&v, 8), None);
        let nine = outcome_in_events(&v, 9).unwrap();
        assert_eq!((nine.reason(), nine.at_ms), (Some("nine"), 41));
        assert_eq!(outcome_in_events(&v, 10), None);
    }
}
