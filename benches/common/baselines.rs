//! The baselines measured beside workjournal in the same run.
//!
//! - [`Fsync`]: the physical limit. One `write` of the bytes a durable
//!   commit must carry (at least one 4 KiB page) and one `fdatasync`, per
//!   commit point of the workload.
//! - [`RawRedb`]: the floor under the embedded backend: one redb insert per
//!   durable commit, nothing else.
//! - [`Sqlite`]: a queue in SQLite, WAL, `synchronous=FULL`, the same
//!   operations in SQL. The strongest embedded baseline.
//! - [`Streams`]: the floor under the Redis backend: plain `XADD`,
//!   `XREADGROUP` and `XACK` on a stream with one consumer group.

use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::AsyncCommands;
use redis::streams::{StreamReadOptions, StreamReadReply};
use rusqlite::{Connection, TransactionBehavior, params};

/// Bytes a commit of `items` payloads of `bytes` each carries, rounded up to
/// whole 4 KiB pages.
fn commit_bytes(items: usize, bytes: usize) -> usize {
    (items * bytes).div_ceil(4096).max(1) * 4096
}

/// A preallocated log file written in place: write + `fdatasync` per commit.
pub struct Fsync {
    file: File,
    buf: Vec<u8>,
    pos: u64,
}

/// Size of the preallocated log, in bytes; writes wrap around inside it so
/// that `fdatasync` never has to extend the file (which would also write
/// metadata, and is not what a log-structured store pays per commit).
const FSYNC_LOG_BYTES: u64 = 64 * 1024 * 1024;

impl Fsync {
    /// A log in `dir`.
    pub fn new(dir: &Path) -> Fsync {
        let mut file = File::create(dir.join("fsync.log")).expect("create fsync log");
        let chunk = vec![0u8; 1 << 20];
        for _ in 0..(FSYNC_LOG_BYTES >> 20) {
            file.write_all(&chunk).expect("preallocate fsync log");
        }
        file.sync_all().expect("sync fsync log");
        Fsync {
            file,
            buf: vec![0x5a; 1 << 20],
            pos: 0,
        }
    }

    /// `iters` commits of `items` payloads of `bytes` each.
    pub fn commits(&mut self, iters: u64, items: usize, bytes: usize) -> Duration {
        let n = commit_bytes(items, bytes);
        if self.buf.len() < n {
            self.buf.resize(n, 0x5a);
        }
        let start = Instant::now();
        for _ in 0..iters {
            if self.pos + n as u64 > FSYNC_LOG_BYTES {
                self.pos = 0;
            }
            self.file.seek(SeekFrom::Start(self.pos)).expect("seek");
            self.file.write_all(&self.buf[..n]).expect("write");
            self.file.sync_data().expect("fdatasync");
            self.pos += n as u64;
        }
        start.elapsed()
    }

    /// Durable commits per second with one 4 KiB page each, over `secs`.
    pub fn rate(&mut self, secs: f64) -> f64 {
        let start = Instant::now();
        let mut n = 0u64;
        while start.elapsed().as_secs_f64() < secs {
            self.commits(1, 1, 4096);
            n += 1;
        }
        n as f64 / start.elapsed().as_secs_f64()
    }
}

const REDB_TABLE: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new("items");

/// A redb file with one table, id -> payload.
pub struct RawRedb {
    db: redb::Database,
    next: u64,
}

impl RawRedb {
    /// A fresh file in `dir`.
    pub fn new(dir: &Path) -> RawRedb {
        let db = redb::Database::create(dir.join("raw.redb")).expect("create redb");
        RawRedb { db, next: 0 }
    }

    /// `iters` durable commits (`Durability::Immediate`, redb's default)
    /// of `items` inserts each.
    pub fn commits(&mut self, iters: u64, items: usize, body: &[u8]) -> Duration {
        let start = Instant::now();
        for _ in 0..iters {
            let txn = self.db.begin_write().expect("begin");
            {
                let mut t = txn.open_table(REDB_TABLE).expect("open table");
                for _ in 0..items {
                    self.next += 1;
                    t.insert(self.next, body).expect("insert");
                }
            }
            txn.commit().expect("commit");
        }
        start.elapsed()
    }
}

