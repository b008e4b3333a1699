//! [`RedisQueue::connect`]: reach Redis within the call bound, move an old
//! layout to the current one, name the consumer, and warn about settings
//! that can lose work (SPEC 7).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use redis::Value;

use super::reply::{text, uint};
use super::scripts::LAYOUT;
use super::tls::{client_for, connect_what};
use super::{Inner, RedisOptions, RedisQueue, Scripts, bounded, combine};
use crate::config::Config;
use crate::error::{Error, Result};

impl RedisQueue {
    /// Connect to the Redis at `url` (`redis://[user:password@]host[:port][/db]`,
    /// or `rediss://...` for TLS, see [TLS](RedisQueue#tls)) and use
    /// the queue in `namespace`: every key starts with `{namespace}:`.
    /// Moves a namespace of the older stream layout to the ranked lanes
    /// (docs/DESIGN.md, "Redis layout") and records the layout version it
    /// writes in `{ns}:layout` (SPEC 6). Logs a
    /// warning if the server may evict keys (`maxmemory-policy allkeys-*`)
    /// or keeps no persistence, saying what a crash can then lose.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a bad URL, a namespace that is empty or contains
    /// `{` or `}`, TLS options with a `redis://` URL, a `rediss://` URL with
    /// `#insecure`, or a CA or client certificate that cannot be read or
    /// parsed; `Backend` if Redis cannot be reached and set up within
    /// `connect_timeout + response_timeout` (+ `replica_timeout` with
    /// replicas), the bound of every call (SPEC 7). A TLS handshake that
    /// fails, e.g. a server certificate no trusted CA signed, is such a
    /// failure: the source names the certificate problem. `Decode` for a
    /// namespace a newer build wrote (its `{ns}:layout` above what this
    /// build reads, SPEC 6) or whose `{ns}:layout` is not a number:
    /// nothing in it is changed.
    pub async fn connect(
        url: &str,
        namespace: &str,
        config: Config,
        options: RedisOptions,
    ) -> Result<RedisQueue> {
        if namespace.is_empty() || namespace.contains(['{', '}']) {
            return Err(Error::invalid(format!(
                "redis namespace {namespace:?} must be non-empty and free of '{{' and '}}'"
            )));
        }
        let client = client_for(url, &options)?;
        let mut response = options.response_timeout;
        if options.min_replicas > 0 {
            response = response.saturating_add(options.replica_timeout);
        }
        // SPEC 7: connecting is a call like any other, bounded by
        // `connect_timeout + response_timeout` as a whole. The manager tries
        // up to 3 times (quick retries of a refused or reset connection), but
        // against a server that accepts and never answers (stopped, or a
        // black hole) each try lasts `connect_timeout`: that is what once
        // made a connect take 3 * connect_timeout, so the deadline covers
        // the tries and the setup together.
        let limit = options.connect_timeout.saturating_add(response);
        let started = tokio::time::Instant::now();
        let conn = bounded(
            connect_what(&client),
            limit,
            client.shared(options.connect_timeout, response),
        )
        .await?;
        let prefix = format!("{{{namespace}}}:");
        // SPEC 3, Clock steps: the fleet keeps time by the server's TIME; a
        // clock of the host's own would let one host's error move every
        // timer of the fleet. Only a test's clock replaces it.
        let clock = match config.clock.clone() {
            Some(c) if !c.is_test_clock() => {
                tracing::warn!(
                    namespace,
                    "a redis queue keeps time by the redis server's TIME: the clock given in Config is not a test clock and is not used"
                );
                None
            }
            other => other,
        };
        let inner = Inner {
            client,
            conn,
            blockers: std::sync::Mutex::new(Vec::new()),
            prefix,
            consumer: String::new(),
            config,
            clock,
            options,
            scripts: Scripts::shared(),
            closed: AtomicBool::new(false),
            durable: AtomicBool::new(true),
            close_signal: tokio::sync::Notify::new(),
            combiner: combine::Combiner::default(),
        };
        let mut queue = RedisQueue {
            inner: Arc::new(inner),
        };
        let left = limit.saturating_sub(started.elapsed());
        match tokio::time::timeout(left, queue.setup()).await {
            Ok(r) => r?,
            Err(_) => {
                return Err(Error::backend(format!(
                    "redis connect: setup got no answer within {} ms",
                    limit.as_millis()
                )));
            }
        }
        Ok(queue)
    }

