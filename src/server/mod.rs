//! `workjournal serve`: the whole [`WorkQueue`](crate::WorkQueue) contract over HTTP/1.1 +
//! JSON, on a Unix domain socket and optionally TCP (SPEC section 10,
//! docs/API.md). Feature `server`.
//!
//! A thin adapter: each request is decoded into one
//! [`wire::Request`](crate::wire::Request), runs one queue call and is
//! answered with that call's result or its error as JSON. No queue rule
//! lives here. What the server adds is transport safety:
//!
//! - the socket is created owner-only (mode 0600) unless the options open
//!   it to a group, and every peer's uid is checked (`SO_PEERCRED`);
//! - a TCP connection must carry `Authorization: Bearer <token>`;
//! - a body over the limit is refused with 413 without being read whole;
//! - slow clients meet a header timeout (also the idle timeout of a
//!   kept-alive connection) and a body timeout;
//! - a claim long-polls for at most `max_wait` per request (the client
//!   asks again for the rest of its wait) and ends at shutdown.
//!
//! # Example
//!
//! ```no_run
//! use workjournal::server::{Listener, Server, ServerOptions, SocketPermissions};
//! use workjournal::{BoxQueue, Config, EmbeddedQueue, WorkQueue};
//! # async fn run() -> workjournal::Result<()> {
//! let queue = EmbeddedQueue::open("jobs.redb", Config::default()).await?;
//! let socket = Listener::bind_unix("jobs.redb.sock", &SocketPermissions::default()).await?;
//! let server = Server::new(BoxQueue::new(queue.clone()), ServerOptions::default());
//! server.run(vec![socket], async { let _ = tokio::signal::ctrl_c().await; }).await?;
//! queue.close().await?;
//! # Ok(()) }
//! ```

use std::future::Future;
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::server::graceful::GracefulShutdown;
use tokio::sync::watch;

use crate::error::{Error, Result};
use crate::queue::BoxQueue;

mod auth;
mod connections;
mod execute;
mod listener;
mod openapi;
mod options;
mod routes;

pub use listener::{Listener, SocketPermissions};
pub use openapi::openapi_json;
pub use options::ServerOptions;

use connections::{accept_tcp, accept_unix};
use listener::ListenerKind;
use routes::{AppState, router};

// The dashboard answers with the API's own helpers.
#[cfg(feature = "dashboard")]
use auth::{Access, access_of, bearer_access};
#[cfg(feature = "dashboard")]
use routes::{error_response, json_response, read_body};

#[cfg(feature = "dashboard")]
mod dashboard;

/// Default of [`ServerOptions::header_timeout`]: 10 seconds.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Default of [`ServerOptions::body_timeout`]: 30 seconds.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// Default of [`ServerOptions::max_wait`]: 20 seconds.
pub const DEFAULT_MAX_WAIT: Duration = Duration::from_secs(20);
/// Room for the JSON around the payloads of one request, in bytes.
pub(crate) const ENVELOPE_BYTES: usize = 64 * 1024;

/// Serves one queue on any number of listeners.
#[derive(Debug)]
pub struct Server {
    queue: BoxQueue,
    options: Arc<ServerOptions>,
    #[cfg(feature = "forward")]
    lag: Option<crate::forward::LagSource>,
    /// The same queue, counting what it does (SPEC 12.3).
    #[cfg(feature = "dashboard")]
    metered: crate::metered::MeteredQueue<BoxQueue>,
}

impl Server {
    /// A server for `queue`. The server never closes the queue: close it
    /// after [`Server::run`] returns.
    pub fn new(queue: BoxQueue, options: ServerOptions) -> Self {
        // With the dashboard, every call is metered (SPEC 12.3), and the
        // recorder that /metrics renders is installed before the first.
        #[cfg(feature = "dashboard")]
        {
            let _ = dashboard::prometheus();
            let metered = crate::metered::MeteredQueue::new(queue);
            Server {
                queue: BoxQueue::new(metered.clone()),
                options: Arc::new(options),
                metered,
                #[cfg(feature = "forward")]
                lag: None,
            }
        }
        #[cfg(not(feature = "dashboard"))]
        Server {
            queue,
            options: Arc::new(options),
            #[cfg(feature = "forward")]
            lag: None,
        }
    }

    /// Answer route `forward_lag` (SPEC sections 10 and 11) from `source`:
    /// give it when the served queue is a queue file. Without it the route
    /// answers `{"lag": null}`: the served queue cannot know.
    #[cfg(feature = "forward")]
    pub fn forward_lag(mut self, source: crate::forward::LagSource) -> Self {
        self.lag = Some(source);
        self
    }

