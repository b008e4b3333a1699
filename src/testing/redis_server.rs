//! A real `redis-server` for tests (feature `testing` + `redis`): started on
//! a free loopback port with its own temp dir, never the machine's Redis.
//!
//! The server runs under a small `sh` that holds the write end of a pipe
//! from this process as its stdin: when the pipe reaches end of file — the
//! harness dropped it, or this process died in any way, even by `SIGKILL` —
//! the shell kills the server with `SIGKILL` and removes its directory. So
//! no server outlives its test process, without `unsafe` or `pre_exec`.

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::config::Config;
use crate::queue::{BoxFuture, BoxQueue};
use crate::testing::{Factory, Subject};

/// How a [`RedisServer`] is started.
#[derive(Debug, Clone, Default)]
pub struct RedisServerOptions {
    /// Keep an append-only file with `appendfsync always`, so an add or ack
    /// that returned survives `kill()` + `restart()`. Default: false (no
    /// persistence at all, fastest).
    pub aof_always: bool,
    /// Start as a replica of the server on this loopback port. Default: none.
    pub replica_of: Option<u16>,
    /// Require this password (`requirepass`); connect with
    /// `redis://:<password>@127.0.0.1:<port>/`. Default: none.
    pub password: Option<String>,
    /// Also serve TLS on a second loopback port ([`RedisServer::tls_url`]),
    /// with a throwaway CA, server and client certificate made at start by
    /// the `openssl` command-line tool ([`RedisServer::certificates`]). The
    /// plain port stays open as well. Default: false.
    pub tls: bool,
    /// With `tls`: refuse TLS clients without a certificate signed by the
    /// test CA (`tls-auth-clients yes`); otherwise one is optional.
    /// Default: false.
    pub tls_require_client_cert: bool,
    /// Start as a node of a Redis Cluster (`cluster-enabled yes`, its
    /// `nodes.conf` in the server's dir, a node timeout of 1 s so that a
    /// failover takes about that long). With `tls` too, the cluster bus and
    /// replication run over TLS as well (`tls-cluster`, `tls-replication`).
    /// Default: false.
    pub cluster: bool,
    /// With `tls`: serve these certificates instead of making new ones, so
    /// that the nodes of one test cluster share a CA. Default: none.
    pub tls_certificates: Option<TestCertificates>,
}

/// A throwaway CA, and a server and a client certificate it signed, as PEM
/// files in one dir (made by [`TestCertificates::generate`] with the
/// `openssl` command-line tool). The server certificate names
/// `127.0.0.1` and `localhost`; every certificate is valid for 2 days.
#[derive(Debug, Clone)]
pub struct TestCertificates {
    dir: PathBuf,
    ca_pem: Vec<u8>,
    client_cert_pem: Vec<u8>,
    client_key_pem: Vec<u8>,
}

/// The CA's config; `{n}` makes its name unique, so that a certificate of
/// another test CA is met as signed by an unknown issuer, not as a bad
/// signature of a known one.
const CA_CONF: &str = "[req]
distinguished_name = dn
prompt = no
x509_extensions = ext
[dn]
CN = workjournal test CA {n}
[ext]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
";

const LEAF_CONF: &str = "[req]
distinguished_name = dn
prompt = no
[dn]
CN = 127.0.0.1
[ext]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = serverAuth,clientAuth
subjectAltName = IP:127.0.0.1,DNS:localhost
authorityKeyIdentifier = keyid
";

