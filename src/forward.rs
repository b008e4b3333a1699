//! Store and forward (SPEC section 11, feature `forward`): an edge device
//! journals into its own [`EmbeddedQueue`] and a [`Forwarder`] hands the
//! items over to a fleet's [`RedisQueue`] whenever Redis can be reached,
//! exactly once.
//!
//! # How a batch moves
//!
//! 1. Read the next waiting items of the forwarded flows from the local
//!    file, in id order, after the file's forwarding mark: at most
//!    [`ForwardOptions::max_batch_items`] items and
//!    [`ForwardOptions::max_batch_bytes`] of payload (at least one item).
//!    Backlog, due and delayed items alike; pending (claimed by a local
//!    consumer), parked and dead items stay local and are passed over.
//! 2. One Redis script adds the batch and records, for this origin, the
//!    highest local id it took (`{ns}:forward:<origin>`). Ids at or below
//!    that mark are skipped, so a batch sent again (after a lost reply, a
//!    crash, a restart days later) journals nothing twice. With
//!    `min_replicas`, the script's write is followed by `WAIT`.
//! 3. Only then the local items are removed, and the file's mark raised, in
//!    one local transaction.
//!
//! A crash between 2 and 3 leaves the items in both places; the next batch
//! reads them again, Redis skips them, and they are removed locally. No
//! crash point loses an item or journals one twice in Redis.
//!
//! Items passed over while held locally (a local claim of a forwarded flow,
//! then a retry; a parked item then resumed; a redriven dead letter) are
//! "late": at or below the mark. They are read by a separate scan (when
//! nothing else waits, at most every [`ForwardOptions::late_interval`]) and
//! Redis remembers each late id it took in `{ns}:forward:late:<origin>`.
//!
//! # Flow control
//!
//! Batches are bounded in items and bytes; while Redis is unreachable, slow
//! (`Backend`), full (`Full`) or the local file fails (`Io`), the forwarder
//! backs off by [`ForwardOptions::backoff`] (a [`RetryPolicy`]: 100 ms
//! doubling up to 10 s by default, with jitter) and sends the same batch
//! again. It never spins: when nothing waits it sleeps until this
//! process's queue handle writes, or [`ForwardOptions::idle_wait`] passes.

use std::future::Future;
use std::time::Duration;

use crate::backend::redis::forward::Taken;
pub use crate::backend::redis::forward::check_origin;
use crate::error::{Error, Result};
use crate::handover::Outgoing;
pub use crate::handover::{Lag, LocalLag};
use crate::worker::RetryPolicy;
use crate::{EmbeddedQueue, RedisQueue, WorkQueue};

/// Default of [`ForwardOptions::max_batch_items`]: 256 items.
pub const DEFAULT_MAX_BATCH_ITEMS: usize = 256;
/// Default of [`ForwardOptions::max_batch_bytes`]: 1 MiB.
pub const DEFAULT_MAX_BATCH_BYTES: usize = 1024 * 1024;

/// Settings of a [`Forwarder`] (SPEC section 11).
#[derive(Debug, Clone)]
pub struct ForwardOptions {
    max_batch_items: usize,
    max_batch_bytes: usize,
    backoff: RetryPolicy,
    idle_wait: Duration,
    late_interval: Duration,
    lag_interval: Duration,
}

impl Default for ForwardOptions {
    fn default() -> Self {
        ForwardOptions {
            max_batch_items: DEFAULT_MAX_BATCH_ITEMS,
            max_batch_bytes: DEFAULT_MAX_BATCH_BYTES,
            backoff: RetryPolicy::default()
                .base(Duration::from_millis(100))
                .max_delay(Duration::from_secs(10)),
            idle_wait: Duration::from_secs(1),
            late_interval: Duration::from_secs(10),
            lag_interval: Duration::from_secs(1),
        }
    }
}

impl ForwardOptions {
    /// Most items in one batch (one Redis script call). Raised to 1.
    /// Default: 256.
    pub fn max_batch_items(mut self, n: usize) -> Self {
        self.max_batch_items = n.max(1);
        self
    }

