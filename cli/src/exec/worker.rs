//! The worker's side: the supervisors of one `work` (or `step`) run, each
//! started once for a slot and handed one request at a time (see the
//! module docs of [`super`]).

use std::os::fd::OwnedFd;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::UnixStream;
use tokio::process::{Child, Command};
use workjournal::Claimed;

use super::protocol::{Status, WorkerEnd};
use super::reason::outcome;
use super::{CANNOT_START, Failure, Outcome, SUPERVISE};

/// The program that runs the supervisor: this very binary, by
/// `/proc/self/exe` where there is one (it stays valid when the file is
/// replaced during an upgrade).
fn supervisor_program() -> std::path::PathBuf {
    let proc_exe = std::path::Path::new("/proc/self/exe");
    if proc_exe.exists() {
        return proc_exe.to_path_buf();
    }
    std::env::current_exe().unwrap_or_else(|_| std::path::PathBuf::from("workjournal"))
}

/// One supervisor, idle or running one command.
///
/// Dropping it closes the lifeline: a command it runs is killed with its
/// group by the supervisor, which then exits. It is never killed from here
/// (a supervisor killed alone would leave its command running).
struct Supervisor {
    /// The supervisor's process.
    child: Child,
    /// Our end of its socket (its stdin).
    channel: WorkerEnd,
}

impl Supervisor {
    /// Start a supervisor for `sh -c CMD`, on a new socket.
    fn start(cmd: &str) -> std::io::Result<Self> {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
        ours.set_nonblocking(true)?;
        let channel = WorkerEnd::new(UnixStream::from_std(ours)?);
        let child = Command::new(supervisor_program())
            .arg(SUPERVISE)
            .arg("--")
            .arg(cmd)
            .stdin(Stdio::from(OwnedFd::from(theirs)))
            .stdout(Stdio::inherit())
            .stderr(Stdio::inherit())
            // A group of its own, so that a Ctrl-C on the terminal reaches
            // only the worker, which lets running commands finish.
            .process_group(0)
            .spawn()?;
        // (The command, holding our copy of the supervisor's end, is gone.)
        Ok(Supervisor { child, channel })
    }

    /// Send one request and read its status. `Err(true)` when the request
    /// could not be sent whole (the supervisor is gone: the command did not
    /// start), `Err(false)` when the status could not be read.
    ///
    /// A small payload goes in the same write as the request's head, so
    /// that the supervisor wakes once per request.
    ///
    /// When `stop` resolves while the command runs (its item was
    /// cancelled), the supervisor is told to stop it: SIGTERM to its group
    /// at once, SIGKILL after `kill_grace`; the status then comes as for
    /// any end.
    async fn call(
        &mut self,
        claimed: &Claimed,
        timeout: Option<Duration>,
        keep_stdout: bool,
        stop: impl std::future::Future<Output = ()>,
        kill_grace: Duration,
    ) -> Result<Status, bool> {
        let sent = self
            .channel
            .send_request(claimed, timeout, keep_stdout)
            .await;
        if sent.is_err() {
            return Err(true);
        }
        tokio::pin!(stop);
        let mut stopped = false;
        loop {
            tokio::select! {
                status = self.channel.read_status() => return status.map_err(|_| false),
                () = &mut stop, if !stopped => {
                    stopped = true;
                    // A supervisor gone meanwhile says so in its status.
                    let _ = self.channel.send_stop(kill_grace).await;
                }
            }
        }
    }

    /// How the supervisor ended, for a failure text (it closed the socket).
    async fn ended(mut self) -> String {
        drop(self.channel);
        match tokio::time::timeout(Duration::from_secs(1), self.child.wait()).await {
            Ok(Ok(s)) => format!("the command supervisor ended ({s})"),
            _ => "the command supervisor stopped answering".to_string(),
        }
    }
}

/// The supervisors of one `work` (or `step`) run: at most one per slot,
/// each kept idle between items and reused.
pub(crate) struct Supervisors {
    cmd: Arc<str>,
    idle: Mutex<Vec<Supervisor>>,
}

impl Supervisors {
    /// No supervisors yet, for `sh -c CMD`.
    pub(crate) fn new(cmd: &str) -> Self {
        Supervisors {
            cmd: Arc::from(cmd),
            idle: Mutex::new(Vec::new()),
        }
    }

    /// Run `sh -c CMD` for `claimed` under an idle supervisor (or a new
    /// one), with the payload on stdin and the item's id, flow and delivery
    /// in the environment. Its stdout is ours, or with `keep_stdout`
    /// captured (up to [`KEEP_STDOUT_CAP`](super::KEEP_STDOUT_CAP)) as the result; its stderr is
    /// kept (the last 2 KiB) for the failure reason and otherwise
    /// discarded. A command still running after `timeout` is killed with
    /// its group and fails. When `stop` resolves while it runs (its item
    /// was cancelled), its group gets SIGTERM, and SIGKILL after
    /// `kill_grace`.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future kills the command and everything it started
    /// (its supervisor sees the lifeline close); the supervisor is not
    /// reused.
    pub(crate) async fn run(
        &self,
        claimed: &Claimed,
        timeout: Option<Duration>,
        keep_stdout: bool,
        stop: impl std::future::Future<Output = ()>,
        kill_grace: Duration,
    ) -> Outcome {
        let idle = self.idle.lock().ok().and_then(|mut v| v.pop());
        let mut supervisor = match idle {
            Some(s) => s,
            None => match Supervisor::start(&self.cmd) {
                Ok(s) => s,
                Err(e) => return Outcome::NotStarted(Failure(format!("{CANNOT_START}: {e}"))),
            },
        };
        match supervisor
            .call(claimed, timeout, keep_stdout, stop, kill_grace)
            .await
        {
            Ok(status) => {
                if let Ok(mut idle) = self.idle.lock() {
                    idle.push(supervisor);
                }
                outcome(status, timeout, keep_stdout)
            }
            // The whole request never reached it: the command did not run.
            Err(true) => {
                let how = supervisor.ended().await;
                Outcome::NotStarted(Failure(format!("{CANNOT_START}: {how}")))
            }
            // It may have run: an attempt.
            Err(false) => Outcome::Failed(Failure(supervisor.ended().await)),
        }
    }
}
