//! Opening the queue the global flags name: a queue file (or the process
//! serving it), a server's URL, or Redis; read-only for commands that only
//! look, and with the file itself for `stats`' forwarding lag.

use workjournal::{BoxQueue, Config};

use crate::args::Global;
use crate::{CliError, CliResult, code};

/// Open the queue the global flags name.
pub(crate) async fn open(global: &Global, config: Config) -> CliResult<BoxQueue> {
    open_as(global, config, false).await
}

/// Open the queue the global flags name; with `read_only`, a file that no
/// process serves is opened read-only.
async fn open_as(global: &Global, config: Config, read_only: bool) -> CliResult<BoxQueue> {
    Ok(open_saying_file(global, config, read_only).await?.0)
}

/// Where the queue [`open_where`] opened lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Opened {
    /// The queue file, opened by this process.
    #[cfg_attr(not(feature = "embedded"), allow(dead_code))]
    File,
    /// The queue file, through the socket of the process serving it.
    ServedFile,
    /// A server's URL (`unix:`, `http://`): another process's queue.
    Url,
    /// Redis.
    Redis,
}

impl Opened {
    /// Whether another process holds the queue and answers for it, with
    /// its own queue config (SPEC section 9).
    pub(crate) fn is_served(self) -> bool {
        matches!(self, Opened::ServedFile | Opened::Url)
    }
}

/// As [`open_as`], and whether the target is a queue file (opened here, or
/// reached through the process serving it) rather than Redis or a URL.
pub(crate) async fn open_saying_file(
    global: &Global,
    config: Config,
    read_only: bool,
) -> CliResult<(BoxQueue, bool)> {
    let (queue, opened) = open_where(global, config, read_only).await?;
    Ok((queue, matches!(opened, Opened::File | Opened::ServedFile)))
}

/// As [`open_as`], and where the queue it opened lives.
pub(crate) async fn open_where(
    global: &Global,
    config: Config,
    read_only: bool,
) -> CliResult<(BoxQueue, Opened)> {
    if let Some(url) = &global.redis {
        return Ok((open_redis(url, global, config).await?, Opened::Redis));
    }
    // The file, or the process serving it (SPEC section 10), followed when
    // that process goes away (Take-over).
    let options = connect_options().read_only(read_only);
    if let Some(target) = global.db.to_str()
        && crate::serve::is_url(target)
    {
        let queue = options
            .connect(target, config)
            .await
            .map_err(|e| token_hint(e, target))?;
        return Ok((queue, Opened::Url));
    }
    let file = options.file_queue(&global.db, config).await?;
    let opened = if file.is_owner() {
        Opened::File
    } else {
        Opened::ServedFile
    };
    Ok((BoxQueue::new(file), opened))
}

/// The library's connect options with the token of `WORKJOURNAL_TOKEN`.
pub(crate) fn connect_options() -> workjournal::ConnectOptions {
    let options = workjournal::ConnectOptions::default();
    match std::env::var("WORKJOURNAL_TOKEN") {
        Ok(token) => options.token(token),
        Err(_) => options,
    }
}

/// A server that refused the call for want of a token, when none was
/// given: say where the CLI takes one from (SPEC section 9, `--db
/// http://HOST:PORT`).
fn token_hint(e: workjournal::Error, target: &str) -> CliError {
    let given = std::env::var_os("WORKJOURNAL_TOKEN").is_some_and(|t| !t.is_empty());
    let refused = matches!(&e, workjournal::Error::Backend { .. })
        && crate::one_line(&e).contains("(unauthorized)");
    let mut err = CliError::from(e);
    if refused && !given {
        err.message.push_str(&format!(
            "; {target} needs its token: set WORKJOURNAL_TOKEN (the server's --token-file holds it)"
        ));
    }
    err
}

/// Open the queue for looking only: the process serving the file when one
/// does, else the embedded file read-only (see
/// [`workjournal::EmbeddedOptions::read_only`]); Redis as usual.
pub(crate) async fn open_read_only(global: &Global) -> CliResult<BoxQueue> {
    open_as(global, Config::default(), true).await
}

