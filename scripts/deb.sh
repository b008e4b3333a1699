#!/usr/bin/env bash
# The Debian package of the `workjournal` command, in one command:
#
#   scripts/deb.sh         # release build (every backend), then the .deb
#   scripts/deb.sh --dev   # the .deb of the debug binary already built
#                          # (target/debug/workjournal, e.g. by
#                          # `cargo test --all-features`): no build at all
#
# then install it with `dpkg -i` (or `apt install ./FILE.deb`). The last
# line printed is the .deb's path: the target dir's debian/ (debian/dev/
# with --dev).
#
# Needs cargo-deb: cargo install cargo-deb --locked --version 3.8.0
# What the package holds: docs/SPEC.md section 9, Packaging.
set -euo pipefail
cd "$(dirname "$0")/.."

profile=release
case "${1:-}" in
  "") ;;
  --dev) profile=dev ;;
  *)
    echo "usage: $0 [--dev]" >&2
    exit 2
    ;;
esac

if ! command -v cargo-deb >/dev/null 2>&1; then
  echo "$0: cargo-deb not found: cargo install cargo-deb --locked --version 3.8.0" >&2
  exit 1
fi

# The target dir as cargo sees it (CARGO_TARGET_DIR, a config file, or
# ./target).
target="$(cargo metadata --format-version 1 --no-deps \
  | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
if [ -z "$target" ]; then
  echo "$0: cannot find the target dir with cargo metadata" >&2
  exit 1
fi

if [ "$profile" = release ]; then
  # The features of cli/Cargo.toml's [package.metadata.deb]: every backend.
  cargo build --release --locked -p workjournal-cli --features forward
  bin="$target/release/workjournal"
else
  bin="$target/debug/workjournal"
  if [ ! -x "$bin" ]; then
    echo "$0: $bin not found: build it first (cargo test --all-features)" >&2
    exit 1
  fi
fi

scripts/deb-assets.sh "$bin"
# --strip: the package's binary has no debug info (the release profile's
# line tables, the dev profile's everything); a smaller install on a device.
# A --dev package goes to debian/dev/, never in place of a release one.
# cargo-deb 3.8.0 warns that it will refuse `--profile dev` some day: the
# version is pinned (.ci/run), and CI saves a release build (8 min here).
output="$target/debian/"
[ "$profile" = release ] || output="$target/debian/dev/"
cargo deb -p workjournal-cli --profile "$profile" --no-build --strip --output "$output"
