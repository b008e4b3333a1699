//! `workjournal work` and `workjournal step`: run a command per item.

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use tokio::sync::Notify;
use workjournal::{BoxQueue, Config, HandlerError, RetryPolicy, WorkQueue, Worker, worker::Event};

use crate::args::{ExecArgs, Global, MAX_CONCURRENCY, PREFETCH_PER_SLOT, StepArgs, WorkArgs};
use crate::{CliError, CliResult, code, exec};

/// How often `work` prints a progress line when stderr is not a terminal.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// How long past `--kill-grace` the worker waits for a cancelled item's
/// command to be reported stopped before it drops the run.
const CANCEL_MARGIN: Duration = Duration::from_secs(2);

fn config(exec: &ExecArgs) -> Config {
    Config::default()
        .max_deliveries(
            exec.max_deliveries
                .unwrap_or(workjournal::DEFAULT_MAX_DELIVERIES),
        )
        .dead_letter_cap(
            exec.dead_letter_cap
                .unwrap_or(workjournal::DEFAULT_DEAD_LETTER_CAP),
        )
}

/// `--max-deliveries` and `--dead-letter-cap` set the config of the queue
/// this process opens; through another process's socket the server's
/// config applies (SPEC section 9). A value given that does not apply is
/// named, with the one that does where the server tells it
/// (`max_deliveries`; the dead-letter cap is not on the wire).
fn warn_unapplied(exec: &ExecArgs, queue: &BoxQueue, served: bool) {
    if !served {
        return;
    }
    let server = queue.max_deliveries();
    if let Some(n) = exec.max_deliveries
        && n != server
    {
        let _ = writeln!(
            std::io::stderr(),
            "workjournal: warning: --max-deliveries {n} does not apply: another process serves this queue, and its max_deliveries {server} applies"
        );
    }
    if let Some(n) = exec.dead_letter_cap {
        let _ = writeln!(
            std::io::stderr(),
            "workjournal: warning: --dead-letter-cap {n} does not apply: another process serves this queue, and its own dead-letter cap applies"
        );
    }
}

fn log_line(bar: Option<&ProgressBar>, line: &str) {
    match bar {
        Some(b) => b.println(line),
        None => {
            let _ = writeln!(std::io::stderr(), "{line}");
        }
    }
}

/// The first line of a failure text, for a log line (control characters
/// escaped).
fn first_line(text: &str) -> String {
    crate::display::reason_line(text)
}

#[derive(Default)]
struct Counters {
    done: AtomicU64,
    failed: AtomicU64,
    dead: AtomicU64,
    cancelled: AtomicU64,
}

/// Notifies `first` at the first Ctrl-C, SIGTERM or SIGHUP (a closed ssh
/// session: a graceful stop too), `second` at the next.
pub(crate) fn signals(first: Arc<Notify>, second: Arc<Notify>) -> CliResult {
    use tokio::signal::unix::{SignalKind, signal};
    let err = |e: std::io::Error| {
        CliError::new(
            code::FAILURE,
            format!("cannot listen for Ctrl-C/SIGTERM/SIGHUP: {e}"),
        )
    };
    let mut int = signal(SignalKind::interrupt()).map_err(err)?;
    let mut term = signal(SignalKind::terminate()).map_err(err)?;
    let mut hup = signal(SignalKind::hangup()).map_err(err)?;
    tokio::spawn(async move {
        tokio::select! { _ = int.recv() => {}, _ = term.recv() => {}, _ = hup.recv() => {} }
        first.notify_one();
        tokio::select! { _ = int.recv() => {}, _ = term.recv() => {}, _ = hup.recv() => {} }
        second.notify_one();
    });
    Ok(())
}

pub(crate) async fn work(global: &Global, args: &WorkArgs) -> CliResult {
    crate::open::require_queue_file(global)?;
    // Signals are taken over before the socket appears, so a SIGTERM sent
    // as soon as the socket exists is a graceful stop, not a kill.
    let first = Arc::new(Notify::new());
    let second = Arc::new(Notify::new());
    signals(first.clone(), second.clone())?;
    // While it runs, `work` serves the file it opened to other processes.
    // Closing it stops the server it runs (SPEC section 10, Take-over).
    let (queue, served) = crate::serve::open_for_work(global, config(&args.exec)).await?;
    warn_unapplied(&args.exec, &queue, served);
    let result = run_work(&queue, args, first, second).await;
    let closed = queue.close().await;
    result?;
    closed?;
    Ok(())
}

