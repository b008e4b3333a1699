//! docs/API.md is run, not just read: every `sh` and `python` block runs,
//! in order, against a real `workjournal serve`, and must succeed; and the
//! route table names every operation of the wire format.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The fenced blocks of `markdown` whose info string is `lang`.
fn blocks(markdown: &str, lang: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (n, line) in markdown.lines().enumerate() {
        match &mut current {
            None if line.trim_start().starts_with("```") => {
                let info = line.trim_start().trim_start_matches('`').trim();
                if info == lang {
                    current = Some((n + 1, String::new()));
                } else {
                    // Skip a block of another language whole.
                    current = Some((0, String::new()));
                }
            }
            None => {}
            Some(_) if line.trim_start().starts_with("```") => {
                if let Some((start, body)) = current.take()
                    && start > 0
                {
                    out.push((start, body));
                }
            }
            Some((_, body)) => {
                body.push_str(line);
                body.push('\n');
            }
        }
    }
    out
}

fn doc() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/API.md")).unwrap()
}

#[test]
fn api_md_examples_run_against_a_real_server() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("jobs.redb");
    let socket = dir.path().join("jobs.redb.sock");
    let mut server = Command::new(env!("CARGO_BIN_EXE_workjournal"))
        .arg("--db")
        .arg(&db)
        .arg("serve")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        assert!(Instant::now() < deadline, "server did not come up");
        std::thread::sleep(Duration::from_millis(10));
    }
    let doc = doc();
    let mut ran = 0;
    let mut examples: Vec<(usize, &str, String)> = Vec::new();
    for (line, body) in blocks(&doc, "sh") {
        examples.push((line, "sh", body));
    }
    for (line, body) in blocks(&doc, "python") {
        examples.push((line, "python", body));
    }
    examples.sort_by_key(|e| e.0);
    for (line, lang, body) in examples {
        let mut c = match lang {
            "sh" => {
                let mut c = Command::new("sh");
                c.arg("-ec").arg(&body);
                c
            }
            _ => {
                let mut c = Command::new("python3");
                c.arg("-c").arg(&body);
                c
            }
        };
        let out = c
            .current_dir(dir.path())
            .env("WORKJOURNAL_SOCKET", &socket)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "docs/API.md line {line} ({lang}) failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        ran += 1;
    }
    assert!(ran >= 4, "only {ran} examples found");
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(server.id().to_string())
        .status();
    assert!(server.wait().unwrap().success());
    // What the examples did is in the file: four adds (two curl, one
    // binary, one Python), each acked (one by curl, three by Python).
    let out = Command::new(env!("CARGO_BIN_EXE_workjournal"))
        .arg("--db")
        .arg(&db)
        .args(["stats", "--json"])
        .output()
        .unwrap();
    let stats: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (&stats["backlog"], &stats["pending"], &stats["dead_letters"]),
        (&0.into(), &0.into(), &0.into()),
        "{stats}"
    );
}

#[test]
fn api_md_lists_every_route() {
    let doc = doc();
    for op in workjournal::wire::OPS {
        assert!(
            doc.contains(&format!("| `{op}` |")),
            "docs/API.md lacks a row for {op}"
        );
    }
}
