//! Regressions found by a new user's review that run the `workjournal`
//! command (the library's are in the root's tests/user_findings.rs).

// Failed: `workjournal step F --exec true --lease 0s` panicked ("`period` must be non-zero", exit 101) with a backtrace.
#[test]
fn step_with_a_zero_lease_gives_one_line_and_no_panic() {
    use std::process::Command;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("q.redb");
    let wj = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_workjournal"))
            .arg("--db")
            .arg(&db)
            .args(args)
            .env_remove("RUST_BACKTRACE")
            .output()
            .unwrap()
    };
    // Only `add` creates the queue file.
    assert!(wj(&["add", "first"]).status.success());
    assert!(wj(&["pause", "f"]).status.success());
    assert!(wj(&["add", "--flow", "f", "x"]).status.success());
    // A worker parks the paused flow's item, so that `step` has one to run.
    assert!(
        wj(&["work", "--exec", "true", "--until-empty"])
            .status
            .success()
    );
    let out = wj(&["step", "f", "--exec", "true", "--lease", "0s"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(101), "panicked: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}
