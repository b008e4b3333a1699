//! The remote client's transport: where the server is ([`Endpoint`]), the
//! kept-alive connections of the pool ([`Conn`]), and one exchange of a
//! request for its reply's bytes, bounded and with a known or unknown
//! outcome (SPEC section 10).

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use hyper::{Method, StatusCode, header};
use hyper_util::rt::TokioIo;
use tokio::time::Instant;

use super::RemoteQueue;
use super::unix_conn::{self, ExchangeError, UnixConn};
use crate::error::{Error, Result};
use crate::wire::{self, ErrorBody, ErrorReply};

/// Where the server listens.
#[derive(Debug, Clone)]
pub(super) enum Endpoint {
    /// A Unix socket.
    Unix(PathBuf),
    /// TCP, `host:port`.
    Tcp { authority: String },
}
impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Unix(p) => write!(f, "unix:{}", p.display()),
            Endpoint::Tcp { authority } => write!(f, "http://{authority}"),
        }
    }
}

pub(super) type Sender = SendRequest<Full<Bytes>>;

/// A kept-alive connection to the server.
pub(super) enum Conn {
    /// On the Unix socket: the calling task runs the exchange itself
    /// ([`super::unix_conn`]), with no connection task to hand it to.
    Unix(UnixConn),
    /// On TCP: hyper's client connection, run by a task of its own.
    Tcp(Sender),
}

impl Conn {
    pub(super) fn is_closed(&self) -> bool {
        match self {
            Conn::Unix(c) => c.is_closed(),
            Conn::Tcp(s) => s.is_closed(),
        }
    }
}

/// The exchanges of a [`RemoteQueue`] with its server.
impl RemoteQueue {
    pub(super) fn unknown_outcome(&self, op: &str, why: impl std::fmt::Display) -> Error {
        Error::backend(format!(
            "{op} on {}: {why}; the call may or may not have happened",
            self.inner.endpoint
        ))
    }

    pub(super) fn idle_take(&self) -> Option<Conn> {
        let mut idle = self.inner.idle.lock().ok()?;
        while let Some((conn, since)) = idle.pop() {
            if since.elapsed() < self.inner.options.pool_idle_timeout && !conn.is_closed() {
                return Some(conn);
            }
        }
        None
    }

    pub(super) fn idle_put(&self, conn: Conn) {
        if self.inner.closed.load(Ordering::Acquire) || conn.is_closed() {
            return;
        }
        if let Ok(mut idle) = self.inner.idle.lock() {
            idle.push((conn, Instant::now()));
        }
    }

    pub(super) async fn open(&self, op: &str) -> Result<Conn> {
        let endpoint = &self.inner.endpoint;
        let refused = |e: &dyn std::fmt::Display| {
            // Nothing was sent: the outcome is known (nothing happened).
            Error::Backend {
                detail: format!("{op}: cannot connect to {endpoint}: {e}; nothing was sent"),
                source: Some(Box::new(crate::wire::Unanswered::NotSent)),
            }
        };
        let timeout = self.inner.options.connect_timeout;
        let connected = tokio::time::timeout(timeout, async {
            match endpoint {
                Endpoint::Unix(path) => {
                    let stream =
                        tokio::net::UnixStream::connect(path).await.map_err(|e| {
                            match e.kind() {
                                std::io::ErrorKind::PermissionDenied => not_allowed(op, path, e),
                                _ => refused(&e),
                            }
                        })?;
                    Ok(Conn::Unix(UnixConn::new(stream)))
                }
                Endpoint::Tcp { authority } => {
                    let stream = tokio::net::TcpStream::connect(authority.as_str())
                        .await
                        .map_err(|e| refused(&e))?;
                    let _ = stream.set_nodelay(true);
                    handshake(stream)
                        .await
                        .map(Conn::Tcp)
                        .map_err(|e| refused(&e))
                }
            }
        })
        .await;
        match connected {
            Ok(r) => r,
            Err(_) => Err(refused(&format!("no connection within {timeout:?}"))),
        }
    }

    pub(super) fn request(&self, op: &str, body: Bytes) -> Result<hyper::Request<Full<Bytes>>> {
        let host = match &self.inner.endpoint {
            Endpoint::Unix(_) => "localhost",
            Endpoint::Tcp { authority } => authority.as_str(),
        };
        let mut builder = hyper::Request::builder()
            .method(Method::POST)
            .uri(format!("{}/{op}", wire::PREFIX))
            .header(header::HOST, host)
            .header(header::CONTENT_TYPE, "application/json");
        if let Some(token) = &self.inner.options.token {
            builder = builder.header(header::AUTHORIZATION, format!("Bearer {token}"));
        }
        builder
            .body(Full::new(body))
            .map_err(|e| Error::invalid(format!("cannot build the {op} request: {e}")))
    }

