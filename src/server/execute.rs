//! One decoded request, one queue call, one reply.

use std::future::Future;
use std::time::Duration;

use axum::response::Response;

use super::auth::Access;
use super::routes::{AppState, error_response, reply};
use super::stopped;
use crate::error::{Error, Result};
use crate::queue::{BoxQueue, WorkQueue};
use crate::request::{Reply, Request as QueueRequest};
use crate::wire::{self, Request};

/// One request, one queue call, one reply: every operation of the contract
/// goes through [`WorkQueue::call`]; the few routes that are not one
/// (`max_deliveries`, `forward_lag`, `reclaim_stale`) are answered here.
pub(super) async fn execute(state: &AppState, request: Request, access: Access) -> Response {
    let q = &state.queue;
    let request = match request.into_queue(state.options.max_wait) {
        // The read-only token only looks (SPEC 10, Security).
        Ok(request) if access == Access::Read && !request.is_read() => {
            return read_only_refusal(request.name());
        }
        Err(Request::ReclaimStale(_)) if access == Access::Read => {
            return read_only_refusal("reclaim_stale");
        }
        Ok(request) => request,
        Err(Request::MaxDeliveries) => {
            return reply(Ok::<_, crate::Error>(wire::Count {
                count: u64::from(q.max_deliveries()),
            }));
        }
        Err(Request::ForwardLag(r)) => return reply(forward_lag(state, r).await),
        Err(Request::ReclaimStale(r)) => {
            let got = q
                .reclaim(Duration::from_millis(r.min_idle_ms), r.count)
                .await
                .map(|r| r.claimed);
            return reply(got.map(|claimed| wire::ClaimedList {
                claimed: claimed.into_iter().map(Into::into).collect(),
            }));
        }
        Err(other) => {
            return reply(Err::<wire::Done, _>(Error::invalid(format!(
                "{} is not an operation of the queue",
                other.encode().0
            ))));
        }
    };
    let chunks_of = match &request {
        QueueRequest::WaitChunks { id, .. } => Some(*id),
        _ => None,
    };
    let result = match &request {
        // A long poll still waiting at shutdown takes nothing (SPEC 3,
        // cancel safety) and answers empty, so shutdown never waits for it.
        QueueRequest::Claim { count, .. } if *count > 0 => {
            until_shutdown(state, q.call(request), Reply::Claimed(Vec::new())).await
        }
        QueueRequest::WaitOutcome { .. } => {
            until_shutdown(state, q.call(request), Reply::Outcome(None)).await
        }
        QueueRequest::WaitChunks { .. } => {
            until_shutdown(state, q.call(request), Reply::Chunks(Vec::new())).await
        }
        QueueRequest::WaitCancelled { .. } => {
            until_shutdown(state, q.call(request), Reply::Ids(Vec::new())).await
        }
        _ => q.call(request).await,
    };
    match (chunks_of, result) {
        (Some(id), Ok(Reply::Chunks(chunks))) => reply(chunk_list(q, id, chunks).await),
        (_, result) => reply(result.map(wire::WireReply::from)),
    }
}

/// 403 for an operation that changes the queue, asked with the read-only
/// token.
fn read_only_refusal(op: &str) -> Response {
    error_response(wire::ErrorBody::plain(
        "forbidden",
        format!(
            "{op} changes the queue and this token is read-only (for looking); send the full token"
        ),
    ))
}

/// `call`'s answer, or `at_shutdown` as soon as the server begins to shut
/// down.
async fn until_shutdown(
    state: &AppState,
    call: impl Future<Output = Result<Reply>>,
    at_shutdown: Reply,
) -> Result<Reply> {
    let mut stop = state.shutdown.clone();
    tokio::select! {
        r = call => r,
        () = stopped(&mut stop) => Ok(at_shutdown),
    }
}

/// `forward_lag`: the served file's lag from the server's lag source
/// ([`Server::forward_lag`]), or `null` without one.
async fn forward_lag(
    state: &AppState,
    request: wire::ForwardLagRequest,
) -> Result<wire::ForwardLagReply> {
    #[cfg(feature = "forward")]
    if let Some(source) = &state.lag {
        let l = source.lag(request.flows.as_deref()).await?;
        return Ok(wire::ForwardLagReply {
            lag: Some(wire::WireForwardLag {
                count: l.lag.count,
                oldest_age_ms: l.lag.oldest_age_ms,
                forwarded: l.forwarded,
                forwarding: l.forwarding,
            }),
        });
    }
    let _ = (state, request);
    Ok(wire::ForwardLagReply { lag: None })
}

/// `wait_chunks`'s reply: with no chunk, whether that is because the item
/// has finished (then the client stops asking) rather than the wait ran out.
async fn chunk_list(q: &BoxQueue, id: u64, chunks: Vec<crate::Chunk>) -> Result<wire::ChunkList> {
    let finished = chunks.is_empty() && q.outcome(id).await?.is_some();
    Ok(wire::ChunkList {
        chunks: chunks.into_iter().map(Into::into).collect(),
        finished,
    })
}
