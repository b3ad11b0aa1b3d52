"""latency (issue 41, point 5): downloads over HTTPS with a 40 ms round trip, against
curl and aria2c measured in the same rounds.

Set-up, all in the suite's own folder (removed when it ends, whatever happens):
- a test CA and a server certificate for 127.0.0.1 (subjectAltName IP:127.0.0.1,
  DNS:localhost) signed by it, made with `openssl`;
- an nginx of its own with TLS and two server blocks: `listen PORT ssl http2` and
  `listen PORT ssl` (HTTP/1.1 only), serving the batch's 1,000 files of 100 KiB and a
  sparse 1 GiB file; its access log notes each request's protocol and connection;
- one delay proxy (delay_proxy.py) in front of each server, adding the RTT (default
  40 ms: RTT/2 each way, and one RTT for a new connection's handshake).

Every client is told to trust the test CA: `curl --cacert`, `aria2c --ca-certificate`,
and ferryd through its environment (`CURL_CA_BUNDLE`). Nothing turns verification off.

Groups, in alternating rounds (one untimed warm-up, then --runs):
- h2 server, 1,000 x 100 KiB: `ferry get URL... -d DIR --wait`, the bus client (every
  `Download` at once, as in the batch suite), `curl -Z --parallel-max 100`, `aria2c -j16`,
  and `curl --http1.1 -Z --parallel-max 6` (information: what multiplexing buys curl);
- HTTP/1.1 server, 1,000 x 100 KiB: ferry get, the bus client, `curl --http1.1 -Z
  --parallel-max 6`;
- h2 server, 1 GiB: `ferry get URL -o FILE --wait` against `curl -o FILE`.

A Ferry tool whose downloads fail (a TLS error while ferryd does not read the CA from
its environment) is not run again; its rows say FAIL with the error, and the peers are
still timed.
"""

import os
import shutil
import subprocess
import sys
import time

import harness as h
from harness import BUS_NAME, SESSION, BenchError
import suite_batch

TARGET_H2_CURL = 1.10    # ferry <= 1.1 x curl -Z --parallel-max 100 over h2
TARGET_H2_ARIA2 = 3.0    # ferry at least 3 x faster than aria2c -j16
TARGET_H1_CURL = 1.05    # ferry <= 1.05 x curl --http1.1 -Z --parallel-max 6
TARGET_BIG_CURL = 1.05   # 1 GiB: ferry <= 1.05 x curl

FERRY_TOOLS = ("get", "bus")
LABELS = {
    "get": "ferry get",
    "bus": "bus client",
    "curl100": "curl -Z 100",
    "aria2c": "aria2c -j16",
    "curl6": "curl --http1.1 -Z 6",
    "curl": "curl -o",
}
TIMEOUT = 900  # a run taking longer has hung (a Ferry run waits for every Completed)


# ---------------------------------------------------------------- set-up

def make_certs(folder):
    """A test CA and a server certificate for 127.0.0.1 signed by it; returns (ca, cert, key) paths."""
    conf = os.path.join(folder, "openssl.cnf")
    with open(conf, "w") as f:
        f.write("""[req]
distinguished_name = dn
prompt = no
[dn]
CN = placeholder
[ca_ext]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[server_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
""")
    ca_key, ca = os.path.join(folder, "ca.key"), os.path.join(folder, "ca.pem")
    key, csr, cert = (os.path.join(folder, n) for n in ("server.key", "server.csr", "server.pem"))
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    steps = [
        ["openssl", "req", "-config", conf, "-x509", *ec, "-keyout", ca_key, "-out", ca, "-days", "2",
         "-subj", "/CN=Ferry bench test CA", "-extensions", "ca_ext"],
        ["openssl", "req", "-config", conf, "-new", *ec, "-keyout", key, "-out", csr, "-subj", "/CN=127.0.0.1"],
        ["openssl", "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-set_serial", "2",
         "-days", "2", "-out", cert, "-extfile", conf, "-extensions", "server_ext"],
    ]
    for argv in steps:
        out = subprocess.run(argv, capture_output=True, text=True)
        if out.returncode != 0:
            raise BenchError(f"{' '.join(argv[:3])} failed: {out.stderr.strip()[-500:]}")
    return ca, cert, key


