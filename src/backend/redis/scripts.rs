//! The Lua scripts: loaded with the constants Rust shares with them, run
//! with the namespace as their one key and `now` first, and followed by
//! `WAIT` when replicas are asked for (SPEC 7).

use redis::Value;

use super::prelude::prelude_for;
use super::{EVENTS_PER_READ, MAX_LUA_MS, RedisQueue, bounded, redis_err};
use crate::clock::CLOCK_STEP_TOLERANCE_MS;
use crate::config::ms;
use crate::error::{Error, Result};
use crate::item::MAX_DELIVERIES_REASON;

/// Reply code of a script: the receipt's claim is not current.
pub(super) const LOST: i64 = -1;
/// Reply code of `park`: the item is in the default flow.
pub(super) const DEFAULT_FLOW: i64 = -2;
/// Reply code of `park`: parked.
pub(super) const PARKED: i64 = 1;
/// Reply code of `retry`: the item waits in delayed.
pub(super) const DELAYED: i64 = 1;
/// Reply code of `retry`: the item was dead-lettered.
pub(super) const DEAD_LETTERED: i64 = 2;
/// Reply code of `remove` (SPEC 3, Controlling one item): the item is
/// pending, so a consumer finishes it through its receipt; nothing changed.
pub(super) const IS_PENDING: i64 = -3;
/// Reply code of `cancel` (SPEC 3, Cancelling): the item is a dead letter;
/// nothing changed.
pub(super) const IS_DEAD: i64 = -4;
/// Reply code of `update` (SPEC 3, Updating): the item has finished and
/// its outcome is kept; the outcome's kind comes with it. Nothing changed.
pub(super) const IS_FINISHED: i64 = -5;
/// Reply code of `update`: a parked item was given a not-before time.
/// Nothing changed.
pub(super) const IS_PARKED: i64 = -6;
/// Reply code of `cancel`: the waiting item ended as cancelled.
pub(super) const ENDED: i64 = 1;
/// Reply code of `cancel`: the pending item is marked.
pub(super) const MARKED: i64 = 2;
/// Most expired dedup keys or done markers one script deletes.
pub(super) const PRUNE_LIMIT: u32 = 500;
/// The namespace layout these scripts read and write, kept in `{ns}:layout`
/// (SPEC 6): 1 is the ranked lanes with the leases index and the outcomes
/// hash; 2 adds cancelling (SPEC 3, Cancelling: an item hash's `cx` mark,
/// outcomes of kind `cancelled`); 3 adds the history (SPEC 3, History:
/// the hashes `{ns}:hist:<id>` and the sorted sets `{ns}:completed` and
/// `{ns}:cancelled`, which start empty). A namespace of layout 1 or 2
/// needs nothing for either, so it is recorded as 3 at connect, and a
/// layout-2 build then refuses it (it would never trim the history). No
/// key: a namespace written before the key, which this build reads as it
/// is (moving the stream layout's lanes at connect). A namespace of a
/// higher layout, which a later build wrote, is refused at connect.
pub(super) const LAYOUT: u32 = 3;

/// The constants the scripts share with this file, as Lua locals: written
/// once here, never copied by hand into the scripts.
fn lua_constants() -> String {
    // `{:?}` quotes a plain ASCII string the way Lua reads it.
    format!(
        "local PRUNE_LIMIT = {PRUNE_LIMIT}\n\
         local MAX_DELIVERIES_REASON = {MAX_DELIVERIES_REASON:?}\n\
         local LOST, DEFAULT_FLOW, PARKED = {LOST}, {DEFAULT_FLOW}, {PARKED}\n\
         local DELAYED, DEAD_LETTERED = {DELAYED}, {DEAD_LETTERED}\n\
         local IS_PENDING = {IS_PENDING}\n\
         local IS_DEAD, ENDED, MARKED = {IS_DEAD}, {ENDED}, {MARKED}\n\
         local IS_FINISHED, IS_PARKED = {IS_FINISHED}, {IS_PARKED}\n\
         local CLOCK_TOLERANCE = {CLOCK_STEP_TOLERANCE_MS}\n\
         local EVENTS_KEPT = {EVENTS_PER_READ}\n\
         local LAYOUT = {LAYOUT}\n"
    )
}

