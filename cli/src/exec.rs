//! Running the user's command for one item.
//!
//! `work` does not start `sh -c CMD` itself: it starts its own binary as a
//! thin supervisor ([`supervise`], the hidden `__supervise` subcommand),
//! which leads the command's process group and runs `sh -c CMD` in it
//! (SPEC section 9):
//!
//! - the supervisor reads the whole payload from its stdin before `sh`
//!   starts and hands it on from memory, so a command never reads a payload
//!   cut short by a worker that died while writing it;
//! - after the payload, the worker keeps the supervisor's stdin open while
//!   the command runs: that pipe is the lifeline. When it closes without the
//!   worker having reaped the command (the worker was killed by any signal,
//!   SIGKILL too, or crashed), the supervisor kills the whole group, so no
//!   command outlives its worker and runs a second time beside the rerun.

use std::io::{Read, Write};
use std::process::{ExitCode, Stdio};
use std::time::Duration;

use rustix::process::{Pid, Signal};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;
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

/// The supervisor's exit code when it could not start `sh`.
pub(crate) const NOT_STARTED: u8 = 125;

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

/// Kills the command's whole process group when dropped while armed: `work`
/// cancelled the command (shutdown past the grace period, a second Ctrl-C,
/// a closed stdout). `kill_on_drop` alone kills only the supervisor, and
/// what `sh` started would run on, reparented to init.
struct GroupKill(Option<u32>);

