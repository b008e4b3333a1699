//! A real Redis Cluster for tests (feature `testing` + `redis`): primaries
//! and replicas, each a [`RedisServer`] with `cluster-enabled yes` on a free
//! loopback port with its own temp dir, so every node dies with the test
//! process as a single server does.
//!
//! The harness builds the cluster itself, without `redis-cli --cluster`:
//! each primary is given an equal range of the 16 384 slots
//! (`CLUSTER ADDSLOTSRANGE`), every node meets the first (`CLUSTER MEET`),
//! each replica follows its primary (`CLUSTER REPLICATE`), and `start`
//! returns once every node reports `cluster_state:ok` and every replica's
//! link to its primary is up.
//!
//! With [`RedisClusterOptions::tls`] every node also serves TLS with one
//! throwaway CA, and the nodes talk to each other (cluster bus and
//! replication) over TLS only; the plain ports stay open for the harness.

use std::io;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::config::Config;
use crate::queue::BoxFuture;
use crate::testing::redis_server::fresh_queue;
use crate::testing::{Factory, RedisServer, RedisServerOptions, Subject, TestCertificates};

/// The number of hash slots of a Redis Cluster.
const SLOTS: u16 = 16_384;

/// How long the cluster may take to form or to fail over.
const SETTLE: Duration = Duration::from_secs(20);

/// How a [`RedisCluster`] is started.
#[derive(Debug, Clone)]
pub struct RedisClusterOptions {
    /// Primaries, each owning an equal share of the slots. Default: 3.
    pub primaries: usize,
    /// Replicas of each primary. Default: 1.
    pub replicas_per_primary: usize,
    /// Every node keeps an append-only file with `appendfsync always`.
    /// Default: false.
    pub aof_always: bool,
    /// Every node serves TLS too ([`RedisCluster::tls_url`]), with a server
    /// certificate of one throwaway CA ([`RedisCluster::certificates`]),
    /// and the nodes talk to each other over TLS. Client certificates are
    /// optional. Default: false.
    pub tls: bool,
}

impl Default for RedisClusterOptions {
    fn default() -> Self {
        RedisClusterOptions {
            primaries: 3,
            replicas_per_primary: 1,
            aof_always: false,
            tls: false,
        }
    }
}

/// A running Redis Cluster of [`RedisServer`] nodes. Dropping it kills
/// every node and removes their dirs.
#[derive(Debug)]
pub struct RedisCluster {
    /// Primaries first (in slot order), then the replicas of primary 0, 1, ...
    nodes: Vec<RedisServer>,
    primaries: usize,
}

fn other(what: impl Into<String>) -> io::Error {
    io::Error::other(what.into())
}

fn redis_io(what: &str, port: u16, e: redis::RedisError) -> io::Error {
    other(format!("{what} on cluster node 127.0.0.1:{port}: {e}"))
}

/// Run `cmd` on the node at `port`.
fn query<T: redis::FromRedisValue>(port: u16, cmd: &redis::Cmd) -> io::Result<T> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .map_err(|e| redis_io("open", port, e))?;
    let mut conn = client
        .get_connection_with_timeout(Duration::from_secs(2))
        .map_err(|e| redis_io("connect", port, e))?;
    cmd.query(&mut conn)
        .map_err(|e| redis_io("command", port, e))
}

/// The value of `field` in an `INFO`-style text (`field:value` lines).
fn field(text: &str, name: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(|v| v.trim().to_string())
}

fn cluster_info(port: u16) -> io::Result<String> {
    query(port, redis::cmd("CLUSTER").arg("INFO"))
}

