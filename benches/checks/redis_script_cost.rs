//! Where the Redis backend's time goes, per item, on the server: for
//! add_batch of 100, claim + ack_batch of 100 and single adds from 64
//! producers, the server's microseconds per item in scripts
//! (`INFO commandstats`, `EVALSHA` usec) and the commands the scripts ran
//! per item, beside the same workload in raw Streams commands on the same
//! harness-started `redis-server` (no persistence). The server-side figures
//! do not depend on the client's build, so this check is useful in a dev
//! build too; the rates are wall clock and do.
//!
//! A second table gives the floor under any script layout for the two batch
//! workloads (`layout_bound.lua`: each item one packed value, its lease
//! state another, each read and written once per call for the batch), with
//! every promise kept, without outcomes, and without the pending index too,
//! beside the same raw Streams rows: what the best Redis layout could reach.
//!
//! Run: `cargo bench --bench redis_script_cost --features redis,testing -- [batches]`.
//! Payloads are 256 bytes, as in `benches/run.sh`, or `WJ_PAYLOAD_BYTES`.

#[path = "raw_streams.rs"]
mod raw_streams;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use workjournal::testing::RedisServer;
use workjournal::{ClaimFrom, Config, NewItem, RedisOptions, RedisQueue, WorkQueue};

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Conn = redis::aio::MultiplexedConnection;

const BATCH: usize = 100;
const PRODUCERS: usize = 64;

/// `INFO commandstats` as command -> (calls, usec).
async fn stats(conn: &mut Conn) -> Result<BTreeMap<String, (u64, u64)>, BoxError> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await?;
    let mut out = BTreeMap::new();
    for l in info.lines() {
        let Some(rest) = l.strip_prefix("cmdstat_") else {
            continue;
        };
        let Some((name, fields)) = rest.split_once(':') else {
            continue;
        };
        let field = |k: &str| {
            fields
                .split(',')
                .find_map(|f| f.strip_prefix(k)?.parse::<u64>().ok())
                .unwrap_or(0)
        };
        out.insert(name.to_string(), (field("calls="), field("usec=")));
    }
    Ok(out)
}

async fn reset(conn: &mut Conn) -> Result<(), BoxError> {
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(conn)
        .await?;
    Ok(())
}

/// One row: the workload's rate, server usec per item (all commands the
/// client sent, scripts included), and commands run per item (inside
/// scripts counted one by one).
async fn row(
    admin: &mut Conn,
    items: usize,
    elapsed: Duration,
) -> Result<(f64, f64, f64), BoxError> {
    let mut s = stats(admin).await?;
    s.retain(|n, _| !matches!(n.as_str(), "info" | "config|resetstat"));
    let scripts = ["evalsha", "eval"];
    let scripted = s.keys().any(|n| scripts.contains(&n.as_str()));
    // A script's usec includes the commands it runs, which are counted
    // one by one beside it.
    let usec: u64 = s
        .iter()
        .filter(|(n, _)| !scripted || scripts.contains(&n.as_str()))
        .map(|(_, (_, u))| u)
        .sum();
    let cmds: u64 = s
        .iter()
        .filter(|(n, _)| !scripts.contains(&n.as_str()))
        .map(|(_, (c, _))| c)
        .sum();
    let n = items as f64;
    Ok((n / elapsed.as_secs_f64(), usec as f64 / n, cmds as f64 / n))
}

