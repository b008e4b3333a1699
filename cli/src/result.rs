//! `workjournal result ID` and `workjournal add --wait`: print an item's
//! result once it has one (SPEC section 9).

use std::io::Write;
use std::time::Duration;

use workjournal::{BoxQueue, OutcomeKind, WorkQueue};

use crate::{CliError, CliResult, code};

/// Wait up to `wait` for item `id`'s outcome and print it: a done item's
/// result raw on stdout (exit 0); a dead-lettered item's reason as the error
/// (exit 10). No outcome in time is `none_code` (11 for `add --wait`, 9 for
/// `result`).
pub(crate) async fn print_outcome(
    queue: &BoxQueue,
    id: u64,
    wait: Duration,
    none_code: u8,
) -> CliResult {
    let Some(outcome) = queue.wait_outcome(id, wait).await? else {
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
            format!("item {id} was dead-lettered: {reason}"),
        )),
    }
}
