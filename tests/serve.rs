//! The server's transport safety (SPEC section 10): socket permissions,
//! peer uid check, bearer token on TCP, body limit, header and idle
//! timeouts, refusal of malformed requests, the OpenAPI document, and the
//! client's behaviour when its server dies or hangs.
//!
//! Every server here is a real one on a Unix socket (or loopback TCP) in a
//! temp dir, over an embedded file.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use workjournal::server::{Listener, Server, ServerOptions, SocketPermissions};
use workjournal::testing::ServedQueue;
use workjournal::{
    BoxQueue, ClaimFrom, Config, EmbeddedQueue, Error, NewItem, RemoteOptions, RemoteQueue,
    WorkQueue,
};

/// Send `request` (a whole HTTP/1.1 request) and read the reply until the
/// server closes: (status, body).
async fn raw_unix(socket: &Path, request: &[u8]) -> (u16, String) {
    let mut stream = tokio::net::UnixStream::connect(socket).await.unwrap();
    stream.write_all(request).await.unwrap();
    read_reply(&mut stream).await
}

async fn read_reply<S: AsyncReadExt + Unpin>(stream: &mut S) -> (u16, String) {
    // Read until the server hangs up. A server that refuses a request
    // before reading all of it may reset the connection after its reply:
    // keep what arrived.
    let mut reply = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), async {
        let mut chunk = [0u8; 4096];
        while let Ok(n) = stream.read(&mut chunk).await {
            if n == 0 {
                break;
            }
            reply.extend_from_slice(&chunk[..n]);
        }
    })
    .await
    .expect("the server answers and closes within 10 s");
    let text = String::from_utf8_lossy(&reply).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"));
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

fn post(op: &str, body: &[u8]) -> Vec<u8> {
    let mut r = format!(
        "POST /v1/{op} HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(body);
    r
}

fn error_kind(body: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
    v["error"]["kind"].as_str().unwrap_or_default().to_string()
}

fn error_message(body: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(body).unwrap();
    v["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

async fn served() -> ServedQueue {
    served_with(ServerOptions::default()).await
}

async fn served_with(options: ServerOptions) -> ServedQueue {
    ServedQueue::start(Config::default(), options)
        .await
        .unwrap()
}

fn own_uid(dir: &Path) -> u32 {
    let probe = dir.join("uid-probe");
    std::fs::write(&probe, b"").unwrap();
    std::fs::metadata(&probe).unwrap().uid()
}

#[tokio::test]
async fn socket_is_created_owner_only() {
    let s = served().await;
    let mode = std::fs::metadata(&s.socket).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "socket mode {mode:o}");
}

#[tokio::test]
async fn socket_mode_and_group_are_applied_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let gid = {
        let probe = dir.path().join("gid-probe");
        std::fs::write(&probe, b"").unwrap();
        std::fs::metadata(&probe).unwrap().gid()
    };
    let path = dir.path().join("group.sock");
    let permissions = SocketPermissions {
        mode: 0o660,
        group: Some(gid),
    };
    let _listener = Listener::bind_unix(&path, &permissions).await.unwrap();
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o660);
    assert_eq!(meta.gid(), gid);
}

#[tokio::test]
async fn a_live_socket_is_not_taken_over_and_a_stale_one_is_replaced() {
    let s = served().await;
    match Listener::bind_unix(&s.socket, &SocketPermissions::default()).await {
        Err(Error::Locked { .. }) => {}
        other => panic!("expected Locked for a live socket, got {other:?}"),
    }
    // A socket file nobody listens on (left by a killed server).
    let dir = tempfile::tempdir().unwrap();
    let stale = dir.path().join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    assert!(stale.exists());
    Listener::bind_unix(&stale, &SocketPermissions::default())
        .await
        .unwrap();
    // A regular file is never replaced.
    let file = dir.path().join("file");
    std::fs::write(&file, b"keep me").unwrap();
    assert!(matches!(
        Listener::bind_unix(&file, &SocketPermissions::default()).await,
        Err(Error::InvalidInput(_))
    ));
    assert_eq!(std::fs::read(&file).unwrap(), b"keep me");
}

