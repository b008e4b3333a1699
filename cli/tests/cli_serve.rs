//! One node, many processes (SPEC section 10): the real `workjournal`
//! binary serving a queue file (`serve`, or `work` while it runs) and
//! other `workjournal` processes using the same file through it.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

struct Env {
    dir: TempDir,
}

impl Env {
    fn new() -> Self {
        Env {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn socket(&self) -> PathBuf {
        self.path("q.redb.sock")
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_workjournal"));
        c.current_dir(self.dir.path())
            .arg("--db")
            .arg(self.path("q.redb"))
            .args(args)
            .env_remove("RUST_LOG")
            .env_remove("WORKJOURNAL_TOKEN");
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        run_bounded(self.cmd(args))
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "{args:?} failed ({:?}): {}",
            out.status.code(),
            text(&out.stderr)
        );
        text(&out.stdout)
    }

    fn stats(&self) -> serde_json::Value {
        serde_json::from_str(&self.ok(&["stats", "--json"])).unwrap()
    }

    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.path(name)).unwrap_or_default()
    }

    fn spawn(&self, args: &[&str]) -> Child {
        self.cmd(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }
}

/// Run `c` to the end, failing the test if it takes over 60 s (a hang).
fn run_bounded(mut c: Command) -> Output {
    let mut child = c
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("command hung: {c:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn sigterm(child: &Child) {
    let status = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status()
        .unwrap();
    assert!(status.success());
}

fn wait_exit(mut child: Child) -> (Option<i32>, String) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = e.read_to_string(&mut err);
            }
            return (status.code(), err);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("process did not exit within 30 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn add_stats_pause_and_redrive_while_work_runs_on_the_same_file() {
    let env = Env::new();
    // Only `add` creates a queue file (SPEC 9): the first item makes it.
    env.ok(&["add", "zero"]);
    let exec = r#"p=$(cat); if [ "$p" = bad ]; then exit 1; fi; printf '%s\n' "$p" >> ran.txt"#;
    let worker = env.spawn(&[
        "work",
        "--exec",
        exec,
        "--max-deliveries",
        "1",
        "--concurrency",
        "2",
    ]);
    wait_for("work to serve its socket", || env.socket().exists());

    env.ok(&["add", "one"]);
    wait_for("`one` to run", || env.read("ran.txt").contains("one"));
    let stats = env.stats();
    assert_eq!(stats["pending"], 0, "{stats}");

    env.ok(&["pause", "held"]);
    env.ok(&["add", "--flow", "held", "later"]);
    wait_for("the held item to be parked", || env.stats()["parked"] == 1);
    assert!(!env.read("ran.txt").contains("later"));
    let peeked = env.ok(&["peek"]);
    assert!(!peeked.contains("later"), "{peeked}");

    env.ok(&["add", "bad"]);
    wait_for("`bad` to be dead-lettered", || {
        env.stats()["dead_letters"] == 1
    });
    let dead = env.ok(&["dead-letters", "--json"]);
    let dead: serde_json::Value = serde_json::from_str(&dead).unwrap();
    let id = dead[0]["id"].as_u64().unwrap().to_string();
    assert!(env.ok(&["redrive", &id]).contains("redriven 1"));
    // It fails again and is dead-lettered again, by the same worker.
    wait_for("`bad` to be dead-lettered again", || {
        let s = env.stats();
        s["dead_letters"] == 1 && s["backlog"] == 0 && s["pending"] == 0
    });

    env.ok(&["resume", "held"]);
    wait_for("the held item to run", || {
        env.read("ran.txt").contains("later")
    });

    sigterm(&worker);
    let (code, err) = wait_exit(worker);
    assert_eq!(code, Some(0), "{err}");
    assert!(!env.socket().exists(), "work removes its socket on exit");
    // After it, commands open the file again themselves.
    assert_eq!(env.stats()["dead_letters"], 1);
}

