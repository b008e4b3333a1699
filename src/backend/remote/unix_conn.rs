//! The client's side of one HTTP/1.1 exchange on a Unix socket, run in the
//! calling task (SPEC section 10).
//!
//! Over the socket the client writes each request itself (head and body in
//! one write) and reads the reply with `httparse`, instead of handing it to
//! a hyper connection task: a call then costs no task hand-over on the way
//! out nor on the way back, which is most of what a single add through the
//! socket paid on top of the served queue's own commit. The connection is
//! kept alive and pooled as before. TCP keeps hyper's client (a proxy in
//! between may answer in ways this reader does not take).
//!
//! Cancel safety: dropping an exchange part-way drops the connection with
//! it (it is never pooled half-read), so a timed-out call cannot leave a
//! late reply for the next call to read.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

/// The most reply-header bytes read before the reply is refused: 64 KiB.
const MAX_HEAD_BYTES: usize = 64 * 1024;
/// The most reply headers parsed.
const MAX_HEADERS: usize = 32;
/// Bytes read at a time while the head is incomplete.
const READ_CHUNK: usize = 8 * 1024;

/// A kept-alive HTTP/1.1 connection on the Unix socket.
pub(super) struct UnixConn {
    stream: UnixStream,
    /// The reply bytes read so far; kept between calls for its capacity.
    buf: Vec<u8>,
}

/// A whole reply: its status and body.
pub(super) struct Reply {
    /// The HTTP status code.
    pub(super) status: u16,
    /// The body, `Content-Length` bytes of it.
    pub(super) body: Vec<u8>,
    /// Whether the connection may carry the next request.
    pub(super) reusable: bool,
}

/// Why an exchange gave no reply.
pub(super) enum ExchangeError {
    /// Writing the request failed: the server had closed the connection,
    /// and no request it could act on reached it. Safe to send again.
    NotSent(std::io::Error),
    /// The request went out and no whole reply came back: the outcome is
    /// unknown.
    Lost(String),
}

impl UnixConn {
    /// A connection on a freshly connected `stream`.
    pub(super) fn new(stream: UnixStream) -> Self {
        UnixConn {
            stream,
            buf: Vec::new(),
        }
    }

    /// Whether an idle connection is already unusable: the server closed it
    /// (a read would see end of file or an error at once) or sent bytes
    /// nobody asked for.
    pub(super) fn is_closed(&self) -> bool {
        let mut probe = [0u8; 1];
        match self.stream.try_read(&mut probe) {
            Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
            Ok(_) => true,
        }
    }

    /// Send `request` (head and body, already framed) and read the reply,
    /// whose body may be at most `max_body` bytes.
    ///
    /// # Errors
    ///
    /// [`ExchangeError::NotSent`] if the write fails; [`ExchangeError::Lost`]
    /// if the reply is cut off, malformed, framed in a way this reader does
    /// not take (only `Content-Length` bodies are read), or over `max_body`.
    pub(super) async fn exchange(
        &mut self,
        request: &[u8],
        max_body: usize,
    ) -> Result<Reply, ExchangeError> {
        self.stream
            .write_all(request)
            .await
            .map_err(ExchangeError::NotSent)?;
        self.buf.clear();
        let (status, head_len, body_len, reusable) = loop {
            if let Some(head) = parse_head(&self.buf)? {
                break head;
            }
            if self.buf.len() >= MAX_HEAD_BYTES {
                return Err(lost(format!("reply headers over {MAX_HEAD_BYTES} bytes")));
            }
            self.read_more(READ_CHUNK).await?;
        };
        if body_len > max_body {
            return Err(lost(format!(
                "reply of {body_len} bytes is over the limit of {max_body}"
            )));
        }
        let end = head_len.saturating_add(body_len);
        while self.buf.len() < end {
            self.read_more(end - self.buf.len()).await?;
        }
        // Bytes past the reply were never asked for: do not reuse.
        let reusable = reusable && self.buf.len() == end;
        let body = self.buf.get(head_len..end).unwrap_or_default().to_vec();
        Ok(Reply {
            status,
            body,
            reusable,
        })
    }

