//! `workjournal add`.

use std::io::{BufRead, IsTerminal, Read, Write};
use std::path::Path;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use tokio::task::JoinSet;
use workjournal::{BoxQueue, Config, NewItem, WorkQueue};

use crate::args::AddArgs;
use crate::{CliError, CliResult, code};

/// Lines per `add_batch` (one transaction each).
const BATCH_ITEMS: usize = 1000;
/// Payload bytes per `add_batch`, so that long lines make smaller batches.
const BATCH_BYTES: usize = 8 * 1024 * 1024;
/// Delayed adds in flight at once (there is no delayed batch operation; the
/// embedded backend group-commits concurrent adds).
const DELAYED_IN_FLIGHT: usize = 256;

pub(crate) fn input_error(path: &Path, e: std::io::Error) -> CliError {
    CliError::new(
        code::INPUT,
        format!("cannot read input file {}: {e}", path.display()),
    )
}

/// What `add` reads, opened or read before the queue is opened.
pub(crate) enum Input {
    /// One payload, read whole.
    One(Vec<u8>),
    /// `--lines`: a reader of lines and its size in bytes when known.
    Lines(Box<dyn BufRead>, Option<u64>),
}

/// Read the payload (or open the lines) of `add`, so that a missing or
/// unreadable input fails before the queue file is touched (SPEC section 9).
pub(crate) fn read_input(args: &AddArgs) -> CliResult<Input> {
    if args.lines {
        return Ok(match &args.file {
            Some(path) => {
                let file = std::fs::File::open(path).map_err(|e| input_error(path, e))?;
                let len = file.metadata().ok().map(|m| m.len());
                Input::Lines(Box::new(std::io::BufReader::new(file)), len)
            }
            None => Input::Lines(Box::new(std::io::stdin().lock()), None),
        });
    }
    Ok(Input::One(match (&args.payload, &args.file) {
        (Some(p), _) => p.clone().into_bytes(),
        (None, Some(f)) => std::fs::read(f).map_err(|e| input_error(f, e))?,
        (None, None) => {
            let mut buf = Vec::new();
            std::io::stdin()
                .lock()
                .read_to_end(&mut buf)
                .map_err(|e| CliError::new(code::INPUT, format!("cannot read stdin: {e}")))?;
            if buf.is_empty() {
                return Err(CliError::new(
                    code::USAGE,
                    "stdin was empty: nothing to add (pass '' as PAYLOAD for an empty item)",
                ));
            }
            buf
        }
    }))
}

/// A payload the queue would refuse (over the default `max_payload_bytes`)
/// is refused before a queue file that does not exist yet is created, so
/// that the refusal (exit 7) leaves no empty queue behind (SPEC section 9).
/// An existing file, or a queue another process serves, says itself.
pub(crate) fn refuse_before_creating(global: &crate::args::Global, input: &Input) -> CliResult {
    let Input::One(payload) = input else {
        return Ok(());
    };
    let is_url = global.db.to_str().is_some_and(crate::serve::is_url);
    let limit = Config::default().get_max_payload_bytes();
    if global.redis.is_none() && !is_url && !global.db.exists() && payload.len() > limit {
        return Err(CliError::new(
            code::INVALID,
            format!(
                "invalid input: payload of {} bytes is over max_payload_bytes ({limit} bytes); no queue file was created at {}",
                payload.len(),
                global.db.display()
            ),
        ));
    }
    Ok(())
}

/// The not-before time `--delay D` (from the queue's now) or `--at TIME`
/// give, in ms since the Unix epoch; `None` without either.
pub(crate) async fn not_before(
    queue: &BoxQueue,
    delay: Option<Duration>,
    at: Option<u64>,
) -> CliResult<Option<u64>> {
    let Some(d) = delay else {
        return Ok(at);
    };
    let now = queue.now_ms().await?;
    let at = u64::try_from(d.as_millis())
        .ok()
        .and_then(|d| now.checked_add(d));
    match at {
        Some(at) => Ok(Some(at)),
        None => Err(CliError::new(
            code::INVALID,
            format!(
                "--delay {}: the time overflows (past the year 584 million)",
                humantime::format_duration(d)
            ),
        )),
    }
}

/// Add what `args` and `input` say and print the id; with `--wait`, print
/// nothing and return the id to wait for.
pub(crate) async fn add(queue: &BoxQueue, args: &AddArgs, input: Input) -> CliResult<Option<u64>> {
    let not_before_ms = not_before(queue, args.delay, args.at).await?;
    let payload = match input {
        Input::Lines(reader, total_bytes) => {
            return add_lines(queue, args, not_before_ms, reader, total_bytes)
                .await
                .map(|()| None);
        }
        Input::One(payload) => payload,
    };
    let mut item = NewItem::new(payload)
        .flow(args.flow.clone())
        .priority(args.priority)
        .cost(args.cost);
    if let Some(key) = &args.dedup_key {
        item = item.dedup_key(key.clone());
    }
    let added = match not_before_ms {
        Some(t) => queue.add_delayed(item, t).await?,
        None => queue.add(item).await?,
    };
    if added.duplicate {
        let _ = writeln!(
            std::io::stderr(),
            "workjournal: duplicate: key {:?} was added within the dedup window as item {}; nothing added",
            args.dedup_key.as_deref().unwrap_or_default(),
            added.id
        );
    }
    if args.wait {
        return Ok(Some(added.id));
    }
    writeln!(std::io::stdout(), "{}", added.id)
        .map_err(CliError::output)
        .map(|()| None)
}

