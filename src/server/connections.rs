//! Accepting connections: the peer check on the Unix socket
//! (`SO_PEERCRED`), the refusal of a peer that may not connect, and
//! HTTP/1.1 on each accepted connection.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::watch;

use super::{ServerOptions, stopped};
use crate::wire::{ErrorBody, ErrorReply};

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

pub(super) async fn accept_unix(
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

pub(super) async fn accept_tcp(
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
