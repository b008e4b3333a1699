//! Running the user's command for one item.
//!
//! `work` does not start `sh -c CMD` itself: each of its slots keeps one
//! long-lived supervisor ([`supervise`], the hidden `__supervise -- CMD`
//! subcommand of this very binary), which starts `sh -c CMD` once per item,
//! each run leading a process group of its own (SPEC section 9). The two
//! talk over one Unix socket, the supervisor's stdin: the worker sends a
//! request (the item's id, flow, delivery, `--timeout`, `--keep-stdout` and
//! payload, lengths first) and the supervisor answers with a status record
//! (how `sh` ended, the end of its stderr, the kept stdout).
//!
//! - the supervisor reads the whole request before `sh` starts and hands
//!   the payload on from memory, so a command never reads a payload cut
//!   short by a worker that died while writing it;
//! - the socket is the lifeline. When it closes while a command runs (the
//!   worker was killed by any signal, SIGKILL too, crashed, or dropped the
//!   run: a shutdown past the grace period, a second Ctrl-C, a closed
//!   stdout), the supervisor kills the command's whole group with SIGKILL
//!   and exits, so no command outlives its worker and runs a second time
//!   beside the rerun. Between commands a closed socket just ends the
//!   supervisor.
//!
//! One supervisor per slot rather than one per item halves the programs
//! started per item (`sh` alone, as `xargs` starts its command), which is
//! most of what the worker path spends besides the queue's commits.

use std::ffi::OsStr;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::process::{ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustix::process::{Pid, Signal};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::process::{Child, Command};
use workjournal::Claimed;

/// How much of the command's stderr is kept for the failure reason, in bytes.
pub(crate) const STDERR_TAIL_BYTES: usize = 2048;

/// How long stderr (and a kept stdout) is still read after the command
/// exited, for what it wrote just before: a background child that keeps
/// either open must not keep the slot (SPEC section 9).
const STDERR_DRAIN: Duration = Duration::from_millis(100);

/// The most stdout `work --keep-stdout` keeps as an item's result, in
/// bytes (1 MiB); a command that writes more fails the attempt (SPEC
/// section 9).
pub(crate) const KEEP_STDOUT_CAP: usize = 1024 * 1024;

/// The supervisor's exit code when a request was cut short (the worker
/// died while writing it: the command was not started) or it could not
/// start at all.
pub(crate) const NOT_STARTED: u8 = 125;

/// The exit code by which a command asks `work` to back its item's flow
/// off (75, EX_TEMPFAIL of sysexits.h; SPEC section 9): the item is given
/// back and the flow held for every worker for the time the last line of
/// its stderr names (`retry-after: 30s`, or whole seconds as in HTTP's
/// Retry-After), else for `--backoff`.
pub(crate) const BACK_OFF_EXIT: u8 = 75;

/// How the reason of a command that could not be started begins.
const CANNOT_START: &str = "cannot start sh";

/// The hidden subcommand that runs the supervisor.
pub(crate) const SUPERVISE: &str = "__supervise";

/// Why a command failed: the text stored as the dead letter's reason. Its
/// first line is a summary (how the command ended and the last non-empty
/// line of its stderr); the lines after it, if any, are the end of stderr.
#[derive(Debug)]
pub(crate) struct Failure(pub(crate) String);

/// What `run` found.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// The command exited 0; with `keep_stdout`, what it wrote to stdout.
    Ok(Option<Vec<u8>>),
    /// The command failed.
    Failed(Failure),
    /// The command exited [`BACK_OFF_EXIT`]: back its flow off, for the
    /// time its stderr named, if it named one.
    BackOff(Option<Duration>, Failure),
    /// The command could not be started (`sh` missing, too many open
    /// files, no memory): the worker's failure, not the item's, so it is
    /// not a delivery (SPEC 9, Worker).
    NotStarted(Failure),
    /// The command died of SIGPIPE while our stdout is a pipe or socket: the
    /// reader of our output is gone (`work ... | head`). Not the item's fault.
    StdoutClosed,
}

/// Kill the process group `pgid` with SIGKILL (already gone is fine).
fn kill_group(pgid: u32) {
    if let Some(pid) = i32::try_from(pgid).ok().and_then(Pid::from_raw) {
        let _ = rustix::process::kill_process_group(pid, Signal::KILL);
    }
}

