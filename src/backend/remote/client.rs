//! [`RemoteQueue`]: the HTTP client, its connection pool and timeouts.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use hyper::{Method, StatusCode, header};
use hyper_util::rt::TokioIo;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use super::unix_conn::{self, ExchangeError, UnixConn};
use crate::error::{Error, Result};
use crate::item::{ClaimFrom, Claimed};
use crate::outcome::{Chunk, Outcome};
use crate::queue::WorkQueue;
use crate::request::{Reply, Request};
use crate::wire::{self, ErrorBody, ErrorReply};

/// Default of [`RemoteOptions::connect_timeout`]: 2 seconds.
pub const DEFAULT_REMOTE_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Default of [`RemoteOptions::request_timeout`]: 10 seconds.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Default of [`RemoteOptions::claim_poll`]: 15 seconds.
pub const DEFAULT_CLAIM_POLL: Duration = Duration::from_secs(15);
/// Default of [`RemoteOptions::pool_idle_timeout`]: 5 seconds.
pub const DEFAULT_POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(5);

/// Timeouts and credentials of a [`RemoteQueue`] (SPEC section 10).
#[derive(Clone)]
pub struct RemoteOptions {
    connect_timeout: Duration,
    request_timeout: Duration,
    claim_poll: Duration,
    pool_idle_timeout: Duration,
    token: Option<String>,
    max_response_bytes: usize,
}

impl std::fmt::Debug for RemoteOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteOptions")
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("claim_poll", &self.claim_poll)
            .field("pool_idle_timeout", &self.pool_idle_timeout)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("max_response_bytes", &self.max_response_bytes)
            .finish()
    }
}

impl Default for RemoteOptions {
    fn default() -> Self {
        RemoteOptions {
            connect_timeout: DEFAULT_REMOTE_CONNECT_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            claim_poll: DEFAULT_CLAIM_POLL,
            pool_idle_timeout: DEFAULT_POOL_IDLE_TIMEOUT,
            token: None,
            max_response_bytes: 1 << 30,
        }
    }
}

impl RemoteOptions {
    /// How long opening a connection may take. Default: 2 s.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long one call may take, connecting included, on top of a claim's
    /// own wait; past it the call is `Error::Backend` with the outcome
    /// unknown. Default: 10 s.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// The longest one long-poll request (`claim`, `wait_outcome`,
    /// `wait_chunks`) waits on the server; a longer `wait` is asked for in
    /// pieces. Keep it under the server's `max_wait`.
    /// Default: 15 s.
    pub fn claim_poll(mut self, poll: Duration) -> Self {
        self.claim_poll = poll;
        self
    }

    /// How long an unused connection stays in the pool. Keep it under the
    /// server's header timeout (default 10 s), so the server never closes a
    /// connection the client is about to use. Default: 5 s.
    pub fn pool_idle_timeout(mut self, timeout: Duration) -> Self {
        self.pool_idle_timeout = timeout;
        self
    }

    /// The bearer token sent with every request (needed over TCP).
    /// Default: none.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// The largest reply accepted, in bytes. Default: 1 GiB.
    pub fn max_response_bytes(mut self, bytes: usize) -> Self {
        self.max_response_bytes = bytes;
        self
    }
}

#[derive(Debug, Clone)]
enum Endpoint {
    Unix(PathBuf),
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

type Sender = SendRequest<Full<Bytes>>;

/// A kept-alive connection to the server.
enum Conn {
    /// On the Unix socket: the calling task runs the exchange itself
    /// ([`super::unix_conn`]), with no connection task to hand it to.
    Unix(UnixConn),
    /// On TCP: hyper's client connection, run by a task of its own.
    Tcp(Sender),
}

impl Conn {
    fn is_closed(&self) -> bool {
        match self {
            Conn::Unix(c) => c.is_closed(),
            Conn::Tcp(s) => s.is_closed(),
        }
    }
}

struct Inner {
    endpoint: Endpoint,
    options: RemoteOptions,
    idle: Mutex<Vec<(Conn, Instant)>>,
    closed: AtomicBool,
    /// Set by `close`: ends the long polls of every clone at once.
    closing: tokio::sync::watch::Sender<bool>,
    /// The served queue's `max_deliveries`, read when connecting.
    max_deliveries: AtomicU32,
}

/// A queue served by another process: `workjournal serve`, or `workjournal
/// work` while it runs (SPEC section 10). Cheap to clone; clones share one
/// connection pool.
///
/// # Examples
///
/// ```no_run
/// use workjournal::{NewItem, RemoteOptions, RemoteQueue, WorkQueue};
/// # async fn run() -> workjournal::Result<()> {
/// let queue = RemoteQueue::connect_unix("jobs.redb.sock", RemoteOptions::default()).await?;
/// queue.add(NewItem::new(b"resize 7".to_vec())).await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RemoteQueue {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for RemoteQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteQueue")
            .field("endpoint", &self.inner.endpoint.to_string())
            .finish_non_exhaustive()
    }
}