    /// Most payload and flow bytes in one batch; a single larger item goes
    /// alone. Default: 1 MiB.
    pub fn max_batch_bytes(mut self, bytes: usize) -> Self {
        self.max_batch_bytes = bytes;
        self
    }

    /// The back-off after a failed batch: the wait after the n-th failure
    /// in a row is `backoff.next_delay(n)`. Default: 100 ms, doubling, at
    /// most 10 s, jitter 0.2.
    pub fn backoff(mut self, policy: RetryPolicy) -> Self {
        self.backoff = policy;
        self
    }

    /// The back-off policy ([`ForwardOptions::backoff`]).
    pub fn get_backoff(&self) -> RetryPolicy {
        self.backoff
    }

    /// How long [`Forwarder::run`] sleeps when nothing waits, unless this
    /// process writes to the local queue first. Default: 1 s.
    pub fn idle_wait(mut self, wait: Duration) -> Self {
        self.idle_wait = wait;
        self
    }

    /// How often, at most, an idle forwarder scans for late items (held
    /// locally when the mark passed them). Default: 10 s.
    pub fn late_interval(mut self, interval: Duration) -> Self {
        self.late_interval = interval;
        self
    }

    /// How often, at most, [`Forwarder::run`] recounts the lag for its
    /// progress reports. Default: 1 s.
    pub fn lag_interval(mut self, interval: Duration) -> Self {
        self.lag_interval = interval;
        self
    }
}

/// Where a server reads the forwarding lag of the queue file it serves
/// (SPEC sections 10 and 11, route `forward_lag`; see
/// `Server::forward_lag`, feature `server`). A server
/// without one answers that it cannot know (a Redis queue, say).
#[derive(Debug, Clone)]
pub struct LagSource {
    file: EmbeddedQueue,
    flows: Option<Vec<String>>,
    forwarding: bool,
}

impl LagSource {
    /// The lag of `file`, a file no forwarder of this process runs on
    /// (`workjournal work` or `serve`): counted over the flows a request
    /// names, else every flow.
    pub fn file(file: EmbeddedQueue) -> Self {
        LagSource {
            file,
            flows: None,
            forwarding: false,
        }
    }

    /// The lag of `file` while a forwarder of `flows` (empty: every flow,
    /// as [`Forwarder::flows`]) runs on it in this process: counted over
    /// those flows unless a request names others, and reported with
    /// [`LocalLag::forwarding`] set.
    pub fn forwarder(file: EmbeddedQueue, flows: Vec<String>) -> Self {
        LagSource {
            file,
            flows: (!flows.is_empty()).then_some(flows),
            forwarding: true,
        }
    }

    /// The lag over `flows` (`None` or empty: the source's own flows, see
    /// [`LagSource::forwarder`]), as [`local_lag`] reads it; the age is in
    /// ms by the file's clock.
    ///
    /// # Errors
    ///
    /// The local queue's errors (`Closed`, `Corrupt`, `Decode`, `Io`,
    /// `Storage`).
    pub async fn lag(&self, flows: Option<&[String]>) -> Result<LocalLag> {
        let flows = match flows {
            Some(f) if !f.is_empty() => Some(f),
            _ => self.flows.as_deref(),
        };
        let mut l = local_lag(&self.file, flows).await?;
        l.forwarding = self.forwarding;
        Ok(l)
    }
}

/// The forwarding lag of `local` without a Redis connection (SPEC section
/// 11, "Lag"; `workjournal stats` shows it): the items of `flows` (`None`:
/// every flow) waiting locally, the age of the oldest by the local clock,
/// in ms, and whether the file was ever forwarded. Works on a read-only
/// handle ([`EmbeddedOptions::read_only`](crate::EmbeddedOptions::read_only)).
///
/// # Errors
///
/// The local queue's errors (`Closed`, `Corrupt`, `Decode`, `Io`,
/// `Storage`).
pub async fn local_lag(local: &EmbeddedQueue, flows: Option<&[String]>) -> Result<LocalLag> {
    let u = local.forward_lag(flows).await?;
    let now = local.now_ms().await?;
    Ok(LocalLag {
        lag: Lag {
            count: u.count,
            oldest_age_ms: u.oldest_enqueued_at_ms.map(|t| now.saturating_sub(t)),
        },
        forwarded: u.forwarded,
        forwarding: false,
    })
}

