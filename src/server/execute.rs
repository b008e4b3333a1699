//! One decoded request, one queue call, one reply.

use std::time::Duration;

use axum::response::Response;

use super::routes::{AppState, reply};
use super::stopped;
use crate::error::{Error, Result};
use crate::queue::{BoxQueue, WorkQueue};
use crate::wire::{self, Request};

/// One request, one queue call, one reply.
pub(super) async fn execute(state: &AppState, request: Request) -> Response {
    let q = &state.queue;
    match request {
        Request::Add(item) => reply(q.add(item.into()).await.map(wire::WireAdded::from)),
        Request::AddBatch(b) => reply(
            q.add_batch(b.items.into_iter().map(Into::into).collect())
                .await
                .map(|added| wire::AddedList {
                    added: added.into_iter().map(Into::into).collect(),
                }),
        ),
        Request::AddDelayed(d) => {
            let item = wire::WireNewItem {
                flow: d.flow,
                payload: d.payload,
                dedup_key: d.dedup_key,
                priority: d.priority,
                cost: d.cost,
            };
            reply(
                q.add_delayed(item.into(), d.not_before_ms)
                    .await
                    .map(wire::WireAdded::from),
            )
        }
        Request::NextDue => reply(
            q.next_due()
                .await
                .map(|not_before_ms| wire::NextDue { not_before_ms }),
        ),
        Request::PromoteDue => reply(q.promote_due().await.map(count)),
        Request::Claim(c) => {
            let wait = Duration::from_millis(c.wait_ms).min(state.options.max_wait);
            let mut stop = state.shutdown.clone();
            // A claim still waiting at shutdown takes nothing (SPEC 3,
            // cancel safety) and answers empty, so shutdown never waits
            // for a long poll.
            let result = tokio::select! {
                r = q.claim(c.count, wait, c.from.into()) => r,
                () = stopped(&mut stop) => {
                    if c.count == 0 {
                        Err(Error::invalid("claim count must be at least 1"))
                    } else {
                        Ok(Vec::new())
                    }
                }
            };
            reply(result.map(claimed_list))
        }
        Request::Ack(r) => reply(q.ack(r.receipt.into()).await.map(|()| wire::Done {})),
        Request::AckBatch(r) => reply(
            q.ack_batch(r.receipts.into_iter().map(Into::into).collect())
                .await
                .map(count),
        ),
        Request::Touch(r) => reply(
            q.touch(r.receipts.into_iter().map(Into::into).collect())
                .await
                .map(|()| wire::Done {}),
        ),
        Request::Retry(r) => reply(
            q.retry(r.receipt.into(), r.not_before_ms)
                .await
                .map(wire::Retried::from),
        ),
        Request::Release(r) => reply(
            q.release(r.receipt.into(), r.not_before_ms)
                .await
                .map(|()| wire::Done {}),
        ),
        Request::Reclaim(r) => reply(
            q.reclaim(Duration::from_millis(r.min_idle_ms), r.count)
                .await
                .map(|r| wire::ReclaimedList {
                    claimed: r.claimed.into_iter().map(Into::into).collect(),
                    dead_lettered: r.dead_lettered.into_iter().map(Into::into).collect(),
                }),
        ),
        Request::DeadLetter(r) => reply(
            q.dead_letter(r.receipt.into(), &r.reason)
                .await
                .map(|()| wire::Done {}),
        ),
        Request::ReclaimStale(r) => reply(
            q.reclaim_stale(Duration::from_millis(r.min_idle_ms), r.count)
                .await
                .map(claimed_list),
        ),
        Request::Pause(f) => reply(q.pause(&f.flow).await.map(|()| wire::Done {})),
        Request::Resume(f) => reply(q.resume(&f.flow).await.map(count)),
        Request::Park(r) => reply(q.park(r.receipt.into()).await.map(|()| wire::Done {})),
        Request::Step(f) => reply(q.step(&f.flow).await.map(|c| wire::Stepped {
            claimed: c.map(Into::into),
        })),
        Request::ClearFlow(f) => reply(q.clear_flow(&f.flow).await.map(count)),
        Request::Parked(f) => reply(q.parked(&f.flow).await.map(count)),
        Request::PausedFlows => reply(q.paused_flows().await.map(|flows| wire::Flows { flows })),
        Request::SetFlowLimit(r) => reply(
            q.set_flow_limit(&r.flow, r.limit)
                .await
                .map(|()| wire::Done {}),
        ),
        Request::FlowLimits => reply(
            q.flow_limits()
                .await
                .map(|limits| wire::LimitsReply { limits }),
        ),
        Request::MarkDone(d) => reply(q.mark_done(d.id, &d.step).await.map(|()| wire::Done {})),
        Request::WasDone(d) => reply(q.was_done(d.id, &d.step).await.map(flag)),
        Request::DeadLetters(c) => {
            reply(q.dead_letters(c.count).await.map(|d| wire::DeadLetterList {
                dead_letters: d.into_iter().map(Into::into).collect(),
            }))
        }
        Request::Redrive(i) => reply(q.redrive(i.id).await.map(flag)),
        Request::PurgeDeadLetters => reply(q.purge_dead_letters().await.map(count)),
        Request::Stats => reply(q.stats().await),
        Request::BacklogByFlow(s) => reply(
            q.backlog_by_flow(s.sample)
                .await
                .map(|flows| wire::FlowCounts { flows }),
        ),
        Request::Peek(c) => reply(q.peek(c.count).await.map(|items| wire::ItemList {
            items: items.into_iter().map(Into::into).collect(),
        })),
        Request::Now => reply(q.now_ms().await.map(|now_ms| wire::Now { now_ms })),
        Request::Compact => reply(q.compact().await.map(flag)),
        Request::MaxDeliveries => reply(Ok::<_, crate::Error>(wire::Count {
            count: u64::from(q.max_deliveries()),
        })),
        Request::AckWithResult(r) => reply(
            q.ack_with_result(r.receipt.into(), r.result.0)
                .await
                .map(|()| wire::Done {}),
        ),
        Request::Outcome(i) => reply(q.outcome(i.id).await.map(outcome_reply)),
        Request::WaitOutcome(w) => {
            // A long poll like a claim: at most max_wait per request (the
            // client asks again for the rest), and a wait still running at
            // shutdown answers `null` at once.
            let wait = Duration::from_millis(w.wait_ms).min(state.options.max_wait);
            let mut stop = state.shutdown.clone();
            let result = tokio::select! {
                r = q.wait_outcome(w.id, wait) => r,
                () = stopped(&mut stop) => Ok(None),
            };
            reply(result.map(outcome_reply))
        }
        Request::SetProgress(r) => reply(
            q.set_progress(r.receipt.into(), r.progress.0)
                .await
                .map(|()| wire::Done {}),
        ),
        Request::SendChunk(r) => reply(
            q.send_chunk(r.receipt.into(), r.chunk.0)
                .await
                .map(|seq| wire::Seq { seq }),
        ),
        Request::Progress(i) => reply(q.progress(i.id).await.map(|p| wire::ProgressReply {
            progress: p.map(wire::Base64),
        })),
        Request::WaitChunks(w) => {
            let wait = Duration::from_millis(w.wait_ms).min(state.options.max_wait);
            let mut stop = state.shutdown.clone();
            let result = tokio::select! {
                r = q.wait_chunks(w.id, w.after_seq, wait) => r,
                () = stopped(&mut stop) => Ok(Vec::new()),
            };
            reply(chunk_list(q, w.id, result).await)
        }
        Request::ForwardLag(r) => reply(forward_lag(state, r).await),
        Request::List(r) => reply(q.list(r.into()).await.map(wire::ItemPageReply::from)),
        Request::Find(i) => reply(q.find(i.id).await.map(|f| wire::FoundReply {
            item: f.map(Into::into),
        })),
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

fn outcome_reply(outcome: Option<crate::Outcome>) -> wire::OutcomeReply {
    wire::OutcomeReply {
        outcome: outcome.map(Into::into),
    }
}

/// `wait_chunks`'s reply: with no chunk, whether that is because the item
/// has finished (then the client stops asking) rather than the wait ran out.
async fn chunk_list(
    q: &BoxQueue,
    id: u64,
    chunks: Result<Vec<crate::Chunk>>,
) -> Result<wire::ChunkList> {
    let chunks = chunks?;
    let finished = chunks.is_empty() && q.outcome(id).await?.is_some();
    Ok(wire::ChunkList {
        chunks: chunks.into_iter().map(Into::into).collect(),
        finished,
    })
}

fn count(count: u64) -> wire::Count {
    wire::Count { count }
}

fn flag(value: bool) -> wire::Flag {
    wire::Flag { value }
}

fn claimed_list(claimed: Vec<crate::item::Claimed>) -> wire::ClaimedList {
    wire::ClaimedList {
        claimed: claimed.into_iter().map(Into::into).collect(),
    }
}
