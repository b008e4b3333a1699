//! One entry point for every backend: [`connect`] picks it from a URL or a
//! path (SPEC section 10), like sqlx's `Any` connect. Feature `remote`.
//!
//! | target | backend |
//! |---|---|
//! | `PATH` (anything else) | the process serving `PATH` if one does (through [`socket_path_for`]), else the file itself ([`EmbeddedQueue`](crate::EmbeddedQueue)) |
//! | `unix:PATH` | [`RemoteQueue`] on the socket `PATH` |
//! | `http://HOST:PORT` | [`RemoteQueue`] over TCP ([`ConnectOptions::token`]) |
//! | `redis://...`, `rediss://...` | `RedisQueue` (feature `redis`) |

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::queue::BoxQueue;
use crate::{RemoteOptions, RemoteQueue};

mod takeover;

pub use takeover::FileQueue;

/// Where a queue lives, as [`connect`] reads a target string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A queue file, served by another process or opened here.
    File(PathBuf),
    /// A server's Unix socket.
    Unix(PathBuf),
    /// A server's TCP address, as an `http://` or `https://` URL.
    Http(String),
    /// A Redis URL: `redis://` or `rediss://` (TLS) for one server,
    /// `redis+cluster://` or `rediss+cluster://` for a Redis Cluster.
    Redis(String),
}

impl Target {
    /// Read `target`: `unix:PATH`, `http(s)://...`, `redis(s)://...`,
    /// `redis(s)+cluster://...`, or else a file path.
    pub fn parse(target: &str) -> Target {
        const REDIS: [&str; 4] = [
            "redis://",
            "rediss://",
            "redis+cluster://",
            "rediss+cluster://",
        ];
        if let Some(path) = target.strip_prefix("unix:") {
            Target::Unix(PathBuf::from(path))
        } else if target.starts_with("http://") || target.starts_with("https://") {
            Target::Http(target.to_string())
        } else if REDIS.iter().any(|scheme| target.starts_with(scheme)) {
            Target::Redis(target.to_string())
        } else {
            Target::File(PathBuf::from(target))
        }
    }
}

/// The socket a process serving the queue file `db` listens on by default:
/// the file's path with `.sock` appended (`jobs.redb` -> `jobs.redb.sock`),
/// beside it (SPEC section 10).
pub fn socket_path_for(db: &Path) -> PathBuf {
    let mut s = db.as_os_str().to_os_string();
    s.push(".sock");
    PathBuf::from(s)
}

/// Default of [`ConnectOptions::locked_wait`]: 3 seconds.
pub const DEFAULT_LOCKED_WAIT: Duration = Duration::from_secs(3);

/// Settings of [`ConnectOptions::connect`]; each applies only to the
/// backends that use it.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    remote: RemoteOptions,
    namespace: String,
    locked_wait: Duration,
    read_only: bool,
    serve: bool,
    #[cfg(feature = "redis")]
    redis: crate::RedisOptions,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            remote: RemoteOptions::default(),
            namespace: "workjournal".to_string(),
            locked_wait: DEFAULT_LOCKED_WAIT,
            read_only: false,
            serve: false,
            #[cfg(feature = "redis")]
            redis: crate::RedisOptions::default(),
        }
    }
}

impl ConnectOptions {
    /// Timeouts (and token) of a remote queue. Default:
    /// [`RemoteOptions::default`].
    pub fn remote(mut self, options: RemoteOptions) -> Self {
        self.remote = options;
        self
    }

