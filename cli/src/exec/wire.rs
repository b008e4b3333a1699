//! The wire format between `work` and its command supervisor (SPEC section
//! 9): one Unix socket, the supervisor's stdin, little-endian throughout.
//!
//! Worker to supervisor, each message led by its kind (u8) and a ticket
//! (u64) the worker picks, unique within the run:
//! - run (0): then the item's id (u64), delivery (u32), timeout in ns (u64,
//!   0 for none), flags (u8, bit 0: keep stdout), the flow's length (u32)
//!   and the payload's (u64); then the flow's bytes, then the payload's;
//! - cancel (1): kill that ticket's command with its group, or drop it if
//!   it has not started;
//! - stop (2, ticket 0): withdraw every request that has not started, and
//!   every later one.
//!
//! Supervisor to worker, a status per run request: the ticket (u64), how
//! `sh` ended (u8: 0 exited, 1 killed by a signal, 2 not started, 3 timed
//! out and killed, 4 withdrawn unstarted), the exit code or signal number
//! (i32; for "withdrawn", 75 when its flow backed off, else 0), whether stdout went past the cap (u8), the stderr length (u32),
//! the kept stdout's length (u32); then those bytes. For "not started" and
//! "withdrawn" the stderr bytes are the reason; for "withdrawn" with 75
//! they are the end of the stderr of the command that backed off.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};
use workjournal::Claimed;

use super::{KEEP_STDOUT_CAP, STDERR_TAIL_BYTES};

/// Message kinds, worker to supervisor.
pub(super) const RUN: u8 = 0;
pub(super) const CANCEL: u8 = 1;
pub(super) const STOP: u8 = 2;

/// A run request's head after its kind and ticket.
const RUN_HEAD: usize = 8 + 4 + 8 + 1 + 4 + 8;
/// A status record's head.
const STATUS_HEAD: usize = 8 + 1 + 4 + 1 + 4 + 4;
const KEEP_STDOUT_FLAG: u8 = 1;
/// The most stderr a status record carries: the supervisor keeps at most
/// twice the tail.
const STATUS_STDERR_MAX: usize = 4 * STDERR_TAIL_BYTES;
/// A length up to this is read into a buffer sized at once; a longer one
/// grows as its bytes arrive (a length is not trusted for an allocation).
const PREALLOCATE_BYTES: usize = 64 * 1024;

/// One run of the command, as the supervisor reads it.
#[derive(Debug)]
pub(super) struct Request {
    pub(super) id: u64,
    pub(super) delivery: u32,
    pub(super) timeout: Option<Duration>,
    pub(super) keep_stdout: bool,
    pub(super) flow: Vec<u8>,
    pub(super) payload: Vec<u8>,
}

/// A message from the worker.
#[derive(Debug)]
pub(super) enum Message {
    Run(u64, Request),
    Cancel(u64),
    Stop,
}

/// A whole run request for `claimed` under `ticket`: kind, ticket, head,
/// flow and payload in one buffer, so that it goes out in one write.
pub(super) fn encode_run(
    ticket: u64,
    claimed: &Claimed,
    timeout: Option<Duration>,
    keep_stdout: bool,
) -> Vec<u8> {
    let item = &claimed.item;
    let timeout_ns = timeout.map_or(0, |t| {
        u64::try_from(t.as_nanos()).unwrap_or(u64::MAX).max(1)
    });
    let flow = item.flow.as_bytes();
    let mut out = Vec::with_capacity(1 + 8 + RUN_HEAD + flow.len() + item.payload.len());
    out.push(RUN);
    out.extend_from_slice(&ticket.to_le_bytes());
    out.extend_from_slice(&item.id.to_le_bytes());
    out.extend_from_slice(&claimed.receipt.delivery.to_le_bytes());
    out.extend_from_slice(&timeout_ns.to_le_bytes());
    out.push(if keep_stdout { KEEP_STDOUT_FLAG } else { 0 });
    out.extend_from_slice(&u32::try_from(flow.len()).unwrap_or(u32::MAX).to_le_bytes());
    out.extend_from_slice(&(item.payload.len() as u64).to_le_bytes());
    out.extend_from_slice(flow);
    out.extend_from_slice(&item.payload);
    out
}