impl Drop for GroupKill {
    fn drop(&mut self) {
        if let Some(pgid) = self.0 {
            kill_group(pgid);
        }
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

/// Run `sh -c CMD` under the supervisor, with the payload on stdin and the
/// item's id, flow and delivery in the environment. Its stdout is ours, or
/// with `keep_stdout` captured (up to [`KEEP_STDOUT_CAP`]) as the result;
/// its stderr is kept (the last 2 KiB) for the failure reason and otherwise
/// discarded. A command still running after `timeout` is killed with its
/// group and fails. The command is killed if this future is dropped
/// (shutdown past the grace period).
pub(crate) async fn run(
    cmd: &str,
    claimed: &Claimed,
    timeout: Option<Duration>,
    keep_stdout: bool,
) -> Outcome {
    match run_inner(cmd, claimed, timeout, keep_stdout).await {
        Ok(out) => Outcome::Ok(out),
        Err((failure, None)) if failure.0.starts_with(CANNOT_START) => Outcome::NotStarted(failure),
        Err((failure, signal)) => {
            if signal == Some(SIGPIPE) && stdout_is_pipe() {
                Outcome::StdoutClosed
            } else {
                Outcome::Failed(failure)
            }
        }
    }
}

/// `run`, with the signal that killed the command (a shell reports a child
/// killed by signal N as exit code 128 + N).
async fn run_inner(
    cmd: &str,
    claimed: &Claimed,
    timeout: Option<Duration>,
    keep_stdout: bool,
) -> Result<Option<Vec<u8>>, (Failure, Option<i32>)> {
    let item = &claimed.item;
    let payload = &item.payload;
    let mut child = Command::new(supervisor_program())
        .arg(SUPERVISE)
        .arg(payload.len().to_string())
        .arg("--")
        .arg(cmd)
        .env("WORKJOURNAL_ID", item.id.to_string())
        .env("WORKJOURNAL_FLOW", &item.flow)
        .env("WORKJOURNAL_DELIVERY", claimed.receipt.delivery.to_string())
        .stdin(Stdio::piped())
        .stdout(if keep_stdout {
            Stdio::piped()
        } else {
            Stdio::inherit()
        })
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        // Its own process group, led by the supervisor, so that everything
        // the command started can be killed with it (and a Ctrl-C on the
        // terminal reaches only the worker, which lets running commands
        // finish).
        .process_group(0)
        .spawn()
        .map_err(|e| (Failure(format!("{CANNOT_START}: {e}")), None))?;
    let mut group = GroupKill(child.id());

    // Held until the command has been reaped: the supervisor's lifeline.
    let mut stdin = child.stdin.take();
    let stderr = child.stderr.take();
    let stdout = child.stdout.take();
    let write = async {
        if let Some(stdin) = stdin.as_mut() {
            // A supervisor that died early closes the pipe; its exit status
            // tells why.
            let _ = stdin.write_all(payload).await;
            let _ = stdin.flush().await;
        }
    };
    let wait = async {
        let mut tail: Vec<u8> = Vec::new();
        let mut kept = Kept::default();
        let mut stderr = stderr;
        let mut stdout = stdout;
        let mut buf = [0u8; 8192];
        let mut out_buf = [0u8; 8192];
        let keep = |tail: &mut Vec<u8>, chunk: &[u8]| {
            tail.extend_from_slice(chunk);
            if tail.len() > 2 * STDERR_TAIL_BYTES {
                tail.drain(..tail.len() - STDERR_TAIL_BYTES);
            }
        };
        let deadline = async {
            match timeout {
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
                () = &mut deadline, if !timed_out => {
                    // The supervisor has not been reaped: its group id is
                    // still ours to kill.
                    timed_out = true;
                    if let Some(pgid) = group.0 {
                        kill_group(pgid);
                    }
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
        (status, tail, kept, timed_out)
    };
    let ((), (status, tail, kept, timed_out)) = tokio::join!(write, wait);
    drop(stdin);
    // The supervisor has been reaped: its group id may be reused from here
    // on, so the guard must not fire. (What the command left running in the
    // background is its own business once it exited.)
    group.0 = None;
    let status =
        status.map_err(|e| (Failure(format!("cannot wait for the command: {e}")), None))?;
    if timed_out {
        let limit = timeout.map(humantime::format_duration);
        let limit = limit.map(|d| d.to_string()).unwrap_or_default();
        return Err((
            Failure(with_stderr(
                &format!("command timed out after {limit} and was killed"),
                &tail,
            )),
            None,
        ));
    }
    if status.success() {
        if kept.over {
            return Err((
                Failure(format!(
                    "command wrote more than the {KEEP_STDOUT_CAP} bytes --keep-stdout keeps"
                )),
                None,
            ));
        }
        return Ok(keep_stdout.then_some(kept.bytes));
    }
    if status.code() == Some(i32::from(NOT_STARTED)) {
        // The supervisor's own word that `sh` never ran (a command of the
        // user's that exits 125 does not also print this as its last line).
        let text = String::from_utf8_lossy(&tail);
        if let Some(line) = text.lines().rev().find(|l| !l.trim().is_empty())
            && line.starts_with(CANNOT_START)
        {
            return Err((Failure(line.to_string()), None));
        }
    }
    let (how, signal) = match status.code() {
        Some(c) => (format!("command exited with code {c}"), c.checked_sub(128)),
        None => {
            use std::os::unix::process::ExitStatusExt;
            match status.signal() {
                Some(s) => (format!("command killed by signal {s}"), Some(s)),
                None => ("command failed".to_string(), None),
            }
        }
    };
    Err((Failure(with_stderr(&how, &tail)), signal))
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

/// The supervisor (`workjournal __supervise BYTES -- CMD`, started by
/// [`run`]; see the module docs): read exactly `payload_bytes` from stdin,
/// run `sh -c CMD` in this process group with that payload on its stdin,
/// kill the group when stdin closes while `sh` runs, and exit as `sh` did.
pub(crate) fn supervise(payload_bytes: u64, cmd: &str) -> ExitCode {
    let me = rustix::process::getpid();
    // Only a group leader may kill its group: run by hand from a shell, the
    // group is the shell's.
    let leader = rustix::process::getpgrp() == me;
    let mut payload = Vec::new();
    let read = std::io::stdin()
        .lock()
        .take(payload_bytes)
        .read_to_end(&mut payload);
    if read.is_err() || payload.len() as u64 != payload_bytes {
        // The worker went away while writing it: the command must not run on
        // a part of it. Nobody reads this exit.
        return ExitCode::from(NOT_STARTED);
    }
    let (reader, mut writer) = match std::io::pipe() {
        Ok(p) => p,
        Err(e) => return not_started(&e),
    };
    let mut child = match std::process::Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .stdin(reader)
        .spawn()
    {
        Ok(c) => c,
        Err(e) => return not_started(&e),
    };
    std::thread::spawn(move || {
        // A command that does not read its stdin closes the pipe early;
        // that is its business, not a failure.
        let _ = writer.write_all(&payload);
    });
    std::thread::spawn(move || {
        let mut buf = [0u8; 64];
        loop {
            match std::io::stdin().lock().read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
        // The lifeline closed: the worker is gone.
        if leader {
            let _ = rustix::process::kill_process_group(me, Signal::KILL);
        }
    });
    let status = match child.wait() {
        Ok(s) => s,
        Err(e) => return not_started(&e),
    };
    use std::os::unix::process::ExitStatusExt;
    if let Some(code) = status.code() {
        return ExitCode::from(u8::try_from(code).unwrap_or(1));
    }
    if let Some(sig) = status.signal() {
        // End the same way, so that the worker sees the signal; one this
        // process ignores (SIGPIPE) becomes 128 + N, as a shell reports it.
        if let Some(s) = Signal::from_named_raw(sig) {
            let _ = rustix::process::kill_process(me, s);
        }
        return ExitCode::from(u8::try_from(128 + sig).unwrap_or(1));
    }
    ExitCode::FAILURE
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