    /// The bearer token for an `http://` target (sets it in the remote
    /// options). Default: none.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.remote = self.remote.token(token);
        self
    }

    /// The Redis key prefix. Default: `workjournal`.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// Redis TLS and timeout settings. Default: `RedisOptions::default()`.
    #[cfg(feature = "redis")]
    pub fn redis(mut self, options: crate::RedisOptions) -> Self {
        self.redis = options;
        self
    }

    /// How long a file target keeps trying while another process holds the
    /// file without (yet) answering on its socket, e.g. a server starting
    /// or stopping. Default: 3 s.
    pub fn locked_wait(mut self, wait: Duration) -> Self {
        self.locked_wait = wait;
        self
    }

    /// Whether a queue file that no process serves is opened read-only
    /// (`EmbeddedOptions::read_only`: every change is `InvalidInput`, the
    /// file is never written). A served file is reached through its server
    /// as usual. Default: false.
    pub fn read_only(mut self, yes: bool) -> Self {
        self.read_only = yes;
        self
    }

    /// Whether a queue file this handle opens itself is served on its
    /// socket ([`socket_path_for`]) from the start, as `workjournal work`
    /// does, so that other processes reach it through this one (feature
    /// `server`; never when [`read_only`](ConnectOptions::read_only)). A
    /// handle that takes a file over from a server that went away serves
    /// it whatever this says (SPEC section 10, Take-over). Default: false.
    pub fn serve(mut self, yes: bool) -> Self {
        self.serve = yes;
        self
    }

    /// Open the queue at `target` (see [`Target`] and [`connect`]). `config`
    /// applies when this call opens a file or connects to Redis; a served
    /// queue follows its server's config.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a target this build cannot open (a Redis URL
    /// without the `redis` feature, `https://`); `Locked` if another
    /// process holds the file and serves no socket for `locked_wait`; else
    /// as the backend's own open or connect.
    pub async fn connect(&self, target: &str, config: Config) -> Result<BoxQueue> {
        match Target::parse(target) {
            Target::File(path) => self.open_file(&path, config).await,
            Target::Unix(path) => Ok(BoxQueue::new(
                RemoteQueue::connect_unix(path, self.remote.clone()).await?,
            )),
            Target::Http(url) => Ok(BoxQueue::new(
                RemoteQueue::connect_http(&url, self.remote.clone()).await?,
            )),
            Target::Redis(url) => self.open_redis(&url, config).await,
        }
    }

    /// A queue file: through the process that serves it when one does,
    /// otherwise opened here. A race with a server starting or stopping
    /// ends in the server, the file, or `Locked` after `locked_wait`;
    /// never a hang. The handle follows the file when its server goes
    /// away ([`FileQueue`], SPEC section 10, Take-over).
    ///
    /// # Errors
    ///
    /// As [`ConnectOptions::connect`] for a file.
    pub async fn open_file(&self, path: &Path, config: Config) -> Result<BoxQueue> {
        Ok(BoxQueue::new(self.file_queue(path, config).await?))
    }

    /// As [`ConnectOptions::open_file`], as the [`FileQueue`] itself (which
    /// says whether this process owns the file).
    ///
    /// # Errors
    ///
    /// As [`ConnectOptions::connect`] for a file; `Io` (permission denied)
    /// naming the socket when a server answers on it but refuses this
    /// process's uid.
    pub async fn file_queue(&self, path: &Path, config: Config) -> Result<FileQueue> {
        FileQueue::open(path, config, self.clone()).await
    }

    /// Where the file is now, saying which it found, so a caller that
    /// opened the file itself can serve it in turn. Unlike
    /// [`ConnectOptions::open_file`] the handle does not follow the file
    /// when its server goes away.
    ///
    /// # Errors
    ///
    /// As [`ConnectOptions::file_queue`].
    pub async fn open_file_or_server(&self, path: &Path, config: Config) -> Result<Opened> {
        self.find_file(path, config, true).await
    }

    /// [`ConnectOptions::open_file_or_server`]; a file opened here takes
    /// its pending claims for orphans only with `orphan_claims` (not at a
    /// take-over: `EmbeddedOptions::orphan_claims`).
    pub(crate) async fn find_file(
        &self,
        path: &Path,
        config: Config,
        orphan_claims: bool,
    ) -> Result<Opened> {
        let socket = socket_path_for(path);
        let deadline = tokio::time::Instant::now() + self.locked_wait;
        loop {
            if socket.exists() {
                match RemoteQueue::connect_unix(&socket, self.remote.clone()).await {
                    Ok(remote) => return Ok(Opened::Served(remote)),
                    // A server answers but does not let this process in:
                    // opening the file instead could only fail (it holds
                    // the lock) or write past the server's back.
                    Err(e) if is_permission_denied(&e) => return Err(e),
                    Err(_) => {}
                }
            }
            match open_embedded(path, config.clone(), self.read_only, orphan_claims).await {
                Err(Error::Locked { .. }) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                other => return other,
            }
        }
    }

    #[cfg(feature = "redis")]
    async fn open_redis(&self, url: &str, config: Config) -> Result<BoxQueue> {
        Ok(BoxQueue::new(
            crate::RedisQueue::connect(url, &self.namespace, config, self.redis.clone()).await?,
        ))
    }

    #[cfg(not(feature = "redis"))]
    async fn open_redis(&self, url: &str, _config: Config) -> Result<BoxQueue> {
        let _ = &self.namespace;
        Err(Error::invalid(format!(
            "{url}: this build lacks the redis feature"
        )))
    }
}

