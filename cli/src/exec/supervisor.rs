//! The supervisor's side (`workjournal __supervise -- CMD`): one request
//! at a time, each by a run of `sh -c CMD` leading a process group of its
//! own, killed with its group when the lifeline closes (see the module
//! docs of [`super`]).

use std::ffi::OsStr;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::process::{ExitCode, Stdio};

use rustix::process::{Pid, Signal};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::process::Command;

use super::capture::{Kept, STDERR_DRAIN, StderrTail, drain};
use super::protocol::{Ended, Request, Status, SupervisorEnd, WhileRunning};
use super::{CANNOT_START, NOT_STARTED};

/// Kill the process group `pgid` with SIGKILL (already gone is fine).
fn kill_group(pgid: u32) {
    signal_group(pgid, Signal::KILL);
}

/// Send `signal` to the process group `pgid` (already gone is fine).
fn signal_group(pgid: u32, signal: Signal) {
    if let Some(pid) = i32::try_from(pgid).ok().and_then(Pid::from_raw) {
        let _ = rustix::process::kill_process_group(pid, signal);
    }
}

/// The supervisor (`workjournal __supervise -- CMD`, started by
/// [`Supervisors::run`](super::Supervisors::run); see the module docs): answer requests on the
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

/// The supervisor's loop on the runtime [`supervise`] built: its stdin as
/// the socket, then requests until it closes.
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
        Ok(c) => SupervisorEnd::new(c),
        Err(e) => return not_started(&e),
    };
    let mut sh = find_sh();
    loop {
        let request = match channel.read_request().await {
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
        if channel.write_status(&status).await.is_err() {
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
    channel: &mut SupervisorEnd,
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
    let mut tail = StderrTail::default();
    let mut kept = Kept::default();
    let mut buf = [0u8; 8192];
    let mut out_buf = [0u8; 8192];
    let deadline = async {
        match request.timeout {
            Some(t) => tokio::time::sleep(t).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(deadline);
    let mut timed_out = false;
    // After a stop (the item was cancelled): when SIGKILL follows SIGTERM.
    let mut kill_at: Option<tokio::time::Instant> = None;
    let mut killed = false;
    let status = loop {
        tokio::select! {
            r = async { stderr.as_mut()?.read(&mut buf).await.ok() }, if stderr.is_some() => {
                match r {
                    Some(n) if n > 0 => tail.push(&buf[..n]),
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
            said = channel.while_running() => match said {
                WhileRunning::Stop(grace) => {
                    // The item was cancelled (SPEC 3, Cancelling): ask the
                    // group to stop, and watch the lifeline on.
                    if kill_at.is_none() {
                        signal_group(pgid, Signal::TERM);
                        kill_at = Some(tokio::time::Instant::now() + grace);
                    }
                }
                WhileRunning::Ended => {
                    // `sh` has not been reaped: its group id is still its own.
                    kill_group(pgid);
                    feeder.abort();
                    return None;
                }
            },
            () = async {
                match kill_at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            }, if !killed => {
                killed = true;
                kill_group(pgid);
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
        drain(stderr, until, |chunk| tail.push(chunk)),
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
        stderr: tail.bytes,
        stdout: kept.bytes,
        stdout_over: kept.over,
    })
}

/// Say on stderr that the supervisor could not start for `e`, and exit
/// [`NOT_STARTED`].
fn not_started(e: &std::io::Error) -> ExitCode {
    let _ = writeln!(std::io::stderr(), "{CANNOT_START}: {e}");
    ExitCode::from(NOT_STARTED)
}
