//! `workjournal schedule ...` (SPEC 13, Command line): add, list, next,
//! pause, resume, remove, and `work` firing the schedules while it runs.

use std::path::Path;
use std::process::{Command, Output};

fn wj(db: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_workjournal"))
        .arg("--db")
        .arg(db)
        .args(args)
        .output()
        .unwrap()
}

fn ok(db: &Path, args: &[&str]) -> String {
    let out = wj(db, args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn schedule_subcommands_manage_schedules_and_work_fires_them() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("q.redb");
    let added = ok(
        &db,
        &[
            "schedule",
            "add",
            "nightly",
            "--cron",
            "30 2 * * *",
            "--tz",
            "Europe/Berlin",
            "report",
        ],
    );
    assert!(added.starts_with("added nightly; next "), "{added}");
    let again = ok(
        &db,
        &[
            "schedule",
            "add",
            "nightly",
            "--cron",
            "30 2 * * *",
            "--tz",
            "Europe/Berlin",
        ],
    );
    assert!(again.starts_with("replaced nightly"), "{again}");
    // Every 200 ms: `work` fires it while it runs.
    ok(
        &db,
        &[
            "schedule", "add", "fast", "--every", "200ms", "--flow", "f", "tick",
        ],
    );
    let next = ok(&db, &["schedule", "next", "nightly", "--count", "3"]);
    let lines: Vec<&str> = next.lines().collect();
    assert_eq!(lines.len(), 3, "{next}");
    assert!(lines.iter().all(|l| l.ends_with(":30:00Z")), "{next}");

    let json: serde_json::Value =
        serde_json::from_str(&ok(&db, &["schedule", "list", "--json"])).unwrap();
    let names: Vec<&str> = json
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["fast", "nightly"]);

    ok(&db, &["schedule", "pause", "nightly"]);
    let list = ok(&db, &["schedule", "list"]);
    assert!(
        list.lines()
            .any(|l| l.starts_with("nightly\t") && l.contains("\tpaused\t")),
        "{list}"
    );
    ok(&db, &["schedule", "resume", "nightly"]);

    // Run `work` for 2 s: the fast schedule fires, never more often than
    // its slots in that time (each slot once), and its items run.
    let ran = dir.path().join("ran.txt");
    let exec = format!("cat >> {}; echo >> {}", ran.display(), ran.display());
    let mut child = Command::new(env!("CARGO_BIN_EXE_workjournal"))
        .arg("--db")
        .arg(&db)
        .args(["work", "--exec", &exec])
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(2000));
    child.kill().unwrap();
    child.wait().unwrap();
    let json: serde_json::Value =
        serde_json::from_str(&ok(&db, &["schedule", "list", "--json"])).unwrap();
    let fast = &json.as_array().unwrap()[0];
    let fired = fast["fired"].as_u64().unwrap();
    // 2 s of 200 ms slots, and the slot at `work`'s start, at most.
    assert!((1..=11).contains(&fired), "fired {fired} times in 2 s");
    let runs = std::fs::read_to_string(&ran).unwrap_or_default();
    assert!(runs.lines().any(|l| l == "tick"), "{runs}");

    ok(&db, &["schedule", "remove", "fast"]);
    let out = wj(&db, &["schedule", "remove", "fast"]);
    assert_eq!(out.status.code(), Some(9), "{out:?}");
    let out = wj(&db, &["schedule", "add", "bad", "--cron", "61 * * * *"]);
    assert_eq!(out.status.code(), Some(7), "{out:?}");
}
