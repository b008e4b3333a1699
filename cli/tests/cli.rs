//! The `workjournal` binary, spawned for real, each test on a queue file of
//! its own temp dir.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

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

    /// `workjournal --db <temp>/q.redb ARGS`, run in the temp dir.
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_workjournal"));
        c.current_dir(self.dir.path())
            .arg("--db")
            .arg(self.path("q.redb"))
            .args(args)
            .env_remove("RUST_LOG");
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).stdin(Stdio::null()).output().unwrap()
    }

    fn run_with_stdin(&self, args: &[&str], input: &[u8]) -> Output {
        let mut child = self
            .cmd(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(input).unwrap();
        child.wait_with_output().unwrap()
    }

    /// Run and insist on success; returns stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "{args:?} failed: {}",
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
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The error contract: exactly one line on stderr, containing `needle`, and
/// exit code `code`.
fn assert_error(out: &Output, code: i32, needle: &str) {
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "stderr: {err}");
    assert_eq!(err.lines().count(), 1, "not one line: {err:?}");
    assert!(err.starts_with("workjournal: "), "{err:?}");
    assert!(err.contains(needle), "{err:?} lacks {needle:?}");
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn wait_for(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn spawn_quiet(mut c: Command) -> Child {
    c.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Appends one line per run to `file`, in one write (atomic under O_APPEND).
fn record(file: &str) -> String {
    format!(
        r#"printf '%s %s %s %s\n' "$WORKJOURNAL_ID" "$WORKJOURNAL_FLOW" "$WORKJOURNAL_DELIVERY" "$(cat)" >> {file}"#
    )
}

#[test]
fn add_work_stats_round_trip() {
    let env = Env::new();
    assert_eq!(env.ok(&["add", "hello", "--flow", "greet"]).trim(), "1");
    let out = env.run_with_stdin(&["add", "--lines"], b"a\nb\n\nc\n");
    assert!(out.status.success());
    assert_eq!(text(&out.stdout).trim(), "added 3 items (ids 2-4)");
    assert_eq!(env.stats()["backlog"], 4);
    assert_eq!(env.ok(&["peek", "1"]).trim(), "1\tgreet\t0\t0\thello");

    let out = env.run(&[
        "work",
        "--exec",
        &record("ran.txt"),
        "--until-empty",
        "--concurrency",
        "2",
    ]);
    assert!(out.status.success());
    let summary = text(&out.stderr);
    assert!(summary.contains("done: 4 acked"), "{summary}");
    let mut ran: Vec<String> = env.read("ran.txt").lines().map(String::from).collect();
    ran.sort();
    assert_eq!(ran, ["1 greet 1 hello", "2  1 a", "3  1 b", "4  1 c"]);
    let s = env.stats();
    for k in ["backlog", "delayed", "pending", "dead_letters"] {
        assert_eq!(s[k], 0, "{k} in {s}");
    }
}

#[test]
fn failing_command_retries_then_dead_letters_then_redrive_and_a_fixed_command_succeed() {
    let env = Env::new();
    env.ok(&["add", "job"]);
    let out = env.run(&[
        "work",
        "--exec",
        r#"echo "no luck on delivery $WORKJOURNAL_DELIVERY" >&2; exit 3"#,
        "--max-deliveries",
        "2",
        "--backoff",
        "50ms",
        "--until-empty",
    ]);
    // Exit 10: an item was dead-lettered in the run.
    assert_eq!(out.status.code(), Some(10), "{}", text(&out.stderr));
    let log = text(&out.stderr);
    assert!(
        log.contains("item 1 failed (delivery 1), will retry"),
        "{log}"
    );
    assert!(
        log.contains("item 1 failed (delivery 2), dead-lettered"),
        "{log}"
    );

    let dead: serde_json::Value =
        serde_json::from_str(&env.ok(&["dead-letters", "--json"])).unwrap();
    assert_eq!(dead[0]["id"], 1);
    assert_eq!(dead[0]["deliveries"], 2);
    let reason = dead[0]["reason"].as_str().unwrap();
    assert!(reason.contains("exited with code 3"), "{reason}");
    assert!(reason.ends_with("no luck on delivery 2"), "{reason}");

    assert_error(&env.run(&["redrive", "99"]), 9, "no dead letter with id 99");
    assert_eq!(env.ok(&["redrive", "1"]).trim(), "redriven 1");
    env.ok(&["work", "--exec", &record("ran.txt"), "--until-empty"]);
    assert_eq!(env.read("ran.txt"), "1  1 job\n");
    let s = env.stats();
    assert_eq!(
        (s["dead_letters"].as_u64(), s["backlog"].as_u64()),
        (Some(0), Some(0))
    );
}

#[test]
fn pause_parks_a_flow_step_runs_one_resume_releases_the_rest() {
    let env = Env::new();
    // Only `add` creates the queue file.
    env.ok(&["add", "free"]);
    env.ok(&["pause", "held"]);
    for p in ["a", "b", "c"] {
        env.ok(&["add", p, "--flow", "held"]);
    }
    env.ok(&["work", "--exec", &record("ran.txt"), "--until-empty"]);
    assert_eq!(env.read("ran.txt"), "1  1 free\n");
    let s = env.stats();
    assert_eq!(s["parked"], 3);
    assert_eq!(s["paused_flows"][0], "held");

    assert_eq!(
        env.ok(&["step", "held", "--exec", &record("ran.txt")])
            .trim(),
        "item 2 done"
    );
    assert!(env.read("ran.txt").ends_with("2 held 1 a\n"));
    assert_eq!(env.stats()["parked"], 2);

    assert_eq!(
        env.ok(&["resume", "held"]).trim(),
        "resumed held: 2 items back in the backlog"
    );
    env.ok(&[
        "work",
        "--exec",
        &record("ran.txt"),
        "--until-empty",
        "--concurrency",
        "1",
    ]);
    assert!(env.read("ran.txt").ends_with("3 held 1 b\n4 held 1 c\n"));
    assert_error(
        &env.run(&["step", "held", "--exec", "true"]),
        9,
        "nothing parked",
    );
    let s = env.stats();
    assert_eq!(
        (s["parked"].as_u64(), s["backlog"].as_u64()),
        (Some(0), Some(0))
    );
}

#[test]
fn a_delay_is_honoured() {
    let env = Env::new();
    let added_at = now_ms();
    env.ok(&["add", "later", "--delay", "1s"]);
    env.ok(&["add", "past", "--at", "2001-02-03T04:05:06+01:00"]);
    let s = env.stats();
    assert_eq!(
        s["delayed"].as_u64().unwrap() + s["due"].as_u64().unwrap(),
        2
    );
    env.ok(&[
        "work",
        "--exec",
        r#"echo "$(cat) $(date +%s%3N)" >> ran.txt"#,
        "--until-empty",
        "--concurrency",
        "1",
    ]);
    let ran = env.read("ran.txt");
    let lines: Vec<&str> = ran.lines().collect();
    assert_eq!(lines.len(), 2, "{ran}");
    assert!(
        lines[0].starts_with("past "),
        "the due item runs first: {ran}"
    );
    let later_at: u64 = lines[1].strip_prefix("later ").unwrap().parse().unwrap();
    assert!(
        later_at >= added_at + 1000,
        "ran {} ms after the add",
        later_at - added_at
    );
}

#[test]
fn bad_inputs_give_one_line_and_their_exit_code() {
    let env = Env::new();
    assert_error(
        &env.run(&["add", "x", "--delay", "10 parsecs"]),
        2,
        "expected a number and a unit",
    );
    assert_error(
        &env.run(&["add", "x", "--at", "next tuesday"]),
        2,
        "RFC 3339",
    );
    assert_error(
        &env.run(&["add", "--lines", "--file", "no-such-file.txt"]),
        3,
        "cannot read input file no-such-file.txt",
    );
    let big = env.path("big.bin");
    std::fs::write(&big, vec![b'x'; 16 * 1024 * 1024 + 1]).unwrap();
    assert_error(
        &env.run(&["add", "--file", big.to_str().unwrap()]),
        7,
        "over max_payload_bytes",
    );
    // A refused add journals nothing: a refused first add does not even
    // create the queue file (SPEC 5), and `stats` says there is none.
    assert!(
        !env.path("q.redb").exists(),
        "a refused add created the file"
    );
    assert_error(&env.run(&["stats"]), 3, "no queue file");

    std::fs::write(env.path("junk.redb"), b"this is not a queue file at all").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_workjournal"))
        .args(["--db", env.path("junk.redb").to_str().unwrap(), "stats"])
        .output()
        .unwrap();
    assert_error(&out, 5, "corrupt");

    #[cfg(feature = "redis")]
    assert_error(
        &env.run(&["--redis", "redis://127.0.0.1:1/", "stats"]),
        6,
        "",
    );
    #[cfg(not(feature = "redis"))]
    assert_error(
        &env.run(&["--redis", "redis://127.0.0.1:1/", "stats"]),
        2,
        "built without the redis feature",
    );
}

#[test]
fn a_queue_file_held_by_another_process_that_serves_no_socket_is_locked() {
    // `work` and `serve` serve the file they hold (tests/cli_serve.rs); a
    // `work` that cannot make its socket (a directory is in the way) holds
    // the file without serving, so a writer finds it locked.
    let env = Env::new();
    env.ok(&["add", "x"]);
    std::fs::create_dir(env.path("q.redb.sock")).unwrap();
    let mut holder = env
        .cmd(&["work", "--exec", "sleep 30"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the holder has the file (it warned that it does not
    // serve it), so that the probe cannot be the one that holds it first.
    let mut warned = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(holder.stderr.as_mut().unwrap()),
        &mut warned,
    )
    .unwrap();
    assert!(warned.contains("not serving"), "{warned}");
    let out = env.run(&["add", "y"]);
    let pid = holder.id();
    holder.kill().unwrap();
    holder.wait().unwrap();
    assert_error(&out, 4, "locked by another process");
    // Failed: `Locked` named no holder.
    assert_error(&out, 4, &format!("held by pid {pid}: "));
    // Failed: the holder was shown by its full install path, which under a
    // long CARGO_TARGET_DIR pushed its arguments past the 80-character cut.
    assert_error(&out, 4, "workjournal --db");
    assert_error(&out, 4, "work --exec");
}

/// Send `sig` to `work` while its command runs: the command finishes, its
/// item is acked and `work` exits 0.
fn a_signal_lets_the_running_command_finish(sig: &str) {
    let env = Env::new();
    env.ok(&["add", "slow"]);
    let mut worker = spawn_quiet(env.cmd(&[
        "work",
        "--exec",
        &format!("touch started; sleep 0.5; {}", record("ran.txt")),
        "--lease",
        "5s",
    ]));
    wait_for("the command to start", Duration::from_secs(20), || {
        env.path("started").exists()
    });
    signal(&worker, sig);
    let status = worker.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert_eq!(env.read("ran.txt"), "1  1 slow\n");
    let s = env.stats();
    assert_eq!(
        (s["pending"].as_u64(), s["backlog"].as_u64()),
        (Some(0), Some(0))
    );
}

#[test]
fn sigterm_lets_the_running_command_finish() {
    a_signal_lets_the_running_command_finish("-TERM");
}

#[test]
fn a_closed_pipe_is_not_an_error() {
    let env = Env::new();
    let lines: String = (0..3000).map(|i| format!("item number {i}\n")).collect();
    assert!(
        env.run_with_stdin(&["add", "--lines"], lines.as_bytes())
            .status
            .success()
    );
    let mut peek = env
        .cmd(&["peek", "3000"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(peek.stdout.take());
    let out = peek.wait_with_output().unwrap();
    assert!(out.status.success(), "{:?}", out.status);
    assert_eq!(text(&out.stderr), "");
}

/// Crash safety: SIGKILL `work` half-way, run it again, and every item has
/// run at least once, the queue is empty and nothing is dead-lettered.
#[test]
fn work_killed_half_way_resumes_and_finishes_everything() {
    let env = Env::new();
    let n = 60;
    let lines: String = (1..=n).map(|i| format!("file-{i}\n")).collect();
    assert!(
        env.run_with_stdin(&["add", "--lines"], lines.as_bytes())
            .status
            .success()
    );
    let exec = format!("sleep 0.05; {}", record("ran.txt"));
    let args = [
        "work",
        "--exec",
        exec.as_str(),
        "--concurrency",
        "4",
        "--lease",
        "2s",
    ];

    let mut first = spawn_quiet(env.cmd(&args));
    wait_for("a third of the items", Duration::from_secs(60), || {
        env.read("ran.txt").lines().count() >= n / 3
    });
    first.kill().unwrap(); // SIGKILL: no shutdown, claims left pending
    first.wait().unwrap();
    let mid = env.stats();
    assert!(
        mid["backlog"].as_u64().unwrap() > 0,
        "killed too late: {mid}"
    );

    let mut resumed = args.to_vec();
    resumed.push("--until-empty");
    env.ok(&resumed);

    let ran = env.read("ran.txt");
    for i in 1..=n {
        let needle = format!(" file-{i}\n");
        assert!(ran.contains(&needle), "file-{i} never ran:\n{ran}");
    }
    let s = env.stats();
    for k in ["backlog", "delayed", "pending", "dead_letters"] {
        assert_eq!(s[k], 0, "{k} in {s}");
    }
}

/// The same round trip on Redis, against a `redis-server` the harness starts
/// on a free loopback port (it fails, saying how to install it, when
/// `redis-server` is missing).
#[cfg(feature = "redis")]
#[test]
fn redis_round_trip_and_unreachable_server() {
    let server = workjournal::testing::RedisServer::start().unwrap();
    let url = server.url();
    let env = Env::new();
    let redis = |args: &[&str]| {
        let mut all = vec!["--redis", url.as_str(), "--namespace", "cli-test"];
        all.extend_from_slice(args);
        env.run(&all)
    };
    let ok = |args: &[&str]| {
        let out = redis(args);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        text(&out.stdout)
    };
    assert_eq!(ok(&["add", "hello", "--flow", "greet"]).trim(), "1");
    let out = {
        let mut child = env
            .cmd(&[
                "--redis",
                url.as_str(),
                "--namespace",
                "cli-test",
                "add",
                "--lines",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(b"a\nb\n").unwrap();
        child.wait_with_output().unwrap()
    };
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s: serde_json::Value = serde_json::from_str(&ok(&["stats", "--json"])).unwrap();
    assert_eq!(s["backlog"], 3);
    ok(&[
        "work",
        "--exec",
        &record("ran.txt"),
        "--until-empty",
        "--concurrency",
        "2",
    ]);
    let mut ran: Vec<String> = env.read("ran.txt").lines().map(String::from).collect();
    ran.sort();
    assert_eq!(ran, ["1 greet 1 hello", "2  1 a", "3  1 b"]);
    let s: serde_json::Value = serde_json::from_str(&ok(&["stats", "--json"])).unwrap();
    for k in ["backlog", "delayed", "pending", "dead_letters"] {
        assert_eq!(s[k], 0, "{k} in {s}");
    }
    // Another namespace on the same server sees nothing of it.
    let other = env.run(&[
        "--redis",
        url.as_str(),
        "--namespace",
        "other",
        "stats",
        "--json",
    ]);
    let s: serde_json::Value = serde_json::from_str(&text(&other.stdout)).unwrap();
    assert_eq!(s["backlog"], 0);

    // Failed: the durability warning was filtered out (errors only), and a
    // malformed URL exited 7 instead of 2 (usage).
    let out = redis(&["stats"]);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("keeps no persistence"), "{err}");
    assert_error(&env.run(&["--redis", "not a url", "stats"]), 2, "");

    // Failed: a failed `add --lines` did not say which lines failed nor how
    // many earlier items were added.
    let mut adder = env
        .cmd(&[
            "--redis",
            url.as_str(),
            "--namespace",
            "lines",
            "add",
            "--lines",
        ])
        // Only the error line (not the durability warning).
        .env("RUST_LOG", "error")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = adder.stdin.take().unwrap();
    let first: String = (0..1000).map(|i| format!("l{i}\n")).collect();
    stdin.write_all(first.as_bytes()).unwrap();
    let lines_backlog = || {
        let out = env.run(&[
            "--redis",
            url.as_str(),
            "--namespace",
            "lines",
            "stats",
            "--json",
        ]);
        serde_json::from_str::<serde_json::Value>(&text(&out.stdout)).unwrap()["backlog"].clone()
    };
    wait_for("the first batch", Duration::from_secs(20), || {
        lines_backlog() == 1000
    });

    drop(server);
    stdin.write_all(b"late\n").unwrap();
    drop(stdin);
    let out = adder.wait_with_output().unwrap();
    assert_error(&out, 6, "line 1001: ");
    assert!(
        text(&out.stderr).contains("1000 items of earlier lines were added"),
        "{}",
        text(&out.stderr)
    );
    assert!(
        text(&out.stderr).contains("may or may not"),
        "{}",
        text(&out.stderr)
    );
    assert_error(&redis(&["stats"]), 6, "");
}

#[test]
fn a_second_sigterm_stops_at_once_and_the_item_runs_on_the_next_start() {
    let env = Env::new();
    env.ok(&["add", "stuck"]);
    let worker = spawn_quiet(env.cmd(&[
        "work",
        "--exec",
        "touch started; sleep 20",
        "--lease",
        "30s",
    ]));
    wait_for("the command to start", Duration::from_secs(20), || {
        env.path("started").exists()
    });
    let pid = worker.id().to_string();
    let term = || {
        assert!(
            Command::new("kill")
                .args(["-TERM", &pid])
                .status()
                .unwrap()
                .success()
        )
    };
    term();
    std::thread::sleep(Duration::from_millis(300));
    term();
    let out = worker.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("stopped at once"));
    assert_eq!(
        env.stats()["pending"],
        1,
        "the killed command's item stays pending"
    );
    env.ok(&["work", "--exec", &record("ran.txt"), "--until-empty"]);
    assert_eq!(env.read("ran.txt"), "1  2 stuck\n");
}

/// `--redis rediss://...` with `--redis-ca` and a client certificate reaches
/// a TLS server that requires one; without the CA the system's roots do not
/// trust the test CA, and the error is Redis's exit code 6.
#[cfg(feature = "redis")]
#[test]
fn redis_over_tls_with_a_private_ca_and_client_certificate() {
    use workjournal::testing::{RedisServer, RedisServerOptions};
    let server = RedisServer::start_with(RedisServerOptions {
        tls: true,
        tls_require_client_cert: true,
        ..Default::default()
    })
    .unwrap();
    let url = server.tls_url().unwrap();
    let certs = server.certificates().unwrap().clone();
    let (cert, key) = certs.client_paths();
    let ca = certs.ca_path();
    let env = Env::new();
    let tls = [
        "--redis",
        url.as_str(),
        "--redis-ca",
        ca.to_str().unwrap(),
        "--redis-cert",
        cert.to_str().unwrap(),
        "--redis-key",
        key.to_str().unwrap(),
    ];
    let run = |args: &[&str]| {
        let mut all = tls.to_vec();
        all.extend_from_slice(args);
        env.run(&all)
    };
    let out = run(&["add", "over tls"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = run(&["stats", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s: serde_json::Value = serde_json::from_str(&text(&out.stdout)).unwrap();
    assert_eq!(s["backlog"], 1);
    // The system's roots do not know the test CA.
    assert_error(&env.run(&["--redis", url.as_str(), "stats"]), 6, "");
    // A key without its certificate is a usage error.
    assert_error(
        &env.run(&[
            "--redis",
            url.as_str(),
            "--redis-key",
            key.to_str().unwrap(),
            "stats",
        ]),
        2,
        "",
    );
}

// Failed: `--concurrency 4294967295` was accepted and the worker tried to
// hold one permit per free slot in memory.
#[test]
fn a_huge_concurrency_is_a_usage_error() {
    let env = Env::new();
    assert_error(
        &env.run(&[
            "work",
            "--exec",
            "true",
            "--until-empty",
            "--concurrency",
            "4294967295",
        ]),
        2,
        "--concurrency",
    );
    env.ok(&["add", "x"]);
    env.ok(&[
        "work",
        "--exec",
        "true",
        "--until-empty",
        "--concurrency",
        "1024",
    ]);
    assert_eq!(env.stats()["backlog"], 0);
}

/// SPEC 9, CLI: `--prefetch` is 0 to 1024; past it is a usage error that
/// runs nothing, and both ends of the range drain the queue.
#[test]
fn prefetch_outside_its_range_is_a_usage_error() {
    let env = Env::new();
    env.ok(&["add", "x"]);
    for bad in ["--prefetch=1025", "--prefetch=-1", "--prefetch=many"] {
        assert_error(
            &env.run(&["work", "--exec", "true", "--until-empty", bad]),
            2,
            "--prefetch",
        );
    }
    assert_eq!(env.stats()["backlog"], 1);
    for ok in ["0", "1024"] {
        env.ok(&["add", "y"]);
        let prefetch = format!("--prefetch={ok}");
        env.ok(&[
            "work",
            "--concurrency=2",
            &prefetch,
            "--exec=true",
            "--until-empty",
        ]);
        assert_eq!(env.stats()["backlog"], 0);
        assert_eq!(env.stats()["pending"], 0);
    }
}

/// SPEC 9, Prefetch: without `--prefetch`, `work` holds three items claimed
/// ahead per `--concurrency` slot besides the running ones, and no more,
/// while its slots are busy; with `--prefetch N` it holds N.
#[test]
fn work_prefetches_three_items_per_slot_unless_told() {
    for (concurrency, prefetch, pending) in [("1", None, 4), ("2", None, 8), ("2", Some("1"), 3)] {
        let env = Env::new();
        let lines: String = (0..12).map(|i| format!("item{i}\n")).collect();
        let out = env.run_with_stdin(&["add", "--lines"], lines.as_bytes());
        assert!(out.status.success(), "{}", text(&out.stderr));
        let mut args = vec![
            "work",
            "--concurrency",
            concurrency,
            "--exec",
            "echo >> started; sleep 60",
        ];
        if let Some(n) = prefetch {
            args.extend(["--prefetch", n]);
        }
        let mut worker = spawn_quiet(env.cmd(&args));
        let running: usize = concurrency.parse().unwrap();
        wait_for("every slot's command", Duration::from_secs(30), || {
            env.read("started").lines().count() == running
        });
        wait_for("the prefetch to fill", Duration::from_secs(30), || {
            env.stats()["pending"] == pending
        });
        // It holds there: the slots are busy and the prefetch is full.
        std::thread::sleep(Duration::from_millis(300));
        let stats = env.stats();
        assert_eq!(stats["pending"], pending, "{concurrency} {prefetch:?}");
        assert_eq!(stats["backlog"], 12 - pending, "{concurrency} {prefetch:?}");
        assert_eq!(env.read("started").lines().count(), running);
        // The commands die with the worker (SPEC 9).
        signal(&worker, "-KILL");
        let _ = worker.wait();
    }
}

// Failed: `step F --exec true --lease 0s` panicked (heartbeat period zero);
// `2ns` was taken as a lease.
#[test]
fn leases_under_a_millisecond_are_refused_and_short_ones_work() {
    let env = Env::new();
    for lease in ["0s", "2ns"] {
        assert_error(
            &env.run(&["work", "--exec", "true", "--until-empty", "--lease", lease]),
            2,
            "at least 1ms",
        );
    }
    // Only `add` creates the queue file.
    env.ok(&["add", "first"]);
    env.ok(&["pause", "f"]);
    env.ok(&["add", "--flow", "f", "x"]);
    env.ok(&["work", "--exec", "true", "--until-empty"]);
    assert_error(
        &env.run(&["step", "f", "--exec", "true", "--lease", "0s"]),
        2,
        "at least 1ms",
    );
    let out = env.ok(&["step", "f", "--exec", "true", "--lease", "1ms"]);
    assert!(out.contains("done"), "{out}");
}

// Failed: killed while queueing, scripts/main-job.sh skipped queueing on the
// rerun because the queue file existed, so most files were never checksummed.
#[test]
fn main_job_killed_while_queueing_queues_every_file_once_on_the_rerun() {
    let env = Env::new();
    let files = env.path("files");
    std::fs::create_dir(&files).unwrap();
    for i in 0..5 {
        std::fs::write(files.join(format!("f{i}")), format!("{i}")).unwrap();
    }
    // What a kill during `add` leaves: the marker, and a queue file holding
    // only the first lines.
    let db = env.path("q.redb");
    std::fs::write(env.path("q.redb.queueing"), b"").unwrap();
    env.ok(&["add", files.join("f0").to_str().unwrap()]);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/main-job.sh");
    let run = || {
        let out = Command::new("bash")
            .arg(script)
            .arg(&files)
            .arg(&db)
            .arg(env.path("sums.txt"))
            .env("WORKJOURNAL_BIN", env!("CARGO_BIN_EXE_workjournal"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
    };
    run();
    let sums = env.read("sums.txt");
    assert_eq!(sums.lines().count(), 5, "{sums}");
    assert!(env.path("q.redb.queued").exists());
    // A rerun after a finished job queues nothing again.
    run();
    assert_eq!(env.read("sums.txt").lines().count(), 5);
}

// Failed: with `work ... | head`, every command after the reader left died
// of SIGPIPE and was retried, then dead-lettered.
#[test]
fn a_closed_stdout_stops_work_and_leaves_the_items_queued() {
    use std::io::Read;
    let env = Env::new();
    let lines: String = (0..20).map(|i| format!("item{i}\n")).collect();
    let out = env.run_with_stdin(&["add", "--lines"], lines.as_bytes());
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut child = env
        .cmd(&[
            "work",
            "--until-empty",
            "--concurrency",
            "1",
            "--backoff",
            "1ms",
            "--exec",
            "cat; echo; sleep 0.05",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 5];
    stdout.read_exact(&mut first).unwrap();
    drop(stdout);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stats = env.stats();
    assert_eq!(stats["dead_letters"], 0, "{stats}");
    assert_eq!(stats["delayed"], 0, "{stats}");
    // The next run (with a reader) finishes the rest, each once.
    env.ok(&["work", "--until-empty", "--exec", "cat >/dev/null"]);
    let stats = env.stats();
    assert_eq!(stats["dead_letters"], 0, "{stats}");
    assert_eq!(stats["backlog"], 0, "{stats}");
}

// Failed: a second SIGTERM killed only `sh`; the `sleep` it started ran on,
// reparented to init.
#[test]
fn a_stop_at_once_kills_everything_the_command_started() {
    let env = Env::new();
    env.ok(&["add", "x"]);
    let worker = spawn_quiet(env.cmd(&[
        "work",
        "--exec",
        "sleep 300 & echo $! > sleep.pid; wait",
        "--lease",
        "30s",
    ]));
    wait_for("the command to start", Duration::from_secs(20), || {
        env.read("sleep.pid").ends_with('\n')
    });
    let sleep_pid = env.read("sleep.pid").trim().to_string();
    let pid = worker.id().to_string();
    for _ in 0..2 {
        assert!(
            Command::new("kill")
                .args(["-TERM", &pid])
                .status()
                .unwrap()
                .success()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    let out = worker.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", text(&out.stderr));
    // Gone, or a zombie waiting for init to reap it.
    wait_for(
        "the sleep to die",
        Duration::from_secs(10),
        || match std::fs::read_to_string(format!("/proc/{sleep_pid}/stat")) {
            Err(_) => true,
            Ok(stat) => stat
                .rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with('Z')),
        },
    );
}

// Failed: `stats` on a missing file created an empty queue file; `--db` a
// directory exited 1 while the help said 5 is "unreadable".
#[test]
fn looking_at_a_missing_queue_file_fails_and_creates_nothing() {
    let env = Env::new();
    for cmd in [&["stats"][..], &["peek"], &["dead-letters"]] {
        assert_error(&env.run(cmd), 3, "no queue file at");
        assert!(!env.path("q.redb").exists(), "{cmd:?} created the file");
    }
    let dir = env.path("adir");
    std::fs::create_dir(&dir).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_workjournal"))
        .arg("--db")
        .arg(&dir)
        .args(["add", "x"])
        .output()
        .unwrap();
    assert_error(&out, 1, "");
    let help = env.ok(&["--help"]);
    assert!(
        help.contains("5    the queue file is corrupt (not a queue"),
        "{help}"
    );
    assert!(help.contains("--db names a directory"), "{help}");
}

// Failed: the missing argument's name was cut off; `add < /dev/null` added an
// empty item; `--dedup-key ''` was taken; `--at` refused a lower-case `z`;
// `--delay 600000000y` was clamped to the end of time.
#[test]
fn usage_errors_are_one_whole_line_and_odd_inputs_are_refused() {
    let env = Env::new();
    let out = env.run(&["work"]);
    assert_error(&out, 2, "--exec");
    assert!(
        text(&out.stderr).contains("required arguments"),
        "{}",
        text(&out.stderr)
    );
    assert_error(&env.run(&["add"]), 2, "stdin was empty");
    assert_error(&env.run(&["add", "x", "--dedup-key", ""]), 2, "--dedup-key");
    assert_error(
        &env.run(&["add", "x", "--delay", "600000000y"]),
        7,
        "overflows",
    );
    assert_eq!(env.stats()["backlog"], 0, "nothing was added");
    env.ok(&["add", ""]);
    env.ok(&["add", "late", "--at", "2030-01-02t03:04:05z"]);
    let stats = env.stats();
    assert_eq!(stats["backlog"], 1, "{stats}");
    assert_eq!(stats["delayed"], 1, "{stats}");
}

// Failed: a queue file that cannot be created for lack of permission was
// reported as corrupt (exit 5). (/sys refuses new files even to root, which
// a read-only directory does not.)
#[test]
fn a_queue_file_that_cannot_be_created_is_an_io_error_not_corrupt() {
    let out = Command::new(env!("CARGO_BIN_EXE_workjournal"))
        .args(["--db", "/sys/workjournal-test.redb", "add", "x"])
        .output()
        .unwrap();
    assert_error(&out, 1, "/sys/workjournal-test.redb");
    assert!(
        !text(&out.stderr).contains("corrupt"),
        "{}",
        text(&out.stderr)
    );
}

/// Whether process `pid` has ended (gone, or a zombie nobody reaped).
fn ended(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

fn signal(child: &Child, sig: &str) {
    assert!(
        Command::new("kill")
            .args([sig, &child.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
}

/// Bytes of the file, to check that looking at it wrote nothing.
fn bytes_of(env: &Env) -> Vec<u8> {
    std::fs::read(env.path("q.redb")).unwrap()
}

// Failed: after SIGKILL of `work` the commands ran on (their own process
// group), and a command reading its payload while the worker died saw a
// truncated one and exited 0.
#[test]
fn commands_die_with_a_killed_worker_and_never_run_on_a_partial_payload() {
    let env = Env::new();
    let payload = vec![b'p'; 1024 * 1024];
    std::fs::write(env.path("big"), &payload).unwrap();
    for _ in 0..8 {
        env.ok(&["add", "--file", "big"]);
    }
    for round in 0..3 {
        let _ = std::fs::remove_file(env.path("pids"));
        let mut worker = spawn_quiet(env.cmd(&[
            "work",
            "--concurrency",
            "4",
            "--exec",
            "echo $$ >> pids; n=$(wc -c); echo \"$n\" >> counts; sleep 60",
        ]));
        // Kill while payloads are being written and commands read them.
        wait_for("commands to start", Duration::from_secs(30), || {
            env.read("pids").lines().count() > round
        });
        worker.kill().unwrap();
        worker.wait().unwrap();
        let pids = env.read("pids");
        wait_for("the commands to die", Duration::from_secs(20), || {
            pids.lines().all(ended)
        });
        // Looking at the file a killed worker left writes nothing to it.
        let before = bytes_of(&env);
        assert_eq!(env.stats()["pending"].as_u64().map(|p| p > 0), Some(true));
        assert!(before == bytes_of(&env), "stats wrote to the file");
    }
    let counts = env.read("counts");
    for line in counts.lines() {
        assert_eq!(line.trim(), "1048576", "a partial payload:\n{counts}");
    }
}

// Failed: SIGHUP (a closed ssh session) killed `work` at once (exit 129),
// leaving the command running.
#[test]
fn sighup_is_a_graceful_stop() {
    a_signal_lets_the_running_command_finish("-HUP");
}

// Failed: `--until-empty` exited 0 with items dead-lettered; the cap could
// not be set from the command line.
#[test]
fn until_empty_exits_10_after_dead_letters_and_the_cap_is_settable() {
    let env = Env::new();
    for p in ["a", "b", "c"] {
        env.ok(&["add", p]);
    }
    let out = env.run(&[
        "work",
        "--until-empty",
        "--max-deliveries",
        "1",
        "--dead-letter-cap",
        "2",
        "--exec",
        "exit 3",
    ]);
    assert_eq!(out.status.code(), Some(10), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("3 items were dead-lettered"),
        "{}",
        text(&out.stderr)
    );
    assert!(
        text(&out.stderr).contains("(1 of them dropped past the dead-letter cap)"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(env.stats()["dead_letters"], 2, "the cap of 2 holds");
    assert_eq!(
        env.stats()["dead_letters_dropped"],
        1,
        "the dropped one is counted"
    );
    let plain = env.ok(&["stats"]);
    assert!(
        plain.contains("dead letters  2 (1 dropped past the cap)"),
        "{plain}"
    );
    env.ok(&["add", "fine"]);
    let out = env.run(&["work", "--until-empty", "--exec", "cat >/dev/null"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let help = env.ok(&["--help"]);
    assert!(help.contains("10   work --until-empty finished"), "{help}");
    let work_help = env.ok(&["work", "--help"]);
    assert!(work_help.contains("--dead-letter-cap"), "{work_help}");
    assert!(work_help.contains("Exits 10"), "{work_help}");
}

// Failed: a mistyped --db made a new empty queue for work, pause,
// purge-dead-letters and compact (exit 0); `add --file /missing` left an
// empty queue file behind.
#[test]
fn only_add_creates_a_queue_file() {
    let env = Env::new();
    let db = env.path("q.redb");
    let commands: [&[&str]; 12] = [
        &["work", "--exec", "true", "--until-empty"],
        &["step", "f", "--exec", "true"],
        &["pause", "f"],
        &["resume", "f"],
        &["clear-flow", "f"],
        &["purge-dead-letters"],
        &["redrive", "--all"],
        &["compact"],
        &["stats"],
        &["peek"],
        &["dead-letters"],
        &["stats", "--json"],
    ];
    for cmd in commands {
        let out = env.run(cmd);
        assert_error(&out, 3, &format!("no queue file at {}", db.display()));
        assert!(!db.exists(), "{cmd:?} created the file");
    }
    assert_error(
        &env.run(&["add", "--file", "/missing/input"]),
        3,
        "/missing/input",
    );
    assert_error(
        &env.run(&["add", "--lines", "--file", "/missing/input"]),
        3,
        "/missing/input",
    );
    assert!(!db.exists(), "a failed add created the file");
    env.ok(&["add", "x"]);
    assert!(db.exists());
}

// Failed: stats and peek needed write access to the file.
#[test]
fn looking_works_on_a_read_only_mount() {
    let env = Env::new();
    env.ok(&["add", "x", "--flow", "f"]);
    env.ok(&["pause", "f"]);
    env.ok(&["add", "y"]);
    let out = env.run(&[
        "work",
        "--until-empty",
        "--max-deliveries",
        "1",
        "--exec",
        "exit 1",
    ]);
    assert_eq!(out.status.code(), Some(10), "{}", text(&out.stderr));
    env.ok(&["add", "z"]);
    let bin = env!("CARGO_BIN_EXE_workjournal");
    let dir = env.dir.path().display().to_string();
    // A private mount namespace (the tests run as root) in which the temp
    // dir is a read-only bind mount: no write reaches the file.
    let script = format!(
        "mount --bind -o ro {dir} {dir} && \
         if touch {dir}/probe 2>/dev/null; then echo writable; exit 99; fi && \
         {bin} --db {dir}/q.redb stats --json && \
         {bin} --db {dir}/q.redb peek && \
         {bin} --db {dir}/q.redb dead-letters && \
         {bin} --db {dir}/q.redb add w"
    );
    let out = Command::new("unshare")
        .args(["-m", "sh", "-c", &script])
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    let stats: serde_json::Value = serde_json::from_str(stdout.lines().next().unwrap()).unwrap();
    assert_eq!(stats["backlog"], 1, "{stats}");
    assert_eq!(stats["parked"], 1, "{stats}");
    assert_eq!(stats["dead_letters"], 1, "{stats}");
    assert!(stdout.contains("\t-\t0\t0\tz"), "{stdout}");
    assert!(stdout.contains("command exited with code 1"), "{stdout}");
    assert!(stderr.contains("Read-only file system"), "{stderr}");
}

// A viewer and a writer exclude each other across processes: a read-only
// open holds the file's lock shared (`stats --watch` lets go between its
// looks, so the viewer here is this test holding the same shared lock).
#[test]
fn a_read_only_viewer_and_a_writer_exclude_each_other() {
    let env = Env::new();
    env.ok(&["add", "x"]);
    let viewer = std::fs::File::open(env.path("q.redb")).unwrap();
    viewer.try_lock_shared().unwrap();
    let out = env.run(&["add", "y"]);
    assert_error(&out, 4, "locked by another process");
    assert!(
        text(&out.stderr).contains("held by pid"),
        "{}",
        text(&out.stderr)
    );
    // Another viewer shares it.
    assert!(env.run(&["stats"]).status.success());
    viewer.unlock().unwrap();
    env.ok(&["add", "y"]);
}

// Failed: a command that hung kept its slot (and its lease) forever; one
// that left a background child holding stderr kept its slot until the child
// exited.
#[test]
fn a_timeout_kills_the_command_and_its_group_and_children_do_not_hold_slots() {
    let env = Env::new();
    env.ok(&["add", "hang"]);
    let out = env.run(&[
        "work",
        "--until-empty",
        "--max-deliveries",
        "1",
        "--timeout",
        "300ms",
        "--exec",
        "sleep 60 & echo $! > child; echo waiting >&2; wait",
    ]);
    assert_eq!(out.status.code(), Some(10), "{}", text(&out.stderr));
    let child = env.read("child");
    wait_for("the child to be killed", Duration::from_secs(20), || {
        ended(child.trim())
    });
    let dead = env.ok(&["dead-letters"]);
    assert!(
        dead.contains("command timed out after 300ms and was killed: waiting"),
        "{dead}"
    );
    assert_error(
        &env.run(&["work", "--timeout", "0s", "--exec", "true"]),
        2,
        "timeout",
    );

    // One slot: the second item runs only once the first command's slot is
    // free, though its background child holds stderr for a minute.
    env.ok(&["add", "one"]);
    env.ok(&["add", "two"]);
    let mut worker = spawn_quiet(env.cmd(&[
        "work",
        "--until-empty",
        "--concurrency",
        "1",
        "--exec",
        &format!("sleep 60 & echo $! >> children; {}", record("ran.txt")),
    ]));
    wait_for("both items", Duration::from_secs(30), || {
        env.read("ran.txt").lines().count() == 2
    });
    let status = worker.wait().unwrap();
    for pid in env.read("children").lines() {
        let _ = Command::new("kill").arg(pid).status();
    }
    assert!(status.success(), "{status:?}");
}

// Failed: the reason was the first line of the last 2 KiB of stderr, so a
// Python traceback read "Traceback (most recent call last):".
#[test]
fn the_reason_is_the_end_of_stderr() {
    let env = Env::new();
    env.ok(&["add", "x"]);
    let script = "echo 'Traceback (most recent call last):' >&2; \
                  echo '  File \"job.py\", line 3, in <module>' >&2; \
                  echo 'ValueError: bad row 7' >&2; echo >&2; exit 1";
    let out = env.run(&[
        "work",
        "--until-empty",
        "--max-deliveries",
        "1",
        "--exec",
        script,
    ]);
    assert!(
        text(&out.stderr)
            .contains("dead-lettered: command exited with code 1: ValueError: bad row 7"),
        "{}",
        text(&out.stderr)
    );
    let dead = env.ok(&["dead-letters"]);
    assert!(
        dead.contains("command exited with code 1: ValueError: bad row 7\n"),
        "{dead}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&env.ok(&["dead-letters", "--json"])).unwrap();
    let reason = json[0]["reason"].as_str().unwrap();
    assert!(reason.contains("Traceback"), "{reason}");
    let help = env.ok(&["work", "--help"]);
    assert!(
        help.contains("a successful command's stderr is discarded"),
        "{help}"
    );
}

// Failed: flow names with tabs, newlines or 100 000 characters were taken;
// `resume` of an unknown flow succeeded silently.
#[test]
fn bad_flow_names_are_refused_and_resume_of_an_unknown_flow_says_so() {
    let env = Env::new();
    env.ok(&["add", "x"]);
    let long = "f".repeat(workjournal::MAX_FLOW_NAME_BYTES + 1);
    for flow in ["a\tb", "a\nb", long.as_str()] {
        assert_error(&env.run(&["add", "x", "--flow", flow]), 7, "flow name");
        assert_error(&env.run(&["pause", flow]), 7, "flow name");
    }
    let longest = "f".repeat(workjournal::MAX_FLOW_NAME_BYTES);
    env.ok(&["add", "x", "--flow", &longest]);
    assert_error(
        &env.run(&["resume", "nope"]),
        9,
        "flow \"nope\" is not paused",
    );
    env.ok(&["pause", "p"]);
    assert!(env.ok(&["resume", "p"]).contains("resumed p"));
}

// Failed: `dead-letters --json` turned binary payloads into replacement
// characters; `peek` had no `--json`.
#[test]
fn json_outputs_keep_binary_payloads() {
    use base64::Engine;
    let env = Env::new();
    let binary = [0u8, 159, 146, 150, 255, b'\n'];
    std::fs::write(env.path("bin"), binary).unwrap();
    env.ok(&["add", "--file", "bin"]);
    env.ok(&["add", "text ok"]);
    let peek: serde_json::Value = serde_json::from_str(&env.ok(&["peek", "--json"])).unwrap();
    let b64 = base64::engine::general_purpose::STANDARD;
    assert_eq!(peek[0]["payload"], serde_json::Value::Null, "{peek}");
    assert_eq!(
        b64.decode(peek[0]["payload_base64"].as_str().unwrap())
            .unwrap(),
        binary
    );
    assert_eq!(peek[1]["payload"], "text ok", "{peek}");
    env.run(&[
        "work",
        "--until-empty",
        "--max-deliveries",
        "1",
        "--exec",
        "exit 1",
    ]);
    let dead: serde_json::Value =
        serde_json::from_str(&env.ok(&["dead-letters", "--json"])).unwrap();
    let bin_letter = dead
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["payload"].is_null())
        .unwrap();
    assert_eq!(
        b64.decode(bin_letter["payload_base64"].as_str().unwrap())
            .unwrap(),
        binary
    );
}

// SPEC 3, Priority: `add --priority N` puts the item ahead of lower tiers;
// `peek` (text and JSON) and `work` follow the same order.
#[test]
fn add_priority_runs_higher_tiers_first() {
    let env = Env::new();
    env.ok(&["add", "low"]);
    env.ok(&["add", "high", "--priority", "5"]);
    std::fs::write(env.path("mid"), "mid1\nmid2\n").unwrap();
    env.ok(&["add", "--lines", "--file", "mid", "--priority", "2"]);
    let peek: serde_json::Value = serde_json::from_str(&env.ok(&["peek", "--json"])).unwrap();
    let order: Vec<&str> = peek
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["payload"].as_str().unwrap())
        .collect();
    assert_eq!(order, vec!["high", "mid1", "mid2", "low"], "{peek}");
    assert_eq!(peek[0]["priority"], 5, "{peek}");
    let out = env.ok(&[
        "work",
        "--until-empty",
        "--concurrency",
        "1",
        "--exec",
        "cat; echo",
    ]);
    assert_eq!(out, "high\nmid1\nmid2\nlow\n");
    assert_error(&env.run(&["add", "x", "--priority", "256"]), 2, "priority");
}

// Regression (issue 10, item 3): a command that could not be started
// (`sh` not found here; too many open files in the field) was charged to
// the item as a failed attempt, and with `--max-deliveries 1` the item was
// dead-lettered without ever running. It is now given back with its
// delivery unspent, after a backoff.
#[test]
fn a_command_that_cannot_be_started_spends_no_delivery() {
    let env = Env::new();
    env.ok(&["add", "x"]);
    let mut c = env.cmd(&[
        "work",
        "--max-deliveries",
        "1",
        "--backoff",
        "20ms",
        "--exec",
        "true",
    ]);
    // No `sh` on this PATH: every spawn fails.
    c.env("PATH", env.path("no-such-dir"));
    let worker = spawn_quiet(c);
    std::thread::sleep(Duration::from_millis(1500));
    signal(&worker, "-TERM");
    let out = worker.wait_with_output().unwrap();
    assert!(out.status.success(), "{:?}", out.status);
    let s = env.stats();
    assert_eq!(s["dead_letters"].as_u64(), Some(0), "{s}");
    assert_eq!(
        s["backlog"].as_u64().unwrap() + s["delayed"].as_u64().unwrap(),
        1,
        "{s}"
    );
    // The item runs once `sh` can be found, as its first delivery.
    env.ok(&[
        "work",
        "--until-empty",
        "--max-deliveries",
        "1",
        "--exec",
        "test \"$WORKJOURNAL_DELIVERY\" = 1",
    ]);
    let s = env.stats();
    assert_eq!(
        (
            s["dead_letters"].as_u64(),
            s["backlog"].as_u64(),
            s["delayed"].as_u64()
        ),
        (Some(0), Some(0), Some(0)),
        "{s}"
    );
}

/// SPEC 9, CLI: `rate-limit`, `concurrency` and `backoff` set, change and
/// clear a flow's limits; `limits` and `stats` show them.
#[test]
fn flow_limits_from_the_command_line() {
    let env = Env::new();
    env.ok(&["add", "x", "--flow", "api", "--cost", "2"]);
    assert_eq!(
        env.ok(&["rate-limit", "api", "10/s"]).trim(),
        "rate limit api: 10/1s"
    );
    assert_eq!(
        env.ok(&["concurrency", "api", "2"]).trim(),
        "concurrency api: at most 2 running"
    );
    let out = env.ok(&["backoff", "api", "1h"]);
    assert!(out.starts_with("backoff api: held until "), "{out}");
    let v: serde_json::Value = serde_json::from_str(&env.ok(&["limits", "--json"])).unwrap();
    assert_eq!(v[0]["flow"], "api");
    assert_eq!(v[0]["rate"]["permits"], 10);
    assert_eq!(v[0]["rate"]["period_ms"], 1000);
    assert_eq!(v[0]["concurrency"], 2);
    assert_eq!(v[0]["blocked"], true);
    assert!(env.ok(&["limits"]).starts_with("api\trate=10/1s"));
    let s = env.stats();
    assert_eq!(s["flow_limits"][0]["flow"], "api");
    let peek: serde_json::Value = serde_json::from_str(&env.ok(&["peek", "--json"])).unwrap();
    assert_eq!(peek, serde_json::json!([]));
    env.ok(&["backoff", "api", "off"]);
    let peek: serde_json::Value = serde_json::from_str(&env.ok(&["peek", "--json"])).unwrap();
    assert_eq!(peek[0]["cost"], 2);
    env.ok(&["rate-limit", "api", "off"]);
    env.ok(&["concurrency", "api", "off"]);
    assert_eq!(env.ok(&["limits"]), "");
    assert_error(&env.run(&["rate-limit", "api", "0/s"]), 2, "above zero");
    assert_error(&env.run(&["concurrency", "api", "0"]), 2, "at least 1");
    assert_error(&env.run(&["backoff", "", "1s"]), 7, "flow name is required");
}

/// SPEC 9, CLI: a command exiting 75 with `retry-after: D` on stderr backs
/// its flow off for D for every worker and gives the item back.
#[test]
fn a_command_exiting_75_backs_its_flow_off() {
    let env = Env::new();
    env.ok(&["add", "a1", "--flow", "api"]);
    env.ok(&["add", "a2", "--flow", "api"]);
    let cmd = "if [ ! -e backed ]; then touch backed; echo 'retry-after: 3600' >&2; exit 75; fi; cat >> ran.txt";
    let started = now_ms();
    let mut child = spawn_quiet(env.cmd(&["work", "--exec", cmd, "--concurrency", "1"]));
    wait_for("the back-off", Duration::from_secs(20), || {
        let v: serde_json::Value =
            serde_json::from_str(&env.ok(&["limits", "--json"])).unwrap_or_default();
        v[0]["backoff_until_ms"].as_u64().is_some()
    });
    // a1 given back in its place (due at once, held with its flow), a2
    // held in the backlog: both in the flow's held lane.
    wait_for("a1 back in its place", Duration::from_secs(20), || {
        let s = env.stats();
        s["delayed"] == 0 && s["backlog"] == 2 && s["limited"] == 2
    });
    // Long enough for a2 to have run if the flow were not held.
    std::thread::sleep(Duration::from_millis(300));
    child.kill().unwrap();
    child.wait().unwrap();
    let v: serde_json::Value = serde_json::from_str(&env.ok(&["limits", "--json"])).unwrap();
    let until = v[0]["backoff_until_ms"].as_u64().unwrap();
    assert!(until >= started + 3_600_000, "{v}");
    assert!(!env.path("ran.txt").exists(), "a held item ran");
    let s = env.stats();
    assert_eq!(
        (s["delayed"].as_u64(), s["backlog"].as_u64()),
        (Some(0), Some(2)),
        "{s}"
    );
}

/// One frame of the socket between the worker and a supervisor (SPEC
/// section 9, the wire format): a little-endian u32 length, then the bytes.
fn supervisor_frame(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// One request of the worker to a supervisor (SPEC section 9, the wire
/// format): the head frame (with the flow), then the payload's frame, of
/// which only the first `sent` bytes of the whole request are returned.
fn supervisor_request(id: u64, flow: &str, payload: &[u8], sent: Option<usize>) -> Vec<u8> {
    let mut head = Vec::new();
    head.extend_from_slice(&id.to_le_bytes());
    head.extend_from_slice(&1u32.to_le_bytes()); // delivery
    head.extend_from_slice(&0u64.to_le_bytes()); // no timeout
    head.push(0); // stdout not kept
    head.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    head.extend_from_slice(flow.as_bytes());
    let mut r = Vec::new();
    supervisor_frame(&mut r, &head);
    supervisor_frame(&mut r, payload);
    r.truncate(sent.unwrap_or(r.len()));
    r
}

/// A status record from a supervisor, one frame: (kind, code or signal,
/// stderr).
fn supervisor_status(s: &mut std::os::unix::net::UnixStream) -> (u8, i32, String) {
    use std::io::Read;
    let mut len = [0u8; 4];
    s.read_exact(&mut len).unwrap();
    let mut frame = vec![0u8; u32::from_le_bytes(len) as usize];
    s.read_exact(&mut frame).unwrap();
    let value = i32::from_le_bytes(frame[1..5].try_into().unwrap());
    let stderr_len = u32::from_le_bytes(frame[6..10].try_into().unwrap()) as usize;
    (frame[0], value, text(&frame[10..10 + stderr_len]))
}

/// The supervisor a slot of `work` keeps (`__supervise -- CMD`) is read
/// without clap on that exact spelling, and through clap on any other
/// (here with `--db` in front). Both answer request after request on the
/// socket that is their stdin, each by a run of the command on exactly its
/// payload, reporting how it exited; a request cut short (the worker died
/// while writing it) never runs the command, and the supervisor ends
/// (SPEC section 9).
#[test]
fn the_supervisor_runs_each_whole_payload_and_never_a_cut_one_by_either_spelling() {
    use std::os::fd::OwnedFd;
    use std::os::unix::net::UnixStream;
    let env = Env::new();
    let cmd = r#"cat; touch "ran-$WORKJOURNAL_ID-$WORKJOURNAL_FLOW"; echo oops >&2; exit 3"#;
    let fast = || {
        let mut c = Command::new(env!("CARGO_BIN_EXE_workjournal"));
        c.args(["__supervise", "--", cmd]);
        c
    };
    let parsed = || env.cmd(&["__supervise", "--", cmd]);
    for (how, make) in [("fast", &fast as &dyn Fn() -> Command), ("clap", &parsed)] {
        let (mut ours, theirs) = UnixStream::pair().unwrap();
        let child = make()
            .current_dir(env.dir.path())
            .stdin(Stdio::from(OwnedFd::from(theirs)))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        for (id, payload) in [(7u64, &b"hello"[..]), (8, b"world")] {
            ours.write_all(&supervisor_request(id, "f", payload, None))
                .unwrap();
            let (kind, code, stderr) = supervisor_status(&mut ours);
            assert_eq!((kind, code), (0, 3), "{how}");
            assert_eq!(stderr, "oops\n", "{how}");
            let ran = env.path(&format!("ran-{id}-f"));
            assert!(ran.exists(), "{how}: {id} did not run");
            std::fs::remove_file(ran).unwrap();
        }
        // Three bytes of five, then the socket closes: the command never
        // starts and the supervisor ends.
        let whole = supervisor_request(9, "f", b"hello", None).len();
        ours.write_all(&supervisor_request(9, "f", b"hello", Some(whole - 2)))
            .unwrap();
        drop(ours);
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(125), "{how}: {}", text(&out.stderr));
        assert_eq!(text(&out.stdout), "helloworld", "{how}");
        assert!(!env.path("ran-9-f").exists(), "{how}: ran on a cut payload");
    }
}

/// SPEC 9: a slot's supervisor lives from item to item (every command's
/// parent is the same process, not the worker), and a worker SIGKILLed
/// while a later item's command runs under it still takes that command's
/// whole group with it, and the supervisor too.
#[test]
fn a_reused_supervisor_still_kills_the_command_group_of_a_killed_worker() {
    let env = Env::new();
    for i in 0..5 {
        env.ok(&["add", &format!("quick{i}")]);
    }
    env.ok(&["add", "last"]);
    let mut worker = spawn_quiet(env.cmd(&[
        "work",
        "--concurrency",
        "1",
        "--exec",
        r#"echo $PPID >> parents; if [ "$(cat)" = last ]; then sleep 300 & echo $! > bg.pid; echo $$ > sh.pid; wait; fi"#,
    ]));
    wait_for("the last command", Duration::from_secs(30), || {
        env.read("bg.pid").ends_with('\n') && env.read("sh.pid").ends_with('\n')
    });
    let parents = env.read("parents");
    let distinct: std::collections::BTreeSet<&str> = parents.lines().collect();
    assert_eq!(parents.lines().count(), 6, "{parents}");
    assert_eq!(
        distinct.len(),
        1,
        "not one supervisor for the slot: {parents}"
    );
    let supervisor = parents.lines().next().unwrap_or_default().to_string();
    assert_ne!(supervisor, worker.id().to_string());
    worker.kill().unwrap();
    worker.wait().unwrap();
    let (sh, bg) = (env.read("sh.pid"), env.read("bg.pid"));
    wait_for(
        "the command's group and its supervisor to die",
        Duration::from_secs(20),
        || ended(sh.trim()) && ended(bg.trim()) && ended(&supervisor),
    );
}

/// SPEC 9: `--timeout` kills one item's command and the slot's supervisor
/// goes on to the next items, still the same process.
#[test]
fn a_supervisor_runs_on_after_a_timed_out_command() {
    let env = Env::new();
    for p in ["hang", "ok1", "ok2"] {
        env.ok(&["add", p]);
    }
    let out = env.run(&[
        "work",
        "--until-empty",
        "--concurrency",
        "1",
        "--max-deliveries",
        "1",
        "--timeout",
        "300ms",
        "--exec",
        r#"echo $PPID >> parents; p=$(cat); if [ "$p" = hang ]; then sleep 60 & echo $! > bg.pid; wait; fi; echo "$p" >> ran.txt"#,
    ]);
    assert_eq!(out.status.code(), Some(10), "{}", text(&out.stderr));
    assert_eq!(env.read("ran.txt"), "ok1\nok2\n");
    let parents = env.read("parents");
    let distinct: std::collections::BTreeSet<&str> = parents.lines().collect();
    assert_eq!(
        (parents.lines().count(), distinct.len()),
        (3, 1),
        "{parents}"
    );
    let bg = env.read("bg.pid");
    wait_for(
        "the timed-out group to die",
        Duration::from_secs(20),
        || ended(bg.trim()),
    );
    let dead = env.ok(&["dead-letters"]);
    assert!(dead.contains("command timed out after 300ms"), "{dead}");
}

/// SPEC 9: items that follow each other through one slot's supervisor
/// keep apart: each kept stdout is its own command's, and a failure's
/// reason is its own command's stderr, not a neighbour's.
#[test]
fn items_through_one_supervisor_keep_their_own_output() {
    let env = Env::new();
    for p in ["a", "b", "bad", "c"] {
        env.ok(&["add", p]);
    }
    let out = env.run(&[
        "work",
        "--until-empty",
        "--concurrency",
        "1",
        "--max-deliveries",
        "1",
        "--keep-stdout",
        "--exec",
        r#"p=$(cat); echo "err-$p" >&2; [ "$p" = bad ] && exit 3; printf '%s-%s' "$p" "$WORKJOURNAL_ID""#,
    ]);
    assert_eq!(out.status.code(), Some(10), "{}", text(&out.stderr));
    for (id, want) in [("1", "a-1"), ("2", "b-2"), ("4", "c-4")] {
        assert_eq!(env.ok(&["result", id]), want);
    }
    let dead = env.ok(&["dead-letters"]);
    assert!(
        dead.contains("command exited with code 3: err-bad"),
        "{dead}"
    );
    assert_eq!(dead.matches("err-").count(), 1, "{dead}");
}
