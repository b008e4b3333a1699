//! SIGKILL of the serving process mid-workload (SPEC sections 4, 5 and
//! 10): the real `workjournal serve` binary owns an embedded file, clients
//! in this test process use it through [`RemoteQueue`]s, and the server is
//! killed and started again, cycle after cycle. Then:
//!
//! - every add a client saw succeed is still in the file, or was acked;
//! - every ack a client saw succeed stays acked (the item is gone);
//! - while the server is down, calls fail with `Backend` within their
//!   timeout bound, never hang;
//! - the same client handles carry on once a server is back.
//!
//! `WORKJOURNAL_REMOTE_KILL_CYCLES` sets the number of cycles (default 50).

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use workjournal::{
    ClaimFrom, Config, EmbeddedQueue, Error, NewItem, RemoteOptions, RemoteQueue, WorkQueue,
};

const CLIENTS: u64 = 4;
const REQUEST_TIMEOUT: Duration = Duration::from_millis(1500);
/// The longest any call may take: its timeout, a claim's wait, and room
/// for a loaded machine. A call past it is a hang.
const CALL_BOUND: Duration = Duration::from_secs(10);

#[derive(Default)]
struct Knowledge {
    added: BTreeSet<u64>,
    acked: BTreeSet<u64>,
    /// Acks whose outcome is unknown (the server died during them).
    maybe_acked: BTreeSet<u64>,
    backend_errors: u64,
}

fn spawn_server(db: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_workjournal"))
        .arg("--db")
        .arg(db)
        .arg("serve")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

async fn wait_until_served(socket: &Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while tokio::net::UnixStream::connect(socket).await.is_err() {
        assert!(Instant::now() < deadline, "server did not come up");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Run `call`, insisting that it returns within [`CALL_BOUND`] and that
/// a failure is `Backend` (the server is being killed), and count it.
async fn bounded<T>(
    know: &Mutex<Knowledge>,
    call: impl std::future::Future<Output = workjournal::Result<T>>,
) -> Option<T> {
    let started = Instant::now();
    let r = tokio::time::timeout(CALL_BOUND, call)
        .await
        .unwrap_or_else(|_| panic!("a call hung past {CALL_BOUND:?}"));
    assert!(started.elapsed() <= CALL_BOUND);
    match r {
        Ok(v) => Some(v),
        Err(Error::Backend { .. }) => {
            know.lock().unwrap().backend_errors += 1;
            None
        }
        Err(e) => panic!("unexpected error while the server is killed: {e:?}"),
    }
}

async fn client(
    q: RemoteQueue,
    task: u64,
    know: Arc<Mutex<Knowledge>>,
    successes: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
) {
    let mut n = 0u64;
    while !stop.load(Ordering::Acquire) {
        n += 1;
        if n.is_multiple_of(2) {
            let payload = format!("t{task}-{n}").into_bytes();
            if let Some(added) = bounded(&know, q.add(NewItem::new(payload))).await {
                know.lock().unwrap().added.insert(added.id);
                successes.fetch_add(1, Ordering::AcqRel);
            }
        } else {
            let wait = Duration::from_millis(n % 20);
            let Some(claimed) = bounded(&know, q.claim(3, wait, ClaimFrom::All)).await else {
                tokio::time::sleep(Duration::from_millis(5)).await;
                continue;
            };
            successes.fetch_add(1, Ordering::AcqRel);
            for c in claimed {
                let id = c.item.id;
                match tokio::time::timeout(CALL_BOUND, q.ack(c.receipt))
                    .await
                    .unwrap_or_else(|_| panic!("an ack hung past {CALL_BOUND:?}"))
                {
                    Ok(()) => {
                        know.lock().unwrap().acked.insert(id);
                    }
                    Err(Error::Backend { .. }) => {
                        let mut k = know.lock().unwrap();
                        k.maybe_acked.insert(id);
                        k.backend_errors += 1;
                    }
                    // Taken over after a restart: fine, it is someone's.
                    Err(Error::LeaseLost { .. }) => {}
                    Err(e) => panic!("unexpected ack error: {e:?}"),
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_of_the_server_loses_no_acknowledged_add_or_ack() {
    let cycles: u64 = std::env::var("WORKJOURNAL_REMOTE_KILL_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("q.redb");
    let socket = workjournal::socket_path_for(&db);
    let mut server = spawn_server(&db);
    wait_until_served(&socket).await;

    let options = RemoteOptions::default()
        .request_timeout(REQUEST_TIMEOUT)
        .connect_timeout(Duration::from_millis(500));
    let know = Arc::new(Mutex::new(Knowledge::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    let mut successes = Vec::new();
    for task in 0..CLIENTS {
        let q = RemoteQueue::connect_unix(&socket, options.clone())
            .await
            .unwrap();
        let ok = Arc::new(AtomicU64::new(0));
        successes.push(ok.clone());
        tasks.push(tokio::spawn(client(
            q,
            task,
            know.clone(),
            ok,
            stop.clone(),
        )));
    }

    for cycle in 0..cycles {
        // Every client carries on with the server that is back.
        let before: Vec<u64> = successes
            .iter()
            .map(|s| s.load(Ordering::Acquire))
            .collect();
        let deadline = Instant::now() + Duration::from_secs(30);
        while successes
            .iter()
            .zip(&before)
            .any(|(s, b)| s.load(Ordering::Acquire) <= *b)
        {
            assert!(
                Instant::now() < deadline,
                "cycle {cycle}: a client did not get through to the new server"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        tokio::time::sleep(Duration::from_millis(5 + cycle * 7 % 40)).await;
        server.kill().unwrap();
        server.wait().unwrap();
        // Down for a moment: calls fail fast with Backend meanwhile.
        tokio::time::sleep(Duration::from_millis(20 + cycle * 13 % 60)).await;
        server = spawn_server(&db);
        wait_until_served(&socket).await;
    }

    stop.store(true, Ordering::Release);
    for t in tasks {
        t.await.unwrap();
    }
    server.kill().unwrap();
    server.wait().unwrap();

    let k = std::mem::take(&mut *know.lock().unwrap());
    assert!(k.backend_errors > 0, "no call ever saw the server die");
    let queue = EmbeddedQueue::open(&db, Config::default()).await.unwrap();
    let present: BTreeSet<u64> = queue.locations().await.unwrap().into_keys().collect();
    for id in &k.added {
        assert!(
            present.contains(id) || k.acked.contains(id) || k.maybe_acked.contains(id),
            "acknowledged add of item {id} was lost"
        );
    }
    for id in &k.acked {
        assert!(
            !present.contains(id),
            "acknowledged ack of item {id} was undone"
        );
    }
    eprintln!(
        "{cycles} kills: {} adds, {} acks acknowledged, {} backend errors",
        k.added.len(),
        k.acked.len(),
        k.backend_errors
    );
    queue.close().await.unwrap();
}
