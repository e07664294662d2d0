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
# Arguments after `--` go to both nextest runs (e.g. `./test.sh -- -E 'test(/contrast/)'`);
# a phase where the filter selects no test passes with a warning (`--no-tests=warn`).
# SHOAL_TEST_PHASES=sqlite or =mongodb runs one phase only.
#
# Signals: SIGINT/SIGTERM to the script stop nextest (forwarded) and SecantusDB; SecantusDB
# also gets SIGTERM from the kernel if the script is killed outright (`setpriv --pdeathsig`,
# else a watchdog).
set -euo pipefail
cd "$(dirname "$0")"

# Also the harness's default (tests/it/mongo.rs, SECANTUS_VERSION), checked by a test there.
SECANTUS_VERSION="0.7.0b3"
VENV="target/secantusdb-$SECANTUS_VERSION"
# Written last by the install: its presence with this version is what "installed" means (no
# Python is run to check, so an interrupted check never looks like a missing install).
STAMP="$VENV/installed-version"
MAX_FAIL=5
# Without a filter, the mongodb phase fails unless at least this many tests ran servers or
# commands on MongoDB (the whole suite has far more; a number below it means the store switch
# silently stopped working).
MONGO_MIN_TESTS=100
PHASES="${SHOAL_TEST_PHASES:-sqlite mongodb}"
EXTRA=()
USAGE="usage: ./test.sh [-- NEXTEST-ARGS...]   (e.g. ./test.sh -- -E 'test(/contrast/)')"
if [ "$#" -gt 0 ]; then
    if [ "$1" != "--" ]; then
        echo "test.sh: arguments for nextest go after \`--\`" >&2
        echo "$USAGE" >&2
        exit 2
    fi
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
if [ ! -x "$VENV/bin/secantusd-py" ] || [ "$(cat "$STAMP" 2>/dev/null)" != "$SECANTUS_VERSION" ]; then
    command -v python3 >/dev/null 2>&1 || apt_install python3 python3-venv
    python3 -c 'import ensurepip, venv' 2>/dev/null || apt_install python3-venv
    say "installing SecantusDB $SECANTUS_VERSION into $VENV"
    rm -rf "$VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "SecantusDB==$SECANTUS_VERSION"
    echo "$SECANTUS_VERSION" >"$STAMP"
fi
export SHOAL_TEST_SECANTUSD="$PWD/$VENV/bin/secantusd-py"
export PATH="$PWD/$VENV/bin:$PATH"

# --- the phases ----------------------------------------------------------------------------
SUMMARY=()
STATUS=0
MONGO_PID=""
NEXTEST_PID=""
TMP="$(mktemp -d)"
cleanup() {
    if [ -n "$NEXTEST_PID" ]; then
        kill -TERM "$NEXTEST_PID" 2>/dev/null || true
        wait "$NEXTEST_PID" 2>/dev/null || true
    fi
    if [ -n "$MONGO_PID" ]; then
        kill "$MONGO_PID" 2>/dev/null || true
        wait "$MONGO_PID" 2>/dev/null || true
    fi
    rm -rf "$TMP"
}
trap cleanup EXIT
# nextest runs in the background and the script waits for it, so a signal to the script is
# handled at once (a foreground child would delay the trap until it ends) and passed on.
trap '[ -z "$NEXTEST_PID" ] || kill -INT "$NEXTEST_PID" 2>/dev/null; exit 130' INT
trap 'exit 143' TERM

# Runs nextest with a profile of .config/nextest.toml (its time limit for the phase), stopping
# after MAX_FAIL failures; nextest names the failed tests in its summary.
run_phase() {
    local name="$1"
    shift
    local start=$SECONDS rc=0
    local args=(--locked --profile "$name" --max-fail "$MAX_FAIL" --no-tests=warn "$@" "${EXTRA[@]}")
    echo "== phase $name: cargo nextest run ${args[*]}" >&2
    # cargo runs nextest in its own place (exec), so NEXTEST_PID is nextest's. nextest writes
    # the log itself (complete when it ends); tail shows it meanwhile and ends with it.
    : >"$TMP/$name.log"
    cargo nextest run "${args[@]}" >"$TMP/$name.log" 2>&1 &
    NEXTEST_PID=$!
    tail -n +1 -f --pid="$NEXTEST_PID" "$TMP/$name.log" &
    local tail_pid=$!
    wait "$NEXTEST_PID" || rc=$?
    NEXTEST_PID=""
    wait "$tail_pid" || true
    local secs=$((SECONDS - start))
    local counts
    counts="$({ grep -E '^ *Summary \[' "$TMP/$name.log" || true; } | tail -n1 |
        sed 's/^ *Summary \[[^]]*\] *//')"
    if [ -z "$counts" ]; then
        counts="no summary (the build or nextest failed)"
        [ "$rc" != 0 ] || rc=1
    fi
    # The tests nextest lists under its summary (failed, timed out, crashed), by name.
    local failed
    failed="$(sed -n '/^ *Summary \[/,$p' "$TMP/$name.log" |
        sed -n 's/^ *[A-Z][A-Z-]* *\[ *[0-9.]*s\] *\(([ 0-9/]*) \)\{0,1\}[^ ]* \(.*\)$/\2/p' |
        sort -u | paste -sd ' ' -)"
    local note=""
    if [ "$name" = mongodb ]; then
        local ran
        ran="$(find "$TALLY" -type f | wc -l)"
        note="; $ran test(s) ran servers or commands on MongoDB"
        if [ "${#EXTRA[@]}" -gt 0 ]; then
            note="$note (filtered)"
        elif [ "$ran" -lt "$MONGO_MIN_TESTS" ]; then
            note="$note: fewer than $MONGO_MIN_TESTS, so the phase proves nothing (FAILED)"
            rc=1
        fi
    fi
    local line="phase $name: $([ "$rc" = 0 ] && echo ok || echo FAILED) in ${secs}s: $counts"
    [ -z "$failed" ] || line="$line; failed: $failed"
    line="$line$note"
    SUMMARY+=("$line")
    echo "== $line" >&2
    [ "$rc" = 0 ] || STATUS=1
}

for phase in $PHASES; do
    case "$phase" in
    sqlite)
        # Every crate of the workspace: the server's tests and crates/*'s unit tests.
        run_phase sqlite --workspace
        ;;
    mongodb)
        LOG="$TMP/secantusd.log"
        # SIGTERM from the kernel if this script dies, however it dies.
        if command -v setpriv >/dev/null 2>&1; then
            setpriv --pdeathsig TERM -- "$SHOAL_TEST_SECANTUSD" --host 127.0.0.1 --port 0 \
                --storage-path :memory: >"$LOG" 2>&1 &
            MONGO_PID=$!
        else
            "$SHOAL_TEST_SECANTUSD" --host 127.0.0.1 --port 0 --storage-path :memory: >"$LOG" 2>&1 &
            MONGO_PID=$!
            (
                while kill -0 $$ 2>/dev/null; do sleep 1; done
                kill "$MONGO_PID" 2>/dev/null
            ) >/dev/null 2>&1 &
        fi
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
