//! Redis-only tests (issue 3): races between handles, fencing of late acks,
//! deep stale claims, crash and restart of a real `redis-server`, replicas.
//! Each runs against a real server that the harness starts on a free
//! loopback port; without `redis-server` installed they fail, saying
//! `apt-get install redis-server`.
//!
//! Every body that takes a [`RedisKind`] runs twice (issue 17): on one
//! server (`server::`) and on a Redis Cluster (`cluster::`; one shared
//! cluster of 3 primaries and 3 replicas, or a cluster of 3 primaries of
//! its own for a test that kills, stops or counts its server). These run
//! on one server only:
//!
//! - `min_replicas_succeeds_with_a_replica_and_reports_the_shortfall_without`:
//!   reads the write back from a standalone replica; on a cluster WAIT is
//!   checked by tests/redis_cluster.rs `min_replicas_waits_on_the_slot_primary_only`
//!   (a dead replica of another primary fails nothing, its own does).
//! - `server_dies_with_its_test_process_even_on_sigkill`: a property of the
//!   harness's `RedisServer`, which every cluster node is.
//! - `url_with_a_password_authenticates_and_a_wrong_one_is_a_backend_error`:
//!   the test cluster has no password (its nodes would need `masterauth`
//!   and the harness its own `AUTH`); the namespace check in it is the
//!   same code for both.

#![cfg(all(feature = "redis", feature = "testing"))]

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use workjournal::testing::redis_server::fresh_namespace;
use workjournal::testing::{RawConnection, RedisKind, RedisServer, RedisServerOptions};
use workjournal::{
    ClaimFrom, Config, Error, ManualClock, NewItem, OutcomeKind, Receipt, RedisOptions, RedisQueue,
    WorkQueue,
};

const T0: u64 = 1_700_000_000_000;

async fn connect(url: &str, ns: &str, config: Config) -> RedisQueue {
    RedisQueue::connect(url, ns, config, RedisOptions::default())
        .await
        .unwrap()
}

workjournal::on_server_and_cluster!(
    the_history_keys_stay_within_count_and_slack,
    two_handles_promoting_and_claiming_deliver_each_item_once,
    late_ack_from_a_reclaimed_handle_is_lease_lost,
    six_hundred_stale_claims_behind_four_hundred_fresh_are_all_reclaimed,
    aof_always_restart_loses_no_acknowledged_add,
    killed_redis_fails_within_the_timeout_and_works_after_restart,
    stopped_redis_fails_every_call_within_the_bound_and_works_after_sigcont,
    blocking_claim_wakes_on_add_and_is_quiet_while_idle,
    records_deleted_behind_the_queues_back_are_skipped_not_fatal,
    expired_outcomes_are_pruned_with_their_progress_and_chunks,
    a_namespace_of_the_stream_layout_moves_to_ranked_lanes_at_connect,
    stats_stay_true_when_a_ready_lane_member_is_removed,
    stats_stay_true_when_an_item_hash_is_deleted,
    endless_timeouts_do_not_overflow,
    done_markers_live_in_the_expiry_set_alone,
    a_claim_does_not_walk_a_held_flows_items,
    redis_hand_outs_share_one_lease_counter,
    a_namespace_from_before_the_leases_index_acks_and_reads_its_outcomes,
    a_namespace_of_a_newer_layout_is_refused_untouched,
    remove_and_promote_leave_every_key_consistent,
    back_offs_at_once_keep_the_longest,
    skewed_handles_keep_the_fleets_timers,
    a_zero_result_ttl_leaves_no_progress_or_chunk_keys,
    a_test_clock_handle_moves_no_timer_of_the_fleet,
);

