//! [`FileQueue`]: a queue file reached through whichever process serves
//! it, or opened here, that takes the file over when its serving process
//! goes away (SPEC section 10, Take-over).
//!
//! The handle holds one current queue: the server's client
//! ([`RemoteQueue`](crate::RemoteQueue)) or the file itself. A call that
//! the server never carried out (the socket is gone or refuses
//! connections, or the server answered that it is shutting down) finds
//! the file again with [`ConnectOptions::open_file_or_server`]: the
//! process serving it now, or the file opened here, which this handle then
//! serves on the file's socket for the other clients (feature `server`).
//! The call is then sent again, once, where the file now is. A call whose
//! outcome is unknown (the connection was lost after it was sent) is only
//! sent again when that cannot run anything twice: looks, claims, steps
//! and heartbeats (a claim lost with its server leaves what it took
//! pending until reclaimed, as after a crash); every other call returns
//! its `Backend` error after the take-over, as it would from Redis.
//!
//! Receipts stay valid across a take-over: leases live in the file, not
//! in the process that served it.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::{ConnectOptions, Opened};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::queue::{BoxQueue, WorkQueue};
use crate::request::{Reply, Request};

/// How many times one call follows the file to a new place before it
/// gives up with the error it met: a server that goes away just as it is
/// found again, more than once in a row.
const MAX_MOVES: u32 = 3;

/// A queue file, through the process serving it or opened here, which
/// follows the file when that process goes away (SPEC section 10,
/// Take-over): the handle [`connect`](crate::connect) returns for a path.
/// Cheap to clone; clones share the handle (and the server it runs, if
/// any).
///
/// When this handle owns the file it serves it on
/// [`socket_path_for`](crate::socket_path_for) (feature `server`) if it
/// took the file over from a server, or if
/// [`ConnectOptions::serve`] asked for it; never when opened read-only.
///
/// # Examples
///
/// ```no_run
/// use workjournal::{Config, ConnectOptions, NewItem, WorkQueue};
/// # async fn run() -> workjournal::Result<()> {
/// let queue = ConnectOptions::default()
///     .file_queue("jobs.redb".as_ref(), Config::default())
///     .await?;
/// queue.add(NewItem::new(b"hello".to_vec())).await?;
/// println!("this process owns the file: {}", queue.is_owner());
/// queue.close().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct FileQueue {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for FileQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileQueue")
            .field("path", &self.inner.path)
            .field("owner", &self.is_owner())
            .finish_non_exhaustive()
    }
}

struct Inner {
    path: PathBuf,
    options: ConnectOptions,
    config: Config,
    current: Mutex<Current>,
    /// Held while the file is found again, so that the calls failing
    /// together move once.
    moving: tokio::sync::Mutex<()>,
    closed: AtomicBool,
}

/// Where the file is now.
struct Current {
    /// Bumped at each move, so a call that failed on an older place only
    /// waits for the move already made.
    generation: u64,
    queue: BoxQueue,
    /// Set while this process owns the file.
    owner: Option<Owner>,
}

/// The file, owned by this process, and the server it runs for the others.
#[cfg_attr(not(feature = "embedded"), allow(dead_code))]
struct Owner {
    #[cfg(all(feature = "server", feature = "embedded"))]
    serving: Option<serving::Serving>,
}

impl FileQueue {
    pub(super) async fn open(path: &Path, config: Config, options: ConnectOptions) -> Result<Self> {
        let opened = options.open_file_or_server(path, config.clone()).await?;
        let serve = options.serve && !options.read_only;
        let current = place(path, &config, opened, serve, 0).await;
        Ok(FileQueue {
            inner: Arc::new(Inner {
                path: path.to_path_buf(),
                options,
                config,
                current: Mutex::new(current),
                moving: tokio::sync::Mutex::new(()),
                closed: AtomicBool::new(false),
            }),
        })
    }

    /// Whether this process owns the file now (opened it itself), rather
    /// than reaching it through the process that serves it.
    pub fn is_owner(&self) -> bool {
        self.inner
            .current
            .lock()
            .is_ok_and(|current| current.owner.is_some())
    }

    /// The queue file's path.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    fn current(&self) -> Result<(u64, BoxQueue, bool)> {
        let current = self
            .inner
            .current
            .lock()
            .map_err(|_| Error::backend("the file queue's state was poisoned by a panic"))?;
        Ok((
            current.generation,
            current.queue.clone(),
            current.owner.is_some(),
        ))
    }

    /// Find the file again after its server failed the call made on
    /// `generation`: the process serving it now, or the file opened (and
    /// served) here. Nothing to do if another call already moved.
    async fn move_from(&self, generation: u64) -> Result<()> {
        let _moving = self.inner.moving.lock().await;
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        if self.current()?.0 != generation {
            return Ok(());
        }
        // The old server's clients are alive: their claims are not
        // orphans (EmbeddedOptions::orphan_claims).
        let opened = self
            .inner
            .options
            .find_file(&self.inner.path, self.inner.config.clone(), false)
            .await?;
        let serve = !self.inner.options.read_only;
        let next = place(
            &self.inner.path,
            &self.inner.config,
            opened,
            serve,
            generation + 1,
        )
        .await;
        if next.owner.is_some() {
            tracing::info!(
                "took over {}: its serving process went away",
                self.inner.path.display()
            );
        }
        let mut current = self
            .inner
            .current
            .lock()
            .map_err(|_| Error::backend("the file queue's state was poisoned by a panic"))?;
        // The old client is dropped, not closed: calls still waiting on
        // it end on their own, and a close would end them with `Closed`.
        *current = next;
        Ok(())
    }

    /// Whether the server that failed a call with an unknown outcome is
    /// gone: nothing answers on its socket any more.
    async fn server_gone(&self) -> bool {
        let socket = super::socket_path_for(&self.inner.path);
        match crate::RemoteQueue::connect_unix(&socket, self.inner.options.remote.clone()).await {
            Ok(_) => false,
            Err(e) => crate::wire::unanswered(&e).is_some(),
        }
    }

    async fn close_all(&self) -> Result<()> {
        self.inner.closed.store(true, Ordering::Release);
        let _moving = self.inner.moving.lock().await;
        let (queue, owner) = {
            let mut current =
                self.inner.current.lock().map_err(|_| {
                    Error::backend("the file queue's state was poisoned by a panic")
                })?;
            (current.queue.clone(), current.owner.take())
        };
        // Stop serving first: clients in the middle of a call finish it,
        // later ones find the socket gone and take the file over once it
        // is closed here.
        #[cfg(all(feature = "server", feature = "embedded"))]
        if let Some(serving) = owner.and_then(|o| o.serving) {
            serving.stop().await;
        }
        #[cfg(not(all(feature = "server", feature = "embedded")))]
        let _ = owner;
        queue.close().await
    }
}

