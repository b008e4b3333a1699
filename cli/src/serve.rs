//! `workjournal serve`, and the socket `work` serves while it runs
//! (SPEC section 10).

use std::io::Write;
use std::net::{SocketAddr, ToSocketAddrs};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use clap::Args;
use workjournal::server::{Listener, Server, ServerOptions, SocketPermissions};
use workjournal::{BoxQueue, Config, ConnectOptions, Opened, WorkQueue};

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
    /// The bearer token for TCP clients: read from FILE, or generated into
    /// it (mode 0600) if it does not exist (default: the socket path with
    /// .token in place of .sock).
    #[arg(long, value_name = "FILE")]
    pub(crate) token_file: Option<PathBuf>,
    /// The socket's file mode, in octal (default 600: only this user).
    /// Any group or other bit lets the file's permissions, not the peer's
    /// uid, decide who may connect.
    #[arg(long, value_name = "MODE", value_parser = parse_mode)]
    pub(crate) socket_mode: Option<u32>,
    /// Give the socket to GROUP (a name or a gid); implies mode 660 unless
    /// --socket-mode says otherwise.
    #[arg(long, value_name = "GROUP")]
    pub(crate) socket_group: Option<String>,
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
    let text = listen.strip_prefix(':').unwrap_or(listen);
    if let Ok(port) = text.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    listen
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| {
            CliError::new(
                code::USAGE,
                format!("--listen {listen:?}: expected HOST:PORT or PORT"),
            )
        })
}

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
    /// Serve `queue` on `listeners` until [`Serving::stop`].
    fn start(queue: BoxQueue, listeners: Vec<Listener>, options: ServerOptions) -> Self {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = Server::new(queue, options);
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

/// The queue for `work`: the process serving `--db` if one does; else the
/// file, which this process then serves on its socket while it runs, so
/// `add`, `stats`, `pause` ... from other processes go through it.
pub(crate) async fn open_for_work(
    global: &Global,
    config: Config,
) -> CliResult<(BoxQueue, Option<Serving>)> {
    if global.redis.is_some() || global.db.to_str().is_some_and(is_url) {
        return Ok((crate::commands::open(global, config).await?, None));
    }
    // Only a file this process opens itself is served from here.
    #[cfg(feature = "embedded")]
    let max_payload_bytes = config.get_max_payload_bytes();
    match ConnectOptions::default()
        .open_file_or_server(&global.db, config)
        .await?
    {
        Opened::Served(remote) => Ok((BoxQueue::new(remote), None)),
        #[cfg(feature = "embedded")]
        Opened::Owned(file) => {
            let queue = BoxQueue::new(file);
            let socket = workjournal::socket_path_for(&global.db);
            match Listener::bind_unix(&socket, &SocketPermissions::default()).await {
                Ok(listener) => {
                    let options = ServerOptions::default().max_payload_bytes(max_payload_bytes);
                    let serving = Serving::start(queue.clone(), vec![listener], options);
                    Ok((queue, Some(serving)))
                }
                Err(e) => {
                    // Work still runs; other processes then find the file
                    // locked, as before.
                    tracing::warn!("not serving {}: {}", socket.display(), crate::one_line(&e));
                    Ok((queue, None))
                }
            }
        }
    }
}

/// Targets the library's `connect` reads as URLs rather than files.
pub(crate) fn is_url(target: &str) -> bool {
    !matches!(
        workjournal::Target::parse(target),
        workjournal::Target::File(_)
    )
}

/// The queue file, opened (and so owned) by `serve`.
#[cfg(feature = "embedded")]
async fn open_owned_file(global: &Global) -> CliResult<BoxQueue> {
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
    Ok(BoxQueue::new(file))
}

#[cfg(not(feature = "embedded"))]
async fn open_owned_file(_global: &Global) -> CliResult<BoxQueue> {
    Err(CliError::new(
        code::USAGE,
        "--db: this workjournal was built without the embedded feature (rebuild with --features embedded, or pass --redis URL)",
    ))
}

/// `workjournal serve`.
pub(crate) async fn serve(global: &Global, args: &ServeArgs) -> CliResult {
    let (queue, default_socket) = match &global.redis {
        Some(_) => (
            crate::commands::open(global, Config::default()).await?,
            PathBuf::from("./workjournal.sock"),
        ),
        None => (
            open_owned_file(global).await?,
            workjournal::socket_path_for(&global.db),
        ),
    };
    let result = run_serve(&queue, args, default_socket).await;
    let closed = queue.close().await;
    result?;
    closed?;
    Ok(())
}

async fn run_serve(queue: &BoxQueue, args: &ServeArgs, default_socket: PathBuf) -> CliResult {
    let socket = args.socket.clone().unwrap_or(default_socket);
    let group = args.socket_group.as_deref().map(group_id).transpose()?;
    let permissions = SocketPermissions {
        mode: args
            .socket_mode
            .unwrap_or(if group.is_some() { 0o660 } else { 0o600 }),
        group,
    };
    // TCP (and its token) first: a failure there (a port in use, a token
    // file readable by others) then leaves no socket file behind, and the
    // socket is made only once nothing else can fail.
    let mut options = ServerOptions::default();
    let mut tcp = None;
    let mut tcp_banner = String::new();
    if let Some(listen) = &args.listen {
        let addr = listen_addr(listen)?;
        let token_file = args
            .token_file
            .clone()
            .unwrap_or_else(|| socket.with_extension("token"));
        let listener = Listener::bind_tcp(addr).await?;
        options = options.token(load_or_create_token(&token_file)?);
        let bound = listener.local_addr().unwrap_or(addr);
        tcp_banner = format!(
            " and http://{bound} (bearer token in {})",
            token_file.display()
        );
        tcp = Some(listener);
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
    listeners.extend(tcp);
    let banner = format!("serving on unix:{}{tcp_banner}", socket.display());
    let serving = Serving::start(queue.clone(), listeners, options);
    let _ = writeln!(std::io::stderr(), "workjournal: {banner}");
    wait_for_signal().await?;
    serving.stop().await;
    Ok(())
}

async fn wait_for_signal() -> CliResult {
    use tokio::signal::unix::{SignalKind, signal};
    let err = |e: std::io::Error| {
        CliError::new(
            code::FAILURE,
            format!("cannot listen for Ctrl-C/SIGTERM: {e}"),
        )
    };
    let mut int = signal(SignalKind::interrupt()).map_err(err)?;
    let mut term = signal(SignalKind::terminate()).map_err(err)?;
    tokio::select! { _ = int.recv() => {}, _ = term.recv() => {} }
    Ok(())
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
