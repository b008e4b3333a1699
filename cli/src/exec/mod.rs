//! Running the user's command for each item.
//!
//! `work` does not start `sh -c CMD` itself: each run keeps one long-lived
//! command supervisor ([`supervise`], the hidden `__supervise --slots N --
//! CMD` subcommand of this very binary), which starts `sh -c CMD` once per
//! item, up to `--concurrency` at once, each leading a process group of its
//! own (SPEC section 9). The worker sends run requests as items come
//! ([`Supervisor::start`]), more than there are slots; the supervisor
//! queues the rest in order and starts the next the moment a command ends,
//! so no command waits for a round trip to the worker (`link`, the
//! worker's side; `wire`, the format).
//!
//! - the supervisor reads a whole request before it queues it and hands the
//!   payload on from memory, so a command never reads a payload cut short
//!   by a worker that died while writing it;
//! - the socket is the lifeline. When it closes (the worker was killed by
//!   any signal, SIGKILL too, crashed, or dropped the run: a shutdown past
//!   the grace period, a second Ctrl-C, a closed stdout), the supervisor
//!   kills every running command's whole group with SIGKILL, starts
//!   nothing queued, and exits, so no command outlives its worker and runs
//!   a second time beside the rerun;
//! - a dropped run (`link::Run`) cancels its command alone; at the first Ctrl-C
//!   [`Supervisor::stop`] withdraws the requests not yet started (their
//!   items are given back); a command that exits 75 withdraws its flow's.
//!
//! One supervisor per run rather than one per item halves the programs
//! started per item (`sh` alone, as `xargs` starts its command), which is
//! most of what the worker path spends besides the queue's commits.

mod link;
mod supervise;
mod wire;

use std::time::Duration;

use rustix::process::{Pid, Signal};

pub(crate) use link::Supervisor;
pub(crate) use supervise::supervise;
use wire::{Ended, Status};

/// How much of the command's stderr is kept for the failure reason, in bytes.
pub(crate) const STDERR_TAIL_BYTES: usize = 2048;

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

/// The reason of an item given back unstarted because its flow backed off
/// while it waited (the worker's own reason for a prefetched one).
pub(crate) const BACKED_OFF: &str = "flow backed off";

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
    /// Never started: withdrawn while it waited for a slot (the run was
    /// stopped), with the reason. The item goes back unstarted.
    GivenBack(String),
    /// Never started: withdrawn while it waited for a slot because another
    /// command of its flow exited [`BACK_OFF_EXIT`], naming this back-off
    /// (if it named one). The flow is to be held, then the item given back.
    FlowBackedOff(Option<Duration>),
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

/// What a status record means for the item.
fn outcome(status: Status, timeout: Option<Duration>, keep_stdout: bool) -> Outcome {
    let tail = &status.stderr;
    let (how, signal) = match status.ended {
        Ended::NotStarted => {
            return Outcome::NotStarted(Failure(String::from_utf8_lossy(tail).into_owned()));
        }
        Ended::Withdrawn(c) if c == i32::from(BACK_OFF_EXIT) => {
            // Another item's command backed the flow off while this one
            // waited: the back-off it named holds this one too.
            let named = retry_after(&String::from_utf8_lossy(tail));
            return Outcome::FlowBackedOff(named);
        }
        Ended::Withdrawn(_) => {
            return Outcome::GivenBack(String::from_utf8_lossy(tail).into_owned());
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