#[tokio::test]
async fn peer_whose_uid_is_not_allowed_gets_403_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let uid = own_uid(dir.path());
    let options = ServerOptions::default().allowed_uids(vec![uid.wrapping_add(1)]);
    let s = ServedQueue::start_in(dir.path(), Config::default(), options)
        .await
        .unwrap();
    let (status, body) = raw_unix(&s.socket, &post("add", br#"{"payload":"aGk="}"#)).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(error_kind(&body), "forbidden");
    assert!(error_message(&body).contains(&format!("uid {uid}")));
    assert_eq!(s.queue.stats().await.unwrap().backlog, 0);
    // The client sees a permission error naming the socket, not a hang.
    match RemoteQueue::connect_unix(&s.socket, RemoteOptions::default()).await {
        Err(Error::Io { context, source }) => {
            assert_eq!(source.kind(), std::io::ErrorKind::PermissionDenied);
            assert!(
                context.contains(&s.socket.display().to_string()),
                "{context}"
            );
        }
        other => panic!("expected Io (permission denied), got {other:?}"),
    }
}

/// Serve the queue file `path` on its socket (`socket_path_for`) as its
/// owner does: (the file, a stop sender, the server task).
async fn serve_file(
    path: &Path,
    options: ServerOptions,
) -> (
    EmbeddedQueue,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<workjournal::Result<()>>,
) {
    let file = EmbeddedQueue::open(path, Config::default()).await.unwrap();
    let socket = workjournal::socket_path_for(path);
    let listener = Listener::bind_unix(&socket, &SocketPermissions::default())
        .await
        .unwrap();
    let server = Server::new(BoxQueue::new(file.clone()), options);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let done = tokio::spawn(server.run(vec![listener], async {
        let _ = stopped.await;
    }));
    (file, stop, done)
}

#[tokio::test]
async fn a_socket_that_refuses_this_uid_is_a_permission_error_not_the_file() {
    // Before, `stats` said "locked by another process" and `add` "open the
    // redo log: Permission denied": after the server's 403 the client
    // fell back to opening the file itself.
    let dir = tempfile::tempdir().unwrap();
    let uid = own_uid(dir.path());
    let path = dir.path().join("q.redb");
    let options = ServerOptions::default().allowed_uids(vec![uid.wrapping_add(1)]);
    let (file, stop, done) = serve_file(&path, options).await;
    let socket = workjournal::socket_path_for(&path);
    let started = std::time::Instant::now();
    match workjournal::connect(path.to_str().unwrap(), Config::default()).await {
        Err(Error::Io { context, source }) => {
            assert_eq!(source.kind(), std::io::ErrorKind::PermissionDenied);
            assert!(context.contains(&socket.display().to_string()), "{context}");
            assert!(context.contains("permission denied"), "{context}");
            assert!(context.contains(&format!("uid {uid}")), "{context}");
        }
        Err(other) => panic!("expected Io (permission denied), got {other:?}"),
        Ok(_) => panic!("connected through a socket that refuses this uid"),
    }
    // At once, not after `locked_wait` spent trying the file.
    assert!(started.elapsed() < workjournal::DEFAULT_LOCKED_WAIT);
    let _ = stop.send(());
    done.await.unwrap().unwrap();
    file.close().await.unwrap();
}

#[tokio::test]
async fn a_file_handle_takes_the_file_over_when_its_server_stops() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.redb");
    let socket = workjournal::socket_path_for(&path);
    let (file, stop, done) = serve_file(&path, ServerOptions::default()).await;
    let client = workjournal::ConnectOptions::default()
        .file_queue(&path, Config::default())
        .await
        .unwrap();
    assert!(!client.is_owner());
    client.add(NewItem::new(b"a".to_vec())).await.unwrap();
    client.add(NewItem::new(b"b".to_vec())).await.unwrap();
    let claimed = client
        .claim(1, Duration::ZERO, ClaimFrom::All)
        .await
        .unwrap();
    let receipt = claimed[0].receipt;
    // The owner stops: its server first, then the file.
    let _ = stop.send(());
    done.await.unwrap().unwrap();
    file.close().await.unwrap();
    assert!(!socket.exists());
    // The claim made through the old server is acked through the file,
    // which the client now owns and serves.
    client.ack(receipt).await.unwrap();
    assert!(client.is_owner());
    let other = RemoteQueue::connect_unix(&socket, RemoteOptions::default())
        .await
        .unwrap();
    let s = other.stats().await.unwrap();
    assert_eq!((s.backlog, s.pending), (1, 0), "{s:?}");
    // Nothing claimed twice: the one item left is b.
    let next = other
        .claim(5, Duration::ZERO, ClaimFrom::All)
        .await
        .unwrap();
    assert_eq!(next.len(), 1);
    assert_eq!(next[0].item.payload, b"b".to_vec());
    other.ack(next[0].receipt).await.unwrap();
    other.close().await.unwrap();
    // Closing the handle stops its server and lets go of the file.
    client.close().await.unwrap();
    assert!(!socket.exists());
    let reopened = EmbeddedQueue::open(&path, Config::default()).await.unwrap();
    assert_eq!(reopened.stats().await.unwrap().backlog, 0);
    reopened.close().await.unwrap();
}

