//! [`ServerOptions`]: the limits and timeouts of a server (SPEC section 10).

use std::time::Duration;

use super::{DEFAULT_BODY_TIMEOUT, DEFAULT_HEADER_TIMEOUT, DEFAULT_MAX_WAIT, ENVELOPE_BYTES};

/// Limits and timeouts of a [`Server`](crate::server::Server) (SPEC section 10).
#[derive(Debug, Clone)]
pub struct ServerOptions {
    pub(super) max_payload_bytes: usize,
    pub(super) header_timeout: Duration,
    pub(super) body_timeout: Duration,
    pub(super) max_wait: Duration,
    pub(super) token: Option<String>,
    pub(super) read_token: Option<String>,
    pub(super) allowed_uids: Option<Vec<u32>>,
    pub(super) read_only: bool,
    pub(super) fire_schedules: bool,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            max_payload_bytes: crate::config::DEFAULT_MAX_PAYLOAD_BYTES,
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            max_wait: DEFAULT_MAX_WAIT,
            token: None,
            read_token: None,
            allowed_uids: None,
            read_only: false,
            fire_schedules: true,
        }
    }
}

impl ServerOptions {
    /// The queue's `max_payload_bytes`: a request body over its base64 size
    /// plus 64 KiB of JSON around it is refused with 413 (a batch too:
    /// split it).
    /// Default: [`DEFAULT_MAX_PAYLOAD_BYTES`](crate::DEFAULT_MAX_PAYLOAD_BYTES).
    pub fn max_payload_bytes(mut self, bytes: usize) -> Self {
        self.max_payload_bytes = bytes;
        self
    }

    /// How long a client may take to send a request's headers, and how long
    /// a kept-alive connection may sit idle between requests, before the
    /// server closes it. Default: 10 s.
    pub fn header_timeout(mut self, timeout: Duration) -> Self {
        self.header_timeout = timeout;
        self
    }

    /// How long a client may take to send a request's body; past it the
    /// request is refused with 408. Default: 30 s.
    pub fn body_timeout(mut self, timeout: Duration) -> Self {
        self.body_timeout = timeout;
        self
    }

    /// The longest a claim blocks in one request; a longer `wait_ms` answers
    /// empty after it (the client asks again). Default: 20 s.
    pub fn max_wait(mut self, wait: Duration) -> Self {
        self.max_wait = wait;
        self
    }

    /// The bearer token TCP clients must send. Required before
    /// [`Server::run`](crate::server::Server::run) accepts a TCP listener. Default: none.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// A second bearer token for TCP clients that may only look (SPEC 10,
    /// Security; SPEC 12): with it the API answers the operations that
    /// change nothing (`Request::is_read`, `max_deliveries`,
    /// `forward_lag`) and refuses every other with 403 `forbidden`; the
    /// dashboard shows its page read-only and refuses its actions; `/metrics`
    /// answers. For viewers and scrapers (Prometheus' `credentials_file`).
    /// Default: none (only the full [`token`](ServerOptions::token)).
    pub fn read_token(mut self, token: impl Into<String>) -> Self {
        self.read_token = Some(token.into());
        self
    }

    /// The uids allowed on the Unix socket. Default: only the uid that owns
    /// the socket file (the server's own). A listener bound with
    /// [`SocketPermissions`](crate::server::SocketPermissions) that open it to others lets every peer the
    /// file's permissions let in.
    pub fn allowed_uids(mut self, uids: Vec<u32>) -> Self {
        self.allowed_uids = Some(uids);
        self
    }

    /// Serve the dashboard read-only (SPEC 12.2): its write controls are
    /// left out of the page and `POST /ui/action` answers 403. The API
    /// routes (`/v1/...`) are not affected. Default: false.
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// Fire the served queue's schedules while serving (SPEC 13): the
    /// server runs the queue's timers, so its clients need not. Turn it
    /// off when another process fires them, or in tests that fire by hand.
    /// Default: true.
    pub fn fire_schedules(mut self, fire: bool) -> Self {
        self.fire_schedules = fire;
        self
    }

    /// The largest request body accepted, in bytes.
    pub fn max_request_bytes(&self) -> usize {
        self.max_payload_bytes
            .saturating_add(2)
            .saturating_div(3)
            .saturating_mul(4)
            .saturating_add(ENVELOPE_BYTES)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_limit_covers_a_full_payload_in_base64() {
        let o = ServerOptions::default().max_payload_bytes(3);
        assert_eq!(o.max_request_bytes(), 4 + ENVELOPE_BYTES);
        let o = ServerOptions::default().max_payload_bytes(usize::MAX);
        assert_eq!(o.max_request_bytes(), usize::MAX);
    }
}
