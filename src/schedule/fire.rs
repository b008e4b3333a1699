//! The schedule operations written once over two storage primitives each
//! storage backend has (SPEC 13, Exactly once):
//!
//! - `schedule_load`: stored schedule records (all, one by name, or those
//!   due by a time), each with its generation;
//! - `schedule_swap`: in one transaction, if the named record is still at
//!   the generation the caller read (0: absent), add the given items
//!   (delayed until their slots) and write the new record (or delete it),
//!   under a new generation from a queue-wide counter that never repeats.
//!
//! A slot fires only through a swap that moves the record's next fire time
//! past it, and a swap commits only from the generation the plan was made
//! on: of two firers that read the same record one commits and the other
//! reloads and finds the slot gone. The items and the move are one write,
//! so a crash leaves both or neither.

use serde::{Deserialize, Serialize};

use super::{CatchUp, Fired, FiredSchedule, MAX_SCHEDULE_PREVIEW, Overlap, Schedule, ScheduleInfo};
use crate::browse::ItemState;
use crate::error::{Error, Result};
use crate::item::NewItem;
use std::future::Future;

use crate::browse::ListedItem;
use crate::queue::Backend;

/// The version byte of a stored schedule record.
const RECORD_VERSION: u8 = 1;

/// How often a firer or an operation retries after losing a race to
/// another writer of the same schedule before it reports a conflict.
const MAX_RETRIES: usize = 16;

/// What the schedule operations need of a queue: its clock, the two
/// primitives, and `find` (for [`Overlap::Skip`]). Every storage backend
/// is one; so is the reference model of the op runner
/// (`testing::ops`), through a wrapper whose futures are ready at once.
pub(crate) trait Store: Sync {
    fn now(&self) -> impl Future<Output = Result<u64>> + Send;
    fn load(&self, scan: ScheduleScan) -> impl Future<Output = Result<ScheduleRows>> + Send;
    fn swap(&self, swap: ScheduleSwap) -> impl Future<Output = Result<Option<Vec<u64>>>> + Send;
    fn find_item(&self, id: u64) -> impl Future<Output = Result<Option<ListedItem>>> + Send;
    /// Several swaps, each answered as by `swap`; one call per firing.
    fn swap_many(
        &self,
        swaps: Vec<ScheduleSwap>,
    ) -> impl Future<Output = Result<Vec<Result<Option<Vec<u64>>>>>> + Send {
        swap_each(swaps, |s| self.swap(s))
    }
}

/// Each swap of `swaps` through `swap`, concurrently, answered in order: a
/// store's `swap_many` when it has no call that commits several at once.
pub(crate) async fn swap_each<F, Fut>(
    swaps: Vec<ScheduleSwap>,
    swap: F,
) -> Result<Vec<Result<Option<Vec<u64>>>>>
where
    F: Fn(ScheduleSwap) -> Fut,
    Fut: Future<Output = Result<Option<Vec<u64>>>>,
{
    Ok(join_all(swaps.into_iter().map(swap).collect()).await)
}

impl<B: Backend> Store for B {
    fn now(&self) -> impl Future<Output = Result<u64>> + Send {
        self.now_ms()
    }
    fn load(&self, scan: ScheduleScan) -> impl Future<Output = Result<ScheduleRows>> + Send {
        self.schedule_load(scan)
    }
    fn swap(&self, swap: ScheduleSwap) -> impl Future<Output = Result<Option<Vec<u64>>>> + Send {
        self.schedule_swap(swap)
    }
    fn find_item(&self, id: u64) -> impl Future<Output = Result<Option<ListedItem>>> + Send {
        self.find(id)
    }
    fn swap_many(
        &self,
        swaps: Vec<ScheduleSwap>,
    ) -> impl Future<Output = Result<Vec<Result<Option<Vec<u64>>>>>> + Send {
        self.schedule_swap_many(swaps)
    }
}

/// Which stored schedules to load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ScheduleScan {
    /// Every schedule, by name.
    All,
    /// The one of this name, if any.
    One(String),
    /// The ones not paused whose next fire time is at or before this time
    /// (ms), soonest first, at most `limit`.
    Due { now_ms: u64, limit: usize },
}

/// One stored schedule: its name, generation and record bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoredSchedule {
    pub(crate) name: String,
    pub(crate) generation: u64,
    /// The id of the last item a swap of this schedule added, kept by the
    /// backend (the swap learns ids only as it adds the items).
    pub(crate) last_item: Option<u64>,
    pub(crate) record: Vec<u8>,
}