/// What one [`Forwarder::forward_batch`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Batch {
    /// Items in the batch, all now out of the local queue.
    pub items: u64,
    /// Of those, items journaled in Redis.
    pub added: u64,
    /// Items whose dedup key Redis already held (a duplicate by the
    /// fleet's dedup window): taken, nothing journaled.
    pub duplicates: u64,
    /// Items Redis had taken before (the batch was sent again after a lost
    /// reply or a crash): nothing journaled.
    pub skipped: u64,
    /// Items removed from the local queue.
    pub removed: u64,
}

/// Totals of one [`Forwarder::run`], also handed to its progress callback.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Progress {
    /// Batches handed over.
    pub batches: u64,
    /// Items handed over (journaled, duplicate or skipped).
    pub items: u64,
    /// Items journaled in Redis.
    pub added: u64,
    /// Items taken as duplicates of a dedup key.
    pub duplicates: u64,
    /// Items Redis had taken before.
    pub skipped: u64,
    /// Failed attempts (each followed by a back-off).
    pub failures: u64,
    /// The last failure, until a batch succeeds again.
    pub last_error: Option<String>,
    /// The lag at the last count (at most every `lag_interval`).
    pub lag: Lag,
}

/// When [`Forwarder::run`] returns (besides its stop signal).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RunUntil {
    /// Run until stopped. The default.
    #[default]
    Stopped,
    /// Return once nothing of the forwarded flows waits locally (late
    /// items included). Items held locally (pending, parked, dead) are not
    /// waited for.
    Empty,
}

/// Hands the items of an [`EmbeddedQueue`] over to a [`RedisQueue`],
/// exactly once (SPEC section 11); see the module docs.
///
/// # Examples
///
/// ```no_run
/// use workjournal::{Config, EmbeddedQueue, RedisOptions, RedisQueue};
/// use workjournal::forward::{Forwarder, RunUntil};
/// # async fn run() -> workjournal::Result<()> {
/// let local = EmbeddedQueue::open("/var/lib/app/jobs.redb", Config::default()).await?;
/// let fleet = RedisQueue::connect("redis://central:6379/", "jobs", Config::default(),
///     RedisOptions::default()).await?;
/// let forwarder = Forwarder::new(local, fleet, "device-17").await?;
/// forwarder.run(RunUntil::Empty, std::future::pending(), |_| {}).await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Forwarder {
    local: EmbeddedQueue,
    remote: RedisQueue,
    origin: String,
    journal: u64,
    key: String,
    flows: Option<Vec<String>>,
    options: ForwardOptions,
}

impl Forwarder {
    /// A forwarder of every flow of `local` into `remote`, under the origin
    /// name `origin` (unique per queue file among the files forwarding into
    /// one namespace). Makes the file's journal id on first use.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for an origin name that is not 1 to 128 ASCII
    /// letters, digits, `.`, `_` or `-`; the local queue's errors.
    pub async fn new(local: EmbeddedQueue, remote: RedisQueue, origin: &str) -> Result<Self> {
        check_origin(origin)?;
        let journal = local.forward_journal().await?;
        let key = format!("forward_mark:{}{origin}", remote.prefix());
        Ok(Forwarder {
            local,
            remote,
            origin: origin.to_string(),
            journal,
            key,
            flows: None,
            options: ForwardOptions::default(),
        })
    }

    /// Forward only these flows (the default flow is `""`); the others stay
    /// for local consumers. Default: every flow. An empty list forwards
    /// every flow too.
    pub fn flows(mut self, flows: Vec<String>) -> Self {
        self.flows = if flows.is_empty() { None } else { Some(flows) };
        self
    }

    /// Use `options`. Default: [`ForwardOptions::default`].
    pub fn options(mut self, options: ForwardOptions) -> Self {
        self.options = options;
        self
    }

