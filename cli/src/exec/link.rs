//! The worker's side of the command supervisor: start it, send it run
//! requests under tickets, and hand each status to the item that waits for
//! it (SPEC section 9).

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, oneshot};
use workjournal::Claimed;

use super::wire::{self, CANCEL, STOP, Status};
use super::{CANNOT_START, Failure, Outcome, SUPERVISE, outcome, supervisor_program};

/// The command supervisor of one `work` (or `step`) run: one process that
/// runs up to `slots` commands at once and queues the requests past them
/// in the order they came.
///
/// It is started at the first item and kept for the run; one that ended
/// (killed, or it could not read a request) is replaced at the next item.
/// Dropping it, and every [`Run`] it made, closes the lifeline: the
/// supervisor kills the commands still running, each with its group, and
/// exits. It is never killed from here (a supervisor killed alone would
/// leave its commands running).
pub(crate) struct Supervisor {
    cmd: Arc<str>,
    slots: usize,
    tickets: AtomicU64,
    link: Mutex<Option<Arc<Link>>>,
}

/// One started supervisor process.
struct Link {
    /// Messages for the writer task; the last sender dropped closes the
    /// socket's write side, which is the lifeline.
    to: mpsc::UnboundedSender<Outgoing>,
    waiting: Arc<Waiting>,
}

/// The run requests that wait for their status, by ticket; `None` once the
/// supervisor has gone (every waiter was answered then).
struct Waiting(Mutex<Option<HashMap<u64, Waiter>>>);

struct Waiter {
    answer: oneshot::Sender<Answer>,
    /// The whole request went out (it may have run).
    sent: bool,
}

/// What a run request got.
enum Answer {
    Status(Status),
    /// The supervisor ended first; `sent`: whether the whole request had
    /// gone out to it.
    Lost {
        sent: bool,
        how: String,
    },
}

struct Outgoing {
    bytes: Vec<u8>,
    /// The run request's ticket, marked sent once written.
    ticket: Option<u64>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Waiting {
    /// Wait for `ticket`'s status; gives `answer` back when the supervisor
    /// has gone.
    fn add(
        &self,
        ticket: u64,
        answer: oneshot::Sender<Answer>,
    ) -> Result<(), oneshot::Sender<Answer>> {
        match lock(&self.0).as_mut() {
            Some(map) => {
                map.insert(
                    ticket,
                    Waiter {
                        answer,
                        sent: false,
                    },
                );
                Ok(())
            }
            None => Err(answer),
        }
    }

    fn sent(&self, ticket: u64) {
        if let Some(w) = lock(&self.0).as_mut().and_then(|m| m.get_mut(&ticket)) {
            w.sent = true;
        }
    }

    /// Hand `status` to its ticket (a cancelled ticket has nobody waiting).
    fn answer(&self, ticket: u64, status: Status) {
        let waiter = lock(&self.0).as_mut().and_then(|m| m.remove(&ticket));
        if let Some(w) = waiter {
            let _ = w.answer.send(Answer::Status(status));
        }
    }

    /// Stop waiting for `ticket`: whether it was still waiting.
    fn forget(&self, ticket: u64) -> bool {
        lock(&self.0)
            .as_mut()
            .and_then(|m| m.remove(&ticket))
            .is_some()
    }

    /// The supervisor has gone: answer everyone, and take no more.
    fn close(&self, how: &str) {
        let waiters = lock(&self.0).take().unwrap_or_default();
        for (_, w) in waiters {
            let _ = w.answer.send(Answer::Lost {
                sent: w.sent,
                how: how.to_string(),
            });
        }
    }
}

impl Link {
    fn start(cmd: &str, slots: usize) -> std::io::Result<Arc<Link>> {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
        ours.set_nonblocking(true)?;
        let channel = UnixStream::from_std(ours)?;
        let child = Command::new(supervisor_program())
            .arg(SUPERVISE)
            .arg("--slots")
            .arg(slots.to_string())
            .arg("--")
            .arg(cmd)
            .stdin(Stdio::from(OwnedFd::from(theirs)))
            .stdout(Stdio::inherit())
            .stderr(Stdio::inherit())
            // A group of its own, so that a Ctrl-C on the terminal reaches
            // only the worker, which lets running commands finish.
            .process_group(0)
            .spawn()?;
        let (read, write) = channel.into_split();
        let (to, from) = mpsc::unbounded_channel();
        let waiting = Arc::new(Waiting(Mutex::new(Some(HashMap::new()))));
        tokio::spawn(write_requests(write, from, waiting.clone()));
        tokio::spawn(read_statuses(read, child, waiting.clone()));
        Ok(Arc::new(Link { to, waiting }))
    }
}

/// Send what comes, in order, until every sender is gone (then the write
/// side closes: the lifeline) or the socket fails (the supervisor is gone:
/// the reader answers whoever waits).
async fn write_requests(
    mut socket: OwnedWriteHalf,
    mut from: mpsc::UnboundedReceiver<Outgoing>,
    waiting: Arc<Waiting>,
) {
    while let Some(out) = from.recv().await {
        if socket.write_all(&out.bytes).await.is_err() {
            return;
        }
        if let Some(ticket) = out.ticket {
            waiting.sent(ticket);
        }
    }
}

/// Hand each status to its ticket until the supervisor closes the socket,
/// then answer everyone still waiting with how it ended.
async fn read_statuses(socket: OwnedReadHalf, mut child: Child, waiting: Arc<Waiting>) {
    let mut socket = BufReader::new(socket);
    while let Ok((ticket, status)) = Status::read(&mut socket).await {
        waiting.answer(ticket, status);
    }
    drop(socket);
    let how = match tokio::time::timeout(Duration::from_secs(1), child.wait()).await {
        Ok(Ok(s)) => format!("the command supervisor ended ({s})"),
        _ => "the command supervisor stopped answering".to_string(),
    };
    waiting.close(&how);
}

impl Supervisor {
    /// The supervisor for `sh -c cmd`, running at most `slots` commands at
    /// once; started at the first [`Supervisor::start`].
    pub(crate) fn new(cmd: &str, slots: usize) -> Self {
        Supervisor {
            cmd: Arc::from(cmd),
            slots: slots.max(1),
            tickets: AtomicU64::new(1),
            link: Mutex::new(None),
        }
    }

