//! The command supervisor (`workjournal __supervise [--slots N] -- CMD`,
//! started by `work`; SPEC section 9): runs up to N commands at once, each
//! a `sh -c CMD` leading a process group of its own, on the requests that
//! come over the socket that is its stdin, in the order they came.
//!
//! A request that arrives while every slot is busy waits here, so the
//! moment a command ends the next one starts, before its status has even
//! gone out: between two commands there is no round trip to the worker.
//! The socket is the lifeline: when it closes (the worker died of any
//! signal, SIGKILL too, or dropped the run), every running command is
//! killed with its whole group, nothing queued starts, and the supervisor
//! exits.

use std::collections::{HashMap, VecDeque};
use std::ffi::OsStr;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::process::{ExitCode, Stdio};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

use super::wire::{self, Ended, Message, Request, Status};
use super::{
    BACK_OFF_EXIT, CANNOT_START, KEEP_STDOUT_CAP, NOT_STARTED, STDERR_TAIL_BYTES, kill_group,
};

/// How long stderr (and a kept stdout) is still read after the command
/// exited, for what it wrote just before: a background child that keeps
/// either open must not keep the slot (SPEC section 9).
const STDERR_DRAIN: Duration = Duration::from_millis(100);

/// The reasons of a request withdrawn unstarted.
const STOPPED: &str = "worker stopped";
const CANCELLED: &str = "cancelled";

/// What the socket's reader passes on.
enum Incoming {
    Message(Message),
    /// The socket closed: `cut` when inside a message (or on a malformed
    /// one).
    Closed {
        cut: bool,
    },
}

/// Run the supervisor until its socket closes. Exits 0 when it closed with
/// nothing running, [`NOT_STARTED`] when it closed inside a request (that
/// command is not started), 1 when it closed while commands ran (after
/// killing their groups).
pub(crate) fn supervise(cmd: &str, slots: usize) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => return not_started(&e),
    };
    runtime.block_on(serve(cmd, slots.max(1)))
}

fn not_started(e: &std::io::Error) -> ExitCode {
    let _ = writeln!(std::io::stderr(), "{CANNOT_START}: {e}");
    ExitCode::from(NOT_STARTED)
}

/// Read messages until the socket closes, passing each on.
async fn read_messages(socket: OwnedReadHalf, to: mpsc::UnboundedSender<Incoming>) {
    let mut socket = BufReader::with_capacity(64 * 1024, socket);
    loop {
        let incoming = match wire::read_message(&mut socket).await {
            Ok(Some(m)) => Incoming::Message(m),
            Ok(None) => Incoming::Closed { cut: false },
            // Cut short by a worker that died while writing it (or not our
            // protocol): no command may run on a part of it.
            Err(_) => Incoming::Closed { cut: true },
        };
        let last = matches!(incoming, Incoming::Closed { .. });
        if to.send(incoming).is_err() || last {
            return;
        }
    }
}

/// The supervisor's state: requests waiting for a slot, and the commands
/// running (their kill switches and flows, by ticket).
struct Runs<'a> {
    cmd: &'a str,
    slots: usize,
    sh: Option<std::path::PathBuf>,
    queued: VecDeque<(u64, Request)>,
    running: HashMap<u64, (oneshot::Sender<()>, Vec<u8>)>,
    tasks: JoinSet<(u64, Option<Status>)>,
    /// The ticket of each task, for a task that failed to finish.
    task_tickets: HashMap<tokio::task::Id, u64>,
    stopped: bool,
    /// Statuses to send, in order.
    out: Vec<(u64, Status)>,
}