    /// Read at least one more byte (at most `want`) onto the buffer, into
    /// its spare capacity: a reply of a few hundred bytes costs no zeroing
    /// of a whole read chunk first (which callgrind showed as a quarter of
    /// the client's instructions per add).
    async fn read_more(&mut self, want: usize) -> Result<(), ExchangeError> {
        let want = want.max(1);
        self.buf.reserve(want);
        let limit = u64::try_from(want).unwrap_or(u64::MAX);
        match (&mut self.stream).take(limit).read_buf(&mut self.buf).await {
            Ok(0) => Err(lost("connection closed before the whole reply".into())),
            Ok(_) => Ok(()),
            Err(e) => Err(lost(format!("connection lost: {e}"))),
        }
    }
}

fn lost(why: String) -> ExchangeError {
    ExchangeError::Lost(why)
}

/// The reply's status, head length, body length and whether the
/// connection stays open, once `buf` holds the whole head; `None` before.
fn parse_head(buf: &[u8]) -> Result<Option<(u16, usize, usize, bool)>, ExchangeError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut reply = httparse::Response::new(&mut headers);
    let head_len = match reply.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(lost(format!("malformed reply: {e}"))),
    };
    let status = reply.code.unwrap_or_default();
    if !(200..600).contains(&status) {
        return Err(lost(format!("unexpected reply status {status}")));
    }
    let mut body_len = None;
    let mut reusable = reply.version == Some(1);
    for h in reply.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            let n = std::str::from_utf8(h.value)
                .ok()
                .and_then(|v| v.trim().parse::<usize>().ok())
                .ok_or_else(|| lost("malformed Content-Length in the reply".into()))?;
            if body_len.is_some_and(|m| m != n) {
                return Err(lost("two different Content-Length in the reply".into()));
            }
            body_len = Some(n);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(lost(
                "reply with a Transfer-Encoding (only Content-Length replies are read)".into(),
            ));
        } else if h.name.eq_ignore_ascii_case("connection")
            && std::str::from_utf8(h.value)
                .is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case("close")))
        {
            reusable = false;
        }
    }
    let body_len = body_len.ok_or_else(|| lost("reply without Content-Length".into()))?;
    Ok(Some((status, head_len, body_len, reusable)))
}

/// The bytes of `POST {path}` with `body`, head and body together.
pub(super) fn frame(path: &str, token: Option<&str>, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(160 + body.len());
    out.extend_from_slice(b"POST ");
    out.extend_from_slice(path.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n");
    if let Some(token) = token {
        out.extend_from_slice(b"authorization: Bearer ");
        out.extend_from_slice(token.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"content-length: ");
    out.extend_from_slice(body.len().to_string().as_bytes());
    out.extend_from_slice(b"\r\n\r\n");
    out.extend_from_slice(body);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(bytes: &[u8]) -> Option<(u16, usize, usize, bool)> {
        match parse_head(bytes) {
            Ok(h) => h,
            Err(_) => Some((0, 0, 0, false)),
        }
    }

    /// Replies are read strictly: a malformed or oddly framed one is an
    /// error (outcome unknown), never a panic or a misread body.
    #[test]
    fn reply_heads_are_read_strictly() {
        let ok =
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}";
        assert_eq!(head(ok), Some((200, ok.len() - 2, 2, true)));
        assert_eq!(head(&ok[..20]), None);
        let close = b"HTTP/1.1 409 Conflict\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";
        assert_eq!(head(close), Some((409, close.len(), 0, false)));
        let old = b"HTTP/1.0 200 OK\r\ncontent-length: 0\r\n\r\n";
        assert_eq!(head(old).map(|h| h.3), Some(false));
        for bad in [
            &b"HTTP/1.1 200 OK\r\n\r\n"[..],
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ncontent-length: 99999999999999999999999\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\n",
            b"HTTP/1.1 100 Continue\r\ncontent-length: 0\r\n\r\n",
            b"garbage\r\n\r\n",
        ] {
            assert_eq!(head(bad), Some((0, 0, 0, false)), "{bad:?} was read");
        }
    }

    #[test]
    fn a_request_is_framed_with_its_length_and_token() {
        let r = frame("/v1/add", Some("t0k"), b"{}");
        let text = String::from_utf8(r).unwrap_or_default();
        assert!(text.starts_with("POST /v1/add HTTP/1.1\r\n"));
        assert!(text.contains("authorization: Bearer t0k\r\n"));
        assert!(text.ends_with("content-length: 2\r\n\r\n{}"));
    }
}
