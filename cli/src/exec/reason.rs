//! What a status record means for the item: the [`Outcome`], and the
//! failure text built from how the command ended and the end of its
//! stderr.

use std::time::Duration;

use rustix::process::Signal;

use super::protocol::{Ended, Status};
use super::{BACK_OFF_EXIT, Failure, KEEP_STDOUT_CAP, Outcome, RetryAfter, STDERR_TAIL_BYTES};

/// Whether our stdout is a pipe or a socket (the only outputs that can be
/// closed under us).
fn stdout_is_pipe() -> bool {
    use std::os::fd::AsFd;
    use std::os::unix::fs::FileTypeExt;
    let Ok(fd) = std::io::stdout().as_fd().try_clone_to_owned() else {
        return false;
    };
    std::fs::File::from(fd)
        .metadata()
        .map(|m| m.file_type().is_fifo() || m.file_type().is_socket())
        .unwrap_or(false)
}

/// What a status record means for the item.
pub(super) fn outcome(status: Status, timeout: Option<Duration>, keep_stdout: bool) -> Outcome {
    let tail = &status.stderr;
    let (how, signal) = match status.ended {
        Ended::NotStarted => {
            return Outcome::NotStarted(Failure(String::from_utf8_lossy(tail).into_owned()));
        }
        Ended::TimedOut => {
            let limit = timeout.map(humantime::format_duration);
            let limit = limit.map(|d| d.to_string()).unwrap_or_default();
            let how = format!("command timed out after {limit} and was killed");
            return Outcome::Failed(Failure(with_stderr(&how, tail)));
        }
        Ended::Exited(0) => {
            if status.stdout_over {
                return Outcome::Failed(Failure(format!(
                    "command wrote more than the {KEEP_STDOUT_CAP} bytes --keep-stdout keeps"
                )));
            }
            return Outcome::Ok(keep_stdout.then_some(status.stdout));
        }
        Ended::Exited(c) if c == i32::from(BACK_OFF_EXIT) => {
            let how = format!("command asked to back off (exit {BACK_OFF_EXIT})");
            let failure = Failure(with_stderr(&how, tail));
            return Outcome::BackOff(retry_after(&failure.0), failure);
        }
        // A shell reports a child killed by signal N as exit code 128 + N.
        Ended::Exited(c) => (format!("command exited with code {c}"), c.checked_sub(128)),
        Ended::Signaled(s) => (format!("command killed by signal {s}"), Some(s)),
    };
    if signal == Some(Signal::PIPE.as_raw()) && stdout_is_pipe() {
        return Outcome::StdoutClosed;
    }
    Outcome::Failed(Failure(with_stderr(&how, tail)))
}

/// The back-off a command named on the last `retry-after:` line of its
/// stderr (kept in `text`): a duration (`30s`, `1m30s`) or whole seconds;
/// a value that is neither is [`RetryAfter::Unreadable`], not skipped for
/// an earlier line.
pub(super) fn retry_after(text: &str) -> RetryAfter {
    let found = text.lines().rev().find_map(|line| {
        let line = line.trim();
        let at = line.to_ascii_lowercase().find("retry-after:")?;
        Some(line.get(at + "retry-after:".len()..)?.trim().to_string())
    });
    let Some(value) = found else {
        return RetryAfter::Missing;
    };
    match value.parse::<u64>() {
        Ok(secs) => RetryAfter::Read(Duration::from_secs(secs)),
        Err(_) => match humantime::parse_duration(&value) {
            Ok(d) => RetryAfter::Read(d),
            Err(_) => RetryAfter::Unreadable(value),
        },
    }
}

/// The failure text: `how`, then the last non-empty line of stderr on the
/// first line (for a Python traceback, its final error line), then the end
/// of stderr (at most [`STDERR_TAIL_BYTES`], from a line start) when it has
/// more than that one line.
fn with_stderr(how: &str, bytes: &[u8]) -> String {
    let tail = stderr_tail(bytes);
    let last = tail
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or_default();
    if last.is_empty() {
        return how.to_string();
    }
    if tail.trim() == last {
        format!("{how}: {last}")
    } else {
        format!("{how}: {last}\n{tail}")
    }
}

/// The last [`STDERR_TAIL_BYTES`] of `bytes` as text, from the first line
/// that starts inside them, trimmed.
fn stderr_tail(bytes: &[u8]) -> String {
    let start = bytes.len().saturating_sub(STDERR_TAIL_BYTES);
    let text = String::from_utf8_lossy(&bytes[start..]);
    let text = if start > 0 {
        // Drop the cut first line, unless it is the only one.
        match text.split_once('\n') {
            Some((_, rest)) if !rest.trim().is_empty() => rest,
            _ => &text,
        }
    } else {
        &text
    };
    text.trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `retry-after:` value that is not a duration is reported as such,
    /// not silently replaced by `--backoff`.
    #[test]
    fn retry_after_tells_an_unreadable_value_from_a_missing_one() {
        assert_eq!(
            retry_after("x\nretry-after: 30"),
            RetryAfter::Read(Duration::from_secs(30))
        );
        assert_eq!(
            retry_after("Retry-After: 1m30s"),
            RetryAfter::Read(Duration::from_secs(90))
        );
        assert_eq!(retry_after("no line"), RetryAfter::Missing);
        assert_eq!(
            retry_after("retry-after: 5\nretry-after: soon"),
            RetryAfter::Unreadable("soon".into())
        );
    }

    #[test]
    fn the_reason_leads_with_the_last_line_of_stderr() {
        let traceback =
            b"Traceback (most recent call last):\n  File \"x.py\", line 1\nValueError: bad\n\n";
        let r = with_stderr("command exited with code 1", traceback);
        assert_eq!(
            r.lines().next(),
            Some("command exited with code 1: ValueError: bad")
        );
        assert!(r.contains("Traceback"), "{r}");
        assert_eq!(with_stderr("x", b"one line\n"), "x: one line");
        assert_eq!(with_stderr("x", b"  \n"), "x");
        let long = format!("{}\nlast\n", "a".repeat(5000));
        let r = with_stderr("x", long.as_bytes());
        assert_eq!(r.lines().next(), Some("x: last"));
    }
}
