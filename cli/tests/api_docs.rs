//! docs/API.md is run, not just read: every `sh` and `python` block runs,
//! in order, against a real `workjournal serve`, and must succeed; every
//! request body the `curl` examples send and every reply they get is valid
//! against the route's schemas in the served OpenAPI document, and every
//! route has such an example (SPEC section 10); and the route table names
//! every operation of the wire format.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// Stands in for `curl` on the examples' `PATH`: runs the real one
/// (`REAL_CURL`) with the same arguments and output, and appends the
/// arguments, the reply's status and its body to `CURL_LOG`, one JSON
/// object a line.
const CURL_SHIM: &str = r#"#!/usr/bin/env python3
import json, os, subprocess, sys, tempfile
args, rest, out, i = sys.argv[1:], [], None, 0
while i < len(args):
    if args[i] in ("-o", "--output") and i + 1 < len(args):
        out, i = args[i + 1], i + 2
    else:
        rest.append(args[i])
        i += 1
tmp = tempfile.mkdtemp()
body_path, head_path = os.path.join(tmp, "body"), os.path.join(tmp, "head")
p = subprocess.run([os.environ["REAL_CURL"], *rest, "-o", body_path, "-D", head_path],
                   stdout=subprocess.PIPE)
body = open(body_path, "rb").read() if os.path.exists(body_path) else b""
head = open(head_path, "rb").read().decode("latin-1") if os.path.exists(head_path) else ""
status = int(head.split()[1]) if head.startswith("HTTP/") else 0
with open(os.environ["CURL_LOG"], "a") as log:
    log.write(json.dumps({"args": args, "status": status,
                          "body": body.decode("utf-8", "replace")}) + "\n")
if out is None:
    sys.stdout.buffer.write(body)
else:
    open(out, "wb").write(body)
sys.stdout.buffer.write(p.stdout)
sys.exit(p.returncode)
"#;

/// The first `curl` on `PATH`.
fn real_curl() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join("curl"))
        .find(|p| p.is_file())
        .expect("curl is not on PATH")
}

/// Errors of `instance` against the schema at `pointer` in `doc` (its
/// `$ref`s resolved in `doc`'s components), as one line each.
fn schema_errors(doc: &Value, pointer: &str, instance: &Value) -> Vec<String> {
    let Some(schema) = doc.pointer(pointer) else {
        return vec![format!("the document has nothing at {pointer}")];
    };
    let schema = json!({"components": doc["components"], "allOf": [schema]});
    let validator = jsonschema::draft202012::new(&schema)
        .unwrap_or_else(|e| panic!("schema at {pointer} does not compile: {e}"));
    validator
        .iter_errors(instance)
        .map(|e| format!("{e} (at {})", e.instance_path()))
        .collect()
}

/// Where the schema of the `status` reply of `method` `path` is: a
/// response may be a `$ref` to `components/responses`.
fn reply_pointer(doc: &Value, path: &str, method: &str, status: u16) -> String {
    let escaped = path.replace('~', "~0").replace('/', "~1");
    let mut response = format!("/paths/{escaped}/{method}/responses/{status}");
    if let Some(r) = doc
        .pointer(&format!("{response}/$ref"))
        .and_then(Value::as_str)
    {
        response = r.trim_start_matches('#').to_string();
    }
    format!("{response}/content/application~1json/schema")
}

/// One `curl` call the examples made, from the shim's log.
struct Call {
    args: Vec<String>,
    status: u16,
    body: String,
}

impl Call {
    /// The route `/v1/<op>` it went to.
    fn path(&self) -> Option<String> {
        let url = self.args.iter().find(|a| a.starts_with("http://"))?;
        let path = url.strip_prefix("http://")?.split_once('/')?.1;
        Some(format!("/{}", path.split('?').next().unwrap_or(path)))
    }

    /// The request body it sent, if any.
    fn data(&self) -> Option<&str> {
        let at = self
            .args
            .iter()
            .position(|a| matches!(a.as_str(), "-d" | "--data" | "--data-raw"))?;
        self.args.get(at + 1).map(String::as_str)
    }
}

