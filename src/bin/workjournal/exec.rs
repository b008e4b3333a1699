//! Running the user's command for one item.

use std::process::Stdio;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;
use workjournal::Claimed;

/// How much of the command's stderr is kept for the failure reason, in bytes.
pub(crate) const STDERR_TAIL_BYTES: usize = 2048;

/// Why a command failed: the text stored as the dead letter's reason.
#[derive(Debug)]
pub(crate) struct Failure(pub(crate) String);

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Run `sh -c CMD` with the payload on stdin and the item's id, flow and
/// delivery in the environment. Its stdout is ours; its stderr is kept
/// (the last 2 KiB) for the failure reason. The child is killed if this
/// future is dropped (shutdown past the grace period).
pub(crate) async fn run(cmd: &str, claimed: &Claimed) -> Result<(), Failure> {
    let item = &claimed.item;
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .env("WORKJOURNAL_ID", item.id.to_string())
        .env("WORKJOURNAL_FLOW", &item.flow)
        .env("WORKJOURNAL_DELIVERY", claimed.receipt.delivery.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::inherit())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| Failure(format!("cannot start sh: {e}")))?;

    let stdin = child.stdin.take();
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
    let ((), tail, status) = tokio::join!(write, read, child.wait());
    let status = status.map_err(|e| Failure(format!("cannot wait for the command: {e}")))?;
    if status.success() {
        return Ok(());
    }
    let how = match status.code() {
        Some(c) => format!("command exited with code {c}"),
        None => {
            use std::os::unix::process::ExitStatusExt;
            match status.signal() {
                Some(s) => format!("command killed by signal {s}"),
                None => "command failed".to_string(),
            }
        }
    };
    let tail = stderr_tail(&tail);
    Err(Failure(if tail.is_empty() {
        how
    } else {
        format!("{how}: {tail}")
    }))
}

/// The last [`STDERR_TAIL_BYTES`] of `bytes` as text, trimmed.
fn stderr_tail(bytes: &[u8]) -> String {
    let start = bytes.len().saturating_sub(STDERR_TAIL_BYTES);
    let text = String::from_utf8_lossy(&bytes[start..]);
    text.trim().to_string()
}
