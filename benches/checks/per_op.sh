#!/usr/bin/env bash
# Instructions (callgrind), write calls, bytes written and syncs (strace) per
# operation of the embedded backend, for each workload of
# benches/checks/per_op.rs: each is run with N operations and with 0, and
# the difference is divided by N: per call (an add, an add_batch of 100, a
# claim with its ack or ack_batch).
#
#   benches/checks/per_op.sh [WORKLOAD ...]
#
# Needs valgrind and strace. N: WJ_PER_OP_N (default 2000 single
# operations, 100 batches). Prints a Markdown table.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${WJ_PER_OP_BIN:-$(cargo bench --bench per_op --no-run 2>&1 | sed -n 's/.*Executable .*(\(.*\)).*/\1/p' | tail -1)}
[ -x "$bin" ] || { echo "per_op binary not found" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
workloads=("$@")
[ ${#workloads[@]} -gt 0 ] || workloads=(add1 add100 claim_ack1 claim_ack100)

instructions() { # workload n
    valgrind --tool=callgrind --callgrind-out-file="$out/cg" "$bin" "$1" "$2" 2>"$out/vg" >/dev/null
    sed -n 's/^summary: \([0-9]*\).*/\1/p' "$out/cg"
}
# write calls, bytes written, syncs
syscalls() { # workload n
    strace -f -qq -e trace=write,pwrite64,writev,pwritev,pwritev2,fsync,fdatasync,sync_file_range \
        -o "$out/st" "$bin" "$1" "$2" 2>/dev/null >/dev/null
    awk '
        /unfinished \.\.\.>/ { next }
        {
            name = ""
            if (match($0, /<\.\.\. [a-z0-9_]+ resumed>/)) {
                name = substr($0, RSTART + 5, RLENGTH - 5); sub(/ resumed>/, "", name)
            } else if (match($0, /^[0-9]+ +[a-z0-9_]+\(/)) {
                name = substr($0, RSTART, RLENGTH - 1); sub(/^[0-9]+ +/, "", name)
            }
            if (name ~ /write/) { w++; if ($NF ~ /^[0-9]+$/) b += $NF }
            else if (name ~ /sync/) s++
        }
        END { printf "%d %d %d\n", w, b, s }' "$out/st"
}

echo "| workload | instructions / op | write calls / op | bytes written / op | syncs / op |"
echo "|---|---|---|---|---|"
for w in "${workloads[@]}"; do
    case $w in
        add100|claim_ack100) n=${WJ_PER_OP_N:-100} ;;
        *) n=${WJ_PER_OP_N:-2000} ;;
    esac
    i1=$(instructions "$w" "$n"); i0=$(instructions "$w" 0)
    read -r w1 b1 s1 < <(syscalls "$w" "$n")
    read -r w0 b0 s0 < <(syscalls "$w" 0)
    awk -v w="$w" -v n="$n" -v i="$((i1 - i0))" -v wc="$((w1 - w0))" -v b="$((b1 - b0))" -v s="$((s1 - s0))" \
        'BEGIN { printf "| %s | %.0f | %.2f | %.0f | %.2f |\n", w, i / n, wc / n, b / n, s / n }'
done
