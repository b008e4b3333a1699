//! `workjournal serve`, and the socket `work` serves while it runs
//! (SPEC section 10).

use std::io::Write;
use std::net::{SocketAddr, ToSocketAddrs};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use clap::Args;
use workjournal::server::{Listener, Server, ServerOptions, SocketPermissions};
use workjournal::{BoxQueue, Config, WorkQueue};

use crate::args::Global;
use crate::{CliError, CliResult, code};

#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// The Unix socket to listen on (default: the --db path with .sock
    /// appended, e.g. ./workjournal.redb.sock; with --redis,
    /// ./workjournal.sock).
    #[arg(long, value_name = "PATH")]
    pub(crate) socket: Option<PathBuf>,
    /// Also listen on TCP at ADDR (HOST:PORT; a bare PORT or :PORT means
    /// 127.0.0.1). Every TCP request needs the bearer token of --token-file.
    #[arg(long, value_name = "ADDR")]
    pub(crate) listen: Option<String>,
    /// The bearer token for TCP clients (every route): read from FILE, or
    /// generated into it (mode 0600) if it does not exist (default: the
    /// socket path with .token in place of .sock). At least 32 characters.
    #[arg(long, value_name = "FILE")]
    pub(crate) token_file: Option<PathBuf>,
    /// The read-only bearer token, for viewers and scrapers: the dashboard
    /// without its write controls, /metrics, and the API routes that only
    /// look. Read from FILE, or generated into it (mode 0600) if it does
    /// not exist (default: the socket path with .read-token in place of
    /// .sock). At least 32 characters.
    #[arg(long, value_name = "FILE")]
    pub(crate) read_token_file: Option<PathBuf>,
    /// The socket's file mode, in octal (default 600: only this user).
    /// Any group or other bit lets the file's permissions, not the peer's
    /// uid, decide who may connect.
    #[arg(long, value_name = "MODE", value_parser = parse_mode)]
    pub(crate) socket_mode: Option<u32>,
    /// Give the socket to GROUP (a name or a gid); implies mode 660 unless
    /// --socket-mode says otherwise.
    #[arg(long, value_name = "GROUP")]
    pub(crate) socket_group: Option<String>,
    /// Serve the web dashboard and /metrics on TCP at ADDR (HOST:PORT; a
    /// bare PORT or :PORT means 127.0.0.1), behind the token of
    /// --token-file: open http://ADDR/?token=TOKEN once (SPEC 12).
    #[arg(long, value_name = "ADDR")]
    pub(crate) http: Option<String>,
    /// Show the dashboard without its write controls, and refuse its
    /// writes (pause, resume, step, redrive, purge). The API is unchanged.
    #[arg(long, requires = "http")]
    pub(crate) read_only: bool,
}

fn parse_mode(s: &str) -> Result<u32, String> {
    let mode = u32::from_str_radix(s.trim_start_matches("0o"), 8)
        .map_err(|_| format!("{s:?} is not an octal file mode like 600 or 660"))?;
    if mode > 0o777 {
        return Err(format!("{s:?} is not a file mode (at most 777)"));
    }
    Ok(mode)
}

/// A name from /etc/group, or a number.
fn group_id(group: &str) -> CliResult<u32> {
    if let Ok(gid) = group.parse() {
        return Ok(gid);
    }
    let groups = std::fs::read_to_string("/etc/group").unwrap_or_default();
    groups
        .lines()
        .filter_map(|l| {
            let mut f = l.split(':');
            Some((f.next()?, f.nth(1)?))
        })
        .find(|(name, _)| *name == group)
        .and_then(|(_, gid)| gid.parse().ok())
        .ok_or_else(|| {
            CliError::new(
                code::USAGE,
                format!("--socket-group: no group named {group:?}"),
            )
        })
}

/// `--listen`: HOST:PORT as given; a bare port binds loopback only.
fn listen_addr(listen: &str) -> CliResult<SocketAddr> {
    flag_addr("--listen", listen)
}

/// The address `flag` (`--listen`, `--http`) gives: HOST:PORT as given; a
/// bare port binds loopback only. A malformed one names its flag.
fn flag_addr(flag: &str, value: &str) -> CliResult<SocketAddr> {
    let text = value.strip_prefix(':').unwrap_or(value);
    if let Ok(port) = text.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    value
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| {
            CliError::new(
                code::USAGE,
                format!("{flag} {value:?}: expected HOST:PORT or PORT"),
            )
        })
}

