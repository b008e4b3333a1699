//! The command line, as clap derive types.

use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::{Args, Parser, Subcommand};

const EXIT_CODES: &str = "\
Exit codes:
  0    success (also: output cut short by a closed pipe; work stopped by Ctrl-C,
       SIGTERM or SIGHUP)
  1    any other failure (disk, permissions, --db names a directory, a device
       or FIFO, or a path in a missing directory)
  2    usage: bad flag, duration, time or --redis URL; a backend this build lacks
  3    an input file is missing or unreadable; no queue file (every command
       but add and serve, which alone create one)
  4    the queue file is locked by another process that serves no socket
       (serve: another process owns it)
  5    the queue file is corrupt (not a queue, or damaged)
  6    Redis or the serving process is unreachable or failed
  7    the queue refused the input (payload too large, empty flow name, a flow
       name with control characters or over 256 bytes)
  8    the queue is full
  9    nothing to act on (no such dead letter, nothing parked, resume of a
       flow that is not paused, no outcome for result)
  10   work --until-empty finished, but items were dead-lettered in the run;
       add --wait / result: the item was dead-lettered (the reason is on stderr)
  11   add --wait: --timeout ran out before the item finished
  12   add --wait / result: the item was cancelled
  75   (from a work --exec command, not from workjournal) back this item's
       flow off: the item is given back and the flow held for every worker
       for the time its last stderr line names (retry-after: 30s), else
       --backoff
  130  work stopped at once by a second Ctrl-C";

