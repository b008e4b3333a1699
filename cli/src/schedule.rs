//! `workjournal schedule ...`: recurring items (SPEC 13). `work` and
//! `serve` fire them while they run.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use workjournal::{BoxQueue, CatchUp, Overlap, Schedule, ScheduleQueue, Spec};

use crate::args::parse_duration;
use crate::display::{preview, rfc3339, show_flow};
use crate::{CliError, CliResult, code};

/// The `schedule` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum ScheduleCommand {
    /// Create or replace schedule NAME (--cron EXPR [--tz TZ] or --every
    /// DURATION); it keeps its progress when replaced.
    Add(AddArgs),
    /// List the schedules with their next fire time, last fired slot and
    /// counts (needs only read access).
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Delete schedule NAME (the items it made stay).
    Remove {
        /// The schedule.
        name: String,
    },
    /// Stop schedule NAME from firing until it is resumed.
    Pause {
        /// The schedule.
        name: String,
    },
    /// Let schedule NAME fire again, from its next slot after now.
    Resume {
        /// The schedule.
        name: String,
    },
    /// Print the next fire times of schedule NAME (needs only read access).
    Next {
        /// The schedule.
        name: String,
        /// How many (at most 1000).
        #[arg(long, default_value_t = 5)]
        count: usize,
    },
}

impl ScheduleCommand {
    /// Whether the subcommand may create the queue file (`add`, as the
    /// top-level `add` does).
    pub(crate) fn creates(&self) -> bool {
        matches!(self, ScheduleCommand::Add(_))
    }

    /// Whether the subcommand only looks.
    pub(crate) fn looks_only(&self) -> bool {
        matches!(
            self,
            ScheduleCommand::List { .. } | ScheduleCommand::Next { .. }
        )
    }
}

/// `schedule add`.
#[derive(Debug, Args)]
pub(crate) struct AddArgs {
    /// The schedule's name (unique in the queue).
    name: String,
    /// A cron expression: 5 fields (minute hour day month weekday), or 6
    /// with seconds first.
    #[arg(
        long,
        value_name = "EXPR",
        required_unless_present = "every",
        conflicts_with = "every"
    )]
    cron: Option<String>,
    /// The IANA time zone the cron expression is read in.
    #[arg(long, value_name = "TZ", default_value = "UTC", requires = "cron")]
    tz: String,
    /// A fixed interval instead (30s, 5m, 1h), counted from the Unix epoch.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    every: Option<Duration>,
    /// The flow its items join.
    #[arg(long, value_name = "F", default_value = "")]
    flow: String,
    /// Priority tier 0-255 of its items.
    #[arg(long, value_name = "N", default_value_t = 0)]
    priority: u8,
    /// Missed slots: skip (next future slot only), latest (one item for the
    /// latest missed slot) or all:N (every missed slot, at most N).
    #[arg(long, value_name = "POLICY", default_value = "latest", value_parser = parse_catch_up)]
    catch_up: CatchUp,
    /// allow, or skip: no new item while the previous one is unfinished.
    #[arg(long, value_name = "POLICY", default_value = "allow", value_parser = parse_overlap)]
    overlap: Overlap,
    /// The payload of its items (default: empty).
    #[arg(conflicts_with = "file")]
    payload: Option<String>,
    /// Read the payload from file F.
    #[arg(long, value_name = "F")]
    file: Option<PathBuf>,
}

fn parse_catch_up(s: &str) -> Result<CatchUp, String> {
    match s.trim() {
        "skip" => Ok(CatchUp::Skip),
        "latest" => Ok(CatchUp::Latest),
        other => match other.strip_prefix("all:") {
            Some(n) => match n.parse::<u32>() {
                Ok(cap) if cap > 0 => Ok(CatchUp::All { cap }),
                _ => Err(format!(
                    "{n:?} is not a cap; expected all:N with N at least 1"
                )),
            },
            None => Err(format!("{other:?}: expected skip, latest or all:N")),
        },
    }
}

fn parse_overlap(s: &str) -> Result<Overlap, String> {
    match s.trim() {
        "allow" => Ok(Overlap::Allow),
        "skip" => Ok(Overlap::Skip),
        other => Err(format!("{other:?}: expected allow or skip")),
    }
}

