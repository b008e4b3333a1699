//! `workjournal`: a durable work queue on the command line.
//!
//! Queue work with `add`, run any shell command over it with `work --exec`,
//! look with `stats`, `peek` and `dead-letters`. The queue lives in one file
//! (`--db`, default `./workjournal.redb`) or in Redis (`--redis URL`).
//!
//! # Exit codes
//!
//! Every error is one line on stderr, `workjournal: <what went wrong>`, and
//! one of these codes:
//!
//! | code | meaning |
//! |---|---|
//! | 0 | success (also: output cut short by a closed pipe; `work` stopped by Ctrl-C, SIGTERM or SIGHUP after a graceful shutdown) |
//! | 1 | any other failure (disk, permissions, `--db` naming a directory, a device or FIFO, or a path in a missing directory, a failed `step` command) |
//! | 2 | usage: unknown flag, bad duration, time or `--redis` URL, conflicting flags, a backend this build lacks |
//! | 3 | an input file is missing or unreadable; no queue file (every command but `add` and `serve`, which alone create one) |
//! | 4 | the queue file is locked by another process that serves no socket (or `serve` found it already open) |
//! | 5 | the queue file is corrupt (not a queue, damaged), or holds records this version cannot read |
//! | 6 | Redis or the serving process is unreachable or failed |
//! | 7 | the queue refused the input (payload too large, empty flow name, a flow name with control characters or over 256 bytes) |
//! | 8 | the queue is full (`max_backlog`) |
//! | 9 | nothing to act on (`redrive` of an id that is not a dead letter, `step` of a flow with nothing parked, `resume` of a flow that is not paused, `result` of an item without an outcome) |
//! | 10 | dead-lettered: `work --until-empty` finished, but items were dead-lettered in the run; `add --wait` or `result`: the item was dead-lettered (its reason is the error line) |
//! | 11 | `add --wait`: `--timeout` ran out before the item finished |
//! | 130 | `work` stopped at once by a second Ctrl-C (running commands were killed; their items come back after a restart) |

mod add;
mod args;
mod commands;
mod display;
mod exec;
mod forward;
mod generate;
mod open;
mod result;
mod schedule;
mod serve;
mod stats_output;
mod work;

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

use args::Cli;

/// Exit codes; see the crate docs.
pub(crate) mod code {
    pub(crate) const FAILURE: u8 = 1;
    pub(crate) const USAGE: u8 = 2;
    pub(crate) const INPUT: u8 = 3;
    pub(crate) const LOCKED: u8 = 4;
    pub(crate) const CORRUPT: u8 = 5;
    pub(crate) const BACKEND: u8 = 6;
    pub(crate) const INVALID: u8 = 7;
    pub(crate) const FULL: u8 = 8;
    pub(crate) const NOT_FOUND: u8 = 9;
    pub(crate) const DEAD_LETTERED: u8 = 10;
    pub(crate) const TIMED_OUT: u8 = 11;
    pub(crate) const CANCELLED: u8 = 12;
    pub(crate) const INTERRUPTED: u8 = 130;
}

/// A failure of the command: the exit code and the one line to print.
#[derive(Debug)]
pub(crate) struct CliError {
    pub(crate) code: u8,
    pub(crate) message: String,
}

pub(crate) type CliResult<T = ()> = Result<T, CliError>;

impl CliError {
    pub(crate) fn new(code: u8, message: impl Into<String>) -> Self {
        CliError {
            code,
            message: message.into(),
        }
    }

    /// Writing our own output failed. A closed pipe (`workjournal peek |
    /// head`) is not an error: exit 0 quietly.
    pub(crate) fn output(e: std::io::Error) -> Self {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            CliError::new(0, "")
        } else {
            CliError::new(code::FAILURE, format!("cannot write output: {e}"))
        }
    }
}

/// The error and its sources on one line, each cause added once.
pub(crate) fn one_line(e: &dyn std::error::Error) -> String {
    workjournal::wire::one_line(e)
}