/// A work queue in SQLite: one table, a partial index over the ready items,
/// WAL with `synchronous=FULL` (every commit fsyncs the WAL).
pub struct Sqlite {
    conn: Arc<Mutex<Connection>>,
    lease: u64,
}

const SQLITE_SCHEMA: &str = "
PRAGMA journal_mode = WAL;
PRAGMA synchronous = FULL;
CREATE TABLE IF NOT EXISTS items (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    flow TEXT NOT NULL DEFAULT '',
    payload BLOB NOT NULL,
    enqueued_at_ms INTEGER NOT NULL,
    claimed_at_ms INTEGER,
    lease INTEGER,
    deliveries INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS ready ON items(id) WHERE lease IS NULL;
";

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl Sqlite {
    /// A fresh database in `dir`, or the one at `path` if given.
    pub fn open(path: &Path) -> Sqlite {
        let conn = Connection::open(path).expect("open sqlite");
        conn.execute_batch(SQLITE_SCHEMA).expect("sqlite schema");
        let mode: String = conn
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .expect("journal mode");
        assert_eq!(mode, "wal");
        Sqlite {
            conn: Arc::new(Mutex::new(conn)),
            lease: 0,
        }
    }

    /// A fresh database in `dir`.
    pub fn new(dir: &Path) -> Sqlite {
        Sqlite::open(&dir.join("queue.sqlite"))
    }

    /// As [`Sqlite::open`], for a file other processes write at the same
    /// time: a writer waits up to 10 s for the lock instead of failing.
    pub fn open_shared(path: &Path) -> Sqlite {
        let s = Sqlite::open(path);
        s.conn
            .lock()
            .expect("sqlite lock")
            .busy_timeout(Duration::from_secs(10))
            .expect("busy timeout");
        s
    }

    fn insert(conn: &mut Connection, items: usize, body: &[u8]) {
        // IMMEDIATE, as a queue's writers should: a deferred transaction
        // that read before writing cannot wait for the other writer (SQLite
        // answers SQLITE_BUSY at once rather than risk a deadlock), which
        // broke the two-process baseline now and then.
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .expect("begin");
        {
            let mut st = tx
                .prepare_cached("INSERT INTO items (payload, enqueued_at_ms) VALUES (?1, ?2)")
                .expect("prepare insert");
            let now = now_ms();
            for _ in 0..items {
                st.execute(params![body, now]).expect("insert");
            }
        }
        tx.commit().expect("commit");
    }

    /// `iters` transactions of `items` inserts each.
    pub fn adds(&self, iters: u64, items: usize, body: &[u8]) -> Duration {
        let mut conn = self.conn.lock().expect("sqlite lock");
        let start = Instant::now();
        for _ in 0..iters {
            Sqlite::insert(&mut conn, items, body);
        }
        start.elapsed()
    }

    /// `producers` threads sharing the connection (a mutex serialises them,
    /// as an in-process pool of one writer would), each doing `iters`
    /// single-insert transactions.
    pub fn adds_concurrent(&self, producers: usize, iters: u64, body: &[u8]) -> Duration {
        let barrier = Arc::new(std::sync::Barrier::new(producers + 1));
        let threads: Vec<_> = (0..producers)
            .map(|_| {
                let (conn, barrier, body) = (self.conn.clone(), barrier.clone(), body.to_vec());
                std::thread::spawn(move || {
                    barrier.wait();
                    for _ in 0..iters {
                        let mut c = conn.lock().expect("sqlite lock");
                        Sqlite::insert(&mut c, 1, &body);
                    }
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        for t in threads {
            t.join().expect("producer thread");
        }
        start.elapsed()
    }

    /// Put `n` items in the queue, 1000 per transaction.
    pub fn fill(&self, n: u64, body: &[u8]) {
        let mut conn = self.conn.lock().expect("sqlite lock");
        let mut left = n;
        while left > 0 {
            let k = left.min(1000);
            Sqlite::insert(&mut conn, k as usize, body);
            left -= k;
        }
    }

    /// Claim up to `batch` ready items (one transaction) and return
    /// (id, lease) of each.
    fn claim(&mut self, conn: &mut Connection, batch: usize) -> Vec<(i64, i64)> {
        self.lease += 1;
        let lease = self.lease as i64;
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .expect("begin");
        let got = {
            let mut st = tx
                .prepare_cached(
                    "UPDATE items SET lease = ?1, claimed_at_ms = ?2, deliveries = deliveries + 1
                     WHERE id IN (SELECT id FROM items WHERE lease IS NULL ORDER BY id LIMIT ?3)
                     RETURNING id, payload, deliveries",
                )
                .expect("prepare claim");
            let rows = st
                .query_map(params![lease, now_ms(), batch as i64], |r| {
                    let _payload: Vec<u8> = r.get(1)?;
                    Ok((r.get::<_, i64>(0)?, lease))
                })
                .expect("claim");
            rows.collect::<Result<Vec<_>, _>>().expect("claim rows")
        };
        tx.commit().expect("commit claim");
        got
    }

    /// Claim up to `batch` items and keep them claimed; returns how many.
    pub fn claim_only(&mut self, batch: usize) -> usize {
        let conn = self.conn.clone();
        let mut conn = conn.lock().expect("sqlite lock");
        self.claim(&mut conn, batch).len()
    }

    /// Claim up to `batch` items and ack them; returns how many.
    pub fn claim_ack_once(&mut self, batch: usize) -> usize {
        let conn = self.conn.clone();
        let mut conn = conn.lock().expect("sqlite lock");
        let got = self.claim(&mut conn, batch);
        Sqlite::ack(&mut conn, &got);
        got.len()
    }

    fn ack(conn: &mut Connection, receipts: &[(i64, i64)]) {
        let tx = conn.transaction().expect("begin");
        {
            let mut st = tx
                .prepare_cached("DELETE FROM items WHERE id = ?1 AND lease = ?2")
                .expect("prepare ack");
            for (id, lease) in receipts {
                assert_eq!(st.execute(params![id, lease]).expect("ack"), 1);
            }
        }
        tx.commit().expect("commit ack");
    }

    /// `iters` rounds of claim `batch` + ack them, on a filled queue.
    pub fn claim_ack(&mut self, batch: usize, iters: u64, body: &[u8]) -> Duration {
        self.fill(iters * batch as u64, body);
        let conn = self.conn.clone();
        let mut conn = conn.lock().expect("sqlite lock");
        let start = Instant::now();
        for _ in 0..iters {
            let got = self.claim(&mut conn, batch);
            assert_eq!(got.len(), batch, "sqlite backlog ran dry");
            Sqlite::ack(&mut conn, &got);
        }
        start.elapsed()
    }

    /// One lifecycle: insert, claim, ack. Returns its latency.
    pub fn lifecycle(&mut self, body: &[u8]) -> Duration {
        let conn = self.conn.clone();
        let mut conn = conn.lock().expect("sqlite lock");
        let start = Instant::now();
        Sqlite::insert(&mut conn, 1, body);
        let got = self.claim(&mut conn, 1);
        assert_eq!(got.len(), 1);
        Sqlite::ack(&mut conn, &got);
        start.elapsed()
    }
}

/// A stream `bench:{name}` with consumer group `g`, on a multiplexed
/// connection (concurrent callers are pipelined on one socket).
pub struct Streams {
    conn: redis::aio::MultiplexedConnection,
    key: String,
}

impl Streams {
    /// Connect to `url` and create the stream and its group.
    pub async fn new(url: &str, name: &str) -> Streams {
        let client = redis::Client::open(url).expect("redis url");
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .expect("connect redis");
        let key = format!("bench:{name}");
        let _: () = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(&key)
            .arg("g")
            .arg("$")
            .arg("MKSTREAM")
            .query_async(&mut conn)
            .await
            .expect("XGROUP CREATE");
        Streams { conn, key }
    }

    /// `iters` single `XADD`s, each awaited.
    pub async fn add_1(&self, iters: u64, body: &[u8]) -> Duration {
        let mut c = self.conn.clone();
        let start = Instant::now();
        for _ in 0..iters {
            let _: String = c.xadd(&self.key, "*", &[("p", body)]).await.expect("XADD");
        }
        start.elapsed()
    }

    /// `producers` tasks doing `iters` `XADD`s each; the multiplexed
    /// connection pipelines what is in flight together.
    pub async fn add_concurrent(&self, producers: usize, iters: u64, body: &[u8]) -> Duration {
        let body: Arc<[u8]> = body.into();
        let barrier = Arc::new(tokio::sync::Barrier::new(producers + 1));
        let tasks: Vec<_> = (0..producers)
            .map(|_| {
                let (mut c, key, body, barrier) = (
                    self.conn.clone(),
                    self.key.clone(),
                    body.clone(),
                    barrier.clone(),
                );
                tokio::spawn(async move {
                    barrier.wait().await;
                    for _ in 0..iters {
                        let _: String = c.xadd(&key, "*", &[("p", &body[..])]).await.expect("XADD");
                    }
                })
            })
            .collect();
        barrier.wait().await;
        let start = Instant::now();
        for t in tasks {
            t.await.expect("producer task");
        }
        start.elapsed()
    }

    /// `iters` pipelines of `size` `XADD`s.
    pub async fn add_batch(&self, size: usize, iters: u64, body: &[u8]) -> Duration {
        let mut c = self.conn.clone();
        let start = Instant::now();
        for _ in 0..iters {
            let mut p = redis::pipe();
            for _ in 0..size {
                p.xadd(&self.key, "*", &[("p", body)]).ignore();
            }
            let _: () = p.query_async(&mut c).await.expect("XADD pipeline");
        }
        start.elapsed()
    }

    /// Fill the stream with `n` entries, 1000 per pipeline (not timed).
    pub async fn fill(&self, n: u64, body: &[u8]) {
        let mut left = n;
        while left > 0 {
            let k = left.min(1000);
            self.add_batch(k as usize, 1, body).await;
            left -= k;
        }
    }

    async fn claim(&self, c: &mut redis::aio::MultiplexedConnection, count: usize) -> Vec<String> {
        let opts = StreamReadOptions::default().group("g", "c").count(count);
        let reply: StreamReadReply = c
            .xread_options(&[&self.key], &[">"], &opts)
            .await
            .expect("XREADGROUP");
        reply
            .keys
            .into_iter()
            .flat_map(|k| k.ids.into_iter().map(|e| e.id))
            .collect()
    }

    /// `iters` rounds of `XREADGROUP COUNT batch` + one `XACK` of all of them.
    pub async fn claim_ack(&self, batch: usize, iters: u64, body: &[u8]) -> Duration {
        self.fill(iters * batch as u64, body).await;
        let mut c = self.conn.clone();
        let start = Instant::now();
        for _ in 0..iters {
            let ids = self.claim(&mut c, batch).await;
            assert_eq!(ids.len(), batch, "stream ran dry");
            let n: u64 = c.xack(&self.key, "g", &ids).await.expect("XACK");
            assert_eq!(n, batch as u64);
        }
        start.elapsed()
    }

    /// One lifecycle: `XADD`, `XREADGROUP COUNT 1`, `XACK`.
    pub async fn lifecycle(&self, body: &[u8]) -> Duration {
        let mut c = self.conn.clone();
        let start = Instant::now();
        let _: String = c.xadd(&self.key, "*", &[("p", body)]).await.expect("XADD");
        let ids = self.claim(&mut c, 1).await;
        assert_eq!(ids.len(), 1);
        let _: u64 = c.xack(&self.key, "g", &ids).await.expect("XACK");
        start.elapsed()
    }
}