impl RemoteQueue {
    /// Connect to the server on the Unix socket at `path` and check that it
    /// answers.
    ///
    /// # Errors
    ///
    /// `Backend` if nothing answers there within the timeouts.
    pub async fn connect_unix(path: impl AsRef<Path>, options: RemoteOptions) -> Result<Self> {
        let queue = Self::new(Endpoint::Unix(path.as_ref().to_path_buf()), options);
        queue.hello().await?;
        Ok(queue)
    }

    /// Connect to the server at `url` (`http://host:port`, any path
    /// ignored) and check that it answers. Give the token with
    /// [`RemoteOptions::token`].
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a URL that is not `http://host:port` (`https` is
    /// not spoken: put a TLS proxy in front); `Backend` if nothing answers
    /// within the timeouts, or the token is refused.
    pub async fn connect_http(url: &str, options: RemoteOptions) -> Result<Self> {
        let rest = if let Some(rest) = url.strip_prefix("http://") {
            rest
        } else if url.starts_with("https://") {
            return Err(Error::invalid(format!(
                "{url}: https is not supported by the remote backend; serve over a Unix socket or put a TLS-terminating proxy in front"
            )));
        } else {
            return Err(Error::invalid(format!("{url}: expected http://host:port")));
        };
        let authority = rest.split('/').next().unwrap_or_default();
        if authority.is_empty() || authority.contains('@') {
            return Err(Error::invalid(format!(
                "{url}: expected http://host:port (the token goes in RemoteOptions::token)"
            )));
        }
        let authority = if authority.contains(':') && !authority.ends_with(']') {
            authority.to_string()
        } else {
            format!("{authority}:80")
        };
        let queue = Self::new(Endpoint::Tcp { authority }, options);
        queue.hello().await?;
        Ok(queue)
    }

    /// Check that the server answers, and read the served queue's
    /// `max_deliveries` (which `WorkQueue::max_deliveries` cannot ask for:
    /// it does not wait).
    async fn hello(&self) -> Result<()> {
        let r: wire::Count = self
            .send("max_deliveries", &wire::EmptyRequest {}, NO_WAIT)
            .await?;
        let n = u32::try_from(r.count).unwrap_or(u32::MAX);
        self.inner.max_deliveries.store(n, Ordering::Relaxed);
        Ok(())
    }

    /// The forwarding lag of the served queue file (SPEC section 11, "Lag
    /// in `stats`"; route `forward_lag`): the items of `flows` waiting to
    /// be handed over and the age of the oldest in ms (`None` or empty
    /// `flows`: the flows the serving forwarder forwards, else every
    /// flow). `Ok(None)` when the served queue cannot know: it is not a
    /// queue file (Redis), or the server predates the route.
    ///
    /// # Errors
    ///
    /// `Backend` when the server is unreachable, or its reply is not a lag
    /// (malformed, or an age without a count or the other way round); the
    /// served file's errors (`Corrupt`, `Io`, ...); `Closed` after
    /// [`close`](WorkQueue::close).
    #[cfg(feature = "forward")]
    pub async fn forward_lag(
        &self,
        flows: Option<&[String]>,
    ) -> Result<Option<crate::handover::LocalLag>> {
        let request = wire::ForwardLagRequest {
            flows: flows.map(<[String]>::to_vec),
        };
        let reply: wire::ForwardLagReply = match self
            .send_or_refusal("forward_lag", &request, NO_WAIT)
            .await?
        {
            Ok(reply) => reply,
            // A server older than the route: it cannot tell.
            Err(body) if body.kind == "not_found" => return Ok(None),
            Err(body) => return Err(body.into_error()),
        };
        lag_of_reply(reply).map_err(|why| {
            Error::backend(format!(
                "forward_lag on {}: unreadable reply from the server: {why}",
                self.inner.endpoint
            ))
        })
    }

    fn new(endpoint: Endpoint, options: RemoteOptions) -> Self {
        RemoteQueue {
            inner: Arc::new(Inner {
                endpoint,
                options,
                idle: Mutex::new(Vec::new()),
                closed: AtomicBool::new(false),
                closing: tokio::sync::watch::Sender::new(false),
                max_deliveries: AtomicU32::new(crate::config::DEFAULT_MAX_DELIVERIES),
            }),
        }
    }

    fn unknown_outcome(&self, op: &str, why: impl std::fmt::Display) -> Error {
        Error::backend(format!(
            "{op} on {}: {why}; the call may or may not have happened",
            self.inner.endpoint
        ))
    }

    fn idle_take(&self) -> Option<Conn> {
        let mut idle = self.inner.idle.lock().ok()?;
        while let Some((conn, since)) = idle.pop() {
            if since.elapsed() < self.inner.options.pool_idle_timeout && !conn.is_closed() {
                return Some(conn);
            }
        }
        None
    }

    fn idle_put(&self, conn: Conn) {
        if self.inner.closed.load(Ordering::Acquire) || conn.is_closed() {
            return;
        }
        if let Ok(mut idle) = self.inner.idle.lock() {
            idle.push((conn, Instant::now()));
        }
    }

    async fn open(&self, op: &str) -> Result<Conn> {
        let endpoint = &self.inner.endpoint;
        let refused = |e: &dyn std::fmt::Display| {
            // Nothing was sent: the outcome is known (nothing happened).
            Error::backend(format!(
                "{op}: cannot connect to {endpoint}: {e}; nothing was sent"
            ))
        };
        let timeout = self.inner.options.connect_timeout;
        let connected = tokio::time::timeout(timeout, async {
            match endpoint {
                Endpoint::Unix(path) => {
                    let stream = tokio::net::UnixStream::connect(path)
                        .await
                        .map_err(|e| refused(&e))?;
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

    fn request(&self, op: &str, body: Bytes) -> Result<hyper::Request<Full<Bytes>>> {
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

    /// One exchange: send `req` to `op`, decode the reply as `R`. Bounded
    /// by `request_timeout + extra`.
    async fn send<Q: Serialize, R: DeserializeOwned>(
        &self,
        op: &'static str,
        req: &Q,
        extra: Duration,
    ) -> Result<R> {
        self.send_or_refusal(op, req, extra)
            .await?
            .map_err(ErrorBody::into_error)
    }

    /// As [`RemoteQueue::send`], with the server's error reply given back
    /// as it came (`Ok(Err(body))`), for a caller that treats some kind of
    /// refusal as an answer.
    async fn send_or_refusal<Q: Serialize, R: DeserializeOwned>(
        &self,
        op: &'static str,
        req: &Q,
        extra: Duration,
    ) -> Result<std::result::Result<R, ErrorBody>> {
        let body = serde_json::to_vec(req)
            .map_err(|e| Error::invalid(format!("cannot encode the {op} request: {e}")))?;
        match self.send_bytes(op, body, extra).await? {
            Ok(bytes) => serde_json::from_slice(&bytes).map(Ok).map_err(|e| {
                Error::backend(format!(
                    "{op} on {}: unreadable reply from the server: {e}",
                    self.inner.endpoint
                ))
            }),
            Err(refusal) => Ok(Err(refusal)),
        }
    }

    /// One exchange of an encoded body: the reply's bytes, or the server's
    /// error reply. Bounded by `request_timeout + extra`.
    async fn send_bytes(
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

    /// One operation of the contract that is a single exchange: its wire
    /// request, and the reply read back as the contract's (docs/DESIGN.md,
    /// One request type).
    async fn ask(&self, request: Request) -> Result<Reply> {
        let name = request.name();
        let Some(wire_request) = wire::Request::from_queue(request) else {
            return Err(Error::invalid(format!("{name} has no route on the server")));
        };
        let (op, body) = wire_request.encode();
        let bytes = self
            .send_bytes(op, body, NO_WAIT)
            .await?
            .map_err(ErrorBody::into_error)?;
        wire::decode_reply(op, &bytes).map_err(|why| {
            Error::backend(format!(
                "{op} on {}: unreadable reply from the server: {why}",
                self.inner.endpoint
            ))
        })
    }

    /// A long wait asked for in pieces (claim, `wait_outcome`,
    /// `wait_chunks`), so that no request outlives the server's `max_wait`
    /// or this client's timeouts: `ask(piece)` sends one request waiting at
    /// most `piece`, until one answers `Some` or `wait` has run out (`None`).
    /// A `close` of any clone ends the wait at once with `Closed` (SPEC
    /// section 8): what a claim in flight took comes back through
    /// `reclaim_stale`, as with any dropped claim.
    async fn long_poll<T, F, Fut>(&self, wait: Duration, mut ask: F) -> Result<Option<T>>
    where
        F: FnMut(Duration) -> Fut,
        Fut: std::future::Future<Output = Result<Option<T>>>,
    {
        let deadline = Instant::now().checked_add(wait);
        let mut closing = self.inner.closing.subscribe();
        loop {
            let remaining = deadline.map_or(Duration::MAX, |d| {
                d.saturating_duration_since(Instant::now())
            });
            let piece = remaining.min(self.inner.options.claim_poll);
            let answer = tokio::select! {
                r = ask(piece) => r?,
                _ = closing.wait_for(|c| *c) => return Err(Error::Closed),
            };
            if let Some(got) = answer {
                return Ok(Some(got));
            }
            if piece >= remaining {
                return Ok(None);
            }
        }
    }

    async fn exchange(
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

const NO_WAIT: Duration = Duration::ZERO;

impl WorkQueue for RemoteQueue {
    /// One exchange with the server per operation, but for the long polls
    /// (`claim`, `wait_outcome`, `wait_chunks`: asked for in pieces so that
    /// no request outlives the server's `max_wait`) and `close` (this
    /// handle only: the served queue stays open for its other clients).
    async fn call(&self, request: Request) -> Result<Reply> {
        match request {
            Request::Claim { count, wait, from } => {
                self.claim(count, wait, from).await.map(Reply::Claimed)
            }
            Request::WaitOutcome { id, wait } => {
                self.wait_outcome(id, wait).await.map(Reply::Outcome)
            }
            Request::WaitChunks {
                id,
                after_seq,
                wait,
            } => self
                .wait_chunks(id, after_seq, wait)
                .await
                .map(Reply::Chunks),
            Request::Close => {
                self.close_handle();
                Ok(Reply::Unit)
            }
            Request::SetFlowLimit { flow, limit } => {
                crate::limit::check_limit(&flow, &limit)?;
                self.ask(Request::SetFlowLimit { flow, limit }).await
            }
            Request::List { query } => {
                query.check()?;
                self.ask(Request::List { query }).await
            }
            other => self.ask(other).await,
        }
    }

    fn max_deliveries(&self) -> u32 {
        self.inner.max_deliveries.load(Ordering::Relaxed)
    }
}

/// The long polls and `close`, which are more than one exchange.
impl RemoteQueue {
    async fn claim(&self, count: usize, wait: Duration, from: ClaimFrom) -> Result<Vec<Claimed>> {
        let got = self
            .long_poll(wait, |piece| async move {
                let req = wire::ClaimRequest {
                    count,
                    wait_ms: wire::duration_ms(piece),
                    from: from.into(),
                };
                let r: wire::ClaimedList = self.send("claim", &req, piece).await?;
                Ok(
                    (!r.claimed.is_empty())
                        .then(|| r.claimed.into_iter().map(Into::into).collect()),
                )
            })
            .await?;
        Ok(got.unwrap_or_default())
    }

    async fn wait_outcome(&self, id: u64, wait: Duration) -> Result<Option<Outcome>> {
        self.long_poll(wait, |piece| async move {
            let req = wire::WaitOutcomeRequest {
                id,
                wait_ms: wire::duration_ms(piece),
            };
            let r: wire::OutcomeReply = self.send("wait_outcome", &req, piece).await?;
            Ok(r.outcome.map(Into::into))
        })
        .await
    }

    async fn wait_chunks(&self, id: u64, after_seq: u64, wait: Duration) -> Result<Vec<Chunk>> {
        let got = self
            .long_poll(wait, |piece| async move {
                let req = wire::WaitChunksRequest {
                    id,
                    after_seq,
                    wait_ms: wire::duration_ms(piece),
                };
                let r: wire::ChunkList = self.send("wait_chunks", &req, piece).await?;
                Ok((!r.chunks.is_empty() || r.finished)
                    .then(|| r.chunks.into_iter().map(Into::into).collect()))
            })
            .await?;
        Ok(got.unwrap_or_default())
    }

    /// Close this handle: later calls are `Closed` and pooled connections
    /// are dropped. The served queue stays open for its other clients.
    fn close_handle(&self) {
        self.inner.closed.store(true, Ordering::Release);
        self.inner.closing.send_replace(true);
        if let Ok(mut idle) = self.inner.idle.lock() {
            idle.clear();
        }
    }
}

/// The lag a `forward_lag` reply gives, or why it is not one: an age
/// without a count, or a count without an age.
#[cfg(feature = "forward")]
fn lag_of_reply(
    reply: wire::ForwardLagReply,
) -> std::result::Result<Option<crate::handover::LocalLag>, String> {
    let Some(l) = reply.lag else {
        return Ok(None);
    };
    if (l.count == 0) != l.oldest_age_ms.is_none() {
        return Err(format!(
            "{} items but oldest age {:?} ms",
            l.count, l.oldest_age_ms
        ));
    }
    Ok(Some(crate::handover::LocalLag {
        lag: crate::handover::Lag {
            count: l.count,
            oldest_age_ms: l.oldest_age_ms,
        },
        forwarded: l.forwarded,
        forwarding: l.forwarding,
    }))
}

#[cfg(all(test, feature = "forward"))]
mod tests {
    use super::*;

    fn decode(json: &str) -> std::result::Result<Option<crate::handover::LocalLag>, String> {
        let reply: wire::ForwardLagReply =
            serde_json::from_str(json).map_err(|e| format!("decode: {e}"))?;
        lag_of_reply(reply)
    }

    /// Bad `forward_lag` replies are errors, never "no lag" and never a
    /// panic (SPEC section 10).
    #[test]
    fn a_forward_lag_reply_is_read_strictly() {
        assert_eq!(decode(r#"{"lag":null}"#), Ok(None));
        let l = decode(
            r#"{"lag":{"count":2,"oldest_age_ms":1500,"forwarded":true,"forwarding":false},"new":1}"#,
        )
        .unwrap()
        .unwrap();
        assert_eq!((l.lag.count, l.lag.oldest_age_ms), (2, Some(1500)));
        assert!(l.forwarded && !l.forwarding);
        let l = decode(
            r#"{"lag":{"count":0,"oldest_age_ms":null,"forwarded":false,"forwarding":true}}"#,
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            (l.lag.count, l.lag.oldest_age_ms, l.forwarding),
            (0, None, true)
        );
        for bad in [
            "{}",
            "null",
            "[]",
            r#"{"lag":7}"#,
            r#"{"lag":{}}"#,
            r#"{"lag":{"count":1,"forwarded":true,"forwarding":true}}"#,
            r#"{"lag":{"count":-1,"oldest_age_ms":null,"forwarded":true,"forwarding":true}}"#,
            r#"{"lag":{"count":1,"oldest_age_ms":null,"forwarded":true,"forwarding":true}}"#,
            r#"{"lag":{"count":0,"oldest_age_ms":5,"forwarded":true,"forwarding":true}}"#,
            r#"{"lag":{"count":18446744073709551616,"oldest_age_ms":5,"forwarded":true,"forwarding":true}}"#,
            r#"{"lag":{"count":1,"oldest_age_ms":5,"forwarded":"yes","forwarding":true}}"#,
        ] {
            assert!(decode(bad).is_err(), "{bad} was read as a lag");
        }
    }
}
