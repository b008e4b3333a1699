#!/usr/bin/env bash
# Make docs/dashboard.png: a queue file with items in every state, flows
# paused, rate-limited, capped and backed off, and two schedules, served
# with `serve --http`, photographed by Debian's headless chromium through
# its chromedriver (apt-get install chromium chromium-driver).
#
#   scripts/dashboard-screenshot.sh [OUT]     # OUT defaults to docs/dashboard.png
#
# WORKJOURNAL_BIN names a built `workjournal` to use instead of building one.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-docs/dashboard.png}

for tool in chromium chromedriver python3; do
  command -v "$tool" >/dev/null 2>&1 || { echo "$tool not found: apt-get install chromium chromium-driver python3" >&2; exit 1; }
done
if [ -z "${WORKJOURNAL_BIN:-}" ]; then
  cargo build -q -p workjournal-cli
  WORKJOURNAL_BIN="${CARGO_TARGET_DIR:-target}/debug/workjournal"
fi
wj() { "$WORKJOURNAL_BIN" --db "$dir/jobs.redb" "$@"; }

dir=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

http_port=$(free_port)
wj serve --http "127.0.0.1:$http_port" >"$dir/serve.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [ -S "$dir/jobs.redb.sock" ] && [ -s "$dir/jobs.redb.token" ] && break; sleep 0.1; done

# Finished work for the charts (the serving process counts it), and dead
# letters: items whose command fails on every delivery.
seq 1 400 | sed 's/^/thumbnail /' | wj add --lines --flow photos
wj work --exec true --concurrency 2 --until-empty >/dev/null 2>&1
for n in 17 42; do wj add --flow billing "send invoice $n"; done
wj work --exec 'echo "smtp 550: mailbox unavailable" >&2; exit 1' \
  --backoff 10ms --until-empty >/dev/null 2>&1 || true

# Waiting work in several flows and tiers, a paused flow, limits, timers.
seq 1 24 | sed 's/^/resize photo /' | wj add --lines --flow photos
seq 1 6 | sed 's/^/render report /' | wj add --lines --flow reports --priority 5
seq 1 9 | sed 's/^/call api /' | wj add --lines --flow api
seq 1 5 | sed 's/^/send mail /' | wj add --lines --flow mail
wj pause photos
wj rate-limit api 10/1m
wj concurrency reports 2
wj backoff mail 10m
wj add --delay 1h 'reminder: rotate keys'
wj add --delay 20m --flow billing 'retry invoice 17'
wj schedule add nightly-report --cron '30 2 * * *' --tz Europe/Berlin \
  --flow reports --catch-up latest --overlap skip 'build the report'
wj schedule add heartbeat --every 5m ping
# Two items in someone's hands.
wj work --exec 'sleep 600' --concurrency 2 --prefetch 0 >/dev/null 2>&1 &
pids+=($!)
sleep 2

driver_port=$(free_port)
chromedriver --port="$driver_port" >/dev/null 2>&1 &
pids+=($!)
python3 - "$driver_port" "$http_port" "$(cat "$dir/jobs.redb.token")" "$out" <<'PY'
import base64, json, sys, time, urllib.request

driver, http, token, out = sys.argv[1:5]
base = f"http://127.0.0.1:{driver}"

def call(method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.load(r)["value"]

for _ in range(100):
    try:
        call("GET", "/status")
        break
    except OSError:
        time.sleep(0.1)
caps = {"capabilities": {"alwaysMatch": {"goog:chromeOptions": {
    "binary": "/usr/bin/chromium",
    "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
             "--disable-dev-shm-usage", "--hide-scrollbars"]}}}}
session = call("POST", "/session", caps)["sessionId"]
try:
    call("POST", f"/session/{session}/window/rect", {"width": 1100, "height": 1450})
    call("POST", f"/session/{session}/url", {"url": f"http://127.0.0.1:{http}/?token={token}"})
    time.sleep(4)  # the page's first refreshes fill the counts and charts
    png = base64.b64decode(call("GET", f"/session/{session}/screenshot"))
    with open(out, "wb") as f:
        f.write(png)
finally:
    call("DELETE", f"/session/{session}")
PY
echo "wrote $out"