/// A durable work queue: every item is journaled before it runs and removed
/// only when its command succeeds.
#[derive(Debug, Parser)]
#[command(name = "workjournal", version, after_help = EXIT_CODES)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) global: Global,
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Where the queue lives. Under a heading of their own in every
/// subcommand's `--help`, apart from the subcommand's options.
#[derive(Debug, Args)]
#[command(next_help_heading = "Global options")]
pub(crate) struct Global {
    /// The queue file (embedded backend), created by the first `add` (or by
    /// `serve`); every other command refuses a missing one. When a `workjournal serve` or
    /// `work` process serves it, every command goes through that process.
    /// Also takes unix:SOCKET or http://HOST:PORT (a server; token in
    /// WORKJOURNAL_TOKEN).
    #[arg(
        long,
        global = true,
        value_name = "PATH",
        default_value = "./workjournal.redb"
    )]
    pub(crate) db: PathBuf,
    /// Use the Redis server at URL instead of a file (needs the `redis`
    /// feature), e.g. redis://127.0.0.1:6379/0.
    #[arg(long, global = true, value_name = "URL")]
    pub(crate) redis: Option<String>,
    /// The Redis key prefix: two namespaces never see each other's items.
    #[arg(long, global = true, value_name = "NS", default_value = "workjournal")]
    pub(crate) namespace: String,
    /// With a rediss:// URL: trust only this CA certificate (PEM file)
    /// instead of the system's roots.
    #[arg(long, global = true, value_name = "FILE", requires = "redis")]
    pub(crate) redis_ca: Option<PathBuf>,
    /// With a rediss:// URL: present this client certificate chain (PEM
    /// file), for servers that require client certificates.
    #[arg(
        long,
        global = true,
        value_name = "FILE",
        requires_all = ["redis", "redis_key"]
    )]
    pub(crate) redis_cert: Option<PathBuf>,
    /// The private key (PEM file) of --redis-cert.
    #[arg(
        long,
        global = true,
        value_name = "FILE",
        requires_all = ["redis", "redis_cert"]
    )]
    pub(crate) redis_key: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Queue one item (PAYLOAD, --file, or stdin), or one per line with --lines.
    Add(AddArgs),
    /// Run a shell command for every item until stopped (Ctrl-C) or empty.
    Work(WorkArgs),
    /// Show how many items are in each state (needs only read access).
    Stats {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Print again every second until Ctrl-C (holds the queue file open).
        #[arg(long)]
        watch: bool,
        /// Count the forwarding lag over this flow only (repeat for more; ""
        /// is the default flow), as `forward --flow` forwards it; also shows
        /// the lag of a file never forwarded yet. Default: every flow, and
        /// the lag only once the file has been forwarded.
        #[arg(long = "forward-flow", value_name = "FLOW")]
        forward_flows: Vec<String>,
    },
    /// Show the next N items a worker would take, without taking them
    /// (needs only read access).
    Peek {
        /// How many.
        #[arg(default_value_t = 10)]
        n: usize,
        /// Print JSON: `payload` is the text (null when not UTF-8),
        /// `payload_base64` the bytes.
        #[arg(long)]
        json: bool,
    },
    /// Show the N newest dead letters with their reasons (needs only read
    /// access).
    DeadLetters {
        /// How many.
        #[arg(default_value_t = 10)]
        n: usize,
        /// Print JSON: `payload` is the text (null when not UTF-8),
        /// `payload_base64` the bytes, `reason` the whole failure text.
        #[arg(long)]
        json: bool,
    },
    /// List one page of the items in STATE, in its order (needs only read
    /// access): backlog, due, delayed, pending, parked, dead_letter, or the
    /// finished items kept for a while, completed and cancelled (newest
    /// first). One line per item: id, flow, deliveries, the state's time
    /// (added, due, claimed, failed or finished), the payload, then the
    /// result of a completed item or the reason of a dead letter. When more
    /// follow, the offset of the next page goes to stderr.
    List {
        /// The state to list.
        #[arg(long, default_value = "backlog", value_parser = parse_state)]
        state: workjournal::ItemState,
        /// The most items to show (1 to 500).
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// Skip this many positions (the offset the previous page gave).
        #[arg(long, default_value_t = 0)]
        offset: u64,
        /// Only items whose payload holds TEXT.
        #[arg(long, value_name = "TEXT")]
        contains: Option<String>,
        /// Print JSON: an object with `items` (as `peek --json`, plus
        /// `state`, the times, `result` and `result_base64` of a completed
        /// item, `reason` of a dead letter) and `next_offset`.
        #[arg(long)]
        json: bool,
    },
    /// Put a dead letter (or all of them) back at the backlog tail.
    Redrive {
        /// The dead letter's item id.
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        id: Option<u64>,
        /// Every dead letter.
        #[arg(long)]
        all: bool,
    },
    /// Delete every dead letter.
    PurgeDeadLetters,
    /// Cancel item ID: one that waits ends at once as cancelled; one that
    /// runs is marked, and the worker that holds it (in any process) stops
    /// its command (SIGTERM, then SIGKILL after its --kill-grace) and ends
    /// it as cancelled. Exit 9 if the queue holds no item ID; a dead
    /// letter is refused (exit 7).
    Cancel {
        /// The item id (as `add` printed it).
        id: u64,
    },
    /// Change waiting item ID: its priority tier, when it may run, its
    /// payload (at least one). A new priority re-ranks it where it waits;
    /// --delay or --at makes it delayed until then (or due now, if the
    /// time has passed). Exit 9 if the queue holds no item ID; a running,
    /// dead-lettered or finished item is refused (exit 7), and so is a
    /// time for a parked one.
    #[command(group(clap::ArgGroup::new("change").required(true).multiple(true)
        .args(["priority", "delay", "at", "payload", "file"])))]
    Update {
        /// The item id.
        id: u64,
        /// The new priority tier, 0-255.
        #[arg(long, value_name = "N")]
        priority: Option<u8>,
        /// Run no earlier than this from now (30s, 5m, 1h; 0s: due now).
        #[arg(long, value_name = "DURATION", value_parser = parse_duration, conflicts_with = "at")]
        delay: Option<Duration>,
        /// Run no earlier than this time (RFC 3339, e.g. 2030-01-02T03:04:05Z).
        #[arg(long, value_name = "TIME", value_parser = parse_time)]
        at: Option<u64>,
        /// The new payload.
        #[arg(long, value_name = "P", conflicts_with = "file")]
        payload: Option<String>,
        /// Read the new payload from file F.
        #[arg(long, value_name = "F")]
        file: Option<PathBuf>,
    },
    /// Make delayed item ID due now. Exit 9 if no delayed item is ID.
    Promote {
        /// The item id.
        id: u64,
    },
    /// Delete item ID unrun, wherever it waits (a dead letter too). A
    /// running item is refused (exit 7): cancel it instead. Exit 9 if the
    /// queue holds no item ID.
    Remove {
        /// The item id.
        id: u64,
    },
    /// Hold FLOW: workers park its items instead of running them.
    Pause {
        /// The flow.
        flow: String,
    },
    /// Release FLOW: its parked items go back to the backlog tail.
    Resume {
        /// The flow.
        flow: String,
    },
    /// Run the oldest parked item of a paused FLOW with --exec, once.
    Step(StepArgs),
    /// Internal: the supervisor a slot of `work` runs its commands under
    /// (requests on the socket that is its stdin; SPEC section 9).
    #[command(name = "__supervise", hide = true)]
    Supervise {
        /// The command, for `sh -c`.
        #[arg(allow_hyphen_values = true)]
        cmd: String,
    },
    /// Delete FLOW's parked items and its pause.
    ClearFlow {
        /// The flow.
        flow: String,
    },
    /// Limit FLOW to N items claimed per period, across every worker (on
    /// Redis, every host): RATE is N/PERIOD, e.g. 10/s, 100/1m, 5/500ms;
    /// `off` clears it. An item's --cost takes that many permits.
    RateLimit {
        /// The flow.
        flow: String,
        /// N/PERIOD, or off.
        #[arg(value_parser = parse_rate)]
        rate: Setting<workjournal::RateLimit>,
    },
    /// Run at most N items of FLOW at once, across every worker; `off`
    /// clears the cap.
    Concurrency {
        /// The flow.
        flow: String,
        /// N (at least 1), or off.
        #[arg(value_parser = parse_cap)]
        limit: Setting<u32>,
    },
    /// Hold FLOW for DURATION (30s, 5m) for every worker; it lifts itself
    /// then. `off` lifts it now.
    Backoff {
        /// The flow.
        flow: String,
        /// How long, or off.
        #[arg(value_parser = parse_back_off)]
        duration: Setting<Duration>,
    },
    /// List the flows with limits and their state (needs only read access).
    Limits {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Give free space in the queue file back to the file system.
    Compact,
    /// Print item ID's result (exit 10 if it was dead-lettered, 12 if it was
    /// cancelled, 9 if it has no outcome: not finished, or finished longer
    /// ago than the result TTL).
    Result {
        /// The item id (as `add` printed it).
        id: u64,
        /// Wait up to this long for the outcome (default: do not wait).
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        wait: Option<Duration>,
    },
    /// Hand the file's items over to the Redis queue at --redis, exactly
    /// once, until stopped, serving the file on its socket meanwhile as
    /// `work` does (needs the `forward` feature).
    Forward(crate::forward::ForwardArgs),
    /// Own the queue and serve it to other processes on a Unix socket (and
    /// TCP with --listen) until Ctrl-C or SIGTERM.
    Serve(crate::serve::ServeArgs),
    /// Recurring items: add, list, remove, pause, resume, next. `work` and
    /// `serve` fire them while they run, each slot exactly once.
    #[command(subcommand)]
    Schedule(crate::schedule::ScheduleCommand),
    /// Print the completion script for SHELL to stdout, e.g.
    /// `workjournal completions bash > /etc/bash_completion.d/workjournal`
    /// (the .deb installs bash, zsh and fish ones).
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Internal: write the man pages, one per command and subcommand,
    /// into DIR (scripts/deb-assets.sh, for the .deb).
    #[command(hide = true)]
    Man {
        /// The directory (created if missing).
        dir: PathBuf,
    },
}