/// The Redis options the global flags give (TLS CA and client certificate).
#[cfg(feature = "redis")]
pub(crate) fn redis_options(global: &Global) -> workjournal::RedisOptions {
    let mut options = workjournal::RedisOptions::default();
    if let Some(ca) = &global.redis_ca {
        options = options.tls_ca_file(ca);
    }
    if let (Some(cert), Some(key)) = (&global.redis_cert, &global.redis_key) {
        options = options.tls_client_cert_files(cert, key);
    }
    options
}

/// Connect to the Redis queue at `url` with the global flags' TLS files
/// and namespace.
#[cfg(feature = "redis")]
async fn open_redis(url: &str, global: &Global, config: Config) -> CliResult<BoxQueue> {
    let options = redis_options(global);
    let queue = workjournal::RedisQueue::connect(url, &global.namespace, config, options)
        .await
        .map_err(|e| match e {
            // A malformed URL, namespace or TLS file is a usage error.
            workjournal::Error::InvalidInput(_) => CliError::new(code::USAGE, crate::one_line(&e)),
            other => other.into(),
        })?;
    Ok(BoxQueue::new(queue))
}

/// Without `redis`, `--redis` is a usage error.
#[cfg(not(feature = "redis"))]
async fn open_redis(_url: &str, _global: &Global, _config: Config) -> CliResult<BoxQueue> {
    Err(CliError::new(
        code::USAGE,
        "--redis: this workjournal was built without the redis feature (rebuild with --features redis)",
    ))
}

/// Only `add` creates a queue file: every other command on an embedded
/// `--db` that does not exist fails with exit 3 and creates nothing, so that
/// a mistyped path is not a new empty queue (SPEC section 9).
pub(crate) fn require_queue_file(global: &Global) -> CliResult {
    let is_url = global.db.to_str().is_some_and(crate::serve::is_url);
    if global.redis.is_none() && !is_url && !global.db.exists() {
        return Err(CliError::new(
            code::INPUT,
            format!("no queue file at {}", global.db.display()),
        ));
    }
    Ok(())
}

/// Where `stats` reads the forwarding lag (SPEC section 11, "Lag in
/// `stats`"): the file itself, when this process opened it (read-only), or
/// the process serving it (`forward`, `work`, `serve`: route
/// `forward_lag`).
#[cfg(feature = "forward")]
pub(crate) struct LagSource {
    /// Where the lag is read.
    pub(crate) from: LagFrom,
    /// The flows counted (`--forward-flow`); empty: every flow, or over a
    /// running forwarder's socket the flows it forwards.
    pub(crate) flows: Vec<String>,
}

/// The two places the forwarding lag is read from.
#[cfg(feature = "forward")]
pub(crate) enum LagFrom {
    /// The queue file, opened here read-only.
    File(workjournal::EmbeddedQueue),
    /// The process serving the file.
    Served(workjournal::RemoteQueue),
}

/// Without `forward` there is no forwarding lag to read.
#[cfg(not(feature = "forward"))]
pub(crate) struct LagSource;

/// The queue `stats` looks at, as [`open_read_only`], and the file itself
/// when no process serves it, for the forwarding lag.
pub(crate) async fn open_for_stats(
    global: &Global,
    forward_flows: &[String],
) -> CliResult<(BoxQueue, Option<LagSource>)> {
    #[cfg(feature = "forward")]
    if global.redis.is_none() && !global.db.to_str().is_some_and(crate::serve::is_url) {
        let mut options = workjournal::ConnectOptions::default().read_only(true);
        if let Ok(token) = std::env::var("WORKJOURNAL_TOKEN") {
            options = options.token(token);
        }
        return Ok(
            match options
                .open_file_or_server(&global.db, Config::default())
                .await?
            {
                workjournal::Opened::Served(remote) => (
                    BoxQueue::new(remote.clone()),
                    Some(LagSource {
                        from: LagFrom::Served(remote),
                        flows: forward_flows.to_vec(),
                    }),
                ),
                workjournal::Opened::Owned(file) => (
                    BoxQueue::new(file.clone()),
                    Some(LagSource {
                        from: LagFrom::File(file),
                        flows: forward_flows.to_vec(),
                    }),
                ),
            },
        );
    }
    let _ = forward_flows;
    Ok((open_read_only(global).await?, None))
}