/// A socket that refuses this process (see the remote transport).
fn is_permission_denied(e: &Error) -> bool {
    matches!(e, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::PermissionDenied)
}

/// What [`ConnectOptions::open_file_or_server`] found.
#[derive(Debug)]
pub enum Opened {
    /// Another process serves the file: its client.
    Served(RemoteQueue),
    /// Nobody served it: the file, opened (and locked) by this process.
    #[cfg(feature = "embedded")]
    Owned(crate::EmbeddedQueue),
}

#[cfg(feature = "embedded")]
async fn open_embedded(
    path: &Path,
    config: Config,
    read_only: bool,
    orphan_claims: bool,
) -> Result<Opened> {
    let options = crate::EmbeddedOptions::default()
        .read_only(read_only)
        .orphan_claims(orphan_claims);
    Ok(Opened::Owned(
        crate::EmbeddedQueue::open_with(path, config, options).await?,
    ))
}

#[cfg(not(feature = "embedded"))]
async fn open_embedded(
    path: &Path,
    _config: Config,
    _read_only: bool,
    _orphan_claims: bool,
) -> Result<Opened> {
    Err(Error::invalid(format!(
        "{}: no process serves this file and this build lacks the embedded feature",
        path.display()
    )))
}

/// [`ConnectOptions::connect`] with default options: open the queue at
/// `target` (SPEC section 10).
///
/// | target | backend |
/// |---|---|
/// | `PATH` (anything else) | the process serving `PATH` if one does (on [`socket_path_for`]), else the file itself |
/// | `unix:PATH` | [`RemoteQueue`] on the socket `PATH` |
/// | `http://HOST:PORT` | [`RemoteQueue`] over TCP ([`ConnectOptions::token`]) |
/// | `redis://...`, `rediss://...` | `RedisQueue` (feature `redis`) |
///
/// # Errors
///
/// As [`ConnectOptions::connect`].
///
/// # Examples
///
/// ```no_run
/// use workjournal::{Config, NewItem, WorkQueue};
/// # async fn run() -> workjournal::Result<()> {
/// // The file itself, or the process serving it (`workjournal serve`).
/// let queue = workjournal::connect("jobs.redb", Config::default()).await?;
/// queue.add(NewItem::new(b"hello".to_vec())).await?;
/// # Ok(()) }
/// ```
pub async fn connect(target: &str, config: Config) -> Result<BoxQueue> {
    ConnectOptions::default().connect(target, config).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_read_by_their_scheme() {
        assert_eq!(Target::parse("q.redb"), Target::File("q.redb".into()));
        assert_eq!(
            Target::parse("unix:/run/q.sock"),
            Target::Unix("/run/q.sock".into())
        );
        assert_eq!(
            Target::parse("http://127.0.0.1:7070"),
            Target::Http("http://127.0.0.1:7070".into())
        );
        assert_eq!(
            Target::parse("rediss://h:6380/0"),
            Target::Redis("rediss://h:6380/0".into())
        );
        for cluster in ["redis+cluster://h:7000/", "rediss+cluster://h:7000/"] {
            assert_eq!(Target::parse(cluster), Target::Redis(cluster.into()));
        }
        assert_eq!(
            socket_path_for(Path::new("/var/lib/q.redb")),
            PathBuf::from("/var/lib/q.redb.sock")
        );
    }
}