/// What a load found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct ScheduleRows {
    pub(crate) rows: Vec<StoredSchedule>,
    /// For [`ScheduleScan::Due`]: the soonest next fire time after `now_ms`
    /// of any schedule not paused.
    pub(crate) later_ms: Option<u64>,
}

/// One compare-and-swap of a schedule record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ScheduleSwap {
    pub(crate) name: String,
    /// The generation the caller read; 0: the name must be absent.
    pub(crate) expect: u64,
    /// The new record and its due-index time (`None`: paused or ended, in
    /// no index); `None` deletes the schedule.
    pub(crate) write: Option<(Option<u64>, Vec<u8>)>,
    /// Items to add, each delayed until its slot (ms); the last one's id
    /// becomes the stored `last_item` (kept as it was when there are
    /// none).
    pub(crate) items: Vec<(NewItem, u64)>,
}

/// The stored state of one schedule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct State {
    pub(crate) schedule: Schedule,
    pub(crate) next_ms: Option<u64>,
    pub(crate) last_slot_ms: Option<u64>,
    pub(crate) fired: u64,
    pub(crate) skipped: u64,
    pub(crate) paused: bool,
}

impl State {
    pub(crate) fn encode(&self) -> Result<Vec<u8>> {
        let mut out = vec![RECORD_VERSION];
        let body = bincode::serde::encode_to_vec(self, bincode::config::standard())
            .map_err(|e| Error::invalid(format!("schedule does not encode: {e}")))?;
        out.extend_from_slice(&body);
        Ok(out)
    }

    pub(crate) fn decode(name: &str, bytes: &[u8]) -> Result<State> {
        let bad = |detail: String| Error::Decode {
            what: format!("schedule {name:?}"),
            detail,
        };
        match bytes.split_first() {
            Some((&RECORD_VERSION, body)) => {
                let (s, _) = bincode::serde::decode_from_slice::<State, _>(
                    body,
                    bincode::config::standard(),
                )
                .map_err(|e| bad(e.to_string()))?;
                Ok(s)
            }
            Some((v, _)) => Err(bad(format!(
                "record version {v} is newer than this build's"
            ))),
            None => Err(bad("empty record".into())),
        }
    }

    /// The due-index time: the next fire time unless paused or ended.
    pub(crate) fn index_ms(&self) -> Option<u64> {
        if self.paused { None } else { self.next_ms }
    }

    fn info(self, last_item: Option<u64>) -> ScheduleInfo {
        ScheduleInfo {
            schedule: self.schedule,
            next_fire_ms: self.next_ms,
            last_fired_ms: self.last_slot_ms,
            last_item,
            fired: self.fired,
            skipped: self.skipped,
            paused: self.paused,
        }
    }

    /// Whether the run limit is used up.
    fn spent(&self) -> bool {
        self.schedule.limit.is_some_and(|l| self.fired >= l)
    }
}

fn conflict(name: &str) -> Error {
    Error::backend(format!(
        "schedule {name:?} changed {MAX_RETRIES} times while this operation ran; try again"
    ))
}

async fn load_one<B: Store>(b: &B, name: &str) -> Result<Option<(u64, State)>> {
    let rows = b.load(ScheduleScan::One(name.to_string())).await?;
    match rows.rows.into_iter().find(|r| r.name == name) {
        Some(r) => Ok(Some((r.generation, State::decode(&r.name, &r.record)?))),
        None => Ok(None),
    }
}

async fn swap<B: Store>(
    b: &B,
    name: &str,
    expect: u64,
    state: Option<&State>,
    items: Vec<(NewItem, u64)>,
) -> Result<Option<Vec<u64>>> {
    let write = match state {
        Some(s) => Some((s.index_ms(), s.encode()?)),
        None => None,
    };
    b.swap(ScheduleSwap {
        name: name.to_string(),
        expect,
        write,
        items,
    })
    .await
}

