//! One test body for both Redis deployments (feature `testing` + `redis`):
//! the Redis-only tests take a [`RedisKind`] and run against one
//! `redis-server` and against a Redis Cluster, as a conformance case takes
//! a [`Factory`](crate::testing::Factory). A body reaches the server's keys
//! through a [`RawConnection`] (a plain connection, or a cluster one that
//! routes each command to its slot's node), and kills or restarts the node
//! that serves its namespace through a [`RedisDeployment`].

use std::io;
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};

use crate::testing::redis_cluster::shared_cluster_url;
use crate::testing::redis_server::{calls_in_commandstats, raw_connection, shared_server_url};
use crate::testing::{RedisCluster, RedisClusterOptions, RedisServer, RedisServerOptions};

/// Which deployment a shared Redis test body runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedisKind {
    /// One `redis-server` (`redis://` URLs).
    Server,
    /// A Redis Cluster (`redis+cluster://` URLs).
    Cluster,
}

impl RedisKind {
    /// The URL of this process's shared deployment of this kind, started
    /// on first use: one server, or a cluster of 3 primaries and 3
    /// replicas. Tests sharing it use distinct namespaces.
    ///
    /// # Errors
    ///
    /// As [`RedisServer::start`] or [`RedisCluster::start`].
    pub fn shared_url(self) -> io::Result<String> {
        match self {
            RedisKind::Server => shared_server_url(),
            RedisKind::Cluster => shared_cluster_url(),
        }
    }

    /// Start a deployment of this kind for one test alone (one that kills,
    /// stops or counts the commands of its server): one server, or a
    /// cluster of 3 primaries without replicas, so that a killed or
    /// stopped node keeps its slots rather than failing over. With
    /// `aof_always`, every node keeps an append-only file with
    /// `appendfsync always`.
    ///
    /// # Errors
    ///
    /// As [`RedisServer::start`] or [`RedisCluster::start`].
    pub fn start_private(self, aof_always: bool) -> io::Result<RedisDeployment> {
        Ok(match self {
            RedisKind::Server => {
                RedisDeployment::Server(RedisServer::start_with(RedisServerOptions {
                    aof_always,
                    ..Default::default()
                })?)
            }
            RedisKind::Cluster => {
                RedisDeployment::Cluster(RedisCluster::start_with(RedisClusterOptions {
                    primaries: 3,
                    replicas_per_primary: 0,
                    aof_always,
                    tls: false,
                })?)
            }
        })
    }
}

/// A deployment started for one test by [`RedisKind::start_private`].
/// Dropping it kills every node and removes their dirs.
// One per test, so the size difference of the variants costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum RedisDeployment {
    /// One server.
    Server(RedisServer),
    /// A cluster of primaries only.
    Cluster(RedisCluster),
}

impl RedisDeployment {
    /// The URL a queue connects to the deployment with.
    pub fn url(&self) -> String {
        match self {
            RedisDeployment::Server(s) => s.url(),
            RedisDeployment::Cluster(c) => c.url(),
        }
    }

    /// Kill (`SIGKILL`, a crash) the node that serves namespace `ns`: the
    /// server, or the primary of the namespace's slot. Returns the node to
    /// give to [`restart`](Self::restart).
    ///
    /// # Errors
    ///
    /// As [`RedisCluster::primary_of`].
    pub fn kill_serving(&mut self, ns: &str) -> io::Result<usize> {
        match self {
            RedisDeployment::Server(s) => {
                s.kill();
                Ok(0)
            }
            RedisDeployment::Cluster(c) => {
                let node = c.primary_of(&format!("{{{ns}}}:"))?;
                c.kill_node(node);
                Ok(node)
            }
        }
    }

    /// Start the node killed by [`kill_serving`](Self::kill_serving) again
    /// with its dir, and (in a cluster) wait until every node reports
    /// `cluster_state:ok` again.
    ///
    /// # Errors
    ///
    /// As [`RedisServer::restart`] and [`RedisCluster::wait_ready`].
    pub fn restart(&mut self, node: usize) -> io::Result<()> {
        match self {
            RedisDeployment::Server(s) => s.restart(),
            RedisDeployment::Cluster(c) => {
                c.restart_node(node)?;
                c.wait_ready()
            }
        }
    }
}