    /// Serve on `listeners` until `shutdown` completes, then stop accepting,
    /// end waiting claims (they answer empty), let requests in flight
    /// finish and remove the socket files this server made.
    ///
    /// # Errors
    ///
    /// `InvalidInput` if a TCP listener is given without a token.
    pub async fn run(
        self,
        listeners: Vec<Listener>,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<()> {
        let has_tcp = listeners
            .iter()
            .any(|l| !matches!(l.kind, ListenerKind::Unix { .. }));
        if has_tcp && self.options.token.as_deref().is_none_or(str::is_empty) {
            return Err(Error::invalid(
                "a TCP listener needs a bearer token (ServerOptions::token)",
            ));
        }
        let (stop_tx, stop_rx) = watch::channel(false);
        let state = AppState {
            queue: self.queue.clone(),
            options: self.options.clone(),
            #[cfg(feature = "forward")]
            lag: self.lag.clone(),
            token: None,
            read_token: None,
            shutdown: stop_rx.clone(),
        };
        let unix_router = router(state.clone());
        let tcp_router = router(AppState {
            token: self.options.token.as_deref().map(Arc::from),
            read_token: self.options.read_token.as_deref().map(Arc::from),
            ..state
        });
        let graceful = Arc::new(GracefulShutdown::new());
        let mut tasks = tokio::task::JoinSet::new();
        let mut sockets = Vec::new();
        #[cfg(feature = "dashboard")]
        let dash_router = {
            let wanted = listeners
                .iter()
                .any(|l| matches!(l.kind, ListenerKind::Dashboard(_)));
            let token: Arc<str> = Arc::from(self.options.token.as_deref().unwrap_or_default());
            let read_token: Option<Arc<str>> = self.options.read_token.as_deref().map(Arc::from);
            wanted.then(|| {
                #[cfg(feature = "forward")]
                let lag = self.lag.clone();
                #[cfg(not(feature = "forward"))]
                let lag = None;
                let dash = Arc::new(dashboard::Dash::new(
                    self.metered.clone(),
                    token,
                    read_token,
                    self.options.read_only,
                    lag,
                ));
                tasks.spawn(dashboard::sample(dash.clone(), stop_rx.clone()));
                dashboard::router(dash)
            })
        };
        // SPEC 13: a served queue fires its schedules itself, so clients
        // (remote workers) need not.
        if self.options.fire_schedules {
            let queue = self.queue.clone();
            let mut stop = stop_rx.clone();
            tasks.spawn(async move {
                let fire = crate::schedule::fire_loop(&queue, Duration::from_secs(1), |op, e| {
                    tracing::warn!(op, error = %e, "firing schedules failed");
                });
                tokio::select! {
                    () = fire => {}
                    _ = stop.wait_for(|s| *s) => {}
                }
            });
        }
        for listener in listeners {
            let stop = stop_rx.clone();
            let graceful = graceful.clone();
            let options = self.options.clone();
            match listener.kind {
                ListenerKind::Unix {
                    listener,
                    path,
                    owner_uid,
                    inode,
                    open_to_others,
                } => {
                    sockets.push((path, inode));
                    let allowed = match (&options.allowed_uids, open_to_others) {
                        (Some(uids), _) => Some(uids.clone()),
                        (None, true) => None,
                        (None, false) => Some(vec![owner_uid]),
                    };
                    let router = unix_router.clone();
                    tasks.spawn(accept_unix(
                        listener, allowed, router, options, graceful, stop,
                    ));
                }
                ListenerKind::Tcp(listener) => {
                    let router = tcp_router.clone();
                    tasks.spawn(accept_tcp(listener, router, options, graceful, stop));
                }
                #[cfg(feature = "dashboard")]
                ListenerKind::Dashboard(listener) => {
                    if let Some(router) = dash_router.clone() {
                        tasks.spawn(accept_tcp(listener, router, options, graceful, stop));
                    }
                }
            }
        }
        shutdown.await;
        let _ = stop_tx.send(true);
        while tasks.join_next().await.is_some() {}
        for (path, inode) in sockets {
            if std::fs::metadata(&path).is_ok_and(|m| m.ino() == inode) {
                let _ = std::fs::remove_file(&path);
            }
        }
        // Requests in flight finish (waiting claims were told to stop);
        // a client that holds a connection open without a request is cut
        // off by the header timeout at the latest.
        match Arc::try_unwrap(graceful) {
            Ok(g) => {
                let _ = tokio::time::timeout(
                    self.options.header_timeout + self.options.body_timeout,
                    g.shutdown(),
                )
                .await;
            }
            Err(_) => tracing::warn!("server connections outlived their accept loops"),
        }
        Ok(())
    }
}

/// Resolves once the server is told to stop.
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}
