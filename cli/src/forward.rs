//! `workjournal forward`: hand the items of the queue file over to a Redis
//! queue, exactly once (SPEC section 11).

use std::time::Duration;

use clap::Args;

use crate::args::Global;
use crate::{CliError, CliResult, code};

#[derive(Debug, Args)]
pub(crate) struct ForwardArgs {
    /// This queue file's name in the fleet: unique among the files that
    /// forward into one namespace (1 to 128 letters, digits, '.', '_', '-').
    #[arg(long, value_name = "NAME")]
    pub(crate) origin: String,
    /// Forward only this flow (repeat for more; "" is the default flow).
    /// Default: every flow.
    #[arg(long = "flow", value_name = "FLOW")]
    pub(crate) flows: Vec<String>,
    /// Stop once nothing is left to forward, instead of running until
    /// Ctrl-C or SIGTERM.
    #[arg(long)]
    pub(crate) until_empty: bool,
    /// Most items per batch (one Redis call).
    #[arg(long, value_name = "N", default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub(crate) batch: u32,
    /// Remove local items only once this many Redis replicas hold them
    /// (Redis WAIT).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub(crate) min_replicas: u32,
    /// How often to print a progress line on stderr.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration, default_value = "10s")]
    pub(crate) progress_every: Duration,
}

#[cfg(feature = "forward")]
fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

#[cfg(not(feature = "forward"))]
pub(crate) async fn forward(_global: &Global, _args: &ForwardArgs) -> CliResult {
    Err(CliError::new(
        code::USAGE,
        "forward: this workjournal was built without the forward feature (rebuild with --features forward)",
    ))
}

#[cfg(feature = "forward")]
pub(crate) async fn forward(global: &Global, args: &ForwardArgs) -> CliResult {
    use workjournal::forward::LagSource;
    use workjournal::{BoxQueue, Config, EmbeddedQueue, WorkQueue};

    let Some(url) = &global.redis else {
        return Err(CliError::new(
            code::USAGE,
            "forward needs --redis URL (the fleet's queue) besides --db PATH",
        ));
    };
    workjournal::forward::check_origin(&args.origin).map_err(usage)?;
    // Only `add` makes a queue file (SPEC section 9): a mistyped --db is not
    // an empty journal to forward.
    if !global.db.exists() {
        return Err(CliError::new(
            code::INPUT,
            format!("no queue file at {}", global.db.display()),
        ));
    }
    let first = std::sync::Arc::new(tokio::sync::Notify::new());
    let second = std::sync::Arc::new(tokio::sync::Notify::new());
    crate::work::signals(first.clone(), second.clone())?;
    let config = Config::default();
    let max_payload_bytes = config.get_max_payload_bytes();
    let local = EmbeddedQueue::open(&global.db, config).await?;
    // While it runs, `forward` serves the file as `work` does (SPEC 11),
    // from the start: `add`, `stats` (with the lag), `peek` ... work beside
    // it even while Redis is away.
    let lag = LagSource::forwarder(local.clone(), args.flows.clone());
    let serving = crate::serve::serve_own_file(
        &global.db,
        BoxQueue::new(local.clone()),
        max_payload_bytes,
        crate::serve::ServedLag::of_forwarder(lag),
    )
    .await;
    let result = run_forward(global, args, url, &local, &first, &second).await;
    if let Some(serving) = serving {
        serving.stop().await;
    }
    let closed = local.close().await;
    result?;
    closed?;
    Ok(())
}

/// `InvalidInput` of the forwarder's own checks is a usage error (exit 2).
#[cfg(feature = "forward")]
fn usage(e: workjournal::Error) -> CliError {
    match e {
        workjournal::Error::InvalidInput(_) => CliError::new(code::USAGE, crate::one_line(&e)),
        other => other.into(),
    }
}

