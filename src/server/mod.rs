//! `workjournal serve`: the whole [`WorkQueue`] contract over HTTP/1.1 +
//! JSON, on a Unix domain socket and optionally TCP (SPEC section 10,
//! docs/API.md). Feature `server`.
//!
//! A thin adapter: each request is decoded into one
//! [`wire::Request`], runs one queue call and is
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
use std::net::SocketAddr;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path as RoutePath, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use http_body_util::{BodyExt, Limited};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::watch;

use crate::error::{Error, Result};
use crate::queue::{BoxQueue, WorkQueue};
use crate::wire::{self, ErrorBody, ErrorReply, Request};

#[cfg(feature = "dashboard")]
mod dashboard;
#[cfg(feature = "dashboard")]
pub use dashboard::{
    BACK_OFF_DEFAULT, BACK_OFF_MAX, FLOW_SAMPLE, FORWARD_LAG_TARGET, HISTORY_SAMPLES,
    PREVIEW_BYTES, REDRIVE_ALL_MAX, SAMPLE_INTERVAL, TOKEN_COOKIE,
};

/// Default of [`ServerOptions::header_timeout`]: 10 seconds.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Default of [`ServerOptions::body_timeout`]: 30 seconds.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// Default of [`ServerOptions::max_wait`]: 20 seconds.
pub const DEFAULT_MAX_WAIT: Duration = Duration::from_secs(20);
/// Room for the JSON around the payloads of one request, in bytes.
pub const ENVELOPE_BYTES: usize = 64 * 1024;
/// The OpenAPI 3.1 document the server serves at `GET /v1/openapi.json`.
pub const OPENAPI_JSON: &str = include_str!("openapi.json");

/// Limits and timeouts of a [`Server`] (SPEC section 10).
#[derive(Debug, Clone)]
pub struct ServerOptions {
    max_payload_bytes: usize,
    header_timeout: Duration,
    body_timeout: Duration,
    max_wait: Duration,
    token: Option<String>,
    allowed_uids: Option<Vec<u32>>,
    read_only: bool,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            max_payload_bytes: crate::config::DEFAULT_MAX_PAYLOAD_BYTES,
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            max_wait: DEFAULT_MAX_WAIT,
            token: None,
            allowed_uids: None,
            read_only: false,
        }
    }
}

impl ServerOptions {
    /// The queue's `max_payload_bytes`: a request body over its base64 size
    /// plus [`ENVELOPE_BYTES`] is refused with 413 (a batch too: split it).
    /// Default: [`DEFAULT_MAX_PAYLOAD_BYTES`](crate::DEFAULT_MAX_PAYLOAD_BYTES).
    pub fn max_payload_bytes(mut self, bytes: usize) -> Self {
        self.max_payload_bytes = bytes;
        self
    }

    /// How long a client may take to send a request's headers, and how long
    /// a kept-alive connection may sit idle between requests, before the
    /// server closes it. Default: 10 s.
    pub fn header_timeout(mut self, timeout: Duration) -> Self {
        self.header_timeout = timeout;
        self
    }

    /// How long a client may take to send a request's body; past it the
    /// request is refused with 408. Default: 30 s.
    pub fn body_timeout(mut self, timeout: Duration) -> Self {
        self.body_timeout = timeout;
        self
    }

    /// The longest a claim blocks in one request; a longer `wait_ms` answers
    /// empty after it (the client asks again). Default: 20 s.
    pub fn max_wait(mut self, wait: Duration) -> Self {
        self.max_wait = wait;
        self
    }

    /// The bearer token TCP clients must send. Required before
    /// [`Server::run`] accepts a TCP listener. Default: none.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// The uids allowed on the Unix socket. Default: only the uid that owns
    /// the socket file (the server's own). A listener bound with
    /// [`SocketPermissions`] that open it to others lets every peer the
    /// file's permissions let in.
    pub fn allowed_uids(mut self, uids: Vec<u32>) -> Self {
        self.allowed_uids = Some(uids);
        self
    }