#[derive(Debug, Args)]
pub(crate) struct AddArgs {
    /// The payload (default: read from --file or stdin).
    #[arg(conflicts_with = "file")]
    pub(crate) payload: Option<String>,
    /// Read the payload from file F.
    #[arg(long, value_name = "F")]
    pub(crate) file: Option<PathBuf>,
    /// One item per line of --file or stdin (empty lines are skipped).
    #[arg(long, conflicts_with = "payload")]
    pub(crate) lines: bool,
    /// The flow the items join.
    #[arg(long, value_name = "F", default_value = "")]
    pub(crate) flow: String,
    /// Run no earlier than this from now (30s, 5m, 1h).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, conflicts_with = "at")]
    pub(crate) delay: Option<Duration>,
    /// Run no earlier than this time (RFC 3339, e.g. 2030-01-02T03:04:05Z).
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub(crate) at: Option<u64>,
    /// Skip the add if an item with this key was added within the dedup window.
    #[arg(long, value_name = "K", conflicts_with = "lines",
          value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub(crate) dedup_key: Option<String>,
    /// Wait for the item to finish and print its result to stdout (exit 10
    /// if it was dead-lettered, 11 if --timeout ran out first).
    #[arg(long, conflicts_with = "lines")]
    pub(crate) wait: bool,
    /// With --wait: how long to wait (default: without end).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, requires = "wait")]
    pub(crate) timeout: Option<Duration>,
    /// Priority tier 0-255: higher runs earlier, each tier worth the
    /// queue's aging step (60 s) of waiting.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub(crate) priority: u8,
    /// Permits of its flow's rate limit the item takes when claimed.
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) cost: u32,
}

