//! [`RedisOptions`]: the settings of the Redis backend (SPEC section 7).

use std::path::PathBuf;
use std::time::Duration;

use super::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_REPLICA_TIMEOUT, DEFAULT_RESPONSE_TIMEOUT};
#[cfg(doc)]
use crate::config::Config;
use crate::error::{Error, Result};

/// Settings of the Redis backend (SPEC section 7); the queue rules are in
/// [`Config`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use workjournal::RedisOptions;
/// let options = RedisOptions::default()
///     .response_timeout(Duration::from_secs(2))
///     .min_replicas(1);
/// assert_eq!(options.get_min_replicas(), 1);
/// ```
#[derive(Debug, Clone)]
pub struct RedisOptions {
    pub(super) connect_timeout: Duration,
    pub(super) response_timeout: Duration,
    pub(super) min_replicas: u32,
    pub(super) replica_timeout: Duration,
    pub(super) consumer_name: Option<String>,
    pub(super) tls_ca: Option<Pem>,
    pub(super) tls_client: Option<(Pem, Pem)>,
    pub(super) cluster: bool,
}

/// PEM text given inline or as a file that `connect` reads.
#[derive(Clone)]
pub(super) enum Pem {
    Bytes(Vec<u8>),
    File(PathBuf),
}

impl std::fmt::Debug for Pem {
    // Never print the bytes: one of them may be a private key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Pem::Bytes(b) => write!(f, "<{} bytes of PEM>", b.len()),
            Pem::File(p) => write!(f, "{}", p.display()),
        }
    }
}

impl Pem {
    pub(super) fn load(&self, what: &str) -> Result<Vec<u8>> {
        match self {
            Pem::Bytes(b) => Ok(b.clone()),
            Pem::File(p) => std::fs::read(p).map_err(|e| {
                Error::invalid(format!("cannot read the {what} file {}: {e}", p.display()))
            }),
        }
    }
}

impl Default for RedisOptions {
    fn default() -> Self {
        RedisOptions {
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            min_replicas: 0,
            replica_timeout: DEFAULT_REPLICA_TIMEOUT,
            consumer_name: None,
            tls_ca: None,
            tls_client: None,
            cluster: false,
        }
    }
}

impl RedisOptions {
    /// How long one attempt to connect may take. Default: 5 s.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long Redis may take to answer one command or script. Every
    /// operation fails with `Error::Backend` once `connect_timeout +
    /// response_timeout` (+ `replica_timeout` with replicas) has passed
    /// without an answer, never hangs. Default: 5 s.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// After each write, wait (Redis `WAIT`) until this many replicas have
    /// it; fewer within `replica_timeout` is `Error::Backend` saying how many
    /// acknowledged (the write itself has happened on the primary).
    /// Default: 0 (no waiting).
    pub fn min_replicas(mut self, n: u32) -> Self {
        self.min_replicas = n;
        self
    }

    /// How long a write waits for `min_replicas`. Default: 1 s.
    pub fn replica_timeout(mut self, timeout: Duration) -> Self {
        self.replica_timeout = timeout;
        self
    }

    /// The consumer name of this handle, recorded as the `owner` of each
    /// item it holds (visible with `redis-cli HGET`). It must be
    /// unique among live handles. Default: `wj-<pid>-<n>` with `n` from a
    /// counter in Redis, so unique without configuration.
    pub fn consumer_name(mut self, name: impl Into<String>) -> Self {
        self.consumer_name = Some(name.into());
        self
    }

    /// For a `rediss://` URL: trust the CA certificate(s) in this PEM text
    /// (one or more `CERTIFICATE` blocks) to sign the server's certificate,
    /// *instead of* the platform's trusted roots. The server's certificate
    /// must name the URL's host (a DNS name, or an IP address for a URL
    /// such as `rediss://10.0.0.5:6380/`). Replaces an earlier
    /// [`tls_ca_file`](Self::tls_ca_file). Default: none, so the platform's
    /// roots (as `rustls-native-certs` finds them, e.g.
    /// `/etc/ssl/certs`) are trusted, which suits managed Redis services
    /// with publicly signed certificates.
    pub fn tls_ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls_ca = Some(Pem::Bytes(pem.into()));
        self
    }

    /// As [`tls_ca_pem`](Self::tls_ca_pem), with the PEM read from this
    /// file by `connect` (a missing or unreadable file is `InvalidInput`).
    /// Default: none.
    pub fn tls_ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.tls_ca = Some(Pem::File(path.into()));
        self
    }

    /// For a `rediss://` URL: present this client certificate (PEM, the
    /// leaf first, then any intermediates) and its private key (PEM:
    /// PKCS#8, PKCS#1 or SEC1) to a server that asks for one (Redis
    /// `tls-auth-clients yes` or `optional`). Replaces an earlier
    /// [`tls_client_cert_files`](Self::tls_client_cert_files). Default:
    /// none (no client certificate; a server that requires one refuses the
    /// connection, which is `Error::Backend`).
    pub fn tls_client_cert_pem(
        mut self,
        cert_chain: impl Into<Vec<u8>>,
        key: impl Into<Vec<u8>>,
    ) -> Self {
        self.tls_client = Some((Pem::Bytes(cert_chain.into()), Pem::Bytes(key.into())));
        self
    }

    /// As [`tls_client_cert_pem`](Self::tls_client_cert_pem), with both
    /// PEMs read from these files by `connect`. Default: none.
    pub fn tls_client_cert_files(
        mut self,
        cert_chain: impl Into<PathBuf>,
        key: impl Into<PathBuf>,
    ) -> Self {
        self.tls_client = Some((Pem::File(cert_chain.into()), Pem::File(key.into())));
        self
    }

    /// Talk to a Redis Cluster (SPEC 7, "Redis Cluster"): the URL names one
    /// node of it, the others are found from there; commands go to the
    /// primary owning the namespace's slot and follow it when it moves
    /// (`MOVED`, failover). A `redis+cluster://` or `rediss+cluster://` URL
    /// asks for the same. Default: false (one server).
    pub fn cluster(mut self, on: bool) -> Self {
        self.cluster = on;
        self
    }

    /// Whether [`cluster`](Self::cluster) was asked for.
    pub fn get_cluster(&self) -> bool {
        self.cluster
    }

    /// True if a CA was given with [`tls_ca_pem`](Self::tls_ca_pem) or
    /// [`tls_ca_file`](Self::tls_ca_file).
    pub fn has_tls_ca(&self) -> bool {
        self.tls_ca.is_some()
    }

    /// True if a client certificate was given with
    /// [`tls_client_cert_pem`](Self::tls_client_cert_pem) or
    /// [`tls_client_cert_files`](Self::tls_client_cert_files).
    pub fn has_tls_client_cert(&self) -> bool {
        self.tls_client.is_some()
    }

    /// The configured connect timeout.
    pub fn get_connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// The configured response timeout.
    pub fn get_response_timeout(&self) -> Duration {
        self.response_timeout
    }

    /// The configured `min_replicas`.
    pub fn get_min_replicas(&self) -> u32 {
        self.min_replicas
    }

    /// The configured replica timeout.
    pub fn get_replica_timeout(&self) -> Duration {
        self.replica_timeout
    }

    /// The configured consumer name, if one was set.
    pub fn get_consumer_name(&self) -> Option<&str> {
        self.consumer_name.as_deref()
    }
}
