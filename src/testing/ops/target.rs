//! The backends a run can drive: [`Target`], over a [`Factory`] or an embedded
//! file (on disk or in memory) that can be reopened and recounted.

use std::collections::BTreeMap;
use std::fmt;

use crate::browse::ItemState;
use crate::config::Config;
use crate::error::Error;
#[cfg(feature = "embedded")]
use crate::queue::WorkQueue;
use crate::queue::{BoxFuture, BoxQueue};
use crate::testing::Factory;

/// A backend under test, with what it offers beyond the trait.
pub trait Target: Send {
    /// The queue.
    fn queue(&self) -> &BoxQueue;

    /// Whether [`Target::reopen`] is supported.
    fn can_reopen(&self) -> bool {
        false
    }

    /// Close the queue and open it again on the same storage.
    fn reopen(&mut self) -> BoxFuture<'_, crate::Result<()>> {
        Box::pin(async { Err(Error::invalid("this backend cannot be reopened")) })
    }

    /// Where every item is, by a full scan of the backend's storage, if the
    /// backend offers such a recount (`None` otherwise).
    fn recount(&self) -> BoxFuture<'_, Option<crate::Result<BTreeMap<u64, ItemState>>>> {
        Box::pin(async { None })
    }
}

/// A backend made by a [`Factory`]: the trait only, no reopen, no recount.
pub struct FactoryTarget {
    subject: crate::testing::Subject,
}

impl fmt::Debug for FactoryTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FactoryTarget").finish_non_exhaustive()
    }
}

impl FactoryTarget {
    /// A fresh queue of `factory` with `config`.
    pub async fn new(factory: &dyn Factory, config: Config) -> Self {
        FactoryTarget {
            subject: factory.make(config).await,
        }
    }
}

impl Target for FactoryTarget {
    fn queue(&self) -> &BoxQueue {
        &self.subject.queue
    }
}

/// Where an [`EmbeddedTarget`] keeps its file.
#[cfg(feature = "embedded")]
#[derive(Debug)]
enum Storage {
    /// A real file in its own temp dir.
    File(tempfile::TempDir),
    /// A [`SimDisk`](crate::testing::faults::SimDisk) (a file in memory) and
    /// the name that stands for its path in the in-process lock.
    Sim(crate::testing::faults::SimDisk, String),
}

#[cfg(feature = "embedded")]
impl Storage {
    /// Every add, however small, has its redo record written ahead of its
    /// run (`write_ahead_from(1)`, SPEC 6, redo log), so that the model
    /// tests and the fuzz targets check that path on every add; the path
    /// that logs an add after it ran is the default for batches under 32
    /// items, which the conformance suite and every other test take.
    async fn open(&self, config: Config) -> crate::Result<crate::EmbeddedQueue> {
        let options = crate::EmbeddedOptions::default().write_ahead_from(1);
        match self {
            Storage::File(dir) => {
                crate::EmbeddedQueue::open_with(dir.path().join("queue.redb"), config, options)
                    .await
            }
            // No whole-file integrity check at open: this file is never
            // damaged (`open_damaged_file` fuzzes that check).
            Storage::Sim(disk, name) => {
                crate::EmbeddedQueue::open_on_backend_with_options(
                    name,
                    crate::backend::embedded::opened_once(disk.backend()),
                    config,
                    options.verify_on_open(false),
                )
                .await
            }
        }
    }
}

/// The embedded backend with reopen on the same storage and the file's
/// recount ([`EmbeddedQueue::audit`](crate::EmbeddedQueue::audit)): on a
/// real file in its own temp dir ([`EmbeddedTarget::new`]), or on a
/// simulated disk ([`EmbeddedTarget::in_memory`]), free of file-system
/// calls and fsyncs, so that a fuzz execution costs what the queue costs.
#[cfg(feature = "embedded")]
#[derive(Debug)]
pub struct EmbeddedTarget {
    storage: Storage,
    config: Config,
    queue: crate::EmbeddedQueue,
    boxed: BoxQueue,
}

#[cfg(feature = "embedded")]
impl EmbeddedTarget {
    /// A fresh queue file in a new temp dir (under `TMPDIR`).
    ///
    /// # Errors
    ///
    /// As [`EmbeddedQueue::open`](crate::EmbeddedQueue::open), and `Io` if
    /// the temp dir cannot be made.
    pub async fn new(config: Config) -> crate::Result<Self> {
        let dir = tempfile::tempdir().map_err(|source| Error::Io {
            context: "make a temp dir".into(),
            source,
        })?;
        Self::on(Storage::File(dir), config).await
    }

    /// A fresh queue on an empty simulated disk; `name` must be unique in
    /// the process (it stands for the path in the in-process lock).
    ///
    /// # Errors
    ///
    /// As [`EmbeddedQueue::open`](crate::EmbeddedQueue::open).
    pub async fn in_memory(name: String, config: Config) -> crate::Result<Self> {
        Self::on_disk(name, crate::testing::faults::SimDisk::new(), config).await
    }

    /// A queue on `disk`, a simulated disk that may already hold a queue
    /// (for example a copy of a fresh queue's
    /// [`image`](crate::testing::faults::SimDisk::image), which spares a
    /// fuzz input the creation of a file); `name` as for
    /// [`EmbeddedTarget::in_memory`].
    ///
    /// # Errors
    ///
    /// As [`EmbeddedQueue::open`](crate::EmbeddedQueue::open).
    pub async fn on_disk(
        name: String,
        disk: crate::testing::faults::SimDisk,
        config: Config,
    ) -> crate::Result<Self> {
        Self::on(Storage::Sim(disk, name), config).await
    }

    async fn on(storage: Storage, config: Config) -> crate::Result<Self> {
        let queue = storage.open(config.clone()).await?;
        Ok(EmbeddedTarget {
            storage,
            config,
            boxed: BoxQueue::new(queue.clone()),
            queue,
        })
    }

    /// The queue file, for a target on a real file.
    pub fn path(&self) -> Option<std::path::PathBuf> {
        match &self.storage {
            Storage::File(dir) => Some(dir.path().join("queue.redb")),
            Storage::Sim(..) => None,
        }
    }
}

#[cfg(feature = "embedded")]
impl Target for EmbeddedTarget {
    fn queue(&self) -> &BoxQueue {
        &self.boxed
    }

    fn can_reopen(&self) -> bool {
        true
    }

    fn reopen(&mut self) -> BoxFuture<'_, crate::Result<()>> {
        Box::pin(async move {
            self.queue.close().await?;
            let queue = self.storage.open(self.config.clone()).await?;
            self.boxed = BoxQueue::new(queue.clone());
            self.queue = queue;
            Ok(())
        })
    }

    fn recount(&self) -> BoxFuture<'_, Option<crate::Result<BTreeMap<u64, ItemState>>>> {
        Box::pin(async move { Some(self.queue.audit().await) })
    }
}
