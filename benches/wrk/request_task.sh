#!/usr/bin/env bash
# request_task under wrk: 50 connections asking for tasks with fresh worker names for 20 s,
# against a fresh shoal server on a temporary SQLite store (BENCHMARKS.md, "request_task under
# wrk"). Run from the repository root after `cargo build --release`:
#
#   benches/wrk/request_task.sh                      # the default settings
#   SHOAL_ADMISSION_QUEUE=0 benches/wrk/request_task.sh   # Fishtest's fast-reject gate
#
# Any SHOAL_* variable is passed to the server. Options (environment): SHOAL_BIN (default
# target/release/shoal), WRK_CONNECTIONS (50), WRK_THREADS (2), WRK_SECONDS (20), WRK_RUNS
# (runs created, 3.2 M games each: 4). Needs wrk and curl.
set -euo pipefail

bin=$(realpath "${SHOAL_BIN:-target/release/shoal}")
connections=${WRK_CONNECTIONS:-50}
threads=${WRK_THREADS:-2}
seconds=${WRK_SECONDS:-20}
runs=${WRK_RUNS:-4}
here=$(cd "$(dirname "$0")" && pwd)
data=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
url="http://127.0.0.1:$port"
password="wrk-password"

export SHOAL_DATA_DIR="$data" SHOAL_PORT="$port" SHOAL_HOST=127.0.0.1
export SHOAL_LOG=${SHOAL_LOG:-warn}
# The server and the CLI run in the data directory: built-in defaults plus SHOAL_* only (no
# settings.toml of the checkout).
cd "$data"
"$bin" serve >"$data/server.log" 2>&1 &
server=$!
cleanup() {
  kill "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  rm -rf "$data"
}
trap cleanup EXIT

for _ in $(seq 1 100); do
  curl -fs "$url/healthz" >/dev/null 2>&1 && break
  sleep 0.1
done
"$bin" user add wrk --password "$password" --machine-limit 4000000000 >/dev/null
"$bin" user add boss --password "$password" --approver >/dev/null

sha_a=$(printf 'a%.0s' $(seq 1 40))
sha_b=$(printf 'b%.0s' $(seq 1 40))
for i in $(seq 1 "$runs"); do
  args="{\"base_tag\":\"master\",\"new_tag\":\"patch$i\",\"resolved_base\":\"$sha_a\",
    \"resolved_new\":\"$sha_b\",\"base_signature\":\"1234567\",\"new_signature\":\"1234568\",
    \"base_options\":\"Hash=16\",\"new_options\":\"Hash=16\",\"tc\":\"10+0.1\",
    \"book\":\"UHO_Lichess_4852_v1.epd\",\"book_depth\":\"8\",\"threads\":1,
    \"tests_repo\":\"https://github.com/official-stockfish/Stockfish\",\"num_games\":3200000,
    \"info\":\"wrk run $i\"}"
  run=$(curl -fs "$url/api/create_run" -H 'Content-Type: application/json' \
    -d "{\"username\":\"wrk\",\"password\":\"$password\",\"args\":$args}" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["run_id"])')
  curl -fs "$url/api/approve_run" -H 'Content-Type: application/json' \
    -d "{\"username\":\"boss\",\"password\":\"$password\",\"run_id\":\"$run\"}" >/dev/null
done

echo "server: $("$bin" --version 2>/dev/null || echo shoal), $(curl -fs "$url/healthz" |
  python3 -c 'import json,sys; g=json.load(sys.stdin)["gate"]; print("gate", g["mode"], "capacity", g["capacity"], "max_batch", g.get("max_batch", "-"))')"
SHOAL_WRK_USER=wrk SHOAL_WRK_PASSWORD="$password" \
  wrk -t"$threads" -c"$connections" -d"${seconds}s" --timeout 30s -s "$here/request_task.lua" "$url"

# The server's side: the critical section, and the hand-over between callers.
curl -fs "$url/metrics" | python3 -c '
import sys
m = {}
for line in sys.stdin:
    line = line.strip()
    if not line or line.startswith("#"):
        continue
    name, _, value = line.rpartition(" ")
    try:
        m[name] = float(value)
    except ValueError:
        pass
def get(name):
    return m.get(name, 0.0)
count = get("shoal_request_task_critical_seconds_count")
mean = get("shoal_request_task_critical_seconds_sum") / count if count else 0.0
g = "{gate=\"request_task\"}"
served = get("shoal_gate_served_total" + g)
batches = get("shoal_gate_batches_total" + g)
busy = get("shoal_gate_busy_seconds" + g)
print(f"critical section: {count:.0f} calls, mean {mean * 1e3:.3f} ms (1/mean = {1 / mean if mean else 0:.0f}/s)")
peak = get("shoal_gate_assignments_per_second_max" + g)
if batches:
    print(f"batches: {batches:.0f}, mean size {served / batches:.1f}; peak {peak:.0f} tasks/s")
if busy:
    rate = served / busy
    print(f"served per busy second: {rate:.0f} = {rate * mean:.2f} of 1/mean")
'