/// How to run each item (shared by `work` and `step`).
#[derive(Debug, Args)]
pub(crate) struct ExecArgs {
    /// The command, run with `sh -c`, payload on stdin, and WORKJOURNAL_ID,
    /// WORKJOURNAL_FLOW, WORKJOURNAL_DELIVERY in its environment. Exit 0 acks.
    /// Its stdout is ours; its stderr is captured: on failure its end becomes
    /// the reason, and a successful command's stderr is discarded. It dies
    /// with the worker, however the worker dies. An empty or blank CMD is
    /// refused (it would ack every item without doing anything).
    #[arg(long, value_name = "CMD", value_parser = parse_exec)]
    pub(crate) exec: String,
    /// Kill a command (and all it started) still running after this long;
    /// that is a failed attempt. Default: no limit.
    #[arg(long, value_name = "DURATION", value_parser = parse_timeout)]
    pub(crate) timeout: Option<Duration>,
    /// Dead letters kept; past it the oldest are dropped (default: 10000).
    /// Applies when this process opens the queue; a file another process
    /// serves keeps that process's cap (a warning says so).
    #[arg(long, value_name = "N")]
    pub(crate) dead_letter_cap: Option<u64>,
    /// How long a claim lasts without a heartbeat; items of a worker silent
    /// this long are taken over. Also how long Ctrl-C waits for running commands.
    /// At least 1ms; below 30ms it is 30ms.
    #[arg(long, value_name = "DURATION", value_parser = parse_lease, default_value = "30s")]
    pub(crate) lease: Duration,
    /// Deliveries before a failing item is dead-lettered (default: 3).
    /// Applies when this process opens the queue; a file another process
    /// serves keeps that process's value (a warning names it).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) max_deliveries: Option<u32>,
    /// The wait after the first failure; it doubles with each further one
    /// (at most 5m, shortened by up to 20% at random).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "1s")]
    pub(crate) backoff: Duration,
    /// When an item is cancelled while its command runs (`workjournal
    /// cancel ID`, from any process): the command's process group gets
    /// SIGTERM at once, and SIGKILL if it still runs this long after.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "10s")]
    pub(crate) kill_grace: Duration,
}

