//! The wire format between the worker and a supervisor (SPEC section 9):
//! length-delimited frames (`tokio-util`'s [`LengthDelimitedCodec`], a
//! little-endian `u32` length before each frame), one direction each way
//! of the socket.
//!
//! Request, worker to supervisor: a head frame, little-endian: item id
//! (u64), delivery (u32), timeout in ns (u64, 0 for none), flags (u8, bit
//! 0: keep stdout), payload length (u64), then the flow's bytes to the end
//! of the frame; then the payload in frames of at most [`PAYLOAD_CHUNK`]
//! bytes (none for an empty payload). The supervisor takes the request
//! only once every byte of the payload has come, and grows its buffer as
//! the frames arrive (a length is not trusted for an allocation: no frame
//! it reads is larger than [`REQUEST_FRAME_MAX`]).
//!
//! Stop, worker to supervisor, only while a command runs (its item was
//! cancelled, SPEC 3, Cancelling): one frame of [`STOP_FRAME`] bytes, the
//! tag `S` then the kill grace in ms (u64); shorter than any request's
//! head, so never taken for one. The supervisor sends the command's group
//! SIGTERM, and SIGKILL once the grace has passed.
//!
//! Status, supervisor to worker: one frame, little-endian: how `sh` ended
//! (u8: 0 exited, 1 killed by a signal, 2 not started, 3 timed out and
//! killed), the exit code or signal number (i32), whether stdout went past
//! the cap (u8), the stderr length (u32), the stderr bytes, then the kept
//! stdout to the end of the frame. For "not started" the stderr bytes are
//! the reason.

use std::io;
use std::time::Duration;

use bytes::{Buf, BufMut, BytesMut};
use futures_util::{SinkExt, StreamExt};
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio_util::codec::{FramedRead, FramedWrite, LengthDelimitedCodec};
use workjournal::Claimed;

use super::{CANNOT_START, KEEP_STDOUT_CAP, STDERR_TAIL_BYTES};

/// The fixed part of a request's head frame: id, delivery, timeout, flags,
/// payload length.
const REQUEST_HEAD: usize = 8 + 4 + 8 + 1 + 8;
/// The fixed part of a status frame: how, code, over, stderr length.
const STATUS_HEAD: usize = 1 + 4 + 1 + 4;
/// The length of a stop frame: the tag and the grace in ms.
const STOP_FRAME: usize = 1 + 8;
/// The tag of a stop frame.
const STOP_TAG: u8 = b'S';
/// Bit 0 of a request's flags: keep stdout.
const KEEP_STDOUT_FLAG: u8 = 1;
/// The most stderr a status record carries: the supervisor keeps at most
/// twice the tail.
const STATUS_STDERR_MAX: usize = 4 * STDERR_TAIL_BYTES;

/// The most payload bytes in one request frame. A payload up to this size
/// goes to the supervisor in the same write as its request's head.
pub(super) const PAYLOAD_CHUNK: usize = 64 * 1024;

/// The largest frame a supervisor reads: a payload chunk, or a head with
/// its flow (flows are at most 256 bytes).
const REQUEST_FRAME_MAX: usize = PAYLOAD_CHUNK + REQUEST_HEAD;

/// The largest frame a worker reads: a status record with the most stderr
/// and stdout it may carry.
const STATUS_FRAME_MAX: usize = STATUS_HEAD + STATUS_STDERR_MAX + KEEP_STDOUT_CAP;

/// How many bytes of frames the writer buffers before it writes them out:
/// a head and a payload chunk go in one write, so that the supervisor
/// wakes once per small request.
const WRITE_BUFFER: usize = REQUEST_FRAME_MAX + 64;

/// The codec of one direction: `u32` little-endian lengths, frames of at
/// most `max` bytes (longer ones are an error on both ends).
fn codec(max: usize) -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .length_field_type::<u32>()
        .little_endian()
        .max_frame_length(max)
        .new_codec()
}

