#!/usr/bin/env bash
# The soak (examples/soak.rs): MINUTES under load with faults on each
# BACKEND, then a check that every acknowledged add was handled or is a
# dead letter. 64 producers, 8 workers with random delays and failures,
# priorities and timers; SIGKILLs of workers, of the process holding the
# queue (the embedded host, the `serve` process) or of redis-server
# (appendfsync always); as root, the embedded file on a 256 MiB tmpfs that
# is filled to the last byte for 10 s every 2 minutes. Prints a row every
# 10 s (adds per minute, RSS and open fds of the queue's holder, a
# worker's RSS, file or Redis memory, kills, faults, failed adds) and a
# summary with `lost` (must be 0) and the p50/p99 lateness of timers.
#
# Usage: scripts/soak.sh [-m MINUTES] [BACKEND...]
#   MINUTES  default 60 (fractions allowed: -m 0.5)
#   BACKEND  embedded, serve, redis (default: all three, one after another)
# SOAK_RELEASE=1 builds with --release. Each run's files stay in
# /tmp/soak-BACKEND.XXXX (report.tsv there) when it fails, else are removed.
# Exits 1 if any run lost an item or did not drain.
set -euo pipefail
cd "$(dirname "$0")/.."

minutes=60
while getopts m: opt; do
  case "$opt" in
    m) minutes="$OPTARG" ;;
    *) echo "usage: $0 [-m MINUTES] [embedded|serve|redis ...]" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
backends=("$@")
[ ${#backends[@]} -gt 0 ] || backends=(embedded serve redis)

profile=debug
flags=()
if [ "${SOAK_RELEASE:-0}" = 1 ]; then profile=release; flags=(--release); fi
# --all-features: the same build as the test suite's, so CI compiles nothing new.
cargo build -q "${flags[@]}" --all-features --example soak
bin="${CARGO_TARGET_DIR:-target}/$profile/examples/soak"

status=0
for backend in "${backends[@]}"; do
  dir="$(mktemp -d "/tmp/soak-$backend.XXXX")"
  echo "== soak: $backend, $minutes min, load $(cut -d' ' -f1-3 /proc/loadavg) ($dir)"
  if "$bin" "$backend" "$minutes" "$dir" | tee "$dir/report.tsv"; then
    umount "$dir/disk" 2>/dev/null || true
    rm -rf "$dir"
  else
    echo "== soak: $backend FAILED; its files are in $dir" >&2
    status=1
  fi
done
exit $status
