//! Running the user's command for one item.

use std::process::Stdio;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;
use workjournal::Claimed;

/// How much of the command's stderr is kept for the failure reason, in bytes.
pub(crate) const STDERR_TAIL_BYTES: usize = 2048;

/// The most stdout `work --keep-stdout` keeps as an item's result, in
/// bytes (1 MiB); a command that writes more fails the attempt.
pub(crate) const KEEP_STDOUT_CAP: usize = 1024 * 1024;

/// Why a command failed: the text stored as the dead letter's reason.
#[derive(Debug)]
pub(crate) struct Failure(pub(crate) String);

/// What `run` found.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// The command exited 0; with `keep_stdout`, what it wrote to stdout.
    Ok(Option<Vec<u8>>),
    /// The command failed.
    Failed(Failure),
    /// The command died of SIGPIPE while our stdout is a pipe or socket: the
    /// reader of our output is gone (`work ... | head`). Not the item's fault.
    StdoutClosed,
}

/// Kills the command's whole process group when dropped while armed: `work`
/// cancelled the command (shutdown past the grace period, a second Ctrl-C,
/// a closed stdout). `kill_on_drop` alone kills only `sh`, and what `sh`
/// started would run on, reparented to init.
struct GroupKill(Option<u32>);

impl Drop for GroupKill {
    fn drop(&mut self) {
        if let Some(pgid) = self.0 {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", "--", &format!("-{pgid}")])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
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

/// Run `sh -c CMD` with the payload on stdin and the item's id, flow and
/// delivery in the environment. Its stdout is ours, or with `keep_stdout`
/// captured (up to [`KEEP_STDOUT_CAP`]) as the result; its stderr is kept
/// (the last 2 KiB) for the failure reason. The child is killed if this
/// future is dropped (shutdown past the grace period).
pub(crate) async fn run(cmd: &str, claimed: &Claimed, keep_stdout: bool) -> Outcome {
    match run_inner(cmd, claimed, keep_stdout).await {
        Ok(out) => Outcome::Ok(out),
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
    keep_stdout: bool,
) -> Result<Option<Vec<u8>>, (Failure, Option<i32>)> {
    let item = &claimed.item;
    let mut child = Command::new("sh")
        .arg("-c")
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
        // Its own process group, so that everything it started can be killed
        // with it (and a Ctrl-C on the terminal reaches only the worker,
        // which lets running commands finish).
        .process_group(0)
        .spawn()
        .map_err(|e| (Failure(format!("cannot start sh: {e}")), None))?;
    let mut group = GroupKill(child.id());

    let stdin = child.stdin.take();
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let payload = &item.payload;
    let write = async move {
        if let Some(mut stdin) = stdin {
            // A command that does not read its stdin closes the pipe early;
            // that is its business, not a failure.
            let _ = stdin.write_all(payload).await;
            let _ = stdin.shutdown().await;
        }
    };
    let read = async move {
        let mut tail: Vec<u8> = Vec::new();
        if let Some(mut stderr) = stderr {
            let mut buf = [0u8; 8192];
            loop {
                match stderr.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        tail.extend_from_slice(&buf[..n]);
                        if tail.len() > 2 * STDERR_TAIL_BYTES {
                            tail.drain(..tail.len() - STDERR_TAIL_BYTES);
                        }
                    }
                }
            }
        }
        tail
    };
    // Keep up to the cap; read on past it (discarding) so that the command
    // is never blocked on a full pipe.
    let keep = async move {
        let mut kept: Vec<u8> = Vec::new();
        let mut over = false;
        if let Some(mut stdout) = stdout {
            let mut buf = [0u8; 8192];
            loop {
                match stdout.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) if kept.len() + n <= KEEP_STDOUT_CAP => {
                        kept.extend_from_slice(&buf[..n]);
                    }
                    Ok(_) => over = true,
                }
            }
        }
        (kept, over)
    };
    let ((), tail, (kept, over), status) = tokio::join!(write, read, keep, child.wait());
    // `sh` has been reaped: its group id may be reused from here on, so the
    // guard must not fire. (What it left running in the background is its
    // own business once it exited.)
    group.0 = None;
    let status =
        status.map_err(|e| (Failure(format!("cannot wait for the command: {e}")), None))?;
    if status.success() {
        if over {
            return Err((
                Failure(format!(
                    "command wrote more than the {KEEP_STDOUT_CAP} bytes --keep-stdout keeps"
                )),
                None,
            ));
        }
        return Ok(keep_stdout.then_some(kept));
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
    let tail = stderr_tail(&tail);
    Err((
        Failure(if tail.is_empty() {
            how
        } else {
            format!("{how}: {tail}")
        }),
        signal,
    ))
}

/// The last [`STDERR_TAIL_BYTES`] of `bytes` as text, trimmed.
fn stderr_tail(bytes: &[u8]) -> String {
    let start = bytes.len().saturating_sub(STDERR_TAIL_BYTES);
    let text = String::from_utf8_lossy(&bytes[start..]);
    text.trim().to_string()
}
