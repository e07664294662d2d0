#!/usr/bin/env python3
"""The production topology on loopback, for real (run by deploy/test-topology.sh, which
installs what it needs first): Debian's nginx with the shipped site (deploy/nginx/, its
ports and paths substituted, a throwaway self-signed certificate), a MongoDB-compatible
server (SecantusDB, on disk so it can be restarted), one primary and two secondaries of
shoal (the built binary) on one database, configured by the shipped deploy/settings/shoal.toml.

Through nginx it drives the worker protocol as the official worker does, reads pages through
the secondaries, downloads a net from /nn/ as nginx serves it, checks the client address shoal
sees, counts downloads of one net through both secondaries at once, and then injects faults,
each under a running `shoal sim` fleet whose acknowledged games must all be in their runs: a
secondary killed, the primary killed and restarted, the database server restarted; then the
maintenance switch. Each step prints its result and time; the
exit status is 0 only when every step held.

Standard library only, plus pymongo from SecantusDB's virtual environment (to read counts
straight from the database, as an operator would with mongosh).
"""

import base64
import ctypes
import gzip
import hashlib
import html
import http.client as hc
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

import bson
import pymongo

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEPLOY = os.path.join(REPO, "deploy")
SHOAL = os.environ.get("SHOAL_BIN") or os.path.join(REPO, "target", "debug", "shoal")
SECANTUSD = os.environ["SHOAL_TEST_SECANTUSD"]
NGINX = os.environ.get("NGINX") or shutil.which("nginx") or "/usr/sbin/nginx"
PASSWORD = "topology password 1"
SECRET = "topology-secret-shared-by-every-instance-0123456789"
# The client's address for the checks: not nginx's (127.0.0.1), so a mix-up shows.
CLIENT = "127.0.0.2"

T0 = time.monotonic()
RESULTS = []


class Failed(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failed(what)


def log(msg):
    print(f"topology: [{time.monotonic() - T0:7.1f}s] {msg}", flush=True)


def run_step(name, fn):
    """Runs one step, prints and records its result and time; False if it failed."""
    start = time.monotonic()
    log(f"--- {name}")
    try:
        detail = fn() or ""
        ok = True
    except Failed as e:
        detail, ok = str(e), False
    except Exception as e:  # a step that crashed failed, with its reason
        detail, ok = f"{type(e).__name__}: {e}", False
    secs = time.monotonic() - start
    RESULTS.append((name, ok, secs, detail))
    log(f"{'ok  ' if ok else 'FAIL'} {name} ({secs:.1f} s){': ' + detail if detail else ''}")
    return ok


# --- processes ----------------------------------------------------------------------------------

LIBC = ctypes.CDLL("libc.so.6", use_errno=True)


def die_with_parent():
    # PR_SET_PDEATHSIG: the child gets SIGTERM when this process ends, however it ends.
    LIBC.prctl(1, signal.SIGTERM)


class Proc:
    def __init__(self, name, cmd, env, logfile, cwd=None):
        self.name, self.cmd, self.env, self.logfile, self.cwd = name, cmd, env, logfile, cwd
        self.p = None

    def start(self):
        out = open(self.logfile, "ab")
        self.p = subprocess.Popen(self.cmd, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                  cwd=self.cwd, preexec_fn=die_with_parent)
        out.close()
        return self

    def alive(self):
        return self.p is not None and self.p.poll() is None

    def stop(self, sig=signal.SIGTERM, wait=30):
        if self.alive():
            self.p.send_signal(sig)
            try:
                self.p.wait(wait)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()

    def tail(self, n=30):
        try:
            with open(self.logfile, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""


PROCS = []


def cleanup():
    for p in reversed(PROCS):
        try:
            p.stop(wait=10)
        except Exception:
            pass


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, cond, secs, every=0.2):
    deadline = time.monotonic() + secs
    last = None
    while time.monotonic() < deadline:
        try:
            last = cond()
            if last:
                return last
        except Exception as e:  # not yet
            last = e
        time.sleep(every)
    raise Failed(f"{what}: not within {secs} s (last: {last!r})")


def wait_log(proc, pattern, secs):
    rx = re.compile(pattern)

    def seen():
        check(proc.alive(), f"{proc.name} exited:\n{proc.tail()}")
        with open(proc.logfile, errors="replace") as f:
            m = rx.search(f.read())
        return m

    return wait_for(f"{proc.name} says /{pattern}/", seen, secs)


# --- HTTP through nginx ---------------------------------------------------------------------------

TLS = ssl.create_default_context()
TLS.check_hostname = False
TLS.verify_mode = ssl.CERT_NONE


def fetch(method, path, body=None, headers=None, source=CLIENT, port=None, tls=True,
         timeout=30, raw=False):
    """One request on a new connection (as the official worker makes them): status, headers
    (lower-case names), body bytes."""
    port = port or PORTS["https"]
    if tls:
        conn = hc.HTTPSConnection("127.0.0.1", port, context=TLS, timeout=timeout,
                                           source_address=(source, 0))
    else:
        conn = hc.HTTPConnection("127.0.0.1", port, timeout=timeout,
                                          source_address=(source, 0))
    hdrs = dict(headers or {})
    data = None
    if body is not None:
        data = body if raw else json.dumps(body).encode()
        hdrs.setdefault("Content-Type", "application/json")
    try:
        conn.request(method, path, body=data, headers=hdrs)
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def instance_get(port, path):
    """A GET straight to one instance (not through nginx)."""
    return fetch("GET", path, port=port, tls=False, source="127.0.0.1")


def api_json(method, path, body=None, **kw):
    status, headers, data = fetch(method, path, body, **kw)
    try:
        v = json.loads(data)
    except ValueError:
        raise Failed(f"{path}: not JSON ({status}): {data[:200]!r}")
    return status, v


def worker_info(user, key):
    return {
        "uname": "Linux 6.1.0-18-amd64", "architecture": ["64bit", "ELF"], "concurrency": 4,
        "max_memory": 8000, "min_threads": 1, "username": user, "version": 325,
        "python_version": [3, 11, 7], "gcc_version": [12, 2, 0], "compiler": "g++",
        "unique_key": key, "modified": False, "worker_arch": "x86-64-avx2", "ARCH": "?",
        "nps": 0.0, "near_github_api_limit": False,
    }


class Worker:
    """The official worker's calls: a JSON POST with password and worker_info, a reply that
    must be a JSON object with `duration`."""

    def __init__(self, user, key, source=CLIENT, password=PASSWORD):
        self.info = worker_info(user, key)
        self.source, self.password = source, password

    def call(self, path, extra=None, headers=None):
        body = {"password": self.password, "worker_info": self.info}
        body.update(extra or {})
        status, v = api_json("POST", path, body, source=self.source, headers=headers)
        check(isinstance(v, dict) and isinstance(v.get("duration"), (int, float)),
              f"{path}: a reply without duration: {v}")
        return status, v


# --- set-up ---------------------------------------------------------------------------------------

PORTS = {}
TMP = ""
INST = {}
NGINX_PROC = None
DB = None
SITE_SUBS = []


def base_env():
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "SHOAL_MONGODB_URI": f"mongodb://127.0.0.1:{PORTS['db']}/topology",
        "SHOAL_PRIMARY_PORT": str(PORTS["primary"]),
        "SHOAL_NN_URL": f"https://127.0.0.1:{PORTS['https']}",
        "SHOAL_NN_DIR": os.path.join(TMP, "nn"),
        "SHOAL_PUBLIC_URL": f"https://127.0.0.1:{PORTS['https']}",
        "SHOAL_SECRET": SECRET,
        # No GitHub here: a closed port, answered at once.
        "SHOAL_GITHUB_API_URL": "http://127.0.0.1:9",
        "SHOAL_GITHUB_RAW_URL": "http://127.0.0.1:9",
        "SHOAL_GITHUB_TIMEOUT_S": "2",
        "SHOAL_SHUTDOWN_GRACE_S": "5",
        "SHOAL_LOG": "info",
        "SHOAL_EXPECT_STORE": "mongodb",
        "SHOAL_EXIT_WITH_PARENT": str(os.getpid()),
    }