/// SIGPIPE's number on Linux and the BSDs.
const SIGPIPE: i32 = 13;

/// Whether our stdout is a pipe or a socket (the only outputs that can be
/// closed under us).
fn stdout_is_pipe() -> bool {
    use std::os::fd::AsFd;
    use std::os::unix::fs::FileTypeExt;
    let Ok(fd) = std::io::stdout().as_fd().try_clone_to_owned() else {
        return false;
    };
    std::fs::File::from(fd)
        .metadata()
        .map(|m| m.file_type().is_fifo() || m.file_type().is_socket())
        .unwrap_or(false)
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The program that runs the supervisor: this very binary, by
/// `/proc/self/exe` where there is one (it stays valid when the file is
/// replaced during an upgrade).
fn supervisor_program() -> std::path::PathBuf {
    let proc_exe = std::path::Path::new("/proc/self/exe");
    if proc_exe.exists() {
        return proc_exe.to_path_buf();
    }
    std::env::current_exe().unwrap_or_else(|_| std::path::PathBuf::from("workjournal"))
}

// ---------------------------------------------------------------------------
// The wire format between the worker and a supervisor (SPEC section 9).
//
// Request, worker to supervisor: a head of 33 bytes, little-endian: item id
// (u64), delivery (u32), timeout in ns (u64, 0 for none), flags (u8, bit 0:
// keep stdout), flow length (u32), payload length (u64); then the flow's
// bytes, then the payload's.
//
// Status, supervisor to worker: a head of 14 bytes, little-endian: how `sh`
// ended (u8: 0 exited, 1 killed by a signal, 2 not started, 3 timed out and
// killed), the exit code or signal number (i32), whether stdout went past
// the cap (u8), the stderr length (u32), the kept stdout's length (u32);
// then those bytes. For "not started" the stderr bytes are the reason.
// ---------------------------------------------------------------------------

const REQUEST_HEAD: usize = 8 + 4 + 8 + 1 + 4 + 8;
const STATUS_HEAD: usize = 1 + 4 + 1 + 4 + 4;
const KEEP_STDOUT_FLAG: u8 = 1;
/// The most stderr a status record carries: the supervisor keeps at most
/// twice the tail.
const STATUS_STDERR_MAX: usize = 4 * STDERR_TAIL_BYTES;

/// A payload up to this size goes to the supervisor in the same write as
/// its request's head (copied); a larger one is written on its own.
const COALESCE_BYTES: usize = 64 * 1024;

/// One run of the command, as the supervisor reads it.
struct Request {
    id: u64,
    delivery: u32,
    timeout: Option<Duration>,
    keep_stdout: bool,
    flow: Vec<u8>,
    payload: Vec<u8>,
}

/// The head and flow of a request (the payload follows them as it is).
fn encode_request(claimed: &Claimed, timeout: Option<Duration>, keep_stdout: bool) -> Vec<u8> {
    let item = &claimed.item;
    let timeout_ns = timeout.map_or(0, |t| {
        u64::try_from(t.as_nanos()).unwrap_or(u64::MAX).max(1)
    });
    let flow = item.flow.as_bytes();
    let mut head = Vec::with_capacity(REQUEST_HEAD + flow.len());
    head.extend_from_slice(&item.id.to_le_bytes());
    head.extend_from_slice(&claimed.receipt.delivery.to_le_bytes());
    head.extend_from_slice(&timeout_ns.to_le_bytes());
    head.push(if keep_stdout { KEEP_STDOUT_FLAG } else { 0 });
    head.extend_from_slice(&u32::try_from(flow.len()).unwrap_or(u32::MAX).to_le_bytes());
    head.extend_from_slice(&(item.payload.len() as u64).to_le_bytes());
    head.extend_from_slice(flow);
    head
}

/// A little-endian number from `bytes` at `at` (the caller sized `bytes`).
fn le<const N: usize>(bytes: &[u8], at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    if let Some(src) = bytes.get(at..at + N) {
        out.copy_from_slice(src);
    }
    out
}

/// Read exactly `len` bytes, growing the buffer only as they arrive (a
/// length is not trusted for an allocation).
async fn read_len<R: AsyncRead + Unpin>(r: &mut R, len: u64) -> std::io::Result<Vec<u8>> {
    // Room for a small payload at once; a large one grows as it comes.
    let mut out = Vec::with_capacity(
        usize::try_from(len)
            .unwrap_or(usize::MAX)
            .min(COALESCE_BYTES),
    );
    r.take(len).read_to_end(&mut out).await?;
    if out.len() as u64 != len {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok(out)
}

/// The next request; `None` when the socket closed between requests (the
/// worker is done with this slot), an error when it closed inside one.
async fn read_request<R: AsyncRead + Unpin>(r: &mut R) -> std::io::Result<Option<Request>> {
    let mut head = [0u8; REQUEST_HEAD];
    let mut got = 0;
    while got < REQUEST_HEAD {
        match r.read(&mut head[got..]).await? {
            0 if got == 0 => return Ok(None),
            0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            n => got += n,
        }
    }
    let id = u64::from_le_bytes(le(&head, 0));
    let delivery = u32::from_le_bytes(le(&head, 8));
    let timeout_ns = u64::from_le_bytes(le(&head, 12));
    let flags = head[20];
    let flow_len = u32::from_le_bytes(le(&head, 21));
    let payload_len = u64::from_le_bytes(le(&head, 25));
    let flow = read_len(r, u64::from(flow_len)).await?;
    let payload = read_len(r, payload_len).await?;
    Ok(Some(Request {
        id,
        delivery,
        timeout: (timeout_ns > 0).then(|| Duration::from_nanos(timeout_ns)),
        keep_stdout: flags & KEEP_STDOUT_FLAG != 0,
        flow,
        payload,
    }))
}

/// How `sh` ended, as the supervisor saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    Exited(i32),
    Signaled(i32),
    NotStarted,
    TimedOut,
}

/// A status record: how the command ended, the end of its stderr and its
/// kept stdout.
#[derive(Debug)]
struct Status {
    ended: Ended,
    stderr: Vec<u8>,
    stdout: Vec<u8>,
    stdout_over: bool,
}

impl Status {
    fn not_started(e: &std::io::Error) -> Self {
        Status {
            ended: Ended::NotStarted,
            stderr: format!("{CANNOT_START}: {e}").into_bytes(),
            stdout: Vec::new(),
            stdout_over: false,
        }
    }

    fn encode(&self) -> Vec<u8> {
        let (kind, value) = match self.ended {
            Ended::Exited(c) => (0u8, c),
            Ended::Signaled(s) => (1, s),
            Ended::NotStarted => (2, 0),
            Ended::TimedOut => (3, 0),
        };
        // Both are bounded by the supervisor (the tail, the cap).
        let stderr = &self.stderr[self.stderr.len().saturating_sub(STATUS_STDERR_MAX)..];
        let stdout = &self.stdout[..self.stdout.len().min(KEEP_STDOUT_CAP)];
        let mut out = Vec::with_capacity(STATUS_HEAD + stderr.len() + stdout.len());
        out.push(kind);
        out.extend_from_slice(&value.to_le_bytes());
        out.push(u8::from(self.stdout_over));
        out.extend_from_slice(&(stderr.len() as u32).to_le_bytes());
        out.extend_from_slice(&(stdout.len() as u32).to_le_bytes());
        out.extend_from_slice(stderr);
        out.extend_from_slice(stdout);
        out
    }

    async fn read<R: AsyncRead + Unpin>(r: &mut R) -> std::io::Result<Self> {
        let mut head = [0u8; STATUS_HEAD];
        r.read_exact(&mut head).await?;
        let value = i32::from_le_bytes(le(&head, 1));
        let ended = match head[0] {
            0 => Ended::Exited(value),
            1 => Ended::Signaled(value),
            2 => Ended::NotStarted,
            3 => Ended::TimedOut,
            _ => return Err(bad_record()),
        };
        let stderr_len = u32::from_le_bytes(le(&head, 6)) as usize;
        let stdout_len = u32::from_le_bytes(le(&head, 10)) as usize;
        if stderr_len > STATUS_STDERR_MAX || stdout_len > KEEP_STDOUT_CAP {
            return Err(bad_record());
        }
        let stderr = read_len(r, stderr_len as u64).await?;
        let stdout = read_len(r, stdout_len as u64).await?;
        Ok(Status {
            ended,
            stderr,
            stdout,
            stdout_over: head[5] != 0,
        })
    }
}

fn bad_record() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        "malformed status record from the command supervisor",
    )
}