/// Run `openssl` with `args` in `dir`; an error names the command and its
/// stderr, or says how to install `openssl`.
fn openssl(dir: &Path, args: &[&str]) -> io::Result<()> {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("openssl not found on PATH ({e}); install it: apt-get install openssl"),
            )
        })?;
    if out.status.success() {
        return Ok(());
    }
    Err(io::Error::other(format!(
        "openssl {} failed ({}): {}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    )))
}

impl TestCertificates {
    /// Make a new CA (P-256 keys) and a server and a client certificate
    /// signed by it, as `ca.pem`, `server.pem`/`server.key` and
    /// `client.pem`/`client.key` in `dir` (created if missing).
    ///
    /// # Errors
    ///
    /// An error saying `install it: apt-get install openssl` when `openssl`
    /// is not on `PATH`; its stderr if a step fails.
    pub fn generate(dir: &Path) -> io::Result<TestCertificates> {
        std::fs::create_dir_all(dir)?;
        let name = format!("{}-{}", std::process::id(), fastrand::u64(..));
        std::fs::write(dir.join("ca.cnf"), CA_CONF.replace("{n}", &name))?;
        std::fs::write(dir.join("leaf.cnf"), LEAF_CONF)?;
        let key = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        let mut ca = vec!["req", "-x509", "-config", "ca.cnf", "-days", "2"];
        ca.extend(key);
        ca.extend(["-keyout", "ca.key", "-out", "ca.pem"]);
        openssl(dir, &ca)?;
        for (name, serial) in [("server", "2"), ("client", "3")] {
            let (k, csr, pem) = (
                format!("{name}.key"),
                format!("{name}.csr"),
                format!("{name}.pem"),
            );
            let mut req = vec!["req", "-new", "-config", "leaf.cnf"];
            req.extend(key);
            req.extend(["-keyout", &k, "-out", &csr]);
            openssl(dir, &req)?;
            openssl(
                dir,
                &[
                    "x509",
                    "-req",
                    "-in",
                    &csr,
                    "-CA",
                    "ca.pem",
                    "-CAkey",
                    "ca.key",
                    "-set_serial",
                    serial,
                    "-days",
                    "2",
                    "-extfile",
                    "leaf.cnf",
                    "-extensions",
                    "ext",
                    "-out",
                    &pem,
                ],
            )?;
        }
        Ok(TestCertificates {
            dir: dir.to_path_buf(),
            ca_pem: std::fs::read(dir.join("ca.pem"))?,
            client_cert_pem: std::fs::read(dir.join("client.pem"))?,
            client_key_pem: std::fs::read(dir.join("client.key"))?,
        })
    }

    /// The CA certificate (PEM) that signed the others.
    pub fn ca_pem(&self) -> &[u8] {
        &self.ca_pem
    }

    /// The file holding [`ca_pem`](Self::ca_pem).
    pub fn ca_path(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    /// A client certificate (PEM) signed by the CA.
    pub fn client_cert_pem(&self) -> &[u8] {
        &self.client_cert_pem
    }

    /// The private key (PEM, PKCS#8) of the client certificate.
    pub fn client_key_pem(&self) -> &[u8] {
        &self.client_key_pem
    }

    /// The files holding the client certificate and its key.
    pub fn client_paths(&self) -> (PathBuf, PathBuf) {
        (self.dir.join("client.pem"), self.dir.join("client.key"))
    }

    fn server_paths(&self) -> (PathBuf, PathBuf) {
        (self.dir.join("server.pem"), self.dir.join("server.key"))
    }
}

/// A `redis-server` child process on `127.0.0.1:port()`, with its own temp
/// dir. Dropping it kills the server and removes the dir.
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    /// The TLS port, with `options.tls`.
    tls_port: Option<u16>,
    dir: PathBuf,
    options: RedisServerOptions,
    certificates: Option<TestCertificates>,
    child: Option<(Child, ChildStdin)>,
}

/// The error when `redis-server` is not installed.
fn not_installed(e: io::Error) -> io::Error {
    io::Error::new(
        e.kind(),
        format!("redis-server not found on PATH ({e}); install it: apt-get install redis-server"),
    )
}

fn free_port() -> io::Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

/// Send `PING` over a raw socket; true on `+PONG` (not `-LOADING`).
fn ping(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    if s.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 64];
    // A server with a password answers `-NOAUTH`: up all the same.
    matches!(s.read(&mut buf), Ok(n) if buf[..n].starts_with(b"+PONG") || buf[..n].starts_with(b"-NOAUTH"))
}

impl RedisServer {
    /// Start a server with default options (no persistence).
    ///
    /// # Errors
    ///
    /// An error saying `install it: apt-get install redis-server` when
    /// `redis-server` is not on `PATH`; other I/O errors if it does not come
    /// up within 10 s.
    pub fn start() -> io::Result<RedisServer> {
        Self::start_with(RedisServerOptions::default())
    }

    /// Start a server with `options`.
    ///
    /// # Errors
    ///
    /// As [`RedisServer::start`].
    pub fn start_with(options: RedisServerOptions) -> io::Result<RedisServer> {
        Command::new("redis-server")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map_err(not_installed)?;
        let dir = tempfile::Builder::new()
            .prefix("workjournal-redis-")
            .tempdir()?
            .keep();
        // From here on, dropping `server` removes the dir.
        let mut server = RedisServer {
            port: 0,
            tls_port: None,
            dir,
            options,
            certificates: None,
            child: None,
        };
        if server.options.tls {
            server.certificates = match server.options.tls_certificates.take() {
                Some(given) => Some(given),
                None => Some(TestCertificates::generate(&server.dir.join("tls"))?),
            };
        }
        let mut last = None;
        // A free port can be taken by someone else before the server binds
        // it: try a few. Keep the dir (and the certificates) between tries.
        for _ in 0..5 {
            server.port = free_port()?;
            if server.options.tls {
                server.tls_port = Some(free_port()?);
            }
            match server.spawn() {
                Ok(()) => return Ok(server),
                Err(e) => {
                    server.stop(false);
                    last = Some(e);
                }
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("redis-server did not start")))
    }

    fn spawn(&mut self) -> io::Result<()> {
        let mut args = vec![
            "--port".to_string(),
            self.port.to_string(),
            "--bind".into(),
            "127.0.0.1".into(),
            "--dir".into(),
            self.dir.display().to_string(),
            "--logfile".into(),
            "redis.log".into(),
            "--save".into(),
            String::new(),
            "--daemonize".into(),
            "no".into(),
            "--maxmemory-policy".into(),
            "noeviction".into(),
        ];
        if self.options.aof_always {
            args.extend(["--appendonly", "yes", "--appendfsync", "always"].map(String::from));
        } else {
            args.extend(["--appendonly", "no"].map(String::from));
        }
        if let Some(pw) = &self.options.password {
            args.extend(["--requirepass".to_string(), pw.clone()]);
        }
        if let (Some(port), Some(certs)) = (self.tls_port, &self.certificates) {
            let (cert, key) = certs.server_paths();
            let auth = if self.options.tls_require_client_cert {
                "yes"
            } else {
                "optional"
            };
            args.extend([
                "--tls-port".to_string(),
                port.to_string(),
                "--tls-cert-file".into(),
                cert.display().to_string(),
                "--tls-key-file".into(),
                key.display().to_string(),
                "--tls-ca-cert-file".into(),
                certs.ca_path().display().to_string(),
                "--tls-auth-clients".into(),
                auth.into(),
            ]);
            if self.options.cluster {
                args.extend(["--tls-cluster", "yes", "--tls-replication", "yes"].map(String::from));
            }
        }
        if self.options.cluster {
            args.extend(
                [
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "1000",
                ]
                .map(String::from),
            );
        }
        if let Some(p) = self.options.replica_of {
            args.extend(["--replicaof".to_string(), "127.0.0.1".into(), p.to_string()]);
        }
        // $1 is the dir; the rest are redis-server's arguments. `read` returns
        // on a line ("keep": kill but keep the dir, for restart) or on end of
        // file (the harness or the whole test process is gone: kill and
        // remove the dir).
        let script = r#"d="$1"; shift
redis-server "$@" </dev/null >/dev/null 2>&1 &
p=$!
read cmd
kill -9 "$p" 2>/dev/null
wait "$p" 2>/dev/null
if [ "$cmd" != keep ]; then rm -rf "$d"; fi"#;
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(script)
            .arg("sh")
            .arg(&self.dir)
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(not_installed)?;
        let stdin = child
            .stdin
            .take()
            .ok_or_else(|| io::Error::other("no stdin pipe for the redis-server shell"))?;
        self.child = Some((child, stdin));
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(10) {
            if ping(self.port) {
                return Ok(());
            }
            if let Some((c, _)) = self.child.as_mut()
                && let Ok(Some(status)) = c.try_wait()
            {
                return Err(io::Error::other(format!(
                    "redis-server exited at once ({status}); see {}/redis.log",
                    self.dir.display()
                )));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Err(io::Error::other(format!(
            "redis-server on port {} did not answer PING within 10 s",
            self.port
        )))
    }

    fn stop(&mut self, remove_dir: bool) {
        if let Some((mut child, mut stdin)) = self.child.take() {
            if !remove_dir {
                let _ = stdin.write_all(b"keep\n");
                let _ = stdin.flush();
            }
            drop(stdin);
            let _ = child.wait();
        }
    }

    /// `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// True between a start or [`restart`](Self::restart) and a
    /// [`kill`](Self::kill).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// The loopback port the server listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `rediss://127.0.0.1:<tls port>/` with
    /// [`RedisServerOptions::tls`], else `None`. The server's certificate
    /// is signed by [`certificates`](Self::certificates)' CA.
    pub fn tls_url(&self) -> Option<String> {
        self.tls_port.map(|p| format!("rediss://127.0.0.1:{p}/"))
    }

    /// The TLS port with [`RedisServerOptions::tls`], else `None`.
    pub fn tls_port(&self) -> Option<u16> {
        self.tls_port
    }

    /// The test CA and certificates with [`RedisServerOptions::tls`], else
    /// `None`.
    pub fn certificates(&self) -> Option<&TestCertificates> {
        self.certificates.as_ref()
    }

    /// Kill the server with `SIGKILL` (a crash: no shutdown save). Its dir is
    /// kept for [`RedisServer::restart`].
    pub fn kill(&mut self) {
        self.stop(false);
    }

    /// Start the server again on the same port with the same dir (and so the
    /// same append-only file, if any). Kills it first if it is running.
    ///
    /// # Errors
    ///
    /// As [`RedisServer::start`].
    pub fn restart(&mut self) -> io::Result<()> {
        self.stop(false);
        self.repair_aof()?;
        self.spawn()
    }

    /// Before a restart with [`RedisServerOptions::aof_always`], cut a
    /// write that a kill left short off the append-only file the way an
    /// operator does (SPEC 6, Redis durability): `redis-check-aof --fix`
    /// truncates before the `MULTI` of a half-written script. Redis 7.0's
    /// own loader truncates inside it, so the next write's `EXEC` later
    /// replays half a script (seen: an item journaled with no lane; see
    /// `tests/crash.rs`, `redis_own_truncation_replays_half_a_script`).
    ///
    /// # Errors
    ///
    /// An error saying how to install `redis-check-aof` when it is
    /// missing, or carrying its output when it cannot mend the file.
    fn repair_aof(&self) -> io::Result<()> {
        let manifest = self
            .dir
            .join("appendonlydir")
            .join("appendonly.aof.manifest");
        if !self.options.aof_always || !manifest.exists() {
            return Ok(());
        }
        let mut child = Command::new("redis-check-aof")
            .arg("--fix")
            .arg(&manifest)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!(
                        "redis-check-aof not found on PATH ({e}); install it: apt-get install redis-tools"
                    ),
                )
            })?;
        // It asks before it truncates.
        if let Some(mut stdin) = child.stdin.take() {
            stdin.write_all(b"y\n")?;
        }
        let out = child.wait_with_output()?;
        if out.status.success() {
            Ok(())
        } else {
            Err(io::Error::other(format!(
                "redis-check-aof --fix {} failed ({}): {}",
                manifest.display(),
                out.status,
                String::from_utf8_lossy(&out.stdout)
            )))
        }
    }

    /// The server's own directory (its append-only files, `redis.log`),
    /// kept until the server is dropped.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if self.child.is_some() {
            self.stop(true);
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Factory of [`RedisQueue`](crate::RedisQueue)s: one server per test
/// binary (started on first use, shared by every test of the process), a
/// fresh namespace per [`Factory::make`].
#[derive(Debug, Default, Clone, Copy)]
pub struct RedisFactory;

static SERVER: OnceLock<Mutex<Option<RedisServer>>> = OnceLock::new();
static NAMESPACES: AtomicU64 = AtomicU64::new(0);

/// The URL of this process's shared test server, starting it on first use.
///
/// # Errors
///
/// As [`RedisServer::start`].
pub fn shared_server_url() -> io::Result<String> {
    let slot = SERVER.get_or_init(|| Mutex::new(None));
    let mut guard = slot.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(s) = guard.as_ref() {
        return Ok(s.url());
    }
    let server = RedisServer::start()?;
    let url = server.url();
    *guard = Some(server);
    Ok(url)
}

/// A plain connection to `url` for reading and writing raw keys in tests.
/// Its response timeout is long (60 s): redis-rs' default of 500 ms fails a
/// large reply (a big `XPENDING`, `SCAN` of a full namespace) on a loaded
/// machine, and a check must not mistake that for an empty answer.
///
/// # Errors
///
/// The connection's: a bad URL, a server that does not answer.
pub async fn raw_connection(url: &str) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
    let config =
        redis::AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(60)));
    redis::Client::open(url)?
        .get_multiplexed_async_connection_with_config(&config)
        .await
}

