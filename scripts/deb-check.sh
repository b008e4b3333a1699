#!/usr/bin/env bash
# The Debian package end to end, as root, on this machine: build it
# (scripts/deb.sh, passing on --dev), install it with dpkg -i, use the
# INSTALLED command (version, man pages, completions, the system user and
# its state dir, a queue round trip), then dpkg --purge it and check that
# nothing of it is left. .ci/run runs `scripts/deb-check.sh --dev`.
#
# It installs and purges the package `workjournal` on the machine it runs
# on: a copy installed before is purged first (so a second run, or a run
# after a failed one, starts clean), and none is left after.
set -euo pipefail
cd "$(dirname "$0")/.."

pkg=workjournal
bin=/usr/bin/workjournal
fail() {
  echo "deb-check: $*" >&2
  exit 1
}
[ "$(id -u)" = 0 ] || fail "needs root (dpkg -i and --purge)"
installed() { dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -qv '^unknown ok not-installed$'; }

if installed; then
  echo "purging the $pkg package left from before"
  dpkg --purge "$pkg"
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# scripts/deb.sh prints the .deb's path last.
scripts/deb.sh "$@" | tee "$tmp/deb.out"
deb="$(tail -n 1 "$tmp/deb.out")"
[ -f "$deb" ] || fail "scripts/deb.sh did not make a .deb (last line: $deb)"
echo "$deb: $(stat -c %s "$deb") bytes"
dpkg -c "$deb"

# --path-include: images that drop documentation (a path-exclude of
# /usr/share/man in /etc/dpkg/dpkg.cfg.d) would install no man pages.
dpkg -i --path-include='/usr/share/man/*' "$deb"

# The installed command, its version the package's (0.1.0 of 0.1.0-1).
version="$(dpkg-query -W -f='${Version}' "$pkg")"
[ "$("$bin" --version)" = "workjournal ${version%-*}" ] ||
  fail "$bin --version says '$("$bin" --version)', the package is $version"
echo "$bin --version: $("$bin" --version)"

# Man pages: the command's and its subcommands', found and rendered.
for page in workjournal workjournal-add workjournal-work workjournal-schedule-add; do
  path="$(man -w "$page")" || fail "man -w $page found nothing"
  [ "$path" = "/usr/share/man/man1/$page.1.gz" ] || fail "man -w $page: $path"
done
LC_ALL=C MANWIDTH=200 man -P cat workjournal-add 2>/dev/null | grep -q -- '--dedup-key' ||
  fail "man workjournal-add does not show --dedup-key"
echo "man -w workjournal: $(man -w workjournal)"

# Completions where each shell looks for them; bash's parses.
for f in /usr/share/bash-completion/completions/workjournal \
  /usr/share/zsh/vendor-completions/_workjournal \
  /usr/share/fish/vendor_completions.d/workjournal.fish; do
  [ -s "$f" ] || fail "no completions at $f"
done
bash -n /usr/share/bash-completion/completions/workjournal

# The system user and its state dir; the unit installed, not enabled.
IFS=: read -r _ _ _ _ _ home shell < <(getent passwd workjournal) ||
  fail "no user workjournal after the install"
[ "$home" = /var/lib/workjournal ] || fail "workjournal's home is $home"
[ "$shell" = /usr/sbin/nologin ] || fail "workjournal's shell is $shell"
[ "$(stat -c '%U:%G %a' /var/lib/workjournal)" = "workjournal:workjournal 750" ] ||
  fail "/var/lib/workjournal is $(stat -c '%U:%G %a' /var/lib/workjournal)"
unit=/usr/lib/systemd/system/workjournal.service
grep -q '^ExecStart=/usr/bin/workjournal ' "$unit" || fail "$unit does not run $bin"
[ ! -e /etc/systemd/system/multi-user.target.wants/workjournal.service ] ||
  fail "the install enabled the service"

# A queue round trip with the installed binary on a temp file: add, work
# it off (cat prints the payload), nothing left.
"$bin" --db "$tmp/q.redb" add 'hello from the package' >/dev/null
out="$("$bin" --db "$tmp/q.redb" work --until-empty --concurrency 1 --exec cat)"
[ "$out" = 'hello from the package' ] || fail "work --exec cat printed '$out'"
stats="$("$bin" --db "$tmp/q.redb" stats --json)"
python3 - "$stats" <<'EOF' || fail "items left after the round trip: $stats"
import json, sys
s = json.loads(sys.argv[1])
left = {k: s[k] for k in ("backlog", "delayed", "pending", "parked", "dead_letters")}
sys.exit(0 if not any(left.values()) else 1)
EOF
echo "round trip: 1 added, 1 worked, stats $stats"
# The service's user can make its queue in its state dir (as the unit does).
runuser -u workjournal -- "$bin" --db /var/lib/workjournal/jobs.redb add 'as the service user' >/dev/null
[ "$(stat -c %U /var/lib/workjournal/jobs.redb)" = workjournal ] ||
  fail "the service user's queue file is not its own"

dpkg --purge "$pkg"
! installed || fail "$pkg still installed after --purge"
[ ! -e "$bin" ] || fail "$bin left after --purge"
! getent passwd workjournal >/dev/null || fail "user workjournal left after --purge"
! getent group workjournal >/dev/null || fail "group workjournal left after --purge"
[ ! -e /var/lib/workjournal ] || fail "/var/lib/workjournal left after --purge"
[ ! -e "$unit" ] || fail "$unit left after --purge"
! man -w workjournal >/dev/null 2>&1 || fail "man page left after --purge"
echo "deb-check: installed, used and purged $(basename "$deb"): nothing left"
