//! Binding the listeners a server accepts on: the Unix socket with its
//! permissions, TCP, and the dashboard's TCP listener.

use std::net::SocketAddr;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use tokio::net::{TcpListener, UnixListener};

use crate::error::{Error, Result};

/// Who may connect to a Unix socket: its file mode and group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketPermissions {
    /// The file mode. Default: `0o600` (owner only).
    pub mode: u32,
    /// The group to give the file (a gid), if any. Default: none.
    pub group: Option<u32>,
}

impl Default for SocketPermissions {
    fn default() -> Self {
        SocketPermissions {
            mode: 0o600,
            group: None,
        }
    }
}

impl SocketPermissions {
    fn opens_to_others(&self) -> bool {
        self.mode & 0o077 != 0
    }
}

/// A bound listener for [`Server::run`](crate::server::Server::run).
#[derive(Debug)]
pub struct Listener {
    pub(super) kind: ListenerKind,
}

#[derive(Debug)]
pub(super) enum ListenerKind {
    Unix {
        listener: UnixListener,
        path: PathBuf,
        owner_uid: u32,
        inode: u64,
        open_to_others: bool,
    },
    Tcp(TcpListener),
    /// The dashboard and `/metrics` (SPEC 12), on TCP with the token.
    #[cfg(feature = "dashboard")]
    Dashboard(TcpListener),
}

fn io_err(context: String) -> impl FnOnce(std::io::Error) -> Error {
    move |source| Error::Io { context, source }
}

impl Listener {
    /// Bind a Unix socket at `path` with `permissions`. The socket is made
    /// under a temporary name, given its mode and group, then renamed into
    /// place, so it is never reachable with wider permissions. A stale
    /// socket file (nobody answers) is replaced.
    ///
    /// # Errors
    ///
    /// `Locked` if a live server already answers on `path`; `InvalidInput`
    /// if `path` exists and is not a socket; `Io` if binding fails.
    pub async fn bind_unix(
        path: impl AsRef<Path>,
        permissions: &SocketPermissions,
    ) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        if let Ok(meta) = std::fs::symlink_metadata(&path) {
            if !meta.file_type().is_socket() {
                return Err(Error::invalid(format!(
                    "{} exists and is not a socket; remove it or choose another --socket",
                    path.display()
                )));
            }
            if tokio::net::UnixStream::connect(&path).await.is_ok() {
                return Err(Error::Locked { path });
            }
        }
        let mut tmp = path.clone().into_os_string();
        tmp.push(format!(".{}.tmp", std::process::id()));
        let tmp = PathBuf::from(tmp);
        let _ = std::fs::remove_file(&tmp);
        let listener = UnixListener::bind(&tmp)
            .map_err(io_err(format!("bind the socket {}", path.display())))?;
        let prepared = (|| {
            std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(permissions.mode))?;
            if let Some(gid) = permissions.group {
                std::os::unix::fs::chown(&tmp, None, Some(gid))?;
            }
            std::fs::rename(&tmp, &path)?;
            std::fs::metadata(&path)
        })();
        let meta = match prepared {
            Ok(meta) => meta,
            Err(source) => {
                let _ = std::fs::remove_file(&tmp);
                return Err(Error::Io {
                    context: format!("set up the socket {}", path.display()),
                    source,
                });
            }
        };
        Ok(Listener {
            kind: ListenerKind::Unix {
                listener,
                path,
                owner_uid: meta.uid(),
                inode: meta.ino(),
                open_to_others: permissions.opens_to_others(),
            },
        })
    }

    /// Bind a TCP listener at `addr`. Give an explicit address; the CLI binds
    /// loopback unless one is named.
    ///
    /// # Errors
    ///
    /// `Io` if binding fails.
    pub async fn bind_tcp(addr: SocketAddr) -> Result<Self> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(io_err(format!("listen on {addr}")))?;
        Ok(Listener {
            kind: ListenerKind::Tcp(listener),
        })
    }

    /// Bind the dashboard's TCP listener at `addr` (SPEC 12.2): it serves
    /// the page at `/`, its assets and JSON routes, and `/metrics`, each
    /// behind the server's token, and no `/v1` route. Feature `dashboard`.
    ///
    /// # Errors
    ///
    /// `Io` if binding fails.
    #[cfg(feature = "dashboard")]
    pub async fn bind_dashboard(addr: SocketAddr) -> Result<Self> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(io_err(format!("listen on {addr} for the dashboard")))?;
        Ok(Listener {
            kind: ListenerKind::Dashboard(listener),
        })
    }

    /// The TCP address actually bound (useful with port 0), if TCP.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        match &self.kind {
            ListenerKind::Tcp(l) => l.local_addr().ok(),
            #[cfg(feature = "dashboard")]
            ListenerKind::Dashboard(l) => l.local_addr().ok(),
            ListenerKind::Unix { .. } => None,
        }
    }
}