/// An error for a frame that breaks the format.
fn bad_frame(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

/// One run of the command, as the supervisor reads it.
pub(super) struct Request {
    /// The item's id (`WORKJOURNAL_ID`).
    pub(super) id: u64,
    /// The item's delivery count (`WORKJOURNAL_DELIVERY`).
    pub(super) delivery: u32,
    /// `--timeout`, if any.
    pub(super) timeout: Option<Duration>,
    /// `--keep-stdout`.
    pub(super) keep_stdout: bool,
    /// The item's flow (`WORKJOURNAL_FLOW`).
    pub(super) flow: Vec<u8>,
    /// The item's payload, whole.
    pub(super) payload: Vec<u8>,
}

/// How `sh` ended, as the supervisor saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ended {
    /// It exited with this code.
    Exited(i32),
    /// A signal of this number killed it.
    Signaled(i32),
    /// It could not be started.
    NotStarted,
    /// It ran past `--timeout` and was killed.
    TimedOut,
}

/// A status record: how the command ended, the end of its stderr and its
/// kept stdout.
#[derive(Debug)]
pub(super) struct Status {
    /// How `sh` ended.
    pub(super) ended: Ended,
    /// The end of its stderr (for "not started", the reason).
    pub(super) stderr: Vec<u8>,
    /// Its kept stdout (empty without `keep_stdout`).
    pub(super) stdout: Vec<u8>,
    /// Whether it wrote more stdout than [`KEEP_STDOUT_CAP`].
    pub(super) stdout_over: bool,
}

impl Status {
    /// The status of a command that could not be started for `e`.
    pub(super) fn not_started(e: &io::Error) -> Self {
        Status {
            ended: Ended::NotStarted,
            stderr: format!("{CANNOT_START}: {e}").into_bytes(),
            stdout: Vec::new(),
            stdout_over: false,
        }
    }

    /// The status frame.
    fn encode(&self) -> BytesMut {
        let (kind, value) = match self.ended {
            Ended::Exited(c) => (0u8, c),
            Ended::Signaled(s) => (1, s),
            Ended::NotStarted => (2, 0),
            Ended::TimedOut => (3, 0),
        };
        // Both are bounded by the supervisor (the tail, the cap).
        let stderr = &self.stderr[self.stderr.len().saturating_sub(STATUS_STDERR_MAX)..];
        let stdout = &self.stdout[..self.stdout.len().min(KEEP_STDOUT_CAP)];
        let mut out = BytesMut::with_capacity(STATUS_HEAD + stderr.len() + stdout.len());
        out.put_u8(kind);
        out.put_i32_le(value);
        out.put_u8(u8::from(self.stdout_over));
        // At most STATUS_STDERR_MAX, well inside a u32.
        out.put_u32_le(u32::try_from(stderr.len()).unwrap_or(u32::MAX));
        out.put_slice(stderr);
        out.put_slice(stdout);
        out
    }

    /// A status record from its frame.
    fn decode(mut frame: BytesMut) -> io::Result<Self> {
        let bad = |_| bad_frame("malformed status record from the command supervisor");
        let kind = frame.try_get_u8().map_err(bad)?;
        let value = frame.try_get_i32_le().map_err(bad)?;
        let ended = match kind {
            0 => Ended::Exited(value),
            1 => Ended::Signaled(value),
            2 => Ended::NotStarted,
            3 => Ended::TimedOut,
            _ => {
                return Err(bad_frame(
                    "malformed status record from the command supervisor",
                ));
            }
        };
        let stdout_over = frame.try_get_u8().map_err(bad)? != 0;
        let stderr_len =
            usize::try_from(frame.try_get_u32_le().map_err(bad)?).unwrap_or(usize::MAX);
        if stderr_len > STATUS_STDERR_MAX || stderr_len > frame.len() {
            return Err(bad_frame(
                "malformed status record from the command supervisor",
            ));
        }
        let stderr = frame.split_to(stderr_len).to_vec();
        if frame.len() > KEEP_STDOUT_CAP {
            return Err(bad_frame(
                "malformed status record from the command supervisor",
            ));
        }
        Ok(Status {
            ended,
            stderr,
            stdout: frame.to_vec(),
            stdout_over,
        })
    }
}

/// The head frame of a request: everything but the payload, which follows
/// in chunks.
fn encode_head(
    id: u64,
    delivery: u32,
    timeout: Option<Duration>,
    keep_stdout: bool,
    flow: &[u8],
    payload_len: usize,
) -> BytesMut {
    let timeout_ns = timeout.map_or(0, |t| {
        u64::try_from(t.as_nanos()).unwrap_or(u64::MAX).max(1)
    });
    let mut head = BytesMut::with_capacity(REQUEST_HEAD + flow.len());
    head.put_u64_le(id);
    head.put_u32_le(delivery);
    head.put_u64_le(timeout_ns);
    head.put_u8(if keep_stdout { KEEP_STDOUT_FLAG } else { 0 });
    head.put_u64_le(u64::try_from(payload_len).unwrap_or(u64::MAX));
    head.put_slice(flow);
    head
}