    /// Queue a run of `sh -c CMD` for `claimed` now (requests run in the
    /// order of these calls), with the payload on stdin and the item's id,
    /// flow and delivery in the environment. Its stdout is ours, or with
    /// `keep_stdout` captured (up to [`super::KEEP_STDOUT_CAP`]) as the
    /// result; its stderr is kept (the last 2 KiB) for the failure reason.
    /// A command still running `timeout` after it started is killed with
    /// its group and fails. [`Run::outcome`] waits for it.
    pub(crate) fn start(
        &self,
        claimed: &Claimed,
        timeout: Option<Duration>,
        keep_stdout: bool,
    ) -> Run {
        let ticket = self.tickets.fetch_add(1, Ordering::Relaxed);
        let bytes = wire::encode_run(ticket, claimed, timeout, keep_stdout);
        let (answer, wait) = oneshot::channel();
        let l = {
            let mut current = lock(&self.link);
            let answer = match current.as_ref() {
                Some(l) => match l.waiting.add(ticket, answer) {
                    Ok(()) => Ok(l.clone()),
                    // That supervisor has gone: start another.
                    Err(a) => Err(a),
                },
                None => Err(answer),
            };
            match answer {
                Ok(l) => l,
                Err(a) => {
                    let fresh = match Link::start(&self.cmd, self.slots) {
                        Ok(l) => l,
                        Err(e) => return Run::not_started(format!("{CANNOT_START}: {e}")),
                    };
                    if fresh.waiting.add(ticket, a).is_err() {
                        return Run::not_started(format!(
                            "{CANNOT_START}: its supervisor ended at once"
                        ));
                    }
                    *current = Some(fresh.clone());
                    fresh
                }
            }
        };
        // A send to a writer that has gone leaves the waiter to the
        // reader, which answers it as not sent.
        let _ = l.to.send(Outgoing {
            bytes,
            ticket: Some(ticket),
        });
        Run {
            ticket,
            link: Some(l),
            wait: Some(wait),
            timeout,
            keep_stdout,
            early: None,
        }
    }

    /// The run is stopping: the supervisor starts nothing more, and answers
    /// every request that has not started, and every later one, as
    /// withdrawn (SPEC 9: nothing starts after the first Ctrl-C).
    pub(crate) fn stop(&self) {
        if let Some(l) = lock(&self.link).as_ref() {
            let _ = l.to.send(Outgoing {
                bytes: wire::encode_control(STOP, 0),
                ticket: None,
            });
        }
    }
}

/// One queued run of the command.
///
/// # Cancel safety
///
/// Dropping it before its outcome cancels the run: the supervisor drops it
/// if it has not started, or kills its command and everything the command
/// started.
pub(crate) struct Run {
    ticket: u64,
    link: Option<Arc<Link>>,
    wait: Option<oneshot::Receiver<Answer>>,
    timeout: Option<Duration>,
    keep_stdout: bool,
    /// The outcome known at the start (the supervisor could not be started).
    early: Option<Outcome>,
}

impl Run {
    fn not_started(reason: String) -> Self {
        Run {
            ticket: 0,
            link: None,
            wait: None,
            timeout: None,
            keep_stdout: false,
            early: Some(Outcome::NotStarted(Failure(reason))),
        }
    }

    /// Wait for the command's end and say what it means for the item.
    pub(crate) async fn outcome(mut self) -> Outcome {
        if let Some(early) = self.early.take() {
            return early;
        }
        let answer = match self.wait.as_mut() {
            Some(wait) => wait.await.ok(),
            None => None,
        };
        // Answered: nothing to cancel when this is dropped.
        self.link = None;
        match answer {
            Some(Answer::Status(status)) => outcome(status, self.timeout, self.keep_stdout),
            // The whole request never reached it: the command did not run.
            Some(Answer::Lost { sent: false, how }) => {
                Outcome::NotStarted(Failure(format!("{CANNOT_START}: {how}")))
            }
            // It may have run: an attempt.
            Some(Answer::Lost { sent: true, how }) => Outcome::Failed(Failure(how)),
            None => Outcome::Failed(Failure(
                "the command supervisor stopped answering".to_string(),
            )),
        }
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        if let Some(l) = self.link.take()
            && l.waiting.forget(self.ticket)
        {
            let _ = l.to.send(Outgoing {
                bytes: wire::encode_control(CANCEL, self.ticket),
                ticket: None,
            });
        }
    }
}
