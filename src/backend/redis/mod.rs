//! The `redis` backend: ranked sorted sets, item hashes and a few signal
//! streams, shared by many processes (SPEC sections 3 and 6).
//!
//! Every key of a queue starts with `{ns}:` (one hash tag, so a Redis
//! Cluster keeps the whole queue in one slot); every change that touches
//! more than one key is one Lua script (`scripts/*.lua`, each prefixed with
//! the constants from `scripts.rs` and with `scripts/common.lua`), so a crash or
//! a dropped connection never leaves an item in two places or in none.
//! The key table and the reasons for this shape are in `docs/DESIGN.md`,
//! section "Redis layout" (in the repository).
//!
//! The files, one job each:
//!
//! | file | job |
//! |---|---|
//! | `options.rs` | [`RedisOptions`]: timeouts, replicas, consumer name, TLS, cluster |
//! | `tls.rs` | the one `redis` client of a handle, from the URL and the TLS options |
//! | `connect.rs` | [`RedisQueue::connect`]: connect, migrate, name the consumer, warn about durability |
//! | `connection.rs` | the shared and the blocking-wait connections, to a server or a cluster |
//! | `scripts.rs` | loading the scripts with the constants Rust shares with Lua, running them, `WAIT` |
//! | `calls.rs` | the arguments and replies of the script calls that need more than one line |
//! | `wait.rs` | blocking waits on the wake and events streams |
//! | `combine.rs` | combining concurrent adds into one script call |
//! | `queue.rs` | the [`WorkQueue`] implementation |
//! | `browse.rs`, `forward.rs`, `reply.rs` | `list`/`find`, store and forward, reply decoding |

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::clock::SharedClock;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::item::Receipt;
#[cfg(doc)]
use crate::queue::WorkQueue;

mod browse;
mod calls;
mod cancel;
mod combine;
mod connect;
mod connection;
pub(crate) mod forward;
mod options;
mod prelude;
mod queue;
pub(crate) mod reply;
mod scripts;
mod tls;
mod update;
mod wait;

use connection::{Conn, Source};
pub use forward::Origin;
pub use options::RedisOptions;
use scripts::{Scripts, script};

/// Default of [`RedisOptions::connect_timeout`]: 5 s.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Default of [`RedisOptions::response_timeout`]: 5 s.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);
/// Default of [`RedisOptions::replica_timeout`]: 1 s.
pub const DEFAULT_REPLICA_TIMEOUT: Duration = Duration::from_secs(1);

/// Events one `wait_outcome` / `wait_chunks` round reads at most, and the
/// entries the events stream keeps (the scripts get it as `EVENTS_KEPT`).
const EVENTS_PER_READ: usize = 64;

/// The longest single `XREAD BLOCK` of a waiting claim; a longer wait loops.
const BLOCK_ROUND: Duration = Duration::from_secs(10);
/// Times further than this (ms) are clamped, so that sums stay exact in Lua's
/// doubles (2^52 ms is about 142 000 years).
const MAX_LUA_MS: u64 = 1 << 52;

struct Inner {
    client: Source,
    conn: Conn,
    /// Idle connections for blocking waits (no response timeout).
    blockers: std::sync::Mutex<Vec<Conn>>,
    prefix: String,
    consumer: String,
    config: Config,
    clock: Option<SharedClock>,
    options: RedisOptions,
    scripts: &'static Scripts,
    closed: AtomicBool,
    /// What `stats().durable` says: false when the server keeps no
    /// persistence at all (read at connect, SPEC 1).
    durable: AtomicBool,
    /// Wakes blocking waits at `close()` (SPEC 3, Closing): a wait's `XREAD BLOCK`
    /// would otherwise end only with its round, up to 10 s later.
    close_signal: tokio::sync::Notify,
    /// Concurrent adds waiting to share one script call.
    combiner: combine::Combiner,
}