/// The fewest characters a token file may hold: a generated token has 64
/// (32 random bytes in hex); a short one could be guessed.
pub(crate) const MIN_TOKEN_CHARS: usize = 32;

/// The token in `path`, or a new random one written there owner-only.
fn load_or_create_token(path: &Path) -> CliResult<String> {
    let failed = |e: std::io::Error| {
        CliError::new(code::FAILURE, format!("token file {}: {e}", path.display()))
    };
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let mode = std::fs::metadata(path)
                .map_err(failed)?
                .permissions()
                .mode();
            if mode & 0o077 != 0 {
                return Err(CliError::new(
                    code::FAILURE,
                    format!(
                        "token file {} is readable by others (mode {:o}); chmod 600 it",
                        path.display(),
                        mode & 0o777
                    ),
                ));
            }
            let token = text.trim().to_string();
            if token.is_empty() {
                return Err(CliError::new(
                    code::FAILURE,
                    format!("token file {} is empty", path.display()),
                ));
            }
            let chars = token.chars().count();
            if chars < MIN_TOKEN_CHARS {
                return Err(CliError::new(
                    code::FAILURE,
                    format!(
                        "token file {} holds {chars} characters, fewer than {MIN_TOKEN_CHARS}: too easy to guess; delete it to have one generated",
                        path.display()
                    ),
                ));
            }
            Ok(token)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut random = [0u8; 32];
            use std::io::Read;
            std::fs::File::open("/dev/urandom")
                .and_then(|mut f| f.read_exact(&mut random))
                .map_err(failed)?;
            let token: String = random.iter().map(|b| format!("{b:02x}")).collect();
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(path)
                .map_err(failed)?;
            writeln!(file, "{token}").map_err(failed)?;
            Ok(token)
        }
        Err(e) => Err(failed(e)),
    }
}

/// A server running in this process, and how to stop it.
pub(crate) struct Serving {
    stop: tokio::sync::oneshot::Sender<()>,
    done: tokio::task::JoinHandle<workjournal::Result<()>>,
}

impl Serving {
    /// Run `server` on `listeners` until [`Serving::stop`].
    fn start(server: Server, listeners: Vec<Listener>) -> Self {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let done = tokio::spawn(server.run(listeners, async {
            let _ = stopped.await;
        }));
        Serving { stop, done }
    }

    /// Stop accepting, let requests in flight finish, remove the socket.
    pub(crate) async fn stop(self) {
        let _ = self.stop.send(());
        if let Ok(Err(e)) = self.done.await {
            tracing::warn!("server: {}", crate::one_line(&e));
        }
    }
}

/// What a server of a queue file knows besides the queue: where route
/// `forward_lag` reads the file's forwarding lag (SPEC sections 10 and 11).
#[derive(Default)]
pub(crate) struct ServedLag {
    #[cfg(feature = "forward")]
    source: Option<workjournal::forward::LagSource>,
}

impl ServedLag {
    /// The lag of `file`, which no forwarder of this process runs on.
    #[cfg(feature = "embedded")]
    pub(crate) fn of_file(file: &workjournal::EmbeddedQueue) -> Self {
        #[cfg(feature = "forward")]
        return ServedLag {
            source: Some(workjournal::forward::LagSource::file(file.clone())),
        };
        #[cfg(not(feature = "forward"))]
        {
            let _ = file;
            ServedLag::default()
        }
    }

    /// The lag of the file a forwarder of this process runs on.
    #[cfg(feature = "forward")]
    pub(crate) fn of_forwarder(source: workjournal::forward::LagSource) -> Self {
        ServedLag {
            source: Some(source),
        }
    }

    fn give(self, server: Server) -> Server {
        #[cfg(feature = "forward")]
        if let Some(source) = self.source {
            return server.forward_lag(source);
        }
        server
    }
}