/// One Lua script: its source and its SHA1, run with `EVALSHA`, or with
/// `EVAL` on a node that has not cached it (see [`RedisQueue::run`]).
#[derive(Debug)]
pub(super) struct Script {
    code: String,
    hash: String,
}

/// One script: the constants, the part of the shared prelude its body
/// reaches ([`prelude_for`]), then its own body.
pub(super) fn script(body: &str) -> Script {
    let code = format!(
        "{}{}\n{}",
        lua_constants(),
        prelude_for(include_str!("scripts/common.lua"), body),
        body
    );
    let hash = redis::Script::new(&code).get_hash().to_string();
    Script { code, hash }
}

macro_rules! script {
    ($name:literal) => {
        script(include_str!(concat!("scripts/", $name, ".lua")))
    };
}

#[derive(Debug)]
pub(super) struct Scripts {
    pub(super) add: Script,
    pub(super) claim: Script,
    pub(super) promote: Script,
    pub(super) next_due: Script,
    pub(super) ack: Script,
    pub(super) touch: Script,
    pub(super) retry: Script,
    pub(super) release: Script,
    pub(super) dead_letter: Script,
    pub(super) park: Script,
    pub(super) step: Script,
    pub(super) resume: Script,
    pub(super) clear_flow: Script,
    pub(super) control: Script,
    pub(super) cancelled: Script,
    pub(super) reclaim: Script,
    pub(super) done: Script,
    pub(super) dead: Script,
    pub(super) stats: Script,
    pub(super) look: Script,
    pub(super) result: Script,
    pub(super) migrate: Script,
    pub(super) limit: Script,
    pub(super) schedule: Script,
    #[cfg(feature = "forward")]
    pub(super) forward: Script,
}

impl Scripts {
    /// The scripts, made once per process and shared by every handle:
    /// their text, prelude cut and SHA1 are the same for all.
    pub(super) fn shared() -> &'static Scripts {
        static SCRIPTS: std::sync::OnceLock<Scripts> = std::sync::OnceLock::new();
        SCRIPTS.get_or_init(Scripts::new)
    }

    fn new() -> Self {
        Scripts {
            add: script!("add"),
            claim: script!("claim"),
            promote: script!("promote"),
            next_due: script!("next_due"),
            ack: script!("ack"),
            touch: script!("touch"),
            retry: script!("retry"),
            release: script!("release"),
            dead_letter: script!("dead_letter"),
            park: script!("park"),
            step: script!("step"),
            resume: script!("resume"),
            clear_flow: script!("clear_flow"),
            control: script!("control"),
            cancelled: script!("cancelled"),
            reclaim: script!("reclaim"),
            done: script!("done"),
            dead: script!("dead"),
            stats: script!("stats"),
            look: script!("look"),
            result: script!("result"),
            migrate: script!("migrate"),
            limit: script!("limit"),
            schedule: script!("schedule"),
            #[cfg(feature = "forward")]
            forward: script!("forward"),
        }
    }
}

impl RedisQueue {
    /// `now` for a script: the injected clock, or `""` (the script reads
    /// the server's `TIME`).
    pub(super) fn now_arg(&self) -> Vec<u8> {
        match &self.inner.clock {
            Some(c) => c.now_ms().min(MAX_LUA_MS).to_string().into_bytes(),
            None => Vec::new(),
        }
    }

