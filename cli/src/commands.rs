//! Opening the queue and the small subcommands.

use std::io::{IsTerminal, Write};
use std::time::{Duration, UNIX_EPOCH};

use workjournal::{BoxQueue, Config, Item, WorkQueue};

use crate::args::{Cli, Command, Global};
use crate::{CliError, CliResult, code};

/// Open the queue the global flags name.
pub(crate) async fn open(global: &Global, config: Config) -> CliResult<BoxQueue> {
    open_as(global, config, false).await
}

/// Open the queue the global flags name; with `read_only`, a file that no
/// process serves is opened read-only.
async fn open_as(global: &Global, config: Config, read_only: bool) -> CliResult<BoxQueue> {
    Ok(open_saying_file(global, config, read_only).await?.0)
}

/// As [`open_as`], and whether the target is a queue file (opened here, or
/// reached through the process serving it) rather than Redis or a URL.
async fn open_saying_file(
    global: &Global,
    config: Config,
    read_only: bool,
) -> CliResult<(BoxQueue, bool)> {
    if let Some(url) = &global.redis {
        return Ok((open_redis(url, global, config).await?, false));
    }
    // The file, or the process serving it (SPEC section 10).
    let mut options = workjournal::ConnectOptions::default().read_only(read_only);
    if let Ok(token) = std::env::var("WORKJOURNAL_TOKEN") {
        options = options.token(token);
    }
    if let Some(target) = global.db.to_str()
        && crate::serve::is_url(target)
    {
        return Ok((options.connect(target, config).await?, false));
    }
    Ok(
        match options.open_file_or_server(&global.db, config).await? {
            workjournal::Opened::Served(remote) => (BoxQueue::new(remote), true),
            #[cfg(feature = "embedded")]
            workjournal::Opened::Owned(file) => (BoxQueue::new(file), true),
        },
    )
}

/// Open the queue for looking only: the process serving the file when one
/// does, else the embedded file read-only (see
/// [`workjournal::EmbeddedOptions::read_only`]); Redis as usual.
pub(crate) async fn open_read_only(global: &Global) -> CliResult<BoxQueue> {
    open_as(global, Config::default(), true).await
}

/// The Redis options the global flags give (TLS CA and client certificate).
#[cfg(feature = "redis")]
pub(crate) fn redis_options(global: &Global) -> workjournal::RedisOptions {
    let mut options = workjournal::RedisOptions::default();
    if let Some(ca) = &global.redis_ca {
        options = options.tls_ca_file(ca);
    }
    if let (Some(cert), Some(key)) = (&global.redis_cert, &global.redis_key) {
        options = options.tls_client_cert_files(cert, key);
    }
    options
}