async fn run_work(
    queue: &BoxQueue,
    args: &WorkArgs,
    first: Arc<Notify>,
    second: Arc<Notify>,
) -> CliResult {
    let concurrency = match args.concurrency {
        Some(n) => n as usize,
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let prefetch = args.prefetch.map_or_else(
        || {
            concurrency
                .saturating_mul(PREFETCH_PER_SLOT)
                .min(MAX_CONCURRENCY as usize)
        },
        |n| n as usize,
    );
    if let Some(flow) = &args.flow
        && !queue.paused_flows().await?.contains(flow)
    {
        let _ = writeln!(
            std::io::stderr(),
            "workjournal: note: flow {flow:?} is not paused; --flow works on its parked items only"
        );
    }

    let tty = std::io::stderr().is_terminal();
    let bar = if tty {
        let s = queue.stats().await?;
        let bar = ProgressBar::new(s.backlog + s.delayed + s.pending);
        bar.set_style(
            ProgressStyle::with_template("{bar:30} {pos}/{len} {msg} ({elapsed})")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        Some(bar)
    } else {
        None
    };

    let counters = Arc::new(Counters::default());
    let started = Instant::now();
    let events = {
        let counters = counters.clone();
        let bar = bar.clone();
        move |event: &Event| match event {
            Event::Acked { .. } => {
                let done = counters.done.fetch_add(1, Ordering::Relaxed) + 1;
                if let Some(b) = &bar {
                    b.inc(1);
                    if b.position() > b.length().unwrap_or(0) {
                        b.set_length(b.position());
                    }
                    b.set_message(progress_text(&counters, started, done));
                }
            }
            Event::Retried {
                id,
                delivery,
                not_before_ms: _,
                error,
            } => {
                counters.failed.fetch_add(1, Ordering::Relaxed);
                log_line(
                    bar.as_ref(),
                    &format!(
                        "item {id} failed (delivery {delivery}), will retry: {}",
                        first_line(error)
                    ),
                );
            }
            Event::DeadLettered {
                id,
                delivery,
                reason,
            } => {
                counters.failed.fetch_add(1, Ordering::Relaxed);
                counters.dead.fetch_add(1, Ordering::Relaxed);
                if let Some(b) = &bar {
                    b.inc(1);
                }
                log_line(
                    bar.as_ref(),
                    &format!(
                        "item {id} failed (delivery {delivery}), dead-lettered: {}",
                        first_line(reason)
                    ),
                );
            }
            Event::LeaseLost { id, delivery } => log_line(
                bar.as_ref(),
                &format!(
                    "item {id} (delivery {delivery}) was taken over by another worker; its result was dropped"
                ),
            ),
            Event::Cancelled { id, delivery } => {
                counters.cancelled.fetch_add(1, Ordering::Relaxed);
                log_line(
                    bar.as_ref(),
                    &format!(
                        "item {id} (delivery {delivery}) was cancelled; its command was stopped"
                    ),
                )
            }
            Event::QueueError { op, error } => {
                log_line(bar.as_ref(), &format!("queue error in {op}: {error}"))
            }
            _ => {}
        }
    };

    let shutdown = {
        let first = first.clone();
        let bar = bar.clone();
        let lease = args.exec.lease;
        async move {
            first.notified().await;
            log_line(
                bar.as_ref(),
                &format!(
                    "shutting down: waiting up to {} for running commands (Ctrl-C again to stop now)",
                    humantime::format_duration(lease)
                ),
            );
        }
    };

    let ticker = if bar.is_none() {
        let counters = counters.clone();
        Some(tokio::spawn(async move {
            let mut tick = tokio::time::interval(LOG_EVERY);
            tick.tick().await;
            loop {
                tick.tick().await;
                let done = counters.done.load(Ordering::Relaxed);
                let _ = writeln!(
                    std::io::stderr(),
                    "{}",
                    progress_text(&counters, started, done)
                );
            }
        }))
    } else {
        None
    };

    // Set when a command died of SIGPIPE on our closed stdout: stop at once,
    // leaving the unfinished items pending (SPEC section 9).
    let stdout_closed = Arc::new(Notify::new());
    // One long-lived supervisor per slot, reused item after item.
    let supervisors = Arc::new(exec::Supervisors::new(&args.exec.exec));
    let timeout = args.exec.timeout;
    let worker = Worker::new(queue.clone())
        .concurrency(concurrency)
        .prefetch(prefetch)
        .lease(args.exec.lease)
        .grace(args.exec.lease)
        // Room for the command to stop after SIGTERM (and SIGKILL) before
        // the worker gives up on its status.
        .cancel_grace(args.exec.kill_grace.saturating_add(CANCEL_MARGIN))
        .retry_policy(RetryPolicy::default().base(args.exec.backoff))
        .until_empty(args.until_empty)
        .flow(args.flow.clone())
        .on_event(events);
    let closed = stdout_closed.clone();
    let keep_stdout = args.keep_stdout;
    let default_back_off = args.exec.backoff;
    let kill_grace = args.exec.kill_grace;
    let handler_bar = bar.clone();
    let run = worker.run_with_result(
        move |claimed| {
            let supervisors = supervisors.clone();
            let closed = closed.clone();
            let bar = handler_bar.clone();
            async move {
                let stop = workjournal::cancel_requested();
                match supervisors
                    .run(&claimed, timeout, keep_stdout, stop, kill_grace)
                    .await
                {
                    exec::Outcome::Ok(result) => Ok(result),
                    exec::Outcome::Failed(f) => Err(HandlerError::from(f)),
                    exec::Outcome::NotStarted(f) => Err(HandlerError::not_attempted(f)),
                    exec::Outcome::BackOff(after, f) => {
                        let (d, line) = back_off_line(&claimed, &after, default_back_off);
                        log_line(bar.as_ref(), &line);
                        Err(HandlerError::back_off(d, f))
                    }
                    exec::Outcome::StdoutClosed => {
                        // Not a failure of the item: never report back; the
                        // run is dropped and the item stays pending.
                        closed.notify_one();
                        std::future::pending().await
                    }
                }
            }
        },
        shutdown,
    );
    let outcome = tokio::select! {
        r = run => Some(r),
        () = second.notified() => None,
        () = stdout_closed.notified() => {
            if let Some(t) = &ticker {
                t.abort();
            }
            if let Some(b) = &bar {
                b.finish_and_clear();
            }
            let _ = writeln!(
                std::io::stderr(),
                "workjournal: stdout was closed; stopped, unfinished items stay queued for the next run"
            );
            return Ok(());
        }
    };
    if let Some(t) = ticker {
        t.abort();
    }
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    let report = match outcome {
        Some(r) => r?,
        None => {
            return Err(CliError::new(
                code::INTERRUPTED,
                "stopped at once; running commands were killed and their items stay pending until reclaimed",
            ));
        }
    };
    let secs = started.elapsed().as_secs_f64();
    let rate = if secs > 0.0 {
        report.acked as f64 / secs
    } else {
        0.0
    };
    let mut summary = format!(
        "done: {} acked, {} retried, {} dead-lettered in {:.1}s ({:.1} items/s)",
        report.acked, report.retried, report.dead_lettered, secs, rate
    );
    if report.dead_letters_dropped > 0 {
        // Past the dead-letter cap a letter is dropped for good: say so
        // rather than count it as kept (SPEC 9).
        summary.push_str(&format!(
            " ({} of them dropped past the dead-letter cap)",
            report.dead_letters_dropped
        ));
    }
    if report.cancelled > 0 {
        summary.push_str(&format!("; {} cancelled", report.cancelled));
    }
    if report.released > 0 {
        summary.push_str(&format!(
            "; {} given back without spending a delivery",
            report.released
        ));
    }
    if report.abandoned > 0 {
        summary.push_str(&format!(
            "; {} still running at shutdown, left for reclaim",
            report.abandoned
        ));
    }
    // stdout belongs to the commands; the worker's own lines go to stderr.
    let _ = writeln!(std::io::stderr(), "{summary}");
    if args.until_empty && report.dead_lettered > 0 {
        // A script must see that work was given up on (SPEC section 9).
        return Err(CliError::new(
            code::DEAD_LETTERED,
            format!(
                "{} items were dead-lettered in this run (see `workjournal dead-letters`)",
                report.dead_lettered
            ),
        ));
    }
    Ok(())
}

/// What `work` does for a command that exited 75 (SPEC section 9,
/// Back-off from a command): the back-off, and the line that says so,
/// naming a `retry-after:` value it could not read and what applies then.
fn back_off_line(
    claimed: &workjournal::Claimed,
    after: &exec::RetryAfter,
    default: Duration,
) -> (Duration, String) {
    let id = claimed.item.id;
    let (d, whence) = match after {
        exec::RetryAfter::Read(d) => (*d, "its retry-after".to_string()),
        exec::RetryAfter::Missing => (default, "--backoff: no retry-after line".to_string()),
        exec::RetryAfter::Unreadable(value) => (
            default,
            format!(
                "--backoff: cannot read retry-after {:?} (expected a duration such as 30s, or whole seconds)",
                crate::display::preview(value.as_bytes())
            ),
        ),
    };
    let shown = humantime::format_duration(d);
    let line = if claimed.item.flow.is_empty() {
        format!(
            "item {id} asked to back off (exit {}): the default flow cannot be held; given back, delivery not spent, due in {shown} ({whence})",
            exec::BACK_OFF_EXIT
        )
    } else {
        format!(
            "item {id} asked to back off (exit {}): flow {} held for {shown} for every worker ({whence}); item given back in its place, delivery not spent",
            exec::BACK_OFF_EXIT,
            crate::display::show_flow(&claimed.item.flow)
        )
    };
    (d, line)
}

fn progress_text(counters: &Counters, started: Instant, done: u64) -> String {
    let secs = started.elapsed().as_secs_f64();
    let rate = if secs > 0.0 { done as f64 / secs } else { 0.0 };
    format!(
        "{done} done, {} failed, {} dead-lettered, {rate:.1}/s",
        counters.failed.load(Ordering::Relaxed),
        counters.dead.load(Ordering::Relaxed)
    )
}

/// `step FLOW --exec CMD`: run the oldest parked item of FLOW once, keeping
/// its claim fresh while the command runs. Success acks it; failure parks it
/// again (or dead-letters it on its last allowed delivery) and exits 1.
pub(crate) async fn step(global: &Global, args: &StepArgs) -> CliResult {
    crate::open::require_queue_file(global)?;
    let (queue, opened) = crate::open::open_where(global, config(&args.exec), false).await?;
    warn_unapplied(&args.exec, &queue, opened.is_served());
    let result = run_step(&queue, args).await;
    let closed = queue.close().await;
    result?;
    closed?;
    Ok(())
}

async fn run_step(queue: &BoxQueue, args: &StepArgs) -> CliResult {
    let Some(claimed) = queue.step(&args.flow).await? else {
        return Err(CliError::new(
            code::NOT_FOUND,
            format!("flow {:?} has nothing parked", args.flow),
        ));
    };
    let receipt = claimed.receipt;
    let run = async {
        let supervisors = exec::Supervisors::new(&args.exec.exec);
        match supervisors
            .run(
                &claimed,
                args.exec.timeout,
                false,
                std::future::pending(),
                args.exec.kill_grace,
            )
            .await
        {
            exec::Outcome::Ok(_) => Ok(()),
            exec::Outcome::Failed(f) => Err((f, true)),
            exec::Outcome::NotStarted(f) => Err((f, false)),
            // A step runs one item by hand: a back-off request is a failure.
            exec::Outcome::BackOff(_, f) => Err((f, true)),
            exec::Outcome::StdoutClosed => Err((
                exec::Failure("command killed by SIGPIPE: stdout was closed".to_string()),
                true,
            )),
        }
    };
    tokio::pin!(run);
    // The same lower bound as `work` (the worker raises short leases).
    let lease = args.exec.lease.max(crate::args::MIN_LEASE);
    let mut heartbeat = tokio::time::interval(lease / 3);
    heartbeat.tick().await;
    let result = loop {
        tokio::select! {
            r = &mut run => break r,
            _ = heartbeat.tick() => {
                // A lost lease shows up at the ack below; nothing to do here.
                let _ = queue.touch(vec![receipt]).await;
            }
        }
    };
    let mut out = std::io::stdout();
    match result {
        Ok(()) => {
            queue.ack(receipt).await?;
            writeln!(out, "item {} done", receipt.id).map_err(CliError::output)
        }
        Err((failure, false)) => {
            // Not an attempt (SPEC 9, Worker): the item goes back to the
            // flow's parked tail with its delivery given back.
            let now = queue.now_ms().await?;
            queue.release(receipt, now).await?;
            Err(CliError::new(
                code::FAILURE,
                format!(
                    "item {} not run, given back: {}",
                    receipt.id,
                    first_line(&failure.0)
                ),
            ))
        }
        Err((failure, true)) => {
            // The queue's own limit: through a socket, the server's.
            let what = if receipt.delivery >= queue.max_deliveries() {
                queue.dead_letter(receipt, &failure.0).await?;
                "dead-lettered"
            } else {
                queue.park(receipt).await?;
                "parked again"
            };
            Err(CliError::new(
                code::FAILURE,
                format!(
                    "item {} failed (delivery {}), {what}: {}",
                    receipt.id,
                    receipt.delivery,
                    first_line(&failure.0)
                ),
            ))
        }
    }
}