async fn serve(cmd: &str, slots: usize) -> ExitCode {
    use std::os::fd::AsFd;
    let channel = std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .map(std::os::unix::net::UnixStream::from)
        .and_then(|s| {
            s.set_nonblocking(true)?;
            UnixStream::from_std(s)
        });
    let channel = match channel {
        Ok(c) => c,
        Err(e) => return not_started(&e),
    };
    let (read, mut write) = channel.into_split();
    let (to, mut from) = mpsc::unbounded_channel();
    tokio::spawn(read_messages(read, to));
    let mut runs = Runs {
        cmd,
        slots,
        sh: find_sh(),
        queued: VecDeque::new(),
        running: HashMap::new(),
        tasks: JoinSet::new(),
        task_tickets: HashMap::new(),
        stopped: false,
        out: Vec::new(),
    };
    loop {
        tokio::select! {
            incoming = from.recv() => match incoming {
                Some(Incoming::Message(m)) => runs.take(m),
                Some(Incoming::Closed { cut }) => return runs.close(cut).await,
                None => return runs.close(true).await,
            },
            Some(joined) = runs.tasks.join_next_with_id(), if !runs.tasks.is_empty() => {
                runs.finished(joined);
            }
        }
        // The next command starts before any status goes out.
        runs.start_ready();
        if !runs.send(&mut write).await {
            // The worker is gone.
            return runs.close(false).await;
        }
    }
}

impl Runs<'_> {
    fn withdraw(&mut self, ticket: u64, reason: &str) {
        self.out
            .push((ticket, Status::reason(Ended::Withdrawn(0), reason)));
    }

    /// One message from the worker.
    fn take(&mut self, message: Message) {
        match message {
            Message::Run(ticket, request) if self.stopped => {
                drop(request);
                self.withdraw(ticket, STOPPED);
            }
            Message::Run(ticket, request) => self.queued.push_back((ticket, request)),
            Message::Cancel(ticket) => {
                if let Some(at) = self.queued.iter().position(|(t, _)| *t == ticket) {
                    self.queued.remove(at);
                    self.withdraw(ticket, CANCELLED);
                } else if let Some((kill, _)) = self.running.remove(&ticket) {
                    let _ = kill.send(());
                }
            }
            Message::Stop => {
                self.stopped = true;
                let queued: Vec<u64> = self.queued.drain(..).map(|(t, _)| t).collect();
                for ticket in queued {
                    self.withdraw(ticket, STOPPED);
                }
            }
        }
    }

    /// A command's watcher ended: its status goes out, and a command that
    /// asked to back its flow off (exit 75) takes the flow's queued
    /// requests with it, withdrawn (the worker gives them back).
    fn finished(
        &mut self,
        joined: Result<(tokio::task::Id, (u64, Option<Status>)), tokio::task::JoinError>,
    ) {
        let (ticket, status) = match joined {
            Ok((id, done)) => {
                self.task_tickets.remove(&id);
                done
            }
            Err(e) => {
                let Some(ticket) = self.task_tickets.remove(&e.id()) else {
                    return;
                };
                let status = Status::reason(Ended::Exited(1), "the command's watcher failed");
                (ticket, Some(status))
            }
        };
        // Cancelled: killed, and nobody waits for it.
        let Some((_, flow)) = self.running.remove(&ticket) else {
            return;
        };
        let Some(status) = status else {
            return;
        };
        let back_off = i32::from(BACK_OFF_EXIT);
        if status.ended == Ended::Exited(back_off) && !flow.is_empty() {
            // Each carries the command's stderr, so that the worker backs
            // the flow off for the same time before giving it back.
            let (held, rest): (VecDeque<_>, VecDeque<_>) =
                self.queued.drain(..).partition(|(_, r)| r.flow == flow);
            self.queued = rest;
            let withdrawn: Vec<(u64, Status)> = held
                .into_iter()
                .map(|(t, _)| {
                    let mut s = Status::reason(Ended::Withdrawn(back_off), "");
                    s.stderr.clone_from(&status.stderr);
                    (t, s)
                })
                .collect();
            self.out.push((ticket, status));
            self.out.extend(withdrawn);
        } else {
            self.out.push((ticket, status));
        }
    }

    /// Start queued requests while slots are free.
    fn start_ready(&mut self) {
        while self.running.len() < self.slots {
            let Some((ticket, request)) = self.queued.pop_front() else {
                return;
            };
            let mut child = match spawn_sh(self.cmd, &mut self.sh, &request) {
                Ok(c) => c,
                Err(status) => {
                    self.out.push((ticket, status));
                    continue;
                }
            };
            let Some(pgid) = child.id() else {
                let status = Status::reason(
                    Ended::NotStarted,
                    &format!("{CANNOT_START}: sh has no process id"),
                );
                self.out.push((ticket, status));
                drop(child.start_kill());
                continue;
            };
            let (kill, killed) = oneshot::channel();
            let Request {
                timeout,
                keep_stdout: _,
                flow,
                payload,
                ..
            } = request;
            let handle = self
                .tasks
                .spawn(async move { (ticket, watch(child, pgid, payload, timeout, killed).await) });
            self.task_tickets.insert(handle.id(), ticket);
            self.running.insert(ticket, (kill, flow));
        }
    }

    /// Send the statuses gathered; false when the worker is gone.
    async fn send(&mut self, socket: &mut OwnedWriteHalf) -> bool {
        if self.out.is_empty() {
            return true;
        }
        let mut bytes = Vec::new();
        for (ticket, status) in self.out.drain(..) {
            bytes.extend_from_slice(&status.encode(ticket));
        }
        socket.write_all(&bytes).await.is_ok()
    }

    /// The lifeline closed: kill every running command with its group and
    /// exit; nothing queued starts.
    async fn close(mut self, cut: bool) -> ExitCode {
        let ran = !self.running.is_empty();
        for (_, (kill, _)) in self.running.drain() {
            let _ = kill.send(());
        }
        while self.tasks.join_next().await.is_some() {}
        if ran {
            ExitCode::FAILURE
        } else if cut {
            ExitCode::from(NOT_STARTED)
        } else {
            ExitCode::SUCCESS
        }
    }
}