def shoal_cli(*args, env_extra=None):
    env = base_env()
    env["SHOAL_DATA_DIR"] = os.path.join(TMP, "cli")
    env.update(env_extra or {})
    # `shoal user --config FILE add …`: the option belongs to the first subcommand.
    r = subprocess.run([SHOAL, args[0], "--config", os.path.join(TMP, "shoal.toml"), *args[1:]],
                       env=env,
                       capture_output=True, text=True, timeout=120)
    check(r.returncode == 0, f"shoal {' '.join(args)}: {r.stderr.strip()}")
    return r.stdout


def start_db():
    global DB
    cmd = [SECANTUSD, "--host", "127.0.0.1", "--port", str(PORTS["db"]), "--storage-path",
           os.path.join(TMP, "db")]
    STATE["db_starts"] = STATE.get("db_starts", 0) + 1
    logfile = os.path.join(TMP, f"secantusdb-{STATE['db_starts']}.log")
    DB = Proc("secantusdb", cmd, dict(os.environ), logfile).start()
    PROCS.append(DB)
    wait_log(DB, r"listening on 127\.0\.0\.1:\d+", 60)


def start_instance(name):
    port = PORTS[name]
    env = base_env()
    env["SHOAL_PORT"] = str(port)
    env["SHOAL_DATA_DIR"] = os.path.join(TMP, name)
    logfile = os.path.join(TMP, f"{name}.log")
    with open(logfile, "ab") as f:
        f.write(f"\n=== start {time.strftime('%H:%M:%S')}\n".encode())
    p = Proc(name, [SHOAL, "serve", "--config", os.path.join(TMP, "shoal.toml")], env, logfile,
             cwd=TMP).start()
    PROCS.append(p)
    INST[name] = p
    start = os.path.getsize(logfile)

    def listening():
        check(p.alive(), f"{name} exited:\n{p.tail()}")
        with open(logfile, errors="replace") as f:
            f.seek(start)
            return "listening on http://" in f.read()

    wait_for(f"{name} listening", listening, 60)
    return p


def substitute(text, subs, file):
    for old, new in subs:
        check(old in text, f"{file}: the placeholder {old!r} is gone (update the test)")
        text = text.replace(old, new)
    return text


def write_site():
    """The shipped site with this run's values in place of its placeholders (each must be
    there: a renamed one fails the step), and a main configuration around it."""
    site = os.path.join(TMP, "site")
    os.makedirs(site, exist_ok=True)
    with open(os.path.join(DEPLOY, "nginx", "shoal.conf")) as f:
        conf = f.read()
    conf = substitute(conf, [
        ("127.0.0.1:8000", f"127.0.0.1:{PORTS['primary']}"),
        ("127.0.0.1:8001", f"127.0.0.1:{PORTS['second']}"),
        ("127.0.0.1:8002", f"127.0.0.1:{PORTS['third']}"),
        # Three instances here: the third takes the uploads too.
        ("127.0.0.1:8003", f"127.0.0.1:{PORTS['third']}"),
        ("listen 443 ssl http2;", f"listen 127.0.0.1:{PORTS['https']} ssl http2;"),
        ("listen [::]:443 ssl http2;", "# (no IPv6 in the test)"),
        ("listen 80;", f"listen 127.0.0.1:{PORTS['http']};"),
        ("listen [::]:80;", "# (no IPv6 in the test)"),
        ("/etc/letsencrypt/live/tests.example.org/fullchain.pem", os.path.join(TMP, "cert.pem")),
        ("/etc/letsencrypt/live/tests.example.org/privkey.pem", os.path.join(TMP, "key.pem")),
        ("/etc/nginx/shoal/shoal-routes.conf", os.path.join(site, "shoal-routes.conf")),
    ], "shoal.conf")
    with open(os.path.join(site, "shoal.conf"), "w") as f:
        f.write(conf)
    with open(os.path.join(DEPLOY, "nginx", "shoal-routes.conf")) as f:
        routes = f.read()
    routes = substitute(routes, [
        ("/etc/nginx/shoal/maintenance.on", os.path.join(TMP, "flags", "maintenance.on")),
        ("/etc/nginx/shoal/maintenance/", os.path.join(DEPLOY, "nginx", "maintenance") + "/"),
        ("/var/lib/shoal/nn/", os.path.join(TMP, "nn") + "/"),
        ("/opt/shoal/static/", os.path.join(REPO, "static") + "/"),
    ], "shoal-routes.conf")
    with open(os.path.join(site, "shoal-routes.conf"), "w") as f:
        f.write(routes)
    for d in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
        os.makedirs(os.path.join(TMP, "nginx-tmp", d), exist_ok=True)
    main = f"""
user {NGINX_USER};
worker_processes 2;
pid {TMP}/nginx.pid;
error_log {TMP}/nginx-error.log warn;
events {{ worker_connections 16384; }}
worker_rlimit_nofile 40000;
http {{
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    log_format topology '$remote_addr $request_method $uri $status $upstream_addr';
    access_log {TMP}/nginx-access.log topology;
    client_body_temp_path {TMP}/nginx-tmp/body;
    proxy_temp_path {TMP}/nginx-tmp/proxy;
    fastcgi_temp_path {TMP}/nginx-tmp/fastcgi;
    uwsgi_temp_path {TMP}/nginx-tmp/uwsgi;
    scgi_temp_path {TMP}/nginx-tmp/scgi;
    include {site}/shoal.conf;
    # The simulator speaks plain HTTP: the same routes on a loopback listener.
    server {{
        listen 127.0.0.1:{PORTS['plain']};
        include {site}/shoal-routes.conf;
    }}
}}
"""
    with open(os.path.join(TMP, "nginx.conf"), "w") as f:
        f.write(main)