/// The Redis backend (feature `redis`): a queue in one namespace of a Redis
/// server, shared by every process pointed at it. docs/DESIGN.md ("Redis
/// layout") explains the keys and why; SPEC section 6 the format.
///
/// One handle is one consumer with a unique name. Clones share the handle.
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use workjournal::{ClaimFrom, Config, NewItem, RedisOptions, RedisQueue, WorkQueue};
/// # async fn run() -> workjournal::Result<()> {
/// let queue = RedisQueue::connect("redis://127.0.0.1/", "mail", Config::default(),
///     RedisOptions::default()).await?;
/// queue.add(NewItem::new(b"send invoice 42".to_vec())).await?;
/// for claimed in queue.claim(10, Duration::from_secs(1), ClaimFrom::All).await? {
///     queue.ack(claimed.receipt).await?;
/// }
/// queue.close().await?;
/// # Ok(())
/// # }
/// ```
///
/// # TLS
///
/// A `rediss://host:port/` URL connects over TLS (rustls with the ring
/// provider; TLS 1.2 and 1.3). The server's certificate must chain to a
/// trusted root and name the URL's host. By default the platform's roots
/// are trusted (e.g. `/etc/ssl/certs`), which suits managed services with
/// publicly signed certificates; for a private CA give it with
/// [`RedisOptions::tls_ca_pem`] or [`RedisOptions::tls_ca_file`] (it then
/// replaces the platform's roots). A server that requires client
/// certificates (`tls-auth-clients yes`) gets the one given with
/// [`RedisOptions::tls_client_cert_pem`] or
/// [`RedisOptions::tls_client_cert_files`]. Every connection of a handle
/// (the shared one, its reconnects, and those of blocking claims) uses the
/// same settings. `#insecure` URLs (no certificate check) are refused, and
/// so are TLS options with a plain `redis://` URL.
///
/// ```no_run
/// use workjournal::{Config, RedisOptions, RedisQueue};
/// # async fn run() -> workjournal::Result<()> {
/// let options = RedisOptions::default()
///     .tls_ca_file("/etc/workjournal/redis-ca.pem")
///     .tls_client_cert_files("/etc/workjournal/client.pem", "/etc/workjournal/client.key");
/// let queue = RedisQueue::connect("rediss://:secret@redis.internal:6380/", "mail",
///     Config::default(), options).await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedisQueue {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for RedisQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisQueue")
            .field("prefix", &self.inner.prefix)
            .field("consumer", &self.inner.consumer)
            .finish_non_exhaustive()
    }
}

fn redis_err(what: &str, e: redis::RedisError) -> Error {
    Error::Backend {
        detail: format!("redis {what} failed"),
        source: Some(Box::new(e)),
    }
}

/// Run `fut`, failing with `Error::Backend` after `limit`.
async fn bounded<T>(
    what: &str,
    limit: Duration,
    fut: impl Future<Output = redis::RedisResult<T>>,
) -> Result<T> {
    match tokio::time::timeout(limit, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(redis_err(what, e)),
        Err(_) => Err(Error::backend(format!(
            "redis {what} got no answer within {} ms",
            limit.as_millis()
        ))),
    }
}

/// A count as a script argument, clamped so that Lua's doubles print it as
/// an integer.
fn n_arg(n: usize) -> Vec<u8> {
    (n as u64).min(MAX_LUA_MS).to_string().into_bytes()
}

/// A retention as the scripts read it, `<count>:<age ms>:<slack>` (SPEC
/// 3, History), the age clamped as [`n_arg`] clamps counts.
fn retention_text(r: crate::config::Retention) -> String {
    format!(
        "{}:{}:{}",
        r.count().min(MAX_LUA_MS),
        r.age_ms().min(MAX_LUA_MS),
        r.slack()
    )
}

fn receipt_args(args: &mut Vec<Vec<u8>>, r: &Receipt) {
    args.push(r.id.to_string().into_bytes());
    args.push(r.lease.to_string().into_bytes());
}

impl RedisQueue {
    fn limit(&self) -> Duration {
        let o = &self.inner.options;
        let mut l = o.connect_timeout.saturating_add(o.response_timeout);
        if o.min_replicas > 0 {
            l = l.saturating_add(o.replica_timeout);
        }
        l
    }

    fn check_open(&self) -> Result<()> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        Ok(())
    }
}
