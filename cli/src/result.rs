//! `workjournal result ID` and `workjournal add --wait`: print an item's
//! result once it has one (SPEC section 9).

use std::io::Write;
use std::time::Duration;

use workjournal::{BoxQueue, Config, ConnectOptions, Opened, Outcome, OutcomeKind, WorkQueue};

use crate::args::Global;
use crate::{CliError, CliResult, code};

/// Wait up to `wait` for item `id`'s outcome and print it: a done item's
/// result raw on stdout (exit 0); a dead-lettered item's reason as the error
/// (exit 10); a cancelled item as the error (exit 12). No outcome in time is `none_code` (11 for `add --wait`, 9 for
/// `result`).
pub(crate) async fn print_outcome(
    queue: &BoxQueue,
    id: u64,
    wait: Duration,
    none_code: u8,
) -> CliResult {
    let outcome = queue.wait_outcome(id, wait).await?;
    print(outcome, id, wait, none_code)
}

/// How often [`print_outcome_detached`] looks at a file nobody serves.
const FILE_POLL: Duration = Duration::from_millis(100);

/// As [`print_outcome`], for a queue file this process does not hold: it
/// waits without keeping the file, so that a `work` started meanwhile can
/// open (and serve) it (SPEC section 9, `add --wait`). While a process
/// serves the file the wait goes through its socket (woken at the ack);
/// while nobody does, the file is opened read-only for one look every
/// 100 ms; while a process holds it without serving, it keeps trying.
pub(crate) async fn print_outcome_detached(
    global: &Global,
    id: u64,
    wait: Duration,
    none_code: u8,
) -> CliResult {
    let started = tokio::time::Instant::now();
    let deadline = started.checked_add(wait);
    let mut options = ConnectOptions::default().read_only(true);
    if let Ok(token) = std::env::var("WORKJOURNAL_TOKEN") {
        options = options.token(token);
    }
    loop {
        let left = deadline.map_or(Duration::MAX, |d| {
            d.saturating_duration_since(tokio::time::Instant::now())
        });
        let opened = options
            .clone()
            .locked_wait(left.min(workjournal::DEFAULT_LOCKED_WAIT))
            .open_file_or_server(&global.db, Config::default())
            .await;
        match opened {
            Ok(Opened::Served(remote)) => {
                let got = remote.wait_outcome(id, left).await;
                let _ = remote.close().await;
                match got {
                    Ok(Some(o)) => return print(Some(o), id, wait, none_code),
                    // The wait ran out, or the server stopped (it answers
                    // empty, or its socket is gone): look again.
                    Ok(None) | Err(workjournal::Error::Backend { .. }) => {
                        tokio::time::sleep(FILE_POLL.min(left)).await;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            #[cfg(feature = "embedded")]
            Ok(Opened::Owned(file)) => {
                let got = file.outcome(id).await;
                let closed = file.close().await;
                if let Some(o) = got? {
                    return print(Some(o), id, wait, none_code);
                }
                closed?;
                tokio::time::sleep(FILE_POLL.min(left)).await;
            }
            // Held by a process that serves no socket (a program of its
            // own; a `work` or `forward` that could not bind it): wait for
            // it to let go.
            Err(workjournal::Error::Locked { .. }) => {
                tokio::time::sleep(FILE_POLL.min(left)).await;
            }
            Err(e) => return Err(e.into()),
        }
        if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
            return print(None, id, wait, none_code);
        }
    }
}

/// Print `outcome` as [`print_outcome`] says.
fn print(outcome: Option<Outcome>, id: u64, wait: Duration, none_code: u8) -> CliResult {
    let Some(outcome) = outcome else {
        let why = if none_code == code::TIMED_OUT {
            format!(
                "item {id} did not finish within {}",
                humantime::format_duration(wait)
            )
        } else {
            format!(
                "item {id} has no outcome: not finished, or finished longer ago than the result TTL"
            )
        };
        return Err(CliError::new(none_code, why));
    };
    match outcome.kind {
        OutcomeKind::Done { result } => {
            let mut out = std::io::stdout().lock();
            out.write_all(&result).map_err(CliError::output)?;
            out.flush().map_err(CliError::output)
        }
        OutcomeKind::DeadLettered { reason } => Err(CliError::new(
            code::DEAD_LETTERED,
            // One line (its summary, control characters escaped); the whole
            // reason is in `dead-letters --json`.
            format!(
                "item {id} was dead-lettered: {}",
                crate::display::reason_line(&reason)
            ),
        )),
        OutcomeKind::Cancelled => Err(CliError::new(
            code::CANCELLED,
            format!("item {id} was cancelled"),
        )),
        // A kind of a newer contract than this command knows.
        _ => Err(CliError::new(
            code::FAILURE,
            format!("item {id} finished in a way this workjournal does not know: upgrade it"),
        )),
    }
}
