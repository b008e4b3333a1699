//! What the supervisor keeps of a command's output: the end of its stderr
//! (for the failure reason) and, with `--keep-stdout`, its stdout (the
//! item's result), both read as they come so that the command never blocks
//! on a full pipe.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};

use super::{KEEP_STDOUT_CAP, STDERR_TAIL_BYTES};

/// How long stderr (and a kept stdout) is still read after the command
/// exited, for what it wrote just before: a background child that keeps
/// either open must not keep the slot (SPEC section 9).
pub(super) const STDERR_DRAIN: Duration = Duration::from_millis(100);

/// The end of a command's stderr: at most twice [`STDERR_TAIL_BYTES`],
/// cut back to the tail whenever it grows past that.
#[derive(Default)]
pub(super) struct StderrTail {
    /// The bytes kept.
    pub(super) bytes: Vec<u8>,
}

impl StderrTail {
    /// Keep `chunk`, the next bytes the command wrote to stderr.
    pub(super) fn push(&mut self, chunk: &[u8]) {
        self.bytes.extend_from_slice(chunk);
        if self.bytes.len() > 2 * STDERR_TAIL_BYTES {
            self.bytes.drain(..self.bytes.len() - STDERR_TAIL_BYTES);
        }
    }
}

/// A kept stdout: up to [`KEEP_STDOUT_CAP`] bytes. Past the cap it is read
/// on and discarded, so that the command never blocks on a full pipe.
#[derive(Default)]
pub(super) struct Kept {
    /// The bytes kept.
    pub(super) bytes: Vec<u8>,
    /// The command wrote more than the cap.
    pub(super) over: bool,
}

impl Kept {
    /// Keep `chunk`, the next bytes the command wrote to stdout, while they
    /// fit under the cap.
    pub(super) fn push(&mut self, chunk: &[u8]) {
        if self.bytes.len() + chunk.len() <= KEEP_STDOUT_CAP {
            self.bytes.extend_from_slice(chunk);
        } else {
            self.over = true;
        }
    }
}

/// Read `reader` (if any) into `sink` until it ends or `until` passes.
pub(super) async fn drain<R: AsyncRead + Unpin>(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_keeps_the_end_and_the_cap_stops_stdout() {
        let mut tail = StderrTail::default();
        tail.push(&vec![b'a'; 3 * STDERR_TAIL_BYTES]);
        tail.push(b"end");
        assert!(tail.bytes.len() <= 2 * STDERR_TAIL_BYTES);
        assert!(tail.bytes.ends_with(b"end"));
        let mut kept = Kept::default();
        kept.push(b"ok");
        kept.push(&vec![0; KEEP_STDOUT_CAP]);
        assert_eq!(kept.bytes, b"ok");
        assert!(kept.over);
    }
}