/// A cancel or stop message.
pub(super) fn encode_control(kind: u8, ticket: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(9);
    out.push(kind);
    out.extend_from_slice(&ticket.to_le_bytes());
    out
}

/// A little-endian number from `bytes` at `at` (the caller sized `bytes`).
fn le<const N: usize>(bytes: &[u8], at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    if let Some(src) = bytes.get(at..at + N) {
        out.copy_from_slice(src);
    }
    out
}

/// Read exactly `len` bytes, growing the buffer only as they arrive.
async fn read_len<R: AsyncRead + Unpin>(r: &mut R, len: u64) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(
        usize::try_from(len)
            .unwrap_or(usize::MAX)
            .min(PREALLOCATE_BYTES),
    );
    r.take(len).read_to_end(&mut out).await?;
    if out.len() as u64 != len {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok(out)
}

fn malformed(what: &str) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("malformed {what} on the command supervisor's socket"),
    )
}

/// The next message; `None` when the socket closed between messages, an
/// error when it closed inside one or the message is malformed.
pub(super) async fn read_message<R: AsyncRead + Unpin>(
    r: &mut R,
) -> std::io::Result<Option<Message>> {
    let mut kind = [0u8; 1];
    if r.read(&mut kind).await? == 0 {
        return Ok(None);
    }
    let mut ticket = [0u8; 8];
    r.read_exact(&mut ticket).await?;
    let ticket = u64::from_le_bytes(ticket);
    match kind[0] {
        RUN => {}
        CANCEL => return Ok(Some(Message::Cancel(ticket))),
        STOP => return Ok(Some(Message::Stop)),
        _ => return Err(malformed("message")),
    }
    let mut head = [0u8; RUN_HEAD];
    r.read_exact(&mut head).await?;
    let id = u64::from_le_bytes(le(&head, 0));
    let delivery = u32::from_le_bytes(le(&head, 8));
    let timeout_ns = u64::from_le_bytes(le(&head, 12));
    let flags = head[20];
    let flow_len = u32::from_le_bytes(le(&head, 21));
    let payload_len = u64::from_le_bytes(le(&head, 25));
    let flow = read_len(r, u64::from(flow_len)).await?;
    let payload = read_len(r, payload_len).await?;
    Ok(Some(Message::Run(
        ticket,
        Request {
            id,
            delivery,
            timeout: (timeout_ns > 0).then(|| Duration::from_nanos(timeout_ns)),
            keep_stdout: flags & KEEP_STDOUT_FLAG != 0,
            flow,
            payload,
        },
    )))
}

/// How `sh` ended, as the supervisor saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ended {
    Exited(i32),
    Signaled(i32),
    NotStarted,
    TimedOut,
    /// Never started: withdrawn while it waited for a slot, because the
    /// run was stopped or the request cancelled (0), or because a command
    /// of its flow exited [`super::BACK_OFF_EXIT`] (75; the stderr is that
    /// command's).
    Withdrawn(i32),
}

/// A status record: how the command ended, the end of its stderr and its
/// kept stdout.
#[derive(Debug)]
pub(super) struct Status {
    pub(super) ended: Ended,
    pub(super) stderr: Vec<u8>,
    pub(super) stdout: Vec<u8>,
    pub(super) stdout_over: bool,
}

impl Status {
    /// A status without output whose reason is `reason`.
    pub(super) fn reason(ended: Ended, reason: &str) -> Self {
        Status {
            ended,
            stderr: reason.as_bytes().to_vec(),
            stdout: Vec::new(),
            stdout_over: false,
        }
    }