/// Reach Redis, then forward until stopped (or empty); the caller closes
/// `local`.
#[cfg(feature = "forward")]
async fn run_forward(
    global: &Global,
    args: &ForwardArgs,
    url: &str,
    local: &workjournal::EmbeddedQueue,
    first: &std::sync::Arc<tokio::sync::Notify>,
    second: &tokio::sync::Notify,
) -> CliResult {
    use workjournal::WorkQueue;
    use workjournal::forward::{ForwardOptions, Forwarder, Progress, RunUntil};

    let options = crate::open::redis_options(global).min_replicas(args.min_replicas);
    let remote = match reach(url, &global.namespace, options, first, args.progress_every).await {
        Some(Ok(r)) => r,
        Some(Err(e)) => return Err(usage(e)),
        None => {
            say("stopped before Redis could be reached: nothing was forwarded");
            return Ok(());
        }
    };
    let forwarder = match Forwarder::new(local.clone(), remote.clone(), &args.origin).await {
        Ok(f) => f
            .flows(args.flows.clone())
            .options(ForwardOptions::default().max_batch_items(args.batch as usize)),
        Err(e) => {
            let _ = remote.close().await;
            return Err(usage(e));
        }
    };

    let stop = {
        let first = first.clone();
        async move {
            first.notified().await;
            say("stopping: finishing the batch in flight (Ctrl-C again to stop now)");
        }
    };
    let until = if args.until_empty {
        RunUntil::Empty
    } else {
        RunUntil::Stopped
    };
    let started = tokio::time::Instant::now();
    let every = args.progress_every;
    let mut last = started;
    let report = move |p: &Progress| {
        let now = tokio::time::Instant::now();
        if now.duration_since(last) >= every {
            last = now;
            say(&progress_text(p, started.elapsed()));
        }
    };
    let outcome = tokio::select! {
        r = forwarder.run(until, stop, report) => Some(r),
        () = second.notified() => None,
    };
    let _ = remote.close().await;
    match outcome {
        None => Err(CliError::new(
            code::INTERRUPTED,
            "stopped at once; a batch in flight is sent again by the next run, and taken once",
        )),
        Some(r) => {
            let p = r?;
            say(&format!("done: {}", progress_text(&p, started.elapsed())));
            Ok(())
        }
    }
}

/// Connect to the fleet's Redis, waiting for it while it is unreachable
/// (an edge site's Redis may be away when the forwarder starts), backing
/// off as after a failed batch and saying so every `every`; `None` if
/// stopped first.
#[cfg(feature = "forward")]
async fn reach(
    url: &str,
    namespace: &str,
    options: workjournal::RedisOptions,
    stop: &tokio::sync::Notify,
    every: Duration,
) -> Option<workjournal::Result<workjournal::RedisQueue>> {
    use workjournal::{Config, Error, RedisQueue};
    let backoff = workjournal::forward::ForwardOptions::default().get_backoff();
    let mut failures = 0u32;
    let mut last_said: Option<tokio::time::Instant> = None;
    loop {
        let attempt = RedisQueue::connect(url, namespace, Config::default(), options.clone());
        let e = tokio::select! {
            r = attempt => match r {
                Err(e @ Error::Backend { .. }) => e,
                other => return Some(other),
            },
            () = stop.notified() => return None,
        };
        failures = failures.saturating_add(1);
        let now = tokio::time::Instant::now();
        if last_said.is_none_or(|t| now.duration_since(t) >= every) {
            last_said = Some(now);
            say(&format!(
                "cannot reach Redis yet ({failures} attempts), retrying: {}",
                crate::one_line(&e)
            ));
        }
        tokio::select! {
            () = tokio::time::sleep(backoff.next_delay(failures)) => {}
            () = stop.notified() => return None,
        }
    }
}

/// One progress line: totals, rate, lag and the last failure.
#[cfg(feature = "forward")]
fn progress_text(p: &workjournal::forward::Progress, elapsed: Duration) -> String {
    let secs = elapsed.as_secs_f64();
    let rate = if secs > 0.0 {
        p.items as f64 / secs
    } else {
        0.0
    };
    let oldest = match p.lag.oldest_age_ms {
        Some(ms) => format!(
            ", oldest {}",
            humantime::format_duration(Duration::from_millis(ms - ms % 1000))
        ),
        None => String::new(),
    };
    let mut line = format!(
        "forwarded {} ({} added, {} duplicates, {} already taken) in {} batches, {rate:.1}/s; lag {} items{oldest}",
        p.items, p.added, p.duplicates, p.skipped, p.batches, p.lag.count
    );
    if let Some(e) = &p.last_error {
        line.push_str(&format!("; retrying after {} failures: {e}", p.failures));
    }
    line
}