fn print(name: &str, ours: (f64, f64, f64), raw: (f64, f64, f64)) {
    println!(
        "| {name} | {:.0}/s, {:.2} us, {:.1} cmds | {:.0}/s, {:.2} us, {:.1} cmds | {:.2}x | {:.2}x |",
        ours.0,
        ours.1,
        ours.2,
        raw.0,
        raw.1,
        raw.2,
        ours.0 / raw.0,
        raw.1 / ours.1,
    );
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let batches: usize = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with("--"))
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(300);
    let items = batches * BATCH;
    let server = RedisServer::start()?;
    let url = server.url();
    let client = redis::Client::open(url.as_str())?;
    let mut admin = client.get_multiplexed_async_connection().await?;
    let raw = client.get_multiplexed_async_connection().await?;
    let q = Arc::new(
        RedisQueue::connect(&url, "cost", Config::default(), RedisOptions::default()).await?,
    );
    let bytes: usize = match std::env::var("WJ_PAYLOAD_BYTES") {
        Ok(v) => v.parse()?,
        Err(_) => 256,
    };
    let body = vec![7u8; bytes];
    println!(
        "| workload ({items} items of {bytes} bytes) | redis backend: rate, server us/item, commands/item | raw Streams | rate ratio | server-time ratio |"
    );
    println!("|---|---|---|---|---|");

    // add_batch of 100.
    reset(&mut admin).await?;
    let t = Instant::now();
    for _ in 0..batches {
        q.add_batch(vec![NewItem::new(body.clone()); BATCH]).await?;
    }
    let ours = row(&mut admin, items, t.elapsed()).await?;
    reset(&mut admin).await?;
    let t = Instant::now();
    for _ in 0..batches {
        let mut p = redis::pipe();
        for _ in 0..BATCH {
            p.cmd("XADD").arg("raw").arg("*").arg("p").arg(&body);
        }
        let _: Vec<String> = p.query_async(&mut raw.clone()).await?;
    }
    let add_raw = row(&mut admin, items, t.elapsed()).await?;
    print("add_batch of 100", ours, add_raw);

    // claim + ack_batch of 100, on what was just added.
    let _: () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg("raw")
        .arg("g")
        .arg("0")
        .query_async(&mut admin)
        .await?;
    reset(&mut admin).await?;
    let t = Instant::now();
    for _ in 0..batches {
        let got = q.claim(BATCH, Duration::ZERO, ClaimFrom::All).await?;
        q.ack_batch(got.iter().map(|c| c.receipt).collect()).await?;
    }
    let ours = row(&mut admin, items, t.elapsed()).await?;
    reset(&mut admin).await?;
    let t = Instant::now();
    for _ in 0..batches {
        raw_streams::read_and_ack(&mut raw.clone(), BATCH).await?;
    }
    let claim_raw = row(&mut admin, items, t.elapsed()).await?;
    print("claim + ack_batch of 100", ours, claim_raw);

    // Single adds from 64 producers (combined into shared script calls).
    reset(&mut admin).await?;
    let per = items / PRODUCERS;
    let t = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..PRODUCERS {
        let (q, body) = (q.clone(), body.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..per {
                q.add(NewItem::new(body.clone())).await?;
            }
            Ok::<_, workjournal::Error>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    let ours = row(&mut admin, per * PRODUCERS, t.elapsed()).await?;
    reset(&mut admin).await?;
    let t = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..PRODUCERS {
        let (mut c, body) = (raw.clone(), body.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..per {
                let _: String = redis::cmd("XADD")
                    .arg("raw2")
                    .arg("*")
                    .arg("p")
                    .arg(&body)
                    .query_async(&mut c)
                    .await?;
            }
            Ok::<_, redis::RedisError>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    let theirs = row(&mut admin, per * PRODUCERS, t.elapsed()).await?;
    print("add, 64 producers", ours, theirs);

    // The floor under any layout (`layout_bound.lua`), beside the same raw
    // Streams rows: with every promise, without outcomes, and without the
    // pending index as well.
    let bound = Bound {
        script: redis::Script::new(include_str!("layout_bound.lua")),
        conn: client.get_multiplexed_async_connection().await?,
        body,
    };
    println!();
    println!(
        "| floor of a script layout (one packed value per item) | layout_bound.lua: rate, server us/item, commands/item | raw Streams | rate ratio | server-time ratio |"
    );
    println!("|---|---|---|---|---|");
    for (name, pending, outcomes) in [
        ("every promise", true, true),
        ("no outcomes", true, false),
        ("no outcomes, no pending index", false, false),
    ] {
        let ns = format!("{{bound-{}{}}}:", u8::from(pending), u8::from(outcomes));
        reset(&mut admin).await?;
        let t = Instant::now();
        for _ in 0..batches {
            bound.add(&ns).await?;
        }
        let add = row(&mut admin, items, t.elapsed()).await?;
        print(&format!("add_batch of 100, {name}"), add, add_raw);
        reset(&mut admin).await?;
        let t = Instant::now();
        let mut done = 0;
        while done < items {
            let got = bound.claim_ack(&ns, pending, outcomes).await?;
            if got == 0 {
                return Err(format!("layout_bound: {ns} drained after {done} of {items}").into());
            }
            done += got;
        }
        let claim = row(&mut admin, items, t.elapsed()).await?;
        print(
            &format!("claim + ack_batch of 100, {name}"),
            claim,
            claim_raw,
        );
    }
    Ok(())
}

/// `layout_bound.lua` on its own connection.
struct Bound {
    script: redis::Script,
    conn: Conn,
    body: Vec<u8>,
}

impl Bound {
    fn now() -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
    }

    fn call(
        &self,
        ns: &str,
        op: &str,
        pending: bool,
        outcomes: bool,
    ) -> redis::ScriptInvocation<'_> {
        let mut inv = self.script.key(ns);
        inv.arg(op)
            .arg(Self::now())
            .arg(u8::from(pending))
            .arg(u8::from(outcomes));
        inv
    }

    /// Adds a batch of 100 payloads to namespace `ns`.
    async fn add(&self, ns: &str) -> Result<(), BoxError> {
        let mut inv = self.call(ns, "add", true, true);
        for _ in 0..BATCH {
            inv.arg(&self.body);
        }
        let _: u64 = inv.invoke_async(&mut self.conn.clone()).await?;
        Ok(())
    }

    /// Claims up to 100 items of `ns` and acks them; returns how many.
    async fn claim_ack(&self, ns: &str, pending: bool, outcomes: bool) -> Result<usize, BoxError> {
        let mut inv = self.call(ns, "claim", pending, outcomes);
        inv.arg("c").arg(BATCH);
        let got: Vec<(String, Vec<u8>, u64, u64)> =
            inv.invoke_async(&mut self.conn.clone()).await?;
        if got.is_empty() {
            return Ok(0);
        }
        let mut inv = self.call(ns, "ack", pending, outcomes);
        for (id, _, _, lease) in &got {
            inv.arg(id).arg(lease);
        }
        let acked: usize = inv.invoke_async(&mut self.conn.clone()).await?;
        if acked != got.len() {
            return Err(format!("layout_bound: acked {acked} of {}", got.len()).into());
        }
        Ok(got.len())
    }
}