/// A queue with `options`' short timeouts, for a test of what happens
/// once its server is gone: connecting (to every node of a cluster, within
/// the same short bound) is tried again for up to 20 s while the machine
/// is busy, as it is not what such a test is about.
async fn connect_patiently(url: &str, ns: &str, options: RedisOptions) -> RedisQueue {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match RedisQueue::connect(url, ns, Config::default(), options.clone()).await {
            Ok(q) => return q,
            Err(e) if Instant::now() < deadline => {
                assert!(matches!(e, Error::Backend { .. }), "{e:?}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("could not connect within 20 s: {e}"),
        }
    }
}

/// This process's shared server or cluster.
fn shared_url(kind: RedisKind) -> String {
    kind.shared_url().unwrap()
}

/// A raw connection to the server or cluster at `url`.
async fn raw(url: &str) -> RawConnection {
    RawConnection::open(url).await.unwrap()
}

async fn two_handles_promoting_and_claiming_deliver_each_item_once(kind: RedisKind) {
    let url = shared_url(kind);
    let ns = fresh_namespace();
    let clock = ManualClock::new(T0);
    let a = connect(&url, &ns, Config::default().clock(clock.clone())).await;
    let b = connect(&url, &ns, Config::default().clock(clock.clone())).await;
    assert_ne!(a.consumer_name(), b.consumer_name());
    let mut expected = BTreeSet::new();
    for i in 0..300u64 {
        let item = NewItem::new(format!("job {i}").into_bytes());
        let added = if i % 2 == 0 {
            a.add_delayed(item, T0 + 1_000 + i % 7).await.unwrap()
        } else {
            a.add(item).await.unwrap()
        };
        expected.insert(added.id);
    }
    clock.advance(Duration::from_secs(2));
    let run = |q: RedisQueue| {
        tokio::spawn(async move {
            let mut got = Vec::new();
            loop {
                q.promote_due().await.unwrap();
                let claimed = q.claim(7, Duration::ZERO, ClaimFrom::All).await.unwrap();
                if claimed.is_empty() {
                    break;
                }
                for c in claimed {
                    got.push(c.item.id);
                    q.ack(c.receipt).await.unwrap();
                }
            }
            got
        })
    };
    let (ga, gb) = (run(a.clone()), run(b.clone()));
    let (ga, gb) = (ga.await.unwrap(), gb.await.unwrap());
    let mut all: Vec<u64> = ga.iter().chain(gb.iter()).copied().collect();
    all.sort_unstable();
    let unique: BTreeSet<u64> = all.iter().copied().collect();
    assert_eq!(all.len(), unique.len(), "an item was delivered twice");
    assert_eq!(unique, expected);
    let stats = a.stats().await.unwrap();
    assert_eq!((stats.backlog, stats.pending, stats.delayed), (0, 0, 0));
}

async fn late_ack_from_a_reclaimed_handle_is_lease_lost(kind: RedisKind) {
    let url = shared_url(kind);
    let ns = fresh_namespace();
    let clock = ManualClock::new(T0);
    let a = connect(&url, &ns, Config::default().clock(clock.clone())).await;
    let b = connect(&url, &ns, Config::default().clock(clock.clone())).await;
    a.add(NewItem::new(b"x".to_vec())).await.unwrap();
    let first = a.claim(1, Duration::ZERO, ClaimFrom::All).await.unwrap();
    let first = first[0].receipt;
    clock.advance(Duration::from_secs(60));
    let taken = b
        .reclaim(Duration::from_secs(30), 10)
        .await
        .unwrap()
        .claimed;
    assert_eq!(taken.len(), 1);
    assert_eq!(taken[0].receipt.delivery, 2);
    // The first holder's late operations all fail and change nothing.
    assert!(matches!(
        a.touch(vec![first]).await,
        Err(Error::LeaseLost { id: 1, delivery: 1, lease }) if lease == first.lease
    ));
    assert!(matches!(a.ack(first).await, Err(Error::LeaseLost { .. })));
    assert!(matches!(
        a.retry(first, T0).await,
        Err(Error::LeaseLost { .. })
    ));
    assert!(matches!(a.park(first).await, Err(Error::LeaseLost { .. })));
    assert!(matches!(
        a.dead_letter(first, "late").await,
        Err(Error::LeaseLost { .. })
    ));
    assert_eq!(a.ack_batch(vec![first]).await.unwrap(), 0);
    assert_eq!(a.stats().await.unwrap().pending, 1);
    // The item names its new owner.
    let mut conn = raw(&url).await;
    let owner: String = redis::cmd("HGET")
        .arg(format!("{{{ns}}}:item:1"))
        .arg("owner")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(owner, b.consumer_name());
    b.ack(taken[0].receipt).await.unwrap();
    let s = a.stats().await.unwrap();
    assert_eq!((s.pending, s.backlog), (0, 0));
    let left: u64 = redis::cmd("EXISTS")
        .arg(format!("{{{ns}}}:item:1"))
        .arg(format!("{{{ns}}}:ready"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(left, 0, "an acked item left its record or a ready entry");
}

async fn six_hundred_stale_claims_behind_four_hundred_fresh_are_all_reclaimed(kind: RedisKind) {
    let url = shared_url(kind);
    let ns = fresh_namespace();
    let clock = ManualClock::new(T0);
    let a = connect(&url, &ns, Config::default().clock(clock.clone())).await;
    let b = connect(&url, &ns, Config::default().clock(clock.clone())).await;
    let items = (0..1000)
        .map(|i| NewItem::new(vec![(i % 251) as u8]))
        .collect();
    a.add_batch(items).await.unwrap();
    let mut receipts = Vec::new();
    while receipts.len() < 1000 {
        let got = a.claim(100, Duration::ZERO, ClaimFrom::All).await.unwrap();
        assert!(!got.is_empty());
        receipts.extend(got.into_iter().map(|c| c.receipt));
    }
    // The first 400 in stream (and PEL) order stay fresh; the 600 behind
    // them go stale.
    clock.advance(Duration::from_secs(120));
    a.touch(receipts[..400].to_vec()).await.unwrap();
    clock.advance(Duration::from_secs(10));
    let mut reclaimed = Vec::new();
    loop {
        let got = b
            .reclaim(Duration::from_secs(60), 50)
            .await
            .unwrap()
            .claimed;
        if got.is_empty() {
            break;
        }
        assert!(got.len() <= 50);
        reclaimed.extend(got.into_iter().map(|c| c.item.id));
    }
    let want: Vec<u64> = (401..=1000).collect();
    assert_eq!(
        reclaimed, want,
        "every stale claim, oldest (claimed_at, id) first"
    );
    assert_eq!(b.stats().await.unwrap().pending, 1000);
}

async fn aof_always_restart_loses_no_acknowledged_add(kind: RedisKind) {
    let mut server = kind.start_private(true).unwrap();
    let url = server.url();
    let q = connect(&url, "aof", Config::default()).await;
    let mut added = Vec::new();
    for i in 0..100u32 {
        added.push(
            q.add(NewItem::new(i.to_be_bytes().to_vec()))
                .await
                .unwrap()
                .id,
        );
    }
    let batch = (0..100u32)
        .map(|i| NewItem::new(i.to_le_bytes().to_vec()))
        .collect();
    added.extend(q.add_batch(batch).await.unwrap().into_iter().map(|a| a.id));
    let claimed = q.claim(30, Duration::ZERO, ClaimFrom::All).await.unwrap();
    let acked: BTreeSet<u64> = claimed[..20].iter().map(|c| c.item.id).collect();
    for c in &claimed[..20] {
        q.ack(c.receipt).await.unwrap();
    }
    let node = server.kill_serving("aof").unwrap();
    server.restart(node).unwrap();
    let q2 = connect(&url, "aof", Config::default()).await;
    let s = q2.stats().await.unwrap();
    assert_eq!(s.backlog, 170);
    assert_eq!(s.pending, 10);
    let mut left = BTreeSet::new();
    loop {
        let got = q2.claim(50, Duration::ZERO, ClaimFrom::All).await.unwrap();
        if got.is_empty() {
            break;
        }
        left.extend(got.into_iter().map(|c| c.item.id));
    }
    for c in q2.reclaim(Duration::ZERO, 100).await.unwrap().claimed {
        assert_eq!(c.item.deliveries, 2);
        left.insert(c.item.id);
    }
    let want: BTreeSet<u64> = added
        .iter()
        .copied()
        .filter(|id| !acked.contains(id))
        .collect();
    assert_eq!(left, want);
    // New ids continue after the old ones: the counter survived too.
    let next = q2.add(NewItem::new(b"after".to_vec())).await.unwrap();
    assert_eq!(next.id, 201);
}

async fn killed_redis_fails_within_the_timeout_and_works_after_restart(kind: RedisKind) {
    let mut server = kind.start_private(false).unwrap();
    let url = server.url();
    let options = RedisOptions::default()
        .connect_timeout(Duration::from_millis(300))
        .response_timeout(Duration::from_millis(500));
    let q = connect_patiently(&url, "faults", options).await;
    q.add(NewItem::new(b"before".to_vec())).await.unwrap();
    let node = server.kill_serving("faults").unwrap();
    for _ in 0..3 {
        let started = Instant::now();
        let err = q.add(NewItem::new(b"during".to_vec())).await.unwrap_err();
        assert!(matches!(err, Error::Backend { .. }), "{err:?}");
        assert!(err.is_retryable());
        // Bound: connect_timeout + response_timeout = 0.8 s, plus slack for
        // a loaded machine; the point is that it never hangs.
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    }
    let started = Instant::now();
    let err = q
        .claim(1, Duration::from_secs(30), ClaimFrom::All)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Backend { .. }), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(5));
    // The restarted server has no data and no scripts (NOSCRIPT is handled).
    server.restart(node).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let id = loop {
        match q.add(NewItem::new(b"after".to_vec())).await {
            Ok(a) => break a.id,
            Err(e) if Instant::now() < deadline => {
                assert!(matches!(e, Error::Backend { .. }), "{e:?}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("queue did not come back after restart: {e}"),
        }
    };
    assert_eq!(id, 1, "a restarted server without persistence starts over");
    // The data is gone with the server; the lanes come back with the add.
    let got = q
        .claim(1, Duration::from_secs(1), ClaimFrom::All)
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    q.ack(got[0].receipt).await.unwrap();
}

/// `field` of `INFO section` on the node that serves namespace `ns` (the
/// server at `url`, or its slot's primary in a cluster).
async fn info_field(url: &str, ns: &str, section: &str, field: &str) -> String {
    let mut conn = raw(url).await;
    let info: String = conn
        .on_node_of(ns, redis::cmd("INFO").arg(section))
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or("")
        .trim()
        .to_string()
}

/// Sends `SIGSTOP` to a process and `SIGCONT` when dropped, so a failing
/// test never leaves the server stopped.
struct Stopped(String);

impl Stopped {
    fn stop(pid: &str) -> Stopped {
        signal("-STOP", pid);
        Stopped(pid.to_string())
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        signal("-CONT", &self.0);
    }
}

fn signal(sig: &str, pid: &str) {
    let status = std::process::Command::new("kill")
        .arg(sig)
        .arg(pid)
        .status()
        .unwrap();
    assert!(status.success(), "kill {sig} {pid} failed");
}

/// SPEC 7: with the server stopped (`SIGSTOP`: it accepts connections and
/// never answers, like a hung host), every call, connecting included, fails
/// with `Backend` once `connect_timeout + response_timeout` has passed, and
/// works again once the server continues. Connecting once took three times
/// `connect_timeout` (the connection manager's retries each waited it out).
async fn stopped_redis_fails_every_call_within_the_bound_and_works_after_sigcont(kind: RedisKind) {
    let server = kind.start_private(false).unwrap();
    let url = server.url();
    let pid = info_field(&url, "stopped", "server", "process_id").await;
    assert!(!pid.is_empty(), "INFO server gave no process_id");
    let options = RedisOptions::default()
        .connect_timeout(Duration::from_millis(1_500))
        .response_timeout(Duration::from_millis(500));
    // The bound is 2 s; the slack is for a loaded machine, and stays below
    // what three connect tries (4.5 s) would take.
    let bound = Duration::from_secs(2);
    let slack = Duration::from_secs(1);
    let q = connect_patiently(&url, "stopped", options.clone()).await;
    q.add(NewItem::new(b"before".to_vec())).await.unwrap();
    let stopped = Stopped::stop(&pid);
    let started = Instant::now();
    let err = q.stats().await.unwrap_err();
    assert!(matches!(err, Error::Backend { .. }), "{err:?}");
    assert!(started.elapsed() < bound + slack, "{:?}", started.elapsed());
    let started = Instant::now();
    let err = RedisQueue::connect(&url, "stopped", Config::default(), options.clone())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Backend { .. }), "{err:?}");
    assert!(err.is_retryable());
    assert!(
        started.elapsed() < bound + slack,
        "connect took {:?}",
        started.elapsed()
    );
    drop(stopped);
    let deadline = Instant::now() + Duration::from_secs(20);
    let stats = loop {
        match q.stats().await {
            Ok(s) => break s,
            Err(e) if Instant::now() < deadline => {
                assert!(matches!(e, Error::Backend { .. }), "{e:?}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("queue did not come back after SIGCONT: {e}"),
        }
    };
    assert_eq!(stats.backlog, 1);
    let again = connect_patiently(&url, "stopped", options).await;
    let got = again
        .claim(1, Duration::ZERO, ClaimFrom::All)
        .await
        .unwrap();
    assert_eq!(got[0].item.payload, b"before");
    again.ack(got[0].receipt).await.unwrap();
}

/// A primary and a replica of it, once the replica has linked up.
async fn primary_with_linked_replica() -> (RedisServer, RedisServer) {
    let primary = RedisServer::start().unwrap();
    let replica = RedisServer::start_with(RedisServerOptions {
        replica_of: Some(primary.port()),
        ..Default::default()
    })
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while info_field(&replica.url(), "", "replication", "master_link_status").await != "up" {
        assert!(Instant::now() < deadline, "replica never linked up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (primary, replica)
}

#[tokio::test]
async fn min_replicas_succeeds_with_a_replica_and_reports_the_shortfall_without() {
    let (primary, mut replica) = primary_with_linked_replica().await;
    let options = RedisOptions::default()
        .min_replicas(1)
        .replica_timeout(Duration::from_millis(500));
    let q = RedisQueue::connect(&primary.url(), "repl", Config::default(), options)
        .await
        .unwrap();
    let added = q.add(NewItem::new(b"replicated".to_vec())).await.unwrap();
    let mut conn = raw(&replica.url()).await;
    let flow: Option<Vec<u8>> = redis::cmd("HGET")
        .arg(format!("{{repl}}:item:{}", added.id))
        .arg("payload")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(flow.as_deref(), Some(&b"replicated"[..]));
    replica.kill();
    let err = q.add(NewItem::new(b"alone".to_vec())).await.unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, Error::Backend { .. }), "{err:?}");
    assert!(text.contains("only 0 of 1"), "{text}");
}

/// Requests sent by clients (scripts and XREAD; commands run inside a script
/// are not requests), from `INFO commandstats`.
async fn client_requests(conn: &mut RawConnection, ns: &str) -> u64 {
    conn.command_calls(ns, &["evalsha", "eval", "xread"])
        .await
        .unwrap()
}

async fn blocking_claim_wakes_on_add_and_is_quiet_while_idle(kind: RedisKind) {
    let server = kind.start_private(false).unwrap();
    let url = server.url();
    let q = connect(&url, "idle", Config::default()).await;
    let producer = connect(&url, "idle", Config::default()).await;
    // Warm up: load the claim script and open the waiting connection.
    assert!(
        q.claim(1, Duration::from_millis(50), ClaimFrom::All)
            .await
            .unwrap()
            .is_empty()
    );
    // Idle: a claim waiting 2 s sends a handful of commands, not a poll loop.
    let mut admin = raw(&url).await;
    let before = client_requests(&mut admin, "idle").await;
    let got = q
        .claim(1, Duration::from_secs(2), ClaimFrom::All)
        .await
        .unwrap();
    assert!(got.is_empty());
    let after = client_requests(&mut admin, "idle").await;
    // At most 20 commands/s are allowed; the design sends 2 per wait (the
    // claim script and one XREAD BLOCK).
    assert!(
        after - before <= 4,
        "{} commands in 2 s of idle waiting",
        after - before
    );
    // Wake-up: an add from another handle ends the wait.
    let waiter = tokio::spawn({
        let q = q.clone();
        async move {
            let started = Instant::now();
            let got = q
                .claim(1, Duration::from_secs(20), ClaimFrom::All)
                .await
                .unwrap();
            (got, started.elapsed())
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    producer.add(NewItem::new(b"wake".to_vec())).await.unwrap();
    let (got, waited) = waiter.await.unwrap();
    assert_eq!(got.len(), 1);
    assert!(
        waited < Duration::from_secs(10),
        "claim slept through the add: {waited:?}"
    );
    // A timer coming due (server clock) also ends the wait.
    let now = q.now_ms().await.unwrap();
    producer
        .add_delayed(NewItem::new(b"timer".to_vec()), now + 300)
        .await
        .unwrap();
    let got = q
        .claim(1, Duration::from_secs(20), ClaimFrom::DueOnly)
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].item.payload, b"timer");
}

async fn records_deleted_behind_the_queues_back_are_skipped_not_fatal(kind: RedisKind) {
    let url = shared_url(kind);
    let ns = fresh_namespace();
    let q = connect(&url, &ns, Config::default()).await;
    for i in 1..=4u8 {
        q.add(NewItem::new(vec![i])).await.unwrap();
    }
    let mut conn = raw(&url).await;
    // Someone deletes item 2's record behind the queue's back.
    let _: () = redis::cmd("DEL")
        .arg(format!("{{{ns}}}:item:2"))
        .query_async(&mut conn)
        .await
        .unwrap();
    let got = q.claim(10, Duration::ZERO, ClaimFrom::All).await.unwrap();
    let ids: Vec<u64> = got.iter().map(|c| c.item.id).collect();
    assert_eq!(ids, vec![1, 3, 4]);
    let ready: u64 = redis::cmd("ZCARD")
        .arg(format!("{{{ns}}}:ready"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(ready, 0, "the orphan entry was dropped");
    // And the whole backlog set.
    q.add(NewItem::new(b"lost".to_vec())).await.unwrap();
    let _: () = redis::cmd("DEL")
        .arg(format!("{{{ns}}}:ready"))
        .query_async(&mut conn)
        .await
        .unwrap();
    // Acks still work; a repeated receipt in one batch counts once.
    let r = got[0].receipt;
    assert_eq!(q.ack_batch(vec![r, r]).await.unwrap(), 1);
    q.ack(got[1].receipt).await.unwrap();
    let stats = q.stats().await.unwrap();
    assert_eq!((stats.pending, stats.backlog), (1, 0));
    // The lane comes back on the next add.
    q.add(NewItem::new(b"later".to_vec())).await.unwrap();
    let again = q.claim(10, Duration::ZERO, ClaimFrom::All).await.unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].item.payload, b"later");
}

/// Whether something answers `PING` on the loopback `port`.
fn answers_ping(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    let mut buf = [0u8; 16];
    s.write_all(b"PING\r\n").is_ok()
        && matches!(s.read(&mut buf), Ok(n) if buf[..n].starts_with(b"+PONG"))
}

/// The harness's server dies with the test process, even on `SIGKILL`: the
/// test runs itself as a child that starts a server and is then killed.
#[test]
fn server_dies_with_its_test_process_even_on_sigkill() {
    use std::io::BufRead;
    const CHILD: &str = "WORKJOURNAL_REDIS_HARNESS_CHILD";
    if std::env::var_os(CHILD).is_some() {
        let server = RedisServer::start().unwrap();
        println!("port={}", server.port());
        std::thread::sleep(Duration::from_secs(60));
        drop(server);
        return;
    }
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "server_dies_with_its_test_process_even_on_sigkill",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let port: u16 = std::io::BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        // libtest may print "test <name> ... " before it on the same line.
        .find_map(|l| {
            l.split_once("port=")
                .map(|(_, p)| p.trim().parse().unwrap())
        })
        .expect("the child printed its server's port");
    assert!(answers_ping(port));
    child.kill().unwrap(); // SIGKILL: no destructor runs in the child
    child.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while answers_ping(port) {
        assert!(
            Instant::now() < deadline,
            "redis-server outlived its test process"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test]
async fn url_with_a_password_authenticates_and_a_wrong_one_is_a_backend_error() {
    let server = RedisServer::start_with(RedisServerOptions {
        password: Some("s3cret".into()),
        ..Default::default()
    })
    .unwrap();
    let port = server.port();
    let good = format!("redis://:s3cret@127.0.0.1:{port}/");
    let q = connect(&good, "auth", Config::default()).await;
    q.add(NewItem::new(b"x".to_vec())).await.unwrap();
    assert_eq!(q.stats().await.unwrap().backlog, 1);
    let options = RedisOptions::default()
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_millis(500));
    let bad = format!("redis://:wrong@127.0.0.1:{port}/");
    let err = RedisQueue::connect(&bad, "auth", Config::default(), options.clone())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Backend { .. }), "{err:?}");
    let none = format!("redis://127.0.0.1:{port}/");
    let err = RedisQueue::connect(&none, "auth", Config::default(), options)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Backend { .. }), "{err:?}");
    let err = RedisQueue::connect(&good, "a{b}", Config::default(), RedisOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput(_)), "{err:?}");
}