    pub(super) async fn setup(&mut self) -> Result<()> {
        // SPEC 6: a namespace of the stream layout moves to the ranked
        // lanes, in one script; one of a layout this build cannot read is
        // refused.
        let moved = self
            .run("migrate", &self.inner.scripts.migrate, Vec::new(), false)
            .await?;
        if let Value::Array(a) = &moved {
            let found = a.get(1).map(|v| text(v, "layout")).transpose()?;
            return Err(Error::Decode {
                what: format!("redis namespace {}", self.inner.prefix),
                detail: format!(
                    "its layout is {:?} and this build reads layouts up to {LAYOUT}: a newer build wrote it (upgrade the program), or {}layout is not workjournal's",
                    found.unwrap_or_default(),
                    self.inner.prefix
                ),
            });
        }
        let moved = uint(&moved, "migrate")?;
        if moved > 0 {
            tracing::info!(
                namespace = %self.inner.prefix,
                moved,
                "moved the ready lanes from streams to ranked sorted sets"
            );
        }
        let consumer = match self.inner.options.consumer_name.clone() {
            Some(name) => name,
            None => {
                let mut conn = self.inner.conn.clone();
                let n: u64 = bounded(
                    "INCR",
                    self.limit(),
                    redis::cmd("INCR")
                        .arg(format!("{}consumers", self.inner.prefix))
                        .query_async(&mut conn),
                )
                .await?;
                format!("wj-{}-{n}", std::process::id())
            }
        };
        match Arc::get_mut(&mut self.inner) {
            Some(inner) => inner.consumer = consumer,
            None => return Err(Error::backend("redis queue handle shared during setup")),
        }
        let durable = self.warn_about_durability().await;
        self.inner
            .durable
            .store(durable, std::sync::atomic::Ordering::Release);
        Ok(())
    }

    /// Log what a crash of the server can lose with its settings (SPEC 7),
    /// and return whether it keeps any persistence (SPEC 1, `durable`):
    /// false only when `CONFIG GET` shows neither an append-only file nor a
    /// save point. A server that refuses `CONFIG` (managed services often
    /// do) counts as durable: nothing says otherwise.
    pub(super) async fn warn_about_durability(&self) -> bool {
        let mut conn = self.inner.conn.clone();
        let got: Result<BTreeMap<String, String>> = bounded(
            "CONFIG GET",
            self.limit(),
            redis::cmd("CONFIG")
                .arg("GET")
                .arg("*")
                .query_async(&mut conn),
        )
        .await;
        // Managed Redis services often refuse CONFIG; then there is nothing
        // to check.
        let Ok(cfg) = got else { return true };
        let get = |k: &str| cfg.get(k).map(String::as_str).unwrap_or("");
        if get("maxmemory-policy").starts_with("allkeys") {
            tracing::warn!(
                policy = get("maxmemory-policy"),
                "redis may evict any key when full: queued items, pending claims and dead letters can vanish; use maxmemory-policy noeviction"
            );
        }
        if get("appendonly") != "yes" && get("save").is_empty() {
            tracing::warn!(
                "redis keeps no persistence (appendonly no, no save points): a restart of redis loses every queued item"
            );
            return false;
        } else if get("appendonly") != "yes" {
            tracing::warn!(
                "redis persists by snapshots only: a crash of redis loses every add and ack since the last snapshot; use appendonly yes with appendfsync always"
            );
        } else if get("appendfsync") != "always" {
            tracing::warn!(
                appendfsync = get("appendfsync"),
                "redis fsyncs its append-only file lazily: a crash of the redis host can lose about the last second of adds and acks"
            );
        }
        true
    }

    /// This handle's consumer name (the `owner` of the items it holds).
    pub fn consumer_name(&self) -> &str {
        &self.inner.consumer
    }
}
