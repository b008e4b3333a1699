//! The remote backend under test: a [`Server`] in
//! this process on an embedded file in a temp dir, reached over a real Unix
//! socket by a [`RemoteQueue`].

use std::path::PathBuf;

use super::{Factory, Subject};
use crate::config::Config;
use crate::queue::{BoxFuture, BoxQueue, WorkQueue};
use crate::server::{Listener, Server, ServerOptions, SocketPermissions};
use crate::{EmbeddedQueue, RemoteOptions, RemoteQueue};

/// A served embedded queue and the way to stop it. Dropping it stops the
/// server (its socket file is removed) and closes the queue.
#[derive(Debug)]
pub struct ServedQueue {
    /// The served queue, as the server holds it.
    pub queue: EmbeddedQueue,
    /// The socket the server listens on.
    pub socket: PathBuf,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    done: Option<tokio::task::JoinHandle<()>>,
    _dir: Option<tempfile::TempDir>,
}

impl ServedQueue {
    /// Open `dir/queue.redb` with `config` and serve it at `dir/queue.sock`
    /// with `options`.
    ///
    /// # Errors
    ///
    /// As [`EmbeddedQueue::open`] and [`Listener::bind_unix`].
    pub async fn start_in(
        dir: &std::path::Path,
        config: Config,
        options: ServerOptions,
    ) -> crate::Result<Self> {
        let queue = EmbeddedQueue::open(dir.join("queue.redb"), config).await?;
        let socket = dir.join("queue.sock");
        let listener = Listener::bind_unix(&socket, &SocketPermissions::default()).await?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = Server::new(BoxQueue::new(queue.clone()), options);
        let served = queue.clone();
        let done = tokio::spawn(async move {
            let _ = server
                .run(vec![listener], async {
                    let _ = stopped.await;
                })
                .await;
            let _ = served.close().await;
        });
        Ok(ServedQueue {
            queue,
            socket,
            stop: Some(stop),
            done: Some(done),
            _dir: None,
        })
    }

    /// As [`ServedQueue::start_in`], in a fresh temp dir it keeps.
    ///
    /// # Errors
    ///
    /// As [`ServedQueue::start_in`], and `Io` for the temp dir.
    pub async fn start(config: Config, options: ServerOptions) -> crate::Result<Self> {
        let dir = tempfile::tempdir().map_err(|source| crate::Error::Io {
            context: "make a temp dir".into(),
            source,
        })?;
        let mut served = Self::start_in(dir.path(), config, options).await?;
        served._dir = Some(dir);
        Ok(served)
    }

    /// A client of this server.
    ///
    /// # Errors
    ///
    /// As [`RemoteQueue::connect_unix`].
    pub async fn client(&self, options: RemoteOptions) -> crate::Result<RemoteQueue> {
        RemoteQueue::connect_unix(&self.socket, options).await
    }

    /// Stop the server, wait for it and close the queue.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(done) = self.done.take() {
            let _ = done.await;
        }
    }
}

impl Drop for ServedQueue {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Factory of [`RemoteQueue`]s, each talking to its own in-process server
/// over a Unix socket, the server on an embedded file in a temp dir.
#[derive(Debug, Default, Clone, Copy)]
pub struct RemoteFactory;

impl Factory for RemoteFactory {
    fn name(&self) -> &'static str {
        "remote"
    }

    #[allow(clippy::expect_used)]
    fn make(&self, config: Config) -> BoxFuture<'_, Subject> {
        Box::pin(async move {
            let options = ServerOptions::default()
                .max_payload_bytes(config.get_max_payload_bytes())
                .fire_schedules(false);
            let served = ServedQueue::start(config, options)
                .await
                .expect("serve an embedded queue in a fresh temp dir");
            let client = served
                .client(RemoteOptions::default())
                .await
                .expect("connect to the in-process server");
            Subject::new(BoxQueue::new(client), vec![Box::new(served)])
        })
    }

    fn durable(&self) -> bool {
        true
    }
}

/// The remote backend for the model tests: a server on an embedded file in
/// its own temp dir and one client. Reopen stops the server (closing the
/// file) and starts a new one on the same file and socket; the same client
/// finds it again by itself. Recount reads the served file.
#[derive(Debug)]
pub struct RemoteTarget {
    dir: tempfile::TempDir,
    config: Config,
    served: Option<ServedQueue>,
    boxed: BoxQueue,
}

impl RemoteTarget {
    /// A fresh served file and its client.
    ///
    /// # Errors
    ///
    /// As [`ServedQueue::start_in`] and [`RemoteQueue::connect_unix`].
    pub async fn new(config: Config) -> crate::Result<Self> {
        let dir = tempfile::tempdir().map_err(|source| crate::Error::Io {
            context: "make a temp dir".into(),
            source,
        })?;
        let served =
            ServedQueue::start_in(dir.path(), config.clone(), Self::options(&config)).await?;
        let client = served.client(RemoteOptions::default()).await?;
        Ok(RemoteTarget {
            dir,
            config,
            served: Some(served),
            boxed: BoxQueue::new(client),
        })
    }

    fn options(config: &Config) -> ServerOptions {
        // The cases fire schedules by hand, at their manual clock's times.
        ServerOptions::default()
            .max_payload_bytes(config.get_max_payload_bytes())
            .fire_schedules(false)
    }
}

impl super::ops::Target for RemoteTarget {
    fn queue(&self) -> &BoxQueue {
        &self.boxed
    }

    fn can_reopen(&self) -> bool {
        true
    }

    fn reopen(&mut self) -> BoxFuture<'_, crate::Result<()>> {
        Box::pin(async move {
            if let Some(served) = self.served.take() {
                served.stop().await;
            }
            let options = Self::options(&self.config);
            self.served =
                Some(ServedQueue::start_in(self.dir.path(), self.config.clone(), options).await?);
            Ok(())
        })
    }

    fn recount(
        &self,
    ) -> BoxFuture<
        '_,
        Option<crate::Result<std::collections::BTreeMap<u64, crate::browse::ItemState>>>,
    > {
        Box::pin(async move {
            match &self.served {
                Some(served) => Some(served.queue.audit().await),
                None => None,
            }
        })
    }
}