    /// Run `script` with the namespace prefix as its key and `now` first in
    /// its arguments; after a write, wait for replicas if asked.
    pub(super) async fn run(
        &self,
        what: &str,
        script: &Script,
        args: Vec<Vec<u8>>,
        write: bool,
    ) -> Result<Value> {
        self.check_open()?;
        let now = self.now_arg();
        let call = |verb: &str, script: &str| {
            let mut cmd = redis::cmd(verb);
            cmd.arg(script)
                .arg(1)
                .arg(self.inner.prefix.as_str())
                .arg(now.as_slice());
            for a in &args {
                cmd.arg(a.as_slice());
            }
            cmd
        };
        let mut conn = self.inner.conn.clone();
        let limit = self.limit();
        let first = tokio::time::timeout(
            limit,
            call("EVALSHA", &script.hash).query_async::<Value>(&mut conn),
        )
        .await;
        let v: Value = match first {
            // The node serving the namespace's slot has not cached the
            // script (a new server, a restart, a `SCRIPT FLUSH`, or a
            // replica just promoted by a failover: replicas get a script's
            // effects, not the script). It did not run, so send it whole
            // to that node. Regression: redis-rs loaded it with a
            // `SCRIPT LOAD` sent to every node of a cluster, which fails
            // as a whole while any node is unreachable and misses the new
            // primary while its view of the cluster is stale, so a claim
            // right after a failover could fail (the flaky
            // `blocking_claim_follows_its_slot_through_a_failover`).
            Ok(Err(e))
                if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
            {
                bounded(
                    what,
                    limit,
                    call("EVAL", &script.code).query_async(&mut conn),
                )
                .await?
            }
            Ok(r) => r.map_err(|e| redis_err(what, e))?,
            Err(_) => {
                return Err(Error::backend(format!(
                    "redis {what} got no answer within {} ms",
                    limit.as_millis()
                )));
            }
        };
        if let Value::ServerError(e) = &v {
            return Err(Error::backend(format!("redis {what} script failed: {e:?}")));
        }
        if write {
            self.wait_replicas().await?;
        }
        Ok(v)
    }

    pub(super) async fn wait_replicas(&self) -> Result<()> {
        let o = &self.inner.options;
        if o.min_replicas == 0 {
            return Ok(());
        }
        let mut conn = self.inner.conn.clone();
        let mut wait = redis::cmd("WAIT");
        // Redis reads a signed 64-bit count of ms (0 would mean forever):
        // clamp a huge timeout into its range.
        wait.arg(o.min_replicas)
            .arg(ms(o.replica_timeout).clamp(1, MAX_LUA_MS));
        // In a cluster: the primary that ran the write, not every primary.
        let acked: i64 = bounded(
            "WAIT",
            self.limit(),
            conn.at_primary_of(&self.inner.prefix, wait),
        )
        .await?;
        if acked < i64::from(o.min_replicas) {
            return Err(Error::backend(format!(
                "write applied on the redis primary but only {acked} of {} required replicas acknowledged it within {} ms",
                o.min_replicas,
                ms(o.replica_timeout)
            )));
        }
        Ok(())
    }

    pub(super) async fn simple<T: redis::FromRedisValue>(
        &self,
        what: &str,
        cmd: redis::Cmd,
    ) -> Result<T> {
        self.check_open()?;
        let mut conn = self.inner.conn.clone();
        bounded(what, self.limit(), cmd.query_async(&mut conn)).await
    }
}