    /// Serve the dashboard read-only (SPEC 12.2): its write controls are
    /// left out of the page and `POST /ui/action` answers 403. The API
    /// routes (`/v1/...`) are not affected. Default: false.
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// The largest request body accepted, in bytes.
    pub fn max_request_bytes(&self) -> usize {
        self.max_payload_bytes
            .saturating_add(2)
            .saturating_div(3)
            .saturating_mul(4)
            .saturating_add(ENVELOPE_BYTES)
    }
}

/// Who may connect to a Unix socket: its file mode and group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketPermissions {
    /// The file mode. Default: `0o600` (owner only).
    pub mode: u32,
    /// The group to give the file (a gid), if any. Default: none.
    pub group: Option<u32>,
}

impl Default for SocketPermissions {
    fn default() -> Self {
        SocketPermissions {
            mode: 0o600,
            group: None,
        }
    }
}

impl SocketPermissions {
    fn opens_to_others(&self) -> bool {
        self.mode & 0o077 != 0
    }
}

/// A bound listener for [`Server::run`].
#[derive(Debug)]
pub struct Listener {
    kind: ListenerKind,
}

#[derive(Debug)]
enum ListenerKind {
    Unix {
        listener: UnixListener,
        path: PathBuf,
        owner_uid: u32,
        inode: u64,
        open_to_others: bool,
    },
    Tcp(TcpListener),
    /// The dashboard and `/metrics` (SPEC 12), on TCP with the token.
    #[cfg(feature = "dashboard")]
    Dashboard(TcpListener),
}

fn io_err(context: String) -> impl FnOnce(std::io::Error) -> Error {
    move |source| Error::Io { context, source }
}

impl Listener {
    /// Bind a Unix socket at `path` with `permissions`. The socket is made
    /// under a temporary name, given its mode and group, then renamed into
    /// place, so it is never reachable with wider permissions. A stale
    /// socket file (nobody answers) is replaced.
    ///
    /// # Errors
    ///
    /// `Locked` if a live server already answers on `path`; `InvalidInput`
    /// if `path` exists and is not a socket; `Io` if binding fails.
    pub async fn bind_unix(
        path: impl AsRef<Path>,
        permissions: &SocketPermissions,
    ) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        if let Ok(meta) = std::fs::symlink_metadata(&path) {
            if !meta.file_type().is_socket() {
                return Err(Error::invalid(format!(
                    "{} exists and is not a socket; remove it or choose another --socket",
                    path.display()
                )));
            }
            if tokio::net::UnixStream::connect(&path).await.is_ok() {
                return Err(Error::Locked { path });
            }
        }
        let mut tmp = path.clone().into_os_string();
        tmp.push(format!(".{}.tmp", std::process::id()));
        let tmp = PathBuf::from(tmp);
        let _ = std::fs::remove_file(&tmp);
        let listener = UnixListener::bind(&tmp)
            .map_err(io_err(format!("bind the socket {}", path.display())))?;
        let prepared = (|| {
            std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(permissions.mode))?;
            if let Some(gid) = permissions.group {
                std::os::unix::fs::chown(&tmp, None, Some(gid))?;
            }
            std::fs::rename(&tmp, &path)?;
            std::fs::metadata(&path)
        })();
        let meta = match prepared {
            Ok(meta) => meta,
            Err(source) => {
                let _ = std::fs::remove_file(&tmp);
                return Err(Error::Io {
                    context: format!("set up the socket {}", path.display()),
                    source,
                });
            }
        };
        Ok(Listener {
            kind: ListenerKind::Unix {
                listener,
                path,
                owner_uid: meta.uid(),
                inode: meta.ino(),
                open_to_others: permissions.opens_to_others(),
            },
        })
    }

    /// Bind a TCP listener at `addr`. Give an explicit address; the CLI binds
    /// loopback unless one is named.
    ///
    /// # Errors
    ///
    /// `Io` if binding fails.
    pub async fn bind_tcp(addr: SocketAddr) -> Result<Self> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(io_err(format!("listen on {addr}")))?;
        Ok(Listener {
            kind: ListenerKind::Tcp(listener),
        })
    }

    /// Bind the dashboard's TCP listener at `addr` (SPEC 12.2): it serves
    /// the page at `/`, its assets and JSON routes, and `/metrics`, each
    /// behind the server's token, and no `/v1` route. Feature `dashboard`.
    ///
    /// # Errors
    ///
    /// `Io` if binding fails.
    #[cfg(feature = "dashboard")]
    pub async fn bind_dashboard(addr: SocketAddr) -> Result<Self> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(io_err(format!("listen on {addr} for the dashboard")))?;
        Ok(Listener {
            kind: ListenerKind::Dashboard(listener),
        })
    }

    /// The TCP address actually bound (useful with port 0), if TCP.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        match &self.kind {
            ListenerKind::Tcp(l) => l.local_addr().ok(),
            #[cfg(feature = "dashboard")]
            ListenerKind::Dashboard(l) => l.local_addr().ok(),
            ListenerKind::Unix { .. } => None,
        }
    }
}

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