/// SPEC 13: create or replace the schedule of `schedule.name()`; true
/// when it was created. A replaced schedule keeps its progress (last
/// slot, counts, paused): its next fire time is the new spec's first slot
/// after the last fired one, or, if none fired, at or after the slot it
/// was waiting for (a due slot is not dropped) or now.
pub(crate) async fn upsert<B: Store>(b: &B, schedule: Schedule) -> Result<bool> {
    schedule.check()?;
    let slots = schedule.slots()?;
    let name = schedule.name.clone();
    for _ in 0..MAX_RETRIES {
        let now = b.now().await?;
        let old = load_one(b, &name).await?;
        let (expect, state) = match &old {
            Some((g, old)) => {
                let from = match (old.last_slot_ms, old.next_ms) {
                    (Some(l), _) => l.saturating_add(1),
                    (None, Some(n)) => n.min(now),
                    (None, None) => now,
                };
                let mut s = State {
                    schedule: schedule.clone(),
                    next_ms: slots.first_at_or_after(from)?,
                    ..old.clone()
                };
                if s.spent() {
                    s.next_ms = None;
                }
                (*g, s)
            }
            None => (
                0,
                State {
                    schedule: schedule.clone(),
                    next_ms: slots.first_at_or_after(now)?,
                    last_slot_ms: None,
                    fired: 0,
                    skipped: 0,
                    paused: false,
                },
            ),
        };
        if swap(b, &name, expect, Some(&state), Vec::new())
            .await?
            .is_some()
        {
            return Ok(old.is_none());
        }
    }
    Err(conflict(&name))
}

/// SPEC 13: delete schedule `name`; false when there is none. Items it
/// already made stay.
pub(crate) async fn remove<B: Store>(b: &B, name: &str) -> Result<bool> {
    for _ in 0..MAX_RETRIES {
        let Some((g, _)) = load_one(b, name).await? else {
            return Ok(false);
        };
        if swap(b, name, g, None, Vec::new()).await?.is_some() {
            return Ok(true);
        }
    }
    Err(conflict(name))
}

/// SPEC 13: pause (`pause`) or resume schedule `name`; false when there
/// is none. A resumed schedule goes on with its first slot at or after
/// now (and after its last fired one): the slots of the pause are not
/// caught up.
pub(crate) async fn set_paused<B: Store>(b: &B, name: &str, pause: bool) -> Result<bool> {
    for _ in 0..MAX_RETRIES {
        let now = b.now().await?;
        let Some((g, mut s)) = load_one(b, name).await? else {
            return Ok(false);
        };
        if s.paused == pause {
            return Ok(true);
        }
        s.paused = pause;
        if !pause && !s.spent() {
            let from = match s.last_slot_ms {
                Some(l) => now.max(l.saturating_add(1)),
                None => now,
            };
            if s.next_ms.is_some() {
                s.next_ms = s.schedule.slots()?.first_at_or_after(from)?;
            }
        }
        if swap(b, name, g, Some(&s), Vec::new()).await?.is_some() {
            return Ok(true);
        }
    }
    Err(conflict(name))
}

/// SPEC 13: every schedule with its progress, by name.
pub(crate) async fn list<B: Store>(b: &B) -> Result<Vec<ScheduleInfo>> {
    let rows = b.load(ScheduleScan::All).await?;
    let mut out = rows
        .rows
        .into_iter()
        .map(|r| State::decode(&r.name, &r.record).map(|s| s.info(r.last_item)))
        .collect::<Result<Vec<_>>>()?;
    out.sort_by(|a, b| a.schedule.name.cmp(&b.schedule.name));
    Ok(out)
}

/// SPEC 13: the next `count` fire times of schedule `name` from its next
/// one (at most [`MAX_SCHEDULE_PREVIEW`], fewer when it ends sooner).
///
/// # Errors
///
/// `InvalidInput` when there is no schedule `name`.
pub(crate) async fn preview<B: Store>(b: &B, name: &str, count: usize) -> Result<Vec<u64>> {
    let Some((_, s)) = load_one(b, name).await? else {
        return Err(Error::invalid(format!("no schedule named {name:?}")));
    };
    let Some(next) = s.next_ms else {
        return Ok(Vec::new());
    };
    let left = match s.schedule.limit {
        Some(l) => usize::try_from(l.saturating_sub(s.fired)).unwrap_or(usize::MAX),
        None => usize::MAX,
    };
    s.schedule
        .fire_times(next, count.min(MAX_SCHEDULE_PREVIEW).min(left))
}

/// The slots one firing makes and what the record becomes.
struct Plan {
    slots: Vec<u64>,
    state: State,
}