/// A queue in a fresh namespace on `kind`'s server whose outcomes live
/// 10 s by a manual clock at `T0`: its URL, namespace, clock and handle.
async fn short_results(kind: RedisKind) -> (String, String, ManualClock, RedisQueue) {
    let url = shared_url(kind);
    let ns = fresh_namespace();
    let clock = ManualClock::new(T0);
    let config = Config::default()
        .clock(clock.clone())
        .result_ttl(Duration::from_secs(10));
    let q = connect(&url, &ns, config).await;
    (url, ns, clock, q)
}

/// Expired outcomes are deleted by later writes, with their progress and
/// chunks (SPEC 6): the namespace does not grow with every acked item.
async fn expired_outcomes_are_pruned_with_their_progress_and_chunks(kind: RedisKind) {
    let (url, ns, clock, q) = short_results(kind).await;
    for i in 0..5u8 {
        q.add(NewItem::new(vec![i])).await.unwrap();
    }
    for c in q.claim(5, Duration::ZERO, ClaimFrom::All).await.unwrap() {
        q.send_chunk(c.receipt, b"part".to_vec()).await.unwrap();
        q.set_progress(c.receipt, b"half".to_vec()).await.unwrap();
        q.ack_with_result(c.receipt, b"done".to_vec())
            .await
            .unwrap();
    }
    let mut conn = raw(&url).await;
    let count = |pattern: String| {
        let mut conn = conn.clone();
        async move {
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg(pattern)
                .query_async(&mut conn)
                .await
                .unwrap();
            keys.len()
        }
    };
    let prefix = format!("{{{ns}}}:");
    // SPEC 6: outcomes are the fields of one hash, `{ns}:out`.
    let outcomes = |mut conn: RawConnection| {
        let key = format!("{prefix}out");
        async move {
            let n: u64 = redis::cmd("HLEN")
                .arg(key)
                .query_async(&mut conn)
                .await
                .unwrap();
            n
        }
    };
    assert_eq!(outcomes(conn.clone()).await, 5);
    assert_eq!(count(format!("{prefix}out:[0-9]*")).await, 0);
    assert_eq!(count(format!("{prefix}chunks:*")).await, 5);
    clock.advance(Duration::from_secs(10));
    q.add(NewItem::new(b"later".to_vec())).await.unwrap();
    let c = q.claim(1, Duration::ZERO, ClaimFrom::All).await.unwrap();
    q.ack(c[0].receipt).await.unwrap();
    assert_eq!(outcomes(conn.clone()).await, 1);
    assert_eq!(count(format!("{prefix}chunks:*")).await, 0);
    assert_eq!(count(format!("{prefix}prog:*")).await, 0);
    let expiring: u64 = redis::cmd("ZCARD")
        .arg(format!("{prefix}out:exp"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(expiring, 1);
}

async fn a_namespace_of_the_stream_layout_moves_to_ranked_lanes_at_connect(kind: RedisKind) {
    // SPEC 6: before priorities the backlog and the due lane were streams
    // read by the group `workers`; build such a namespace by hand (two
    // ready items in the backlog, one claimed, one in the due lane).
    let url = shared_url(kind);
    let ns = fresh_namespace();
    let mut conn = raw(&url).await;
    let p = format!("{{{ns}}}:");
    for (id, st, enq) in [
        (1, "backlog", T0 - 3_000),
        (2, "pending", T0 - 2_500),
        (3, "backlog", T0 - 4_000),
        (4, "due", T0 - 2_000),
    ] {
        let _: () = redis::cmd("HSET")
            .arg(format!("{p}item:{id}"))
            .arg("flow")
            .arg("")
            .arg("payload")
            .arg(format!("p{id}"))
            .arg("enq")
            .arg(enq)
            .arg("dlv")
            .arg(u32::from(st == "pending"))
            .arg("st")
            .arg(st)
            .query_async(&mut conn)
            .await
            .unwrap();
        let stream = if st == "due" { "due" } else { "backlog" };
        let sid: String = redis::cmd("XADD")
            .arg(format!("{p}{stream}"))
            .arg("*")
            .arg("id")
            .arg(id)
            .query_async(&mut conn)
            .await
            .unwrap();
        let _: () = redis::cmd("HSET")
            .arg(format!("{p}item:{id}"))
            .arg("sid")
            .arg(sid)
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    let _: () = redis::cmd("HSET")
        .arg(format!("{p}item:4"))
        .arg("nb")
        .arg(T0 - 1_000)
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = redis::cmd("HSET")
        .arg(format!("{p}item:2"))
        .arg("lane")
        .arg("backlog")
        .arg("ls")
        .arg(1)
        .arg("ca")
        .arg(T0 - 2_000)
        .arg("owner")
        .arg("gone")
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = redis::cmd("ZADD")
        .arg(format!("{p}pending"))
        .arg(T0 - 2_000)
        .arg(format!("{:020}", 2))
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg(format!("{p}seq"))
        .arg(4)
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg(format!("{p}lease"))
        .arg(1)
        .query_async(&mut conn)
        .await
        .unwrap();
    let clock = ManualClock::new(T0);
    let q = connect(&url, &ns, Config::default().clock(clock.clone())).await;
    let s = q.stats().await.unwrap();
    assert_eq!((s.backlog, s.due, s.pending), (3, 1, 1));
    let streams: u64 = redis::cmd("EXISTS")
        .arg(format!("{p}backlog"))
        .arg(format!("{p}due"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(streams, 0, "the old streams were deleted");
    // Stream order is kept (item 3 stays behind item 1 though older).
    q.add(NewItem::new(b"new".to_vec())).await.unwrap();
    let got = q.claim(10, Duration::ZERO, ClaimFrom::All).await.unwrap();
    let payloads: Vec<&[u8]> = got.iter().map(|c| c.item.payload.as_slice()).collect();
    assert_eq!(payloads, vec![&b"p4"[..], b"p1", b"p3", b"new"]);
    // The pending item is reclaimable as before.
    clock.advance(Duration::from_secs(60));
    let back = q
        .reclaim(Duration::from_secs(30), 10)
        .await
        .unwrap()
        .claimed;
    assert!(back.iter().any(|c| c.item.id == 2));
}

/// The member of the ready lane `lane` naming item `id`.
async fn lane_member(conn: &mut RawConnection, ns: &str, lane: &str, id: u64) -> String {
    let members: Vec<String> = redis::cmd("ZRANGE")
        .arg(format!("{{{ns}}}:{lane}"))
        .arg(0)
        .arg(-1)
        .query_async(conn)
        .await
        .unwrap();
    members
        .into_iter()
        .find(|m| m.ends_with(&format!(":{id}")))
        .unwrap()
}

// Regression (issue 10, item 12, for the ranked lanes): a ready item's
// lane member removed behind the backend's back (an operator's ZREM) must
// leave counts that are true and never fail, now and once everything
// else has been drained.
async fn stats_stay_true_when_a_ready_lane_member_is_removed(kind: RedisKind) {
    let url = shared_url(kind);
    let ns = fresh_namespace();
    let q = connect(&url, &ns, Config::default()).await;
    let mut ids = Vec::new();
    for i in 0..10u8 {
        ids.push(q.add(NewItem::new(vec![i])).await.unwrap().id);
    }
    let held = q.claim(4, Duration::ZERO, ClaimFrom::All).await.unwrap();
    let mut conn = raw(&url).await;
    let m = lane_member(&mut conn, &ns, "ready", ids[7]).await;
    let n: u64 = redis::cmd("ZREM")
        .arg(format!("{{{ns}}}:ready"))
        .arg(&m)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(n, 1);
    let s = q.stats().await.unwrap();
    assert_eq!((s.backlog, s.pending), (5, 4), "{s:?}");
    for c in held {
        q.ack(c.receipt).await.unwrap();
    }
    loop {
        let got = q.claim(3, Duration::ZERO, ClaimFrom::All).await.unwrap();
        if got.is_empty() {
            break;
        }
        for c in got {
            assert_ne!(c.item.id, ids[7], "the removed member came back");
            q.ack(c.receipt).await.unwrap();
        }
    }
    let s = q.stats().await.unwrap();
    assert_eq!((s.backlog, s.pending), (0, 0), "{s:?}");
    q.add(NewItem::new(b"new".to_vec())).await.unwrap();
    let s = q.stats().await.unwrap();
    assert_eq!((s.backlog, s.pending), (1, 0), "{s:?}");
}

// The item hash deleted behind the backend's back: of a ready item, it is
// counted until a claim meets its lane member and drops it; of a pending
// item, its receipt still acks it once (the leases index holds its lease,
// SPEC 6, Redis keys changed by hand) and a reclaim drops the pending entry of one nobody acks. No
// count ever fails or stays wrong.
async fn stats_stay_true_when_an_item_hash_is_deleted(kind: RedisKind) {
    let url = shared_url(kind);
    let ns = fresh_namespace();
    let q = connect(&url, &ns, Config::default()).await;
    q.add(NewItem::new(b"one".to_vec())).await.unwrap();
    q.add(NewItem::new(b"two".to_vec())).await.unwrap();
    let ready = q.add(NewItem::new(b"three".to_vec())).await.unwrap().id;
    let held = q.claim(2, Duration::ZERO, ClaimFrom::All).await.unwrap();
    let mut conn = raw(&url).await;
    for id in [ready, held[0].item.id, held[1].item.id] {
        let n: u64 = redis::cmd("DEL")
            .arg(format!("{{{ns}}}:item:{id}"))
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(n, 1);
    }
    let s = q.stats().await.unwrap();
    assert_eq!((s.backlog, s.pending), (1, 2), "{s:?}");
    assert!(
        q.claim(1, Duration::ZERO, ClaimFrom::All)
            .await
            .unwrap()
            .is_empty()
    );
    // The first: acked once by its receipt, then its lease is gone.
    q.ack(held[0].receipt).await.unwrap();
    let err = q.ack(held[0].receipt).await.unwrap_err();
    assert!(matches!(err, Error::LeaseLost { .. }), "{err:?}");
    let s = q.stats().await.unwrap();
    assert_eq!((s.backlog, s.pending), (0, 1), "{s:?}");
    // The second: nobody acks it; a reclaim drops its pending entry and
    // its lease with it.
    assert!(
        q.reclaim(Duration::ZERO, 10)
            .await
            .map(|r| r.claimed)
            .unwrap()
            .is_empty()
    );
    let err = q.ack(held[1].receipt).await.unwrap_err();
    assert!(matches!(err, Error::LeaseLost { .. }), "{err:?}");
    let s = q.stats().await.unwrap();
    assert_eq!((s.backlog, s.pending), (0, 0), "{s:?}");
    q.add(NewItem::new(b"four".to_vec())).await.unwrap();
    let s = q.stats().await.unwrap();
    assert_eq!((s.backlog, s.pending), (1, 0), "{s:?}");
}

// Failed: `connect_timeout + response_timeout` (+ `replica_timeout`)
// panicked on `Duration::MAX` ("overflow when adding durations"), and a huge
// replica timeout was sent to WAIT out of Redis's range.
async fn endless_timeouts_do_not_overflow(kind: RedisKind) {
    // A server needs a replica of its own; the shared cluster has one per
    // primary.
    let (_keep, url) = match kind {
        RedisKind::Server => {
            let (primary, replica) = primary_with_linked_replica().await;
            let url = primary.url();
            (Some((primary, replica)), url)
        }
        RedisKind::Cluster => (None, shared_url(kind)),
    };
    let options = RedisOptions::default()
        .connect_timeout(Duration::MAX)
        .response_timeout(Duration::MAX)
        .min_replicas(1)
        .replica_timeout(Duration::MAX);
    let q = RedisQueue::connect(&url, &fresh_namespace(), Config::default(), options)
        .await
        .unwrap();
    let added = q.add(NewItem::new(b"x".to_vec())).await.unwrap();
    let claimed = q.claim(1, Duration::ZERO, ClaimFrom::All).await.unwrap();
    assert_eq!(claimed[0].item.id, added.id);
    q.ack(claimed[0].receipt).await.unwrap();
    q.close().await.unwrap();
}

// Failed: mark_done also wrote a `{ns}:done` hash that nothing ever read
// (the sorted set of expiries answers was_done alone).
async fn done_markers_live_in_the_expiry_set_alone(kind: RedisKind) {
    let url = shared_url(kind);
    let ns = fresh_namespace();
    let q = connect(&url, &ns, Config::default()).await;
    q.mark_done(7, "email").await.unwrap();
    assert!(q.was_done(7, "email").await.unwrap());
    assert!(!q.was_done(7, "sms").await.unwrap());
    let mut conn = raw(&url).await;
    let exists: u64 = redis::cmd("EXISTS")
        .arg(format!("{{{ns}}}:done"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(exists, 0);
}

/// SPEC 3, Flow limits: a claim does not walk a held flow's items to get
/// past them. 5 000 items of a backed-off flow wait ahead of one other
/// item; the claim that takes it runs a few dozen commands, however many
/// are held (counted from `INFO commandstats`, which counts the commands
/// scripts run).
async fn a_claim_does_not_walk_a_held_flows_items(kind: RedisKind) {
    let server = kind.start_private(false).unwrap();
    let url = server.url();
    let q = connect(&url, "held", Config::default()).await;
    q.set_flow_limit(
        "hot",
        workjournal::FlowLimit::BackOffUntil(Some(u64::MAX >> 12)),
    )
    .await
    .unwrap();
    for _ in 0..5 {
        let items = (0..1000)
            .map(|_| NewItem::new(b"h".to_vec()).flow("hot"))
            .collect();
        q.add_batch(items).await.unwrap();
    }
    q.add(NewItem::new(b"cool".to_vec()).flow("cool"))
        .await
        .unwrap();
    let mut conn = raw(&url).await;
    let every = [
        "zrange",
        "zpopmin",
        "zrem",
        "zadd",
        "zcard",
        "hmget",
        "hget",
        "hset",
        "exists",
        "smembers",
        "zrangebyscore",
        "get",
        "set",
        "incr",
        "decr",
        "xadd",
        "del",
        "sadd",
        "srem",
        "time",
    ];
    let before = conn.command_calls("held", &every).await.unwrap();
    let got = q.claim(10, Duration::ZERO, ClaimFrom::All).await.unwrap();
    let after = conn.command_calls("held", &every).await.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].item.payload, b"cool");
    assert!(
        after - before < 60,
        "{} commands for one claim",
        after - before
    );
    let s = q.stats().await.unwrap();
    assert_eq!((s.backlog, s.limited), (5000, 5000));
}

/// Failed as a design: claim.lua handed items out with code of its own
/// beside `hand_out` in common.lua (used by step and reclaim). Now
/// every script that makes an item pending goes through the one
/// `hand_out`: claim, step and reclaim take their leases from the
/// one counter in call order, write each item's delivery and claim time,
/// and index it in `{ns}:pending` at its claim time.
async fn redis_hand_outs_share_one_lease_counter(kind: RedisKind) {
    let url = shared_url(kind);
    let ns = fresh_namespace();
    let clock = ManualClock::new(T0);
    let q = connect(&url, &ns, Config::default().clock(clock.clone())).await;
    q.add_batch(vec![
        NewItem::new(b"a".to_vec()),
        NewItem::new(b"b".to_vec()),
    ])
    .await
    .unwrap();
    q.pause("cold").await.unwrap();
    q.add(NewItem::new(b"c".to_vec()).flow("cold"))
        .await
        .unwrap();
    let claimed = q.claim(10, Duration::ZERO, ClaimFrom::All).await.unwrap();
    assert_eq!(claimed.len(), 2, "the paused flow's item is parked");
    assert_eq!(q.parked("cold").await.unwrap(), 1);
    clock.advance(Duration::from_secs(1));
    let stepped = q.step("cold").await.unwrap().unwrap();
    // Resumed, so that reclaim hands the stepped item out again
    // rather than parking it.
    q.resume("cold").await.unwrap();
    clock.advance(Duration::from_secs(60));
    let reclaimed = q.reclaim(Duration::from_secs(30), 10).await.unwrap();
    assert!(reclaimed.dead_lettered.is_empty());
    assert_eq!(reclaimed.claimed.len(), 3);

    let mut leases: Vec<u64> = claimed.iter().map(|c| c.receipt.lease).collect();
    leases.push(stepped.receipt.lease);
    leases.extend(reclaimed.claimed.iter().map(|c| c.receipt.lease));
    assert!(
        leases.windows(2).all(|w| w[0] < w[1]),
        "leases not in call order: {leases:?}"
    );
    assert_eq!(stepped.receipt.delivery, 1);
    assert_eq!(stepped.claimed_at_ms, T0 + 1_000);
    for c in &reclaimed.claimed {
        assert_eq!(c.receipt.delivery, 2);
        assert_eq!(c.claimed_at_ms, T0 + 61_000);
    }
    let mut conn = raw(&url).await;
    let counter: u64 = redis::cmd("GET")
        .arg(format!("{{{ns}}}:lease"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(Some(&counter), leases.last());
    let pending: Vec<(String, f64)> = redis::cmd("ZRANGE")
        .arg(format!("{{{ns}}}:pending"))
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(pending.len(), 3);
    assert!(pending.iter().all(|(_, at)| *at == (T0 + 61_000) as f64));
    // The leases index (SPEC 7, Redis ack path) holds the current lease of
    // each pending item, and nothing of the leases the reclaim replaced.
    let mut held: Vec<(u64, u64)> = redis::cmd("HGETALL")
        .arg(format!("{{{ns}}}:leases"))
        .query_async::<std::collections::HashMap<u64, u64>>(&mut conn)
        .await
        .unwrap()
        .into_iter()
        .collect();
    held.sort();
    let mut want: Vec<(u64, u64)> = reclaimed
        .claimed
        .iter()
        .map(|c| (c.item.id, c.receipt.lease))
        .collect();
    want.sort();
    assert_eq!(held, want);
    for c in &reclaimed.claimed {
        q.ack(c.receipt).await.unwrap();
    }
    assert_eq!(q.stats().await.unwrap().pending, 0);
    let left: u64 = redis::cmd("HLEN")
        .arg(format!("{{{ns}}}:leases"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(left, 0, "acked items leave the leases index");
    q.close().await.unwrap();
}

/// A namespace written by a build before the leases index and the outcomes
/// hash (SPEC 6 and 7): an item it handed out (no `{ns}:leases` entry) is
/// still acked by its receipt and fenced against a wrong lease, and an
/// outcome it kept (a hash `{ns}:out:<id>`) is still read, then deleted
/// with its expiry.
async fn a_namespace_from_before_the_leases_index_acks_and_reads_its_outcomes(kind: RedisKind) {
    let (url, ns, clock, q) = short_results(kind).await;
    q.add_batch(vec![
        NewItem::new(b"a".to_vec()),
        NewItem::new(b"b".to_vec()),
    ])
    .await
    .unwrap();
    let got = q.claim(2, Duration::ZERO, ClaimFrom::All).await.unwrap();
    let mut conn = raw(&url).await;
    // As the older build left them: no index entries, and an outcome of
    // an earlier item as a hash of its own with its expiry.
    let _: u64 = redis::cmd("DEL")
        .arg(format!("{{{ns}}}:leases"))
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: u64 = redis::cmd("HSET")
        .arg(format!("{{{ns}}}:out:77"))
        .arg(&["kind", "done", "value", "old:result", "at"])
        .arg(T0)
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: u64 = redis::cmd("ZADD")
        .arg(format!("{{{ns}}}:out:exp"))
        .arg(T0 + 10_000)
        .arg(format!("{:020}", 77))
        .query_async(&mut conn)
        .await
        .unwrap();
    let wrong = Receipt {
        lease: got[0].receipt.lease + 100,
        ..got[0].receipt
    };
    let err = q.ack(wrong).await.unwrap_err();
    assert!(matches!(err, Error::LeaseLost { .. }), "{err:?}");
    let n = q
        .ack_batch(got.iter().map(|c| c.receipt).collect())
        .await
        .unwrap();
    assert_eq!(n, 2, "both acked through their item hashes");
    assert_eq!(q.stats().await.unwrap().pending, 0);
    let old = q.outcome(77).await.unwrap().expect("the older outcome");
    assert_eq!(
        old.kind,
        OutcomeKind::Done {
            result: b"old:result".to_vec()
        }
    );
    assert_eq!(old.at_ms, T0);
    for c in &got {
        let o = q.outcome(c.item.id).await.unwrap().expect("outcome");
        assert_eq!(o.kind, OutcomeKind::Done { result: Vec::new() });
    }
    clock.advance(Duration::from_secs(11));
    q.add(NewItem::new(b"later".to_vec())).await.unwrap();
    let c = q.claim(1, Duration::ZERO, ClaimFrom::All).await.unwrap();
    q.ack(c[0].receipt).await.unwrap();
    assert_eq!(q.outcome(77).await.unwrap(), None);
    let left: u64 = redis::cmd("EXISTS")
        .arg(format!("{{{ns}}}:out:77"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(left, 0, "the older outcome hash is pruned with its expiry");
    q.close().await.unwrap();
}

/// A namespace whose `{ns}:layout` a newer build raised (SPEC 6) is
/// refused at connect with `Decode`, and nothing in it changes; the
/// layout this build writes is recorded at connect.
async fn a_namespace_of_a_newer_layout_is_refused_untouched(kind: RedisKind) {
    let url = shared_url(kind);
    let ns = fresh_namespace();
    let q = connect(&url, &ns, Config::default()).await;
    q.add(NewItem::new(b"kept".to_vec())).await.unwrap();
    q.close().await.unwrap();
    let mut conn = raw(&url).await;
    assert_eq!(layout_of(&mut conn, &ns).await, "3");
    // Tried: a higher layout (a newer build wrote the namespace) and one
    // that is not a number (something else wrote the key): both refused,
    // neither overwritten.
    for layout in ["99", "v2"] {
        set_layout(&mut conn, &ns, layout).await;
        let err = RedisQueue::connect(&url, &ns, Config::default(), RedisOptions::default())
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Decode { .. }), "{err:?}");
        assert!(
            err.to_string().contains(&format!("layout is {layout:?}")),
            "{err}"
        );
        assert_eq!(
            layout_of(&mut conn, &ns).await,
            layout,
            "the refused namespace was changed"
        );
    }
    // A layout-1 namespace (the layout before cancelling) reads as it is
    // and is recorded as layout 3.
    set_layout(&mut conn, &ns, "1").await;
    let q = connect(&url, &ns, Config::default()).await;
    assert_eq!(layout_of(&mut conn, &ns).await, "3");
    let got = q.claim(1, Duration::ZERO, ClaimFrom::All).await.unwrap();
    assert_eq!(got[0].item.payload, b"kept");
    q.close().await.unwrap();
}

/// The layout version recorded in namespace `ns` (`{ns}:layout`), as text.
async fn layout_of(conn: &mut RawConnection, ns: &str) -> String {
    redis::cmd("GET")
        .arg(format!("{{{ns}}}:layout"))
        .query_async(conn)
        .await
        .unwrap()
}

/// Record layout version `v` in namespace `ns`, as a build of that layout
/// (or anything else writing the key) would.
async fn set_layout(conn: &mut RawConnection, ns: &str, v: &str) {
    let _: () = redis::cmd("SET")
        .arg(format!("{{{ns}}}:layout"))
        .arg(v)
        .query_async(conn)
        .await
        .unwrap();
}

/// Send `cmd` (routed by its key) and read the answer as `T`.
async fn query<T: redis::FromRedisValue>(conn: &mut RawConnection, cmd: &mut redis::Cmd) -> T {
    cmd.query_async(conn).await.unwrap()
}

/// SPEC 3, Controlling one item, on the Redis keys: `remove` takes an item
/// out of the one structure that holds it (a dead letter's progress and
/// chunks go with it, its outcome stays; a parked list left empty leaves
/// `{ns}:flows`; a held item lowers the held counters and the flow's
/// record), refuses a pending one leaving its lease, and deletes an item
/// whose lane member went behind the queue's back; `promote` lowers
/// `not_before` to now and puts a held flow's item in its held due lane.
async fn remove_and_promote_leave_every_key_consistent(kind: RedisKind) {
    let url = shared_url(kind);
    let ns = fresh_namespace();
    let clock = ManualClock::new(T0);
    let q = connect(&url, &ns, Config::default().clock(clock.clone())).await;
    let mut conn = raw(&url).await;
    let k = |key: &str| format!("{{{ns}}}:{key}");

    // A dead letter with progress and chunks.
    let dead = q.add(NewItem::new(b"dead".to_vec())).await.unwrap().id;
    let c = q.claim(1, Duration::ZERO, ClaimFrom::All).await.unwrap();
    q.set_progress(c[0].receipt, b"half".to_vec())
        .await
        .unwrap();
    q.send_chunk(c[0].receipt, b"part".to_vec()).await.unwrap();
    q.dead_letter(c[0].receipt, "bad").await.unwrap();
    assert!(q.remove(dead).await.unwrap());
    for key in [
        format!("item:{dead}"),
        format!("prog:{dead}"),
        format!("chunks:{dead}"),
    ] {
        let n: u64 = query(&mut conn, redis::cmd("EXISTS").arg(k(&key))).await;
        assert_eq!(n, 0, "{key} left behind");
    }
    let dead_list: u64 = query(&mut conn, redis::cmd("LLEN").arg(k("dead"))).await;
    assert_eq!(dead_list, 0);
    let kept: u64 = query(&mut conn, redis::cmd("HEXISTS").arg(k("out")).arg(dead)).await;
    assert_eq!(kept, 1, "a dead letter's outcome stays, as with a purge");

    // A parked item: its list and the flow's entry in `{ns}:flows` go.
    q.pause("p").await.unwrap();
    let parked = q
        .add(NewItem::new(b"p".to_vec()).flow("p"))
        .await
        .unwrap()
        .id;
    assert!(
        q.claim(1, Duration::ZERO, ClaimFrom::All)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(q.remove(parked).await.unwrap());
    let flows: u64 = query(&mut conn, redis::cmd("SISMEMBER").arg(k("flows")).arg("p")).await;
    let list: u64 = query(&mut conn, redis::cmd("EXISTS").arg(k("parked:p"))).await;
    assert_eq!((flows, list), (0, 0));

    // A pending item is refused and keeps its lease.
    let p = q.add(NewItem::new(b"pending".to_vec())).await.unwrap().id;
    let held = q.claim(1, Duration::ZERO, ClaimFrom::All).await.unwrap();
    let err = q.remove(p).await.unwrap_err();
    assert!(matches!(err, Error::InvalidInput(_)), "{err:?}");
    let lease: Option<u64> = query(&mut conn, redis::cmd("HGET").arg(k("leases")).arg(p)).await;
    assert_eq!(lease, Some(held[0].receipt.lease));
    q.ack(held[0].receipt).await.unwrap();

    // Held items of a capped flow: the counters and the record follow.
    q.set_flow_limit("c", workjournal::FlowLimit::Concurrency(Some(1)))
        .await
        .unwrap();
    q.add(NewItem::new(b"c1".to_vec()).flow("c")).await.unwrap();
    let c1 = q.claim(1, Duration::ZERO, ClaimFrom::All).await.unwrap();
    let c2 = q
        .add(NewItem::new(b"c2".to_vec()).flow("c"))
        .await
        .unwrap()
        .id;
    let c3 = q
        .add(NewItem::new(b"c3".to_vec()).flow("c"))
        .await
        .unwrap()
        .id;
    let held_n: u64 = query(&mut conn, redis::cmd("GET").arg(k("limits-held"))).await;
    assert_eq!(held_n, 2);
    assert!(q.remove(c2).await.unwrap());
    let held_n: u64 = query(&mut conn, redis::cmd("GET").arg(k("limits-held"))).await;
    let lane: u64 = query(&mut conn, redis::cmd("ZCARD").arg(k("held:c"))).await;
    let record: u64 = query(&mut conn, redis::cmd("HGET").arg(k("limit:c")).arg("held")).await;
    assert_eq!((held_n, lane, record), (1, 1, 1));
    // The freed slot lets the one left run, from its held lane.
    q.ack(c1[0].receipt).await.unwrap();
    let got = q.claim(5, Duration::ZERO, ClaimFrom::All).await.unwrap();
    assert_eq!(got.iter().map(|c| c.item.id).collect::<Vec<_>>(), vec![c3]);
    q.ack(got[0].receipt).await.unwrap();

    // promote: not_before lowered to now; a backed-off flow's item goes to
    // its held due lane; remove takes it from there.
    q.back_off("h", Duration::from_secs(60)).await.unwrap();
    let h = q
        .add_delayed(NewItem::new(b"h".to_vec()).flow("h"), T0 + 30_000)
        .await
        .unwrap()
        .id;
    let x = q
        .add_delayed(NewItem::new(b"x".to_vec()), T0 + 30_000)
        .await
        .unwrap()
        .id;
    clock.advance(Duration::from_secs(1));
    assert!(q.promote(h).await.unwrap());
    assert!(q.promote(x).await.unwrap());
    for id in [h, x] {
        let nb: u64 = query(
            &mut conn,
            redis::cmd("HGET").arg(k(&format!("item:{id}"))).arg("nb"),
        )
        .await;
        assert_eq!(nb, T0 + 1_000);
    }
    let held_due: u64 = query(&mut conn, redis::cmd("GET").arg(k("limits-held-due"))).await;
    let due_lane: u64 = query(&mut conn, redis::cmd("ZCARD").arg(k("held-due:h"))).await;
    assert_eq!((held_due, due_lane), (1, 1));
    let s = q.stats().await.unwrap();
    assert_eq!((s.due, s.delayed, s.limited), (2, 0, 1), "{s:?}");
    assert!(q.remove(h).await.unwrap());
    let held_due: u64 = query(&mut conn, redis::cmd("GET").arg(k("limits-held-due"))).await;
    assert_eq!(held_due, 0);

    // An item whose lane member an operator removed (SPEC 6, Redis keys changed by hand): remove still
    // deletes it and fails nothing.
    let m = lane_member(&mut conn, &ns, "ready:due", x).await;
    let _: u64 = query(&mut conn, redis::cmd("ZREM").arg(k("ready:due")).arg(&m)).await;
    assert!(q.remove(x).await.unwrap());
    let n: u64 = query(&mut conn, redis::cmd("EXISTS").arg(k(&format!("item:{x}")))).await;
    assert_eq!(n, 0);
    let s = q.stats().await.unwrap();
    assert_eq!(
        (
            s.backlog,
            s.due,
            s.delayed,
            s.parked,
            s.dead_letters,
            s.pending,
            s.limited
        ),
        (0, 0, 0, 0, 0, 0, 0),
        "{s:?}"
    );
}

/// SPEC 3, Flow limits: `back_off` reads the clock and sets the hold in
/// one script, so many back-offs of one flow at once from two handles
/// leave the longest in force, whatever order they ran in.
async fn back_offs_at_once_keep_the_longest(kind: RedisKind) {
    let url = shared_url(kind);
    let ns = fresh_namespace();
    let clock = ManualClock::new(T0);
    let a = connect(&url, &ns, Config::default().clock(clock.clone())).await;
    let b = connect(&url, &ns, Config::default().clock(clock.clone())).await;
    let mut tasks = Vec::new();
    for i in 0..40u64 {
        let q = if i % 2 == 0 { a.clone() } else { b.clone() };
        // The longest, 40 s, is neither first nor last.
        let secs = (i * 17) % 41;
        tasks.push(tokio::spawn(async move {
            q.back_off("f", Duration::from_secs(secs)).await.unwrap();
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let longest = (0..40u64).map(|i| (i * 17) % 41).max().unwrap();
    let limits = a.flow_limits().await.unwrap();
    assert_eq!(limits.len(), 1);
    assert_eq!(limits[0].backoff_until_ms, Some(T0 + longest * 1_000));
    // Later, a shorter one from a later now extends past the old end.
    clock.advance(Duration::from_secs(longest - 1));
    b.back_off("f", Duration::from_secs(2)).await.unwrap();
    let limits = a.flow_limits().await.unwrap();
    assert_eq!(limits[0].backoff_until_ms, Some(T0 + (longest + 1) * 1_000));
}

/// A host's own clock, `offset_ms` off the real time: what a handle that
/// used its own clock while it was wrong read. Not a test clock, so a
/// Redis queue does not use it (SPEC 3, One clock per fleet).
#[derive(Debug, Clone, Copy)]
struct Skewed {
    offset_ms: i64,
}

impl workjournal::Clock for Skewed {
    fn now_ms(&self) -> u64 {
        let now = workjournal::Clock::now_ms(&workjournal::SystemClock);
        now.saturating_add_signed(self.offset_ms)
    }

    fn sleep_until(&self, deadline_ms: u64) -> workjournal::Sleep {
        let real = deadline_ms.saturating_add_signed(-self.offset_ms);
        workjournal::Clock::sleep_until(&workjournal::SystemClock, real)
    }
}

/// SPEC 3, One clock per fleet: handles whose own clocks are 60 s ahead
/// and 60 s behind (and one on a test clock) add timers and claim them in
/// turn; every timer fires at its due time by the fleet's clock, the
/// server's TIME: never early, and never an hour or a minute late.
/// Regression: a handle 60 s ahead raised `{ns}:clock` 60 s above TIME,
/// the next handle on TIME took that for a step back and moved every
/// timer 60 s earlier, so a timer due in 3 s fired at once.
/// `WORKJOURNAL_SKEW_SECS` sets the length (default 60 s).
async fn skewed_handles_keep_the_fleets_timers(kind: RedisKind) {
    let secs: u64 = std::env::var("WORKJOURNAL_SKEW_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60);
    let url = shared_url(kind);
    let ns = fresh_namespace();
    let fleet = connect(&url, &ns, Config::default()).await;
    let ahead = connect(
        &url,
        &ns,
        Config::default().clock(Skewed { offset_ms: 60_000 }),
    )
    .await;
    let behind = connect(
        &url,
        &ns,
        Config::default().clock(Skewed { offset_ms: -60_000 }),
    )
    .await;
    // Each handle tells the fleet's time, whatever its own clock says.
    for h in [&ahead, &behind] {
        let (theirs, fleets) = (h.now_ms().await.unwrap(), fleet.now_ms().await.unwrap());
        assert!(theirs.abs_diff(fleets) < 5_000, "{theirs} vs {fleets}");
    }
    let handles = [&fleet, &ahead, &behind];
    let mut due = std::collections::BTreeMap::new();
    let mut latest_lateness = 0u64;
    let end = Instant::now() + Duration::from_secs(secs);
    let mut round = 0usize;
    while Instant::now() < end || !due.is_empty() {
        assert!(
            Instant::now() < end + Duration::from_secs(30),
            "timers left unclaimed: {due:?}"
        );
        if Instant::now() < end {
            let adder = handles[round % 3];
            let delay = (round as u64 * 397) % 3_000;
            let not_before = fleet.now_ms().await.unwrap() + delay;
            let id = adder
                .add_delayed(NewItem::new(b"timer".to_vec()), not_before)
                .await
                .unwrap()
                .id;
            due.insert(id, not_before);
        }
        let claimer = handles[(round + 1) % 3];
        let got = claimer
            .claim(8, Duration::from_millis(100), ClaimFrom::All)
            .await
            .unwrap();
        let after = fleet.now_ms().await.unwrap();
        for c in got {
            let not_before = due.remove(&c.item.id).expect("a timer of this test");
            assert_eq!(c.item.not_before_ms, Some(not_before), "a timer moved");
            assert!(
                c.claimed_at_ms >= not_before && after >= not_before,
                "item {} handed out {} ms early",
                c.item.id,
                not_before.saturating_sub(c.claimed_at_ms.min(after))
            );
            // Late by scheduling only: nowhere near a minute.
            let late = c.claimed_at_ms - not_before;
            assert!(
                late < 20_000,
                "item {} handed out {late} ms late",
                c.item.id
            );
            latest_lateness = latest_lateness.max(late);
            claimer.ack(c.receipt).await.unwrap();
        }
        round += 1;
    }
    assert!(round > 10, "only {round} rounds");
    eprintln!("{round} rounds, latest lateness {latest_lateness} ms");
}

/// SPEC 3, Outcomes and progress: with a `result_ttl` of zero no
/// `{ns}:prog:<id>` or `{ns}:chunks:<id>` key outlives its item, whether
/// it was acked or dead-lettered and purged. Regression: they stayed for
/// good.
async fn a_zero_result_ttl_leaves_no_progress_or_chunk_keys(kind: RedisKind) {
    let url = shared_url(kind);
    let ns = fresh_namespace();
    let q = connect(&url, &ns, Config::default().result_ttl(Duration::ZERO)).await;
    for i in 0..4u8 {
        q.add(NewItem::new(vec![i])).await.unwrap();
    }
    let held = q.claim(4, Duration::ZERO, ClaimFrom::All).await.unwrap();
    for c in &held {
        q.set_progress(c.receipt, b"half".to_vec()).await.unwrap();
        q.send_chunk(c.receipt, b"part".to_vec()).await.unwrap();
    }
    let conn = raw(&url).await;
    let keys = |pattern: String| {
        let mut conn = conn.clone();
        async move {
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg(pattern)
                .query_async(&mut conn)
                .await
                .unwrap();
            keys
        }
    };
    let prefix = format!("{{{ns}}}:");
    assert_eq!(keys(format!("{prefix}prog:*")).await.len(), 4);
    q.ack(held[0].receipt).await.unwrap();
    q.ack_with_result(held[1].receipt, b"r".to_vec())
        .await
        .unwrap();
    q.dead_letter(held[2].receipt, "bad").await.unwrap();
    q.retry(held[3].receipt, 0).await.unwrap();
    let again = q.claim(1, Duration::ZERO, ClaimFrom::All).await.unwrap();
    q.dead_letter(again[0].receipt, "worse").await.unwrap();
    assert_eq!(q.purge_dead_letters().await.unwrap(), 2);
    assert_eq!(keys(format!("{prefix}prog:*")).await, Vec::<String>::new());
    assert_eq!(
        keys(format!("{prefix}chunks:*")).await,
        Vec::<String>::new()
    );
    assert_eq!(keys(format!("{prefix}item:*")).await, Vec::<String>::new());
}

/// SPEC 3, One clock per fleet: a handle on a test clock (here years
/// behind the server's TIME) beside handles on TIME takes no step from
/// their times, and they none from its: the latest time is kept per clock.
/// Kept in one key, the test clock's first script would have found the
/// latest time years ahead and moved every timer back by years.
async fn a_test_clock_handle_moves_no_timer_of_the_fleet(kind: RedisKind) {
    let url = shared_url(kind);
    let ns = fresh_namespace();
    let fleet = connect(&url, &ns, Config::default()).await;
    let not_before = fleet.now_ms().await.unwrap() + 60_000;
    fleet
        .add_delayed(NewItem::new(b"in a minute".to_vec()), not_before)
        .await
        .unwrap();
    let manual = ManualClock::new(T0);
    let tester = connect(&url, &ns, Config::default().clock(manual.clone())).await;
    assert_eq!(tester.next_due().await.unwrap(), Some(not_before));
    tester.add(NewItem::new(b"now".to_vec())).await.unwrap();
    assert_eq!(fleet.next_due().await.unwrap(), Some(not_before));
    let got = fleet
        .claim(5, Duration::ZERO, ClaimFrom::All)
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].item.payload, b"now");
    assert_eq!(tester.next_due().await.unwrap(), Some(not_before));
}

/// SPEC 3, Clock steps: `stats`, `peek` and `backlog_by_flow` write
/// nothing, so they answer on a read-only replica; a write there fails.
/// Regression: every script wrote `{ns}:clock`, so they failed with
/// `READONLY`.
#[tokio::test]
async fn stats_and_peek_answer_on_a_read_only_replica() {
    let (primary, replica) = primary_with_linked_replica().await;
    let ns = fresh_namespace();
    let q = connect(&primary.url(), &ns, Config::default()).await;
    for flow in ["a", "a", "b"] {
        q.add(NewItem::new(flow.as_bytes().to_vec()).flow(flow))
            .await
            .unwrap();
    }
    q.add_delayed(NewItem::new(b"later".to_vec()), u64::MAX / 4)
        .await
        .unwrap();
    let held = q.claim(1, Duration::ZERO, ClaimFrom::All).await.unwrap();
    assert_eq!(held.len(), 1);
    let options = RedisOptions::default().consumer_name("reader");
    let deadline = Instant::now() + Duration::from_secs(20);
    let r = loop {
        let r = RedisQueue::connect(&replica.url(), &ns, Config::default(), options.clone())
            .await
            .unwrap();
        let s = r.stats().await.unwrap();
        if s.pending == 1 {
            break r;
        }
        assert!(
            Instant::now() < deadline,
            "the replica never caught up: {s:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let s = r.stats().await.unwrap();
    assert_eq!((s.backlog, s.pending, s.delayed), (2, 1, 1));
    assert!(s.oldest_pending_age_ms.is_some());
    let peeked = r.peek(10).await.unwrap();
    assert_eq!(peeked.len(), 2);
    let flows = r.backlog_by_flow(10).await.unwrap();
    assert_eq!(flows.values().sum::<u64>(), 2);
    let err = r.add(NewItem::new(b"no".to_vec())).await.unwrap_err();
    assert!(matches!(err, Error::Backend { .. }), "{err:?}");
    q.ack(held[0].receipt).await.unwrap();
}

/// SPEC 1: `stats().durable` is false on a server without persistence
/// (no append-only file, no save point) and true with `appendonly yes`.
/// Regression: it said true on every Redis, right under the warning that
/// a restart of such a server loses everything.
#[tokio::test]
async fn stats_say_durable_only_when_redis_persists() {
    let bare = RedisServer::start().unwrap();
    let q = connect(&bare.url(), &fresh_namespace(), Config::default()).await;
    assert!(!q.stats().await.unwrap().durable);
    let persisting = RedisServer::start_with(RedisServerOptions {
        aof_always: true,
        ..Default::default()
    })
    .unwrap();
    let q = connect(&persisting.url(), &fresh_namespace(), Config::default()).await;
    assert!(q.stats().await.unwrap().durable);
}

/// SPEC 6, layout 2 (and 3): `tests/fixtures/redis_layout1.rdb` is a Redis 7.0
/// snapshot of namespace `fx` written by a layout-1 build of the command
/// (`add done-me`, run with `cat --keep-stdout`; `add dead-me`, run with
/// `exit 3` and one delivery; `add hold-me`, its `work` killed while it
/// ran; `add wait-me`; `add --at 2030-01-02T03:04:05Z later-me`). It
/// opens at layout 3 with every item where it was, and cancelling works
/// on its items: the pending one is marked and ends at the reclaim of its
/// stale claim, the waiting ones end at once, the dead letter is refused.
#[tokio::test]
async fn a_layout_1_snapshot_migrates_to_layout_2_and_cancels() {
    use workjournal::{CancelOutcome, ItemState, ListQuery};
    let mut server = RedisServer::start().unwrap();
    server.kill();
    std::fs::copy(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/redis_layout1.rdb"
        ),
        server.dir().join("dump.rdb"),
    )
    .unwrap();
    server.restart().unwrap();
    let url = server.url();
    let mut conn = raw(&url).await;
    assert_eq!(layout_of(&mut conn, "fx").await, "1");
    // A minute after the snapshot was made (December 2026).
    let clock = ManualClock::new(1_796_656_600_000);
    let q = connect(&url, "fx", Config::default().clock(clock.clone())).await;
    assert_eq!(layout_of(&mut conn, "fx").await, "3");
    let done = q.outcome(1).await.unwrap().expect("item 1's outcome");
    assert_eq!(done.result(), Some(b"done-me".as_slice()));
    let dead = q.dead_letters(5).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].item.id, 2);
    let pending = q
        .list(ListQuery::new(ItemState::Pending))
        .await
        .unwrap()
        .items;
    assert_eq!(pending.len(), 1);
    assert_eq!(
        (pending[0].item.id, &pending[0].item.payload[..]),
        (3, &b"hold-me"[..])
    );
    let s = q.stats().await.unwrap();
    assert_eq!(
        (s.backlog, s.delayed, s.pending, s.dead_letters),
        (1, 1, 1, 1)
    );

    assert_eq!(q.cancel(3).await.unwrap(), CancelOutcome::Marked);
    assert_eq!(q.cancel(4).await.unwrap(), CancelOutcome::Ended);
    assert_eq!(q.cancel(5).await.unwrap(), CancelOutcome::Ended);
    assert!(matches!(q.cancel(2).await, Err(Error::InvalidInput(_))));
    let r = q.reclaim(Duration::from_secs(30), 10).await.unwrap();
    assert!(r.claimed.is_empty(), "{r:?}");
    assert_eq!(r.cancelled.len(), 1);
    assert_eq!(r.cancelled[0].id, 3);
    for id in [3, 4, 5] {
        let o = q.outcome(id).await.unwrap().expect("a cancelled outcome");
        assert_eq!(o.kind, OutcomeKind::Cancelled, "item {id}");
    }
    let s = q.stats().await.unwrap();
    assert_eq!(
        (s.backlog, s.delayed, s.pending, s.dead_letters),
        (0, 0, 0, 1)
    );
    q.close().await.unwrap();
}

/// SPEC 6, layout 3: `tests/fixtures/redis_layout2.rdb` is a Redis 7.0
/// snapshot of namespace `fx` written by a layout-2 build of the command
/// (the steps of the layout-1 snapshot, then `add cancel-me` and `cancel
/// 6`). It opens at layout 3 with every item where it was and an empty
/// history (the build kept none); an ack and a cancel after the move are
/// then listed and found as finished items (SPEC 3, History).
#[tokio::test]
async fn a_layout_2_snapshot_migrates_to_layout_3_and_keeps_history() {
    use workjournal::{CancelOutcome, ItemState, ListQuery};
    let mut server = RedisServer::start().unwrap();
    server.kill();
    std::fs::copy(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/redis_layout2.rdb"
        ),
        server.dir().join("dump.rdb"),
    )
    .unwrap();
    server.restart().unwrap();
    let url = server.url();
    let mut conn = raw(&url).await;
    assert_eq!(layout_of(&mut conn, "fx").await, "2");
    // A minute after the snapshot was made (December 2026).
    let clock = ManualClock::new(1_796_682_030_000);
    let q = connect(&url, "fx", Config::default().clock(clock.clone())).await;
    assert_eq!(layout_of(&mut conn, "fx").await, "3");
    let s = q.stats().await.unwrap();
    assert_eq!(
        (s.backlog, s.delayed, s.pending, s.dead_letters),
        (1, 1, 1, 1)
    );
    assert_eq!((s.completed, s.cancelled), (0, 0));
    assert_eq!(
        q.outcome(6).await.unwrap().map(|o| o.kind),
        Some(OutcomeKind::Cancelled)
    );
    assert_eq!(q.find(6).await.unwrap(), None);

    let got = q.claim(1, Duration::ZERO, ClaimFrom::All).await.unwrap();
    assert_eq!(got[0].item.id, 4);
    clock.advance(Duration::from_millis(5));
    q.ack_with_result(got[0].receipt, b"ok".to_vec())
        .await
        .unwrap();
    assert_eq!(q.cancel(5).await.unwrap(), CancelOutcome::Ended);
    let done = q
        .list(ListQuery::new(ItemState::Completed))
        .await
        .unwrap()
        .items;
    assert_eq!(done.len(), 1);
    assert_eq!(
        (
            done[0].item.id,
            &done[0].item.payload[..],
            done[0].result.as_deref()
        ),
        (4, &b"wait-me"[..], Some(&b"ok"[..]))
    );
    assert_eq!(done[0].claimed_at_ms, Some(1_796_682_030_000));
    assert_eq!(done[0].finished_at_ms, Some(1_796_682_030_005));
    assert_eq!(done[0].item.deliveries, 1);
    let cancelled = q
        .list(ListQuery::new(ItemState::Cancelled))
        .await
        .unwrap()
        .items;
    assert_eq!(cancelled.len(), 1);
    assert_eq!(
        (cancelled[0].item.id, &cancelled[0].item.payload[..]),
        (5, &b"later-me"[..])
    );
    assert_eq!(cancelled[0].claimed_at_ms, None);
    assert_eq!(
        q.find(4).await.unwrap().map(|l| l.state),
        Some(ItemState::Completed)
    );
    let s = q.stats().await.unwrap();
    assert_eq!((s.completed, s.cancelled), (1, 1));
    q.close().await.unwrap();
}

/// SPEC 3, History on Redis: a namespace holds at most the retention's
/// count plus its slack (1/8 of the count, at least 16) of each state's
/// `{ns}:hist:<id>` hashes, indexed one for one by `{ns}:completed` and
/// `{ns}:cancelled`, however many items finish.
async fn the_history_keys_stay_within_count_and_slack(kind: RedisKind) {
    use workjournal::Retention;
    let url = shared_url(kind);
    let ns = fresh_namespace();
    let config = Config::default()
        .completed_retention(Retention::new(2, Duration::from_secs(3600)))
        .cancelled_retention(Retention::new(2, Duration::from_secs(3600)));
    let q = connect(&url, &ns, config).await;
    let mut conn = raw(&url).await;
    for round in 0..20 {
        let mut ids = Vec::new();
        for k in 0..8 {
            let p = format!("{round}-{k}").into_bytes();
            ids.push(q.add(NewItem::new(p)).await.unwrap().id);
        }
        let got = q.claim(6, Duration::ZERO, ClaimFrom::All).await.unwrap();
        q.ack(got[0].receipt).await.unwrap();
        q.ack_batch(got[1..].iter().map(|c| c.receipt).collect())
            .await
            .unwrap();
        for id in &ids[6..] {
            q.cancel(*id).await.unwrap();
        }
        let mut kept = 0;
        for state in ["completed", "cancelled"] {
            let members: Vec<String> = redis::cmd("ZRANGE")
                .arg(format!("{{{ns}}}:{state}"))
                .arg(0)
                .arg(-1)
                .query_async(&mut conn)
                .await
                .unwrap();
            assert!(members.len() <= 2 + 16, "{state}: {}", members.len());
            for m in &members {
                let id: u64 = m.parse().unwrap();
                let st: Option<String> = redis::cmd("HGET")
                    .arg(format!("{{{ns}}}:hist:{id}"))
                    .arg("st")
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                assert_eq!(st.as_deref(), Some(state), "item {id}");
            }
            kept += members.len();
        }
        // No history hash outside the indexes: the ids of this namespace
        // run from 1, so every hash kept is one of them.
        let mut hashes = 0;
        for id in 1..=ids[7] {
            let n: u64 = redis::cmd("EXISTS")
                .arg(format!("{{{ns}}}:hist:{id}"))
                .query_async(&mut conn)
                .await
                .unwrap();
            hashes += n;
        }
        assert_eq!(hashes, kept as u64);
    }
    let s = q.stats().await.unwrap();
    assert_eq!((s.completed, s.cancelled), (2, 2));
    q.close().await.unwrap();
}
