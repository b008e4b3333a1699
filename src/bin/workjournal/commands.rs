//! Opening the queue and the small subcommands.

use std::io::{IsTerminal, Write};
use std::time::{Duration, UNIX_EPOCH};

use workjournal::{BoxQueue, Config, Item, WorkQueue};

use crate::args::{Cli, Command, Global};
use crate::{CliError, CliResult, code};

/// Open the queue the global flags name.
pub(crate) async fn open(global: &Global, config: Config) -> CliResult<BoxQueue> {
    match &global.redis {
        Some(url) => open_redis(url, global, config).await,
        None => {
            let queue = workjournal::EmbeddedQueue::open(&global.db, config).await?;
            Ok(BoxQueue::new(queue))
        }
    }
}

#[cfg(feature = "redis")]
async fn open_redis(url: &str, global: &Global, config: Config) -> CliResult<BoxQueue> {
    let mut options = workjournal::RedisOptions::default();
    if let Some(ca) = &global.redis_ca {
        options = options.tls_ca_file(ca);
    }
    if let (Some(cert), Some(key)) = (&global.redis_cert, &global.redis_key) {
        options = options.tls_client_cert_files(cert, key);
    }
    let queue = workjournal::RedisQueue::connect(url, &global.namespace, config, options)
        .await
        .map_err(|e| match e {
            // A malformed URL, namespace or TLS file is a usage error.
            workjournal::Error::InvalidInput(_) => CliError::new(code::USAGE, crate::one_line(&e)),
            other => other.into(),
        })?;
    Ok(BoxQueue::new(queue))
}

#[cfg(not(feature = "redis"))]
async fn open_redis(_url: &str, _global: &Global, _config: Config) -> CliResult<BoxQueue> {
    Err(CliError::new(
        code::USAGE,
        "--redis: this workjournal was built without the redis feature (rebuild with --features redis)",
    ))
}

pub(crate) async fn run(cli: Cli) -> CliResult {
    if let Command::Work(args) = &cli.command {
        return crate::work::work(&cli.global, args).await;
    }
    if let Command::Step(args) = &cli.command {
        return crate::work::step(&cli.global, args).await;
    }
    // Commands that only look must not create an empty queue file.
    let looks_only = matches!(
        cli.command,
        Command::Stats { .. }
            | Command::Peek { .. }
            | Command::DeadLetters { .. }
            | Command::Result { .. }
    );
    if looks_only && cli.global.redis.is_none() && !cli.global.db.exists() {
        return Err(CliError::new(
            code::INPUT,
            format!("no queue file at {}", cli.global.db.display()),
        ));
    }
    let queue = open(&cli.global, Config::default()).await?;
    let result = one(&queue, cli.command).await;
    let closed = queue.close().await;
    result?;
    closed?;
    Ok(())
}

async fn one(queue: &BoxQueue, command: Command) -> CliResult {
    let mut out = std::io::stdout();
    match command {
        Command::Add(args) => crate::add::add(queue, &args).await,
        Command::Work(_) | Command::Step(_) => Ok(()),
        Command::Stats { json, watch } => stats(queue, json, watch).await,
        Command::Peek { n } => {
            if n == 0 {
                return Ok(());
            }
            for item in queue.peek(n).await? {
                writeln!(
                    out,
                    "{}\t{}\t{}\t{}",
                    item.id,
                    show_flow(&item.flow),
                    item.deliveries,
                    preview(&item.payload)
                )
                .map_err(CliError::output)?;
            }
            Ok(())
        }
        Command::DeadLetters { n, json } => {
            let dead = if n == 0 {
                Vec::new()
            } else {
                queue.dead_letters(n).await?
            };
            if json {
                let list: Vec<serde_json::Value> = dead
                    .iter()
                    .map(|d| {
                        let mut v = item_json(&d.item);
                        v["reason"] = d.reason.clone().into();
                        v["failed_at_ms"] = d.failed_at_ms.into();
                        v
                    })
                    .collect();
                writeln!(out, "{}", serde_json::Value::Array(list)).map_err(CliError::output)?;
            } else {
                for d in dead {
                    writeln!(
                        out,
                        "{}\t{}\t{}\t{}\t{}",
                        d.item.id,
                        show_flow(&d.item.flow),
                        d.item.deliveries,
                        rfc3339(d.failed_at_ms),
                        d.reason.replace(['\n', '\r', '\t'], " ")
                    )
                    .map_err(CliError::output)?;
                }
            }
            Ok(())
        }
        Command::Redrive { id, all } => {
            let n = if all {
                redrive_all(queue).await?
            } else {
                let id = id.unwrap_or_default();
                if !queue.redrive(id).await? {
                    return Err(CliError::new(
                        code::NOT_FOUND,
                        format!("no dead letter with id {id}"),
                    ));
                }
                1
            };
            writeln!(out, "redriven {n}").map_err(CliError::output)
        }
        Command::PurgeDeadLetters => {
            let n = queue.purge_dead_letters().await?;
            writeln!(out, "purged {n}").map_err(CliError::output)
        }
        Command::Pause { flow } => {
            queue.pause(&flow).await?;
            writeln!(out, "paused {flow}").map_err(CliError::output)
        }
        Command::Resume { flow } => {
            let n = queue.resume(&flow).await?;
            writeln!(out, "resumed {flow}: {n} items back in the backlog").map_err(CliError::output)
        }
        Command::ClearFlow { flow } => {
            let n = queue.clear_flow(&flow).await?;
            writeln!(out, "cleared {flow}: {n} parked items deleted").map_err(CliError::output)
        }
        Command::Result { id, wait } => {
            crate::result::print_outcome(queue, id, wait.unwrap_or_default(), code::NOT_FOUND).await
        }
        Command::Compact => {
            let gave_back = queue.compact().await?;
            let text = if gave_back {
                "compacted"
            } else {
                "nothing to give back"
            };
            writeln!(out, "{text}").map_err(CliError::output)
        }
    }
}