/// Whether `request` may be sent again after its outcome was lost with
/// its server: it changes nothing, or what it changed is undone by the
/// lease running out (a claim's items, a step's item) or by sending it
/// again (a heartbeat).
fn may_resend(request: &Request) -> bool {
    request.is_read()
        || matches!(
            request,
            Request::Claim { .. } | Request::Step { .. } | Request::Touch { .. }
        )
}

impl WorkQueue for FileQueue {
    /// The call on the file's current place; after a server that went
    /// away, once more where the file is now (module docs).
    async fn call(&self, request: Request) -> Result<Reply> {
        if matches!(request, Request::Close) {
            return self.close_all().await.map(|()| Reply::Unit);
        }
        let mut moves = 0;
        loop {
            let (generation, queue, owner) = self.current()?;
            if owner {
                return queue.call(request).await;
            }
            let error = match queue.call(request.clone()).await {
                Err(e @ Error::Backend { .. }) if !self.inner.closed.load(Ordering::Acquire) => e,
                other => return other,
            };
            let resend = if crate::wire::unanswered(&error).is_some() {
                true
            } else if self.server_gone().await {
                may_resend(&request)
            } else {
                return Err(error);
            };
            moves += 1;
            if let Err(why) = self.move_from(generation).await {
                if matches!(why, Error::Closed) {
                    return Err(why);
                }
                tracing::warn!(
                    "cannot take over {}: {}",
                    self.inner.path.display(),
                    crate::wire::one_line(&why)
                );
                return Err(error);
            }
            if !resend || moves >= MAX_MOVES {
                return Err(error);
            }
        }
    }

    fn max_deliveries(&self) -> u32 {
        self.inner
            .current
            .lock()
            .map_or(crate::config::DEFAULT_MAX_DELIVERIES, |current| {
                current.queue.max_deliveries()
            })
    }
}

/// The current place for what `open_file_or_server` found; an owned file
/// is served on its socket when `serve`.
#[cfg_attr(
    not(all(feature = "embedded", feature = "server")),
    allow(unused_variables)
)]
async fn place(
    path: &Path,
    config: &Config,
    opened: Opened,
    serve: bool,
    generation: u64,
) -> Current {
    match opened {
        Opened::Served(remote) => Current {
            generation,
            queue: BoxQueue::new(remote),
            owner: None,
        },
        #[cfg(feature = "embedded")]
        Opened::Owned(file) => {
            #[cfg(feature = "server")]
            let serving = if serve {
                serving::Serving::start(path, config, &file).await
            } else {
                None
            };
            Current {
                generation,
                queue: BoxQueue::new(file),
                owner: Some(Owner {
                    #[cfg(feature = "server")]
                    serving,
                }),
            }
        }
    }
}

#[cfg(all(feature = "server", feature = "embedded"))]
mod serving {
    use std::path::Path;

    use crate::config::Config;
    use crate::error::Result;
    use crate::queue::BoxQueue;
    use crate::server::{Listener, Server, ServerOptions, SocketPermissions};

    /// A server of the owned file, running in this process.
    pub(super) struct Serving {
        stop: tokio::sync::oneshot::Sender<()>,
        done: tokio::task::JoinHandle<Result<()>>,
    }

    impl Serving {
        /// Serve `file` on its socket, as `workjournal work` does: `None`,
        /// after a warning, when the socket cannot be bound (the handle
        /// still works; other processes then find the file locked).
        pub(super) async fn start(
            path: &Path,
            config: &Config,
            file: &crate::EmbeddedQueue,
        ) -> Option<Self> {
            let socket = crate::socket_path_for(path);
            let listener = match Listener::bind_unix(&socket, &SocketPermissions::default()).await {
                Ok(listener) => listener,
                Err(e) => {
                    tracing::warn!(
                        "not serving {}: {}",
                        socket.display(),
                        crate::wire::one_line(&e)
                    );
                    return None;
                }
            };
            let options =
                ServerOptions::default().max_payload_bytes(config.get_max_payload_bytes());
            let server = Server::new(BoxQueue::new(file.clone()), options);
            #[cfg(feature = "forward")]
            let server = server.forward_lag(crate::forward::LagSource::file(file.clone()));
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let done = tokio::spawn(server.run(vec![listener], async {
                let _ = stopped.await;
            }));
            Some(Serving { stop, done })
        }

        /// Stop accepting, let requests in flight finish, remove the
        /// socket.
        pub(super) async fn stop(self) {
            let _ = self.stop.send(());
            if let Ok(Err(e)) = self.done.await {
                tracing::warn!("server: {}", crate::wire::one_line(&e));
            }
        }
    }
}