/// The worker's end of a supervisor's socket: writes requests, reads
/// status records.
pub(super) struct WorkerEnd {
    /// Status frames from the supervisor.
    reader: FramedRead<OwnedReadHalf, LengthDelimitedCodec>,
    /// Request frames to the supervisor.
    writer: FramedWrite<OwnedWriteHalf, LengthDelimitedCodec>,
}

impl WorkerEnd {
    /// The worker's end over `stream`.
    pub(super) fn new(stream: UnixStream) -> Self {
        let (read, write) = stream.into_split();
        let mut writer = FramedWrite::new(write, codec(REQUEST_FRAME_MAX));
        writer.set_backpressure_boundary(WRITE_BUFFER);
        WorkerEnd {
            reader: FramedRead::new(read, codec(STATUS_FRAME_MAX)),
            writer,
        }
    }

    /// Send the whole request for `claimed`: its head, then its payload in
    /// chunks. An error when it could not be sent whole.
    pub(super) async fn send_request(
        &mut self,
        claimed: &Claimed,
        timeout: Option<Duration>,
        keep_stdout: bool,
    ) -> io::Result<()> {
        let item = &claimed.item;
        let head = encode_head(
            item.id,
            claimed.receipt.delivery,
            timeout,
            keep_stdout,
            item.flow.as_bytes(),
            item.payload.len(),
        );
        self.send(&head, &item.payload).await
    }

    /// Send a request's `head` frame, then `payload` in chunks, and flush.
    async fn send(&mut self, head: &[u8], payload: &[u8]) -> io::Result<()> {
        self.writer.feed(head).await?;
        for chunk in payload.chunks(PAYLOAD_CHUNK) {
            self.writer.feed(chunk).await?;
        }
        SinkExt::<&[u8]>::flush(&mut self.writer).await
    }

    /// Ask the supervisor to stop the command it runs: SIGTERM to its
    /// group now, SIGKILL after `grace`.
    pub(super) async fn send_stop(&mut self, grace: Duration) -> io::Result<()> {
        let mut frame = Vec::with_capacity(STOP_FRAME);
        frame.push(STOP_TAG);
        frame.extend_from_slice(
            &u64::try_from(grace.as_millis())
                .unwrap_or(u64::MAX)
                .to_le_bytes(),
        );
        self.writer.send(&frame[..]).await
    }

    /// Read the status record of the request sent last.
    pub(super) async fn read_status(&mut self) -> io::Result<Status> {
        match self.reader.next().await {
            Some(frame) => Status::decode(frame?),
            None => Err(io::ErrorKind::UnexpectedEof.into()),
        }
    }
}

/// What came from the worker while a command ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum WhileRunning {
    /// Stop the command: SIGTERM now, SIGKILL after the grace.
    Stop(Duration),
    /// The lifeline ended.
    Ended,
}

/// The supervisor's end of its socket: reads requests, writes status
/// records, and watches the lifeline.
pub(super) struct SupervisorEnd {
    /// Request frames from the worker.
    reader: FramedRead<OwnedReadHalf, LengthDelimitedCodec>,
    /// Status frames to the worker.
    writer: FramedWrite<OwnedWriteHalf, LengthDelimitedCodec>,
}

impl SupervisorEnd {
    /// The supervisor's end over `stream`.
    pub(super) fn new(stream: UnixStream) -> Self {
        let (read, write) = stream.into_split();
        SupervisorEnd {
            reader: FramedRead::new(read, codec(REQUEST_FRAME_MAX)),
            writer: FramedWrite::new(write, codec(STATUS_FRAME_MAX)),
        }
    }

