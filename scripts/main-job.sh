#!/usr/bin/env bash
# The main job: queue every file under a directory, then run a real command
# (sha256sum) on each, crash-safe, and print the queue's stats.
#
#   scripts/main-job.sh [DIR] [DB] [OUT]
#
# DIR defaults to /usr/share/doc, DB to ./workjournal.redb, OUT (the checksums)
# to ./sha256sums.txt. The files are queued only when DB does not exist yet,
# so after a crash or a kill, running the same command again resumes: the
# items still in the queue run (those that were running when it died are
# reclaimed at once), and nothing is queued twice. Delete DB to start over.
set -euo pipefail

dir=${1:-/usr/share/doc}
db=${2:-./workjournal.redb}
out=${3:-./sha256sums.txt}

root=$(cd "$(dirname "$0")/.." && pwd)
cargo build --quiet --release --bin workjournal --manifest-path "$root/Cargo.toml"
wj=${CARGO_TARGET_DIR:-$root/target}/release/workjournal

if [ ! -e "$db" ]; then
    # One item per file; a name with a newline in it cannot be one line.
    find "$dir" -type f ! -name "$(printf '*\n*')" | "$wj" --db "$db" add --lines
fi
# The payload (a path) arrives on stdin; the checksums go to OUT, the
# worker's progress and summary to stderr.
"$wj" --db "$db" work --until-empty --exec 'sha256sum -- "$(cat)"' >> "$out"
"$wj" --db "$db" stats