    /// The origin name.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// Where a server serving this forwarder's file reads its lag: over
    /// the flows it forwards ([`LagSource::forwarder`]).
    pub fn lag_source(&self) -> LagSource {
        LagSource::forwarder(self.local.clone(), self.flows.clone().unwrap_or_default())
    }

    /// Hand over the next batch (the items after the mark, in id order), or
    /// with `late` the next batch of late items. `Ok(None)` when nothing
    /// of that kind waits.
    ///
    /// # Errors
    ///
    /// `Backend` (Redis unreachable or slow: the outcome is unknown, and the
    /// next call sends the same batch, which Redis then skips), `Full` (the
    /// Redis queue's `max_backlog`: nothing taken), `InvalidInput` (another
    /// file forwards under this origin name; a payload over the Redis
    /// queue's `max_payload_bytes`), and the local queue's errors. After any
    /// of them the local queue is as it was.
    pub async fn forward_batch(&self, late: bool) -> Result<Option<Batch>> {
        let o = &self.options;
        let items: Vec<Outgoing> = self
            .local
            .forward_read(
                &self.key,
                self.flows.as_deref(),
                o.max_batch_items,
                o.max_batch_bytes,
                late,
            )
            .await?;
        if items.is_empty() {
            return Ok(None);
        }
        let taken: Taken = self
            .remote
            .take_forwarded(&self.origin, self.journal, &items)
            .await?;
        // A late batch leaves the mark where it is (0 never raises it).
        let mark = if late {
            0
        } else {
            items.iter().map(|i| i.id).max().unwrap_or(0)
        };
        let ids = items.iter().map(|i| i.id).collect();
        let removed = self.local.forward_done(&self.key, ids, mark).await?;
        Ok(Some(Batch {
            items: items.len() as u64,
            added: taken.added,
            duplicates: taken.duplicates,
            skipped: taken.skipped,
            removed,
        }))
    }

    /// What waits locally to be handed over.
    ///
    /// # Errors
    ///
    /// The local queue's errors.
    pub async fn lag(&self) -> Result<Lag> {
        Ok(local_lag(&self.local, self.flows.as_deref()).await?.lag)
    }

    /// Forward batch after batch until `stop` resolves (a batch in flight
    /// is finished first, so the local queue and Redis agree) or, with
    /// [`RunUntil::Empty`], until nothing waits. `progress` is called after
    /// every batch and every failure. Failures that may pass (`Backend`,
    /// `Full`, `Io`, `Storage`) back off and try again; others end the run.
    ///
    /// # Errors
    ///
    /// The first failure that is not retryable (`InvalidInput`, `Corrupt`,
    /// `Decode`, `Closed`); the totals so far are lost with it, the queue
    /// state is not.
    pub async fn run(
        &self,
        until: RunUntil,
        stop: impl Future<Output = ()>,
        mut progress: impl FnMut(&Progress),
    ) -> Result<Progress> {
        tokio::pin!(stop);
        let o = &self.options;
        let mut p = Progress::default();
        let mut failures_in_row = 0u32;
        let mut last_late: Option<tokio::time::Instant> = None;
        let mut last_lag: Option<tokio::time::Instant> = None;
        let mut stopped = false;
        while !stopped {
            let now = tokio::time::Instant::now();
            let late_due = last_late.is_none_or(|t| now.duration_since(t) >= o.late_interval);
            let attempt = async {
                match self.forward_batch(false).await? {
                    Some(b) => Ok(Some(b)),
                    None if late_due || until == RunUntil::Empty => self.forward_batch(true).await,
                    None => Ok(None),
                }
            };
            // A batch in flight is finished before the stop is obeyed.
            let outcome = attempt.await;
            match outcome {
                Ok(Some(b)) => {
                    failures_in_row = 0;
                    p.last_error = None;
                    p.batches += 1;
                    p.items += b.items;
                    p.added += b.added;
                    p.duplicates += b.duplicates;
                    p.skipped += b.skipped;
                    self.count_lag(&mut p, &mut last_lag).await;
                    progress(&p);
                    stopped = poll_now(&mut stop).await;
                }
                Ok(None) => {
                    failures_in_row = 0;
                    if late_due {
                        last_late = Some(now);
                    }
                    if until == RunUntil::Empty {
                        break;
                    }
                    tokio::select! {
                        () = &mut stop => stopped = true,
                        () = self.local.changed(o.idle_wait) => {}
                    }
                }
                Err(e) if e.is_retryable() && !matches!(e, Error::Locked { .. }) => {
                    failures_in_row = failures_in_row.saturating_add(1);
                    p.failures += 1;
                    let text = crate::error::one_line(&e);
                    tracing::warn!(origin = %self.origin, error = %text, "forwarding failed; backing off");
                    p.last_error = Some(text);
                    self.count_lag(&mut p, &mut last_lag).await;
                    progress(&p);
                    tokio::select! {
                        () = &mut stop => stopped = true,
                        () = tokio::time::sleep(o.backoff.next_delay(failures_in_row)) => {}
                    }
                }
                Err(e) => return Err(e),
            }
        }
        p.lag = self.lag().await?;
        progress(&p);
        Ok(p)
    }