#[derive(Clone)]
struct AppState {
    queue: BoxQueue,
    options: Arc<ServerOptions>,
    /// Where route `forward_lag` reads the served file's lag, if anywhere.
    #[cfg(feature = "forward")]
    lag: Option<crate::forward::LagSource>,
    /// `Some(token)` on a TCP router: requests must carry it.
    token: Option<Arc<str>>,
    shutdown: watch::Receiver<bool>,
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
            shutdown: stop_rx.clone(),
        };
        let unix_router = router(state.clone());
        let tcp_router = router(AppState {
            token: self.options.token.as_deref().map(Arc::from),
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
            wanted.then(|| {
                #[cfg(feature = "forward")]
                let lag = self.lag.clone();
                #[cfg(not(feature = "forward"))]
                let lag = None;
                let dash = Arc::new(dashboard::Dash::new(
                    self.metered.clone(),
                    token,
                    self.options.read_only,
                    lag,
                ));
                tasks.spawn(dashboard::sample(dash.clone(), stop_rx.clone()));
                dashboard::router(dash)
            })
        };
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

fn http1(options: &ServerOptions) -> hyper::server::conn::http1::Builder {
    let mut b = hyper::server::conn::http1::Builder::new();
    b.timer(TokioTimer::new())
        .header_read_timeout(options.header_timeout)
        .max_buf_size(64 * 1024);
    b
}

/// Accept connections from `accept` until `stop`, handing each to
/// `handle`. A failed accept (out of file descriptors, say) is logged and
/// retried after a pause, so it cannot spin.
async fn accept_loop<S, F, Fut>(
    mut accept: F,
    what: &str,
    mut stop: watch::Receiver<bool>,
    mut handle: impl FnMut(S),
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = std::io::Result<S>>,
{
    loop {
        tokio::select! {
            () = stopped(&mut stop) => return,
            r = accept() => match r {
                Ok(stream) => handle(stream),
                Err(e) => {
                    tracing::warn!("accept on {what} failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
    }
}

async fn accept_unix(
    listener: UnixListener,
    allowed: Option<Vec<u32>>,
    router: Router,
    options: Arc<ServerOptions>,
    graceful: Arc<GracefulShutdown>,
    stop: watch::Receiver<bool>,
) {
    let accept = || async { listener.accept().await.map(|(stream, _)| stream) };
    accept_loop(
        accept,
        "the socket",
        stop,
        |stream: tokio::net::UnixStream| {
            let uid = stream.peer_cred().map(|c| c.uid());
            let permitted = match (&allowed, &uid) {
                (None, _) => true,
                (Some(uids), Ok(uid)) => uids.contains(uid),
                (Some(_), Err(_)) => false,
            };
            if permitted {
                serve_connection(stream, &router, &options, &graceful);
            } else {
                tokio::spawn(refuse(stream, uid.ok()));
            }
        },
    )
    .await;
}

/// Serve HTTP/1.1 on one accepted connection, in a task of its own that
/// graceful shutdown waits for.
fn serve_connection<S>(
    stream: S,
    router: &Router,
    options: &ServerOptions,
    graceful: &GracefulShutdown,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let conn = http1(options).serve_connection(
        TokioIo::new(stream),
        TowerToHyperService::new(router.clone()),
    );
    let watched = graceful.watcher().watch(conn);
    tokio::spawn(async move {
        let _ = watched.await;
    });
}

async fn accept_tcp(
    listener: TcpListener,
    router: Router,
    options: Arc<ServerOptions>,
    graceful: Arc<GracefulShutdown>,
    stop: watch::Receiver<bool>,
) {
    let accept = || async { listener.accept().await.map(|(stream, _)| stream) };
    accept_loop(accept, "TCP", stop, |stream: tokio::net::TcpStream| {
        let _ = stream.set_nodelay(true);
        serve_connection(stream, &router, &options, &graceful);
    })
    .await;
}

/// Answer a peer whose uid is not allowed with one 403 and hang up.
async fn refuse(mut stream: tokio::net::UnixStream, uid: Option<u32>) {
    let who = uid.map_or_else(|| "an unknown uid".to_string(), |u| format!("uid {u}"));
    let body = serde_json::to_string(&ErrorReply {
        error: ErrorBody::plain(
            "forbidden",
            format!("{who} may not use this socket (only its owner may, unless opened with --socket-mode or --socket-group)"),
        ),
    })
    .unwrap_or_default();
    let reply = format!(
        "HTTP/1.1 403 Forbidden\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let _ = stream.write_all(reply.as_bytes()).await;
        let _ = stream.shutdown().await;
        // Take what the peer already sent (a little, for a moment), so
        // closing with unread bytes does not reset the reply away.
        let mut sink = [0u8; 4096];
        let mut left = 64 * 1024usize;
        while let Ok(n) = stream.read(&mut sink).await {
            if n == 0 || left <= n {
                break;
            }
            left -= n;
        }
    })
    .await;
}

fn router(state: AppState) -> Router {
    let r = Router::new()
        .route("/v1/openapi.json", get(openapi))
        .route("/v1/{op}", get(call).post(call));
    #[cfg(feature = "dashboard")]
    let r = r.route("/metrics", get(api_metrics));
    r.fallback(not_found).with_state(state)
}

/// `GET /metrics` on the API listeners (SPEC 12.3): the socket's peer rule
/// or the TCP token, as for every other route.
#[cfg(feature = "dashboard")]
async fn api_metrics(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if let Some(token) = &state.token
        && !authorized(&headers, token)
    {
        return error_response(ErrorBody::plain(
            "unauthorized",
            "missing or wrong bearer token (send Authorization: Bearer <token>)",
        ));
    }
    #[cfg(feature = "forward")]
    let lag = state.lag.as_ref();
    #[cfg(not(feature = "forward"))]
    let lag = None;
    dashboard::render_metrics(&state.queue, lag).await
}

async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI_JSON).into_response()
}

async fn not_found() -> Response {
    error_response(ErrorBody::plain(
        "not_found",
        "no such route; every operation is POST /v1/<op> (see GET /v1/openapi.json)",
    ))
}

fn error_response(body: ErrorBody) -> Response {
    let status = StatusCode::from_u16(body.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = json_response(status, &ErrorReply { error: body });
    if status == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Bearer"),
        );
    }
    response
}

fn json_response<T: Serialize>(status: StatusCode, value: &T) -> Response {
    match serde_json::to_vec(value) {
        Ok(bytes) => (status, [(header::CONTENT_TYPE, "application/json")], bytes).into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot encode the reply: {e}"),
        )
            .into_response(),
    }
}

fn reply<T: Serialize>(result: Result<T>) -> Response {
    match result {
        Ok(value) => json_response(StatusCode::OK, &value),
        Err(e) => error_response(ErrorBody::from_error(&e)),
    }
}

/// Constant-time comparison, so the token cannot be guessed byte by byte
/// from response times.
fn same_token(given: &[u8], expected: &[u8]) -> bool {
    given.len() == expected.len()
        && given
            .iter()
            .zip(expected)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

fn authorized(headers: &HeaderMap, token: &str) -> bool {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|given| same_token(given.trim().as_bytes(), token.as_bytes()))
}

async fn call(
    State(state): State<AppState>,
    RoutePath(op): RoutePath<String>,
    method: Method,
    headers: HeaderMap,
    body: Body,
) -> Response {
    if let Some(token) = &state.token
        && !authorized(&headers, token)
    {
        return error_response(ErrorBody::plain(
            "unauthorized",
            "missing or wrong bearer token (send Authorization: Bearer <token>)",
        ));
    }
    if method == Method::GET && !Request::is_read_only_op(&op) {
        // An unknown name is 404 however it is asked for, not "send it as
        // POST" (SPEC section 10).
        if let Err(e @ wire::DecodeError::UnknownOp(_)) = Request::decode(&op, b"{}") {
            return error_response(ErrorBody::plain("not_found", e.to_string()));
        }
        return error_response(ErrorBody::plain(
            "bad_request",
            format!("{op} changes the queue: send it as POST"),
        ));
    }
    let limit = state.options.max_request_bytes();
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return too_large(limit);
    }
    let bytes = match read_body(body, limit, state.options.body_timeout).await {
        Ok(bytes) => bytes,
        Err(response) => return response,
    };
    let request = match Request::decode(&op, &bytes) {
        Ok(r) => r,
        Err(e @ wire::DecodeError::UnknownOp(_)) => {
            return error_response(ErrorBody::plain("not_found", e.to_string()));
        }
        Err(e) => return error_response(ErrorBody::plain("bad_request", e.to_string())),
    };
    execute(&state, request).await
}