/// A plain connection to a test deployment, for reading and changing its
/// keys behind the queue's back: to one server, or to a cluster (each
/// command routed by its keys, `KEYS` sent to every primary).
#[derive(Clone)]
pub enum RawConnection {
    /// To one server.
    Server(MultiplexedConnection),
    /// To a Redis Cluster.
    Cluster(ClusterConnection),
}

impl std::fmt::Debug for RawConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RawConnection::Server(_) => "RawConnection::Server",
            RawConnection::Cluster(_) => "RawConnection::Cluster",
        })
    }
}

impl RawConnection {
    /// A raw connection to the deployment at `url`, a URL as
    /// [`RedisQueue::connect`](crate::RedisQueue::connect) takes it
    /// (`redis+cluster://` for a cluster); to one server, it is
    /// [`raw_connection`]'s, with its long
    /// response timeout.
    ///
    /// # Errors
    ///
    /// The client's error if the URL is malformed or nothing answers.
    pub async fn open(url: &str) -> RedisResult<RawConnection> {
        for (cluster, plain) in [
            ("redis+cluster://", "redis://"),
            ("rediss+cluster://", "rediss://"),
        ] {
            if let Some(rest) = url.strip_prefix(cluster) {
                let client = redis::cluster::ClusterClient::builder(vec![format!("{plain}{rest}")])
                    .connection_timeout(Duration::from_secs(5))
                    .response_timeout(Duration::from_secs(60))
                    .build()?;
                return Ok(RawConnection::Cluster(client.get_async_connection().await?));
            }
        }
        Ok(RawConnection::Server(raw_connection(url).await?))
    }

    /// Run `cmd`, which names no key (`INFO`, `KEYS`), on the node that
    /// serves namespace `ns` (its slot's primary in a cluster).
    ///
    /// # Errors
    ///
    /// The server's error, or the reply's if it is not a `T`.
    pub async fn on_node_of<T: redis::FromRedisValue>(
        &mut self,
        ns: &str,
        cmd: &Cmd,
    ) -> RedisResult<T> {
        match self {
            RawConnection::Server(c) => cmd.query_async(c).await,
            RawConnection::Cluster(c) => {
                let route = Route::with_key(format!("{{{ns}}}:"), SlotAddr::Master);
                let v = c
                    .route_command(
                        cmd.clone(),
                        RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route)),
                    )
                    .await?;
                Ok(redis::from_redis_value(v)?)
            }
        }
    }

    /// How many times the node serving namespace `ns` has run each of
    /// `commands`, added up, as
    /// [`command_calls`](crate::testing::command_calls) counts them.
    ///
    /// # Errors
    ///
    /// As [`command_calls`](crate::testing::command_calls).
    pub async fn command_calls(&mut self, ns: &str, commands: &[&str]) -> RedisResult<u64> {
        let info: String = self
            .on_node_of(ns, redis::cmd("INFO").arg("commandstats"))
            .await?;
        calls_in_commandstats(&info, commands)
    }
}

impl ConnectionLike for RawConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            RawConnection::Server(c) => c.req_packed_command(cmd),
            RawConnection::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            RawConnection::Server(c) => c.req_packed_commands(pipeline, offset, count),
            RawConnection::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            RawConnection::Server(c) => c.get_db(),
            RawConnection::Cluster(c) => c.get_db(),
        }
    }
}

/// Expand, for each async body `NAME(kind: RedisKind)` named, a test
/// `server::NAME` that runs it on one server and a test `cluster::NAME`
/// that runs it on a Redis Cluster, as [`conformance_tests!`](crate::conformance_tests)
/// does for the backends.
///
/// ```text
/// workjournal::on_server_and_cluster!(late_ack_is_lease_lost, stale_claims_are_reclaimed);
/// ```
#[macro_export]
macro_rules! on_server_and_cluster {
    ($($body:ident),* $(,)?) => {
        mod server {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $body() {
                    super::$body($crate::testing::RedisKind::Server).await;
                }
            )*
        }
        mod cluster {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $body() {
                    super::$body($crate::testing::RedisKind::Cluster).await;
                }
            )*
        }
    };
}