#[derive(Debug, Args)]
pub(crate) struct WorkArgs {
    #[command(flatten)]
    pub(crate) exec: ExecArgs,
    /// Commands run at once, 1 to 1024 (default: the number of CPUs).
    #[arg(long, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_CONCURRENCY)))]
    pub(crate) concurrency: Option<u32>,
    /// Items claimed ahead of the running commands, 0 to 1024 (default:
    /// three per --concurrency slot, at most 1024): the next command starts
    /// the moment one ends, while that one's ack and the claim that refills
    /// this share a commit. Not with --flow (a stepped item given back would
    /// lose its place).
    #[arg(long, value_name = "N",
          value_parser = clap::value_parser!(u32).range(0..=i64::from(MAX_CONCURRENCY)))]
    pub(crate) prefetch: Option<u32>,
    /// Exit once nothing is left: backlog, delayed (retries too) and pending
    /// all empty. Exits 10 if any item was dead-lettered in the run. Every
    /// delayed item is waited for, however far off: one `add --delay 7d`
    /// keeps it running for a week (in cron, mind such items).
    #[arg(long)]
    pub(crate) until_empty: bool,
    /// Work only on the parked items of paused flow F, one `step` at a time.
    #[arg(long, value_name = "F")]
    pub(crate) flow: Option<String>,
    /// Keep each command's stdout (at most 1 MiB; more fails the attempt) as
    /// its item's result, for `add --wait` and `result`, instead of printing it.
    #[arg(long)]
    pub(crate) keep_stdout: bool,
}

#[derive(Debug, Args)]
pub(crate) struct StepArgs {
    /// The paused flow.
    pub(crate) flow: String,
    #[command(flatten)]
    pub(crate) exec: ExecArgs,
}

/// The largest `work --concurrency`: each slot can hold a running command,
/// and more processes than this at once is a mistake, not a setting.
pub(crate) const MAX_CONCURRENCY: u32 = 1024;

/// Items `work` claims ahead per `--concurrency` slot when `--prefetch` is
/// not given (SPEC section 9): with the slot's running item, four in hand
/// per slot, the default of the field's usual knob (Celery's
/// `worker_prefetch_multiplier`). One per slot ran dry on short commands:
/// the refilling claim waits for a commit, and two more commands can end
/// meanwhile (docs/bench-notes.md).
pub(crate) const PREFETCH_PER_SLOT: usize = 3;

/// The shortest lease the worker uses; a shorter `--lease` (from 1ms) is
/// raised to it, as [`workjournal::Worker::lease`] does.
pub(crate) const MIN_LEASE: Duration = Duration::from_millis(30);

/// A `--lease`: a duration of at least 1ms (0s or 2ns would make the
/// heartbeat period zero).
pub(crate) fn parse_lease(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d < Duration::from_millis(1) {
        return Err(format!(
            "a lease must be at least 1ms, got {}",
            humantime::format_duration(d)
        ));
    }
    Ok(d)
}

/// An `--exec` command: anything but empty or blank. `sh -c ''` exits 0, so
/// an unset variable in `--exec "$CMD"` would ack (and so delete) every item
/// without running anything (SPEC section 9).
pub(crate) fn parse_exec(s: &str) -> Result<String, String> {
    if s.trim().is_empty() {
        return Err(
            "the command is empty; it would ack every item without running anything".to_string(),
        );
    }
    Ok(s.to_string())
}

/// A `--timeout`: a duration above zero.
pub(crate) fn parse_timeout(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err("a timeout must be above 0".to_string());
    }
    Ok(d)
}

/// `30s`, `5m`, `1h`, `250ms`, `1h 30m`.
pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s.trim())
        .map_err(|e| format!("{e}; expected a number and a unit, like 30s, 5m or 1h"))
}

/// A limit setting of `rate-limit`, `concurrency` and `backoff`: `None`
/// for `off` (clear it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Setting<T>(pub(crate) Option<T>);

fn is_off(s: &str) -> bool {
    matches!(s.trim(), "off" | "none" | "clear")
}

/// `N/PERIOD` (10/s, 100/1m, 5/500ms) or `off`.
pub(crate) fn parse_rate(s: &str) -> Result<Setting<workjournal::RateLimit>, String> {
    if is_off(s) {
        return Ok(Setting(None));
    }
    let bad =
        |why: String| format!("{why}; expected N/PERIOD like 10/s, 100/1m or 5/500ms, or off");
    let (n, period) = s
        .trim()
        .split_once('/')
        .ok_or_else(|| bad("no /".to_string()))?;
    let permits: u32 = n
        .trim()
        .parse()
        .map_err(|e| bad(format!("bad N {n:?}: {e}")))?;
    let period = period.trim();
    // A bare unit is one of it: 10/s is 10 per 1s.
    let period = if period.starts_with(|c: char| c.is_ascii_digit()) {
        parse_duration(period).map_err(bad)?
    } else {
        parse_duration(&format!("1{period}")).map_err(bad)?
    };
    if permits == 0 || period.is_zero() {
        return Err(bad("N and PERIOD must be above zero".to_string()));
    }
    Ok(Setting(Some(workjournal::RateLimit::new(permits, period))))
}