// ---------------------------------------------------------------------------
// The worker's side.
// ---------------------------------------------------------------------------

/// One supervisor, idle or running one command.
///
/// Dropping it closes the lifeline: a command it runs is killed with its
/// group by the supervisor, which then exits. It is never killed from here
/// (a supervisor killed alone would leave its command running).
struct Supervisor {
    child: Child,
    channel: UnixStream,
}

impl Supervisor {
    fn start(cmd: &str) -> std::io::Result<Self> {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
        ours.set_nonblocking(true)?;
        let channel = UnixStream::from_std(ours)?;
        let child = Command::new(supervisor_program())
            .arg(SUPERVISE)
            .arg("--")
            .arg(cmd)
            .stdin(Stdio::from(OwnedFd::from(theirs)))
            .stdout(Stdio::inherit())
            .stderr(Stdio::inherit())
            // A group of its own, so that a Ctrl-C on the terminal reaches
            // only the worker, which lets running commands finish.
            .process_group(0)
            .spawn()?;
        // (The command, holding our copy of the supervisor's end, is gone.)
        Ok(Supervisor { child, channel })
    }

    /// Send one request and read its status. `Err(true)` when the request
    /// could not be sent whole (the supervisor is gone: the command did not
    /// start), `Err(false)` when the status could not be read.
    async fn call(&mut self, mut head: Vec<u8>, payload: &[u8]) -> Result<Status, bool> {
        let sent = async {
            if payload.len() <= COALESCE_BYTES {
                // One write, so that the supervisor wakes once per request.
                head.extend_from_slice(payload);
                self.channel.write_all(&head).await?;
            } else {
                self.channel.write_all(&head).await?;
                self.channel.write_all(payload).await?;
            }
            self.channel.flush().await
        };
        if sent.await.is_err() {
            return Err(true);
        }
        Status::read(&mut self.channel).await.map_err(|_| false)
    }