/// `sh` as `execvp` would find it on this process's `PATH` (which does not
/// change while it runs): searched once rather than at every start, where
/// each directory before `sh`'s costs a failed `execve`.
fn find_sh() -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).find_map(|dir| {
        // An empty entry is the current directory, as for `execvp`.
        let dir = if dir.as_os_str().is_empty() {
            std::path::PathBuf::from(".")
        } else {
            dir
        };
        let candidate = dir.join("sh");
        let meta = std::fs::metadata(&candidate).ok()?;
        (meta.is_file() && meta.permissions().mode() & 0o111 != 0).then_some(candidate)
    })
}

/// Start `sh -c CMD` for `request` (`sh` the one found on `PATH`, else
/// looked up by the spawn, and forgotten when it cannot be started) as the
/// leader of a new process group.
fn spawn_sh(
    cmd: &str,
    sh: &mut Option<std::path::PathBuf>,
    request: &Request,
) -> Result<Child, Status> {
    let program = sh.as_deref().unwrap_or(std::path::Path::new("sh"));
    Command::new(program)
        .arg0("sh")
        .arg("-c")
        .arg(cmd)
        .env("WORKJOURNAL_ID", request.id.to_string())
        .env("WORKJOURNAL_FLOW", OsStr::from_bytes(&request.flow))
        .env("WORKJOURNAL_DELIVERY", request.delivery.to_string())
        .stdin(Stdio::piped())
        .stdout(if request.keep_stdout {
            Stdio::piped()
        } else {
            Stdio::inherit()
        })
        .stderr(Stdio::piped())
        // The group everything the command starts is killed with.
        .process_group(0)
        .spawn()
        .map_err(|e| {
            // Look for it again next time (it may have moved).
            *sh = None;
            Status::reason(Ended::NotStarted, &format!("{CANNOT_START}: {e}"))
        })
}

/// A kept stdout: up to [`KEEP_STDOUT_CAP`] bytes. Past the cap it is read
/// on and discarded, so that the command never blocks on a full pipe.
#[derive(Default)]
struct Kept {
    bytes: Vec<u8>,
    /// The command wrote more than the cap.
    over: bool,
}

impl Kept {
    fn push(&mut self, chunk: &[u8]) {
        if self.bytes.len() + chunk.len() <= KEEP_STDOUT_CAP {
            self.bytes.extend_from_slice(chunk);
        } else {
            self.over = true;
        }
    }
}

