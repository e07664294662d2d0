#!/usr/bin/env bash
# The production topology, for real, on loopback, in one command (docs/deploying.md):
#
#   sudo deploy/test-topology.sh
#
# Debian's nginx with the shipped site (deploy/nginx/: ports and paths substituted, a
# throwaway self-signed certificate), SecantusDB (a MongoDB-compatible server), one primary and
# two secondaries of the built shoal on one database with the shipped deploy/settings/shoal.toml.
# Through nginx: the worker protocol as the official worker drives it, pages through the
# secondaries, a net served by nginx, the client address shoal sees, one net downloaded
# through both secondaries at once; then faults, each under a running `shoal sim` fleet that
# must lose no acknowledged game: a secondary killed, the primary killed and restarted, the
# database server restarted; the maintenance switch; and `nginx -t`, `systemd-analyze verify`, the backup script. Each step prints its
# result and time; exits 0 only when every step held. The steps are deploy/topology.py.
#
# Runs as root (nginx's workers, the apt installs). Installs what is missing: nginx,
# openssl and systemd-analyze (apt), SecantusDB (as ./test.sh does, same pinned version, under
# target/). Builds shoal (`cargo build --locked`, the debug binary) unless SHOAL_BIN names one.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { echo "test-topology.sh: $*" >&2; }
if [ "$(id -u)" != 0 ]; then
    say "run as root (nginx's worker processes, apt installs): sudo $0"
    exit 1
fi
apt_install() {
    command -v apt-get >/dev/null 2>&1 || { say "missing $*, and no apt-get to install it"; exit 1; }
    say "installing $* (apt-get)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}
[ -x /usr/sbin/nginx ] || command -v nginx >/dev/null 2>&1 || apt_install nginx
command -v openssl >/dev/null 2>&1 || apt_install openssl
command -v systemd-analyze >/dev/null 2>&1 || apt_install systemd

# SecantusDB, as ./test.sh installs it (the same version and place: one install serves both).
SECANTUS_VERSION="$(sed -n 's/^SECANTUS_VERSION="\(.*\)"$/\1/p' test.sh)"
VENV="target/secantusdb-$SECANTUS_VERSION"
if [ ! -x "$VENV/bin/secantusd-py" ] || [ "$(cat "$VENV/installed-version" 2>/dev/null)" != "$SECANTUS_VERSION" ]; then
    command -v python3 >/dev/null 2>&1 || apt_install python3 python3-venv
    python3 -c 'import ensurepip, venv' 2>/dev/null || apt_install python3-venv
    say "installing SecantusDB $SECANTUS_VERSION into $VENV"
    rm -rf "$VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "SecantusDB==$SECANTUS_VERSION"
    echo "$SECANTUS_VERSION" >"$VENV/installed-version"
fi
export SHOAL_TEST_SECANTUSD="$PWD/$VENV/bin/secantusd-py"

if [ -z "${SHOAL_BIN:-}" ]; then
    say "cargo build --locked"
    cargo build --locked --quiet
    export SHOAL_BIN="$PWD/target/debug/shoal"
fi
NGINX="$(command -v nginx || echo /usr/sbin/nginx)"
export NGINX
say "$("$NGINX" -v 2>&1), $(systemd-analyze --version | head -n1), shoal at $SHOAL_BIN"

# The driver runs on SecantusDB's Python (it reads counts with its pymongo); it stops every
# process it started however it ends.
exec "$VENV/bin/python" deploy/topology.py
