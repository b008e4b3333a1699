//! Request-response round trip: a producer adds an item and waits for its
//! outcome while a worker claims it and acks it with a result. p50 / p99 of
//! the round trip go to the report, next to the gateway seed's pattern on
//! raw Redis in the same run: subscribe to a response channel, `ZADD` the
//! request, a worker `BZPOPMIN`s it and `PUBLISH`es the answer.

mod common;

use std::cell::RefCell;
use std::time::{Duration, Instant};

use common::{EMBEDDED, REDIS};
use criterion::{Throughput, criterion_main};
use redis::AsyncConnectionConfig;
use redis::aio::MultiplexedConnection;
use workjournal::{BoxQueue, ClaimFrom, NewItem, WorkQueue};

const RAW: &str = "raw-zadd-pubsub";
const WAIT: Duration = Duration::from_secs(5);

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// A worker on `q` that answers every item with its payload reversed.
fn answer_forever(q: BoxQueue) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let Ok(got) = q.claim(1, WAIT, ClaimFrom::All).await else {
                return;
            };
            for c in got {
                let mut answer = c.item.payload.clone();
                answer.reverse();
                if q.ack_with_result(c.receipt, answer).await.is_err() {
                    return;
                }
            }
        }
    })
}

/// One round trip through the queue: add, then wait for the outcome.
async fn round_trip(q: &BoxQueue, body: &[u8]) -> Duration {
    let start = Instant::now();
    let id = q.add(NewItem::new(body.to_vec())).await.expect("add").id;
    let outcome = q.wait_outcome(id, WAIT).await.expect("wait_outcome");
    assert!(outcome.is_some(), "no answer within {WAIT:?}");
    start.elapsed()
}

/// The gateway's pattern on raw Redis, with a connection of its own for
/// the worker's blocking pop and RESP3 pushes for the subscription.
struct RawRpc {
    conn: MultiplexedConnection,
    pushes: tokio::sync::mpsc::UnboundedReceiver<redis::PushInfo>,
    next: u64,
}

impl RawRpc {
    async fn new(url: &str) -> (RawRpc, tokio::task::JoinHandle<()>) {
        let resp3 = format!("{url}?protocol=resp3");
        let client = redis::Client::open(resp3).expect("redis url");
        let (tx, pushes) = tokio::sync::mpsc::unbounded_channel();
        let config = AsyncConnectionConfig::new().set_push_sender(tx);
        let conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .expect("connect redis");
        let blocking = AsyncConnectionConfig::new().set_response_timeout(None);
        let mut worker = client
            .get_multiplexed_async_connection_with_config(&blocking)
            .await
            .expect("connect redis");
        let task = tokio::spawn(async move {
            loop {
                let popped: redis::RedisResult<Option<(String, String, f64)>> =
                    redis::cmd("BZPOPMIN")
                        .arg("bench:rpc:requests")
                        .arg(1)
                        .query_async(&mut worker)
                        .await;
                match popped {
                    Ok(Some((_, member, _))) => {
                        let answer: String = member.chars().rev().collect();
                        let sent: redis::RedisResult<i64> = redis::cmd("PUBLISH")
                            .arg(format!("bench:rpc:resp:{member}"))
                            .arg(answer)
                            .query_async(&mut worker)
                            .await;
                        if sent.is_err() {
                            return;
                        }
                    }
                    Ok(None) => {}
                    Err(_) => return,
                }
            }
        });
        (
            RawRpc {
                conn,
                pushes,
                next: 0,
            },
            task,
        )
    }

    async fn round_trip(&mut self, body: &[u8]) -> Duration {
        self.next += 1;
        let member = format!("{}:{}", self.next, body.len());
        let channel = format!("bench:rpc:resp:{member}");
        let start = Instant::now();
        self.conn.subscribe(&channel).await.expect("SUBSCRIBE");
        let _: i64 = redis::cmd("ZADD")
            .arg("bench:rpc:requests")
            .arg(self.next)
            .arg(&member)
            .query_async(&mut self.conn)
            .await
            .expect("ZADD");
        loop {
            let push = tokio::time::timeout(WAIT, self.pushes.recv())
                .await
                .expect("no answer in time")
                .expect("push channel closed");
            if push.kind == redis::PushKind::Message {
                break;
            }
        }
        let elapsed = start.elapsed();
        self.conn.unsubscribe(&channel).await.expect("UNSUBSCRIBE");
        elapsed
    }
}

fn benches() {
    let common::Setup {
        mut c,
        rt,
        dir,
        redis: _redis,
        url,
        body,
    } = common::setup();
    let body = body.as_slice();

    // Embedded: one file is one process, so the worker shares the handle.
    let embedded = BoxQueue::new(rt.block_on(common::embedded(dir.path(), "rpc")));
    // Redis: the worker is another consumer on its own handle.
    let redis = BoxQueue::new(rt.block_on(common::redis(&url, "rpc")));
    let redis_worker = BoxQueue::new(rt.block_on(common::redis(&url, "rpc")));
    let workers = rt.block_on(async {
        vec![
            answer_forever(embedded.clone()),
            answer_forever(redis_worker.clone()),
        ]
    });
    let (raw, raw_worker) = rt.block_on(RawRpc::new(&url));
    let raw = RefCell::new(raw);
    let samples: RefCell<Vec<(&str, f64)>> = RefCell::new(Vec::new());

    let mut g = c.benchmark_group("rpc");
    g.throughput(Throughput::Elements(1));
    let keep = |name: &'static str, d: Duration| samples.borrow_mut().push((name, ms(d)));
    for (name, q) in [(EMBEDDED, &embedded), (REDIS, &redis)] {
        g.bench_function(name, |b| {
            b.iter_custom(|n| {
                (0..n)
                    .map(|_| {
                        let d = rt.block_on(round_trip(q, body));
                        keep(name, d);
                        d
                    })
                    .sum()
            })
        });
    }
    g.bench_function(RAW, |b| {
        b.iter_custom(|n| {
            (0..n)
                .map(|_| {
                    let d = rt.block_on(raw.borrow_mut().round_trip(body));
                    keep(RAW, d);
                    d
                })
                .sum()
        })
    });
    g.finish();

    for w in workers {
        w.abort();
    }
    raw_worker.abort();
    common::record_percentiles_of("rpc", &[EMBEDDED, REDIS, RAW], &samples.into_inner());
}

criterion_main!(benches);
