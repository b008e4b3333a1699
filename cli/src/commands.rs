//! Dispatching the subcommands, and the small ones that need no module of
//! their own.

use std::io::Write;
use std::time::Duration;

use workjournal::{BoxQueue, Config, ItemState, ListQuery, WorkQueue};

use crate::args::{Cli, Command};
use crate::display::{item_json, limit_line, preview, reason_line, rfc3339, show_flow, show_rate};
use crate::open::{open, open_for_stats, open_read_only, open_saying_file, require_queue_file};
use crate::stats_output::stats;
use crate::{CliError, CliResult, code};

/// Run the subcommand `cli` names.
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
        crate::add::refuse_before_creating(&cli.global, &input)?;
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
    // `schedule add` creates the queue file, as `add` does: a schedule is
    // something added.
    if !matches!(&cli.command, Command::Schedule(s) if s.creates()) {
        require_queue_file(&cli.global)?;
    }
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
        let on_url = cli.global.db.to_str().is_some_and(crate::serve::is_url);
        if *watch && cli.global.redis.is_none() && !on_url {
            return crate::stats_output::watch_file(&cli.global, *json, forward_flows).await;
        }
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
            | Command::List { .. }
            | Command::Result { .. }
            | Command::Limits { .. }
    ) || matches!(&cli.command, Command::Schedule(s) if s.looks_only());
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

/// Run one of the small subcommands on the opened `queue`.
async fn one(queue: &BoxQueue, command: Command) -> CliResult {
    let mut out = std::io::stdout();
    match command {
        Command::Add(_)
        | Command::Stats { .. }
        | Command::Result { .. }
        | Command::Work(_)
        | Command::Step(_)
        | Command::Supervise { .. }
        | Command::Completions { .. }
        | Command::Man { .. }
        | Command::Forward(_)
        | Command::Serve(_) => Ok(()),
        Command::Schedule(s) => crate::schedule::run(queue, s).await,
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
            // id, flow, deliveries, priority tier, payload (SPEC section 9).
            for item in items {
                writeln!(
                    out,
                    "{}\t{}\t{}\t{}\t{}",
                    item.id,
                    show_flow(&item.flow),
                    item.deliveries,
                    item.priority,
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
        Command::List {
            state,
            limit,
            offset,
            contains,
            json,
        } => list(queue, state, limit, offset, contains, json).await,
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
        Command::Cancel { id } => match queue.cancel(id).await? {
            workjournal::CancelOutcome::Ended => {
                writeln!(out, "cancelled {id}").map_err(CliError::output)
            }
            workjournal::CancelOutcome::Marked => writeln!(
                out,
                "cancelling {id}: it runs; its worker stops it and ends it as cancelled"
            )
            .map_err(CliError::output),
            workjournal::CancelOutcome::NotFound => Err(CliError::new(
                code::NOT_FOUND,
                format!("no item {id}: never added, finished, or removed"),
            )),
        },
        Command::Update {
            id,
            priority,
            delay,
            at,
            payload,
            file,
        } => {
            let mut update = workjournal::ItemUpdate::new();
            if let Some(t) = priority {
                update = update.priority(t);
            }
            if let Some(t) = crate::add::not_before(queue, delay, at).await? {
                update = update.not_before_ms(t);
            }
            match (payload, file) {
                (Some(p), _) => update = update.payload(p.into_bytes()),
                (None, Some(f)) => {
                    let bytes = std::fs::read(&f).map_err(|e| crate::add::input_error(&f, e))?;
                    update = update.payload(bytes);
                }
                (None, None) => {}
            }
            if !queue.update(id, update).await? {
                return Err(CliError::new(
                    code::NOT_FOUND,
                    format!("no item {id}: never added, removed, or finished long ago"),
                ));
            }
            writeln!(out, "updated {id}").map_err(CliError::output)
        }
        Command::Promote { id } => {
            if !queue.promote(id).await? {
                return Err(CliError::new(
                    code::NOT_FOUND,
                    format!("no delayed item {id}"),
                ));
            }
            writeln!(out, "promoted {id}").map_err(CliError::output)
        }
        Command::Remove { id } => {
            if !queue.remove(id).await? {
                return Err(CliError::new(code::NOT_FOUND, format!("no item {id}")));
            }
            writeln!(out, "removed {id}").map_err(CliError::output)
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

/// Redrive every dead letter, a batch at a time; how many moved.
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

/// `list` (SPEC 9): one page of one state, as lines or as JSON.
async fn list(
    queue: &BoxQueue,
    state: ItemState,
    limit: usize,
    offset: u64,
    contains: Option<String>,
    json: bool,
) -> CliResult {
    let mut query = ListQuery::new(state).limit(limit).offset(offset);
    if let Some(text) = contains {
        query = query.contains(text.into_bytes());
    }
    let page = queue.list(query).await?;
    let mut out = std::io::stdout();
    if json {
        use base64::Engine;
        let items: Vec<serde_json::Value> = page
            .items
            .iter()
            .map(|l| {
                let mut v = item_json(&l.item);
                v["state"] = state.name().into();
                v["not_before_ms"] = l.item.not_before_ms.into();
                v["claimed_at_ms"] = l.claimed_at_ms.into();
                v["finished_at_ms"] = l.finished_at_ms.into();
                v["reason"] = l.reason.clone().into();
                v["failed_at_ms"] = l.failed_at_ms.into();
                v["held"] = l.held.into();
                v["cancelling"] = l.cancelling.into();
                if let Some(r) = &l.result {
                    v["result"] = std::str::from_utf8(r).ok().into();
                    v["result_base64"] = base64::engine::general_purpose::STANDARD.encode(r).into();
                }
                v
            })
            .collect();
        let v = serde_json::json!({ "items": items, "next_offset": page.next_offset });
        return writeln!(out, "{v}").map_err(CliError::output);
    }
    for l in &page.items {
        let at = match state {
            ItemState::Completed | ItemState::Cancelled => l.finished_at_ms,
            ItemState::DeadLetter => l.failed_at_ms,
            ItemState::Pending => l.claimed_at_ms,
            ItemState::Delayed | ItemState::Due => l.item.not_before_ms,
            ItemState::Backlog | ItemState::Parked => Some(l.item.enqueued_at_ms),
        };
        let extra = match (&l.result, &l.reason) {
            (Some(r), _) => format!("\t{}", preview(r)),
            (None, Some(reason)) => format!("\t{}", reason_line(reason)),
            (None, None) => String::new(),
        };
        writeln!(
            out,
            "{}\t{}\t{}\t{}\t{}{extra}",
            l.item.id,
            show_flow(&l.item.flow),
            l.item.deliveries,
            at.map(rfc3339).unwrap_or_else(|| "-".to_string()),
            preview(&l.item.payload)
        )
        .map_err(CliError::output)?;
    }
    if let Some(next) = page.next_offset {
        eprintln!("more: --offset {next}");
    }
    Ok(())
}
