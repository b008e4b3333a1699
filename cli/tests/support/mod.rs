//! A real `workjournal serve` process on a queue file in a temp dir, with
//! its socket, its token and the addresses its banner names; plain HTTP/1.1
//! requests over the socket or TCP (tests/dashboard.rs, tests/metrics.rs).

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// A running `workjournal serve`.
pub struct Served {
    pub dir: TempDir,
    pub child: Child,
    /// The dashboard's `HOST:PORT`, with `--http`.
    pub http: Option<String>,
    /// The API's TCP `HOST:PORT`, with `--listen`.
    pub listen: Option<String>,
    /// The global arguments naming the queue (`--db ...` or `--redis ...`).
    pub target: Vec<String>,
    socket: PathBuf,
}

impl Served {
    /// `workjournal --db DIR/q.redb serve ARGS`, once its banner is out.
    pub fn start(args: &[&str]) -> Served {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("q.redb").display().to_string();
        let socket = dir.path().join("q.redb.sock");
        Served::start_on(dir, vec!["--db".into(), db], socket, args)
    }

    /// `workjournal --redis URL --namespace NS serve --socket DIR/r.sock ARGS`.
    pub fn start_redis(url: &str, namespace: &str, args: &[&str]) -> Served {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("r.sock");
        let mut all = vec!["--socket", socket.to_str().unwrap()];
        all.extend_from_slice(args);
        let target = vec![
            "--redis".to_string(),
            url.to_string(),
            "--namespace".to_string(),
            namespace.to_string(),
        ];
        Served::start_on(dir, target, socket.clone(), &all)
    }

    fn start_on(dir: TempDir, target: Vec<String>, socket: PathBuf, args: &[&str]) -> Served {
        let mut child = Command::new(env!("CARGO_BIN_EXE_workjournal"))
            .current_dir(dir.path())
            .args(&target)
            .arg("serve")
            .args(args)
            .env_remove("RUST_LOG")
            .env_remove("WORKJOURNAL_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut banner = String::new();
        let stderr = child.stderr.take().unwrap();
        let mut lines = BufReader::new(stderr);
        // Warnings (a Redis without persistence, say) may come first.
        for _ in 0..20 {
            banner.clear();
            if lines.read_line(&mut banner).unwrap() == 0 || banner.contains("serving on") {
                break;
            }
        }
        // Keep draining stderr so the server never blocks on it.
        std::thread::spawn(move || {
            let mut sink = String::new();
            let _ = lines.read_to_string(&mut sink);
        });
        let after = |marker: &str| {
            banner.split(marker).nth(1).map(|r| {
                r.trim_start_matches("http://")
                    .split(['/', ' '])
                    .next()
                    .unwrap_or_default()
                    .to_string()
            })
        };
        let http = after("dashboard and /metrics on ");
        let listen = after(" and http://").map(|a| a.to_string());
        assert!(banner.contains("serving on"), "banner: {banner:?}");
        Served {
            dir,
            child,
            http,
            listen,
            target,
            socket,
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn socket(&self) -> PathBuf {
        self.socket.clone()
    }

    pub fn token(&self) -> String {
        std::fs::read_to_string(self.socket.with_extension("token"))
            .unwrap()
            .trim()
            .to_string()
    }

    /// The CLI against the served file, stdout on success.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new(env!("CARGO_BIN_EXE_workjournal"))
            .current_dir(self.dir.path())
            .args(&self.target)
            .args(args)
            .env_remove("WORKJOURNAL_TOKEN")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `stats --json` through the server.
    pub fn stats(&self) -> serde_json::Value {
        serde_json::from_str(&self.cli(&["stats", "--json"])).unwrap()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A reply: status code, headers (lower-case names) and body.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

fn exchange(
    mut s: impl Read + Write,
    method: &str,
    path: &str,
    extra: &[(&str, &str)],
    body: &str,
) -> Reply {
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (k, v) in extra {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, rest) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect::<Vec<_>>();
    // Chunked bodies: join the chunks.
    let body = if headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"))
    {
        let mut out = String::new();
        let mut rest = rest;
        while let Some((size, tail)) = rest.split_once("\r\n") {
            let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
            if n == 0 || tail.len() < n {
                break;
            }
            out.push_str(&tail[..n]);
            rest = tail[n..].trim_start_matches("\r\n");
        }
        out
    } else {
        rest.to_string()
    };
    Reply {
        status,
        headers,
        body,
    }
}

/// One request over TCP to `addr`.
pub fn tcp(addr: &str, method: &str, path: &str, extra: &[(&str, &str)], body: &str) -> Reply {
    let s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    exchange(s, method, path, extra, body)
}

/// One request over the Unix socket at `path`.
pub fn unix(socket: &std::path::Path, method: &str, path: &str, body: &str) -> Reply {
    let s = std::os::unix::net::UnixStream::connect(socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    exchange(s, method, path, &[], body)
}

/// The value of the Prometheus sample `series` (name with labels, as
/// rendered) in `text`.
pub fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (name, value) = l.rsplit_once(' ')?;
        (name == series).then(|| value.parse().ok()).flatten()
    })
}

pub fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}