fn too_large(limit: usize) -> Response {
    error_response(ErrorBody::plain(
        "payload_too_large",
        format!(
            "request body is over {limit} bytes (max_payload_bytes in base64 plus the envelope); send less per request"
        ),
    ))
}

async fn read_body(
    body: Body,
    limit: usize,
    timeout: Duration,
) -> std::result::Result<Bytes, Response> {
    match tokio::time::timeout(timeout, Limited::new(body, limit).collect()).await {
        Err(_) => Err(error_response(ErrorBody::plain(
            "timeout",
            format!("request body not received within {timeout:?}"),
        ))),
        Ok(Err(e))
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some() =>
        {
            Err(too_large(limit))
        }
        Ok(Err(e)) => Err(error_response(ErrorBody::plain(
            "bad_request",
            format!("cannot read the request body: {e}"),
        ))),
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
    }
}

/// One request, one queue call, one reply.
async fn execute(state: &AppState, request: Request) -> Response {
    let q = &state.queue;
    match request {
        Request::Add(item) => reply(q.add(item.into()).await.map(wire::WireAdded::from)),
        Request::AddBatch(b) => reply(
            q.add_batch(b.items.into_iter().map(Into::into).collect())
                .await
                .map(|added| wire::AddedList {
                    added: added.into_iter().map(Into::into).collect(),
                }),
        ),
        Request::AddDelayed(d) => {
            let item = wire::WireNewItem {
                flow: d.flow,
                payload: d.payload,
                dedup_key: d.dedup_key,
                priority: d.priority,
                cost: d.cost,
            };
            reply(
                q.add_delayed(item.into(), d.not_before_ms)
                    .await
                    .map(wire::WireAdded::from),
            )
        }
        Request::NextDue => reply(
            q.next_due()
                .await
                .map(|not_before_ms| wire::NextDue { not_before_ms }),
        ),
        Request::PromoteDue => reply(q.promote_due().await.map(count)),
        Request::Claim(c) => {
            let wait = Duration::from_millis(c.wait_ms).min(state.options.max_wait);
            let mut stop = state.shutdown.clone();
            // A claim still waiting at shutdown takes nothing (SPEC 3,
            // cancel safety) and answers empty, so shutdown never waits
            // for a long poll.
            let result = tokio::select! {
                r = q.claim(c.count, wait, c.from.into()) => r,
                () = stopped(&mut stop) => {
                    if c.count == 0 {
                        Err(Error::invalid("claim count must be at least 1"))
                    } else {
                        Ok(Vec::new())
                    }
                }
            };
            reply(result.map(claimed_list))
        }
        Request::Ack(r) => reply(q.ack(r.receipt.into()).await.map(|()| wire::Done {})),
        Request::AckBatch(r) => reply(
            q.ack_batch(r.receipts.into_iter().map(Into::into).collect())
                .await
                .map(count),
        ),
        Request::Touch(r) => reply(
            q.touch(r.receipts.into_iter().map(Into::into).collect())
                .await
                .map(|()| wire::Done {}),
        ),
        Request::Retry(r) => reply(
            q.retry(r.receipt.into(), r.not_before_ms)
                .await
                .map(wire::Retried::from),
        ),
        Request::Release(r) => reply(
            q.release(r.receipt.into(), r.not_before_ms)
                .await
                .map(|()| wire::Done {}),
        ),
        Request::Reclaim(r) => reply(
            q.reclaim(Duration::from_millis(r.min_idle_ms), r.count)
                .await
                .map(|r| wire::ReclaimedList {
                    claimed: r.claimed.into_iter().map(Into::into).collect(),
                    dead_lettered: r.dead_lettered.into_iter().map(Into::into).collect(),
                }),
        ),
        Request::DeadLetter(r) => reply(
            q.dead_letter(r.receipt.into(), &r.reason)
                .await
                .map(|()| wire::Done {}),
        ),
        Request::ReclaimStale(r) => reply(
            q.reclaim_stale(Duration::from_millis(r.min_idle_ms), r.count)
                .await
                .map(claimed_list),
        ),
        Request::Pause(f) => reply(q.pause(&f.flow).await.map(|()| wire::Done {})),
        Request::Resume(f) => reply(q.resume(&f.flow).await.map(count)),
        Request::Park(r) => reply(q.park(r.receipt.into()).await.map(|()| wire::Done {})),
        Request::Step(f) => reply(q.step(&f.flow).await.map(|c| wire::Stepped {
            claimed: c.map(Into::into),
        })),
        Request::ClearFlow(f) => reply(q.clear_flow(&f.flow).await.map(count)),
        Request::Parked(f) => reply(q.parked(&f.flow).await.map(count)),
        Request::PausedFlows => reply(q.paused_flows().await.map(|flows| wire::Flows { flows })),
        Request::SetFlowLimit(r) => reply(
            q.set_flow_limit(&r.flow, r.limit)
                .await
                .map(|()| wire::Done {}),
        ),
        Request::FlowLimits => reply(
            q.flow_limits()
                .await
                .map(|limits| wire::LimitsReply { limits }),
        ),
        Request::MarkDone(d) => reply(q.mark_done(d.id, &d.step).await.map(|()| wire::Done {})),
        Request::WasDone(d) => reply(q.was_done(d.id, &d.step).await.map(flag)),
        Request::DeadLetters(c) => {
            reply(q.dead_letters(c.count).await.map(|d| wire::DeadLetterList {
                dead_letters: d.into_iter().map(Into::into).collect(),
            }))
        }
        Request::Redrive(i) => reply(q.redrive(i.id).await.map(flag)),
        Request::PurgeDeadLetters => reply(q.purge_dead_letters().await.map(count)),
        Request::Stats => reply(q.stats().await),
        Request::BacklogByFlow(s) => reply(
            q.backlog_by_flow(s.sample)
                .await
                .map(|flows| wire::FlowCounts { flows }),
        ),
        Request::Peek(c) => reply(q.peek(c.count).await.map(|items| wire::ItemList {
            items: items.into_iter().map(Into::into).collect(),
        })),
        Request::Now => reply(q.now_ms().await.map(|now_ms| wire::Now { now_ms })),
        Request::Compact => reply(q.compact().await.map(flag)),
        Request::MaxDeliveries => reply(Ok::<_, crate::Error>(wire::Count {
            count: u64::from(q.max_deliveries()),
        })),
        Request::AckWithResult(r) => reply(
            q.ack_with_result(r.receipt.into(), r.result.0)
                .await
                .map(|()| wire::Done {}),
        ),
        Request::Outcome(i) => reply(q.outcome(i.id).await.map(outcome_reply)),
        Request::WaitOutcome(w) => {
            // A long poll like a claim: at most max_wait per request (the
            // client asks again for the rest), and a wait still running at
            // shutdown answers `null` at once.
            let wait = Duration::from_millis(w.wait_ms).min(state.options.max_wait);
            let mut stop = state.shutdown.clone();
            let result = tokio::select! {
                r = q.wait_outcome(w.id, wait) => r,
                () = stopped(&mut stop) => Ok(None),
            };
            reply(result.map(outcome_reply))
        }
        Request::SetProgress(r) => reply(
            q.set_progress(r.receipt.into(), r.progress.0)
                .await
                .map(|()| wire::Done {}),
        ),
        Request::SendChunk(r) => reply(
            q.send_chunk(r.receipt.into(), r.chunk.0)
                .await
                .map(|seq| wire::Seq { seq }),
        ),
        Request::Progress(i) => reply(q.progress(i.id).await.map(|p| wire::ProgressReply {
            progress: p.map(wire::Base64),
        })),
        Request::WaitChunks(w) => {
            let wait = Duration::from_millis(w.wait_ms).min(state.options.max_wait);
            let mut stop = state.shutdown.clone();
            let result = tokio::select! {
                r = q.wait_chunks(w.id, w.after_seq, wait) => r,
                () = stopped(&mut stop) => Ok(Vec::new()),
            };
            reply(chunk_list(q, w.id, result).await)
        }
        Request::ForwardLag(r) => reply(forward_lag(state, r).await),
        Request::List(r) => reply(q.list(r.into()).await.map(wire::ItemPageReply::from)),
        Request::Find(i) => reply(q.find(i.id).await.map(|f| wire::FoundReply {
            item: f.map(Into::into),
        })),
    }
}