/// Plan the firing of `s` at `now`, or `None` when nothing is due.
fn plan(s: &State, now: u64, previous_open: bool) -> Result<Option<Plan>> {
    let Some(next) = s.index_ms() else {
        return Ok(None);
    };
    if next > now {
        return Ok(None);
    }
    let slots = s.schedule.slots()?;
    let latest = slots
        .last_at_or_before(now)?
        .filter(|l| *l >= next)
        .unwrap_or(next);
    let mut due = match s.schedule.catch_up {
        CatchUp::Latest => vec![latest],
        CatchUp::Skip => {
            if now.saturating_sub(latest) <= super::SCHEDULE_SKIP_GRACE_MS {
                vec![latest]
            } else {
                Vec::new()
            }
        }
        CatchUp::All { cap } => {
            let mut back = vec![latest];
            let mut at = latest;
            while back.len() < cap.max(1) as usize && at > next {
                match slots.last_at_or_before(at - 1)? {
                    Some(p) if p >= next => {
                        back.push(p);
                        at = p;
                    }
                    _ => break,
                }
            }
            back.reverse();
            back
        }
    };
    let due_count = count_slots(&slots, next, latest, &due)?;
    if s.schedule.overlap == Overlap::Skip && previous_open {
        due.clear();
    }
    if let Some(limit) = s.schedule.limit {
        let left = usize::try_from(limit.saturating_sub(s.fired)).unwrap_or(usize::MAX);
        due.truncate(left);
    }
    let made = due.len() as u64;
    let mut state = s.clone();
    state.fired += made;
    state.skipped += due_count.saturating_sub(made);
    if let Some(&last) = due.last() {
        state.last_slot_ms = Some(last);
    }
    state.next_ms = if state.spent() {
        None
    } else {
        slots.first_at_or_after(now.saturating_add(1))?
    };
    Ok(Some(Plan { slots: due, state }))
}

/// How many slots lie from `next` to `latest`: exact up to a thousand,
/// then at least the ones being fired plus one (counting a long downtime
/// slot by slot is not worth its time).
fn count_slots(slots: &super::Slots, next: u64, latest: u64, firing: &[u64]) -> Result<u64> {
    let mut n = 0u64;
    let mut at = next;
    while at <= latest {
        n += 1;
        if n >= 1_000 {
            return Ok(n.max(firing.len() as u64 + 1));
        }
        match slots.first_at_or_after(at.saturating_add(1))? {
            Some(t) if t > at => at = t,
            _ => break,
        }
    }
    Ok(n)
}

/// Whether item `id` is still in the queue and not finished (SPEC 13,
/// Overlap): anything but a dead letter, a kept finished item (SPEC 3,
/// History) or gone.
async fn open<B: Store>(b: &B, id: Option<u64>) -> Result<bool> {
    let Some(id) = id else {
        return Ok(false);
    };
    Ok(match b.find_item(id).await? {
        Some(l) => l.state != ItemState::DeadLetter && !l.state.is_finished(),
        None => false,
    })
}

/// The most due schedules one call fires (a firer that finds more calls
/// again at once).
const FIRE_BATCH: usize = 256;

/// SPEC 13: fire every due schedule: for each, the items of its due slots
/// and its new next fire time in one swap.
pub(crate) async fn fire<B: Store>(b: &B) -> Result<Fired> {
    let now = b.now().await?;
    let rows = b
        .load(ScheduleScan::Due {
            now_ms: now,
            limit: FIRE_BATCH,
        })
        .await?;
    let mut next = rows.later_ms;
    let full = rows.rows.len() >= FIRE_BATCH;
    // Plan every due schedule (the overlap checks run concurrently), then
    // commit the plans in one call: the embedded writer commits them in
    // one transaction and one sync, Redis in one script call, so ten
    // thousand schedules due in the same second take a few commits, not
    // ten thousand. A plan that lost a race to another firer or an upsert
    // is made again from the stored record, alone.
    let decoded = rows
        .rows
        .into_iter()
        .map(|row| State::decode(&row.name, &row.record).map(|s| (row, s)))
        .collect::<Result<Vec<_>>>()?;
    let opens = join_all(
        decoded
            .iter()
            .map(|(row, s)| previous_open(b, s, row.last_item))
            .collect(),
    )
    .await;
    let mut done: Vec<(usize, String, OneFiring)> = Vec::new();
    let mut planned = Vec::new();
    for (at, ((row, s), open)) in decoded.into_iter().zip(opens).enumerate() {
        match plan(&s, now, open?)? {
            Some(p) => planned.push((at, row, s.schedule.item(), p)),
            None => done.push((at, row.name, (0, s.index_ms(), None))),
        }
    }
    let mut swaps = Vec::with_capacity(planned.len());
    for (_, row, template, p) in &planned {
        swaps.push(ScheduleSwap {
            name: row.name.clone(),
            expect: row.generation,
            write: Some((p.state.index_ms(), p.state.encode()?)),
            items: p.slots.iter().map(|t| (template.clone(), *t)).collect(),
        });
    }
    let committed = b.swap_many(swaps).await?;
    if committed.len() != planned.len() {
        return Err(Error::backend(format!(
            "{} swaps answered for {} schedules",
            committed.len(),
            planned.len()
        )));
    }
    let mut lost = Vec::new();
    for ((at, row, _, p), answer) in planned.into_iter().zip(committed) {
        match answer? {
            Some(ids) => {
                let last = if ids.is_empty() {
                    None
                } else {
                    p.slots.last().copied()
                };
                done.push((at, row.name, (ids.len() as u64, p.state.index_ms(), last)));
            }
            None => lost.push((at, row.name)),
        }
    }
    let again = join_all(lost.iter().map(|(_, name)| refire(b, name, now)).collect()).await;
    for ((at, name), one) in lost.into_iter().zip(again) {
        done.push((at, name, one?));
    }
    done.sort_by_key(|d| d.0);
    let mut items = 0u64;
    let mut parts = Vec::new();
    for (_, name, (made, row_next, last_slot)) in done {
        items += made;
        next = min_opt(next, row_next);
        if let Some(slot) = last_slot {
            parts.push(FiredSchedule::new(name, made, now.saturating_sub(slot)));
        }
    }
    if full {
        // More may be due: ask to be called again at once.
        next = Some(now);
    }
    Ok(Fired::new(items, next).with_schedules(parts))
}