/// Serve `queue`, the queue file `db` this process opened, on the file's
/// socket (`socket_path_for`) while it runs, so `add`, `stats`, `pause`
/// ... from other processes go through this process (SPEC section 10,
/// Discovery): `work` and `forward` do. `None`, after a warning, when the
/// socket cannot be bound: the caller still runs, and other processes
/// then find the file locked. Only `forward` uses it now: `work` serves
/// through the library's take-over (`open_for_work`).
#[cfg(feature = "forward")]
pub(crate) async fn serve_own_file(
    db: &Path,
    queue: BoxQueue,
    max_payload_bytes: usize,
    lag: ServedLag,
) -> Option<Serving> {
    let socket = workjournal::socket_path_for(db);
    match Listener::bind_unix(&socket, &SocketPermissions::default()).await {
        Ok(listener) => {
            let options = ServerOptions::default().max_payload_bytes(max_payload_bytes);
            let server = lag.give(Server::new(queue, options));
            Some(Serving::start(server, vec![listener]))
        }
        Err(e) => {
            tracing::warn!("not serving {}: {}", socket.display(), crate::one_line(&e));
            None
        }
    }
}

/// The queue for `work`: the process serving `--db` if one does; else the
/// file, which this process then serves on its socket while it runs, so
/// `add`, `stats`, `pause` ... from other processes go through it. When
/// the serving process goes away, `work` takes the file over and serves
/// it in turn (SPEC section 10, Take-over): the library's `FileQueue`
/// runs that server, and its `close` stops it. The flag says whether
/// another process serves the queue (its config applies).
pub(crate) async fn open_for_work(global: &Global, config: Config) -> CliResult<(BoxQueue, bool)> {
    if global.redis.is_some() || global.db.to_str().is_some_and(is_url) {
        let (queue, opened) = crate::open::open_where(global, config, false).await?;
        return Ok((queue, opened.is_served()));
    }
    let file = crate::open::connect_options()
        .serve(true)
        .file_queue(&global.db, config)
        .await?;
    let served = !file.is_owner();
    Ok((BoxQueue::new(file), served))
}

/// Targets the library's `connect` reads as URLs rather than files.
pub(crate) fn is_url(target: &str) -> bool {
    !matches!(
        workjournal::Target::parse(target),
        workjournal::Target::File(_)
    )
}

/// The queue file, opened (and so owned) by `serve`, and its lag for the
/// route `forward_lag`.
#[cfg(feature = "embedded")]
async fn open_owned_file(global: &Global) -> CliResult<(BoxQueue, ServedLag)> {
    let file = workjournal::EmbeddedQueue::open(&global.db, Config::default())
        .await
        .map_err(|e| match e {
            workjournal::Error::Locked { .. } => CliError::new(
                code::LOCKED,
                format!(
                    "{}; is another `workjournal serve` or `work` running on it?",
                    crate::one_line(&e)
                ),
            ),
            other => other.into(),
        })?;
    let lag = ServedLag::of_file(&file);
    Ok((BoxQueue::new(file), lag))
}

#[cfg(not(feature = "embedded"))]
async fn open_owned_file(_global: &Global) -> CliResult<(BoxQueue, ServedLag)> {
    Err(CliError::new(
        code::USAGE,
        "--db: this workjournal was built without the embedded feature (rebuild with --features embedded, or pass --redis URL)",
    ))
}

/// `workjournal serve`.
pub(crate) async fn serve(global: &Global, args: &ServeArgs) -> CliResult {
    let (queue, lag, default_socket) = match &global.redis {
        Some(_) => (
            crate::open::open(global, Config::default()).await?,
            ServedLag::default(),
            PathBuf::from("./workjournal.sock"),
        ),
        None => {
            let (queue, lag) = open_owned_file(global).await?;
            (queue, lag, workjournal::socket_path_for(&global.db))
        }
    };
    let result = run_serve(&queue, lag, args, default_socket).await;
    let closed = queue.close().await;
    result?;
    closed?;
    Ok(())
}

