//! What the command's benches share: where their rows go and their temp
//! dirs (as the root benches' `benches/common`).

use std::io::Write;
use std::path::PathBuf;

/// Where the report's rows go: `WJ_BENCH_OUT`, else the workspace's
/// `target/wj-bench`, as for the root benches.
pub fn out_dir() -> PathBuf {
    std::env::var_os("WJ_BENCH_OUT")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/wj-bench"))
}

/// Append one row to `extra.tsv` (the format of benches/common `record`).
pub fn record(workload: &str, subject: &str, ms: f64) {
    let dir = out_dir();
    std::fs::create_dir_all(&dir).expect("create bench output dir");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("extra.tsv"))
        .expect("open extra.tsv");
    writeln!(f, "{workload}\t{subject}\t{ms}\tms").expect("write extra.tsv");
}

/// A temp dir under `WJ_BENCH_DIR`, else the system's.
pub fn temp_dir() -> tempfile::TempDir {
    match std::env::var_os("WJ_BENCH_DIR") {
        Some(d) => {
            std::fs::create_dir_all(&d).expect("create WJ_BENCH_DIR");
            tempfile::tempdir_in(d).expect("temp dir")
        }
        None => tempfile::tempdir().expect("temp dir"),
    }
}