    /// The next request, whole; `None` when the socket closed between
    /// requests (the worker is done with this slot), an error when it
    /// closed inside one (a frame cut short, or the payload's frames ended
    /// before the length its head gave) or a frame breaks the format.
    pub(super) async fn read_request(&mut self) -> io::Result<Option<Request>> {
        let Some(head) = self.reader.next().await else {
            return Ok(None);
        };
        let mut head = head?;
        let bad = |_| bad_frame("malformed request head");
        let id = head.try_get_u64_le().map_err(bad)?;
        let delivery = head.try_get_u32_le().map_err(bad)?;
        let timeout_ns = head.try_get_u64_le().map_err(bad)?;
        let flags = head.try_get_u8().map_err(bad)?;
        let payload_len = head.try_get_u64_le().map_err(bad)?;
        let flow = head.to_vec();
        // Room for a small payload at once; a large one grows as it comes.
        let mut payload = Vec::with_capacity(
            usize::try_from(payload_len)
                .unwrap_or(usize::MAX)
                .min(PAYLOAD_CHUNK),
        );
        while (payload.len() as u64) < payload_len {
            let chunk = match self.reader.next().await {
                Some(chunk) => chunk?,
                None => return Err(io::ErrorKind::UnexpectedEof.into()),
            };
            if (payload.len() + chunk.len()) as u64 > payload_len {
                return Err(bad_frame("payload longer than its request said"));
            }
            payload.extend_from_slice(&chunk);
        }
        Ok(Some(Request {
            id,
            delivery,
            timeout: (timeout_ns > 0).then(|| Duration::from_nanos(timeout_ns)),
            keep_stdout: flags & KEEP_STDOUT_FLAG != 0,
            flow,
            payload,
        }))
    }

    /// Resolves when anything comes from the worker. Nothing does while a
    /// command runs but the end of the socket: the worker is gone (or
    /// broke the protocol). Cancel safe (a frame read partly stays
    /// buffered).
    /// What the worker says while a command runs: a stop (with its kill
    /// grace), or nothing but the end of the socket (the lifeline ended;
    /// so does a frame that is not a stop, which breaks the protocol).
    pub(super) async fn while_running(&mut self) -> WhileRunning {
        match self.reader.next().await {
            Some(Ok(frame)) if frame.len() == STOP_FRAME && frame.first() == Some(&STOP_TAG) => {
                let mut ms = [0u8; 8];
                ms.copy_from_slice(&frame[1..]);
                WhileRunning::Stop(Duration::from_millis(u64::from_le_bytes(ms)))
            }
            _ => WhileRunning::Ended,
        }
    }

    /// Send `status` to the worker.
    pub(super) async fn write_status(&mut self, status: &Status) -> io::Result<()> {
        self.writer.send(&status.encode()[..]).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_record_comes_back_as_it_went() {
        let status = Status {
            ended: Ended::Signaled(9),
            stderr: b"oops\n".to_vec(),
            stdout: b"result".to_vec(),
            stdout_over: true,
        };
        let frame = status.encode();
        let back = Status::decode(frame).unwrap();
        assert_eq!(back.ended, Ended::Signaled(9));
        assert_eq!(back.stderr, b"oops\n");
        assert_eq!(back.stdout, b"result");
        assert!(back.stdout_over);
        assert!(Status::decode(BytesMut::from(&[7u8, 0, 0, 0, 0, 0, 0, 0, 0, 0][..])).is_err());
        assert!(Status::decode(BytesMut::from(&[0u8, 0, 0][..])).is_err());
    }

    #[tokio::test]
    async fn a_request_comes_whole_over_many_frames_or_not_at_all() {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let (mut worker, mut supervisor) = (WorkerEnd::new(ours), SupervisorEnd::new(theirs));
        let payload: Vec<u8> = (0..3 * PAYLOAD_CHUNK + 7).map(|i| i as u8).collect();
        let timeout = Some(Duration::from_millis(1500));
        let head = encode_head(7, 2, timeout, true, b"flow", payload.len());
        let reader = tokio::spawn(async move {
            let request = supervisor.read_request().await.unwrap().unwrap();
            (supervisor, request)
        });
        worker.send(&head, &payload).await.unwrap();
        let (mut supervisor, request) = reader.await.unwrap();
        assert_eq!((request.id, request.delivery), (7, 2));
        assert_eq!(request.timeout, timeout);
        assert!(request.keep_stdout);
        assert_eq!(request.flow, b"flow");
        assert_eq!(request.payload, payload);
        // The worker dies after two of the payload's frames: no request.
        let head = encode_head(8, 1, None, false, b"", payload.len());
        worker
            .send(&head, &payload[..2 * PAYLOAD_CHUNK])
            .await
            .unwrap();
        drop(worker);
        let cut = supervisor.read_request().await;
        assert_eq!(
            cut.err().map(|e| e.kind()),
            Some(io::ErrorKind::UnexpectedEof)
        );
    }
}
