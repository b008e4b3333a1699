#!/usr/bin/env bash
# The .deb's generated files, made by running the binary that goes into it
# (no network, no queue):
#
#   scripts/deb-assets.sh target/release/workjournal
#
# writes, beside the binary (DIR is the binary's directory, the profile's
# directory of the target dir, where cli/Cargo.toml's
# [package.metadata.deb] assets look for them):
#
#   DIR/deb-assets/man/workjournal.1.gz, workjournal-add.1.gz, ...
#       one page per command and subcommand (`workjournal man`), gzipped
#   DIR/deb-assets/completions/workjournal.bash, _workjournal, workjournal.fish
#       `workjournal completions bash|zsh|fish`
#
# Anything left in DIR/deb-assets by an earlier run is removed first, so a
# subcommand that went away leaves no page behind. Prints what it wrote.
set -euo pipefail

if [ $# -ne 1 ]; then
  echo "usage: $0 PATH/TO/workjournal" >&2
  exit 2
fi
bin="$1"
if [ ! -x "$bin" ]; then
  echo "$0: $bin is not an executable (build the command first)" >&2
  exit 1
fi
out="$(cd "$(dirname "$bin")" && pwd)/deb-assets"

rm -rf "$out"
mkdir -p "$out/man" "$out/completions"

"$bin" man "$out/man"
# -n: no name or time stamp in the gzip header, so the same pages make the
# same bytes (a rebuilt package differs only where the pages do).
gzip -9n "$out"/man/*.1

"$bin" completions bash > "$out/completions/workjournal.bash"
"$bin" completions zsh > "$out/completions/_workjournal"
"$bin" completions fish > "$out/completions/workjournal.fish"

pages=("$out"/man/*.1.gz)
echo "wrote ${#pages[@]} man pages to $out/man and bash, zsh and fish completions to $out/completions"