# nginx's workers run as Debian's www-data (not root), with the modes docs/deploying.md gives
# the directories they read: a mode that locks them out fails the nets and maintenance steps.
NGINX_USER = "www-data"


def nginx_cmd(*extra):
    return [NGINX, "-p", TMP, "-e", os.path.join(TMP, "nginx-error.log"), "-c",
            os.path.join(TMP, "nginx.conf"), *extra]


def access_log():
    """(client, method, uri, status, upstream) of every request nginx logged."""
    rows = []
    with open(os.path.join(TMP, "nginx-access.log"), errors="replace") as f:
        for line in f:
            parts = line.split(" ", 4)
            if len(parts) == 5:
                rows.append((parts[0], parts[1], parts[2], parts[3], parts[4].strip()))
    return rows


def log_mark():
    try:
        return os.path.getsize(os.path.join(TMP, "nginx-access.log"))
    except OSError:
        return 0


def access_since(mark):
    rows = []
    with open(os.path.join(TMP, "nginx-access.log"), errors="replace") as f:
        f.seek(mark)
        for line in f:
            parts = line.split(" ", 4)
            if len(parts) == 5:
                rows.append((parts[0], parts[1], parts[2], parts[3], parts[4].strip()))
    return rows


def upstream_name(addr):
    for name in ("primary", "second", "third"):
        if addr.endswith(f":{PORTS[name]}"):
            return name
    return addr


def mongo():
    return pymongo.MongoClient(f"mongodb://127.0.0.1:{PORTS['db']}/", serverSelectionTimeoutMS=5000)["topology"]


# --- the steps ------------------------------------------------------------------------------------

STATE = {}


def step_static_checks():
    # nginx -t on the shipped site (its values substituted).
    write_site()
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=127.0.0.1", "-keyout", os.path.join(TMP, "key.pem"), "-out",
                    os.path.join(TMP, "cert.pem")], check=True, capture_output=True)
    r = subprocess.run(nginx_cmd("-t"), capture_output=True, text=True)
    check(r.returncode == 0, f"nginx -t: {r.stderr.strip()}")
    # systemd-analyze verify on the units (the binaries' paths substituted).
    units = os.path.join(TMP, "units")
    os.makedirs(units, exist_ok=True)
    for name in ("shoal@.service", "shoal-backup.service", "shoal-backup.timer"):
        with open(os.path.join(DEPLOY, "systemd", name)) as f:
            text = f.read()
        if name == "shoal@.service":
            text = substitute(text, [("/usr/local/bin/shoal ", SHOAL + " ")], name)
        if name == "shoal-backup.service":
            text = substitute(text, [("/usr/local/bin/shoal-backup.sh",
                                      os.path.join(DEPLOY, "backup", "shoal-backup.sh"))], name)
        with open(os.path.join(units, name), "w") as f:
            f.write(text)
    r = subprocess.run(["systemd-analyze", "verify", "./shoal@8000.service",
                        "./shoal@8001.service", "./shoal-backup.service", "./shoal-backup.timer"],
                       cwd=units,
                       capture_output=True, text=True)
    check(r.returncode == 0 and not r.stderr.strip() and not r.stdout.strip(),
          f"systemd-analyze verify: {r.stdout.strip()} {r.stderr.strip()}")
    # Every shipped settings file is valid.
    for name in ("shoal.toml", "single.toml"):
        r = subprocess.run([SHOAL, "check-config", "--config",
                            os.path.join(DEPLOY, "settings", name)],
                           capture_output=True, text=True, env={"PATH": os.environ["PATH"]})
        check(r.returncode == 0, f"check-config {name}: {r.stderr.strip()}")
    return "nginx -t, systemd-analyze verify (shoal@, shoal-backup), check-config (2 files)"


def step_start():
    shutil.copy(os.path.join(DEPLOY, "settings", "shoal.toml"), os.path.join(TMP, "shoal.toml"))
    os.makedirs(os.path.join(TMP, "nn"), exist_ok=True)
    # The deployment's modes: the state directory passable (0751), nn_dir readable (0755), the
    # maintenance flag's directory as /etc/nginx/shoal (0755).
    os.chmod(TMP, 0o751)
    os.chmod(os.path.join(TMP, "nn"), 0o755)
    os.makedirs(os.path.join(TMP, "flags"), exist_ok=True)
    os.chmod(os.path.join(TMP, "flags"), 0o755)
    start_db()
    for name in ("primary", "second", "third"):
        start_instance(name)
    for name, primary in (("primary", True), ("second", False), ("third", False)):
        _, _, body = instance_get(PORTS[name], "/healthz")
        check(json.loads(body).get("primary") is primary, f"{name}: /healthz {body!r}")
    global NGINX_PROC
    NGINX_PROC = Proc("nginx", nginx_cmd("-g", "daemon off;"), dict(os.environ),
                      os.path.join(TMP, "nginx.log")).start()
    PROCS.append(NGINX_PROC)
    wait_for("nginx answers", lambda: fetch("GET", "/healthz")[0] == 200, 20)
    shoal_cli("user", "add", "alice", "--password", PASSWORD, "--approver", "--email",
              "alice@example.org", "--machine-limit", "10000")
    shoal_cli("user", "add", "boss", "--password", PASSWORD, "--approver", "--email",
              "boss@example.org")
    return (f"SecantusDB :{PORTS['db']}, primary :{PORTS['primary']}, secondaries "
            f":{PORTS['second']} :{PORTS['third']}, nginx https :{PORTS['https']}")