    /// How the supervisor ended, for a failure text (it closed the socket).
    async fn ended(mut self) -> String {
        drop(self.channel);
        match tokio::time::timeout(Duration::from_secs(1), self.child.wait()).await {
            Ok(Ok(s)) => format!("the command supervisor ended ({s})"),
            _ => "the command supervisor stopped answering".to_string(),
        }
    }
}

/// The supervisors of one `work` (or `step`) run: at most one per slot,
/// each kept idle between items and reused.
pub(crate) struct Supervisors {
    cmd: Arc<str>,
    idle: Mutex<Vec<Supervisor>>,
}

impl Supervisors {
    pub(crate) fn new(cmd: &str) -> Self {
        Supervisors {
            cmd: Arc::from(cmd),
            idle: Mutex::new(Vec::new()),
        }
    }

    /// Run `sh -c CMD` for `claimed` under an idle supervisor (or a new
    /// one), with the payload on stdin and the item's id, flow and delivery
    /// in the environment. Its stdout is ours, or with `keep_stdout`
    /// captured (up to [`KEEP_STDOUT_CAP`]) as the result; its stderr is
    /// kept (the last 2 KiB) for the failure reason and otherwise
    /// discarded. A command still running after `timeout` is killed with
    /// its group and fails.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future kills the command and everything it started
    /// (its supervisor sees the lifeline close); the supervisor is not
    /// reused.
    pub(crate) async fn run(
        &self,
        claimed: &Claimed,
        timeout: Option<Duration>,
        keep_stdout: bool,
    ) -> Outcome {
        let idle = self.idle.lock().ok().and_then(|mut v| v.pop());
        let mut supervisor = match idle {
            Some(s) => s,
            None => match Supervisor::start(&self.cmd) {
                Ok(s) => s,
                Err(e) => return Outcome::NotStarted(Failure(format!("{CANNOT_START}: {e}"))),
            },
        };
        let head = encode_request(claimed, timeout, keep_stdout);
        match supervisor.call(head, &claimed.item.payload).await {
            Ok(status) => {
                if let Ok(mut idle) = self.idle.lock() {
                    idle.push(supervisor);
                }
                outcome(status, timeout, keep_stdout)
            }
            // The whole request never reached it: the command did not run.
            Err(true) => {
                let how = supervisor.ended().await;
                Outcome::NotStarted(Failure(format!("{CANNOT_START}: {how}")))
            }
            // It may have run: an attempt.
            Err(false) => Outcome::Failed(Failure(supervisor.ended().await)),
        }
    }
}