    /// Recount the lag into `p` if the last count is `lag_interval` old:
    /// after the batch the progress reports, so that the lag it shows
    /// does not still hold the items just forwarded. A failing local read
    /// keeps the last count (the next batch fails too, and backs off).
    async fn count_lag(&self, p: &mut Progress, last: &mut Option<tokio::time::Instant>) {
        let now = tokio::time::Instant::now();
        if last.is_none_or(|t| now.duration_since(t) >= self.options.lag_interval) {
            if let Ok(lag) = self.lag().await {
                p.lag = lag;
            }
            *last = Some(now);
        }
    }
}

/// Whether `stop` has resolved, without waiting for it.
async fn poll_now(stop: &mut std::pin::Pin<&mut impl Future<Output = ()>>) -> bool {
    tokio::select! {
        biased;
        () = stop.as_mut() => true,
        () = std::future::ready(()) => false,
    }
}

#[cfg(all(test, feature = "testing"))]
mod tests {
    use std::time::Duration;

    use crate::{ClaimFrom, Config, EmbeddedQueue, NewItem, WorkQueue};

    /// A local consumer may claim, park, dead-letter or retry an item after
    /// its batch was read and before Redis's answer came back: the removal
    /// takes it out of whatever state it reached, and its lease is lost.
    #[tokio::test]
    async fn an_item_that_moved_between_read_and_removal_is_removed_from_where_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let local = EmbeddedQueue::open(dir.path().join("q.redb"), Config::default())
            .await
            .unwrap();
        let mut ids = Vec::new();
        for i in 0..5u8 {
            ids.push(local.add(NewItem::new(vec![i]).flow("a")).await.unwrap().id);
        }
        let read = local
            .forward_read("k", None, 10, 1 << 20, false)
            .await
            .unwrap();
        assert_eq!(read.iter().map(|o| o.id).collect::<Vec<_>>(), ids);
        let c = local
            .claim(4, Duration::ZERO, ClaimFrom::All)
            .await
            .unwrap();
        assert_eq!(c.len(), 4);
        local.park(c[0].receipt).await.unwrap();
        local
            .dead_letter(c[1].receipt, "failed here")
            .await
            .unwrap();
        let later = local.now_ms().await.unwrap() + 3_600_000;
        local.retry(c[2].receipt, later).await.unwrap();
        // c[3] stays pending; ids[4] waits in the backlog.
        let removed = local.forward_done("k", ids.clone(), ids[4]).await.unwrap();
        assert_eq!(removed, 5);
        assert!(local.audit().await.unwrap().is_empty());
        assert!(local.ack(c[3].receipt).await.unwrap_err().is_lease_lost());
        assert!(
            local
                .forward_read("k", None, 10, 1 << 20, true)
                .await
                .unwrap()
                .is_empty()
        );
        // Removing them again (a resent removal) finds nothing to remove.
        assert_eq!(local.forward_done("k", ids, 0).await.unwrap(), 0);
    }
}