async fn add_lines(
    queue: &BoxQueue,
    args: &AddArgs,
    not_before_ms: Option<u64>,
    mut reader: Box<dyn BufRead>,
    total_bytes: Option<u64>,
) -> CliResult {
    let max_payload = Config::default().get_max_payload_bytes();
    let bar = progress(total_bytes);

    let mut added = 0u64;
    let mut first_id: Option<u64> = None;
    let mut last_id = 0u64;
    let mut batch: Vec<NewItem> = Vec::new();
    let mut batch_bytes = 0usize;
    let mut line_no = 0u64;
    // The first line of the batch being gathered.
    let mut batch_first_line = 1u64;
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = reader.read_until(b'\n', &mut line).map_err(|e| {
            CliError::new(
                code::INPUT,
                format!("cannot read line {}: {e}", line_no + 1),
            )
        })?;
        let eof = n == 0;
        if !eof {
            line_no += 1;
            if let Some(b) = &bar
                && total_bytes.is_some()
            {
                b.inc(n as u64);
            }
            let mut text: &[u8] = &line;
            text = text.strip_suffix(b"\n").unwrap_or(text);
            text = text.strip_suffix(b"\r").unwrap_or(text);
            if !text.is_empty() {
                if text.len() > max_payload {
                    return Err(CliError::new(
                        code::INVALID,
                        format!(
                            "line {line_no}: payload of {} bytes is over max_payload_bytes ({max_payload} bytes); {} items of earlier lines were added",
                            text.len(),
                            added
                        ),
                    ));
                }
                if batch.is_empty() {
                    batch_first_line = line_no;
                }
                batch_bytes += text.len();
                batch.push(
                    NewItem::new(text.to_vec())
                        .flow(args.flow.clone())
                        .priority(args.priority)
                        .cost(args.cost),
                );
            }
        }
        if !batch.is_empty() && (eof || batch.len() >= BATCH_ITEMS || batch_bytes >= BATCH_BYTES) {
            let items = std::mem::take(&mut batch);
            batch_bytes = 0;
            let result = match not_before_ms {
                None => queue
                    .add_batch(items)
                    .await
                    .map(|added| added.into_iter().map(|a| a.id).collect())
                    .map_err(CliError::from),
                Some(t) => add_delayed_all(queue, items, t).await,
            };
            let ids: Vec<u64> = result.map_err(|e| {
                batch_failed(e, batch_first_line, line_no, added, not_before_ms.is_some())
            })?;
            for id in ids {
                first_id.get_or_insert(id);
                last_id = last_id.max(id);
                added += 1;
            }
            if let Some(b) = &bar {
                if total_bytes.is_none() {
                    b.set_position(added);
                }
                b.set_message(format!("{added} items"));
            }
        }
        if eof {
            break;
        }
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let mut out = std::io::stdout();
    match first_id {
        Some(first) => writeln!(out, "added {added} items (ids {first}-{last_id})"),
        None => writeln!(out, "added 0 items"),
    }
    .map_err(CliError::output)
}

/// The error of the batch of lines `first..=last`, naming the lines and how
/// many items of earlier lines were added (SPEC section 9).
fn batch_failed(e: CliError, first: u64, last: u64, added: u64, delayed: bool) -> CliError {
    let lines = if first == last {
        format!("line {first}")
    } else {
        format!("lines {first}-{last}")
    };
    let fate = if e.code == code::BACKEND {
        // A timeout does not tell whether the server applied the batch.
        format!("{lines} may or may not have been added (a Redis timeout leaves that unknown)")
    } else if delayed {
        format!("some of {lines} may have been added (delayed adds are one at a time)")
    } else {
        format!("none of {lines} were added")
    };
    CliError::new(
        e.code,
        format!(
            "{lines}: {}; {added} items of earlier lines were added, {fate}",
            e.message
        ),
    )
}

/// Delayed adds, `DELAYED_IN_FLIGHT` at a time. Ids in input order.
async fn add_delayed_all(
    queue: &BoxQueue,
    items: Vec<NewItem>,
    not_before_ms: u64,
) -> CliResult<Vec<u64>> {
    let mut ids = vec![0u64; items.len()];
    let mut tasks = JoinSet::new();
    for (i, item) in items.into_iter().enumerate() {
        if tasks.len() >= DELAYED_IN_FLIGHT {
            collect(&mut tasks, &mut ids).await?;
        }
        let q = queue.clone();
        tasks.spawn(async move { (i, q.add_delayed(item, not_before_ms).await) });
    }
    while !tasks.is_empty() {
        collect(&mut tasks, &mut ids).await?;
    }
    Ok(ids)
}

async fn collect(
    tasks: &mut JoinSet<(usize, workjournal::Result<workjournal::Added>)>,
    ids: &mut [u64],
) -> CliResult {
    match tasks.join_next().await {
        Some(Ok((i, Ok(added)))) => {
            if let Some(slot) = ids.get_mut(i) {
                *slot = added.id;
            }
            Ok(())
        }
        Some(Ok((_, Err(e)))) => Err(e.into()),
        Some(Err(e)) => Err(CliError::new(
            code::FAILURE,
            format!("add task failed: {e}"),
        )),
        None => Ok(()),
    }
}

/// A progress bar on stderr when it is a terminal: bytes of a file, or a
/// count of items from stdin.
fn progress(total_bytes: Option<u64>) -> Option<ProgressBar> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    Some(match total_bytes {
        Some(len) => {
            let bar = ProgressBar::new(len);
            bar.set_style(
                ProgressStyle::with_template("{bar:30} {bytes}/{total_bytes} {msg} ({elapsed})")
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            bar
        }
        None => {
            let bar = ProgressBar::new_spinner();
            bar.set_style(
                ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar
        }
    })
}
