//! `workjournal completions SHELL` and the hidden `workjournal man DIR`:
//! the shell completions and the man pages, both made from the clap
//! definitions in `args` (no second copy of them), with no network and no
//! queue (SPEC section 9, Packaging). `scripts/deb-assets.sh` runs both
//! before `cargo deb`.

use std::io::Write;
use std::path::Path;

use clap::CommandFactory;

use crate::args::Cli;
use crate::{CliError, CliResult, code};

/// The name the completions and man pages are made for: the binary's.
const BIN: &str = "workjournal";

/// Print the completion script for `shell` to stdout. A closed stdout is
/// not an error (exit 0, as for every command's output).
///
/// The script is made in memory first: clap_complete writes through
/// `expect`, and a pipe closed early must not panic.
pub(crate) fn completions(shell: clap_complete::Shell) -> CliResult {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), BIN, &mut script);
    let mut out = std::io::stdout().lock();
    out.write_all(&script)
        .and_then(|()| out.flush())
        .map_err(CliError::output)
}

/// Write one man page (section 1, roff) for the command and one for each
/// visible subcommand, nested ones included, into `dir` (created if
/// missing): `workjournal.1`, `workjournal-add.1`, ...,
/// `workjournal-schedule-add.1`. Hidden subcommands get none. Fails with
/// exit 1 naming `dir` when it cannot be created or written.
pub(crate) fn man_pages(dir: &Path) -> CliResult {
    let failed = |e: std::io::Error| {
        CliError::new(
            code::FAILURE,
            format!("cannot write man pages to {}: {e}", dir.display()),
        )
    };
    std::fs::create_dir_all(dir).map_err(failed)?;
    clap_mangen::generate_to(Cli::command(), dir).map_err(failed)?;
    Ok(())
}