impl From<workjournal::Error> for CliError {
    fn from(e: workjournal::Error) -> Self {
        use workjournal::Error as E;
        let code = match &e {
            E::Locked { path } => {
                return CliError::new(code::LOCKED, locked_message(&e, path));
            }
            E::Corrupt { .. } | E::Decode { .. } => code::CORRUPT,
            E::Backend { .. } => code::BACKEND,
            E::InvalidInput(_) => code::INVALID,
            E::Full { .. } => code::FULL,
            _ => code::FAILURE,
        };
        CliError::new(code, one_line(&e))
    }
}

/// The `Locked` line, naming the process that holds the file when the
/// system tells (Linux: its lock in `/proc/locks`).
fn locked_message(e: &workjournal::Error, path: &std::path::Path) -> String {
    let text = one_line(e);
    match lock_holder(path) {
        Some(pid) => {
            let what = std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|b| {
                    let mut words: Vec<String> = b
                        .split(|c| *c == 0)
                        .filter(|w| !w.is_empty())
                        .map(|w| String::from_utf8_lossy(w).into_owned())
                        .collect();
                    // The program by its name, not its install path: the
                    // arguments are what tells two holders apart, and a
                    // long path would push them past the preview's cut.
                    if let Some(program) = words.first_mut()
                        && let Some(name) = std::path::Path::new(program.as_str()).file_name()
                    {
                        *program = name.to_string_lossy().into_owned();
                    }
                    display::preview(words.join(" ").as_bytes())
                })
                .unwrap_or_default();
            if what.is_empty() {
                format!("{text} (held by pid {pid})")
            } else {
                format!("{text} (held by pid {pid}: {what})")
            }
        }
        None => text,
    }
}

/// The pid holding a `flock` on `path`, from `/proc/locks` (`N: FLOCK
/// ADVISORY WRITE PID MAJ:MIN:INODE START END`, device numbers in hex).
fn lock_holder(path: &std::path::Path) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok()?;
    let dev = meta.dev();
    let (major, minor) = (
        ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff),
        (dev & 0xff) | ((dev >> 12) & !0xff),
    );
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    let me = std::process::id();
    locks.lines().find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        // Waiters are listed as `N: -> FLOCK ...`; OFD locks have pid -1.
        let (pid, file) = (f.get(4)?, f.get(5)?);
        let pid: u32 = pid.parse().ok()?;
        let mut parts = file.split(':');
        let maj = u64::from_str_radix(parts.next()?, 16).ok()?;
        let min = u64::from_str_radix(parts.next()?, 16).ok()?;
        let ino: u64 = parts.next()?.parse().ok()?;
        (maj == major && min == minor && ino == meta.ino() && pid != me).then_some(pid)
    })
}

/// The arguments of the supervisor as `work` starts it (`__supervise --
/// CMD`, exactly), read without building the whole command line: clap's
/// parser of every subcommand is most of what a supervisor would spend
/// before it answers. Anything else (a supervisor run by hand with other
/// spellings) goes through clap.
fn supervisor_args() -> Option<String> {
    let mut args = std::env::args_os().skip(1);
    if args.next()? != exec::SUPERVISE {
        return None;
    }
    if args.next()? != "--" {
        return None;
    }
    let cmd = args.next()?.into_string().ok()?;
    args.next().is_none().then_some(cmd)
}

fn main() -> ExitCode {
    if let Some(cmd) = supervisor_args() {
        return exec::supervise(&cmd);
    }
    let parsed = Cli::try_parse();
    // The command supervisor of `work` (see `exec`) runs without a runtime.
    if let Ok(Cli {
        command: args::Command::Supervise { cmd },
        ..
    }) = &parsed
    {
        return exec::supervise(cmd);
    }
    match try_main(parsed) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.message.is_empty() => ExitCode::from(e.code),
        Err(e) => {
            let _ = writeln!(std::io::stderr().lock(), "workjournal: {}", e.message);
            ExitCode::from(e.code)
        }
    }
}

