"""What every suite needs: child processes, /proc readings, data files, nginx, a private
bus, ferryd, and the rows of a result table.

Python 3 standard library only; no root needed; everything on 127.0.0.1.
"""

import contextlib
import ctypes
import hashlib
import os
import shutil
import signal
import socket
import statistics
import subprocess
import tempfile
import threading
import time

import wire

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
OUT_DIR = os.path.join(HERE, "out")

BUS_NAME = "org.ferry.Ferry1"
MANAGER_PATH = "/org/ferry/Ferry1"
MANAGER = "org.ferry.Ferry1.Manager"
SESSION = "org.ferry.Ferry1.Session"
TRANSFER = "org.ferry.Ferry1.Transfer"
PROPERTIES = "org.freedesktop.DBus.Properties"
OBJECT_MANAGER = "org.freedesktop.DBus.ObjectManager"
TRANSFER_PREFIX = "/org/ferry/Ferry1/transfer/"

CLK_TCK = os.sysconf("SC_CLK_TCK")
KIB = 1024
MIB = 1024 * 1024
GIB = 1024 * MIB


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

    def stop(self, proc, timeout=10):
        if proc.poll() is None:
            try:
                proc.terminate()
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            except ProcessLookupError:
                pass
        self.procs = [(n, p) for n, p in self.procs if p is not proc]

    def stop_all(self):
        for _, proc in reversed(list(self.procs)):
            self.stop(proc, timeout=5)


def timed_run(argv, env=None, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=None, timeout=None):
    """Runs argv to completion (killed after `timeout` s, if given); returns (exit code,
    wall s, user s, sys s) of the child."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=stdout, stderr=stderr, cwd=cwd,
                            stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)
    killer = threading.Timer(timeout, proc.kill) if timeout else None
    if killer:
        killer.start()
    try:
        _, status, rusage = os.wait4(proc.pid, 0)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    finally:
        if killer:
            killer.cancel()
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped by wait4
    return proc.returncode, wall, rusage.ru_utime, rusage.ru_stime


def proc_cpu_seconds(pid):
    """utime + stime of a running process (all its threads), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    # The command name (field 2) may hold spaces; the fields after it do not.
    fields = stat.rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # fields 14 and 15 of stat(5)


def tree_cpu_seconds(pid):
    """`proc_cpu_seconds` of a process and of its children (nginx's master and worker)."""
    total = proc_cpu_seconds(pid)
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            total += sum(proc_cpu_seconds(int(c)) for c in f.read().split())
    return total


def memory_breakdown_mib(pid):
    """RSS split into anonymous (heap, stacks), file-backed (code, mapped files) and shared memory."""
    return {k: proc_status_kib(pid, k) / KIB for k in ("VmRSS", "RssAnon", "RssFile", "RssShmem", "VmHWM")}