def create_run(games):
    args = {
        "base_tag": "master", "new_tag": "patch", "resolved_base": "a" * 40,
        "resolved_new": "b" * 40, "base_signature": "1234567", "new_signature": "1234568",
        "base_options": "Hash=16", "new_options": "Hash=16", "tc": "10+0.1",
        "book": "UHO_Lichess_4852_v1.epd", "book_depth": "8", "threads": 1,
        "tests_repo": "https://github.com/official-stockfish/Stockfish", "num_games": games,
        "info": "the topology test",
    }
    status, v = api_json("POST", "/api/create_run",
                         {"username": "alice", "password": PASSWORD, "args": args})
    check(status == 200 and "run_id" in v, f"create_run: {status} {v}")
    run = v["run_id"]
    status, v = api_json("POST", "/api/approve_run",
                         {"username": "boss", "password": PASSWORD, "run_id": run})
    check(status == 200, f"approve_run: {status} {v}")
    return run


def pgn_b64():
    text = ('[Event "topology"]\n[White "New-patch"]\n[Black "Base-master"]\n'
            '[Result "1-0"]\n\n1. e4 e5 2. Qh5 Nc6 3. Bc4 Nf6 4. Qxf7# 1-0\n')
    return base64.b64encode(gzip.compress(text.encode())).decode()


def run_games(run_id, port=None):
    """W+L+D of a run, from one instance (default: the primary, whose cache is current)."""
    _, _, body = instance_get(port or PORTS["primary"], f"/api/get_run/{run_id}")
    r = json.loads(body)["results"]
    return r["wins"] + r["losses"] + r["draws"]


def step_worker_protocol():
    mark = log_mark()
    run = create_run(100000)
    STATE["run"] = run
    w = Worker("alice", "topo0001-1111-4222-8333-000000000001")
    # A client's own X-Forwarded-For is not believed: nginx appends the real address.
    spoof = {"X-Forwarded-For": "6.6.6.6"}
    status, v = w.call("/api/request_version", headers=spoof)
    check(status == 200 and v.get("version") == 325, f"request_version: {v}")
    status, v = w.call("/api/request_task", headers=spoof)
    check(status == 200 and v.get("run", {}).get("_id") == run, f"request_task: {v}")
    task = v["task_id"]
    stats = {"wins": 9, "losses": 6, "draws": 9, "crashes": 0, "time_losses": 0,
             "pentanomial": [1, 2, 4, 3, 2]}
    status, v = w.call("/api/update_task", {"run_id": run, "task_id": task, "stats": stats})
    check(status == 200 and v.get("task_alive") is True, f"update_task: {v}")
    status, v = w.call("/api/beat", {"run_id": run, "task_id": task})
    check(status == 200 and v.get("task_alive") is True, f"beat: {v}")
    check(run_games(run) == 24, f"the primary counts {run_games(run)} games, not 24")
    # The address shoal recorded for the worker: the client's, not nginx's, not the spoof.
    # (The read API masks it: read the stored task, once written behind.)
    def stored_addr():
        doc = mongo()["runs"].find_one({"_id": bson.ObjectId(run)}, {"tasks": 1})
        tasks = (doc or {}).get("tasks") or []
        return len(tasks) > task and tasks[task]["worker_info"].get("remote_addr")

    addr = wait_for("the task stored", stored_addr, 30)
    check(addr == CLIENT, f"worker address {addr!r}")
    # The upload instance checks the task in the store, as the primary would (a real worker
    # uploads after its games, long after the primary wrote the task behind).
    status, v = w.call("/api/upload_pgn", {"run_id": run, "task_id": task, "pgn": pgn_b64()})
    check(status == 200 and "error" not in v, f"upload_pgn: {v}")
    other = Worker("boss", "topo0009-1111-4222-8333-000000000009")
    for t in (task, task + 1, 10**6):
        status, v = other.call("/api/upload_pgn", {"run_id": run, "task_id": t,
                                                   "pgn": pgn_b64()})
        check("error" in v, f"upload_pgn of task {t} by another user's worker: {status} {v}")
    # The PGN, through a secondary.
    status, headers, data = fetch("GET", f"/api/pgn/{run}-{task}.pgn",
                                 headers={"Accept-Encoding": "gzip"})
    check(status == 200 and b"Qxf7#" in gzip.decompress(data), f"the PGN: {status}")
    routes = {(m, u): upstream_name(a) for (_, m, u, _, a) in access_since(mark)}
    for path in ("request_version", "request_task", "update_task", "beat", "create_run",
                 "approve_run"):
        check(routes.get(("POST", f"/api/{path}")) == "primary",
              f"/api/{path} went to {routes.get(('POST', f'/api/{path}'))}")
    status, _, body = fetch("GET", "/api/whoami")
    check(status != 503, f"/api/whoami: {status} {body[:200]!r}")
    routes = {(m, u): upstream_name(a) for (_, m, u, _, a) in access_since(mark)}
    check(routes.get(("GET", "/api/whoami")) == "primary",
          f"/api/whoami went to {routes.get(('GET', '/api/whoami'))}")
    check(routes.get(("POST", "/api/upload_pgn")) == "third",
          f"upload_pgn went to {routes.get(('POST', '/api/upload_pgn'))}")
    STATE["task"] = task
    return f"run {run}, task {task}: 24 games, PGN stored, worker address {CLIENT}"