#[cfg(test)]
mod constant_tests {
    // Failed: GROUP, PRUNE_LIMIT and the max-deliveries reason were copied
    // by hand into the Lua prelude and scripts, so a change on one side
    // silently split them. Every script now gets them from `lua_constants`,
    // and every script is checked (release.lua still returned a bare -1).
    #[test]
    fn the_scripts_copy_no_constant_of_the_rust_side() {
        let sources = [
            include_str!("scripts/ack.lua"),
            include_str!("scripts/add.lua"),
            include_str!("scripts/cancelled.lua"),
            include_str!("scripts/browse.lua"),
            include_str!("scripts/claim.lua"),
            include_str!("scripts/clear_flow.lua"),
            include_str!("scripts/common.lua"),
            include_str!("scripts/control.lua"),
            include_str!("scripts/dead.lua"),
            include_str!("scripts/dead_letter.lua"),
            include_str!("scripts/done.lua"),
            include_str!("scripts/forward.lua"),
            include_str!("scripts/limit.lua"),
            include_str!("scripts/look.lua"),
            include_str!("scripts/migrate.lua"),
            include_str!("scripts/next_due.lua"),
            include_str!("scripts/park.lua"),
            include_str!("scripts/promote.lua"),
            include_str!("scripts/reclaim.lua"),
            include_str!("scripts/release.lua"),
            include_str!("scripts/result.lua"),
            include_str!("scripts/resume.lua"),
            include_str!("scripts/retry.lua"),
            include_str!("scripts/schedule.lua"),
            include_str!("scripts/stats.lua"),
            include_str!("scripts/step.lua"),
            include_str!("scripts/touch.lua"),
        ];
        for source in sources {
            for copied in [
                "'workers'",
                "PRUNE_LIMIT = ",
                super::MAX_DELIVERIES_REASON,
                "return -1",
                "return -3",
                "return -4",
                "{ -5,",
                "{ -6,",
                "return { -1 }",
                "'MAXLEN', '64'",
            ] {
                assert!(!source.contains(copied), "a script copies {copied:?}");
            }
        }
        let prelude = super::lua_constants();
        assert!(prelude.contains(&format!("local PRUNE_LIMIT = {}", super::PRUNE_LIMIT)));
        assert!(prelude.contains(&format!("{:?}", super::MAX_DELIVERIES_REASON)));
        assert!(prelude.contains(&format!("local EVENTS_KEPT = {}", super::EVENTS_PER_READ)));
        assert!(prelude.contains(&format!("local LAYOUT = {}", super::LAYOUT)));
        assert!(prelude.contains(&format!("local IS_PENDING = {}", super::IS_PENDING)));
        assert!(prelude.contains(&format!(
            "local IS_DEAD, ENDED, MARKED = {}, {}, {}",
            super::IS_DEAD,
            super::ENDED,
            super::MARKED
        )));
        assert!(prelude.contains(&format!(
            "local IS_FINISHED, IS_PARKED = {}, {}",
            super::IS_FINISHED,
            super::IS_PARKED
        )));
    }

    // Failed: claim.lua had a hand-out of its own (its batched lease and
    // pending-index writes) beside `hand_out` in common.lua, which step
    // and reclaim used, so a change to what a claimed item carries
    // had two homes. Every script that makes an item pending now goes
    // through the one `hand_out`; `redis_hand_outs_share_one_lease_counter`
    // in tests/redis.rs checks what the three hand out.
    #[test]
    fn one_hand_out_makes_every_item_pending() {
        let common = include_str!("scripts/common.lua");
        assert_eq!(common.matches("'st', 'pending'").count(), 1);
        assert_eq!(common.matches("local function hand_out(").count(), 1);
        for (name, source) in [
            ("claim", include_str!("scripts/claim.lua")),
            ("step", include_str!("scripts/step.lua")),
            ("reclaim", include_str!("scripts/reclaim.lua")),
        ] {
            assert!(source.contains("hand_out("), "{name} does not use hand_out");
            assert!(
                source.contains("hand_outs_end()"),
                "{name} never ends its hand-outs"
            );
            // `K_LEASE` as a whole name: `K_LEASES`, the leases index a
            // reclaim of a missing item clears, is another key.
            let uses = |own: &str| {
                source.match_indices(own).any(|(i, _)| {
                    !source[i + own.len()..]
                        .starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
                })
            };
            for own in ["'st', 'pending'", "K_LEASE", "K_PENDING, zadd"] {
                assert!(!uses(own), "{name} hands out by itself ({own:?})");
            }
        }
    }
}
