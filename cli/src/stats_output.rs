//! `stats`: the queue's counts, paused flows, flow limits and forwarding
//! lag, once or every second (`--watch`), as text, one line or JSON.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use workjournal::{BoxQueue, WorkQueue};

use crate::display::limit_line;
#[cfg(feature = "forward")]
use crate::open::LagFrom;
use crate::open::LagSource;
use crate::{CliError, CliResult, code};

/// The forwarding lag to show: item count and age of the oldest in ms;
/// `None` when there is no file to read it from (Redis, or a server that
/// cannot tell), or the file was never forwarded, no forwarder serves it
/// and no `--forward-flow` asks for it.
#[cfg(feature = "forward")]
async fn forward_lag(source: Option<&LagSource>) -> CliResult<Option<(u64, Option<u64>)>> {
    let Some(source) = source else {
        return Ok(None);
    };
    let flows = (!source.flows.is_empty()).then_some(source.flows.as_slice());
    let l = match &source.from {
        LagFrom::File(file) => workjournal::forward::local_lag(file, flows).await?,
        LagFrom::Served(remote) => match remote.forward_lag(flows).await? {
            Some(l) => l,
            None => return Ok(None),
        },
    };
    Ok((l.forwarded || l.forwarding || flows.is_some())
        .then_some((l.lag.count, l.lag.oldest_age_ms)))
}

/// Without `forward` there is no forwarding lag.
#[cfg(not(feature = "forward"))]
async fn forward_lag(_source: Option<&LagSource>) -> CliResult<Option<(u64, Option<u64>)>> {
    Ok(None)
}

/// Print the stats once, or with `watch` every second until Ctrl-C,
/// SIGTERM or SIGHUP (a live screen on a terminal, else one line each).
pub(crate) async fn stats(
    queue: &BoxQueue,
    json: bool,
    watch: bool,
    lag: Option<&LagSource>,
) -> CliResult {
    if !watch {
        return print_stats(queue, json, false, lag).await;
    }
    every_second(json, async |one_line| {
        print_stats(queue, json, one_line, lag).await
    })
    .await
}

/// `stats --watch` on a queue file: each second it opens the file (or the
/// process serving it), prints and lets go, so that it never holds the
/// file between looks and a producer's `add` is not locked out (SPEC
/// section 9).
pub(crate) async fn watch_file(
    global: &crate::args::Global,
    json: bool,
    forward_flows: &[String],
) -> CliResult {
    every_second(json, async |one_line| {
        let (queue, lag) = crate::open::open_for_stats(global, forward_flows).await?;
        let printed = print_stats(&queue, json, one_line, lag.as_ref()).await;
        let closed = queue.close().await;
        printed?;
        Ok(closed?)
    })
    .await
}

/// Run `look` every second until Ctrl-C, SIGTERM or SIGHUP, on a terminal
/// as a live screen, else one line each (`look`'s argument) unless `json`.
async fn every_second(json: bool, mut look: impl AsyncFnMut(bool) -> CliResult) -> CliResult {
    use tokio::signal::unix::{SignalKind, signal};
    let tty = std::io::stdout().is_terminal();
    let listen = |kind| {
        signal(kind).map_err(|e| {
            CliError::new(
                code::FAILURE,
                format!("cannot listen for Ctrl-C/SIGTERM: {e}"),
            )
        })
    };
    let mut int = listen(SignalKind::interrupt())?;
    let mut term = listen(SignalKind::terminate())?;
    let mut hup = listen(SignalKind::hangup())?;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = int.recv() => return Ok(()),
            _ = term.recv() => return Ok(()),
            _ = hup.recv() => return Ok(()),
            _ = tick.tick() => {
                if tty {
                    // Clear the screen and home the cursor: a live view.
                    write!(std::io::stdout(), "\x1b[2J\x1b[H").map_err(CliError::output)?;
                }
                look(!tty && !json).await?;
            }
        }
    }
}