    pub(super) fn encode(&self, ticket: u64) -> Vec<u8> {
        let (kind, value) = match self.ended {
            Ended::Exited(c) => (0u8, c),
            Ended::Signaled(s) => (1, s),
            Ended::NotStarted => (2, 0),
            Ended::TimedOut => (3, 0),
            Ended::Withdrawn(c) => (4, c),
        };
        // Both are bounded by the supervisor (the tail, the cap).
        let stderr = &self.stderr[self.stderr.len().saturating_sub(STATUS_STDERR_MAX)..];
        let stdout = &self.stdout[..self.stdout.len().min(KEEP_STDOUT_CAP)];
        let mut out = Vec::with_capacity(STATUS_HEAD + stderr.len() + stdout.len());
        out.extend_from_slice(&ticket.to_le_bytes());
        out.push(kind);
        out.extend_from_slice(&value.to_le_bytes());
        out.push(u8::from(self.stdout_over));
        out.extend_from_slice(&(stderr.len() as u32).to_le_bytes());
        out.extend_from_slice(&(stdout.len() as u32).to_le_bytes());
        out.extend_from_slice(stderr);
        out.extend_from_slice(stdout);
        out
    }

    /// The next status record and its ticket.
    pub(super) async fn read<R: AsyncRead + Unpin>(r: &mut R) -> std::io::Result<(u64, Self)> {
        let mut head = [0u8; STATUS_HEAD];
        r.read_exact(&mut head).await?;
        let ticket = u64::from_le_bytes(le(&head, 0));
        let value = i32::from_le_bytes(le(&head, 9));
        let ended = match head[8] {
            0 => Ended::Exited(value),
            1 => Ended::Signaled(value),
            2 => Ended::NotStarted,
            3 => Ended::TimedOut,
            4 => Ended::Withdrawn(value),
            _ => return Err(malformed("status record")),
        };
        let stderr_len = u32::from_le_bytes(le(&head, 14)) as usize;
        let stdout_len = u32::from_le_bytes(le(&head, 18)) as usize;
        if stderr_len > STATUS_STDERR_MAX || stdout_len > KEEP_STDOUT_CAP {
            return Err(malformed("status record"));
        }
        let stderr = read_len(r, stderr_len as u64).await?;
        let stdout = read_len(r, stdout_len as u64).await?;
        Ok((
            ticket,
            Status {
                ended,
                stderr,
                stdout,
                stdout_over: head[13] != 0,
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_status_reads_back_as_it_was_written() {
        let status = Status {
            ended: Ended::Exited(3),
            stderr: b"oops".to_vec(),
            stdout: b"out".to_vec(),
            stdout_over: true,
        };
        let bytes = status.encode(42);
        let (ticket, back) = Status::read(&mut &bytes[..]).await.unwrap();
        assert_eq!(ticket, 42);
        assert_eq!(back.ended, Ended::Exited(3));
        assert_eq!(
            (&back.stderr[..], &back.stdout[..]),
            (&b"oops"[..], &b"out"[..])
        );
        assert!(back.stdout_over);
        // A kind past the last is refused, not guessed.
        let mut bad = Status::reason(Ended::Withdrawn(0), "x").encode(1);
        bad[8] = 9;
        assert!(Status::read(&mut &bad[..]).await.is_err());
    }

    #[tokio::test]
    async fn control_messages_and_cut_requests() {
        let cancel = encode_control(CANCEL, 7);
        assert!(matches!(
            read_message(&mut &cancel[..]).await,
            Ok(Some(Message::Cancel(7)))
        ));
        let stop = encode_control(STOP, 0);
        assert!(matches!(
            read_message(&mut &stop[..]).await,
            Ok(Some(Message::Stop))
        ));
        assert!(matches!(read_message(&mut &[][..]).await, Ok(None)));
        // An unknown kind, and a message cut inside its ticket.
        assert!(read_message(&mut &encode_control(9, 1)[..]).await.is_err());
        assert!(read_message(&mut &cancel[..4]).await.is_err());
    }
}
