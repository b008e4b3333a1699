//! Redis over TLS (`rediss://`, issue 3 item 1): a round trip, the blocking
//! claim's own connection, client certificates and reconnects all over TLS,
//! and the refusals (an unknown CA, TLS options with a plain URL). Each runs
//! against a real `redis-server` that the harness starts with a throwaway CA
//! made by the `openssl` tool; without `redis-server` or `openssl` installed
//! they fail, saying what to `apt-get install`.
//!
//! A Redis Cluster over TLS (`rediss+cluster://`, issue 17): one cluster of
//! 3 primaries and 3 replicas for this binary, its nodes serving one
//! throwaway CA's certificate and talking to each other over TLS only; the
//! whole conformance suite runs on it, and a client without the CA is
//! refused.

#![cfg(all(feature = "redis", feature = "testing"))]

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use workjournal::testing::redis_server::fresh_namespace;
use workjournal::testing::{
    BoxFuture, Factory, RedisCluster, RedisClusterOptions, RedisServer, RedisServerOptions,
    Subject, TestCertificates,
};
use workjournal::{
    BoxQueue, ClaimFrom, Config, Error, NewItem, RedisOptions, RedisQueue, WorkQueue,
};

/// One TLS server for the tests of this binary that need no special server
/// (client certificates optional).
fn shared() -> &'static RedisServer {
    static SERVER: OnceLock<RedisServer> = OnceLock::new();
    SERVER.get_or_init(|| {
        RedisServer::start_with(RedisServerOptions {
            tls: true,
            ..Default::default()
        })
        .unwrap()
    })
}

fn tls_options(server: &RedisServer) -> RedisOptions {
    RedisOptions::default().tls_ca_pem(server.certificates().unwrap().ca_pem())
}