/// What firing one schedule came to: the items made, its new due-index
/// time, and the latest slot that made an item.
type OneFiring = (u64, Option<u64>, Option<u64>);

/// Whether `last_item`, the last item of schedule `s`, is still open, when
/// its overlap policy is [`Overlap::Skip`] (else not asked: false).
async fn previous_open<B: Store>(b: &B, s: &State, last_item: Option<u64>) -> Result<bool> {
    if s.schedule.overlap == Overlap::Skip {
        open(b, last_item).await
    } else {
        Ok(false)
    }
}

/// Fire schedule `name` alone from its stored record (after its plan in a
/// firing's batch lost a race).
async fn refire<B: Store>(b: &B, name: &str, now: u64) -> Result<OneFiring> {
    match b
        .load(ScheduleScan::One(name.to_string()))
        .await?
        .rows
        .pop()
    {
        Some(row) => fire_one(b, row, now).await,
        None => Ok((0, None, None)),
    }
}

/// Run `futs` concurrently on the caller's task and give their outputs
/// in order (a `join_all` without a dependency; each wake polls the ones
/// not done yet).
pub(crate) async fn join_all<F: Future>(futs: Vec<F>) -> Vec<F::Output> {
    use std::task::Poll;
    let mut futs: Vec<std::pin::Pin<Box<F>>> = futs.into_iter().map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = futs.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (f, slot) in futs.iter_mut().zip(out.iter_mut()) {
            if slot.is_none() {
                match f.as_mut().poll(cx) {
                    Poll::Ready(v) => *slot = Some(v),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    out.into_iter().flatten().collect()
}

fn min_opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

/// Fire one due schedule: the items made, its new due-index time, and the
/// latest slot that made an item.
async fn fire_one<B: Store>(
    b: &B,
    mut row: StoredSchedule,
    now: u64,
) -> Result<(u64, Option<u64>, Option<u64>)> {
    for _ in 0..MAX_RETRIES {
        let s = State::decode(&row.name, &row.record)?;
        let Some(p) = plan(&s, now, previous_open(b, &s, row.last_item).await?)? else {
            return Ok((0, s.index_ms(), None));
        };
        let template = s.schedule.item();
        let items: Vec<(NewItem, u64)> = p.slots.iter().map(|t| (template.clone(), *t)).collect();
        let state = p.state;
        match swap(b, &row.name, row.generation, Some(&state), items).await? {
            Some(ids) => {
                let last = if ids.is_empty() {
                    None
                } else {
                    p.slots.last().copied()
                };
                return Ok((ids.len() as u64, state.index_ms(), last));
            }
            None => match b
                .load(ScheduleScan::One(row.name.clone()))
                .await?
                .rows
                .pop()
            {
                Some(r) => row = r,
                None => return Ok((0, None, None)),
            },
        }
    }
    Err(conflict(&row.name))
}