#[tokio::test]
async fn a_file_handle_waits_for_a_killed_server_and_takes_over() {
    // A server killed without its shutdown leaves its socket file behind
    // and the connection in the middle of a call: the next call finds
    // nothing answering and opens the file.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.redb");
    let (file, _stop, done) = serve_file(&path, ServerOptions::default()).await;
    let client = workjournal::ConnectOptions::default()
        .file_queue(&path, Config::default())
        .await
        .unwrap();
    client.add(NewItem::new(b"a".to_vec())).await.unwrap();
    let first = client
        .claim(1, Duration::ZERO, ClaimFrom::All)
        .await
        .unwrap();
    // A claim waiting on the server when it dies.
    let waiting = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .claim(1, Duration::from_secs(30), ClaimFrom::All)
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    done.abort();
    let _ = done.await;
    file.close().await.unwrap();
    let socket = workjournal::socket_path_for(&path);
    // The waiting claim goes on where the file is now.
    client.add(NewItem::new(b"b".to_vec())).await.unwrap();
    assert!(client.is_owner());
    let got = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].item.payload, b"b".to_vec());
    client.ack(first[0].receipt).await.unwrap();
    client.ack(got[0].receipt).await.unwrap();
    assert!(
        RemoteQueue::connect_unix(&socket, RemoteOptions::default())
            .await
            .is_ok()
    );
    client.close().await.unwrap();
}

async fn tcp_server(token: &str) -> (ServedTcp, std::net::SocketAddr) {
    let dir = tempfile::tempdir().unwrap();
    let queue = EmbeddedQueue::open(dir.path().join("q.redb"), Config::default())
        .await
        .unwrap();
    let listener = Listener::bind_tcp("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let server = Server::new(
        BoxQueue::new(queue.clone()),
        ServerOptions::default().token(token),
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(server.run(vec![listener], async {
        let _ = stopped.await;
    }));
    (
        ServedTcp {
            queue,
            _stop: stop,
            _dir: dir,
        },
        addr,
    )
}

struct ServedTcp {
    queue: EmbeddedQueue,
    _stop: tokio::sync::oneshot::Sender<()>,
    _dir: tempfile::TempDir,
}

async fn raw_tcp(addr: std::net::SocketAddr, request: &[u8]) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    read_reply(&mut stream).await
}