    /// One exchange of an encoded body: the reply's bytes, or the server's
    /// error reply. Bounded by `request_timeout + extra`.
    pub(super) async fn send_bytes(
        &self,
        op: &'static str,
        body: Vec<u8>,
        extra: Duration,
    ) -> Result<std::result::Result<Bytes, ErrorBody>> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        let limit = self.inner.options.request_timeout.saturating_add(extra);
        match tokio::time::timeout(limit, self.exchange(op, Bytes::from(body))).await {
            Ok(r) => r,
            Err(_) => Err(self.unknown_outcome(op, format!("no answer within {limit:?}"))),
        }
    }

    pub(super) async fn exchange(
        &self,
        op: &'static str,
        body: Bytes,
    ) -> Result<std::result::Result<Bytes, ErrorBody>> {
        let mut fresh_tries = 0;
        let mut framed = None;
        let (status, bytes) = loop {
            let (conn, reused) = match self.idle_take() {
                Some(c) => (c, true),
                None => (self.open(op).await?, false),
            };
            match conn {
                Conn::Unix(mut conn) => {
                    let request = framed.get_or_insert_with(|| {
                        unix_conn::frame(
                            &format!("{}/{op}", wire::PREFIX),
                            self.inner.options.token.as_deref(),
                            &body,
                        )
                    });
                    match conn
                        .exchange(request, self.inner.options.max_response_bytes)
                        .await
                    {
                        Ok(reply) => {
                            if reply.reusable {
                                self.idle_put(Conn::Unix(conn));
                            }
                            let status = StatusCode::from_u16(reply.status)
                                .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                            break (status, Bytes::from(reply.body));
                        }
                        // The server had closed the connection: nothing
                        // it could act on went out. Safe to send again on
                        // a new one.
                        Err(ExchangeError::NotSent(_)) if reused || fresh_tries == 0 => {
                            fresh_tries += 1;
                            continue;
                        }
                        Err(ExchangeError::NotSent(e)) => {
                            return Err(self.unknown_outcome(op, format!("connection lost: {e}")));
                        }
                        Err(ExchangeError::Lost(why)) => {
                            return Err(self.unknown_outcome(op, why));
                        }
                    }
                }
                Conn::Tcp(mut sender) => {
                    if reused && sender.ready().await.is_err() {
                        continue;
                    }
                    match sender
                        .try_send_request(self.request(op, body.clone())?)
                        .await
                    {
                        Ok(response) => {
                            let status = response.status();
                            let limited = Limited::new(
                                response.into_body(),
                                self.inner.options.max_response_bytes,
                            );
                            let bytes = limited
                                .collect()
                                .await
                                .map_err(|e| {
                                    self.unknown_outcome(op, format!("reply cut off: {e}"))
                                })?
                                .to_bytes();
                            self.idle_put(Conn::Tcp(sender));
                            break (status, bytes);
                        }
                        Err(mut e) => {
                            // The request never left: a pooled connection
                            // that closed under us. Safe to send again on
                            // a new one.
                            if fresh_tries == 0 && e.take_message().is_some() {
                                fresh_tries += 1;
                                continue;
                            }
                            return Err(
                                self.unknown_outcome(op, format!("connection lost: {}", e.error()))
                            );
                        }
                    }
                }
            }
        };
        if status == StatusCode::OK {
            return Ok(Ok(bytes));
        }
        match serde_json::from_slice::<ErrorReply>(&bytes) {
            // The server does not let this process's uid in: say which
            // socket and why, never a bare `Backend` a caller might read
            // as "nobody serves the file" (SPEC 10, Security).
            Ok(reply) if reply.error.kind == "forbidden" => match &self.inner.endpoint {
                Endpoint::Unix(path) => Err(not_allowed(
                    op,
                    path,
                    std::io::Error::new(std::io::ErrorKind::PermissionDenied, reply.error.message),
                )),
                Endpoint::Tcp { .. } => Ok(Err(reply.error)),
            },
            Ok(reply) => Ok(Err(reply.error)),
            Err(_) => Err(Error::backend(format!(
                "{op} on {}: server answered {status}: {}",
                self.inner.endpoint,
                String::from_utf8_lossy(bytes.get(..200).unwrap_or(&bytes))
                    .replace(['\n', '\r'], " ")
            ))),
        }
    }
}

/// The error for a socket that refuses this process, by its file mode
/// (`EACCES` on connect) or by the server's uid check (403): `Io` with the
/// permission error as its source, naming the socket, its owner and mode,
/// and this process's uid.
fn not_allowed(op: &str, path: &std::path::Path, source: std::io::Error) -> Error {
    use std::os::unix::fs::MetadataExt;
    let owner = std::fs::metadata(path)
        .map(|m| format!("owned by uid {}, mode {:o}", m.uid(), m.mode() & 0o777))
        .unwrap_or_else(|_| "owner unknown".to_string());
    let me = std::fs::metadata("/proc/self")
        .map(|m| m.uid().to_string())
        .unwrap_or_else(|_| "unknown".to_string());
    Error::Io {
        context: format!(
            "{op}: unix:{} ({owner}) does not let this process (uid {me}) in: permission denied; \
             run as the socket's owner or serve with a wider --socket-mode or --socket-group",
            path.display()
        ),
        source,
    }
}

/// HTTP/1.1 on a fresh connection; the connection runs in a task of its
/// own until the sender is dropped or the server hangs up.
async fn handshake<S>(stream: S) -> hyper::Result<Sender>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}
