#!/usr/bin/env bash
# Run every bench of workjournal, its baselines and its peers in one go and
# print one table: workload, workjournal, baseline or peer, ratio.
#
#   benches/run.sh            # the full run (about 10 minutes on 2 cores)
#   WJ_BENCH_SECS=0.5 WJ_CHURN_CYCLES=12 benches/run.sh   # a quick smoke run
#
# Needs redis-server on PATH (apt-get install redis-server): the benches
# start their own servers on free loopback ports. Temp files go to
# WJ_BENCH_DIR (default: the system temp dir); point it at the disk you
# care about. Each bench's full output goes to target/wj-bench/log.txt.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v redis-server >/dev/null 2>&1; then
  echo "redis-server not found: apt-get install redis-server" >&2
  exit 1
fi

target="${CARGO_TARGET_DIR:-$PWD/target}"
export WJ_BENCH_OUT="$target/wj-bench"
export CRITERION_HOME="$WJ_BENCH_OUT/criterion"
rm -rf "$WJ_BENCH_OUT"
mkdir -p "$WJ_BENCH_OUT"
log="$WJ_BENCH_OUT/log.txt"

{
  echo "date (UTC): $(date -u '+%Y-%m-%d %H:%M')"
  echo "cores: $(nproc), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
  echo "kernel: $(uname -r); temp dir filesystem: $(df -T "${WJ_BENCH_DIR:-${TMPDIR:-/tmp}}" | awk 'NR==2 {print $2}')"
  echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$WJ_BENCH_OUT/machine.txt"

echo "building the benches (root and benches/peers) ..." >&2
cargo bench --features redis,forward --no-run -q 2>>"$log"
(cd benches/peers && CARGO_TARGET_DIR="$target/peers" cargo bench --no-run -q 2>>"$log")

for b in add claim_ack priority limits remote latency rpc timers schedules reopen churn forward work cancel; do
  echo "running $b ..." >&2
  cargo bench -q --features redis,forward --bench "$b" >>"$log" 2>&1
done
echo "running peers (effectum, omniqueue) ..." >&2
(cd benches/peers && CARGO_TARGET_DIR="$target/peers" cargo bench -q >>"$log" 2>&1)

echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$WJ_BENCH_OUT/machine.txt"
cat "$WJ_BENCH_OUT/machine.txt"
cargo bench -q --features redis --bench report 2>>"$log" | tee "$WJ_BENCH_OUT/table.md"
