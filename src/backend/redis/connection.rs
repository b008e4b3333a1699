//! The connections of the Redis backend: to one server, or to a Redis
//! Cluster (SPEC 7, "Redis Cluster").
//!
//! A queue's keys all carry the hash tag `{ns}`, so they live in one slot
//! and every script runs on the one primary that owns it. The cluster
//! connection (redis-rs `cluster-async`) routes each script by its first
//! key (the `{ns}:` prefix), follows `MOVED`/`ASK` when the slot moves, and
//! refreshes its slot map after a failover. The few commands without a key
//! that must reach that primary (`WAIT`, `TIME`) are routed to the slot's
//! primary explicitly: redis-rs would otherwise send `WAIT` to every
//! primary and `TIME` to any node.

use std::time::Duration;

use redis::aio::{
    ConnectionLike, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection,
};
use redis::cluster::{ClusterClient, ClusterClientBuilder, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{
    AsyncConnectionConfig, Cmd, ConnectionInfo, Pipeline, RedisFuture, RedisResult, Value,
};

/// Where connections come from: the one client of a handle, holding the URL
/// and the TLS settings, so every connection (the shared one, its
/// reconnects, the blocking-wait ones) uses the same.
// One per handle, so the size difference of the variants costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone)]
pub(crate) enum Source {
    /// One Redis server (or a primary with replicas behind one address).
    Server(redis::Client),
    /// A Redis Cluster, found from one seed node; true over TLS.
    Cluster(ClusterClient, bool),
}

impl Source {
    /// The source for `info`, with `certs` for a `rediss://` URL that has a
    /// CA or a client certificate, as a cluster client if `cluster`.
    pub(crate) fn open(
        info: ConnectionInfo,
        certs: Option<redis::TlsCertificates>,
        cluster: bool,
    ) -> RedisResult<Source> {
        if cluster {
            let tls = matches!(info.addr(), redis::ConnectionAddr::TcpTls { .. });
            let mut b = ClusterClientBuilder::new(vec![info]);
            if let Some(c) = certs {
                b = b.certs(c);
            }
            return Ok(Source::Cluster(b.build()?, tls));
        }
        match certs {
            Some(c) => redis::Client::build_with_tls(info, c).map(Source::Server),
            None => redis::Client::open(info).map(Source::Server),
        }
    }

    /// True if the URL asked for TLS.
    pub(crate) fn is_tls(&self) -> bool {
        match self {
            Source::Server(c) => matches!(
                c.get_connection_info().addr(),
                redis::ConnectionAddr::TcpTls { .. }
            ),
            Source::Cluster(_, tls) => *tls,
        }
    }

    /// The shared connection: reconnects on its own, answers within
    /// `response` or fails.
    pub(crate) async fn shared(&self, connect: Duration, response: Duration) -> RedisResult<Conn> {
        match self {
            Source::Server(client) => {
                let cm = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(connect))
                    .set_response_timeout(Some(response))
                    .set_number_of_retries(2)
                    .set_min_delay(Duration::from_millis(20))
                    .set_max_delay(Duration::from_millis(200));
                client
                    .get_connection_manager_with_config(cm)
                    .await
                    .map(Conn::Server)
            }
            Source::Cluster(client, _) => {
                let cfg = ClusterConfig::new()
                    .set_connection_timeout(connect)
                    .set_response_timeout(response);
                client
                    .get_async_connection_with_config(cfg)
                    .await
                    .map(Conn::Cluster)
            }
        }
    }

    /// A connection of its own for one blocking read at a time, without a
    /// response timeout (the caller bounds the wait). In a cluster it sends
    /// the read to the node owning the key's slot and follows a slot move.
    pub(crate) async fn blocker(&self, connect: Duration) -> RedisResult<Conn> {
        match self {
            Source::Server(client) => {
                let cfg = AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(connect))
                    .set_response_timeout(None);
                client
                    .get_multiplexed_async_connection_with_config(&cfg)
                    .await
                    .map(Conn::Blocker)
            }
            // The cluster client is built without a response timeout, so a
            // connection with the default config has none either.
            Source::Cluster(client, _) => client
                .get_async_connection_with_config(
                    ClusterConfig::new().set_connection_timeout(connect),
                )
                .await
                .map(Conn::Cluster),
        }
    }
}

/// A connection of a handle: the shared one or a blocking-wait one.
#[derive(Clone)]
pub(crate) enum Conn {
    /// To one server, reconnecting on its own.
    Server(ConnectionManager),
    /// To one server, for blocking reads.
    Blocker(MultiplexedConnection),
    /// To a Redis Cluster.
    Cluster(ClusterConnection),
}

impl Conn {
    /// Send `cmd`, which names no key, to the primary owning `key`'s slot
    /// (in a cluster; to the one server otherwise).
    pub(crate) async fn at_primary_of<T: redis::FromRedisValue>(
        &mut self,
        key: &str,
        cmd: Cmd,
    ) -> RedisResult<T> {
        match self {
            Conn::Cluster(c) => {
                let route = Route::with_key(key, SlotAddr::Master);
                let v = c
                    .route_command(
                        cmd,
                        RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route)),
                    )
                    .await?;
                Ok(redis::from_redis_value(v)?)
            }
            other => cmd.query_async(other).await,
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Server(c) => c.req_packed_command(cmd),
            Conn::Blocker(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Server(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Blocker(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Server(c) => c.get_db(),
            Conn::Blocker(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}
