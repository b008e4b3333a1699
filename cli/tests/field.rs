//! Many processes on one device, as they meet in the field: real
//! `workjournal` processes on a queue file in a temp dir, each test named
//! by the behaviour it holds. The library's side of these (looks after a
//! clock step, the back-off's place) is in the root's tests.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// A temp dir with the queue file `q.redb` in it.
struct Field {
    dir: tempfile::TempDir,
}

impl Field {
    fn new() -> Field {
        Field {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn db(&self) -> PathBuf {
        self.dir.path().join("q.redb")
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `workjournal --db q.redb ARGS`, in the temp dir, without a token or
    /// a log filter from the environment.
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_workjournal"));
        c.current_dir(self.dir.path())
            .arg("--db")
            .arg(self.db())
            .args(args)
            .env_remove("RUST_LOG")
            .env_remove("WORKJOURNAL_TOKEN")
            .stdin(Stdio::null());
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().unwrap()
    }

    /// Run, expect success, and give stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(out.status.success(), "{args:?}: {}", err(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

fn err(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `workjournal ARGS` with no `--db` of ours (a target of the test's own).
fn bare(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_workjournal"))
        .current_dir(dir)
        .args(args)
        .env_remove("RUST_LOG")
        .env_remove("WORKJOURNAL_TOKEN")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

// Failed (item 3): `work --max-deliveries 1` through the socket of a
// served file ran the failing item 3 times, and nothing said that the
// server's max_deliveries applied; `--dead-letter-cap` was dropped the same
// way.
#[test]
fn work_through_a_served_file_names_the_limits_that_do_not_apply() {
    let served = support::Served::start(&[]);
    served.cli(&["add", "fails"]);
    let out = Command::new(env!("CARGO_BIN_EXE_workjournal"))
        .current_dir(served.dir.path())
        .args(&served.target)
        .args([
            "work",
            "--exec",
            "exit 1",
            "--max-deliveries",
            "1",
            "--dead-letter-cap",
            "5",
            "--backoff",
            "10ms",
            "--until-empty",
        ])
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = err(&out);
    assert_eq!(out.status.code(), Some(10), "{stderr}");
    assert!(
        stderr.contains("--max-deliveries 1 does not apply")
            && stderr.contains("its max_deliveries 3 applies"),
        "{stderr}"
    );
    assert!(
        stderr.contains("--dead-letter-cap 5 does not apply"),
        "{stderr}"
    );
    // What the line said held: the server's three deliveries.
    let dead: serde_json::Value =
        serde_json::from_str(&served.cli(&["dead-letters", "--json"])).unwrap();
    assert_eq!(dead[0]["deliveries"], 3, "{dead}");

    // On a file `work` opens itself the flags apply, and nothing is said.
    let field = Field::new();
    field.ok(&["add", "fails"]);
    let out = field.run(&[
        "work",
        "--exec",
        "exit 1",
        "--max-deliveries",
        "1",
        "--until-empty",
    ]);
    assert_eq!(out.status.code(), Some(10), "{}", err(&out));
    assert!(!err(&out).contains("does not apply"), "{}", err(&out));
    let dead: serde_json::Value =
        serde_json::from_str(&field.ok(&["dead-letters", "--json"])).unwrap();
    assert_eq!(dead[0]["deliveries"], 1, "{dead}");
}

// Failed (item 5): the `-opening` marker was looked at before the file
// lock was held, so a process opening the file while another one's open
// was in progress (its marker made, its lock held) warned that an earlier
// open did not finish and verified the whole file.
#[test]
fn an_open_in_progress_elsewhere_is_not_taken_for_an_unfinished_one() {
    let field = Field::new();
    field.ok(&["add", "x"]);
    // Another process in the middle of its open: the lock held, the
    // marker made.
    let holder = std::fs::File::options()
        .read(true)
        .write(true)
        .open(field.db())
        .unwrap();
    holder.try_lock().unwrap();
    std::fs::write(field.path("q.redb-opening"), b"").unwrap();
    let out = field.run(&["stats"]);
    assert_eq!(out.status.code(), Some(4), "{}", err(&out));
    assert!(!err(&out).contains("did not finish"), "{}", err(&out));
    // Its open done: the marker gone, the lock let go. The next open
    // finds a finished file and trusts it.
    std::fs::remove_file(field.path("q.redb-opening")).unwrap();
    holder.unlock().unwrap();
    let out = field.run(&["stats"]);
    assert!(out.status.success(), "{}", err(&out));
    assert!(!err(&out).contains("did not finish"), "{}", err(&out));
}

/// `add --flow api --lines` of 1 to 4, then `work` with one slot whose
/// command backs item 1 off once (exit 75, stderr naming `retry_after`),
/// until empty; gives the order the items ran in and `work`'s stderr.
fn back_off_once(retry_after: &str, extra: &[&str]) -> (String, String) {
    let field = Field::new();
    let out = field
        .cmd(&["add", "--flow", "api", "--lines"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(b"1\n2\n3\n4\n")?;
            c.wait_with_output()
        })
        .unwrap();
    assert!(out.status.success(), "{}", err(&out));
    let script = format!(
        "read p; if [ \"$p\" = 1 ] && [ ! -e asked ]; then touch asked; echo '{retry_after}' >&2; exit 75; fi; echo \"$p\" >> order.txt"
    );
    let mut args = vec![
        "work",
        "--exec",
        &script,
        "--concurrency",
        "1",
        "--until-empty",
    ];
    args.extend_from_slice(extra);
    let out = field.run(&args);
    assert!(out.status.success(), "{}", err(&out));
    let order = std::fs::read_to_string(field.path("order.txt")).unwrap();
    (order, err(&out))
}

// Failed (item 8): the command that asked for the back-off (exit 75) was
// given back due when the back-off ended, behind its flow's later items,
// which ran first (order 2, 3, 4, 1); and `work` printed nothing about it.
#[test]
fn an_item_that_backs_its_flow_off_keeps_its_place_and_work_says_so() {
    let (order, stderr) = back_off_once("retry-after: 1", &[]);
    assert_eq!(order, "1\n2\n3\n4\n", "{stderr}");
    assert!(
        stderr.contains("item 1 asked to back off (exit 75): flow api held for 1s"),
        "{stderr}"
    );
}

// Failed (item 8): `retry-after: soon` was silently replaced by --backoff.
#[test]
fn an_unreadable_retry_after_is_named_with_what_applies_instead() {
    let (order, stderr) = back_off_once("retry-after: soon", &["--backoff", "300ms"]);
    assert_eq!(order, "1\n2\n3\n4\n", "{stderr}");
    assert!(
        stderr.contains("held for 300ms")
            && stderr.contains("--backoff: cannot read retry-after \"soon\""),
        "{stderr}"
    );
}

// Failed (item 9): `serve --http 6482x` complained about `--listen`.
#[test]
fn a_malformed_http_address_names_http() {
    let field = Field::new();
    field.ok(&["add", "x"]);
    let out = field.run(&["serve", "--http", "6482x"]);
    assert_eq!(out.status.code(), Some(2), "{}", err(&out));
    assert!(err(&out).contains("--http \"6482x\""), "{}", err(&out));
    assert!(!err(&out).contains("--listen"), "{}", err(&out));
    assert!(!field.path("q.redb.sock").exists());
}

// Failed (item 9): `rate-limit "" 2/s` said the default flow "cannot be
// paused or parked", which is not what was asked.
#[test]
fn a_limit_on_the_default_flow_says_it_carries_no_limits() {
    let field = Field::new();
    field.ok(&["add", "x"]);
    for args in [
        &["rate-limit", "", "2/s"][..],
        &["concurrency", "", "2"],
        &["backoff", "", "1s"],
    ] {
        let out = field.run(args);
        assert_eq!(out.status.code(), Some(7), "{args:?}: {}", err(&out));
        assert!(
            err(&out).contains("the default flow \"\" carries no limits"),
            "{args:?}: {}",
            err(&out)
        );
        assert!(!err(&out).contains("paused"), "{args:?}: {}", err(&out));
    }
}

// Failed (item 9): `--redis http://...` said `InvalidClientConfig`.
#[cfg(feature = "redis")]
#[test]
fn a_redis_url_of_another_scheme_names_the_schemes_accepted() {
    let field = Field::new();
    let out = bare(
        field.dir.path(),
        &["--redis", "http://127.0.0.1:6379", "stats"],
    );
    assert_eq!(out.status.code(), Some(2), "{}", err(&out));
    assert!(
        err(&out).contains("scheme http://: expected redis://, rediss://"),
        "{}",
        err(&out)
    );
    assert!(!err(&out).contains("InvalidClientConfig"), "{}", err(&out));
}

// Failed (item 9): `--db http://...` without a token answered "missing or
// wrong bearer token" without naming WORKJOURNAL_TOKEN, where the command
// takes it from.
#[test]
fn a_server_url_without_a_token_names_workjournal_token() {
    let served = support::Served::start(&["--listen", "0"]);
    let url = format!("http://{}", served.listen.clone().unwrap());
    let out = bare(served.dir.path(), &["--db", &url, "stats"]);
    assert_eq!(out.status.code(), Some(6), "{}", err(&out));
    assert!(err(&out).contains("set WORKJOURNAL_TOKEN"), "{}", err(&out));
}

// Failed (item 9): a look at a server that is not there said
// `max_deliveries: cannot connect ...`: the route the connect happens to
// ask, not what failed.
#[test]
fn a_server_that_is_not_there_is_a_failed_connect() {
    let field = Field::new();
    let target = format!("unix:{}", field.path("none.sock").display());
    let out = bare(field.dir.path(), &["--db", &target, "peek"]);
    assert_eq!(out.status.code(), Some(6), "{}", err(&out));
    assert!(
        err(&out).contains("connect: cannot connect to"),
        "{}",
        err(&out)
    );
    assert!(!err(&out).contains("max_deliveries"), "{}", err(&out));
}

// Failed (item 9): the library's warnings came out as ` WARN message
// key=value`, unlike every other line (`workjournal: ...`).
#[test]
fn library_warnings_look_like_every_other_line() {
    let field = Field::new();
    field.ok(&["add", "x"]);
    // A directory where `work` would put its socket: it warns and runs
    // without serving.
    std::fs::create_dir(field.path("q.redb.sock")).unwrap();
    let out = field.run(&["work", "--exec", "true", "--until-empty"]);
    assert!(out.status.success(), "{}", err(&out));
    let warning = err(&out)
        .lines()
        .find(|l| l.contains("not serving"))
        .map(str::to_string)
        .unwrap_or_else(|| panic!("no warning: {}", err(&out)));
    assert!(
        warning.starts_with("workjournal: warning: not serving"),
        "{warning}"
    );
    for line in err(&out).lines() {
        assert!(
            line.starts_with("workjournal: ") || line.starts_with("done: "),
            "{line}"
        );
    }
}

// Failed (item 10): `add --file` of a payload over max_payload_bytes was
// refused (exit 7) but left a new, empty queue file behind.
#[test]
fn a_refused_first_add_creates_no_queue_file() {
    let field = Field::new();
    let big = field.path("big.bin");
    std::fs::write(&big, vec![b'x'; 17 * 1024 * 1024]).unwrap();
    let out = field.run(&["add", "--file", big.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(7), "{}", err(&out));
    assert!(err(&out).contains("max_payload_bytes"), "{}", err(&out));
    for name in ["q.redb", "q.redb-redo", "q.redb-opening"] {
        assert!(!field.path(name).exists(), "{name} was left behind");
    }
}

// Failed (item 10): `add` on a file that is not a queue (exit 5) left
// `-redo` and `-opening` files beside it.
#[test]
fn add_on_a_file_that_is_not_a_queue_leaves_nothing_beside_it() {
    let field = Field::new();
    std::fs::write(field.db(), b"not a queue, just some text\n".repeat(200)).unwrap();
    let out = field.run(&["add", "x"]);
    assert_eq!(out.status.code(), Some(5), "{}", err(&out));
    for name in ["q.redb-redo", "q.redb-opening"] {
        assert!(!field.path(name).exists(), "{name} was left behind");
    }
}

// Failed (item 10): `stats --watch` held the file between its looks, so a
// producer's `add` failed with exit 4 after 3 s.
#[test]
fn stats_watch_does_not_lock_producers_out() {
    let field = Field::new();
    field.ok(&["add", "first"]);
    let mut watch = field
        .cmd(&["stats", "--watch"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    for i in 0..5 {
        let out = field.run(&["add", &format!("while watched {i}")]);
        assert!(out.status.success(), "add {i}: {}", err(&out));
    }
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(watch.id().to_string())
        .status();
    let status = watch.wait().unwrap();
    assert!(status.success(), "{status:?}");
    let stats: serde_json::Value = serde_json::from_str(&field.ok(&["stats", "--json"])).unwrap();
    assert_eq!(stats["backlog"], 6, "{stats}");
}

// Failed (item 10): plain `peek` showed no priority tier.
#[test]
fn peek_shows_the_priority_tier() {
    let field = Field::new();
    field.ok(&["add", "--priority", "7", "urgent"]);
    field.ok(&["add", "--flow", "f", "plain"]);
    assert_eq!(
        field.ok(&["peek"]),
        "1\t-\t0\t7\turgent\n2\tf\t0\t0\tplain\n"
    );
}

// Failed (item 10): after one large item was done and the file compacted,
// the redo log kept the item's size (17.8 MB for a 16 MiB item).
#[test]
fn compact_gives_the_redo_log_back() {
    let field = Field::new();
    let big = field.path("big.bin");
    std::fs::write(&big, vec![b'x'; 8 * 1024 * 1024]).unwrap();
    field.ok(&["add", "--file", big.to_str().unwrap()]);
    field.ok(&["work", "--exec", "cat > /dev/null", "--until-empty"]);
    let before = std::fs::metadata(field.path("q.redb-redo")).unwrap().len();
    assert!(before >= 8 * 1024 * 1024, "{before}");
    field.ok(&["compact"]);
    let after = std::fs::metadata(field.path("q.redb-redo")).unwrap().len();
    assert!(after < 1024 * 1024, "the redo log kept {after} bytes");
    let stats: serde_json::Value = serde_json::from_str(&field.ok(&["stats", "--json"])).unwrap();
    assert_eq!(stats["backlog"], 0, "{stats}");
}

// Failed (item 10): a subcommand's `--help` listed the global options
// (`--db`, `--redis` ...) among its own.
#[test]
fn subcommand_help_keeps_global_options_apart() {
    let field = Field::new();
    let help = field.ok(&["work", "--help"]);
    let global = help
        .find("Global options:")
        .unwrap_or_else(|| panic!("{help}"));
    let exec = help.find("--exec").unwrap();
    let db = help.find("--db").unwrap();
    assert!(exec < global && global < db, "{help}");
}

#[cfg(feature = "dashboard")]
// Failed (item 10): a browser opening the dashboard without the token was
// shown the raw JSON of the 401.
#[test]
fn the_dashboard_without_a_token_tells_a_browser_how_to_get_in() {
    let served = support::Served::start(&["--http", "127.0.0.1:0"]);
    let http = served.http.clone().expect("the banner names the dashboard");
    let page = support::tcp(&http, "GET", "/", &[("accept", "text/html")], "");
    assert_eq!(page.status, 401, "{}", page.body);
    assert!(
        page.header("content-type")
            .is_some_and(|t| t.starts_with("text/html")),
        "{:?}",
        page.headers
    );
    assert!(page.body.contains("/?token=&lt;token&gt;"), "{}", page.body);
    // A program still gets the JSON error.
    let api = support::tcp(&http, "GET", "/", &[], "");
    assert_eq!(api.status, 401);
    assert!(api.body.contains("\"unauthorized\""), "{}", api.body);
}
