#!/usr/bin/env python3
"""Ferry's first benchmark: one large download over loopback, ferry against curl.

nginx serves a 1 GiB file on 127.0.0.1; a private dbus-daemon carries a release
ferryd. The script alternates `curl -s -o OUT URL` and `ferry get URL -o OUT --wait`,
timing the wall clock and the CPU each one costs (for ferry: the client plus the
daemon's share, read from /proc/PID/stat), and compares the medians with the targets.

Python 3 standard library only; no root needed. See bench/README.md.
"""

import argparse
import ctypes
import datetime
import hashlib
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
OUT_DIR = os.path.join(HERE, "out")

TARGET_WALL_RATIO = 1.05
TARGET_CPU_RATIO = 1.2
BUS_NAME = "org.ferry.Ferry1"
CLK_TCK = os.sysconf("SC_CLK_TCK")
MIB = 1024 * 1024


def log(msg):
    print(f"bench: {msg}", flush=True)


class BenchError(Exception):
    pass


# ---------------------------------------------------------------- processes

try:
    _libc = ctypes.CDLL(None, use_errno=True)
except OSError:
    _libc = None


def _die_with_parent():
    """Runs in the child before exec: SIGTERM it if this script dies (even by SIGKILL)."""
    if _libc is not None:
        _libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG


class Children:
    """Every long-lived process this script starts, stopped in reverse order."""

    def __init__(self):
        self.procs = []  # (name, Popen)

    def start(self, name, argv, **kwargs):
        # A session of its own: Ctrl-C reaches only this script, which then
        # stops the children in order.
        proc = subprocess.Popen(argv, start_new_session=True,
                                preexec_fn=_die_with_parent, **kwargs)
        self.procs.append((name, proc))
        return proc

    def stop_all(self):
        for name, proc in reversed(self.procs):
            if proc.poll() is None:
                try:
                    proc.terminate()
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                except ProcessLookupError:
                    pass
        self.procs.clear()


