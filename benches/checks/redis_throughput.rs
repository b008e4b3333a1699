//! One quick throughput run of the Redis backend next to raw Redis Streams
//! commands on the same harness-started `redis-server` (no persistence):
//! `add_batch` and claim + `ack_batch` in batches of 100, against pipelined
//! `XADD` and `XREADGROUP` + `XACK` of 100 entries.
//!
//! Run: `cargo bench --bench redis_throughput --features redis,testing -- [items]`;
//! with `WJ_TLS=1` both run over `rediss://` (the harness's test CA).

#[path = "raw_streams.rs"]
mod raw_streams;

use std::time::{Duration, Instant};

use workjournal::testing::{RedisServer, RedisServerOptions};
use workjournal::{ClaimFrom, Config, NewItem, RedisOptions, RedisQueue, WorkQueue};

const BATCH: usize = 100;

fn rate(n: usize, took: Duration) -> f64 {
    n as f64 / took.as_secs_f64()
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let items: usize = std::env::args()
        // `cargo bench` passes `--bench`: the first other argument.
        .skip(1)
        .find(|a| !a.starts_with("--"))
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(50_000);
    let tls = std::env::var_os("WJ_TLS").is_some();
    let server = RedisServer::start_with(RedisServerOptions {
        tls,
        ..Default::default()
    })?;
    let (url, ca) = match (server.tls_url(), server.certificates()) {
        (Some(url), Some(certs)) => (url, Some(certs.ca_pem().to_vec())),
        _ => (server.url(), None),
    };
    let payload = vec![7u8; 64];

    let mut options = RedisOptions::default();
    if let Some(ca) = &ca {
        options = options.tls_ca_pem(ca.clone());
    }
    let q = RedisQueue::connect(&url, "bench", Config::default(), options).await?;
    let started = Instant::now();
    for _ in 0..items / BATCH {
        let batch = (0..BATCH).map(|_| NewItem::new(payload.clone())).collect();
        q.add_batch(batch).await?;
    }
    let add = rate(items, started.elapsed());
    let started = Instant::now();
    let (mut done, mut in_claim) = (0, Duration::ZERO);
    while done < items {
        let t = Instant::now();
        let got = q.claim(BATCH, Duration::ZERO, ClaimFrom::All).await?;
        in_claim += t.elapsed();
        if got.is_empty() {
            break;
        }
        done += got.len();
        q.ack_batch(got.into_iter().map(|c| c.receipt).collect())
            .await?;
    }
    let took = started.elapsed();
    let claim_ack = rate(done, took);
    let (claim_only, ack_only) = (rate(done, in_claim), rate(done, took - in_claim));

    let client = match ca {
        Some(ca) => redis::Client::build_with_tls(
            url.as_str(),
            redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(ca),
            },
        )?,
        None => redis::Client::open(url.as_str())?,
    };
    let mut conn = client.get_multiplexed_async_connection().await?;
    let _: () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg("raw")
        .arg("g")
        .arg("0")
        .arg("MKSTREAM")
        .query_async(&mut conn)
        .await?;
    let started = Instant::now();
    for _ in 0..items / BATCH {
        let mut p = redis::pipe();
        for _ in 0..BATCH {
            p.cmd("XADD")
                .arg("raw")
                .arg("*")
                .arg("p")
                .arg(&payload)
                .ignore();
        }
        let _: () = p.query_async(&mut conn).await?;
    }
    let raw_add = rate(items, started.elapsed());
    let started = Instant::now();
    let mut raw_done = 0;
    while raw_done < items {
        let n = raw_streams::read_and_ack(&mut conn, BATCH).await?;
        if n == 0 {
            break;
        }
        raw_done += n;
    }
    let raw_read = rate(raw_done, started.elapsed());

    if std::env::var_os("WJ_COMMANDSTATS").is_some() {
        let stats: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut conn)
            .await?;
        println!("{stats}");
    }
    println!(
        "items: {items}, batches of {BATCH}, payload 64 bytes, redis-server without persistence{}",
        if tls { ", over TLS" } else { "" }
    );
    println!("add_batch:            {add:>10.0} items/s");
    println!("raw pipelined XADD:   {raw_add:>10.0} items/s");
    println!("claim + ack_batch:    {claim_ack:>10.0} items/s");
    println!("raw XREADGROUP+XACK:  {raw_read:>10.0} items/s");
    println!(
        "  (of claim + ack_batch: claim alone {claim_only:.0} items/s, ack_batch alone {ack_only:.0} items/s)"
    );
    Ok(())
}
