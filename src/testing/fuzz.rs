//! The bodies of the cargo-fuzz targets in `fuzz/` (SPEC section 5: no
//! input, stored byte or reply may panic the process or lose work).
//!
//! Each target in `fuzz/fuzz_targets/` is a one-line call into this module,
//! so `tests/fuzz_regressions.rs` replays the committed corpus and every
//! past finding on stable Rust in a plain `cargo test`. Every function here
//! takes the fuzzer's raw bytes, never fails on them, and panics only when
//! the crate broke its contract (that panic is the finding). One file per
//! target (`decode_record`, `ops_vs_model`, `open_damaged_file`,
//! `crash_recovery`, `redis_reply`, `decode_request`); this one holds what
//! they share: the runtime, the simulated disks' names and the fresh queue
//! image the op targets start from.
//!
//! Not part of the stable API.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::EmbeddedQueue;
use crate::queue::WorkQueue;
use crate::testing::faults::{DiskImage, SimDisk};

mod crash;
mod damaged;
#[cfg(any(feature = "server", feature = "remote"))]
mod decode_request;
mod ops_vs_model;
mod records;
#[cfg(feature = "redis")]
mod redis_reply;

pub use crash::{
    CrashInput, crash_recovery, crash_recovery_controls, crash_recovery_legacy, crash_recovery_with,
};
pub use damaged::{Damage, let_redb_panics_be_caught, open_damaged_file};
#[cfg(any(feature = "server", feature = "remote"))]
pub use decode_request::decode_request;
pub use ops_vs_model::{OpsInput, ops_vs_model, ops_vs_model_controls, ops_vs_model_legacy};
pub use records::decode_record;
#[cfg(feature = "redis")]
pub use redis_reply::redis_reply;

/// Most ops one fuzz input runs, so one execution stays short.
pub const MAX_OPS: usize = 64;

/// The one runtime of the fuzz targets (current thread; the embedded
/// backend's writer runs on a thread of its own).
fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        #[allow(clippy::expect_used)]
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime for the fuzz targets")
    })
}

/// A name for a simulated disk, unique in the process (it stands for the
/// path in the in-process lock).
fn disk_name() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "fuzz-disk-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Both files of a queue just created and closed, with nothing ever added,
/// made once per process: an input opens a copy of it rather than creating
/// a database, whose creation is no part of what the targets check and
/// cost more than a short input's ops. The limits are not stored in the
/// file, so one image serves every input's setup.
fn fresh_image() -> &'static DiskImage {
    static IMAGE: OnceLock<DiskImage> = OnceLock::new();
    IMAGE.get_or_init(|| {
        let disk = SimDisk::new();
        #[allow(clippy::expect_used)]
        runtime()
            .block_on(async {
                let q = EmbeddedQueue::open_on_backend(
                    &disk_name(),
                    disk.backend(),
                    crate::Config::default(),
                    false,
                )
                .await?;
                q.close().await
            })
            .expect("create the fresh queue image");
        disk.image()
    })
}
