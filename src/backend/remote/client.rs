//! [`RemoteQueue`]: the client of a `workjournal serve` process (SPEC
//! section 10): connecting, the contract's requests as exchanges, and the
//! long polls. The transport is in `transport.rs`, the options in
//! `options.rs`.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use super::RemoteOptions;
use super::transport::{Conn, Endpoint};
use crate::error::{Error, Result};
use crate::item::{ClaimFrom, Claimed};
use crate::outcome::{Chunk, Outcome};
use crate::queue::WorkQueue;
use crate::request::{Reply, Request};
use crate::wire::{self, ErrorBody};

pub(super) struct Inner {
    pub(super) endpoint: Endpoint,
    pub(super) options: RemoteOptions,
    pub(super) idle: Mutex<Vec<(Conn, Instant)>>,
    pub(super) closed: AtomicBool,
    /// Set by `close`: ends the long polls of every clone at once.
    pub(super) closing: tokio::sync::watch::Sender<bool>,
    /// The served queue's `max_deliveries`, read when connecting.
    pub(super) max_deliveries: AtomicU32,
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
    pub(super) inner: Arc<Inner>,
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
        let authority = tcp_authority(url)?;
        let queue = Self::new(Endpoint::Tcp { authority }, options);
        queue.hello().await?;
        Ok(queue)
    }

    /// Check that the server answers, and read the served queue's
    /// `max_deliveries` (which `WorkQueue::max_deliveries` cannot ask for:
    /// it does not wait).
    async fn hello(&self) -> Result<()> {
        // The first exchange is how the client connects: a failure is the
        // connect's, not that of the route it happens to ask
        // (`max_deliveries: cannot connect ...` read as a failed look).
        let r: wire::Count = self
            .send("max_deliveries", &wire::EmptyRequest {}, NO_WAIT)
            .await
            .map_err(|e| match e {
                Error::Backend { detail, source } => Error::Backend {
                    detail: detail
                        .strip_prefix("max_deliveries")
                        .map_or_else(|| detail.clone(), |rest| format!("connect{rest}")),
                    source,
                },
                other => other,
            })?;
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
    /// section 3, Closing): what a claim in flight took comes back through
    /// `reclaim`, as with any dropped claim.
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
}

const NO_WAIT: Duration = Duration::ZERO;

impl WorkQueue for RemoteQueue {
    /// One exchange with the server per operation, but for the long polls
    /// (`claim`, `wait_outcome`, `wait_chunks`, `wait_cancelled`: asked for in pieces so that
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
            Request::WaitCancelled { ids, wait } => {
                self.wait_cancelled(ids, wait).await.map(Reply::Ids)
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

    async fn wait_cancelled(&self, ids: Vec<u64>, wait: Duration) -> Result<Vec<u64>> {
        let ids = &ids;
        let got = self
            .long_poll(wait, |piece| async move {
                let req = wire::WaitCancelledRequest {
                    ids: ids.clone(),
                    wait_ms: wire::duration_ms(piece),
                };
                let r: wire::IdList = self.send("wait_cancelled", &req, piece).await?;
                Ok((!r.ids.is_empty()).then_some(r.ids))
            })
            .await?;
        Ok(got.unwrap_or_default())
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

/// The `host:port` of an `http://host:port` URL (port 80 when none is
/// given; any path ignored), read with `http::Uri`.
fn tcp_authority(url: &str) -> Result<String> {
    let expected = |why: &str| Error::invalid(format!("{url}: expected http://host:port{why}"));
    let uri: hyper::Uri = url.parse().map_err(|_| expected(""))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some("https") => {
            return Err(Error::invalid(format!(
                "{url}: https is not supported by the remote backend; serve over a Unix socket or put a TLS-terminating proxy in front"
            )));
        }
        _ => return Err(expected("")),
    }
    let authority = uri.authority().ok_or_else(|| expected(""))?;
    if authority.as_str().contains('@') {
        return Err(expected(" (the token goes in RemoteOptions::token)"));
    }
    // `host:port` is longer than the host alone; a port that is not a
    // u16 reads as none, which must not become 80.
    let port_given = authority.as_str().len() > authority.host().len();
    let port = match (port_given, authority.port_u16()) {
        (_, Some(port)) => port,
        (false, None) => 80,
        (true, None) => return Err(expected(" (the port is 1 to 65535)")),
    };
    if authority.host().is_empty() {
        return Err(expected(""));
    }
    Ok(format!("{}:{port}", authority.host()))
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

#[cfg(test)]
mod url_tests {
    use super::tcp_authority;

    /// URLs read as the hand-written parser read them; bad ones are
    /// InvalidInput naming the URL.
    #[test]
    fn http_urls_give_host_and_port() {
        for (url, want) in [
            ("http://127.0.0.1:6480", "127.0.0.1:6480"),
            ("http://localhost:6480/v1/ignored", "localhost:6480"),
            ("http://example.org", "example.org:80"),
            ("http://[::1]:7000", "[::1]:7000"),
            ("http://[::1]", "[::1]:80"),
        ] {
            assert_eq!(tcp_authority(url).unwrap(), want, "{url}");
        }
        for bad in [
            "https://h:1",
            "ftp://h:1",
            "h:1",
            "http://",
            "http://user:pw@h:1",
            "http://h:99999",
            "",
        ] {
            let e = tcp_authority(bad).unwrap_err();
            assert!(matches!(e, crate::Error::InvalidInput(_)), "{bad}: {e}");
        }
    }
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