/// What a status record means for the item.
fn outcome(status: Status, timeout: Option<Duration>, keep_stdout: bool) -> Outcome {
    let tail = &status.stderr;
    let (how, signal) = match status.ended {
        Ended::NotStarted => {
            return Outcome::NotStarted(Failure(String::from_utf8_lossy(tail).into_owned()));
        }
        Ended::TimedOut => {
            let limit = timeout.map(humantime::format_duration);
            let limit = limit.map(|d| d.to_string()).unwrap_or_default();
            let how = format!("command timed out after {limit} and was killed");
            return Outcome::Failed(Failure(with_stderr(&how, tail)));
        }
        Ended::Exited(0) => {
            if status.stdout_over {
                return Outcome::Failed(Failure(format!(
                    "command wrote more than the {KEEP_STDOUT_CAP} bytes --keep-stdout keeps"
                )));
            }
            return Outcome::Ok(keep_stdout.then_some(status.stdout));
        }
        Ended::Exited(c) if c == i32::from(BACK_OFF_EXIT) => {
            let how = format!("command asked to back off (exit {BACK_OFF_EXIT})");
            let failure = Failure(with_stderr(&how, tail));
            return Outcome::BackOff(retry_after(&failure.0), failure);
        }
        // A shell reports a child killed by signal N as exit code 128 + N.
        Ended::Exited(c) => (format!("command exited with code {c}"), c.checked_sub(128)),
        Ended::Signaled(s) => (format!("command killed by signal {s}"), Some(s)),
    };
    if signal == Some(SIGPIPE) && stdout_is_pipe() {
        return Outcome::StdoutClosed;
    }
    Outcome::Failed(Failure(with_stderr(&how, tail)))
}

/// A kept stdout: up to [`KEEP_STDOUT_CAP`] bytes. Past the cap it is read
/// on and discarded, so that the command never blocks on a full pipe.
#[derive(Default)]
struct Kept {
    bytes: Vec<u8>,
    /// The command wrote more than the cap.
    over: bool,
}

impl Kept {
    fn push(&mut self, chunk: &[u8]) {
        if self.bytes.len() + chunk.len() <= KEEP_STDOUT_CAP {
            self.bytes.extend_from_slice(chunk);
        } else {
            self.over = true;
        }
    }
}

/// Read `reader` (if any) into `sink` until it ends or `until` passes.
async fn drain<R: AsyncRead + Unpin>(
    reader: Option<R>,
    until: tokio::time::Instant,
    mut sink: impl FnMut(&[u8]),
) {
    let Some(mut reader) = reader else {
        return;
    };
    let mut buf = [0u8; 8192];
    while let Ok(Ok(n)) = tokio::time::timeout_at(until, reader.read(&mut buf)).await {
        if n == 0 {
            break;
        }
        sink(&buf[..n]);
    }
}

/// The back-off a command named on the last `retry-after:` line of its
/// stderr (kept in `text`): a duration (`30s`, `1m30s`) or whole seconds.
pub(crate) fn retry_after(text: &str) -> Option<Duration> {
    text.lines().rev().find_map(|line| {
        let line = line.trim();
        let at = line.to_ascii_lowercase().find("retry-after:")?;
        let value = line.get(at + "retry-after:".len()..)?.trim();
        match value.parse::<u64>() {
            Ok(secs) => Some(Duration::from_secs(secs)),
            Err(_) => humantime::parse_duration(value).ok(),
        }
    })
}

/// The failure text: `how`, then the last non-empty line of stderr on the
/// first line (for a Python traceback, its final error line), then the end
/// of stderr (at most [`STDERR_TAIL_BYTES`], from a line start) when it has
/// more than that one line.
fn with_stderr(how: &str, bytes: &[u8]) -> String {
    let tail = stderr_tail(bytes);
    let last = tail
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or_default();
    if last.is_empty() {
        return how.to_string();
    }
    if tail.trim() == last {
        format!("{how}: {last}")
    } else {
        format!("{how}: {last}\n{tail}")
    }
}