fn try_main(parsed: Result<Cli, clap::Error>) -> CliResult {
    let cli = parsed.map_err(clap_error)?;
    // Made from the clap definitions alone: no runtime, no queue.
    match &cli.command {
        args::Command::Completions { shell } => return generate::completions(*shell),
        args::Command::Man { dir } => return generate::man_pages(dir),
        _ => {}
    }
    init_tracing();
    // `work` runs on one thread: its tasks (the slots, the heartbeat, the
    // requests it serves) only wait on sockets, timers and the embedded
    // writer's own thread, and handing each wake-up between two runtime
    // threads cost it 6% of its speed on short commands (`work --exec true`
    // at --concurrency 2; docs/bench-notes.md). `serve` and the rest keep
    // a thread per core.
    let mut builder = if matches!(cli.command, args::Command::Work(_)) {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    let runtime = builder
        .enable_all()
        .build()
        .map_err(|e| CliError::new(code::FAILURE, format!("cannot start the runtime: {e}")))?;
    runtime.block_on(commands::run(cli))
}

/// `--help` and `--version` print and succeed; every other parse error
/// becomes one line with exit code 2.
fn clap_error(e: clap::Error) -> CliError {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            let code = if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                code::USAGE
            } else {
                0
            };
            CliError::new(code, "")
        }
        _ => {
            // clap's message runs over several lines ("the following
            // required arguments were not provided:" then the arguments):
            // join them, up to the usage and tip paragraphs, into one.
            let text = e.to_string();
            let mut parts: Vec<&str> = Vec::new();
            for l in text.lines().map(str::trim) {
                if l.is_empty() {
                    if parts.is_empty() {
                        continue;
                    }
                    break;
                }
                if l.starts_with("Usage:") || l.starts_with("tip:") {
                    break;
                }
                parts.push(l);
            }
            let line = parts.join(" ");
            let line = line.strip_prefix("error: ").unwrap_or(&line).to_string();
            let line = if line.is_empty() {
                "invalid arguments".to_string()
            } else {
                line
            };
            CliError::new(code::USAGE, line)
        }
    }
}

/// Library logs go to stderr, one line each, filtered by `RUST_LOG`.
/// Default: warnings (e.g. Redis durability), except the worker's per-item
/// ones, which `work` already prints in its own words. Each line looks like
/// the command's own: `workjournal: warning: <message> (key=value, ...)`.
fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,workjournal::worker=error"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .event_format(LogLine)
        .try_init();
}

/// The format of a library log line on stderr: the `workjournal:` prefix
/// of every other line, the level in words (none for plain information),
/// the message, then its fields in parentheses, all on one line.
struct LogLine;

impl<S, N> tracing_subscriber::fmt::FormatEvent<S, N> for LogLine
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        use tracing::Level;
        let level = match *event.metadata().level() {
            Level::ERROR => "error: ",
            Level::WARN => "warning: ",
            Level::INFO => "",
            Level::DEBUG => "debug: ",
            Level::TRACE => "trace: ",
        };
        let mut fields = LogFields::default();
        event.record(&mut fields);
        let mut line = format!("workjournal: {level}{}", fields.message);
        if !fields.rest.is_empty() {
            line.push_str(&format!(" ({})", fields.rest.join(", ")));
        }
        writeln!(writer, "{}", line.replace(['\n', '\r'], " "))
    }
}

/// An event's message and its other fields as `key=value`.
#[derive(Default)]
struct LogFields {
    message: String,
    rest: Vec<String>,
}

impl tracing::field::Visit for LogFields {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "message" {
            self.message = value.to_string();
        } else {
            self.rest.push(format!("{}={value}", field.name()));
        }
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.message = format!("{value:?}");
        } else {
            self.rest.push(format!("{}={value:?}", field.name()));
        }
    }
}