/// `forward_lag`: the served file's lag from the server's lag source
/// ([`Server::forward_lag`]), or `null` without one.
async fn forward_lag(
    state: &AppState,
    request: wire::ForwardLagRequest,
) -> Result<wire::ForwardLagReply> {
    #[cfg(feature = "forward")]
    if let Some(source) = &state.lag {
        let l = source.lag(request.flows.as_deref()).await?;
        return Ok(wire::ForwardLagReply {
            lag: Some(wire::WireForwardLag {
                count: l.lag.count,
                oldest_age_ms: l.lag.oldest_age_ms,
                forwarded: l.forwarded,
                forwarding: l.forwarding,
            }),
        });
    }
    let _ = (state, request);
    Ok(wire::ForwardLagReply { lag: None })
}

/// Resolves once the server is told to stop.
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

fn outcome_reply(outcome: Option<crate::Outcome>) -> wire::OutcomeReply {
    wire::OutcomeReply {
        outcome: outcome.map(Into::into),
    }
}

/// `wait_chunks`'s reply: with no chunk, whether that is because the item
/// has finished (then the client stops asking) rather than the wait ran out.
async fn chunk_list(
    q: &BoxQueue,
    id: u64,
    chunks: Result<Vec<crate::Chunk>>,
) -> Result<wire::ChunkList> {
    let chunks = chunks?;
    let finished = chunks.is_empty() && q.outcome(id).await?.is_some();
    Ok(wire::ChunkList {
        chunks: chunks.into_iter().map(Into::into).collect(),
        finished,
    })
}

fn count(count: u64) -> wire::Count {
    wire::Count { count }
}

fn flag(value: bool) -> wire::Flag {
    wire::Flag { value }
}

fn claimed_list(claimed: Vec<crate::item::Claimed>) -> wire::ClaimedList {
    wire::ClaimedList {
        claimed: claimed.into_iter().map(Into::into).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_comparison_needs_every_byte() {
        assert!(same_token(b"abc", b"abc"));
        assert!(!same_token(b"abd", b"abc"));
        assert!(!same_token(b"ab", b"abc"));
        assert!(!same_token(b"", b"abc"));
    }

    #[test]
    fn request_limit_covers_a_full_payload_in_base64() {
        let o = ServerOptions::default().max_payload_bytes(3);
        assert_eq!(o.max_request_bytes(), 4 + ENVELOPE_BYTES);
        let o = ServerOptions::default().max_payload_bytes(usize::MAX);
        assert_eq!(o.max_request_bytes(), usize::MAX);
    }
}