def step_pages():
    run = STATE["run"]
    mark = log_mark()
    paths = ["/tests", f"/tests/view/{run}", "/tests/finished", "/actions", "/contributors",
             "/nns", "/tests/machines", "/api/active_runs", f"/api/get_run/{run}",
             "/tests/user/alice", "/login"]
    for p in paths * 2:
        status, _, body = fetch("GET", p)
        check(status == 200, f"GET {p}: {status} {body[:200]!r}")
    # The run page on a secondary shows what the primary acknowledged (written behind).
    wait_for("the secondaries see the 24 games", lambda: all(
        run_games(run, PORTS[s]) == 24 for s in ("second", "third")), 30)
    served = {upstream_name(a) for (_, m, u, _, a) in access_since(mark) if u in paths}
    check(served == {"second", "third"}, f"pages served by {served}")
    # gzip on a page.
    status, headers, _ = fetch("GET", "/tests", headers={"Accept-Encoding": "gzip"})
    check(headers.get("content-encoding") == "gzip", f"/tests not gzipped: {headers}")
    # Not for the public.
    for p in ("/metrics", "/debug/slow"):
        check(fetch("GET", p)[0] == 404, f"{p} is reachable through nginx")
    return f"{len(paths) * 2} pages and reads, 200, spread over both secondaries; gzip"


def step_session_across_instances():
    """Logged in through nginx (the form on one secondary), the session is live on every
    instance; logged out, every instance refuses it within session_recheck_s (5 s)."""
    status, headers, body = fetch("GET", "/login")
    cookie = headers.get("set-cookie", "").split(";")[0]
    m = re.search(rb'name="csrf_token" value="([^"]+)"', body)
    check(status == 200 and m and cookie, f"/login form: {status}")
    form = urllib.parse.urlencode({"username": "alice", "password": PASSWORD,
                                   "csrf_token": html.unescape(m.group(1).decode())})
    status, headers, _ = fetch("POST", "/login", form.encode(), raw=True, headers={
        "Content-Type": "application/x-www-form-urlencoded", "Cookie": cookie})
    check(status in (302, 303), f"login: {status}")
    cookie = headers.get("set-cookie", "").split(";")[0] or cookie

    def user_page(port):
        return fetch("GET", "/user", headers={"Cookie": cookie}, port=port, tls=False,
                     source="127.0.0.1")

    for name in ("primary", "second", "third"):
        status, _, body = user_page(PORTS[name])
        check(status == 200 and b"alice" in body, f"/user on {name}: {status}")
    status, _, body = fetch("GET", "/tests", headers={"Cookie": cookie})
    m = re.search(rb'name="csrf_token" value="([^"]+)"', body)
    check(status == 200 and m, f"/tests logged in: {status}")
    form = urllib.parse.urlencode({"csrf_token": html.unescape(m.group(1).decode())})
    status = fetch("POST", "/logout", form.encode(), raw=True, headers={
        "Content-Type": "application/x-www-form-urlencoded", "Cookie": cookie})[0]
    check(status in (302, 303), f"logout: {status}")
    t = time.monotonic()
    wait_for("every instance refuses the logged-out session", lambda: all(
        user_page(PORTS[n])[0] != 200 for n in ("primary", "second", "third")), 10)
    return (f"logged in once: /user 200 on all three instances; logged out: refused by all "
            f"within {time.monotonic() - t:.1f} s")


