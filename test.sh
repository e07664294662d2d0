#!/usr/bin/env bash
# The whole test suite, on a fresh machine (Rust and a C compiler): installs what the tests
# need and is missing, then runs two phases, each with a time limit and stopping after a few
# failures, and prints one summary line per phase:
#
#   1. sqlite  - every test (unit, property, integration, browser) on the embedded SQLite store;
#   2. mongodb - the integration suite again on the MongoDB store, against a SecantusDB started
#                here on a free loopback port (stopped however the script ends).
#
# What it installs when absent:
#   - cargo-nextest (cargo install --locked cargo-nextest);
#   - Chromium and chromedriver (Debian's chromium chromium-driver; as root, else it says the
#     one command to run and stops);
#   - SecantusDB at a pinned version, in a virtual environment under target/ (it owns it).
#
# Arguments after `--` go to both nextest runs (e.g. `./test.sh -- -E 'test(/contrast/)'`).
# SHOAL_TEST_PHASES=sqlite or =mongodb runs one phase only.
set -euo pipefail
cd "$(dirname "$0")"

SECANTUS_VERSION="0.7.0b3"
VENV="target/secantusdb-$SECANTUS_VERSION"
MAX_FAIL=5
PHASES="${SHOAL_TEST_PHASES:-sqlite mongodb}"
EXTRA=()
if [ "${1:-}" = "--" ]; then
    shift
    EXTRA=("$@")
fi

say() { echo "test.sh: $*" >&2; }
# Stops with one line naming the command that installs what is missing.
need() { say "missing $1: run \`$2\`, then ./test.sh again"; exit 1; }
root() { [ "$(id -u)" = 0 ]; }
apt_install() {
    if root && command -v apt-get >/dev/null 2>&1; then
        say "installing $* (apt-get)"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
    else
        need "$*" "sudo apt-get install $*"
    fi
}

# --- prerequisites -------------------------------------------------------------------------
command -v cargo >/dev/null 2>&1 || need "Rust" "curl https://sh.rustup.rs -sSf | sh"
command -v cc >/dev/null 2>&1 || apt_install gcc libc6-dev
if ! cargo nextest --version >/dev/null 2>&1; then
    say "installing cargo-nextest (cargo install --locked cargo-nextest, a few minutes once)"
    cargo install --locked cargo-nextest
fi
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
    apt_install chromium chromium-driver
fi
if ! "$VENV/bin/secantusd-py" --help >/dev/null 2>&1; then
    command -v python3 >/dev/null 2>&1 || apt_install python3 python3-venv
    python3 -c 'import ensurepip, venv' 2>/dev/null || apt_install python3-venv
    say "installing SecantusDB $SECANTUS_VERSION into $VENV"
    rm -rf "$VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "SecantusDB==$SECANTUS_VERSION"
fi
export SHOAL_TEST_SECANTUSD="$PWD/$VENV/bin/secantusd-py"
export PATH="$PWD/$VENV/bin:$PATH"

# --- the phases ----------------------------------------------------------------------------
SUMMARY=()
STATUS=0
MONGO_PID=""
TMP="$(mktemp -d)"
cleanup() {
    if [ -n "$MONGO_PID" ]; then
        kill "$MONGO_PID" 2>/dev/null || true
        wait "$MONGO_PID" 2>/dev/null || true
    fi
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Runs nextest with a profile of .config/nextest.toml (its time limit for the phase), stopping
# after MAX_FAIL failures; nextest names the failed tests in its summary.
run_phase() {
    local name="$1"
    shift
    local start=$SECONDS rc=0
    echo "== phase $name: cargo nextest run --locked --profile $name --max-fail $MAX_FAIL $*" >&2
    cargo nextest run --locked --profile "$name" --max-fail "$MAX_FAIL" "$@" "${EXTRA[@]}" \
        2>&1 | tee "$TMP/$name.log" || rc=$?
    local secs=$((SECONDS - start))
    local counts
    counts="$(grep -E '^ *Summary \[' "$TMP/$name.log" | tail -n1 | sed 's/^ *Summary \[[^]]*\] *//')"
    [ -n "$counts" ] || counts="no summary (the build or nextest failed)"
    # The tests nextest lists under its summary (failed, timed out, crashed), by name.
    local failed
    failed="$(sed -n '/^ *Summary \[/,$p' "$TMP/$name.log" |
        sed -n 's/^ *[A-Z][A-Z-]* *\[ *[0-9.]*s\] *\(([ 0-9/]*) \)\{0,1\}[^ ]* \(.*\)$/\2/p' |
        sort -u | paste -sd ' ' -)"
    local line="phase $name: $([ "$rc" = 0 ] && echo ok || echo FAILED) in ${secs}s: $counts"
    [ -z "$failed" ] || line="$line; failed: $failed"
    if [ "$name" = mongodb ]; then
        line="$line; $(find "$TALLY" -type f | wc -l) tests ran servers or commands on MongoDB"
    fi
    SUMMARY+=("$line")
    echo "== $line" >&2
    [ "$rc" = 0 ] || STATUS=1
}

for phase in $PHASES; do
    case "$phase" in
    sqlite)
        run_phase sqlite
        ;;
    mongodb)
        LOG="$TMP/secantusd.log"
        "$SHOAL_TEST_SECANTUSD" --host 127.0.0.1 --port 0 --storage-path :memory: >"$LOG" 2>&1 &
        MONGO_PID=$!
        PORT=""
        for _ in $(seq 1 600); do
            PORT="$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$LOG" | head -n1)"
            [ -n "$PORT" ] && break
            kill -0 "$MONGO_PID" 2>/dev/null || break
            sleep 0.1
        done
        if [ -z "$PORT" ]; then
            cat "$LOG" >&2
            say "SecantusDB did not start (log above)"
            exit 1
        fi
        TALLY="$TMP/mongodb-tests"
        mkdir -p "$TALLY"
        # Every server and `shoal` command the harness starts then uses the MongoDB store,
        # checks that it did, and leaves its test's name in the tally (tests/it/harness.rs).
        export SHOAL_TEST_MONGODB_URI="mongodb://127.0.0.1:$PORT" SHOAL_TEST_MONGODB_TALLY="$TALLY"
        run_phase mongodb --test it
        unset SHOAL_TEST_MONGODB_URI SHOAL_TEST_MONGODB_TALLY
        kill "$MONGO_PID" 2>/dev/null || true
        wait "$MONGO_PID" 2>/dev/null || true
        MONGO_PID=""
        ;;
    *)
        say "unknown phase $phase (sqlite, mongodb)"
        exit 2
        ;;
    esac
done

echo "== summary" >&2
for line in "${SUMMARY[@]}"; do echo "   $line" >&2; done
exit "$STATUS"
