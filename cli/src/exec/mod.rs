//! Running the user's command for one item.
//!
//! `work` does not start `sh -c CMD` itself: each of its slots keeps one
//! long-lived supervisor ([`supervise`], the hidden `__supervise -- CMD`
//! subcommand of this very binary), which starts `sh -c CMD` once per item,
//! each run leading a process group of its own (SPEC section 9). The two
//! talk over one Unix socket, the supervisor's stdin: the worker sends a
//! request (the item's id, flow, delivery, `--timeout`, `--keep-stdout` and
//! payload) and the supervisor answers with a status record (how `sh`
//! ended, the end of its stderr, the kept stdout), each in length-delimited
//! frames ([`protocol`]).
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
//!
//! The parts: [`worker`] (the worker's side: [`Supervisors`]),
//! [`supervisor`] (the supervisor's side: [`supervise`]), [`protocol`]
//! (the frames between them), [`capture`] (the command's stderr tail and
//! kept stdout) and [`reason`] (what a status record means for the item,
//! and the failure text).

mod capture;
mod protocol;
mod reason;
mod supervisor;
mod worker;

use std::time::Duration;

pub(crate) use supervisor::supervise;
pub(crate) use worker::Supervisors;

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

/// How the reason of a command that could not be started begins.
const CANNOT_START: &str = "cannot start sh";

/// The hidden subcommand that runs the supervisor.
pub(crate) const SUPERVISE: &str = "__supervise";

/// Why a command failed: the text stored as the dead letter's reason. Its
/// first line is a summary (how the command ended and the last non-empty
/// line of its stderr); the lines after it, if any, are the end of stderr.
#[derive(Debug)]
pub(crate) struct Failure(pub(crate) String);

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The `retry-after:` line of a command that exited [`BACK_OFF_EXIT`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RetryAfter {
    /// No such line: `--backoff` applies.
    Missing,
    /// A duration (`30s`, `1m30s`) or whole seconds.
    Read(Duration),
    /// A value that is neither (`retry-after: soon`): `--backoff` applies,
    /// and `work` says so.
    Unreadable(String),
}

/// What `run` found.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// The command exited 0; with `keep_stdout`, what it wrote to stdout.
    Ok(Option<Vec<u8>>),
    /// The command failed.
    Failed(Failure),
    /// The command exited [`BACK_OFF_EXIT`]: back its flow off, for the
    /// time its stderr named, if it named one.
    BackOff(RetryAfter, Failure),
    /// The command could not be started (`sh` missing, too many open
    /// files, no memory): the worker's failure, not the item's, so it is
    /// not a delivery (SPEC 9, Worker).
    NotStarted(Failure),
    /// The command died of SIGPIPE while our stdout is a pipe or socket: the
    /// reader of our output is gone (`work ... | head`). Not the item's fault.
    StdoutClosed,
}
