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
    assert_eq!(env.ok(&["peek", "1"]).trim(), "1\tgreet\t0\thello");

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
    assert!(out.status.success(), "{}", text(&out.stderr));
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
    env.ok(&["pause", "held"]);
    for p in ["a", "b", "c"] {
        env.ok(&["add", p, "--flow", "held"]);
    }
    env.ok(&["add", "free"]);
    env.ok(&["work", "--exec", &record("ran.txt"), "--until-empty"]);
    assert_eq!(env.read("ran.txt"), "4  1 free\n");
    let s = env.stats();
    assert_eq!(s["parked"], 3);
    assert_eq!(s["paused_flows"][0], "held");

    assert_eq!(
        env.ok(&["step", "held", "--exec", &record("ran.txt")])
            .trim(),
        "item 1 done"
    );
    assert!(env.read("ran.txt").ends_with("1 held 1 a\n"));
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
    assert!(env.read("ran.txt").ends_with("2 held 1 b\n3 held 1 c\n"));
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
    assert_eq!(env.stats()["backlog"], 0, "a refused add journals nothing");

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
    // `work` and `serve` serve the file they hold (tests/cli_serve.rs);
    // `stats --watch` holds it without serving, so others find it locked.
    let env = Env::new();
    env.ok(&["add", "x"]);
    let mut holder = env
        .cmd(&["stats", "--watch"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait until the holder has the file (it printed), so that the probe
    // cannot be the one that holds it first.
    let mut first = [0u8; 1];
    std::io::Read::read_exact(holder.stdout.as_mut().unwrap(), &mut first).unwrap();
    let out = env.run(&["stats"]);
    holder.kill().unwrap();
    holder.wait().unwrap();
    assert_error(&out, 4, "locked by another process");
}

#[test]
fn sigterm_lets_the_running_command_finish() {
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
    let pid = worker.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
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
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/main-job.sh");
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