/// A concurrency cap of at least 1, or `off`.
/// An item state by its name (SPEC 12.1), for `list --state`.
pub(crate) fn parse_state(s: &str) -> Result<workjournal::ItemState, String> {
    workjournal::ItemState::parse(s.trim()).map_err(|e| e.to_string())
}

pub(crate) fn parse_cap(s: &str) -> Result<Setting<u32>, String> {
    if is_off(s) {
        return Ok(Setting(None));
    }
    match s.trim().parse::<u32>() {
        Ok(n) if n > 0 => Ok(Setting(Some(n))),
        _ => Err(format!(
            "bad cap {s:?}; expected a number of at least 1, or off"
        )),
    }
}

/// A back-off duration, or `off`.
pub(crate) fn parse_back_off(s: &str) -> Result<Setting<Duration>, String> {
    if is_off(s) {
        return Ok(Setting(None));
    }
    parse_duration(s).map(|d| Setting(Some(d)))
}

/// An RFC 3339 time (`Z` or a `+hh:mm` / `-hh:mm` offset) as ms since the
/// Unix epoch.
pub(crate) fn parse_time(s: &str) -> Result<u64, String> {
    let bad = |why: &str| {
        format!(
            "{why}; expected an RFC 3339 time like 2030-01-02T03:04:05Z or 2030-01-02T05:04:05+02:00"
        )
    };
    // RFC 3339 allows lower-case `t` and `z`; humantime does not.
    let upper = s.trim().to_ascii_uppercase();
    let s = upper.as_str();
    // humantime reads UTC only: take a numeric offset off and apply it here.
    let (utc, offset_secs) = match s
        .len()
        .checked_sub(6)
        .and_then(|i| s.get(i..).map(|o| (i, o)))
    {
        Some((i, o))
            if (o.starts_with('+') || o.starts_with('-')) && o.as_bytes().get(3) == Some(&b':') =>
        {
            let hours: i64 = o
                .get(1..3)
                .and_then(|h| h.parse().ok())
                .ok_or_else(|| bad("bad offset"))?;
            let mins: i64 = o
                .get(4..6)
                .and_then(|m| m.parse().ok())
                .ok_or_else(|| bad("bad offset"))?;
            if hours > 23 || mins > 59 {
                return Err(bad("bad offset"));
            }
            let secs = hours * 3600 + mins * 60;
            let base = s.get(..i).ok_or_else(|| bad("bad time"))?;
            (
                format!("{base}Z"),
                if o.starts_with('-') { -secs } else { secs },
            )
        }
        _ => (s.to_string(), 0),
    };
    let t: SystemTime = humantime::parse_rfc3339(&utc).map_err(|e| bad(&e.to_string()))?;
    let ms = t
        .duration_since(UNIX_EPOCH)
        .map_err(|_| bad("time before 1970"))?
        .as_millis();
    let ms =
        i128::try_from(ms).map_err(|_| bad("time out of range"))? - i128::from(offset_secs) * 1000;
    u64::try_from(ms).map_err(|_| bad("time out of range"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_with_offsets_name_the_same_instant() {
        let z = parse_time("2030-01-02T03:04:05Z");
        assert_eq!(z, parse_time("2030-01-02T05:04:05+02:00"));
        assert_eq!(z, parse_time("2030-01-01T22:34:05-04:30"));
        assert_eq!(z, parse_time("2030-01-02t03:04:05z"));
        assert!(parse_time("tomorrow").is_err());
        assert!(parse_time("2030-01-02T03:04:05+25:00").is_err());
    }

    #[test]
    fn durations_take_units() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert!(parse_duration("5").is_err());
        assert!(parse_duration("fast").is_err());
    }
}