def start_tls_nginx(ctx, started, folder, root, alias_dir, cert, key, port_h2, port_h1):
    """nginx with TLS on two ports of 127.0.0.1: HTTP/2 (and 1.1) on `port_h2`, HTTP/1.1
    only on `port_h1`. /NAME from `root`; /batch/NAME from `alias_dir`. Added to `started`
    as soon as it runs (stopped by the suite's clean-up even if it never answers)."""
    temp_paths = "\n".join(f"    {m}_temp_path {folder}/{m}_temp;" for m in ("proxy", "fastcgi", "uwsgi", "scgi")
                           if not h._nginx_without(m))
    user = "user root root;\n" if os.geteuid() == 0 else ""
    locations = f"""        root {root};
        location / {{ }}
        location /batch/ {{ alias {alias_dir}/; }}"""
    conf = f"""{user}worker_processes 1;
pid {folder}/nginx.pid;
error_log {folder}/nginx-error.log warn;
events {{ worker_connections 4096; }}
http {{
    log_format proto '$server_port $server_protocol $connection $status';
    access_log {folder}/access.log proto;
    client_body_temp_path {folder}/body_temp;
{temp_paths}
    sendfile on;
    tcp_nopush on;
    keepalive_requests 100000;
    default_type application/octet-stream;
    ssl_certificate {cert};
    ssl_certificate_key {key};
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_session_cache shared:latency:10m;
    server {{
        listen 127.0.0.1:{port_h2} ssl http2 backlog=4096;
{locations}
    }}
    server {{
        listen 127.0.0.1:{port_h1} ssl backlog=4096;
{locations}
    }}
}}
"""
    conf_path = os.path.join(folder, "nginx.conf")
    with open(conf_path, "w") as f:
        f.write(conf)
    errlog = os.path.join(folder, "nginx-error.log")
    with open(os.path.join(folder, "nginx.out"), "wb") as out:
        proc = ctx.children.start("nginx-latency", ["nginx", "-p", folder, "-c", conf_path, "-e", errlog,
                                                    "-g", "daemon off;"], stdout=out, stderr=subprocess.STDOUT)
    started.append(proc)
    for port in (port_h2, port_h1):
        h.wait_until("nginx (TLS)", lambda: _listening(port), proc, 10, errlog)
    return proc


