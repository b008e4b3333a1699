#!/usr/bin/env bash
# The main job: queue every file under a directory, then run a real command
# (sha256sum) on each, crash-safe, and print the queue's stats.
#
#   scripts/main-job.sh [DIR] [DB] [OUT]
#
# DIR defaults to /usr/share/doc, DB to ./workjournal.redb, OUT (the checksums)
# to ./sha256sums.txt.
#
# Resuming: the queueing phase is recorded in two marker files next to DB.
# DB.queueing is created before `add` starts; it becomes DB.queued only after
# `add` exits 0. So after a crash or a kill, running the same command again
# resumes:
#   - killed while queueing (DB.queueing present): no command has run yet, so
#     the partial DB is deleted and every file is queued again, once;
#   - killed while working (DB.queued present): nothing is queued twice; the
#     items still in the queue run (those that were running when it died are
#     reclaimed at once).
# A DB with no marker (made by hand or by an older script) counts as queued.
# Delete DB and its markers to start over.
#
# The binary (of the workspace's `workjournal-cli` crate, cli/) is built
# into its own target dir (target/main-job), so that it never replaces a
# binary built with other features; set WORKJOURNAL_BIN to use an existing
# binary instead.
set -euo pipefail

dir=${1:-/usr/share/doc}
db=${2:-./workjournal.redb}
out=${3:-./sha256sums.txt}

root=$(cd "$(dirname "$0")/.." && pwd)
if [ -n "${WORKJOURNAL_BIN:-}" ]; then
    wj=$WORKJOURNAL_BIN
else
    target=$root/target/main-job
    CARGO_TARGET_DIR=$target cargo build --quiet --release -p workjournal-cli --bin workjournal \
        --manifest-path "$root/Cargo.toml"
    wj=$target/release/workjournal
fi

if [ -e "$db.queueing" ]; then
    # The last run died while queueing: nothing ran, start the queue again.
    rm -f -- "$db"
fi
if [ ! -e "$db" ]; then
    : > "$db.queueing"
    # One item per file; a name with a newline in it cannot be one line.
    find "$dir" -type f ! -name "$(printf '*\n*')" | "$wj" --db "$db" add --lines
    mv -f -- "$db.queueing" "$db.queued"
elif [ ! -e "$db.queued" ]; then
    : > "$db.queued"
fi
# The payload (a path) arrives on stdin; the checksums go to OUT, the
# worker's progress and summary to stderr.
"$wj" --db "$db" work --until-empty --exec 'sha256sum -- "$(cat)"' >> "$out"
"$wj" --db "$db" stats
