//! SPEC 13, Schedules (schema 6): the two storage primitives the
//! schedule operations are written over (`schedule::fire`). A swap is one
//! writer operation, so one redo record and one transaction: the items of
//! a slot and the move of the schedule's next fire time commit together
//! or not at all.

use redb::ReadableTable;

use super::{Ctx, Tables};
use crate::error::{Error, Result};
use crate::schedule::fire::{ScheduleRows, ScheduleScan, ScheduleSwap, StoredSchedule};

/// The meta counter of schedule generations.
const SCHEDULE_GENERATION: &str = "schedule_generation";

/// The fixed part of a `schedules` value: generation, due-index time and
/// last item, 8 bytes each.
const HEAD: usize = 24;

struct Row {
    generation: u64,
    index: Option<u64>,
    last_item: Option<u64>,
    record: Vec<u8>,
}

fn decode(name: &str, v: &[u8]) -> Result<Row> {
    let word = |i: usize| -> Result<u64> {
        v.get(i * 8..i * 8 + 8)
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .map(u64::from_le_bytes)
            .ok_or_else(|| Error::Decode {
                what: format!("schedule {name:?}"),
                detail: format!(
                    "a row of {} bytes is shorter than its {HEAD}-byte head",
                    v.len()
                ),
            })
    };
    let index = word(1)?;
    let last = word(2)?;
    Ok(Row {
        generation: word(0)?,
        index: (index != u64::MAX).then_some(index),
        last_item: (last != 0).then_some(last),
        record: v.get(HEAD..).unwrap_or_default().to_vec(),
    })
}

fn encode(r: &Row) -> Vec<u8> {
    let mut v = Vec::with_capacity(HEAD + r.record.len());
    v.extend_from_slice(&r.generation.to_le_bytes());
    v.extend_from_slice(&r.index.unwrap_or(u64::MAX).to_le_bytes());
    v.extend_from_slice(&r.last_item.unwrap_or(0).to_le_bytes());
    v.extend_from_slice(&r.record);
    v
}

fn stored(name: &str, r: Row) -> StoredSchedule {
    StoredSchedule {
        name: name.to_string(),
        generation: r.generation,
        last_item: r.last_item,
        record: r.record,
    }
}

impl Tables<'_> {
    fn schedule_row(&self, name: &str) -> Result<Option<Row>> {
        match self.schedules_t()?.get(name).ctx("read schedule")? {
            Some(v) => Ok(Some(decode(name, v.value())?)),
            None => Ok(None),
        }
    }

    /// Stored schedules: every one, one by name, or the due ones (not
    /// paused, next fire time at or before `now_ms`, soonest first, at most
    /// `limit`) with the soonest later fire time. Reads only: an idle
    /// queue's timers write nothing (SPEC 6, Idle).
    ///
    /// # Errors
    ///
    /// `Decode` for a damaged row; storage failures.
    pub(in crate::backend::embedded) fn schedule_load(
        &self,
        scan: &ScheduleScan,
    ) -> Result<ScheduleRows> {
        let mut out = ScheduleRows::default();
        match scan {
            ScheduleScan::All => {
                for entry in self.schedules_t()?.iter().ctx("list schedules")? {
                    let (k, v) = entry.ctx("list schedules")?;
                    out.rows
                        .push(stored(k.value(), decode(k.value(), v.value())?));
                }
            }
            ScheduleScan::One(name) => {
                if let Some(r) = self.schedule_row(name)? {
                    out.rows.push(stored(name, r));
                }
            }
            ScheduleScan::Due { now_ms, limit } => {
                let mut names = Vec::new();
                for entry in self.schedule_due_t()?.iter().ctx("read schedule_due")? {
                    let (k, _) = entry.ctx("read schedule_due")?;
                    let (t, name) = k.value();
                    if t > *now_ms {
                        out.later_ms = Some(t);
                        break;
                    }
                    if names.len() >= *limit {
                        break;
                    }
                    names.push(name.to_string());
                }
                for name in names {
                    if let Some(r) = self.schedule_row(&name)? {
                        out.rows.push(stored(&name, r));
                    }
                }
            }
        }
        Ok(out)
    }

    /// One compare-and-swap of a schedule with the items of its slots:
    /// `None`, and nothing written, when the stored generation is not
    /// `swap.expect` (0: absent).
    ///
    /// # Errors
    ///
    /// The adds' errors (`InvalidInput`, `Full`, before anything is
    /// written); `Decode`; storage failures.
    pub(in crate::backend::embedded) fn schedule_swap(
        &mut self,
        swap: &ScheduleSwap,
        now: u64,
    ) -> Result<Option<Vec<u64>>> {
        let current = self.schedule_row(&swap.name)?;
        if current.as_ref().map_or(0, |r| r.generation) != swap.expect {
            return Ok(None);
        }
        let items: Vec<_> = swap
            .items
            .iter()
            .map(|(item, slot)| (item.clone(), Some(*slot)))
            .collect();
        let ids: Vec<u64> = if items.is_empty() {
            Vec::new()
        } else {
            self.add(&items, now)?.iter().map(|a| a.id).collect()
        };
        if let Some(t) = current.as_ref().and_then(|r| r.index) {
            self.schedule_due_mut()?
                .remove((t, swap.name.as_str()))
                .ctx("write schedule_due")?;
        }
        match &swap.write {
            Some((index, record)) => {
                let generation = self.bump(SCHEDULE_GENERATION, 1)?;
                let row = Row {
                    generation,
                    index: *index,
                    last_item: ids.last().copied().or(current.and_then(|r| r.last_item)),
                    record: record.clone(),
                };
                self.schedules_mut()?
                    .insert(swap.name.as_str(), encode(&row).as_slice())
                    .ctx("write schedule")?;
                if let Some(t) = index {
                    self.schedule_due_mut()?
                        .insert((*t, swap.name.as_str()), ())
                        .ctx("write schedule_due")?;
                }
            }
            None => {
                self.schedules_mut()?
                    .remove(swap.name.as_str())
                    .ctx("delete schedule")?;
            }
        }
        Ok(Some(ids))
    }
}