def _listening(port):
    import socket
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def start_proxy(ctx, started, folder, name, target_port, rtt_ms):
    """A delay proxy in its own process, added to `started`; returns (Popen, port)."""
    log_path = os.path.join(folder, f"proxy-{name}.log")
    with open(log_path, "wb") as out:
        proc = ctx.children.start(f"delay-proxy-{name}", [
            sys.executable, os.path.join(h.HERE, "delay_proxy.py"), "--to", str(target_port),
            "--rtt-ms", str(rtt_ms)], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    started.append(proc)
    port = []

    def ready():
        with open(log_path) as f:
            for line in f:
                if line.startswith("listening on 127.0.0.1:"):
                    port.append(int(line.rsplit(":", 1)[1]))
                    return True
        return False
    h.wait_until(f"delay proxy {name}", ready, proc, 10, log_path)
    return proc, port[0]


class AccessLog:
    """The requests nginx logged since the last reading: count, protocols, connections."""

    def __init__(self, path):
        self.path, self.offset = path, 0

    def mark(self):
        self.offset = os.path.getsize(self.path) if os.path.exists(self.path) else 0

    def since_mark(self):
        if not os.path.exists(self.path):
            return {"requests": 0, "connections": 0, "protocols": {}, "not_200": 0}
        with open(self.path) as f:
            f.seek(self.offset)
            lines = f.read().splitlines()
        protocols, conns, bad = {}, set(), 0
        for line in lines:
            parts = line.split()
            if len(parts) != 4:
                continue
            _, proto, conn, status = parts
            protocols[proto] = protocols.get(proto, 0) + 1
            conns.add(conn)
            bad += status != "200"
        return {"requests": len(lines), "connections": len(conns), "protocols": protocols, "not_200": bad}


def run_timed(argv, env=None, timeout=TIMEOUT, err_path=None):
    """Runs argv to completion (killed after `timeout` s); returns (exit code, wall s, CPU s)."""
    err = open(err_path, "wb") if err_path else subprocess.DEVNULL
    try:
        code, wall, user, sys_ = h.timed_run(argv, env=env, stderr=err, timeout=timeout)
    finally:
        if err_path:
            err.close()
    if wall >= timeout:
        raise BenchError(f"{argv[0]} did not finish within {timeout} s")
    return code, wall, user + sys_


def _last_line(text):
    lines = [l for l in text.strip().splitlines() if l.strip()]
    return lines[-1][:200] if lines else ""


def _all_zero(path):
    zero = bytes(8 * h.MIB)
    with open(path, "rb") as f:
        while True:
            chunk = f.read(len(zero))
            if not chunk:
                return True
            if chunk != zero[:len(chunk)]:
                return False


# ---------------------------------------------------------------- the suite

def run(ctx, suite):
    args = ctx.args
    quick = ctx.quick
    # latency_files and latency_big_mib: smaller still, for the benchmark's own tests.
    count = getattr(args, "latency_files", None) or (200 if quick else 1000)
    big_mib = getattr(args, "latency_big_mib", None) or (256 if quick else 1024)
    runs = 2 if quick else args.runs
    warmup = 0 if quick else getattr(args, "warmup", 1)
    rtt_ms = getattr(args, "rtt_ms", 40)
    folder = os.path.join(ctx.tmp, "latency")
    dest_root = os.path.join(h.OUT_DIR, "latency-dest")
    os.makedirs(folder, exist_ok=True)
    started = []  # what this suite started (nginx, proxies, ferryd, the bus client), ended in reverse order
    try:
        _run(ctx, suite, folder, dest_root, started, count, big_mib, runs, warmup, rtt_ms)
    finally:
        for proc in reversed(started):
            if isinstance(proc, h.Ferryd):
                proc.stop()
            elif isinstance(proc, subprocess.Popen):
                ctx.children.stop(proc)
            else:
                proc.close()  # the bus connection
        shutil.rmtree(dest_root, ignore_errors=True)
        if getattr(args, "keep", False):
            shutil.rmtree(os.path.join(folder, "www"), ignore_errors=True)  # the 1 GiB file
        else:
            shutil.rmtree(folder, ignore_errors=True)


def _run(ctx, suite, folder, dest_root, started, count, big_mib, runs, warmup, rtt_ms):
    for tool in ("openssl", "nginx", "curl", "aria2c"):
        if not shutil.which(tool):
            raise BenchError(f"{tool} not found")
    ca, cert, key = make_certs(folder)

    dirname, all_names = h.ensure_small_files(1000, 100 * h.KIB)  # the batch suite's files
    names = all_names[:count]
    src_dir = os.path.join(h.OUT_DIR, dirname)
    www = os.path.join(folder, "www")
    os.makedirs(www)
    big_name = f"zero-{big_mib}MiB.bin"
    big_path = os.path.join(www, big_name)
    with open(big_path, "wb") as f:  # sparse: no disk used, read as zeros
        f.truncate(big_mib * h.MIB)
    big_size = big_mib * h.MIB

    port_h2, port_h1 = h.free_port(), h.free_port()
    while port_h1 == port_h2:
        port_h1 = h.free_port()
    start_tls_nginx(ctx, started, folder, www, src_dir, cert, key, port_h2, port_h1)
    access = AccessLog(os.path.join(folder, "access.log"))
    proxy_h2, via_h2 = start_proxy(ctx, started, folder, "h2", port_h2, rtt_ms)
    proxy_h1, via_h1 = start_proxy(ctx, started, folder, "h1", port_h1, rtt_ms)

    def urls_of(port):
        return [f"https://127.0.0.1:{port}/batch/{n}" for n in names]
    urls = {"h2": urls_of(via_h2), "h1": urls_of(via_h1)}
    big_url = f"https://127.0.0.1:{via_h2}/{big_name}"
    url_file = os.path.join(folder, "urls-h2.txt")
    with open(url_file, "w") as f:
        f.write("\n".join(urls["h2"]) + "\n")

    # curl must speak h2 to the h2 server and HTTP/1.1 to the other, through the proxies.
    versions = {}
    for group, expected in (("h2", "2"), ("h1", "1.1")):
        out = subprocess.run(["curl", "-s", "-f", "--cacert", ca, "-o", "/dev/null", "-w", "%{http_version}",
                              urls[group][0]], capture_output=True, text=True, timeout=60)
        versions[group] = out.stdout.strip()
        if out.returncode != 0 or versions[group] != expected:
            raise BenchError(f"curl against the {group} server: exit {out.returncode}, HTTP version "
                             f"'{versions[group]}' (expected {expected}) {out.stderr.strip()[-300:]}")
    t0 = time.perf_counter()
    subprocess.run(["curl", "-s", "-f", "--cacert", ca, "-o", "/dev/null", urls["h1"][0]], timeout=60)
    one_request = time.perf_counter() - t0
    suite.note(f"{count} files of 100 KiB and {big_mib} MiB at {rtt_ms:g} ms RTT, {runs} rounds (+{warmup} warm-up); "
               f"curl negotiates HTTP/{versions['h2']} and HTTP/{versions['h1']}; one HTTPS request "
               f"with a new connection takes {one_request * 1000:.0f} ms")
    h.warm_page_cache(src_dir)
    h.warm_page_cache(big_path)

    ferryd = h.Ferryd(ctx, "latency", env={"CURL_CA_BUNDLE": ca}).start()
    started.append(ferryd)
    counter = h.SignalCounter()
    conn = ctx.connect(on_signal=counter)
    started.append(conn)
    ferryd.wait_answering(conn)
    conn.add_match(h.match_rule("Completed"))
    session = h.open_session(conn, "org.ferry.bench.latency")
    ferry_err = os.path.join(folder, "ferry.err")

    def run_get(argv):
        c0 = ferryd.cpu()
        code, wall, cpu = run_timed([ctx.ferry_exe, *argv], env=ctx.env, err_path=ferry_err)
        if code != 0:
            with open(ferry_err, errors="replace") as f:
                raise BenchError(f"ferry get exited {code}: {_last_line(f.read())}")
        return {"wall": wall, "cpu_client": cpu, "cpu_daemon": ferryd.cpu() - c0}

    def run_bus(group, dest):
        counter.reset()
        opts = h.download_options(destination=dest)
        c0 = ferryd.cpu()
        t0 = time.perf_counter()
        serials = [conn.send_call(BUS_NAME, session, SESSION, "Download", "sa{sv}", [u, opts]) for u in urls[group]]
        paths = [conn.wait_reply(s, 120).check()[0] for s in serials]
        conn.wait_until(lambda: all(p in counter.completed for p in paths), TIMEOUT, "every Completed")
        wall = max(counter.completed[p][0] for p in paths) - t0
        failed = [counter.completed[p] for p in paths if counter.completed[p][1]]
        if failed:
            raise BenchError(f"{len(failed)} of {len(paths)} bus downloads failed: {failed[0][1]}: {failed[0][2]}")
        return {"wall": wall, "cpu_client": 0.0, "cpu_daemon": ferryd.cpu() - c0}

    def run_peer(argv):
        code, wall, cpu = run_timed(argv, err_path=os.path.join(folder, "peer.err"))
        if code != 0:
            with open(os.path.join(folder, "peer.err"), errors="replace") as f:
                raise BenchError(f"{argv[0]} exited {code}: {_last_line(f.read())}")
        return {"wall": wall, "cpu_client": cpu, "cpu_daemon": 0.0}

    def batch_runner(group, tool):
        def curl(parallel, *extra):
            return lambda d: run_peer(["curl", "-s", "-f", "--cacert", ca, *extra, "-Z", "--parallel-max", parallel,
                                       "--output-dir", d, "--remote-name-all", *urls[group]])
        return {
            "get": lambda d: run_get(["get", *urls[group], "-d", d, "--wait"]),
            "bus": lambda d: run_bus(group, d),
            "curl100": curl("100"),
            "curl6": curl("6", "--http1.1"),
            "aria2c": lambda d: run_peer(["aria2c", "-j16", f"--ca-certificate={ca}", "-i", url_file, "-d", d, "-q",
                                          "--console-log-level=error", "--summary-interval=0"]),
        }[tool]

    groups = [
        ("h2", ("get", "bus", "curl100", "aria2c", "curl6")),
        ("h1", ("get", "bus", "curl6")),
        ("big", ("get", "curl")),
    ]
    every_run = (runs + warmup) * 8 * count * 100 * h.KIB
    h.empty_dir(dest_root)
    keep_runs = shutil.disk_usage(dest_root).free > 2 * every_run + 2 * big_size + 4 * h.GIB
    if not keep_runs:
        suite.note("not enough free disk to keep every run's files: one folder, emptied before each run")
    failed = {}     # (group, tool) -> error, for Ferry's tools (not run again)
    results = []
    compared = set()
    for i in range(1 - warmup, runs + 1):
        for group, tools in groups:
            for tool in tools:
                if (group, tool) in failed:
                    continue
                dest = os.path.join(dest_root, f"run-{i + warmup}-{group}-{tool}" if keep_runs else "files")
                h.empty_dir(dest)
                os.sync()  # the last run's dirty pages are not this run's cost
                access.mark()
                proxy_cpu0 = h.proc_cpu_seconds(proxy_h2.pid) + h.proc_cpu_seconds(proxy_h1.pid)
                try:
                    if group == "big":
                        out = os.path.join(dest, big_name)
                        r = (run_get(["get", big_url, "-o", out, "--wait"]) if tool == "get" else
                             run_peer(["curl", "-s", "-f", "--cacert", ca, "-o", out, big_url]))
                        problem = None
                        if not os.path.exists(out) or os.path.getsize(out) != big_size:
                            problem = f"{out} is missing or has the wrong size"
                        elif (group, tool) not in compared and not _all_zero(out):
                            problem = f"{out} differs from the source"
                        if os.path.exists(out):
                            os.unlink(out)
                    else:
                        r = batch_runner(group, tool)(dest)
                        problem = suite_batch._check_files(dest, src_dir, names, (group, tool) not in compared)
                    if problem:
                        raise BenchError(f"{group} {tool} run {i}: {problem}")
                except BenchError as e:
                    if tool not in FERRY_TOOLS:
                        raise
                    failed[(group, tool)] = str(e)
                    suite.note(f"{group} {LABELS[tool]}: failed, not run again: {e}")
                    continue
                finally:
                    if tool in FERRY_TOOLS:
                        h.remove_all_transfers(conn)  # untimed: keep the list short
                compared.add((group, tool))
                served = access.since_mark()
                r.update(group=group, tool=tool, run=i, served=served,
                         cpu_proxy=h.proc_cpu_seconds(proxy_h2.pid) + h.proc_cpu_seconds(proxy_h1.pid) - proxy_cpu0)
                h.log(f"latency {'run ' + str(i) if i >= 1 else 'warm-up'} {group} {tool}: {r['wall']:.3f} s wall, "
                      f"cpu {r['cpu_client']:.2f} s (ferryd {r['cpu_daemon']:.2f}, proxy {r['cpu_proxy']:.2f}); "
                      f"{served['requests']} requests over {served['connections']} connections "
                      f"({', '.join(f'{k} x{v}' for k, v in sorted(served['protocols'].items()))})")
                if i >= 1:
                    results.append(r)

    _report(suite, results, failed, count, big_mib, rtt_ms)


def _report(suite, results, failed, count, big_mib, rtt_ms):
    by = {}
    for r in results:
        by.setdefault((r["group"], r["tool"]), []).append(r)
    med = {k: h.median([r["wall"] for r in v]) for k, v in by.items()}
    suite.data = {"files": count, "big_mib": big_mib, "rtt_ms": rtt_ms, "runs": results,
                  "failed": {f"{g} {t}": e for (g, t), e in failed.items()},
                  "median_wall": {f"{g} {t}": v for (g, t), v in med.items()}}

    def paired(a, b):
        return h.median([x["wall"] / max(y["wall"], 1e-3) for x, y in zip(by[a], by[b])])

    def compare(group, ferry_tool, peer, title, target, faster=False):
        """A row: Ferry's tool against a peer; `faster`: the target is peer / ferry >= target."""
        label = f"{title}: {LABELS[ferry_tool]} / {LABELS[peer]}"
        tgt = f"<= {1 / target:.2f} ({target:g}x faster)" if faster else f"<= {target:.2f}"
        peer_s = f"{LABELS[peer].split()[0]} {h.fmt_s(med.get((group, peer)))}"
        if (group, ferry_tool) in failed:
            error = failed[(group, ferry_tool)]  # its end says why (the note has all of it)
            suite.row(label, "failed: " + (error if len(error) <= 90 else "…" + error[-89:]), peer_s, None, tgt, False)
            return
        ratio = paired((group, ferry_tool), (group, peer))
        met = ratio <= 1 / target if faster else ratio <= target
        suite.row(label, h.fmt_s(med[(group, ferry_tool)]), peer_s, ratio, tgt, met)

    rtt = f"{rtt_ms:g} ms"
    for tool in FERRY_TOOLS:
        compare("h2", tool, "curl100", f"{rtt} h2 {count} x 100 KiB", TARGET_H2_CURL)
    for tool in FERRY_TOOLS:
        compare("h2", tool, "aria2c", f"{rtt} h2 {count} x 100 KiB", TARGET_H2_ARIA2, faster=True)
    suite.row(f"{rtt} h2 server {count} x 100 KiB (info): {LABELS['curl6']} / {LABELS['curl100']}",
              h.fmt_s(med[("h2", "curl6")]), f"curl {h.fmt_s(med[('h2', 'curl100')])}",
              paired(("h2", "curl6"), ("h2", "curl100")), "", None)
    for tool in FERRY_TOOLS:
        compare("h1", tool, "curl6", f"{rtt} HTTP/1.1 {count} x 100 KiB", TARGET_H1_CURL)
    compare("big", "get", "curl", f"{rtt} h2 {big_mib} MiB", TARGET_BIG_CURL)

    # How each tool used the servers: connections and protocol per run (the median run).
    for group, title in (("h2", "h2 server"), ("h1", "HTTP/1.1 server"), ("big", f"{big_mib} MiB")):
        parts = []
        for (g, tool), rs in by.items():
            if g != group:
                continue
            conns = h.median([r["served"]["connections"] for r in rs])
            protos = "/".join(sorted({p for r in rs for p in r["served"]["protocols"]}))
            parts.append(f"{tool} {conns:g} ({protos})")
        suite.row(f"{title}: connections per run (protocol)", "; ".join(parts), "", None, "", None)