/// Print the stats once: as JSON, as one line (`one_line`), or as a table.
async fn print_stats(
    queue: &BoxQueue,
    json: bool,
    one_line: bool,
    lag: Option<&LagSource>,
) -> CliResult {
    let s = queue.stats().await?;
    let paused = queue.paused_flows().await?;
    let lag = forward_lag(lag).await?;
    let limits = queue.flow_limits().await?;
    let mut out = std::io::stdout();
    let text = if json {
        let mut v = serde_json::to_value(s)
            .map_err(|e| CliError::new(code::FAILURE, format!("cannot encode stats: {e}")))?;
        v["paused_flows"] = paused.into();
        v["forward_lag"] = match lag {
            Some((count, oldest_age_ms)) => {
                serde_json::json!({ "count": count, "oldest_age_ms": oldest_age_ms })
            }
            None => serde_json::Value::Null,
        };
        v["flow_limits"] = serde_json::to_value(&limits)
            .map_err(|e| CliError::new(code::FAILURE, format!("cannot encode limits: {e}")))?;
        v.to_string()
    } else if one_line {
        let lag = match lag {
            Some((count, _)) => format!(" forward_lag={count}"),
            None => String::new(),
        };
        format!(
            "backlog={} due={} delayed={} pending={} parked={} dead_letters={} dead_letters_dropped={} limited={} completed={} cancelled={}{lag}",
            s.backlog,
            s.due,
            s.delayed,
            s.pending,
            s.parked,
            s.dead_letters,
            s.dead_letters_dropped,
            s.limited,
            s.completed,
            s.cancelled
        )
    } else {
        // The oldest claim's age, and how long the stalest holder has not
        // touched its claim (SPEC 3, Looking): a command stuck for an hour
        // with a live heartbeat shows "oldest 1h, stalest touch 10s ago".
        let oldest = match (s.oldest_pending_age_ms, s.oldest_touch_age_ms) {
            (Some(age), Some(touch)) => format!(
                " (oldest {}, stalest touch {} ago)",
                humantime::format_duration(round_ms(age)),
                humantime::format_duration(round_ms(touch))
            ),
            (Some(age), None) => format!(" (oldest {})", humantime::format_duration(round_ms(age))),
            (None, _) => String::new(),
        };
        let paused = if paused.is_empty() {
            "-".to_string()
        } else {
            paused.join(", ")
        };
        // Dead letters dropped past the cap are never silent (SPEC 9).
        let dropped = match s.dead_letters_dropped {
            0 => String::new(),
            n => format!(" ({n} dropped past the cap)"),
        };
        // The forwarding lag, when there is one to show (SPEC section 11).
        let lag = match lag {
            Some((count, age)) => {
                let oldest = match age {
                    Some(age) => format!(" (oldest {})", humantime::format_duration(round_ms(age))),
                    None => String::new(),
                };
                format!("\nforward lag   {count} items{oldest}")
            }
            None => String::new(),
        };
        let limited = match s.limited {
            0 => String::new(),
            n => format!(" ({n} held by flow limits)"),
        };
        let mut lines = String::new();
        for l in &limits {
            lines.push_str("\nlimit         ");
            lines.push_str(&limit_line(l).replace('\t', " "));
        }
        format!(
            "backlog       {} (due {}){limited}\ndelayed       {}\npending       {}{oldest}\nparked        {}\ndead letters  {}{dropped}\ncompleted     {} (kept)\ncancelled     {} (kept)\npaused flows  {paused}{lines}\ndurable       {}{lag}",
            s.backlog,
            s.due,
            s.delayed,
            s.pending,
            s.parked,
            s.dead_letters,
            s.completed,
            s.cancelled,
            if s.durable { "yes" } else { "no" }
        )
    };
    writeln!(out, "{text}").map_err(CliError::output)?;
    out.flush().map_err(CliError::output)
}

/// Whole seconds past a minute, ms below: readable ages.
fn round_ms(ms: u64) -> Duration {
    if ms >= 60_000 {
        Duration::from_secs(ms / 1000)
    } else {
        Duration::from_millis(ms)
    }
}