/// How many times the server has run each of `commands` (lower-case names,
/// such as `evalsha`), added up, from `INFO commandstats`: a count of
/// requests for tests that bound how many a backend sends. A command the
/// server never ran counts 0.
///
/// # Errors
///
/// The server's error for `INFO`, or `InvalidClientConfig` when its reply
/// has a count that is not a number.
pub async fn command_calls(
    conn: &mut redis::aio::MultiplexedConnection,
    commands: &[&str],
) -> redis::RedisResult<u64> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await?;
    calls_in_commandstats(&info, commands)
}

/// The calls of `commands` added up in the text of an `INFO commandstats`
/// reply, as [`command_calls`] counts them.
pub(crate) fn calls_in_commandstats(info: &str, commands: &[&str]) -> redis::RedisResult<u64> {
    let mut total = 0;
    for name in commands {
        let prefix = format!("cmdstat_{name}:calls=");
        if let Some(n) = info
            .lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .and_then(|rest| rest.split(',').next())
        {
            total += n.parse::<u64>().map_err(|_| {
                redis::RedisError::from((
                    redis::ErrorKind::InvalidClientConfig,
                    "INFO commandstats: a count that is not a number",
                ))
            })?;
        }
    }
    Ok(total)
}

/// A namespace not used before by this process.
pub fn fresh_namespace() -> String {
    let n = NAMESPACES.fetch_add(1, Ordering::Relaxed);
    format!("t{}-{n}", std::process::id())
}

/// A queue in a fresh namespace of the server (or cluster) at the URL that
/// `url` gives (starting it on first use), for a factory's `make`.
///
/// # Panics
///
/// Test support: if the server does not start or the queue cannot connect.
#[allow(clippy::expect_used)]
pub(crate) async fn fresh_queue(url: fn() -> io::Result<String>, config: Config) -> Subject {
    let url = tokio::task::spawn_blocking(url)
        .await
        .expect("redis test server start task")
        .expect("start redis-server for the tests");
    let queue = crate::RedisQueue::connect(
        &url,
        &fresh_namespace(),
        config,
        crate::RedisOptions::default(),
    )
    .await
    .expect("connect to the test redis-server");
    Subject::new(BoxQueue::new(queue), Vec::new())
}

impl Factory for RedisFactory {
    fn name(&self) -> &'static str {
        "redis"
    }

    fn make(&self, config: Config) -> BoxFuture<'_, Subject> {
        Box::pin(fresh_queue(shared_server_url, config))
    }

    /// False: the test server keeps no persistence, and `stats()` says so
    /// (SPEC 1).
    fn durable(&self) -> bool {
        false
    }
}