/// The error's own text and that of every source, for asserting on the
/// cause a caller would see.
fn chain(err: &Error) -> String {
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[tokio::test]
async fn round_trip_over_tls_with_the_test_ca() {
    let server = shared();
    let url = server.tls_url().unwrap();
    assert!(url.starts_with("rediss://"));
    let q = RedisQueue::connect(
        &url,
        &fresh_namespace(),
        Config::default(),
        tls_options(server),
    )
    .await
    .unwrap();
    let a = q.add(NewItem::new(b"first".to_vec())).await.unwrap();
    let batch = (0..3u8).map(|i| NewItem::new(vec![i])).collect();
    q.add_batch(batch).await.unwrap();
    let claimed = q.claim(2, Duration::ZERO, ClaimFrom::All).await.unwrap();
    assert_eq!(claimed.len(), 2);
    assert_eq!(claimed[0].item.id, a.id);
    assert_eq!(claimed[0].item.payload, b"first");
    q.ack(claimed[0].receipt).await.unwrap();
    let s = q.stats().await.unwrap();
    assert_eq!((s.backlog, s.pending), (2, 1));
    // The test server keeps no persistence, and stats says so (SPEC 1).
    assert!(!s.durable);
    q.close().await.unwrap();
}

#[tokio::test]
async fn ca_file_works_like_ca_pem() {
    let server = shared();
    let options = RedisOptions::default().tls_ca_file(server.certificates().unwrap().ca_path());
    assert!(options.has_tls_ca());
    let q = RedisQueue::connect(
        &server.tls_url().unwrap(),
        &fresh_namespace(),
        Config::default(),
        options,
    )
    .await
    .unwrap();
    q.add(NewItem::new(b"x".to_vec())).await.unwrap();
    assert_eq!(q.stats().await.unwrap().backlog, 1);
}

#[tokio::test]
async fn unknown_ca_is_a_backend_error_within_the_timeout() {
    let server = shared();
    let other = tempfile::tempdir().unwrap();
    let wrong = TestCertificates::generate(other.path()).unwrap();
    let options = RedisOptions::default()
        .tls_ca_pem(wrong.ca_pem())
        // Long enough for a TLS handshake on a loaded machine (at 300 ms
        // these failed with "no answer" instead of the certificate error).
        .connect_timeout(Duration::from_millis(1000))
        .response_timeout(Duration::from_millis(1000));
    let started = Instant::now();
    let err = RedisQueue::connect(
        &server.tls_url().unwrap(),
        &fresh_namespace(),
        Config::default(),
        options,
    )
    .await
    .unwrap_err();
    assert!(matches!(err, Error::Backend { .. }), "{err:?}");
    let text = chain(&err);
    assert!(
        text.contains("connect over TLS failed") && text.contains("UnknownIssuer"),
        "the cause is named: {text}"
    );
    // Bound: connect_timeout + response_timeout, plus slack for
    // a loaded machine; the point is that it never hangs.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn platform_roots_do_not_trust_the_test_ca() {
    // Without a CA option the platform's roots are used, and the throwaway
    // CA is not among them: the handshake fails rather than trusting any
    // certificate.
    let server = shared();
    let options = RedisOptions::default()
        // Long enough for a TLS handshake on a loaded machine (at 300 ms
        // these failed with "no answer" instead of the certificate error).
        .connect_timeout(Duration::from_millis(1000))
        .response_timeout(Duration::from_millis(1000));
    let err = RedisQueue::connect(
        &server.tls_url().unwrap(),
        &fresh_namespace(),
        Config::default(),
        options,
    )
    .await
    .unwrap_err();
    assert!(matches!(err, Error::Backend { .. }), "{err:?}");
    assert!(chain(&err).contains("certificate"), "{}", chain(&err));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_claim_over_tls_wakes_on_an_add() {
    let server = shared();
    let url = server.tls_url().unwrap();
    let ns = fresh_namespace();
    let consumer = RedisQueue::connect(&url, &ns, Config::default(), tls_options(server))
        .await
        .unwrap();
    let producer = RedisQueue::connect(&url, &ns, Config::default(), tls_options(server))
        .await
        .unwrap();
    let started = Instant::now();
    let waiting = tokio::spawn(async move {
        consumer
            .claim(1, Duration::from_secs(20), ClaimFrom::All)
            .await
    });
    // Let the claim find nothing and block on its own TLS connection.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiting.is_finished());
    let added = producer.add(NewItem::new(b"wake".to_vec())).await.unwrap();
    let got = waiting.await.unwrap().unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].item.id, added.id);
    // Woken by the add, not by the end of the 20 s wait.
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn client_certificate_is_presented_and_survives_a_restart() {
    let mut server = RedisServer::start_with(RedisServerOptions {
        tls: true,
        tls_require_client_cert: true,
        ..Default::default()
    })
    .unwrap();
    let url = server.tls_url().unwrap();
    let certs = server.certificates().unwrap().clone();
    let quick = || {
        RedisOptions::default()
            .tls_ca_pem(certs.ca_pem())
            // A TLS connect on a loaded machine (load 22) took longer
            // than 300 + 500 ms; nothing here is timed.
            .connect_timeout(Duration::from_millis(1000))
            .response_timeout(Duration::from_millis(1000))
    };

    let err = RedisQueue::connect(&url, "mtls", Config::default(), quick())
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Backend { .. }),
        "no client certificate: {err:?}"
    );

    let (cert, key) = certs.client_paths();
    let options = quick().tls_client_cert_files(&cert, &key);
    assert!(options.has_tls_client_cert());
    let q = RedisQueue::connect(&url, "mtls", Config::default(), options)
        .await
        .unwrap();
    q.add(NewItem::new(b"before".to_vec())).await.unwrap();

    // Reconnects use the same TLS settings, client certificate included.
    server.kill();
    server.restart().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match q.add(NewItem::new(b"after".to_vec())).await {
            Ok(_) => break,
            Err(e) if Instant::now() < deadline => {
                assert!(matches!(e, Error::Backend { .. }), "{e:?}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("queue did not come back after restart: {}", chain(&e)),
        }
    }
    let got = q.claim(1, Duration::ZERO, ClaimFrom::All).await.unwrap();
    assert_eq!(got[0].item.payload, b"after");

    let inline = quick().tls_client_cert_pem(certs.client_cert_pem(), certs.client_key_pem());
    let q2 = RedisQueue::connect(&url, "mtls", Config::default(), inline)
        .await
        .unwrap();
    assert_eq!(q2.stats().await.unwrap().pending, 1);
}