/// Check every logged call against `doc` and return the routes that have
/// a valid request and a valid 200 reply.
fn check_calls(doc: &Value, log: &str) -> BTreeSet<String> {
    let mut covered = BTreeSet::new();
    let mut problems = Vec::new();
    for line in log.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        let call = Call {
            args: serde_json::from_value(v["args"].clone()).unwrap(),
            status: u16::try_from(v["status"].as_u64().unwrap()).unwrap(),
            body: v["body"].as_str().unwrap().to_string(),
        };
        let Some(path) = call.path() else { continue };
        let Some(op) = path.strip_prefix("/v1/") else {
            continue;
        };
        if op == "openapi.json" {
            continue;
        }
        let what = format!("{path} {:?}", call.data());
        let method = if call.data().is_some() { "post" } else { "get" };
        let mut ok = true;
        if let Some(data) = call.data() {
            let request: Value = serde_json::from_str(data)
                .unwrap_or_else(|e| panic!("{what}: the request is not JSON: {e}"));
            let escaped = path.replace('/', "~1");
            let pointer =
                format!("/paths/{escaped}/post/requestBody/content/application~1json/schema");
            for e in schema_errors(doc, &pointer, &request) {
                problems.push(format!("{what}: request: {e}"));
                ok = false;
            }
        }
        let reply: Value = serde_json::from_str(&call.body)
            .unwrap_or_else(|e| panic!("{what}: the reply is not JSON: {e}: {}", call.body));
        let pointer = reply_pointer(doc, &path, method, call.status);
        for e in schema_errors(doc, &pointer, &reply) {
            problems.push(format!("{what}: reply {}: {e}: {}", call.status, call.body));
            ok = false;
        }
        if ok && call.status == 200 && method == "post" {
            covered.insert(op.to_string());
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    covered
}

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
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let shim = bin.join("curl");
    std::fs::write(&shim, CURL_SHIM).unwrap();
    let mut mode = std::fs::metadata(&shim).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut mode, 0o755);
    std::fs::set_permissions(&shim, mode).unwrap();
    let curl_log = dir.path().join("curl.log");
    let path = std::env::join_paths(std::iter::once(bin.clone()).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .unwrap();
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
            .env("PATH", &path)
            .env("REAL_CURL", real_curl())
            // The Python examples import the client from the tree.
            .env(
                "PYTHONPATH",
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../clients/python"),
            )
            .env("CURL_LOG", &curl_log)
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
    // Every request and reply of the examples against the document the
    // server serves, and every route among them.
    let served = Command::new(real_curl())
        .args(["-sS", "--fail-with-body", "--unix-socket"])
        .arg(&socket)
        .arg("http://localhost/v1/openapi.json")
        .output()
        .unwrap();
    assert!(served.status.success());
    let openapi: Value = serde_json::from_slice(&served.stdout).unwrap();
    let covered = check_calls(&openapi, &std::fs::read_to_string(&curl_log).unwrap());
    let missing: Vec<&str> = workjournal::wire::OPS
        .iter()
        .copied()
        .filter(|op| !covered.contains(*op))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/API.md has no checked curl example of {missing:?}"
    );
    // The schemas refuse what the server refuses.
    let add = "/paths/~1v1~1add/post/requestBody/content/application~1json/schema";
    for bad in [
        json!({"payload": "aGk=", "unknown": 1}),
        json!({"payload": "not base64!"}),
        json!({"payload": "aGk"}),
        json!({"payload": "aGk=", "priority": 256}),
        json!({"flow": "x"}),
    ] {
        assert!(!schema_errors(&openapi, add, &bad).is_empty(), "{bad}");
    }
    assert!(schema_errors(&openapi, add, &json!({"payload": "aGk="})).is_empty());
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(server.id().to_string())
        .status();
    assert!(server.wait().unwrap().success());
    // What the examples did is in the file: five adds before the route
    // tour (two curl, one binary, two Python), each acked (one by curl,
    // three by the Python client, one by its worker).
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