/// Read `reader` (if any) into `sink` until it ends or `until` passes.
async fn drain<R: AsyncRead + Unpin>(
    reader: Option<R>,
    until: tokio::time::Instant,
    mut sink: impl FnMut(&[u8]),
) {
    let Some(mut reader) = reader else {
        return;
    };
    let mut buf = [0u8; 8192];
    while let Ok(Ok(n)) = tokio::time::timeout_at(until, reader.read(&mut buf)).await {
        if n == 0 {
            break;
        }
        sink(&buf[..n]);
    }
}

/// Feed `sh` its payload, keep its stderr's end (and its stdout, when
/// piped), kill its group at `timeout` or when `killed` fires, and say how
/// it ended: `None` when it was killed on request (cancelled, or the
/// lifeline closed), which nobody waits for.
async fn watch(
    mut child: Child,
    pgid: u32,
    payload: Vec<u8>,
    timeout: Option<Duration>,
    mut killed: oneshot::Receiver<()>,
) -> Option<Status> {
    let stdin = child.stdin.take();
    // A command that does not read its stdin closes the pipe early; that is
    // its business, not a failure.
    let feeder = tokio::spawn(async move {
        if let Some(mut stdin) = stdin {
            let _ = stdin.write_all(&payload).await;
        }
    });
    let mut stderr = child.stderr.take();
    let mut stdout = child.stdout.take();
    let mut tail: Vec<u8> = Vec::new();
    let mut kept = Kept::default();
    let mut buf = [0u8; 8192];
    let mut out_buf = [0u8; 8192];
    let keep = |tail: &mut Vec<u8>, chunk: &[u8]| {
        tail.extend_from_slice(chunk);
        if tail.len() > 2 * STDERR_TAIL_BYTES {
            tail.drain(..tail.len() - STDERR_TAIL_BYTES);
        }
    };
    let deadline = async {
        match timeout {
            Some(t) => tokio::time::sleep(t).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(deadline);
    let mut timed_out = false;
    let mut kill_heard = false;
    let status = loop {
        tokio::select! {
            r = async { stderr.as_mut()?.read(&mut buf).await.ok() }, if stderr.is_some() => {
                match r {
                    Some(n) if n > 0 => keep(&mut tail, &buf[..n]),
                    _ => stderr = None,
                }
            }
            r = async { stdout.as_mut()?.read(&mut out_buf).await.ok() }, if stdout.is_some() => {
                match r {
                    Some(n) if n > 0 => kept.push(&out_buf[..n]),
                    _ => stdout = None,
                }
            }
            s = child.wait() => break s,
            r = &mut killed, if !kill_heard => {
                kill_heard = true;
                if r.is_ok() {
                    // `sh` has not been reaped: its group id is still its own.
                    kill_group(pgid);
                    feeder.abort();
                    return None;
                }
            }
            () = &mut deadline, if !timed_out => {
                timed_out = true;
                kill_group(pgid);
            }
        }
    };
    // What the command wrote just before it exited, but not whatever a
    // background child keeps writing (or holding open).
    let until = tokio::time::Instant::now() + STDERR_DRAIN;
    tokio::join!(
        drain(stderr, until, |chunk| keep(&mut tail, chunk)),
        drain(stdout, until, |chunk| kept.push(chunk)),
    );
    // The command is over: a background child holding its stdin gets no
    // more of the payload.
    feeder.abort();
    let ended = match status {
        Err(e) => {
            return Some(Status::reason(
                Ended::Exited(1),
                &format!("cannot wait for the command: {e}"),
            ));
        }
        Ok(_) if timed_out => Ended::TimedOut,
        Ok(s) => {
            use std::os::unix::process::ExitStatusExt;
            match (s.code(), s.signal()) {
                (Some(c), _) => Ended::Exited(c),
                (None, Some(sig)) => Ended::Signaled(sig),
                (None, None) => Ended::Exited(1),
            }
        }
    };
    Some(Status {
        ended,
        stderr: tail,
        stdout: kept.bytes,
        stdout_over: kept.over,
    })
}