/// The last [`STDERR_TAIL_BYTES`] of `bytes` as text, from the first line
/// that starts inside them, trimmed.
fn stderr_tail(bytes: &[u8]) -> String {
    let start = bytes.len().saturating_sub(STDERR_TAIL_BYTES);
    let text = String::from_utf8_lossy(&bytes[start..]);
    let text = if start > 0 {
        // Drop the cut first line, unless it is the only one.
        match text.split_once('\n') {
            Some((_, rest)) if !rest.trim().is_empty() => rest,
            _ => &text,
        }
    } else {
        &text
    };
    text.trim().to_string()
}

// ---------------------------------------------------------------------------
// The supervisor's side.
// ---------------------------------------------------------------------------

/// The supervisor (`workjournal __supervise -- CMD`, started by
/// [`Supervisors::run`]; see the module docs): answer requests on the
/// socket that is its stdin, one at a time, each by a run of `sh -c CMD`
/// leading a process group of its own, until the socket closes. Exits 0
/// when it closes between requests, [`NOT_STARTED`] when it closes inside
/// one (that command is not started), 1 when it closes while a command
/// runs (after killing the command's group).
pub(crate) fn supervise(cmd: &str) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => return not_started(&e),
    };
    runtime.block_on(serve_requests(cmd))
}

async fn serve_requests(cmd: &str) -> ExitCode {
    use std::os::fd::AsFd;
    let channel = std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .map(std::os::unix::net::UnixStream::from)
        .and_then(|s| {
            s.set_nonblocking(true)?;
            UnixStream::from_std(s)
        });
    let mut channel = match channel {
        Ok(c) => c,
        Err(e) => return not_started(&e),
    };
    let mut sh = find_sh();
    loop {
        let request = match read_request(&mut channel).await {
            Ok(Some(r)) => r,
            // The worker is done with this slot.
            Ok(None) => return ExitCode::SUCCESS,
            // Cut short by a worker that died while writing it: the
            // command must not run on a part of it. Nobody reads this exit.
            Err(_) => return ExitCode::from(NOT_STARTED),
        };
        if sh.is_none() {
            sh = find_sh();
        }
        let Some(status) = run_request(cmd, &mut sh, request, &mut channel).await else {
            // The lifeline closed while the command ran; its group is dead.
            return ExitCode::FAILURE;
        };
        if channel.write_all(&status.encode()).await.is_err() {
            // The worker is gone; the command had already ended.
            return ExitCode::FAILURE;
        }
    }
}

/// `sh` as `execvp` would find it on this process's `PATH` (which does not
/// change while it runs): searched once rather than at every start, where
/// each directory before `sh`'s costs a failed `execve`.
fn find_sh() -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).find_map(|dir| {
        // An empty entry is the current directory, as for `execvp`.
        let dir = if dir.as_os_str().is_empty() {
            std::path::PathBuf::from(".")
        } else {
            dir
        };
        let candidate = dir.join("sh");
        let meta = std::fs::metadata(&candidate).ok()?;
        (meta.is_file() && meta.permissions().mode() & 0o111 != 0).then_some(candidate)
    })
}