/// Poll `ok` every 20 ms until it holds, or fail after [`SETTLE`] saying `what`.
fn settle(what: &str, mut ok: impl FnMut() -> io::Result<bool>) -> io::Result<()> {
    let started = Instant::now();
    loop {
        if ok()? {
            return Ok(());
        }
        if started.elapsed() > SETTLE {
            return Err(other(format!(
                "redis cluster: {what} not reached within {} s",
                SETTLE.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl RedisCluster {
    /// Start a cluster of 3 primaries with 1 replica each.
    ///
    /// # Errors
    ///
    /// As [`RedisServer::start`]; an error naming the step if the cluster
    /// does not form within 20 s.
    pub fn start() -> io::Result<RedisCluster> {
        Self::start_with(RedisClusterOptions::default())
    }

    /// Start a cluster with `options`.
    ///
    /// # Errors
    ///
    /// As [`RedisCluster::start`]; `InvalidInput` for no primaries.
    pub fn start_with(options: RedisClusterOptions) -> io::Result<RedisCluster> {
        if options.primaries == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a redis cluster needs at least one primary",
            ));
        }
        let total = options.primaries * (1 + options.replicas_per_primary);
        let mut nodes: Vec<RedisServer> = Vec::with_capacity(total);
        for _ in 0..total {
            // With TLS the first node makes the certificates (in its dir,
            // so they go with it) and every other node serves them too.
            let shared = nodes.first().and_then(|n| n.certificates().cloned());
            nodes.push(RedisServer::start_with(RedisServerOptions {
                aof_always: options.aof_always,
                cluster: true,
                tls: options.tls,
                tls_certificates: shared,
                ..Default::default()
            })?);
        }
        let cluster = RedisCluster {
            nodes,
            primaries: options.primaries,
        };
        let share = SLOTS / options.primaries as u16;
        for (i, node) in cluster.nodes[..options.primaries].iter().enumerate() {
            let first = share * i as u16;
            let last = if i + 1 == options.primaries {
                SLOTS - 1
            } else {
                first + share - 1
            };
            let _: () = query(
                node.port(),
                redis::cmd("CLUSTER")
                    .arg("ADDSLOTSRANGE")
                    .arg(first)
                    .arg(last),
            )?;
        }
        // Over TLS the cluster bus listens at the TLS port + 10 000, and
        // `CLUSTER MEET` derives the bus port from the port it is given.
        let seed = cluster.nodes[0]
            .tls_port()
            .unwrap_or(cluster.nodes[0].port());
        for node in &cluster.nodes[1..] {
            let _: () = query(
                node.port(),
                redis::cmd("CLUSTER").arg("MEET").arg("127.0.0.1").arg(seed),
            )?;
        }
        settle("every node knowing every other", || {
            for node in &cluster.nodes {
                let known = field(&cluster_info(node.port())?, "cluster_known_nodes");
                if known != Some(total.to_string()) {
                    return Ok(false);
                }
            }
            Ok(true)
        })?;
        for (j, replica) in cluster.nodes[options.primaries..].iter().enumerate() {
            let primary = &cluster.nodes[j / options.replicas_per_primary.max(1)];
            let id: String = query(primary.port(), redis::cmd("CLUSTER").arg("MYID"))?;
            // A replica may not know the primary's id yet a moment after
            // the meet: retry until it does.
            settle("a replica following its primary", || {
                Ok(query::<()>(
                    replica.port(),
                    redis::cmd("CLUSTER").arg("REPLICATE").arg(&id),
                )
                .is_ok())
            })?;
        }
        cluster.wait_ready()?;
        Ok(cluster)
    }

    /// Wait until every running node reports `cluster_state:ok` and every
    /// replica's link to its primary is up.
    ///
    /// # Errors
    ///
    /// An error naming the step after 20 s.
    pub fn wait_ready(&self) -> io::Result<()> {
        settle("cluster_state:ok on every node", || {
            for node in self.nodes.iter().filter(|n| n.is_running()) {
                if field(&cluster_info(node.port())?, "cluster_state").as_deref() != Some("ok") {
                    return Ok(false);
                }
                let info: String = query(node.port(), redis::cmd("INFO").arg("replication"))?;
                if field(&info, "role").as_deref() == Some("slave")
                    && field(&info, "master_link_status").as_deref() != Some("up")
                {
                    return Ok(false);
                }
            }
            Ok(true)
        })
    }

    /// `redis+cluster://127.0.0.1:<port>/` of the first node: a URL the
    /// queue connects to the whole cluster with.
    pub fn url(&self) -> String {
        format!("redis+cluster://127.0.0.1:{}/", self.nodes[0].port())
    }

    /// `rediss+cluster://127.0.0.1:<tls port>/` of the first node with
    /// [`RedisClusterOptions::tls`], else `None`. Every node's certificate
    /// is signed by [`certificates`](Self::certificates)' CA.
    pub fn tls_url(&self) -> Option<String> {
        self.nodes[0]
            .tls_port()
            .map(|p| format!("rediss+cluster://127.0.0.1:{p}/"))
    }

    /// The test CA and certificates with [`RedisClusterOptions::tls`], else
    /// `None`.
    pub fn certificates(&self) -> Option<&TestCertificates> {
        self.nodes[0].certificates()
    }

    /// The number of primaries the cluster was started with.
    pub fn primaries(&self) -> usize {
        self.primaries
    }

    /// The nodes: the primaries as started first, then their replicas.
    /// After a failover a node's role may differ; see [`primary_of`](Self::primary_of).
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// The index in [`nodes`](Self::nodes) of the node that now serves
    /// `key`'s slot as primary, once every running node says the same:
    /// a node just restarted, or one that missed a failover, may still name
    /// the old owner for a moment (polled for up to 20 s).
    ///
    /// # Errors
    ///
    /// An error if the running nodes do not agree on a primary within 20 s.
    pub fn primary_of(&self, key: &str) -> io::Result<usize> {
        let port = self.running_port()?;
        let slot: i64 = query(port, redis::cmd("CLUSTER").arg("KEYSLOT").arg(key))?;
        let mut found = None;
        settle(
            &format!("every node naming one primary of slot {slot}"),
            || {
                let mut views = self
                    .nodes
                    .iter()
                    .filter(|n| n.is_running())
                    .map(|n| self.primary_in_view_of(n.port(), slot).ok().flatten());
                let first = views.next().flatten();
                let agreed = first.is_some() && views.all(|v| v == first);
                found = first;
                Ok(agreed)
            },
        )?;
        found.ok_or_else(|| other(format!("no node serves slot {slot} as primary")))
    }

    /// The index of the primary of `slot` in the `CLUSTER SLOTS` reply of
    /// the node at `port`; `None` if it names none of [`nodes`](Self::nodes).
    fn primary_in_view_of(&self, port: u16, slot: i64) -> io::Result<Option<usize>> {
        use redis::Value;
        // CLUSTER SLOTS: [first, last, [ip, port, id], replicas...] per range.
        let ranges: Value = query(port, redis::cmd("CLUSTER").arg("SLOTS"))?;
        let Value::Array(ranges) = ranges else {
            return Err(other("CLUSTER SLOTS answered no array"));
        };
        for range in &ranges {
            let Value::Array(r) = range else { continue };
            let (Some(Value::Int(first)), Some(Value::Int(last)), Some(Value::Array(primary))) =
                (r.first(), r.get(1), r.get(2))
            else {
                continue;
            };
            if !(*first..=*last).contains(&slot) {
                continue;
            }
            if let Some(Value::Int(p)) = primary.get(1) {
                return Ok(self.nodes.iter().position(|n| i64::from(n.port()) == *p));
            }
        }
        Ok(None)
    }

    /// The index of a running replica of the node at `primary` (by its
    /// `INFO replication`).
    ///
    /// # Errors
    ///
    /// An error if no running node replicates it.
    pub fn replica_of(&self, primary: usize) -> io::Result<usize> {
        let port = self
            .nodes
            .get(primary)
            .map(RedisServer::port)
            .ok_or_else(|| other(format!("no cluster node {primary}")))?;
        // Over TLS the replica names its primary's TLS port.
        let ports = [Some(port), self.nodes[primary].tls_port()].map(|p| p.map(|p| p.to_string()));
        self.nodes
            .iter()
            .position(|n| {
                n.is_running()
                    && query::<String>(n.port(), redis::cmd("INFO").arg("replication"))
                        .ok()
                        .is_some_and(|info| {
                            field(&info, "role").as_deref() == Some("slave")
                                && ports.contains(&field(&info, "master_port"))
                        })
            })
            .ok_or_else(|| other(format!("cluster node {primary} has no running replica")))
    }

    /// True if the running node at `index` says it is a primary (`role:master`).
    ///
    /// # Errors
    ///
    /// The node's error if it does not answer.
    pub fn is_primary(&self, index: usize) -> io::Result<bool> {
        let port = self
            .nodes
            .get(index)
            .map(RedisServer::port)
            .ok_or_else(|| other(format!("no cluster node {index}")))?;
        let info: String = query(port, redis::cmd("INFO").arg("replication"))?;
        Ok(field(&info, "role").as_deref() == Some("master"))
    }

    /// Kill the node at `index` in [`nodes`](Self::nodes) with `SIGKILL`
    /// (a crash); its dir, append-only file and `nodes.conf` are kept for
    /// [`restart_node`](Self::restart_node).
    pub fn kill_node(&mut self, index: usize) {
        if let Some(n) = self.nodes.get_mut(index) {
            n.kill();
        }
    }

    /// Start the node at `index` again on its port with its dir: it rejoins
    /// the cluster with the identity in its `nodes.conf` (a former primary
    /// whose slots moved comes back as a replica of the new owner).
    ///
    /// # Errors
    ///
    /// As [`RedisServer::restart`]; `InvalidInput` for an index out of range.
    pub fn restart_node(&mut self, index: usize) -> io::Result<()> {
        match self.nodes.get_mut(index) {
            Some(n) => n.restart(),
            None => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("no cluster node {index}"),
            )),
        }
    }

    fn running_port(&self) -> io::Result<u16> {
        self.nodes
            .iter()
            .find(|n| n.is_running())
            .map(RedisServer::port)
            .ok_or_else(|| other("no cluster node is running"))
    }

    /// Make a replica of the primary at `primary` (an index into
    /// [`nodes`](Self::nodes)) take over its slots with a coordinated
    /// `CLUSTER FAILOVER` (no write is lost), and wait until the cluster
    /// is ready again. Returns the index of the new primary.
    ///
    /// # Errors
    ///
    /// An error if the primary has no replica or the failover does not
    /// finish within 20 s.
    pub fn failover(&self, primary: usize) -> io::Result<usize> {
        let replica = self.replica_of(primary)?;
        let _: () = query(
            self.nodes[replica].port(),
            redis::cmd("CLUSTER").arg("FAILOVER"),
        )?;
        settle("the replica becoming primary", || self.is_primary(replica))?;
        self.wait_ready()?;
        Ok(replica)
    }
}

/// Factory of [`RedisQueue`](crate::RedisQueue)s on a Redis Cluster: one
/// cluster of 3 primaries and 3 replicas per test binary (started on first
/// use), a fresh namespace (so a slot of its own, spread over the
/// primaries) per [`Factory::make`].
#[derive(Debug, Default, Clone, Copy)]
pub struct RedisClusterFactory;

static CLUSTER: OnceLock<Mutex<Option<RedisCluster>>> = OnceLock::new();

/// The URL of this process's shared test cluster, starting it on first use.
///
/// # Errors
///
/// As [`RedisCluster::start`].
pub fn shared_cluster_url() -> io::Result<String> {
    let slot = CLUSTER.get_or_init(|| Mutex::new(None));
    let mut guard = slot.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(c) = guard.as_ref() {
        return Ok(c.url());
    }
    let cluster = RedisCluster::start()?;
    let url = cluster.url();
    *guard = Some(cluster);
    Ok(url)
}

impl Factory for RedisClusterFactory {
    fn name(&self) -> &'static str {
        "redis-cluster"
    }

    fn make(&self, config: Config) -> BoxFuture<'_, Subject> {
        Box::pin(fresh_queue(shared_cluster_url, config))
    }

    /// False: the test cluster's nodes keep no persistence, and `stats()`
    /// says so (SPEC 1).
    fn durable(&self) -> bool {
        false
    }
}