#[cfg(feature = "redis")]
async fn open_redis(url: &str, global: &Global, config: Config) -> CliResult<BoxQueue> {
    let options = redis_options(global);
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

/// Only `add` creates a queue file: every other command on an embedded
/// `--db` that does not exist fails with exit 3 and creates nothing, so that
/// a mistyped path is not a new empty queue (SPEC section 9).
pub(crate) fn require_queue_file(global: &Global) -> CliResult {
    let is_url = global.db.to_str().is_some_and(crate::serve::is_url);
    if global.redis.is_none() && !is_url && !global.db.exists() {
        return Err(CliError::new(
            code::INPUT,
            format!("no queue file at {}", global.db.display()),
        ));
    }
    Ok(())
}

pub(crate) async fn run(cli: Cli) -> CliResult {
    if let Command::Work(args) = &cli.command {
        return crate::work::work(&cli.global, args).await;
    }
    if let Command::Step(args) = &cli.command {
        return crate::work::step(&cli.global, args).await;
    }
    if let Command::Serve(args) = &cli.command {
        return crate::serve::serve(&cli.global, args).await;
    }
    if let Command::Forward(args) = &cli.command {
        return crate::forward::forward(&cli.global, args).await;
    }
    if let Command::Add(args) = &cli.command {
        // The input is read (or opened) before the queue, so that a missing
        // `--file` leaves no new queue file behind (SPEC section 9).
        let input = crate::add::read_input(args)?;
        let (queue, on_file) = open_saying_file(&cli.global, Config::default(), false).await?;
        let wait = args.timeout.unwrap_or(Duration::MAX);
        let mut result = crate::add::add(&queue, args, input).await;
        if let Ok(Some(id)) = result
            && !on_file
        {
            result = crate::result::print_outcome(&queue, id, wait, code::TIMED_OUT)
                .await
                .map(|()| None);
        }
        let closed = queue.close().await;
        let waiting = result?;
        closed?;
        // On a queue file the wait holds neither the file nor one server's
        // connection: a `work` started (or restarted) meanwhile can take
        // the file and answer (SPEC section 9).
        if let Some(id) = waiting {
            crate::result::print_outcome_detached(&cli.global, id, wait, code::TIMED_OUT).await?;
        }
        return Ok(());
    }
    require_queue_file(&cli.global)?;
    if let Command::Result { id, wait } = &cli.command {
        let (id, wait) = (*id, wait.unwrap_or_default());
        let (queue, on_file) = open_saying_file(&cli.global, Config::default(), true).await?;
        let mut result =
            crate::result::print_outcome(&queue, id, Duration::ZERO, code::NOT_FOUND).await;
        let not_yet = matches!(&result, Err(e) if e.code == code::NOT_FOUND);
        if not_yet && !on_file && !wait.is_zero() {
            result = crate::result::print_outcome(&queue, id, wait, code::NOT_FOUND).await;
        }
        let closed = queue.close().await;
        if not_yet && on_file && !wait.is_zero() {
            closed?;
            // As `add --wait`: holding neither the file nor a server.
            return crate::result::print_outcome_detached(&cli.global, id, wait, code::NOT_FOUND)
                .await;
        }
        result?;
        return Ok(closed?);
    }
    if let Command::Stats {
        json,
        watch,
        forward_flows,
    } = &cli.command
    {
        let (queue, lag) = open_for_stats(&cli.global, forward_flows).await?;
        let result = stats(&queue, *json, *watch, lag.as_ref()).await;
        let closed = queue.close().await;
        result?;
        return Ok(closed?);
    }
    // Commands that only look open the file read-only: they work on a file
    // the user may only read and write nothing (SPEC section 9).
    let looks_only = matches!(
        cli.command,
        Command::Stats { .. }
            | Command::Peek { .. }
            | Command::DeadLetters { .. }
            | Command::Result { .. }
            | Command::Limits { .. }
    );
    let queue = if looks_only {
        open_read_only(&cli.global).await?
    } else {
        open(&cli.global, Config::default()).await?
    };
    let result = one(&queue, cli.command).await;
    let closed = queue.close().await;
    result?;
    closed?;
    Ok(())
}

async fn one(queue: &BoxQueue, command: Command) -> CliResult {
    let mut out = std::io::stdout();
    match command {
        Command::Add(_)
        | Command::Stats { .. }
        | Command::Result { .. }
        | Command::Work(_)
        | Command::Step(_)
        | Command::Supervise { .. }
        | Command::Forward(_)
        | Command::Serve(_) => Ok(()),
        Command::Peek { n, json } => {
            let items = if n == 0 {
                Vec::new()
            } else {
                queue.peek(n).await?
            };
            if json {
                let list: Vec<serde_json::Value> = items.iter().map(item_json).collect();
                return writeln!(out, "{}", serde_json::Value::Array(list))
                    .map_err(CliError::output);
            }
            for item in items {
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
                    // The reason's first line is its summary (SPEC section 9).
                    let reason = reason_line(&d.reason);
                    writeln!(
                        out,
                        "{}\t{}\t{}\t{}\t{}",
                        d.item.id,
                        show_flow(&d.item.flow),
                        d.item.deliveries,
                        rfc3339(d.failed_at_ms),
                        reason
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
            if !flow.is_empty() && !queue.paused_flows().await?.contains(&flow) {
                return Err(CliError::new(
                    code::NOT_FOUND,
                    format!("flow {flow:?} is not paused: nothing to resume"),
                ));
            }
            let n = queue.resume(&flow).await?;
            writeln!(out, "resumed {flow}: {n} items back in the backlog").map_err(CliError::output)
        }
        Command::RateLimit { flow, rate } => {
            queue
                .set_flow_limit(&flow, workjournal::FlowLimit::Rate(rate.0))
                .await?;
            let text = match rate.0 {
                Some(r) => format!("rate limit {flow}: {}", show_rate(&r)),
                None => format!("rate limit {flow}: off"),
            };
            writeln!(out, "{text}").map_err(CliError::output)
        }
        Command::Concurrency { flow, limit } => {
            queue
                .set_flow_limit(&flow, workjournal::FlowLimit::Concurrency(limit.0))
                .await?;
            let text = match limit.0 {
                Some(k) => format!("concurrency {flow}: at most {k} running"),
                None => format!("concurrency {flow}: off"),
            };
            writeln!(out, "{text}").map_err(CliError::output)
        }
        Command::Backoff { flow, duration } => {
            match duration.0 {
                Some(d) => queue.back_off(&flow, d).await?,
                None => {
                    queue
                        .set_flow_limit(&flow, workjournal::FlowLimit::BackOffUntil(None))
                        .await?
                }
            }
            let until = queue
                .flow_limits()
                .await?
                .into_iter()
                .find(|l| l.flow == flow)
                .and_then(|l| l.backoff_until_ms);
            let text = match until {
                Some(t) => format!("backoff {flow}: held until {}", rfc3339(t)),
                None => format!("backoff {flow}: off"),
            };
            writeln!(out, "{text}").map_err(CliError::output)
        }
        Command::Limits { json } => {
            let limits = queue.flow_limits().await?;
            if json {
                let v = serde_json::to_value(&limits).map_err(|e| {
                    CliError::new(code::FAILURE, format!("cannot encode limits: {e}"))
                })?;
                return writeln!(out, "{v}").map_err(CliError::output);
            }
            for l in &limits {
                writeln!(out, "{}", limit_line(l)).map_err(CliError::output)?;
            }
            Ok(())
        }
        Command::ClearFlow { flow } => {
            let n = queue.clear_flow(&flow).await?;
            writeln!(out, "cleared {flow}: {n} parked items deleted").map_err(CliError::output)
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

/// Where `stats` reads the forwarding lag (SPEC section 11, "Lag in
/// `stats`"): the file itself, when this process opened it (read-only), or
/// the process serving it (`forward`, `work`, `serve`: route
/// `forward_lag`).
#[cfg(feature = "forward")]
struct LagSource {
    from: LagFrom,
    /// The flows counted (`--forward-flow`); empty: every flow, or over a
    /// running forwarder's socket the flows it forwards.
    flows: Vec<String>,
}

#[cfg(feature = "forward")]
enum LagFrom {
    File(workjournal::EmbeddedQueue),
    Served(workjournal::RemoteQueue),
}

#[cfg(not(feature = "forward"))]
struct LagSource;

/// The queue `stats` looks at, as [`open_read_only`], and the file itself
/// when no process serves it, for the forwarding lag.
async fn open_for_stats(
    global: &Global,
    forward_flows: &[String],
) -> CliResult<(BoxQueue, Option<LagSource>)> {
    #[cfg(feature = "forward")]
    if global.redis.is_none() && !global.db.to_str().is_some_and(crate::serve::is_url) {
        let mut options = workjournal::ConnectOptions::default().read_only(true);
        if let Ok(token) = std::env::var("WORKJOURNAL_TOKEN") {
            options = options.token(token);
        }
        return Ok(
            match options
                .open_file_or_server(&global.db, Config::default())
                .await?
            {
                workjournal::Opened::Served(remote) => (
                    BoxQueue::new(remote.clone()),
                    Some(LagSource {
                        from: LagFrom::Served(remote),
                        flows: forward_flows.to_vec(),
                    }),
                ),
                workjournal::Opened::Owned(file) => (
                    BoxQueue::new(file.clone()),
                    Some(LagSource {
                        from: LagFrom::File(file),
                        flows: forward_flows.to_vec(),
                    }),
                ),
            },
        );
    }
    let _ = forward_flows;
    Ok((open_read_only(global).await?, None))
}

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

#[cfg(not(feature = "forward"))]
async fn forward_lag(_source: Option<&LagSource>) -> CliResult<Option<(u64, Option<u64>)>> {
    Ok(None)
}

async fn stats(queue: &BoxQueue, json: bool, watch: bool, lag: Option<&LagSource>) -> CliResult {
    if !watch {
        return print_stats(queue, json, false, lag).await;
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
                print_stats(queue, json, !tty && !json, lag).await?;
            }
        }
    }
}

/// `10/1s`: a rate limit as `rate-limit` takes it.
fn show_rate(r: &workjournal::RateLimit) -> String {
    format!(
        "{}/{}",
        r.permits,
        humantime::format_duration(Duration::from_millis(r.period_ms))
    )
}

/// One flow's limits as a tab-separated line: flow, rate, cap, back-off
/// end, pending, held, and `held` while the limits hold the flow.
fn limit_line(l: &workjournal::FlowLimits) -> String {
    format!(
        "{}\trate={}\tconcurrency={}\tbackoff_until={}\tpending={}\theld={}\t{}",
        show_flow(&l.flow),
        l.rate
            .map(|r| format!("{} (used {})", show_rate(&r), l.permits_used))
            .unwrap_or_else(|| "-".to_string()),
        l.concurrency
            .map(|k| k.to_string())
            .unwrap_or_else(|| "-".to_string()),
        l.backoff_until_ms
            .map(rfc3339)
            .unwrap_or_else(|| "-".to_string()),
        l.pending,
        l.held,
        if l.blocked { "blocked" } else { "running" }
    )
}

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
            "backlog={} due={} delayed={} pending={} parked={} dead_letters={} dead_letters_dropped={} limited={}{lag}",
            s.backlog,
            s.due,
            s.delayed,
            s.pending,
            s.parked,
            s.dead_letters,
            s.dead_letters_dropped,
            s.limited
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
            "backlog       {} (due {}){limited}\ndelayed       {}\npending       {}{oldest}\nparked        {}\ndead letters  {}{dropped}\npaused flows  {paused}{lines}\ndurable       {}{lag}",
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

/// The summary of a failure text or dead-letter reason for a terminal: its
/// first line, tabs and carriage returns as spaces and every other control
/// character escaped, so a command's stderr cannot move the cursor, retitle
/// the terminal or add lines to a one-line message (SPEC section 9).
pub(crate) fn reason_line(reason: &str) -> String {
    let first = reason.lines().next().unwrap_or_default();
    let mut out = String::with_capacity(first.len());
    for c in first.chars() {
        match c {
            '\t' | '\r' => out.push(' '),
            c if c.is_control() => out.extend(c.escape_default()),
            c => out.push(c),
        }
    }
    out
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

/// An item as JSON: `payload` is its text when the bytes are UTF-8 (else
/// null) and `payload_base64` always the bytes, so no payload is altered
/// (SPEC section 9).
fn item_json(item: &Item) -> serde_json::Value {
    use base64::Engine;
    serde_json::json!({
        "id": item.id,
        "flow": item.flow,
        "payload": std::str::from_utf8(&item.payload).ok(),
        "payload_base64": base64::engine::general_purpose::STANDARD.encode(&item.payload),
        "payload_bytes": item.payload.len(),
        "deliveries": item.deliveries,
        "enqueued_at_ms": item.enqueued_at_ms,
        "priority": item.priority,
        "cost": item.cost,
    })
}

fn rfc3339(ms: u64) -> String {
    let t = UNIX_EPOCH + Duration::from_millis(ms);
    humantime::format_rfc3339_seconds(t).to_string()
}
