//! A TCP proxy for link-fault tests: put it between a client and a
//! loopback server, then cut every live connection at once or stall the
//! link (bytes are held, not lost, until it is released).

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// The link's state, watched by every connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Link {
    /// Bumped by every cut: connections older than it close.
    cuts: u64,
    /// While true, no byte is passed on.
    stalled: bool,
}

/// A loopback TCP proxy to `127.0.0.1:<target>` that cuts or stalls on
/// command. Dropping it stops accepting; live connections end at the next
/// cut or when either side closes.
#[derive(Debug)]
pub struct LinkProxy {
    port: u16,
    link: watch::Sender<Link>,
    accepted: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl LinkProxy {
    /// Listen on a free loopback port and forward to `target`. Call from a
    /// tokio runtime.
    ///
    /// # Errors
    ///
    /// If no loopback port can be bound.
    pub async fn start(target: u16) -> io::Result<LinkProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let (link, _) = watch::channel(Link {
            cuts: 0,
            stalled: false,
        });
        let accepted = Arc::new(AtomicU64::new(0));
        let (tx, count) = (link.clone(), accepted.clone());
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::Relaxed);
                let rx = tx.subscribe();
                tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(("127.0.0.1", target)).await {
                        relay(client, server, rx).await;
                    }
                });
            }
        });
        Ok(LinkProxy {
            port,
            link,
            accepted,
            task,
        })
    }

    /// `redis://127.0.0.1:<port>/`.
    pub fn redis_url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The proxy's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Close every live connection now, in both directions; bytes not yet
    /// passed on are lost. New connections are accepted as before.
    pub fn cut(&self) {
        self.link.send_modify(|l| l.cuts += 1);
    }

    /// Hold every byte (`true`) or pass them on again (`false`).
    pub fn stall(&self, stalled: bool) {
        self.link.send_modify(|l| l.stalled = stalled);
    }

    /// How many connections were accepted so far.
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }
}

impl Drop for LinkProxy {
    fn drop(&mut self) {
        self.task.abort();
        self.cut();
    }
}

/// Pass bytes both ways until either side closes or a cut comes.
async fn relay(client: TcpStream, server: TcpStream, mut link: watch::Receiver<Link>) {
    let born = link.borrow().cuts;
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let mut up = vec![0u8; 16 * 1024];
    let mut down = vec![0u8; 16 * 1024];
    loop {
        let (n, to_server) = tokio::select! {
            r = cr.read(&mut up) => (r.unwrap_or(0), true),
            r = sr.read(&mut down) => (r.unwrap_or(0), false),
            changed = link.changed() => {
                if changed.is_err() || link.borrow().cuts != born {
                    return;
                }
                continue;
            }
        };
        if n == 0 {
            return;
        }
        // Hold the bytes while stalled; a cut meanwhile drops them.
        loop {
            let l = *link.borrow_and_update();
            if l.cuts != born {
                return;
            }
            if !l.stalled {
                break;
            }
            if link.changed().await.is_err() {
                return;
            }
        }
        let sent = if to_server {
            sw.write_all(&up[..n]).await
        } else {
            cw.write_all(&down[..n]).await
        };
        if sent.is_err() {
            return;
        }
    }
}