async fn run_serve(
    queue: &BoxQueue,
    lag: ServedLag,
    args: &ServeArgs,
    default_socket: PathBuf,
) -> CliResult {
    // Ctrl-C/SIGTERM are taken over before the socket appears: a client
    // (or a test) that sees the socket may signal at once, and the default
    // action would kill the server without its shutdown.
    let signals = ShutdownSignals::install()?;
    let socket = args.socket.clone().unwrap_or(default_socket);
    let group = args.socket_group.as_deref().map(group_id).transpose()?;
    let permissions = SocketPermissions {
        mode: args
            .socket_mode
            .unwrap_or(if group.is_some() { 0o660 } else { 0o600 }),
        group,
    };
    // TCP, the dashboard and the token first: a failure there (a port in
    // use, a token file readable by others) then leaves no socket file
    // behind, and the socket is made only once nothing else can fail.
    let mut options = ServerOptions::default().read_only(args.read_only);
    let token_file = args
        .token_file
        .clone()
        .unwrap_or_else(|| socket.with_extension("token"));
    let read_token_file = args
        .read_token_file
        .clone()
        .unwrap_or_else(|| socket.with_extension("read-token"));
    let mut others = Vec::new();
    let mut tcp_banner = String::new();
    if let Some(listen) = &args.listen {
        let addr = listen_addr(listen)?;
        let tcp = Listener::bind_tcp(addr).await?;
        let bound = tcp.local_addr().unwrap_or(addr);
        tcp_banner.push_str(&format!(
            " and http://{bound} (bearer token in {})",
            token_file.display()
        ));
        others.push(tcp);
    }
    if let Some(http) = &args.http {
        let addr = flag_addr("--http", http)?;
        let (listener, bound) = bind_dashboard(addr).await?;
        tcp_banner.push_str(&format!(
            "; dashboard and /metrics on http://{bound}/ (open http://{bound}/?token=<the token in {}>; viewers and scrapers: the read-only token in {}){}",
            token_file.display(),
            read_token_file.display(),
            if args.read_only { ", read-only" } else { "" }
        ));
        others.push(listener);
    }
    if args.listen.is_some() || args.http.is_some() {
        let full = load_or_create_token(&token_file)?;
        let read = load_or_create_token(&read_token_file)?;
        if full == read {
            return Err(CliError::new(
                code::FAILURE,
                format!(
                    "{} and {} hold the same token: the read-only token must differ from the full one",
                    token_file.display(),
                    read_token_file.display()
                ),
            ));
        }
        options = options.token(full).read_token(read);
    }
    let mut listeners =
        vec![
            Listener::bind_unix(&socket, &permissions)
                .await
                .map_err(|e| match e {
                    workjournal::Error::Locked { .. } => CliError::new(
                        code::LOCKED,
                        format!("another server already answers on {}", socket.display()),
                    ),
                    other => other.into(),
                })?,
        ];
    listeners.extend(others);
    let banner = format!("serving on unix:{}{tcp_banner}", socket.display());
    let serving = Serving::start(lag.give(Server::new(queue.clone(), options)), listeners);
    let _ = writeln!(std::io::stderr(), "workjournal: {banner}");
    signals.wait().await;
    serving.stop().await;
    Ok(())
}

#[cfg(feature = "dashboard")]
async fn bind_dashboard(addr: SocketAddr) -> CliResult<(Listener, SocketAddr)> {
    let listener = Listener::bind_dashboard(addr).await?;
    let bound = listener.local_addr().unwrap_or(addr);
    Ok((listener, bound))
}

#[cfg(not(feature = "dashboard"))]
async fn bind_dashboard(_addr: SocketAddr) -> CliResult<(Listener, SocketAddr)> {
    Err(CliError::new(
        code::USAGE,
        "--http: this workjournal was built without the dashboard feature (rebuild with --features dashboard)",
    ))
}

/// Ctrl-C and SIGTERM, listened for from `install` on.
struct ShutdownSignals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
}

impl ShutdownSignals {
    fn install() -> CliResult<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        let err = |e: std::io::Error| {
            CliError::new(
                code::FAILURE,
                format!("cannot listen for Ctrl-C/SIGTERM: {e}"),
            )
        };
        Ok(Self {
            int: signal(SignalKind::interrupt()).map_err(err)?,
            term: signal(SignalKind::terminate()).map_err(err)?,
        })
    }

    /// Until the first Ctrl-C or SIGTERM.
    async fn wait(mut self) {
        tokio::select! { _ = self.int.recv() => {}, _ = self.term.recv() => {} }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_port_listens_on_loopback_only() {
        assert_eq!(
            listen_addr("7070").ok(),
            Some(SocketAddr::from(([127, 0, 0, 1], 7070)))
        );
        assert_eq!(
            listen_addr(":7070").ok(),
            Some(SocketAddr::from(([127, 0, 0, 1], 7070)))
        );
        assert_eq!(
            listen_addr("0.0.0.0:7070").ok(),
            Some(SocketAddr::from(([0, 0, 0, 0], 7070)))
        );
        assert!(listen_addr("nowhere").is_err());
    }

    #[test]
    fn modes_are_octal() {
        assert_eq!(parse_mode("600"), Ok(0o600));
        assert_eq!(parse_mode("0o660"), Ok(0o660));
        assert!(parse_mode("999").is_err());
        assert!(parse_mode("1777").is_err());
    }
}