fn spec_text(spec: &Spec) -> String {
    match spec {
        Spec::Cron { expr, tz } => format!("cron {expr} {tz}"),
        Spec::Every { every_ms } => {
            format!(
                "every {}",
                humantime::format_duration(Duration::from_millis(*every_ms))
            )
        }
        _ => "?".to_string(),
    }
}

fn when(ms: Option<u64>) -> String {
    ms.map_or_else(|| "-".to_string(), rfc3339)
}

/// Run a `schedule` subcommand on `queue`.
pub(crate) async fn run(queue: &BoxQueue, command: ScheduleCommand) -> CliResult {
    let mut out = std::io::stdout();
    match command {
        ScheduleCommand::Add(a) => {
            let payload = match (&a.payload, &a.file) {
                (Some(p), _) => p.clone().into_bytes(),
                (None, Some(f)) => std::fs::read(f).map_err(|e| {
                    CliError::new(code::INPUT, format!("cannot read {}: {e}", f.display()))
                })?,
                (None, None) => Vec::new(),
            };
            let schedule = match (&a.cron, a.every) {
                (Some(expr), _) => Schedule::cron(a.name.clone(), expr.clone(), a.tz.clone())?,
                (None, Some(every)) => Schedule::every(a.name.clone(), every)?,
                (None, None) => {
                    return Err(CliError::new(
                        code::USAGE,
                        "give --cron EXPR or --every DURATION",
                    ));
                }
            }
            .payload(payload)
            .flow(a.flow)
            .priority(a.priority)
            .catch_up(a.catch_up)
            .overlap(a.overlap);
            let created = queue.upsert_schedule(schedule).await?;
            let next = queue.preview_schedule(&a.name, 1).await?;
            writeln!(
                out,
                "{} {}; next {}",
                if created { "added" } else { "replaced" },
                a.name,
                when(next.first().copied())
            )
            .map_err(CliError::output)
        }
        ScheduleCommand::List { json } => {
            let list = queue.schedules().await?;
            if json {
                let rows: Vec<serde_json::Value> = list
                    .iter()
                    .map(|s| {
                        serde_json::json!({
                            "name": s.schedule.name(),
                            "spec": s.schedule.spec(),
                            "flow": s.schedule.get_flow(),
                            "next_fire_ms": s.next_fire_ms,
                            "last_fired_ms": s.last_fired_ms,
                            "last_item": s.last_item,
                            "fired": s.fired,
                            "skipped": s.skipped,
                            "paused": s.paused,
                        })
                    })
                    .collect();
                return writeln!(out, "{}", serde_json::Value::Array(rows))
                    .map_err(CliError::output);
            }
            for s in list {
                let state = if s.paused {
                    "paused"
                } else if s.next_fire_ms.is_none() {
                    "ended"
                } else {
                    "active"
                };
                writeln!(
                    out,
                    "{}\t{}\t{}\tnext {}\tlast {}\tfired {}\tskipped {}\t{}\t{}",
                    s.schedule.name(),
                    spec_text(s.schedule.spec()),
                    state,
                    when(s.next_fire_ms),
                    when(s.last_fired_ms),
                    s.fired,
                    s.skipped,
                    show_flow(s.schedule.get_flow()),
                    preview(s.schedule.get_payload())
                )
                .map_err(CliError::output)?;
            }
            Ok(())
        }
        ScheduleCommand::Remove { name } => found(queue.remove_schedule(&name).await?, &name),
        ScheduleCommand::Pause { name } => found(queue.pause_schedule(&name).await?, &name),
        ScheduleCommand::Resume { name } => found(queue.resume_schedule(&name).await?, &name),
        ScheduleCommand::Next { name, count } => {
            for t in queue.preview_schedule(&name, count).await? {
                writeln!(out, "{}", rfc3339(t)).map_err(CliError::output)?;
            }
            Ok(())
        }
    }
}

fn found(yes: bool, name: &str) -> CliResult {
    if yes {
        Ok(())
    } else {
        Err(CliError::new(
            code::NOT_FOUND,
            format!("no schedule named {name:?}"),
        ))
    }
}
