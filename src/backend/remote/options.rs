//! [`RemoteOptions`]: the timeouts, token and limits of a
//! [`RemoteQueue`](super::RemoteQueue) (SPEC section 10).

use std::time::Duration;

/// Default of [`RemoteOptions::connect_timeout`]: 2 seconds.
pub const DEFAULT_REMOTE_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Default of [`RemoteOptions::request_timeout`]: 10 seconds.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Default of [`RemoteOptions::claim_poll`]: 15 seconds.
pub const DEFAULT_CLAIM_POLL: Duration = Duration::from_secs(15);
/// Default of [`RemoteOptions::pool_idle_timeout`]: 5 seconds.
pub const DEFAULT_POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(5);

/// Timeouts and credentials of a [`RemoteQueue`](super::RemoteQueue) (SPEC section 10).
#[derive(Clone)]
pub struct RemoteOptions {
    pub(super) connect_timeout: Duration,
    pub(super) request_timeout: Duration,
    pub(super) claim_poll: Duration,
    pub(super) pool_idle_timeout: Duration,
    pub(super) token: Option<String>,
    pub(super) max_response_bytes: usize,
}

impl std::fmt::Debug for RemoteOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteOptions")
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("claim_poll", &self.claim_poll)
            .field("pool_idle_timeout", &self.pool_idle_timeout)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("max_response_bytes", &self.max_response_bytes)
            .finish()
    }
}

impl Default for RemoteOptions {
    fn default() -> Self {
        RemoteOptions {
            connect_timeout: DEFAULT_REMOTE_CONNECT_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            claim_poll: DEFAULT_CLAIM_POLL,
            pool_idle_timeout: DEFAULT_POOL_IDLE_TIMEOUT,
            token: None,
            max_response_bytes: 1 << 30,
        }
    }
}

impl RemoteOptions {
    /// How long opening a connection may take. Default: 2 s.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long one call may take, connecting included, on top of a claim's
    /// own wait; past it the call is `Error::Backend` with the outcome
    /// unknown. Default: 10 s.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// The longest one long-poll request (`claim`, `wait_outcome`,
    /// `wait_chunks`) waits on the server; a longer `wait` is asked for in
    /// pieces. Keep it under the server's `max_wait`.
    /// Default: 15 s.
    pub fn claim_poll(mut self, poll: Duration) -> Self {
        self.claim_poll = poll;
        self
    }

    /// How long an unused connection stays in the pool. Keep it under the
    /// server's header timeout (default 10 s), so the server never closes a
    /// connection the client is about to use. Default: 5 s.
    pub fn pool_idle_timeout(mut self, timeout: Duration) -> Self {
        self.pool_idle_timeout = timeout;
        self
    }

    /// The bearer token sent with every request (needed over TCP).
    /// Default: none.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// The largest reply accepted, in bytes. Default: 1 GiB.
    pub fn max_response_bytes(mut self, bytes: usize) -> Self {
        self.max_response_bytes = bytes;
        self
    }
}