#[test]
fn serve_owns_the_file_and_a_second_serve_is_locked() {
    let env = Env::new();
    let server = env.spawn(&["serve"]);
    wait_for("serve to listen", || env.socket().exists());
    let mode = std::fs::metadata(env.socket())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    env.ok(&["add", "through the server"]);
    assert_eq!(env.stats()["backlog"], 1);
    let second = env.run(&["serve"]);
    assert_eq!(second.status.code(), Some(4), "{}", text(&second.stderr));
    let err = text(&second.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    sigterm(&server);
    let (code, err) = wait_exit(server);
    assert_eq!(code, Some(0), "{err}");
    assert!(!env.socket().exists());
    assert_eq!(env.stats()["backlog"], 1);
}

#[test]
fn serve_with_listen_needs_the_generated_token() {
    let env = Env::new();
    let mut server = env.spawn(&["serve", "--listen", "127.0.0.1:0"]);
    // The banner names the bound address.
    let mut banner = Vec::new();
    let mut stderr = server.stderr.take().unwrap();
    let mut byte = [0u8; 1];
    while stderr.read(&mut byte).unwrap() == 1 && byte[0] != b'\n' {
        banner.push(byte[0]);
    }
    let banner = text(&banner);
    let addr = banner
        .split("http://")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .unwrap_or_else(|| panic!("no address in {banner:?}"))
        .to_string();
    let token_file = env.path("q.redb.token");
    let mode = std::fs::metadata(&token_file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "token file mode");
    let token = std::fs::read_to_string(&token_file)
        .unwrap()
        .trim()
        .to_string();
    assert!(token.len() >= 32);

    let ask = |auth: Option<&str>| {
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        let auth = auth
            .map(|t| format!("authorization: Bearer {t}\r\n"))
            .unwrap_or_default();
        write!(
            s,
            "POST /v1/stats HTTP/1.1\r\nhost: x\r\n{auth}connection: close\r\ncontent-length: 0\r\n\r\n"
        )
        .unwrap();
        let mut reply = String::new();
        let _ = s.read_to_string(&mut reply);
        reply
    };
    assert!(ask(None).starts_with("HTTP/1.1 401"));
    assert!(ask(Some("guess")).starts_with("HTTP/1.1 401"));
    assert!(ask(Some(&token)).starts_with("HTTP/1.1 200"));

    // The CLI over TCP, token from the environment.
    let url = format!("http://{addr}");
    let mut add = Command::new(env!("CARGO_BIN_EXE_workjournal"));
    add.args(["--db", &url, "add", "over tcp"])
        .env("WORKJOURNAL_TOKEN", &token);
    let out = run_bounded(add);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut without = Command::new(env!("CARGO_BIN_EXE_workjournal"));
    without
        .args(["--db", &url, "stats"])
        .env_remove("WORKJOURNAL_TOKEN");
    let out = run_bounded(without);
    assert_eq!(out.status.code(), Some(6), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("unauthorized"));
    sigterm(&server);
    let (code, _) = wait_exit(server);
    assert_eq!(code, Some(0));
}

#[test]
fn clients_racing_a_server_that_exits_finish_with_success_or_a_clear_error() {
    // The owner exits while clients connect: each client ends, through
    // the server or the file once it is free, or with one clear line
    // (exit 4 locked, exit 6 outcome unknown); never a hang. Every add
    // that succeeded is in the file.
    let env = Env::new();
    let mut succeeded = 0;
    for round in 0..5 {
        let server = env.spawn(&["serve"]);
        wait_for("serve to listen", || env.socket().exists());
        let clients: Vec<Child> = (0..6)
            .map(|i| {
                env.cmd(&["add", &format!("r{round}-{i}")])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        sigterm(&server);
        for client in clients {
            let (code, err) = wait_exit(client);
            match code {
                Some(0) => succeeded += 1,
                Some(4) | Some(6) => assert_eq!(err.lines().count(), 1, "{err}"),
                other => panic!("client exit {other:?}: {err}"),
            }
        }
        let (code, err) = wait_exit(server);
        assert_eq!(code, Some(0), "{err}");
    }
    let backlog = env.stats()["backlog"].as_u64().unwrap();
    assert!(
        backlog >= succeeded,
        "{backlog} items, {succeeded} acknowledged adds"
    );
}

#[cfg(feature = "redis")]
#[test]
fn serve_redis_serves_a_redis_queue_on_a_socket() {
    // For programs that cannot speak Redis: the same queue through the
    // socket, and directly in Redis.
    let redis = workjournal::testing::RedisServer::start().unwrap();
    let env = Env::new();
    let socket = env.path("redis.sock");
    let socket_text = socket.to_str().unwrap().to_string();
    let mut serve = Command::new(env!("CARGO_BIN_EXE_workjournal"));
    serve
        .current_dir(env.dir.path())
        .args(["--redis", &redis.url(), "--namespace", "served", "serve"])
        .args(["--socket", &socket_text])
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let server = serve.spawn().unwrap();
    wait_for("serve to listen", || socket.exists());
    let through_socket = |args: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_workjournal"));
        c.arg("--db").arg(format!("unix:{socket_text}")).args(args);
        run_bounded(c)
    };
    let out = through_socket(&["add", "via the socket"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = through_socket(&["stats", "--json"]);
    let stats: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(stats["backlog"], 1, "{stats}");
    let mut direct = Command::new(env!("CARGO_BIN_EXE_workjournal"));
    direct.args(["--redis", &redis.url(), "--namespace", "served", "peek"]);
    let out = run_bounded(direct);
    assert!(
        text(&out.stdout).contains("via the socket"),
        "{}",
        text(&out.stdout)
    );
    sigterm(&server);
    let (code, err) = wait_exit(server);
    assert_eq!(code, Some(0), "{err}");
    assert!(!socket.exists());
}

#[test]
fn serve_socket_mode_and_group_open_the_socket_when_asked() {
    use std::os::unix::fs::MetadataExt;
    let env = Env::new();
    let gid = {
        std::fs::write(env.path("probe"), b"").unwrap();
        std::fs::metadata(env.path("probe")).unwrap().gid()
    };
    let socket = env.path("shared.sock");
    let socket_text = socket.to_str().unwrap().to_string();
    let server = env.spawn(&[
        "serve",
        "--socket",
        &socket_text,
        "--socket-group",
        &gid.to_string(),
    ]);
    wait_for("serve to listen", || socket.exists());
    let meta = std::fs::metadata(&socket).unwrap();
    assert_eq!(
        meta.permissions().mode() & 0o777,
        0o660,
        "--socket-group implies 660"
    );
    assert_eq!(meta.gid(), gid);
    let mut c = Command::new(env!("CARGO_BIN_EXE_workjournal"));
    c.arg("--db")
        .arg(format!("unix:{socket_text}"))
        .args(["add", "x"]);
    assert!(run_bounded(c).status.success());
    sigterm(&server);
    let (code, err) = wait_exit(server);
    assert_eq!(code, Some(0), "{err}");

    let server = env.spawn(&["serve", "--socket", &socket_text, "--socket-mode", "640"]);
    wait_for("serve to listen", || socket.exists());
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o640);
    sigterm(&server);
    let (code, err) = wait_exit(server);
    assert_eq!(code, Some(0), "{err}");
    let bad = env.run(&["serve", "--socket-mode", "99x"]);
    assert_eq!(bad.status.code(), Some(2));
}

/// SPEC 3, Priority, through `serve` (SPEC 10): `add --priority N` sent over
/// the socket keeps its tier, so `peek` through the server, and the file
/// read directly once the server is gone, both rank it first.
#[test]
fn add_priority_through_the_server_keeps_the_tier() {
    let env = Env::new();
    let server = env.spawn(&["serve"]);
    wait_for("serve to listen", || env.socket().exists());
    env.ok(&["add", "low"]);
    env.ok(&["add", "high", "--priority", "5"]);
    let order = |peek: &serde_json::Value| -> Vec<(String, u64)> {
        peek.as_array()
            .unwrap()
            .iter()
            .map(|i| {
                let payload = i["payload"].as_str().unwrap().to_owned();
                (payload, i["priority"].as_u64().unwrap())
            })
            .collect()
    };
    let want = vec![("high".to_owned(), 5), ("low".to_owned(), 0)];
    let served: serde_json::Value = serde_json::from_str(&env.ok(&["peek", "--json"])).unwrap();
    assert_eq!(order(&served), want, "{served}");
    sigterm(&server);
    let (code, err) = wait_exit(server);
    assert_eq!(code, Some(0), "{err}");
    let direct: serde_json::Value = serde_json::from_str(&env.ok(&["peek", "--json"])).unwrap();
    assert_eq!(order(&direct), want, "{direct}");
}