fn with_header(request: Vec<u8>, header: &str) -> Vec<u8> {
    let text = String::from_utf8(request).unwrap();
    text.replacen("\r\n", &format!("\r\n{header}\r\n"), 1)
        .into_bytes()
}

#[tokio::test]
async fn tcp_needs_the_bearer_token() {
    let (s, addr) = tcp_server("s3cret-token").await;
    let add = post("add", br#"{"payload":"aGk="}"#);
    let (status, body) = raw_tcp(addr, &add).await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(error_kind(&body), "unauthorized");
    let (status, _) = raw_tcp(
        addr,
        &with_header(add.clone(), "authorization: Bearer wrong"),
    )
    .await;
    assert_eq!(status, 401);
    assert_eq!(s.queue.stats().await.unwrap().backlog, 0);
    let (status, body) = raw_tcp(
        addr,
        &with_header(add, "authorization: Bearer s3cret-token"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(s.queue.stats().await.unwrap().backlog, 1);

    let url = format!("http://{addr}");
    match RemoteQueue::connect_http(&url, RemoteOptions::default()).await {
        Err(Error::Backend { detail, .. }) => assert!(detail.contains("unauthorized"), "{detail}"),
        other => panic!("expected Backend, got {other:?}"),
    }
    let client = RemoteQueue::connect_http(&url, RemoteOptions::default().token("s3cret-token"))
        .await
        .unwrap();
    client.add(NewItem::new(b"two".to_vec())).await.unwrap();
    assert_eq!(client.stats().await.unwrap().backlog, 2);
}

#[tokio::test]
async fn a_tcp_listener_without_a_token_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let queue = EmbeddedQueue::open(dir.path().join("q.redb"), Config::default())
        .await
        .unwrap();
    let listener = Listener::bind_tcp("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let r = Server::new(BoxQueue::new(queue), ServerOptions::default())
        .run(vec![listener], async {})
        .await;
    assert!(matches!(r, Err(Error::InvalidInput(_))), "{r:?}");
}

#[tokio::test]
async fn body_over_the_limit_is_413_without_being_read_whole() {
    let dir = tempfile::tempdir().unwrap();
    let options = ServerOptions::default().max_payload_bytes(1024);
    let s = ServedQueue::start_in(
        dir.path(),
        Config::default().max_payload_bytes(1024),
        options,
    )
    .await
    .unwrap();
    // Declares 1 GB and sends 10 bytes: the answer comes at once, so the
    // server did not wait for (or buffer) the body.
    let head = "POST /v1/add HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\ncontent-length: 1000000000\r\n\r\n{\"payload\"";
    let (status, body) = raw_unix(&s.socket, head.as_bytes()).await;
    assert_eq!(status, 413, "{body}");
    assert_eq!(error_kind(&body), "payload_too_large");
    // Chunked, no length: refused once past the limit.
    let mut chunked = b"POST /v1/add HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
    for _ in 0..200 {
        chunked.extend_from_slice(b"400\r\n");
        chunked.extend_from_slice(&[b' '; 0x400]);
        chunked.extend_from_slice(b"\r\n");
    }
    let mut stream = tokio::net::UnixStream::connect(&s.socket).await.unwrap();
    // The server may hang up before taking all of it.
    let _ = stream.write_all(&chunked).await;
    let (status, _) = read_reply(&mut stream).await;
    assert_eq!(status, 413);
    assert_eq!(s.queue.stats().await.unwrap().backlog, 0);
}

#[tokio::test]
async fn idle_and_slow_header_connections_are_closed() {
    let s = served_with(ServerOptions::default().header_timeout(Duration::from_millis(300))).await;
    // Says nothing at all.
    let mut idle = tokio::net::UnixStream::connect(&s.socket).await.unwrap();
    let mut buf = Vec::new();
    let n = tokio::time::timeout(Duration::from_secs(10), idle.read_to_end(&mut buf))
        .await
        .expect("an idle connection is closed by the server")
        .unwrap_or(0);
    assert!(buf.len() == n);
    // Starts a request and never finishes its headers.
    let mut slow = tokio::net::UnixStream::connect(&s.socket).await.unwrap();
    slow.write_all(b"POST /v1/stats HTTP/1.1\r\nhost: loc")
        .await
        .unwrap();
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), slow.read_to_end(&mut buf))
        .await
        .expect("a connection with unfinished headers is closed by the server")
        .ok();
    // A kept-alive connection is closed once idle after a request.
    let mut kept = tokio::net::UnixStream::connect(&s.socket).await.unwrap();
    kept.write_all(b"POST /v1/now HTTP/1.1\r\nhost: localhost\r\ncontent-length: 0\r\n\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), kept.read_to_end(&mut buf))
        .await
        .expect("a kept-alive connection is closed once idle")
        .unwrap();
    assert!(String::from_utf8_lossy(&buf).starts_with("HTTP/1.1 200"));
}

#[tokio::test]
async fn a_body_that_comes_too_slowly_is_408_and_changes_nothing() {
    let s = served_with(ServerOptions::default().body_timeout(Duration::from_millis(300))).await;
    let mut stream = tokio::net::UnixStream::connect(&s.socket).await.unwrap();
    stream
        .write_all(b"POST /v1/add HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\ncontent-length: 100\r\n\r\n{\"payload\"")
        .await
        .unwrap();
    // The rest never comes.
    let (status, body) = read_reply(&mut stream).await;
    assert_eq!(status, 408, "{body}");
    assert_eq!(error_kind(&body), "timeout");
    assert_eq!(s.queue.stats().await.unwrap().backlog, 0);
}

#[tokio::test]
async fn malformed_requests_are_400_with_one_line_and_change_nothing() {
    let s = served().await;
    let cases: &[(&str, &[u8])] = &[
        ("add", b"{"),
        ("add", b"[]"),
        ("add", b"null"),
        ("add", b"\xff\xfe\x00"),
        ("add", br#"{"payload":"aGk=","extra":1}"#),
        ("add", br#"{"payload":5}"#),
        ("add", br#"{"payload":"not base64!"}"#),
        ("add", br#"{"payload":"aGk=","flow":["x"]}"#),
        ("add", b""),
        ("add_batch", br#"{"items":{}}"#),
        ("add_delayed", br#"{"payload":"aGk=","not_before_ms":-1}"#),
        (
            "add_delayed",
            br#"{"payload":"aGk=","not_before_ms":18446744073709551616}"#,
        ),
        ("claim", br#"{"count":1e400}"#),
        ("claim", br#"{"count":99999999999999999999999}"#),
        ("claim", br#"{"count":1,"from":"sideways"}"#),
        ("ack", br#"{"receipt":"abc"}"#),
        ("ack", br#"{"receipt":{"id":1,"delivery":1}}"#),
        (
            "ack",
            br#"{"receipt":{"id":1,"delivery":4294967296,"lease":1}}"#,
        ),
        ("ack", br#"{"receipt":{"id":-1,"delivery":1,"lease":1}}"#),
        ("pause", br#"{"flow":null}"#),
        ("stats", br#"{"x":1}"#),
    ];
    for (op, body) in cases {
        let (status, reply) = raw_unix(&s.socket, &post(op, body)).await;
        assert_eq!(
            status,
            400,
            "{op} {:?}: {reply}",
            String::from_utf8_lossy(body)
        );
        assert_eq!(error_kind(&reply), "bad_request", "{reply}");
        let message = error_message(&reply);
        assert!(
            !message.is_empty() && !message.contains('\n'),
            "{message:?}"
        );
    }
    let stats = s.queue.stats().await.unwrap();
    assert_eq!((stats.backlog, stats.delayed), (0, 0));
    assert!(s.queue.paused_flows().await.unwrap().is_empty());

    let (status, reply) = raw_unix(&s.socket, &post("explode", b"{}")).await;
    assert_eq!((status, error_kind(&reply).as_str()), (404, "not_found"));
    let get_add = b"GET /v1/add HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n";
    let (status, _) = raw_unix(&s.socket, get_add).await;
    assert_eq!(status, 400);
}

// Failed: `GET /v1/nope` was 400 "nope changes the queue: send it as POST"
// (an unknown route is 404 not_found however it is asked for, SPEC 10).
#[tokio::test]
async fn an_unknown_operation_asked_with_get_is_404_not_found() {
    let s = served().await;
    let get = b"GET /v1/nope HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n";
    let (status, reply) = raw_unix(&s.socket, get).await;
    assert_eq!(
        (status, error_kind(&reply).as_str()),
        (404, "not_found"),
        "{reply}"
    );
    assert!(!error_message(&reply).contains("POST"), "{reply}");
    // A known operation that changes the queue is still 400 over GET.
    let get_ack = b"GET /v1/ack HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n";
    let (status, reply) = raw_unix(&s.socket, get_ack).await;
    assert_eq!(
        (status, error_kind(&reply).as_str()),
        (400, "bad_request"),
        "{reply}"
    );
}

#[tokio::test]
async fn queue_refusals_keep_their_variant_and_status() {
    let s = served().await;
    let (status, reply) = raw_unix(&s.socket, &post("claim", br#"{"count":0}"#)).await;
    assert_eq!(
        (status, error_kind(&reply).as_str()),
        (400, "invalid_input")
    );
    let ack = br#"{"receipt":{"id":7,"delivery":1,"lease":9}}"#;
    let (status, reply) = raw_unix(&s.socket, &post("ack", ack)).await;
    assert_eq!((status, error_kind(&reply).as_str()), (409, "lease_lost"));
    let v: serde_json::Value = serde_json::from_str(&reply).unwrap();
    assert_eq!(v["error"]["id"], 7);
    let client = s.client(RemoteOptions::default()).await.unwrap();
    match client.pause("").await {
        Err(Error::InvalidInput(_)) => {}
        other => panic!("expected InvalidInput, got {other:?}"),
    }
}

#[tokio::test]
async fn payload_bytes_stay_bytes() {
    let s = served().await;
    let client = s.client(RemoteOptions::default()).await.unwrap();
    let all: Vec<u8> = (0..=255u8).chain((0..=255u8).rev()).collect();
    client.add(NewItem::new(all.clone())).await.unwrap();
    client.add(NewItem::new(Vec::new())).await.unwrap();
    // Bigger than any one read buffer of the server or the client.
    let big: Vec<u8> = (0..3 * 1024 * 1024u32)
        .map(|i| (i * 7 % 256) as u8)
        .collect();
    client.add(NewItem::new(big.clone())).await.unwrap();
    let got = client
        .claim(3, Duration::ZERO, ClaimFrom::All)
        .await
        .unwrap();
    assert_eq!(got[0].item.payload, all);
    assert!(got[1].item.payload.is_empty());
    assert!(
        got[2].item.payload == big,
        "a 3 MiB payload came back changed"
    );
    // And curl-style base64 in, the same bytes in the file.
    let (status, _) = raw_unix(&s.socket, &post("add", br#"{"payload":"AP8Kgw=="}"#)).await;
    assert_eq!(status, 200);
    let peeked = s.queue.peek(1).await.unwrap();
    assert_eq!(peeked[0].payload, vec![0x00, 0xff, 0x0a, 0x83]);
}

#[tokio::test]
async fn openapi_document_names_every_operation() {
    let s = served().await;
    let get = b"GET /v1/openapi.json HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n";
    let (status, body) = raw_unix(&s.socket, get).await;
    assert_eq!(status, 200);
    let doc: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    assert_eq!(
        body,
        workjournal::server::openapi_json(),
        "the server serves the generated document"
    );
    for op in workjournal::wire::OPS {
        let post = &doc["paths"][format!("/v1/{op}")]["post"];
        assert!(post.is_object(), "openapi.json lacks POST /v1/{op}");
        assert!(
            post["requestBody"]["content"]["application/json"]["schema"].is_object(),
            "POST /v1/{op} has no request schema"
        );
        assert!(
            post["responses"]["200"]["content"]["application/json"]["schema"].is_object(),
            "POST /v1/{op} has no reply schema"
        );
        // Once: a JSON parser keeps one of two equal keys and drops the
        // other without a word (`/v1/max_deliveries` was written twice).
        let key = format!("\"/v1/{op}\": {{");
        assert_eq!(body.matches(&key).count(), 1, "{key} is not named once");
    }
    // Each status code is its own entry of `responses`: every error code
    // was once nested inside the 200 response, where no OpenAPI tool looks.
    let resolve = |response: &serde_json::Value| match response["$ref"].as_str() {
        Some(r) => doc
            .pointer(r.trim_start_matches('#'))
            .unwrap_or_else(|| panic!("{r} names nothing"))
            .clone(),
        None => response.clone(),
    };
    let mut errors = 0;
    for (path, methods) in doc["paths"].as_object().unwrap() {
        for (method, op) in methods.as_object().unwrap() {
            for (code, response) in op["responses"].as_object().unwrap() {
                let status = code.parse::<u16>();
                assert!(status.is_ok(), "{method} {path}: {code}");
                let response = resolve(response);
                let response = response.as_object().unwrap();
                assert!(
                    response.contains_key("description"),
                    "{method} {path} {code} has no description"
                );
                assert!(
                    response.keys().all(|k| k.parse::<u16>().is_err()),
                    "{method} {path}: a status code nested in response {code}"
                );
                if status.is_ok_and(|s| s >= 400) {
                    errors += 1;
                }
            }
        }
    }
    assert!(errors > 0, "no error response at all");
}

#[tokio::test]
async fn a_dead_server_is_backend_within_the_timeout_and_a_new_one_is_found() {
    let dir = tempfile::tempdir().unwrap();
    let s = ServedQueue::start_in(dir.path(), Config::default(), ServerOptions::default())
        .await
        .unwrap();
    let options = RemoteOptions::default()
        .request_timeout(Duration::from_millis(500))
        .connect_timeout(Duration::from_millis(200));
    let client = s.client(options).await.unwrap();
    client.add(NewItem::new(b"before".to_vec())).await.unwrap();
    s.stop().await;
    match client.add(NewItem::new(b"nobody".to_vec())).await {
        Err(Error::Backend { detail, .. }) => {
            assert!(detail.contains("nothing was sent"), "{detail}")
        }
        other => panic!("expected Backend, got {other:?}"),
    }
    // A server that accepts and never answers: the call gives up in time.
    let hole = tokio::net::UnixListener::bind(dir.path().join("queue.sock")).unwrap();
    let held = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = hole.accept().await {
            held.push(stream);
        }
    });
    match client.stats().await {
        Err(Error::Backend { detail, .. }) => {
            assert!(detail.contains("may or may not have happened"), "{detail}")
        }
        other => panic!("expected Backend, got {other:?}"),
    }
    held.abort();
    let _ = held.await;
    std::fs::remove_file(dir.path().join("queue.sock")).unwrap();
    // A new server on the same file and socket: the same client carries on.
    let s = ServedQueue::start_in(dir.path(), Config::default(), ServerOptions::default())
        .await
        .unwrap();
    assert_eq!(client.stats().await.unwrap().backlog, 1);
    s.stop().await;
}

#[tokio::test]
async fn a_long_claim_wait_is_polled_in_pieces_and_woken_by_an_add() {
    let s = served_with(ServerOptions::default().max_wait(Duration::from_millis(100))).await;
    let client = s
        .client(RemoteOptions::default().claim_poll(Duration::from_millis(50)))
        .await
        .unwrap();
    let waiting = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .claim(1, Duration::from_secs(30), ClaimFrom::All)
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(400)).await;
    s.queue.add(NewItem::new(b"late".to_vec())).await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the waiting claim sees the add")
        .unwrap()
        .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].item.payload, b"late");
}

#[tokio::test]
async fn shutdown_ends_a_waiting_claim_and_removes_the_socket() {
    let s = served().await;
    let socket = s.socket.clone();
    let client = s.client(RemoteOptions::default()).await.unwrap();
    let waiting = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .claim(1, Duration::from_secs(5), ClaimFrom::All)
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    tokio::time::timeout(Duration::from_secs(10), s.stop())
        .await
        .expect("shutdown does not wait for the long poll");
    assert!(!socket.exists());
    let r = tokio::time::timeout(Duration::from_secs(20), waiting)
        .await
        .unwrap()
        .unwrap();
    // The claim in flight answered empty (it took nothing); had it asked
    // for another piece, it would have found no server.
    match r {
        Ok(v) => assert!(v.is_empty()),
        Err(Error::Backend { .. }) => {}
        other => panic!("expected empty or Backend, got {other:?}"),
    }
}

#[tokio::test]
async fn client_close_is_closed_and_leaves_the_server_serving() {
    let s = served().await;
    let a = s.client(RemoteOptions::default()).await.unwrap();
    let b = s.client(RemoteOptions::default()).await.unwrap();
    a.close().await.unwrap();
    assert!(matches!(a.stats().await, Err(Error::Closed)));
    b.add(NewItem::new(b"still".to_vec())).await.unwrap();
    assert_eq!(b.stats().await.unwrap().backlog, 1);
}

/// `wait_outcome` and `wait_chunks` are long polls like a claim (SPEC 10,
/// docs/API.md): the server answers each request after at most its
/// `max_wait`, and the client asks again until its own wait runs out, so a
/// wait longer than the server's cap still sees the ack. A finished item's
/// `wait_chunks` answers at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outcome_and_chunk_waits_outlast_the_servers_max_wait() {
    let s = served_with(ServerOptions::default().max_wait(Duration::from_millis(100))).await;
    let client = s
        .client(RemoteOptions::default().claim_poll(Duration::from_secs(1)))
        .await
        .unwrap();
    let id = client.add(NewItem::new(b"job".to_vec())).await.unwrap().id;
    let c = client
        .claim(1, Duration::ZERO, ClaimFrom::All)
        .await
        .unwrap()
        .remove(0);
    let worker = client.clone();
    let acker = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(
            worker.send_chunk(c.receipt, b"one".to_vec()).await.unwrap(),
            1
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
        worker
            .ack_with_result(c.receipt, b"answer".to_vec())
            .await
            .unwrap();
    });
    let chunks = client
        .wait_chunks(id, 0, Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(chunks.len(), 1);
    assert_eq!((chunks[0].seq, chunks[0].data.as_slice()), (1, &b"one"[..]));
    let got = client
        .wait_outcome(id, Duration::from_secs(20))
        .await
        .unwrap()
        .expect("the outcome arrived within the wait");
    assert_eq!(got.result(), Some(&b"answer"[..]));
    acker.await.unwrap();
    // Finished, nothing after chunk 1: an empty answer, not a 20 s wait
    // (the bound is a hang check).
    let after = tokio::time::timeout(
        Duration::from_secs(10),
        client.wait_chunks(id, 1, Duration::from_secs(20)),
    )
    .await
    .expect("wait_chunks of a finished item waited");
    assert!(after.unwrap().is_empty());
    // An unknown item: the wait runs out empty across several requests.
    assert_eq!(
        client
            .wait_outcome(id + 1, Duration::from_millis(350))
            .await
            .unwrap(),
        None
    );
}