def timed_run(argv, env=None, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL):
    """Runs argv to completion; returns (exit code, wall s, user s, sys s) of the child."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=stdout, stderr=stderr,
                            stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)
    try:
        _, status, rusage = os.wait4(proc.pid, 0)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped by wait4
    return proc.returncode, wall, rusage.ru_utime, rusage.ru_stime


def proc_cpu_seconds(pid):
    """utime + stime of a running process (all its threads), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    # The command name (field 2) may hold spaces; the fields after it do not.
    fields = stat.rpartition(")")[2].split()
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of stat(5)
    return utime / CLK_TCK, stime / CLK_TCK


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(what, check, proc, timeout, logfile=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BenchError(f"{what} exited with status {proc.returncode}" + tail(logfile))
        if check():
            return
        time.sleep(0.05)
    raise BenchError(f"{what} not ready after {timeout} s" + tail(logfile))


def tail(path, lines=30):
    if not path or not os.path.exists(path):
        return ""
    with open(path, errors="replace") as f:
        text = f.readlines()[-lines:]
    return f"\n--- last lines of {path} ---\n" + "".join(text)


# ---------------------------------------------------------------- data

def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(8 * MIB):
            h.update(chunk)
    return h.hexdigest()


def ensure_data_file(size):
    """The served file: random bytes, made once and kept in bench/out/."""
    name = f"data-{size // MIB}MiB.bin"
    path = os.path.join(OUT_DIR, name)
    sum_path = path + ".sha256"
    if os.path.exists(path) and os.path.getsize(path) == size and os.path.exists(sum_path):
        with open(sum_path) as f:
            digest = f.read().split()[0]
        log(f"using cached {os.path.relpath(path, REPO)}")
        return name, path, digest
    need = size * 2 + 64 * MIB  # the file and one download of it
    if shutil.disk_usage(OUT_DIR).free < need:
        raise BenchError(f"{OUT_DIR} needs {need // MIB} MiB free")
    log(f"creating {os.path.relpath(path, REPO)} ({size // MIB} MiB of random bytes, once)")
    h = hashlib.sha256()
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        left = size
        while left:
            chunk = os.urandom(min(16 * MIB, left))
            h.update(chunk)
            f.write(chunk)
            left -= len(chunk)
    os.rename(tmp, path)
    digest = h.hexdigest()
    with open(sum_path, "w") as f:
        f.write(f"{digest}  {name}\n")
    return name, path, digest


def warm_page_cache(path):
    """Read the source once so neither tool pays for the first disk read."""
    with open(path, "rb") as f:
        while f.read(8 * MIB):
            pass


# ---------------------------------------------------------------- servers

def nginx_without(module):
    out = subprocess.run(["nginx", "-V"], capture_output=True, text=True)
    return f"--without-http_{module}_module" in (out.stdout + out.stderr)


def start_nginx(children, tmp, root, port):
    # Every path lives in tmp: nginx's compiled-in defaults point at root-owned places.
    temp_paths = "\n".join(
        f"    {module}_temp_path {tmp}/{module}_temp;"
        for module in ("proxy", "fastcgi", "uwsgi", "scgi")
        if not nginx_without(module))
    user = "user root root;\n" if os.geteuid() == 0 else ""  # else workers drop to nobody
    conf = f"""{user}worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/nginx-error.log warn;
events {{ worker_connections 64; }}
http {{
    access_log {tmp}/nginx-access.log;
    client_body_temp_path {tmp}/client_body_temp;
{temp_paths}
    sendfile on;
    tcp_nopush on;
    default_type application/octet-stream;
    server {{
        listen 127.0.0.1:{port};
        root {root};
        location / {{ }}
    }}
}}
"""
    conf_path = os.path.join(tmp, "nginx.conf")
    with open(conf_path, "w") as f:
        f.write(conf)
    errlog = os.path.join(tmp, "nginx-error.log")
    with open(os.path.join(tmp, "nginx.out"), "wb") as out:
        proc = children.start("nginx", [
            "nginx", "-p", tmp, "-c", conf_path, "-e", errlog, "-g", "daemon off;"],
            stdout=out, stderr=subprocess.STDOUT)

    def listening():
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return True
        except OSError:
            return False
    wait_until("nginx", listening, proc, 10, errlog)
    return proc


def start_bus(children, tmp):
    sock = os.path.join(tmp, "bus")
    conf_path = os.path.join(tmp, "bus.conf")
    with open(conf_path, "w") as f:
        f.write(f"""<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path={sock}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
""")
    proc = children.start("dbus-daemon", [
        "dbus-daemon", f"--config-file={conf_path}", "--print-address=1", "--nofork"],
        stdout=subprocess.PIPE, stderr=open(os.path.join(tmp, "dbus-daemon.log"), "wb"),
        text=True)
    address = proc.stdout.readline().strip()
    if not address:
        raise BenchError("dbus-daemon printed no address")
    return address


def name_has_owner(address, name):
    out = subprocess.run([
        "dbus-send", f"--bus={address}", "--print-reply", "--dest=org.freedesktop.DBus",
        "/org/freedesktop/DBus", "org.freedesktop.DBus.NameHasOwner", f"string:{name}"],
        capture_output=True, text=True)
    return out.returncode == 0 and "boolean true" in out.stdout


def release_bin_dir():
    out = subprocess.run(["swift", "build", "-c", "release", "--show-bin-path"],
                         cwd=REPO, capture_output=True, text=True)
    if out.returncode != 0:
        raise BenchError("swift build --show-bin-path failed:\n" + out.stderr)
    return out.stdout.strip()


# ---------------------------------------------------------------- runs

def check_output(path, size, digest, verify_sum):
    """Size always; sha256 only when asked (outside the timing)."""
    if not os.path.exists(path):
        return "no output file"
    got = os.path.getsize(path)
    if got != size:
        return f"size {got}, expected {size}"
    if verify_sum and sha256_file(path) != digest:
        return "sha256 mismatch"
    return None


def run_curl(url, out):
    code, wall, user, sys_ = timed_run(["curl", "-s", "-o", out, url])
    return {"tool": "curl", "exit": code, "wall": wall, "cpu": user + sys_,
            "cpu_client": user + sys_, "cpu_daemon": 0.0}


def run_ferry(url, out, ferry, ferryd_pid, env, tmp):
    out_log = os.path.join(tmp, "ferry.out")
    err_log = os.path.join(tmp, "ferry.err")
    with open(out_log, "wb") as o, open(err_log, "wb") as e:
        d_user0, d_sys0 = proc_cpu_seconds(ferryd_pid)
        code, wall, user, sys_ = timed_run(
            [ferry, "get", url, "-o", out, "--wait"], env=env, stdout=o, stderr=e)
        d_user1, d_sys1 = proc_cpu_seconds(ferryd_pid)
    daemon = (d_user1 - d_user0) + (d_sys1 - d_sys0)
    result = {"tool": "ferry", "exit": code, "wall": wall, "cpu": user + sys_ + daemon,
              "cpu_client": user + sys_, "cpu_daemon": daemon}
    if code != 0:
        with open(err_log, errors="replace") as f:
            result["stderr"] = f.read()[-2000:]
    # Forget the finished transfer so the daemon's list stays short (untimed).
    with open(out_log) as f:
        ids = [line.strip() for line in f if line.strip()]
    if ids:
        subprocess.run([ferry, "rm", *ids], env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return result


def median_or_none(values):
    return statistics.median(values) if values else None


def print_table(runs, size):
    print()
    print(f"{'run':>3}  {'tool':<5}  {'wall s':>7}  {'MiB/s':>7}  {'cpu s':>6}  "
          f"{'client':>6}  {'daemon':>6}")
    for r in runs:
        rate = size / MIB / r["wall"] if r["wall"] else 0
        print(f"{r['run']:>3}  {r['tool']:<5}  {r['wall']:>7.3f}  {rate:>7.0f}  "
              f"{r['cpu']:>6.3f}  {r['cpu_client']:>6.3f}  {r['cpu_daemon']:>6.3f}")
    print()


def main():
    ap = argparse.ArgumentParser(description="ferry vs curl: one 1 GiB download over loopback")
    ap.add_argument("--runs", type=int, default=5, help="runs of each tool (default 5)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed runs of each tool first (default 1)")
    ap.add_argument("--size-mib", type=int, default=1024, help="size of the served file (default 1024)")
    ap.add_argument("--bin-dir", help="where ferryd and ferry are (default: swift build -c release --show-bin-path)")
    ap.add_argument("--curl-only", action="store_true", help="debug: only the curl half, no bus or ferryd")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir with the logs")
    args = ap.parse_args()
    if args.runs < 1 or args.warmup < 0:
        ap.error("--runs must be at least 1 and --warmup at least 0")

    # SIGTERM and SIGHUP end the run the way Ctrl-C does: through the cleanup below.
    def interrupted(signum, _frame):
        raise KeyboardInterrupt
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, interrupted)

    os.makedirs(OUT_DIR, exist_ok=True)
    children = Children()
    tmp = tempfile.mkdtemp(prefix="ferry-bench-")
    out = os.path.join(OUT_DIR, "download.bin")
    ferryd_log = os.path.join(tmp, "ferryd.log")
    failed = False
    try:
        for tool in ("nginx", "curl") + (() if args.curl_only else ("dbus-daemon", "dbus-send")):
            if not shutil.which(tool):
                raise BenchError(f"{tool} not found (run `make deps`)")
        size = args.size_mib * MIB
        name, data_path, digest = ensure_data_file(size)

        ferry = ferryd_pid = env = None
        if not args.curl_only:
            bin_dir = args.bin_dir or release_bin_dir()
            ferryd, ferry = os.path.join(bin_dir, "ferryd"), os.path.join(bin_dir, "ferry")
            for exe in (ferryd, ferry):
                if not os.access(exe, os.X_OK):
                    raise BenchError(f"{exe} missing (run `make build`)")

        port = free_port()
        start_nginx(children, tmp, OUT_DIR, port)
        url = f"http://127.0.0.1:{port}/{name}"
        log(f"nginx serving {url}")

        if not args.curl_only:
            address = start_bus(children, tmp)
            env = dict(os.environ, DBUS_SESSION_BUS_ADDRESS=address,
                       XDG_STATE_HOME=os.path.join(tmp, "state"))
            with open(ferryd_log, "wb") as f:
                proc = children.start("ferryd", [ferryd], env=env, stdout=f,
                                      stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            wait_until("ferryd", lambda: name_has_owner(address, BUS_NAME), proc, 20, ferryd_log)
            ferryd_pid = proc.pid
            log(f"ferryd (pid {ferryd_pid}) owns {BUS_NAME} on {address}")

        warm_page_cache(data_path)
        tools = ["curl"] if args.curl_only else ["curl", "ferry"]
        runs, verified = [], set()
        for i in range(1 - args.warmup, args.runs + 1):
            for tool in tools:
                if os.path.exists(out):
                    os.unlink(out)
                os.sync()  # the last run's dirty pages are not this run's cost
                if tool == "curl":
                    r = run_curl(url, out)
                else:
                    r = run_ferry(url, out, ferry, ferryd_pid, env, tmp)
                r["run"] = i
                problem = (f"exit status {r['exit']}" if r["exit"] != 0
                           else check_output(out, size, digest, tool not in verified))
                if problem:
                    raise BenchError(f"{tool} run {r['run']}: {problem}" + ("\n" + r.get("stderr", "")))
                verified.add(tool)
                label = f"run {i}" if i >= 1 else "warm-up"
                log(f"{label} {tool}: {r['wall']:.3f} s wall, {r['cpu']:.3f} s cpu")
                if i >= 1:
                    runs.append(r)
        print_table(runs, size)

        summary = {tool: {
            "wall_median": median_or_none([r["wall"] for r in runs if r["tool"] == tool]),
            "cpu_median": median_or_none([r["cpu"] for r in runs if r["tool"] == tool]),
        } for tool in tools}
        result = {
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "host": {"machine": platform.machine(), "kernel": platform.release(),
                     "cpus": os.cpu_count()},
            "url": url, "size_bytes": size, "runs_per_tool": args.runs,
            "runs": runs, "median": summary,
            "targets": {"wall_ratio": TARGET_WALL_RATIO, "cpu_ratio": TARGET_CPU_RATIO},
        }
        if not args.curl_only:
            # Paired ratios (run i of ferry over run i of curl), then their median:
            # drift over the session (heat, background load) cancels out.
            pairs = [(c, f) for c, f in zip([r for r in runs if r["tool"] == "curl"],
                                             [r for r in runs if r["tool"] == "ferry"])]
            wall_ratio = statistics.median([f["wall"] / c["wall"] for c, f in pairs])
            cpu_ratio = statistics.median([f["cpu"] / max(c["cpu"], 1e-3) for c, f in pairs])
            wall_ok, cpu_ok = wall_ratio <= TARGET_WALL_RATIO, cpu_ratio <= TARGET_CPU_RATIO
            result["ratios"] = {"wall": wall_ratio, "cpu": cpu_ratio}
            result["pass"] = {"wall": wall_ok, "cpu": cpu_ok}
            print(f"median wall ratio ferry/curl: {wall_ratio:.3f}  "
                  f"(target <= {TARGET_WALL_RATIO})  {'PASS' if wall_ok else 'FAIL'}")
            print(f"median CPU ratio  ferry/curl: {cpu_ratio:.3f}  "
                  f"(target <= {TARGET_CPU_RATIO})  {'PASS' if cpu_ok else 'FAIL'}")
            failed = not (wall_ok and cpu_ok)
        else:
            print("--curl-only: no ratios")
        result_path = os.path.join(OUT_DIR, "result.json")
        with open(result_path, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
        log(f"wrote {os.path.relpath(result_path, REPO)}")
    except BenchError as e:
        print(f"bench: error: {e}", file=sys.stderr)
        if "ferryd.log" not in str(e):
            print(tail(ferryd_log), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\nbench: interrupted", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # let the cleanup finish
        children.stop_all()
        if os.path.exists(out):
            os.unlink(out)
        if args.keep:
            log(f"logs kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