def add_net():
    content = bytes((i * 131 + i // 7 + 5) % 256 for i in range(200_000))
    name = f"nn-{hashlib.sha256(content).hexdigest()[:12]}.nnue"
    path = os.path.join(TMP, name)
    with open(path, "wb") as f:
        f.write(content)
    shoal_cli("nn", path, "--user", "alice")
    return content, name


def downloads(name):
    doc = mongo()["nns"].find_one({"name": name})
    check(doc is not None, f"no record of {name}")
    return int(doc.get("downloads", 0))


def step_nets():
    content, name = add_net()
    STATE["net"] = name
    before = downloads(name)
    mark = log_mark()
    status, headers, _ = fetch("GET", f"/api/nn/{name}")
    location = headers.get("location", "")
    check(status == 302 and location == f"https://127.0.0.1:{PORTS['https']}/nn/{name}",
          f"/api/nn: {status} {location!r}")
    status, headers, data = fetch("GET", f"/nn/{name}", headers={"Accept-Encoding": "gzip"})
    check(status == 200 and headers.get("content-encoding") == "gzip",
          f"/nn/: {status} {headers}")
    check(gzip.decompress(data) == content, "the net's bytes differ")
    # A client that takes no gzip gets the net decoded by nginx.
    status, headers, data = fetch("GET", f"/nn/{name}")
    check(status == 200 and data == content, f"/nn/ without gzip: {status} {headers}")
    check(fetch("GET", f"/nn/{name}.gz")[0] == 404, "a .gz name is served")
    check(fetch("GET", "/nn/../settings.toml")[0] in (400, 404), "a path outside nn_dir")
    rows = access_since(mark)
    nn_rows = [r for r in rows if r[2].startswith("/nn/")]
    check(nn_rows and all(r[4] == "-" for r in nn_rows), f"/nn/ not served by nginx: {nn_rows}")
    check(downloads(name) == before + 1, f"downloads {downloads(name)}, not {before + 1}")
    return f"{name}: counted by shoal (302), served by nginx (gzip_static), bytes intact"


def step_concurrent_downloads():
    name = STATE["net"]
    before = downloads(name)
    n, lanes = 300, 24
    mark = log_mark()

    def one(i):
        return fetch("GET", f"/api/nn/{name}", source=f"127.0.0.{10 + i % 20}")[0]

    with ThreadPoolExecutor(lanes) as pool:
        statuses = list(pool.map(one, range(n)))
    check(all(s == 302 for s in statuses), f"statuses {sorted(set(statuses))}")
    by = {}
    for (_, _, u, _, a) in access_since(mark):
        if u.startswith("/api/nn/"):
            by[upstream_name(a)] = by.get(upstream_name(a), 0) + 1
    check(set(by) == {"second", "third"}, f"counted by {by}")
    after = downloads(name)
    check(after == before + n, f"{after - before} downloads counted of {n} ({by})")
    return f"{n} downloads at once ({by['second']} + {by['third']} per secondary): {after - before} counted"


def step_client_address():
    # The worker API's failed-login throttle on the primary counts by the client's address:
    # 10 wrong passwords from one address refuse that address, not another one.
    bad = Worker("alice", "topo0002-1111-4222-8333-000000000002", source="127.0.0.3",
                 password="wrong password")
    statuses = [bad.call("/api/request_version")[0] for _ in range(11)]
    check(statuses[:10] == [401] * 10 and statuses[10] == 429, f"from 127.0.0.3: {statuses}")
    right_same = Worker("alice", "topo0002-1111-4222-8333-000000000002", source="127.0.0.3")
    check(right_same.call("/api/request_version")[0] == 429, "the throttled address passed")
    right_other = Worker("alice", "topo0003-1111-4222-8333-000000000003", source="127.0.0.4")
    status, v = right_other.call("/api/request_version")
    check(status == 200, f"another address is refused too: {status} {v}")
    # The pages' login (on the secondaries, one address always on one of them): the same.
    def login(source, password):
        status, headers, body = fetch("GET", "/login", source=source)
        cookie = headers.get("set-cookie", "").split(";")[0]
        m = re.search(rb'name="csrf_token" value="([^"]+)"', body)
        check(status == 200 and m and cookie, f"/login form: {status}")
        form = urllib.parse.urlencode({"username": "alice", "password": password,
                                       "csrf_token": html.unescape(m.group(1).decode())})
        return fetch("POST", "/login", form.encode(), raw=True, source=source,
                    headers={"Content-Type": "application/x-www-form-urlencoded",
                             "Cookie": cookie})[0]

    statuses = [login("127.0.0.5", "wrong") for _ in range(11)]
    check(statuses[10] == 429 and 429 not in statuses[:10], f"/login from 127.0.0.5: {statuses}")
    other = login("127.0.0.6", PASSWORD)
    check(other in (302, 303), f"/login from 127.0.0.6: {other}")
    return "throttled: 127.0.0.3 (worker API) and 127.0.0.5 (/login); 127.0.0.4 and 127.0.0.6 not"


def sim_report(path):
    with open(os.path.join(path, "report.json")) as f:
        return json.load(f)


def all_runs():
    return [str(r["_id"]) for r in mongo()["runs"].find({}, {"_id": 1})]


def fleet_under_fault(tag, seed, inject, duration=40):
    """Runs a `shoal sim` fleet (120 workers, time scale 30, a new connection per call) through
    nginx, calls `inject()` once the fleet's games are coming in, lets the fleet run to its end,
    and checks that no acknowledged update was lost: every run's game count (on the primary,
    then on both secondaries, which read the database) equals what it had before plus the
    games the workers were told were acknowledged (the simulator's report, games_by_run), and
    the fleet went on after the fault. Returns (inject's result, a summary)."""
    report = os.path.join(TMP, f"sim-{tag}")
    env = base_env()
    env.pop("SHOAL_EXPECT_STORE")
    # The simulator's own children (`shoal user`) must not watch this process.
    env.pop("SHOAL_EXIT_WITH_PARENT")
    env["SHOAL_STORE"] = "mongodb"
    env["SHOAL_DATA_DIR"] = os.path.join(TMP, "cli")
    # Its own seed: other workers (unique keys) than an earlier step's fleet.
    cmd = [SHOAL, "sim", "--server", f"http://127.0.0.1:{PORTS['plain']}", "--data-dir",
           os.path.join(TMP, "cli"), "--workers", "120", "--storm", "4", "--duration",
           str(duration), "--time-scale", "30", "--fresh-connections", "--runs", "3",
           "--baseline-secs", "0", "--closed-loop-secs", "0", "--seed", str(seed), "--quiet",
           "--report", report]
    # What every run had before (the fleet may also take tasks of earlier steps' runs).
    base = {r: run_games(r) for r in all_runs()}
    sim = Proc(f"sim-{tag}", cmd, env, os.path.join(TMP, f"sim-{tag}.log"), cwd=TMP).start()
    PROCS.append(sim)

    def games_now():
        return sum(run_games(r) for r in all_runs())

    def fleet_games():
        check(sim.alive(), f"the simulator ended early:\n{sim.tail()}")
        return games_now() - sum(base.values())

    # The fleet at work: games acknowledged.
    wait_for("the fleet's first games", lambda: fleet_games() > 0, 40, every=0.5)
    time.sleep(5)
    before = games_now()
    check(sim.alive(), f"the simulator ended before the fault:\n{sim.tail()}")
    fault_start = time.monotonic()
    injected = inject()
    after_fault = time.monotonic()
    at_fault = games_now()
    try:
        sim.p.wait(duration + 80)
    except subprocess.TimeoutExpired:
        raise Failed(f"the simulator did not end:\n{sim.tail()}")
    check(sim.p.returncode == 0, f"shoal sim failed ({sim.p.returncode}):\n{sim.tail()}")
    told = sim_report(report)["fleet"]["tasks"]["games_by_run"]
    expect = {r: base.get(r, 0) + told.get(r, 0) for r in set(base) | set(told)}
    lost = {r: (want, run_games(r)) for r, want in expect.items() if run_games(r) != want}
    check(not lost, f"runs whose games differ from before + what workers were told "
                    f"(expected, has): {lost}")
    after = games_now()
    check(after > at_fault, f"no games after the fault ({at_fault} then {after})")
    # The secondaries (reading the database) come to the same counts once written behind.
    for name in ("second", "third"):
        wait_for(f"{name} agrees with the acknowledged counts", lambda n=name: all(
            run_games(r, PORTS[n]) == want for r, want in expect.items()), 30)
    return injected, (f"fault at {before} games ({after_fault - fault_start:.1f} s, "
                      f"{at_fault} at its end), the fleet went on to {after}; every run "
                      f"({len(expect)}) = before + acknowledged ({sum(told.values())} games "
                      f"told), on the primary and both secondaries "
                      f"[fleet ended {time.monotonic() - after_fault:.0f} s after the fault]")


def step_secondary_killed():
    def kill_second():
        INST["second"].stop(signal.SIGKILL)
        mark = log_mark()
        paths = ["/tests", f"/tests/view/{STATE['run']}", "/api/active_runs", "/nns"]
        statuses = [fetch("GET", p)[0] for p in paths * 5]
        check(all(s == 200 for s in statuses), f"with a secondary dead: {statuses}")
        # A worker still works (the primary's paths do not need the secondaries).
        w = Worker("alice", "topo0001-1111-4222-8333-000000000001")
        check(w.call("/api/beat", {"run_id": STATE["run"], "task_id": STATE["task"]})[0]
              == 200, "beat")
        served = {upstream_name(a.split(",")[-1].strip())
                  for (_, _, u, _, a) in access_since(mark) if u in paths}
        start_instance("second")
        return f"{len(statuses)} pages answered 200 with one secondary killed (served by {served})"

    injected, summary = fleet_under_fault("secondary", 2, kill_second, duration=30)
    return f"{injected}; {summary}"


def step_primary_restarted():
    def restart_primary():
        pid = INST["primary"].p.pid
        INST["primary"].stop(signal.SIGKILL)
        time.sleep(1)
        start_instance("primary")
        return f"primary (pid {pid}) killed and restarted"

    injected, summary = fleet_under_fault("primary", 1, restart_primary)
    return f"{injected}; {summary}"


def step_database_restarted():
    pids = {n: p.p.pid for n, p in INST.items()}
    run = STATE["run"]

    def restart_db():
        DB.stop(signal.SIGTERM)
        time.sleep(2)
        start_db()
        # Every instance reads the database again, without a restart of its own.
        for name in ("primary", "second", "third"):
            wait_for(f"{name} reads the database", lambda n=name: instance_get(
                PORTS[n], f"/api/get_run/{run}")[0] == 200 and instance_get(
                PORTS[n], "/api/active_runs")[0] == 200, 60, every=1)
            check(INST[name].alive() and INST[name].p.pid == pids[name], f"{name} restarted")
        return "database restarted; the three instances (same pids) read it again"

    injected, summary = fleet_under_fault("database", 3, restart_db, duration=45)
    # Pages and a worker through nginx.
    check(fetch("GET", f"/tests/view/{run}")[0] == 200, "the run page")
    w = Worker("alice", "topo0004-1111-4222-8333-000000000004")
    status, v = w.call("/api/request_task")
    check(status == 200 and "task_id" in v, f"request_task after the restart: {v}")
    stats = {"wins": 2, "losses": 2, "draws": 4, "crashes": 0, "time_losses": 0,
             "pentanomial": [0, 1, 2, 1, 0]}
    games = run_games(v["run"]["_id"])
    status, u = w.call("/api/update_task", {"run_id": v["run"]["_id"], "task_id": v["task_id"],
                                            "stats": stats})
    check(status == 200 and u.get("task_alive") is True, f"update_task: {u}")
    check(run_games(v["run"]["_id"]) == games + 8, "the update was not counted")
    # Stored: the secondaries read it from the database.
    wait_for("the update stored", lambda: run_games(v["run"]["_id"], PORTS["second"])
             == games + 8, 30)
    for name in ("primary", "second", "third"):
        check(INST[name].alive() and INST[name].p.pid == pids[name], f"{name} restarted")
    return f"{injected}; {summary}; a worker's update after it stored"


def step_maintenance():
    flag = os.path.join(TMP, "flags", "maintenance.on")
    open(flag, "w").close()
    try:
        w = Worker("alice", "topo0001-1111-4222-8333-000000000001")
        body = {"password": PASSWORD, "worker_info": w.info}
        for path in ("/api/request_version", "/api/request_task", "/api/update_task"):
            status, headers, data = fetch("POST", path, body)
            check(status == 503 and data == b"", f"{path} in maintenance: {status} {data[:80]!r}")
            check(headers.get("retry-after"), f"{path}: no Retry-After")
            # Not JSON: the official worker takes it as a network failure and retries later
            # (a JSON error would make it give its task up).
            try:
                json.loads(data)
                raise Failed(f"{path}: JSON in maintenance")
            except ValueError:
                pass
        status, headers, page = fetch("GET", "/tests")
        check(status == 503 and b"Down for maintenance" in page, f"/tests: {status}")
        status, _, page = fetch("GET", "/nns", port=PORTS["plain"], tls=False)
        check(status == 503 and b"Down for maintenance" in page, f"plain /nns: {status}")
    finally:
        os.unlink(flag)
    status, v = Worker("alice", "topo0001-1111-4222-8333-000000000001").call("/api/request_version")
    check(status == 200, f"after maintenance: {v}")
    return "worker API: empty 503 + Retry-After; pages: the maintenance page; back when removed"


def step_backup_sqlite():
    data = os.path.join(TMP, "single")
    env = {"PATH": os.environ["PATH"], "SHOAL_DATA_DIR": data,
           "SHOAL_NN_DIR": os.path.join(TMP, "nn"), "SHOAL_BIN": SHOAL,
           "SHOAL_CONFIG": os.path.join(DEPLOY, "settings", "single.toml"),
           "SHOAL_BACKUP_DIR": os.path.join(TMP, "backups"), "SHOAL_EXPECT_STORE": "sqlite"}
    r = subprocess.run([SHOAL, "user", "--config", env["SHOAL_CONFIG"], "add", "bob",
                        "--password", PASSWORD], env=env, capture_output=True, text=True)
    check(r.returncode == 0, f"shoal user add: {r.stderr}")
    r = subprocess.run([os.path.join(DEPLOY, "backup", "shoal-backup.sh")], env=env,
                       capture_output=True, text=True)
    check(r.returncode == 0, f"shoal-backup.sh: {r.stderr}")
    files = [f for f in os.listdir(env["SHOAL_BACKUP_DIR"]) if f.endswith(".db")]
    check(len(files) == 1, f"backups: {files}")
    with open(os.path.join(env["SHOAL_BACKUP_DIR"], files[0]), "rb") as f:
        check(f.read(16) == b"SQLite format 3\x00", "not a SQLite database")
    check(STATE["net"] + ".gz" in os.listdir(os.path.join(env["SHOAL_BACKUP_DIR"], "nn")),
          "the nets were not copied")
    # Again, with the nets already copied (cp -n exits 1 there on newer coreutils).
    time.sleep(1.1)
    again = subprocess.run([os.path.join(DEPLOY, "backup", "shoal-backup.sh")], env=env,
                           capture_output=True, text=True)
    check(again.returncode == 0, f"shoal-backup.sh, second run: {again.stderr}")
    return f"{files[0]} and the nets ({r.stderr.strip().splitlines()[0]})"


def rss_mib(pid):
    """(current, peak) resident memory of a process, MiB."""
    vals = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM"):
                vals[k] = int(v.split()[0]) / 1024
    return vals.get("VmRSS", 0.0), vals.get("VmHWM", 0.0)


def connections(port):
    """Established TCP connections to a local port (either end)."""
    r = subprocess.run(["ss", "-Htan", "state", "established", f"( sport = :{port} )"],
                       capture_output=True, text=True)
    return len([ln for ln in r.stdout.splitlines() if ln.strip()])


def step_capacity():
    """SHOAL_TOPOLOGY_CAPACITY=WORKERS[:SECONDS]: a fleet at real time through nginx, with each
    process's peak memory and the peak of open connections (docs/deploying.md)."""
    spec = os.environ["SHOAL_TOPOLOGY_CAPACITY"]
    workers, _, secs = spec.partition(":")
    workers, secs = int(workers), float(secs or 180)
    report = os.path.join(TMP, "capacity")
    env = base_env()
    env.pop("SHOAL_EXPECT_STORE")
    env.pop("SHOAL_EXIT_WITH_PARENT")
    env["SHOAL_STORE"] = "mongodb"
    env["SHOAL_DATA_DIR"] = os.path.join(TMP, "cli")
    storm = min(60.0, secs / 3)
    cmd = [SHOAL, "sim", "--server", f"http://127.0.0.1:{PORTS['plain']}", "--data-dir",
           os.path.join(TMP, "cli"), "--workers", str(workers), "--storm", str(storm),
           "--duration", str(secs), "--time-scale", "1", "--fresh-connections",
           "--baseline-secs", "0", "--closed-loop-secs", "0", "--quiet",
           "--server-pid", str(INST["primary"].p.pid), "--report", report]
    log("capacity: " + " ".join(cmd[1:]))
    sim = Proc("capacity-sim", cmd, env, os.path.join(TMP, "capacity.log"), cwd=TMP).start()
    PROCS.append(sim)
    peak_conn = {"nginx (clients)": 0, "primary": 0, "secondaries": 0}
    while sim.alive():
        peak_conn["nginx (clients)"] = max(peak_conn["nginx (clients)"],
                                           connections(PORTS["plain"]))
        peak_conn["primary"] = max(peak_conn["primary"], connections(PORTS["primary"]))
        peak_conn["secondaries"] = max(peak_conn["secondaries"], connections(PORTS["second"])
                                       + connections(PORTS["third"]))
        time.sleep(0.5)
    check(sim.p.returncode == 0, f"shoal sim failed:\n{sim.tail()}")
    mem = {n: rss_mib(p.p.pid)[1] for n, p in INST.items()}
    mem["secantusdb"] = rss_mib(DB.p.pid)[1]
    nginx_kids = subprocess.run(["pgrep", "-P", str(NGINX_PROC.p.pid)], capture_output=True,
                                text=True).stdout.split()
    mem["nginx"] = rss_mib(NGINX_PROC.p.pid)[1] + sum(rss_mib(int(k))[1] for k in nginx_kids)
    said = {}
    for line in sim.tail(30).splitlines():
        log("capacity: " + line)
        key = line.split(":", 1)[0]
        if key in ("throughput", "workers"):
            said[key] = line
    return ("; ".join(said.values()) + "; peak RSS MiB: " + ", ".join(f"{n} {v:.0f}" for n, v in mem.items())
            + "; peak established connections: "
            + ", ".join(f"{n} {v}" for n, v in peak_conn.items()))


def main():
    global TMP
    TMP = tempfile.mkdtemp(prefix="shoal-topology-")
    os.chmod(TMP, 0o755)
    for name in ("db", "primary", "second", "third", "https", "http", "plain"):
        PORTS[name] = free_port()
    log(f"working in {TMP} (kept on failure)")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    steps = [
        ("static checks: nginx -t, systemd-analyze verify, check-config", step_static_checks),
        ("start: SecantusDB, a primary, two secondaries, nginx", step_start),
        ("worker protocol through nginx (TLS)", step_worker_protocol),
        ("pages and reads through the secondaries", step_pages),
        ("a session across instances (login, logout)", step_session_across_instances),
        ("a net: counted by shoal, served by nginx", step_nets),
        ("downloads of one net through two secondaries at once", step_concurrent_downloads),
        ("the client address shoal sees", step_client_address),
        ("fault: a secondary killed under a running fleet", step_secondary_killed),
        ("fault: the primary killed and restarted under a running fleet", step_primary_restarted),
        ("fault: the database server restarted under a running fleet",
         step_database_restarted),
        ("the maintenance switch", step_maintenance),
        ("backup of a SQLite deployment (shoal-backup.sh)", step_backup_sqlite),
    ]
    if os.environ.get("SHOAL_TOPOLOGY_CAPACITY"):
        steps.append(("capacity: a fleet through nginx (SHOAL_TOPOLOGY_CAPACITY)", step_capacity))
    ok = True
    try:
        for i, (name, fn) in enumerate(steps):
            # Later steps need the processes the first two start.
            if not run_step(name, fn) and i < 2:
                ok = False
                for later, _ in steps[i + 1:]:
                    RESULTS.append((later, False, 0.0, "not run"))
                break
    finally:
        cleanup()
    ok = ok and all(r[1] for r in RESULTS)
    print("\n== topology summary", flush=True)
    for name, passed, secs, detail in RESULTS:
        print(f"   {'ok  ' if passed else 'FAIL'} {secs:6.1f} s  {name}" +
              ("" if passed else f": {detail}"))
    print(f"   {'all held' if ok else 'FAILED'} in {time.monotonic() - T0:.0f} s"
          + ("" if ok else f"; logs in {TMP}"), flush=True)
    if ok:
        shutil.rmtree(TMP, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
