//! What the .deb ships beside the binary (scripts/deb-assets.sh): the
//! completions `workjournal completions SHELL` prints and the man pages
//! `workjournal man DIR` writes, one per command and subcommand, both
//! made from the clap definitions with no queue in sight.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// `workjournal ARGS` in `dir`, with no queue file anywhere near.
fn run(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_workjournal"))
        .current_dir(dir)
        .args(args)
        .stdin(Stdio::null())
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The subcommands `--help` of `path` lists under "Commands:", without
/// `help`.
fn listed_subcommands(dir: &Path, path: &[&str]) -> Vec<String> {
    let mut args = path.to_vec();
    args.push("--help");
    let out = run(dir, &args);
    assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    let help = text(&out.stdout);
    let Some(start) = help.find("Commands:\n") else {
        return Vec::new();
    };
    help[start + "Commands:\n".len()..]
        .lines()
        .take_while(|l| !l.trim().is_empty())
        // A command's line starts with two spaces and its name; a wrapped
        // description goes on further in.
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_string)
        .collect()
}

/// The man page names `--help` promises for the subcommand at `path`
/// (empty: the command itself) and everything under it:
/// `workjournal.1`, `workjournal-add.1`, ..., `workjournal-schedule-add.1`.
fn expected_pages(dir: &Path, path: &[&str], pages: &mut BTreeSet<String>) {
    let mut name = vec!["workjournal"];
    name.extend_from_slice(path);
    pages.insert(format!("{}.1", name.join("-")));
    for sub in listed_subcommands(dir, path) {
        let mut deeper = path.to_vec();
        deeper.push(&sub);
        expected_pages(dir, &deeper, pages);
    }
}

#[test]
fn completions_print_a_script_for_each_shell() {
    let dir = tempfile::tempdir().unwrap();
    let bash = run(dir.path(), &["completions", "bash"]);
    assert!(bash.status.success(), "{}", text(&bash.stderr));
    let script = text(&bash.stdout);
    assert!(script.contains("complete -F _workjournal"), "{script}");
    for sub in ["add", "work", "stats", "serve", "schedule", "completions"] {
        assert!(script.contains(sub), "bash completions lack {sub}");
    }
    assert!(
        script.contains("--dedup-key"),
        "bash completions lack add's flags"
    );
    // bash reads it.
    let check = Command::new("bash")
        .arg("-n")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(script.as_bytes())?;
            child.wait_with_output()
        })
        .unwrap();
    assert!(check.status.success(), "bash -n: {}", text(&check.stderr));

    let zsh = run(dir.path(), &["completions", "zsh"]);
    assert!(zsh.status.success());
    assert!(text(&zsh.stdout).starts_with("#compdef workjournal"));
    let fish = run(dir.path(), &["completions", "fish"]);
    assert!(fish.status.success());
    assert!(text(&fish.stdout).contains("complete -c workjournal"));

    let bad = run(dir.path(), &["completions", "tcsh"]);
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad.stderr));
    // No queue was needed, and none was made.
    assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none());
}