#[tokio::test]
async fn tls_settings_that_cannot_work_are_invalid_input() {
    let server = shared();
    let ca = server.certificates().unwrap().ca_pem().to_vec();
    let cases = [
        // A CA with a plain URL would silently talk plain text.
        (server.url(), RedisOptions::default().tls_ca_pem(ca.clone())),
        (
            server.url(),
            RedisOptions::default().tls_client_cert_pem(b"c".to_vec(), b"k".to_vec()),
        ),
        // No certificate check at all is refused.
        (
            format!("{}#insecure", server.tls_url().unwrap()),
            RedisOptions::default(),
        ),
        (
            server.tls_url().unwrap(),
            RedisOptions::default().tls_ca_file("/nonexistent/workjournal-ca.pem"),
        ),
        (
            server.tls_url().unwrap(),
            RedisOptions::default().tls_ca_pem(b"not a pem".to_vec()),
        ),
        (
            server.tls_url().unwrap(),
            RedisOptions::default()
                .tls_ca_pem(ca.clone())
                .tls_client_cert_pem(ca.clone(), b"no key here".to_vec()),
        ),
    ];
    for (url, options) in cases {
        let err = RedisQueue::connect(&url, &fresh_namespace(), Config::default(), options)
            .await
            .unwrap_err();
        assert!(matches!(err, Error::InvalidInput(_)), "{url}: {err:?}");
    }
}

/// This binary's Redis Cluster over TLS (3 primaries, 3 replicas).
fn tls_cluster() -> &'static RedisCluster {
    static CLUSTER: OnceLock<RedisCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        RedisCluster::start_with(RedisClusterOptions {
            tls: true,
            ..Default::default()
        })
        .unwrap()
    })
}

/// Queues on [`tls_cluster`] over `rediss+cluster://`, trusting its CA: a
/// fresh namespace (so a slot of its own) per queue.
struct TlsClusterFactory;

impl Factory for TlsClusterFactory {
    fn name(&self) -> &'static str {
        "redis-cluster-tls"
    }

    fn make(&self, config: Config) -> BoxFuture<'_, Subject> {
        Box::pin(async move {
            let cluster = tokio::task::spawn_blocking(tls_cluster).await.unwrap();
            let url = cluster.tls_url().unwrap();
            assert!(url.starts_with("rediss+cluster://"), "{url}");
            let options =
                RedisOptions::default().tls_ca_pem(cluster.certificates().unwrap().ca_pem());
            let q = RedisQueue::connect(&url, &fresh_namespace(), config, options)
                .await
                .unwrap();
            Subject::new(BoxQueue::new(q), Vec::new())
        })
    }

    fn durable(&self) -> bool {
        false
    }
}

/// Every conformance case, one after another, on the TLS cluster: its
/// namespaces spread over the 3 primaries, so every node is reached over
/// TLS (scripts, `WAIT`-free writes, blocking claims on their own
/// connections, `TIME`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_suite_over_tls_on_a_cluster() {
    workjournal::testing::conformance::run_all(&TlsClusterFactory).await;
}

/// A client of the TLS cluster without its CA (the platform's roots, or
/// another CA) is refused at connect with a `Backend` error naming the
/// certificate, within the call bound; one with the CA gets in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_over_tls_refuses_a_client_without_its_ca() {
    let cluster = tokio::task::spawn_blocking(tls_cluster).await.unwrap();
    let url = cluster.tls_url().unwrap();
    let other = tempfile::tempdir().unwrap();
    let wrong = TestCertificates::generate(other.path()).unwrap();
    let quick = || {
        RedisOptions::default()
            .connect_timeout(Duration::from_millis(1000))
            .response_timeout(Duration::from_millis(1000))
    };
    for (what, options) in [
        ("platform roots", quick()),
        ("another CA", quick().tls_ca_pem(wrong.ca_pem())),
    ] {
        let started = Instant::now();
        let err = RedisQueue::connect(&url, &fresh_namespace(), Config::default(), options)
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Backend { .. }), "{what}: {err:?}");
        let text = chain(&err);
        assert!(
            text.contains("certificate") || text.contains("UnknownIssuer"),
            "{what}: the cause is named: {text}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{what}: {:?}",
            started.elapsed()
        );
    }
    // The plain port of the same node speaks no TLS: a `rediss://` client
    // does not fall back to plain text.
    let plain = cluster
        .url()
        .replace("redis+cluster://", "rediss+cluster://");
    let err = RedisQueue::connect(
        &plain,
        &fresh_namespace(),
        Config::default(),
        quick().tls_ca_pem(cluster.certificates().unwrap().ca_pem()),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, Error::Backend { .. }), "{err:?}");
    let q = RedisQueue::connect(
        &url,
        &fresh_namespace(),
        Config::default(),
        RedisOptions::default().tls_ca_pem(cluster.certificates().unwrap().ca_pem()),
    )
    .await
    .unwrap();
    q.add(NewItem::new(b"in".to_vec())).await.unwrap();
    assert_eq!(q.stats().await.unwrap().backlog, 1);
}
