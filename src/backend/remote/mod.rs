//! The remote backend (feature `remote`): [`RemoteQueue`] speaks to a
//! `workjournal serve` process (or the socket `workjournal work` serves)
//! over a Unix socket or TCP (SPEC section 10).
//!
//! # Design
//!
//! Every [`WorkQueue`](crate::WorkQueue) call is one HTTP/1.1 request carrying the
//! [`wire`](crate::wire) types both sides share; the server makes the one
//! queue call and answers with its result or its error, which maps back
//! onto the same [`Error`](crate::Error) variant
//! ([`ErrorBody::into_error`](crate::wire::ErrorBody::into_error)). So the
//! contract, the durability and the errors are the served queue's own.
//!
//! Connections are kept in a small pool: a call takes an idle one or
//! opens a new one, so a restarted server is found again by the next call
//! without any reconnect step. Every call is bounded: connecting by
//! [`RemoteOptions::connect_timeout`], the whole exchange by
//! [`RemoteOptions::request_timeout`] (plus the claim's own wait). A lost
//! connection or a timeout is [`Error::Backend`](crate::Error::Backend) with the outcome unknown,
//! exactly as for Redis (SPEC section 5): the call may or may not have
//! happened on the server. A blocking claim long-polls in pieces of at
//! most [`RemoteOptions::claim_poll`], so no single request waits long.
//!
//! On the Unix socket the calling task writes the request and reads the
//! reply itself (`unix_conn`); on TCP hyper's client connection does,
//! in a task of its own. Both speak the same HTTP/1.1 to the same routes.

mod client;
mod options;
mod transport;
mod unix_conn;

pub use client::RemoteQueue;
pub use options::{
    DEFAULT_CLAIM_POLL, DEFAULT_POOL_IDLE_TIMEOUT, DEFAULT_REMOTE_CONNECT_TIMEOUT,
    DEFAULT_REQUEST_TIMEOUT, RemoteOptions,
};