/// Run `sh -c CMD` once for `request` (`sh` the one found on `PATH`, else
/// looked up by the spawn, and forgotten when it cannot be started), in a
/// new process group, watching the lifeline: `None` when it closed while
/// `sh` ran (the group was killed).
async fn run_request(
    cmd: &str,
    sh: &mut Option<std::path::PathBuf>,
    request: Request,
    channel: &mut UnixStream,
) -> Option<Status> {
    let program = sh.as_deref().unwrap_or(std::path::Path::new("sh"));
    let mut child = match Command::new(program)
        .arg0("sh")
        .arg("-c")
        .arg(cmd)
        .env("WORKJOURNAL_ID", request.id.to_string())
        .env("WORKJOURNAL_FLOW", OsStr::from_bytes(&request.flow))
        .env("WORKJOURNAL_DELIVERY", request.delivery.to_string())
        .stdin(Stdio::piped())
        .stdout(if request.keep_stdout {
            Stdio::piped()
        } else {
            Stdio::inherit()
        })
        .stderr(Stdio::piped())
        // The group everything the command starts is killed with.
        .process_group(0)
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            // Look for it again next time (it may have moved).
            *sh = None;
            return Some(Status::not_started(&e));
        }
    };
    let Some(pgid) = child.id() else {
        return Some(Status::not_started(&std::io::Error::other(
            "sh has no process id",
        )));
    };
    let payload = request.payload;
    let stdin = child.stdin.take();
    // A command that does not read its stdin closes the pipe early; that is
    // its business, not a failure.
    let feeder = tokio::spawn(async move {
        if let Some(mut stdin) = stdin {
            let _ = stdin.write_all(&payload).await;
        }
    });
    let mut stderr = child.stderr.take();
    let mut stdout = child.stdout.take();
    let mut tail: Vec<u8> = Vec::new();
    let mut kept = Kept::default();
    let mut buf = [0u8; 8192];
    let mut out_buf = [0u8; 8192];
    let mut lifeline = [0u8; 1];
    let keep = |tail: &mut Vec<u8>, chunk: &[u8]| {
        tail.extend_from_slice(chunk);
        if tail.len() > 2 * STDERR_TAIL_BYTES {
            tail.drain(..tail.len() - STDERR_TAIL_BYTES);
        }
    };
    let deadline = async {
        match request.timeout {
            Some(t) => tokio::time::sleep(t).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(deadline);
    let mut timed_out = false;
    let status = loop {
        tokio::select! {
            r = async { stderr.as_mut()?.read(&mut buf).await.ok() }, if stderr.is_some() => {
                match r {
                    Some(n) if n > 0 => keep(&mut tail, &buf[..n]),
                    _ => stderr = None,
                }
            }
            r = async { stdout.as_mut()?.read(&mut out_buf).await.ok() }, if stdout.is_some() => {
                match r {
                    Some(n) if n > 0 => kept.push(&out_buf[..n]),
                    _ => stdout = None,
                }
            }
            s = child.wait() => break s,
            // Nothing comes from the worker while a command runs but the
            // end of the socket: the worker is gone (or broke the protocol).
            _ = channel.read(&mut lifeline) => {
                // `sh` has not been reaped: its group id is still its own.
                kill_group(pgid);
                feeder.abort();
                return None;
            }
            () = &mut deadline, if !timed_out => {
                timed_out = true;
                kill_group(pgid);
            }
        }
    };
    // What the command wrote just before it exited, but not whatever a
    // background child keeps writing (or holding open).
    let until = tokio::time::Instant::now() + STDERR_DRAIN;
    tokio::join!(
        drain(stderr, until, |chunk| keep(&mut tail, chunk)),
        drain(stdout, until, |chunk| kept.push(chunk)),
    );
    // The command is over: a background child holding its stdin gets no
    // more of the payload.
    feeder.abort();
    let ended = match status {
        Err(e) => {
            return Some(Status {
                ended: Ended::Exited(1),
                stderr: format!("cannot wait for the command: {e}").into_bytes(),
                stdout: Vec::new(),
                stdout_over: false,
            });
        }
        Ok(_) if timed_out => Ended::TimedOut,
        Ok(s) => {
            use std::os::unix::process::ExitStatusExt;
            match (s.code(), s.signal()) {
                (Some(c), _) => Ended::Exited(c),
                (None, Some(sig)) => Ended::Signaled(sig),
                (None, None) => Ended::Exited(1),
            }
        }
    };
    Some(Status {
        ended,
        stderr: tail,
        stdout: kept.bytes,
        stdout_over: kept.over,
    })
}

fn not_started(e: &std::io::Error) -> ExitCode {
    let _ = writeln!(std::io::stderr(), "{CANNOT_START}: {e}");
    ExitCode::from(NOT_STARTED)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reason_leads_with_the_last_line_of_stderr() {
        let traceback =
            b"Traceback (most recent call last):\n  File \"x.py\", line 1\nValueError: bad\n\n";
        let r = with_stderr("command exited with code 1", traceback);
        assert_eq!(
            r.lines().next(),
            Some("command exited with code 1: ValueError: bad")
        );
        assert!(r.contains("Traceback"), "{r}");
        assert_eq!(with_stderr("x", b"one line\n"), "x: one line");
        assert_eq!(with_stderr("x", b"  \n"), "x");
        let long = format!("{}\nlast\n", "a".repeat(5000));
        let r = with_stderr("x", long.as_bytes());
        assert_eq!(r.lines().next(), Some("x: last"));
    }
}
