#!/usr/bin/env bash
# The library's public API, listed from its rustdoc JSON with every
# feature, against the committed list docs/public-api.txt: the surface
# changes only on purpose (docs/DESIGN.md, Public surface).
#
#   scripts/public-api.sh          # fail, with the diff, if they differ
#   scripts/public-api.sh --bless  # write the current list
#
# rustdoc's JSON output is unstable; RUSTC_BOOTSTRAP lets the stable
# toolchain write it, as cargo-public-api asks nightly to.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
RUSTC_BOOTSTRAP=1 cargo rustdoc --quiet --lib -p workjournal --all-features -- \
  -Zunstable-options --output-format json
current="$(mktemp)"
trap 'rm -f "$current"' EXIT
python3 scripts/public-api.py "$target/doc/workjournal.json" > "$current"
if [ "${1:-}" = "--bless" ]; then
  cp "$current" docs/public-api.txt
  echo "wrote docs/public-api.txt ($(wc -l < docs/public-api.txt) items)"
  exit 0
fi
if ! diff -u docs/public-api.txt "$current"; then
  echo "the public API changed: if on purpose, run scripts/public-api.sh --bless and commit docs/public-api.txt" >&2
  exit 1
fi
echo "public API unchanged ($(wc -l < "$current") items)"