#[test]
fn man_writes_one_page_per_command_and_subcommand() {
    let dir = tempfile::tempdir().unwrap();
    let pages_dir = dir.path().join("man/man1");
    let out = run(dir.path(), &["man", pages_dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let written: BTreeSet<String> = std::fs::read_dir(&pages_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let mut expected = BTreeSet::new();
    expected_pages(dir.path(), &[], &mut expected);
    assert_eq!(written, expected, "one page per command and subcommand");
    assert!(expected.len() > 20, "{expected:?}");
    assert!(expected.contains("workjournal-schedule-add.1"));
    for page in &written {
        let roff = std::fs::read_to_string(pages_dir.join(page)).unwrap();
        assert!(roff.contains(".TH "), "{page} is not a man page");
    }
    let add = std::fs::read_to_string(pages_dir.join("workjournal-add.1")).unwrap();
    assert!(add.contains("dedup"), "the add page lacks --dedup-key");
    let root = std::fs::read_to_string(pages_dir.join("workjournal.1")).unwrap();
    assert!(
        root.contains("Exit codes"),
        "the main page lacks the exit codes"
    );
    // A directory that cannot be made is exit 1, naming it.
    let blocked = dir.path().join("file");
    std::fs::write(&blocked, "").unwrap();
    let out = run(dir.path(), &["man", blocked.join("sub").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("cannot write man pages"));
}

/// The asset sources of cli/Cargo.toml's `[package.metadata.deb]` that
/// scripts/deb-assets.sh makes, relative to its output dir:
/// `man/*.1.gz`, `completions/workjournal.bash`, ...
fn deb_asset_sources() -> Vec<String> {
    let manifest =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml")).unwrap();
    let prefix = "\"target/release/deb-assets/";
    manifest
        .lines()
        .filter_map(|l| {
            let start = l.find(prefix)? + prefix.len();
            let len = l[start..].find('"')?;
            Some(l[start..start + len].to_string())
        })
        .collect()
}

/// scripts/deb-assets.sh, run on the test's binary, writes every file the
/// .deb's metadata takes from it: one gzipped page per command and
/// subcommand, and the three completion scripts.
#[test]
fn deb_assets_script_writes_what_the_package_takes() {
    let dir = tempfile::tempdir().unwrap();
    // The script writes beside the binary it is given: a link in the temp
    // dir keeps the target dir untouched.
    let bin = dir.path().join("workjournal");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_workjournal"), &bin).unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/deb-assets.sh");
    let out = Command::new(script)
        .arg(&bin)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let assets = dir.path().join("deb-assets");

    let mut expected = BTreeSet::new();
    expected_pages(dir.path(), &[], &mut expected);
    let pages: BTreeSet<String> = std::fs::read_dir(assets.join("man"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let expected_gz: BTreeSet<String> = expected.iter().map(|p| format!("{p}.gz")).collect();
    assert_eq!(pages, expected_gz, "one gzipped page per command");
    let add = Command::new("gzip")
        .arg("-dc")
        .arg(assets.join("man/workjournal-add.1.gz"))
        .output()
        .unwrap();
    assert!(add.status.success());
    assert!(text(&add.stdout).contains(".TH "), "not a man page");

    let sources = deb_asset_sources();
    assert_eq!(sources.len(), 4, "{sources:?}");
    for source in &sources {
        if let Some(suffix) = source.strip_prefix("man/*") {
            assert_eq!(suffix, ".1.gz");
            continue;
        }
        let meta = std::fs::metadata(assets.join(source)).unwrap();
        assert!(meta.len() > 1000, "{source} is {} bytes", meta.len());
    }
    assert!(text(&out.stdout).contains(&format!("wrote {} man pages", expected.len())));

    // A second run starts over: a page left from before is gone.
    std::fs::write(assets.join("man/workjournal-gone.1.gz"), "").unwrap();
    let again = Command::new(script).arg(&bin).output().unwrap();
    assert!(again.status.success(), "{}", text(&again.stderr));
    assert!(!assets.join("man/workjournal-gone.1.gz").exists());
}

/// The maintainer scripts parse, and keep the token cargo-deb replaces
/// with its systemd lines.
#[test]
fn maintainer_scripts_parse_and_take_the_systemd_lines() {
    for name in ["postinst", "postrm"] {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/debian/").to_string() + name;
        let script = std::fs::read_to_string(&path).unwrap();
        assert!(script.starts_with("#!/bin/sh\n"), "{name}");
        assert!(
            script.contains("\n#DEBHELPER#\n"),
            "{name} lacks #DEBHELPER#"
        );
        let check = Command::new("sh").arg("-n").arg(&path).output().unwrap();
        assert!(check.status.success(), "{name}: {}", text(&check.stderr));
    }
}