def proc_status_kib(pid, key):
    """A `kB` line of /proc/PID/status (VmRSS, VmHWM), in KiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


class ContextSwitches:
    """Counts context switches of every thread of a process over a window.

    /proc/PID/status holds only the main thread's counts, and a thread that ends takes
    its counts with it, so the threads are polled: a thread seen for the first time
    counts from zero, a thread that ends counts up to its last reading."""

    def __init__(self, pid):
        self.pid = pid
        self.first = {}
        self.last = {}
        self.names = {}
        self.sample()
        self.first = dict(self.last)

    def _read(self, tid):
        total = 0
        with open(f"/proc/{self.pid}/task/{tid}/status") as f:
            for line in f:
                if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                    total += int(line.split()[1])
        return total

    def sample(self):
        for tid in os.listdir(f"/proc/{self.pid}/task"):
            try:
                self.last[tid] = self._read(tid)
                if tid not in self.names:
                    with open(f"/proc/{self.pid}/task/{tid}/comm") as f:
                        self.names[tid] = f.read().strip()
            except (FileNotFoundError, ProcessLookupError):
                pass

    def total(self):
        return sum(v - self.first.get(tid, 0) for tid, v in self.last.items())

    def by_thread_name(self):
        """Switches per thread name (where the wakeups come from), busiest first."""
        out = {}
        for tid, v in self.last.items():
            name = self.names.get(tid, "?")
            out[name] = out.get(name, 0) + v - self.first.get(tid, 0)
        return dict(sorted(((k, v) for k, v in out.items() if v), key=lambda kv: -kv[1]))

    def threads_seen(self):
        return len(self.last)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(what, check, proc, timeout, logfile=None, interval=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise BenchError(f"{what} exited with status {proc.returncode}" + tail(logfile))
        if check():
            return
        time.sleep(interval)
    raise BenchError(f"{what} not ready after {timeout} s" + tail(logfile))


def tail(path, lines=30):
    if not path or not os.path.exists(path):
        return ""
    with open(path, errors="replace") as f:
        text = f.readlines()[-lines:]
    return f"\n--- last lines of {path} ---\n" + "".join(text)


def percentile(values, p):
    """Nearest-rank percentile of a non-empty list."""
    s = sorted(values)
    k = max(0, min(len(s) - 1, int(round(p / 100 * len(s) + 0.5)) - 1))
    return s[k]


def median(values):
    return statistics.median(values) if values else None


# ---------------------------------------------------------------- data

def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(8 * MIB):
            h.update(chunk)
    return h.hexdigest()


def ensure_data_file(size):
    """A served file of random bytes, made once and kept in bench/out/. Returns (name, path, sha256)."""
    name = f"data-{size // MIB}MiB.bin"
    path = os.path.join(OUT_DIR, name)
    sum_path = path + ".sha256"
    if os.path.exists(path) and os.path.getsize(path) == size and os.path.exists(sum_path):
        with open(sum_path) as f:
            return name, path, f.read().split()[0]
    need = size * 3 + 64 * MIB  # the file, a download of it and an upload of it
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


def ensure_small_files(count, size):
    """`count` files of `size` random bytes in bench/out/batch-N-S/ (made once); returns (dir name, names)."""
    dirname = f"batch-{count}x{size // KIB}KiB"
    path = os.path.join(OUT_DIR, dirname)
    names = [f"f{i:05d}.bin" for i in range(count)]
    marker = os.path.join(path, ".complete")
    if not os.path.exists(marker):
        log(f"creating {count} files of {size // KIB} KiB in {os.path.relpath(path, REPO)} (once)")
        os.makedirs(path, exist_ok=True)
        for n in names:
            with open(os.path.join(path, n), "wb") as f:
                f.write(os.urandom(size))
        open(marker, "w").close()
    return dirname, names


def warm_page_cache(path):
    """Read a source once so no tool pays for the first disk read."""
    paths = [path] if os.path.isfile(path) else [os.path.join(path, n) for n in os.listdir(path)]
    for p in paths:
        with open(p, "rb") as f:
            while f.read(8 * MIB):
                pass


def fdatasync_cost(directory, count=100, size=100 * KIB):
    """Median seconds to write `size` bytes to a new file and fdatasync it, in `directory`.

    Context for the batch figures: Ferry (one fdatasync per finished file) and aria2c
    (about three fsyncs per file, for its control files) pay this per file; curl does
    not. On a disk shared with busy neighbours it moves a lot from run to run."""
    os.makedirs(directory, exist_ok=True)
    data = os.urandom(size)
    times = []
    for i in range(count):
        path = os.path.join(directory, f"sync-{i}.bin")
        t0 = time.perf_counter()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, data)
            os.fdatasync(fd)
        finally:
            os.close(fd)
        times.append(time.perf_counter() - t0)
        os.unlink(path)
    return median(times)


def empty_dir(path):
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)


# ---------------------------------------------------------------- servers

def _nginx_without(module):
    out = subprocess.run(["nginx", "-V"], capture_output=True, text=True)
    return f"--without-http_{module}_module" in (out.stdout + out.stderr)


def start_nginx(children, tmp, root, port, slow_rate="8m", crawl_rate="256k"):
    """nginx on 127.0.0.1:port serving `root`:

    /NAME         unthrottled (sendfile)
    /slow/NAME    limited to `slow_rate` bytes/s per connection (segmented downloads)
    /crawl/NAME   limited to `crawl_rate` per connection (many transfers running at once)
    /m1/NAME .. /m4/NAME  the same file at four paths (the mirrors and metalink suites)
    /upload/NAME  accepts PUT (WebDAV), written under TMP/upload/
    """
    # Every path lives in tmp: nginx's compiled-in defaults point at root-owned places.
    temp_paths = "\n".join(
        f"    {module}_temp_path {tmp}/{module}_temp;"
        for module in ("proxy", "fastcgi", "uwsgi", "scgi")
        if not _nginx_without(module))
    user = "user root root;\n" if os.geteuid() == 0 else ""  # else workers drop to nobody
    upload_dir = os.path.join(tmp, "upload")
    os.makedirs(upload_dir, exist_ok=True)
    conf = f"""{user}worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/nginx-error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {upload_dir}/.body_temp;
{temp_paths}
    sendfile on;
    tcp_nopush on;
    keepalive_requests 100000;
    default_type application/octet-stream;
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        root {root};
        location / {{ }}
        location /slow/ {{ alias {root}/; limit_rate {slow_rate}; }}
        location /crawl/ {{ alias {root}/; limit_rate {crawl_rate}; }}
        location /m1/ {{ alias {root}/; }}
        location /m2/ {{ alias {root}/; }}
        location /m3/ {{ alias {root}/; }}
        location /m4/ {{ alias {root}/; }}
        location /upload/ {{
            alias {upload_dir}/;
            dav_methods PUT;
            client_max_body_size 0;
            client_body_buffer_size 1m;
        }}
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
    """A private dbus-daemon; returns (address, Popen)."""
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
  <!-- The limits of a desktop session bus (Debian's session.conf): the built-in
       defaults are far lower (128 pending replies per connection). -->
  <limit name="max_incoming_bytes">1000000000</limit>
  <limit name="max_outgoing_bytes">1000000000</limit>
  <limit name="max_message_size">1000000000</limit>
  <limit name="max_completed_connections">100000</limit>
  <limit name="max_connections_per_user">100000</limit>
  <limit name="max_match_rules_per_connection">50000</limit>
  <limit name="max_replies_per_connection">50000</limit>
</busconfig>
""")
    with open(os.path.join(tmp, "dbus-daemon.log"), "wb") as errors:
        proc = children.start("dbus-daemon", [
            "dbus-daemon", f"--config-file={conf_path}", "--print-address=1", "--nofork"],
            stdout=subprocess.PIPE, stderr=errors, text=True)
    address = proc.stdout.readline().strip()
    proc.stdout.close()
    if not address:
        raise BenchError("dbus-daemon printed no address")
    return address, proc


def release_bin_dir():
    out = subprocess.run(["swift", "build", "-c", "release", "--show-bin-path"],
                         cwd=REPO, capture_output=True, text=True)
    if out.returncode != 0:
        raise BenchError("swift build --show-bin-path failed:\n" + out.stderr)
    return out.stdout.strip()


# ---------------------------------------------------------------- the run's context

class Context:
    """What the suites share: the servers, the bus, the binaries, the options."""

    def __init__(self, args, tmp, children, bin_dir, address, bus_proc, port):
        self.args, self.tmp, self.children = args, tmp, children
        self.quick = args.quick
        self.ferryd_exe = os.path.join(bin_dir, "ferryd")
        self.ferry_exe = os.path.join(bin_dir, "ferry")
        self.address, self.bus_proc, self.port = address, bus_proc, port
        self.nginx_proc = None  # run.py sets it: suites may measure the web server's CPU
        self.env = dict(os.environ, DBUS_SESSION_BUS_ADDRESS=address)
        self._daemons = 0
        # Kept running however long a suite is idle: --no-idle-exit, or a day-long
        # idle timeout should a later ferryd drop that flag.
        help_text = subprocess.run([self.ferryd_exe, "--help"], capture_output=True, text=True).stdout
        self.stay_up = ["--no-idle-exit"] if "--no-idle-exit" in help_text else ["--idle-timeout", "86400"]

    def url(self, path):
        return f"http://127.0.0.1:{self.port}/{path}"

    def connect(self, on_signal=None):
        return wire.Connection(self.address, on_signal=on_signal)

    def new_state_dir(self):
        self._daemons += 1
        return os.path.join(self.tmp, f"state-{self._daemons}")

    def ferry(self, *argv):
        """Runs the CLI on the private bus; returns (exit code, wall s, user s, sys s, stdout text)."""
        out_path = os.path.join(self.tmp, "ferry.out")
        err_path = os.path.join(self.tmp, "ferry.err")
        with open(out_path, "wb") as o, open(err_path, "wb") as e:
            wrap = os.environ.get("FERRY_BENCH_CLI_WRAP", "").split()  # profiling the CLI, as FERRY_BENCH_WRAP ferryd
            code, wall, user, sys_ = timed_run([*wrap, self.ferry_exe, *argv], env=self.env, stdout=o, stderr=e)
        with open(out_path, errors="replace") as f:
            stdout = f.read()
        if code != 0:
            with open(err_path, errors="replace") as f:
                raise BenchError(f"ferry {' '.join(argv[:2])}… exited {code}: {f.read()[-1500:]}")
        return code, wall, user, sys_, stdout


class Ferryd:
    """One ferryd on the private bus, with its own state directory (so suites do not meet)."""

    def __init__(self, ctx, name, extra_args=None, state_dir=None, env=None):
        self.ctx, self.name = ctx, name
        self.env = dict(env or {})  # on top of the run's (the latency suite: CURL_CA_BUNDLE)
        self.extra_args = ctx.stay_up if extra_args is None else list(extra_args)
        self.state_dir = state_dir or ctx.new_state_dir()
        self.log_path = os.path.join(ctx.tmp, f"ferryd-{name}.log")
        self.proc = None
        self.started = None

    @property
    def pid(self):
        return self.proc.pid

    def start(self):
        env = dict(self.ctx.env, XDG_STATE_HOME=self.state_dir, **self.env)
        log_file = open(self.log_path, "ab")
        self.started = time.perf_counter()
        wrap = os.environ.get("FERRY_BENCH_WRAP", "").split()  # profiling: e.g. "strace -f -c -o FILE"
        self.proc = self.ctx.children.start(f"ferryd-{self.name}", [*wrap, self.ctx.ferryd_exe, *self.extra_args],
                                            env=env, stdout=log_file, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL)
        log_file.close()
        return self

    def wait_answering(self, conn, timeout=60):
        """Seconds from spawn until ListTransfers answers (polled every 5 ms)."""
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise BenchError(f"ferryd exited with status {self.proc.returncode}" + tail(self.log_path))
            serial = conn.send_call(BUS_NAME, MANAGER_PATH, MANAGER, "ListTransfers")
            reply = conn.wait_reply(serial, timeout=max(1, deadline - time.monotonic()))
            if reply.type == wire.RETURN:
                return time.perf_counter() - self.started
            if time.monotonic() > deadline:
                raise BenchError(f"ferryd not answering after {timeout} s: {reply.error_name}" + tail(self.log_path))
            time.sleep(0.005)

    def stop(self):
        if self.proc is not None:
            self.ctx.children.stop(self.proc, timeout=30)

    def rss_mib(self):
        return proc_status_kib(self.pid, "VmRSS") / KIB

    def cpu(self):
        return proc_cpu_seconds(self.pid)


# ---------------------------------------------------------------- bus helpers

def open_session(conn, identifier, config=None):
    return conn.call(BUS_NAME, MANAGER_PATH, MANAGER, "OpenSession", "sa{sv}",
                     [identifier, config or {}])[0]


def download_options(**kw):
    """a{sv} for Download from keyword arguments (destination, start, connections…)."""
    sigs = {"destination": "s", "start": "b", "connections": "u", "overwrite": "b", "method": "s"}
    return {k.replace("_", "-"): wire.Variant(sigs[k], v) for k, v in kw.items()}


def set_property(conn, path, iface, name, sig, value):
    conn.call(BUS_NAME, path, PROPERTIES, "Set", "ssv", [iface, name, wire.Variant(sig, value)])


def get_property(conn, path, iface, name):
    return conn.call(BUS_NAME, path, PROPERTIES, "Get", "ss", [iface, name])[0]


def remove_all_transfers(conn):
    """Forgets every transfer (pipelined Remove calls; untimed housekeeping between runs)."""
    paths = conn.call(BUS_NAME, MANAGER_PATH, MANAGER, "ListTransfers")[0]
    serials = [conn.send_call(BUS_NAME, p, TRANSFER, "Remove") for p in paths]
    for s in serials:
        conn.wait_reply(s)
    return len(paths)


class SignalCounter:
    """Counts signals by member (and by path for `Progress`), remembering Completed ones."""

    def __init__(self):
        self.reset()

    def reset(self):
        self.all_finished = []       # (time, args)
        self.completed = {}          # path -> (time, error name, message)
        self.progress = {}           # path -> count
        self.progress_total = 0

    def __call__(self, msg):
        member = msg.member
        if member == "Progress":
            self.progress_total += 1
            self.progress[msg.path] = self.progress.get(msg.path, 0) + 1
        elif member == "Completed" and msg.interface == TRANSFER:
            args = msg.args
            self.completed[msg.path] = (msg.received, args[1], args[2])
        elif member == "AllFinished" and msg.path == MANAGER_PATH:
            self.all_finished.append((msg.received, msg.args))


def match_rule(member, iface=TRANSFER):
    return f"type='signal',sender='{BUS_NAME}',interface='{iface}',member='{member}'"


def start_listening(ctx, name, signals=(("Completed", TRANSFER),), **ferryd_args):
    """A started ferryd, a SignalCounter, and a connection that has seen ferryd answer and
    subscribes to `signals` ((member, interface) pairs): the opening every timed suite shares."""
    ferryd = Ferryd(ctx, name, **ferryd_args).start()
    counter = SignalCounter()
    conn = ctx.connect(on_signal=counter)
    ferryd.wait_answering(conn)
    for member, iface in signals:
        conn.add_match(match_rule(member, iface))
    return ferryd, counter, conn


def bus_download_wall(conn, counter, session, url, opts, what):
    """Downloads `url` over the bus (`Session.Download` with `opts`) and waits for its
    `Completed`: the seconds from the call to that signal. A failed download raises
    BenchError naming `what`; every transfer is forgotten afterwards (untimed)."""
    counter.reset()
    t0 = time.perf_counter()
    path = conn.call(BUS_NAME, session, SESSION, "Download", "sa{sv}", [url, opts])[0]
    conn.wait_until(lambda: path in counter.completed, 900, "Completed")
    received, error, message = counter.completed[path]
    if error:
        raise BenchError(f"{what}: {error}: {message}")
    remove_all_transfers(conn)
    return received - t0


def aria2_wall(out_dir, connections, urls):
    """Times `aria2c -xN -sN -k1M` fetching `urls` (one file, the others its mirrors)
    into out_dir/aria2.bin: (seconds, that path)."""
    code, wall, _, _ = timed_run(["aria2c", f"-x{connections}", f"-s{connections}", "-k1M", "-d", out_dir,
                                  "-o", "aria2.bin", "--allow-overwrite=true", "-q", "--console-log-level=error",
                                  "--summary-interval=0"] + list(urls))
    if code != 0:
        raise BenchError(f"aria2c exited {code}")
    return wall, os.path.join(out_dir, "aria2.bin")


@contextlib.contextmanager
def bus_rounds(ferryd, conn, out_dir, refused):
    """Around a suite's rounds over the bus: a D-Bus error from ferryd becomes a
    BenchError saying ferryd refused `refused`; whatever happened, the connection is
    closed, ferryd stopped and `out_dir` emptied afterwards."""
    try:
        yield
    except wire.DBusError as e:
        raise BenchError(f"ferryd refused {refused}: {e}")
    finally:
        conn.close()
        ferryd.stop()
        empty_dir(out_dir)


def checked_wall(label, what, fetch, digest):
    """Runs `fetch()` (-> seconds, output file) after a sync, then, outside the timing,
    checks the file's sha256 against `digest` (a file stitched wrong fails the suite),
    removes it and logs the time: the seconds."""
    os.sync()
    wall, out = fetch()
    if sha256_file(out) != digest:
        raise BenchError(f"{what}: the downloaded file's sha256 differs from the source")
    os.unlink(out)
    log(f"{label} {what}: {wall:.2f} s")
    return wall


# ---------------------------------------------------------------- results

class Suite:
    """A suite's rows: one measurement each, with its peer, ratio, target and verdict."""

    def __init__(self, name):
        self.name = name
        self.rows = []
        self.data = {}
        self.notes = []
        self.error = None

    def row(self, what, ferry, peer="", ratio=None, target="", met=None):
        self.rows.append({"what": what, "ferry": ferry, "peer": peer,
                          "ratio": ratio, "target": target, "met": met})

    def note(self, text):
        self.notes.append(text)
        log(f"{self.name}: {text}")

    def as_json(self):
        return {"suite": self.name, "rows": self.rows, "data": self.data,
                "notes": self.notes, "error": self.error}


def fmt_s(seconds):
    return "—" if seconds is None else (f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.2f} s")


def verdict(met):
    return {True: "PASS", False: "FAIL", None: "info"}[met]


class FakeWorld:
    """For the harness's own tests of a suite: a temporary folder, the children it starts,
    a bin folder with the fake ferryd (`fake_ferry_bin`), a private bus, nginx serving
    OUT_DIR when asked, and the suite's Context over them. `close()` stops every child
    and removes the folder."""

    def __init__(self, prefix, args, nginx=False):
        self.tmp = tempfile.mkdtemp(prefix=prefix)
        self.children = Children()
        try:
            bin_dir = fake_ferry_bin(self.tmp)
            port = free_port()
            if nginx:
                start_nginx(self.children, self.tmp, OUT_DIR, port)
            address, bus = start_bus(self.children, self.tmp)
            self.ctx = Context(args, self.tmp, self.children, bin_dir, address, bus, port)
        except BaseException:
            self.close()
            raise

    def close(self):
        self.children.stop_all()
        shutil.rmtree(self.tmp, ignore_errors=True)


def fake_ferry_bin(tmp):
    """A bin folder for the harness's own tests: fake_ferryd.py as `ferryd` (it transfers
    with curl) and `false` as `ferry` (a Ferry tool that fails). Returns its path."""
    bin_dir = os.path.join(tmp, "bin")
    os.makedirs(bin_dir)
    os.symlink(os.path.join(HERE, "fake_ferryd.py"), os.path.join(bin_dir, "ferryd"))
    os.symlink(shutil.which("false"), os.path.join(bin_dir, "ferry"))
    os.makedirs(OUT_DIR, exist_ok=True)
    return bin_dir