async fn redrive_all(queue: &BoxQueue) -> CliResult<u64> {
    let mut total = 0u64;
    loop {
        let batch = queue.dead_letters(1000).await?;
        let mut moved = 0u64;
        for d in &batch {
            if queue.redrive(d.item.id).await? {
                moved += 1;
            }
        }
        total += moved;
        // An empty batch is done; a batch of which nothing moved (someone
        // else redrove them meanwhile) must not loop forever.
        if batch.is_empty() || moved == 0 {
            return Ok(total);
        }
    }
}

async fn stats(queue: &BoxQueue, json: bool, watch: bool) -> CliResult {
    if !watch {
        return print_stats(queue, json, false).await;
    }
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
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = int.recv() => return Ok(()),
            _ = term.recv() => return Ok(()),
            _ = tick.tick() => {
                if tty {
                    // Clear the screen and home the cursor: a live view.
                    write!(std::io::stdout(), "\x1b[2J\x1b[H").map_err(CliError::output)?;
                }
                print_stats(queue, json, !tty && !json).await?;
            }
        }
    }
}

async fn print_stats(queue: &BoxQueue, json: bool, one_line: bool) -> CliResult {
    let s = queue.stats().await?;
    let paused = queue.paused_flows().await?;
    let mut out = std::io::stdout();
    let text = if json {
        let mut v = serde_json::to_value(s)
            .map_err(|e| CliError::new(code::FAILURE, format!("cannot encode stats: {e}")))?;
        v["paused_flows"] = paused.into();
        v.to_string()
    } else if one_line {
        format!(
            "backlog={} due={} delayed={} pending={} parked={} dead_letters={}",
            s.backlog, s.due, s.delayed, s.pending, s.parked, s.dead_letters
        )
    } else {
        let oldest = match s.oldest_pending_age_ms {
            Some(age) => format!(" (oldest {})", humantime::format_duration(round_ms(age))),
            None => String::new(),
        };
        let paused = if paused.is_empty() {
            "-".to_string()
        } else {
            paused.join(", ")
        };
        format!(
            "backlog       {} (due {})\ndelayed       {}\npending       {}{oldest}\nparked        {}\ndead letters  {}\npaused flows  {paused}\ndurable       {}",
            s.backlog,
            s.due,
            s.delayed,
            s.pending,
            s.parked,
            s.dead_letters,
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

fn show_flow(flow: &str) -> &str {
    if flow.is_empty() { "-" } else { flow }
}

/// The payload as one line of at most 80 characters, control characters
/// escaped.
pub(crate) fn preview(payload: &[u8]) -> String {
    let text = String::from_utf8_lossy(payload);
    let mut out = String::new();
    for (i, c) in text.chars().enumerate() {
        if i == 80 {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

fn item_json(item: &Item) -> serde_json::Value {
    serde_json::json!({
        "id": item.id,
        "flow": item.flow,
        "payload": String::from_utf8_lossy(&item.payload),
        "payload_bytes": item.payload.len(),
        "deliveries": item.deliveries,
        "enqueued_at_ms": item.enqueued_at_ms,
    })
}

fn rfc3339(ms: u64) -> String {
    let t = UNIX_EPOCH + Duration::from_millis(ms);
    humantime::format_rfc3339_seconds(t).to_string()
}
