"""single (issue 7, kept from the first benchmark): one 1 GiB file, ferry against curl.

`curl -s -o OUT URL` and `ferry get URL -o OUT --wait`, alternating, one untimed
warm-up each. Wall from spawn to exit; CPU of curl (wait4 rusage) against the ferry
client (wait4) plus ferryd's utime+stime delta over the run (/proc/PID/stat). Ratios
are medians of per-round ratios (run i of ferry over run i of curl), so slow drift
(heat, background load) cancels out.
"""

import os

import harness as h
from harness import BenchError

TARGET_WALL = 1.00
TARGET_CPU = 1.10


def check_output(path, size, digest, verify_sum):
    """Size always; sha256 only when asked (outside the timing)."""
    if not os.path.exists(path):
        return "no output file"
    got = os.path.getsize(path)
    if got != size:
        return f"size {got}, expected {size}"
    if verify_sum and h.sha256_file(path) != digest:
        return "sha256 mismatch"
    return None


def run(ctx, suite):
    size_mib = 256 if ctx.quick else ctx.args.size_mib
    runs = 2 if ctx.quick else ctx.args.runs
    warmup = 0 if ctx.quick else ctx.args.warmup
    name, data_path, digest = h.ensure_data_file(size_mib * h.MIB)
    size = size_mib * h.MIB
    url = ctx.url(name)
    out = os.path.join(h.OUT_DIR, "download.bin")
    ferryd = h.Ferryd(ctx, "single").start()
    conn = ctx.connect()
    ferryd.wait_answering(conn)
    h.warm_page_cache(data_path)

    runs_out, verified = [], set()
    try:
        for i in range(1 - warmup, runs + 1):
            for tool in ("curl", "ferry"):
                if os.path.exists(out):
                    os.unlink(out)
                os.sync()  # the last run's dirty pages are not this run's cost
                if tool == "curl":
                    code, wall, user, sys_ = h.timed_run(["curl", "-s", "-f", "-o", out, url])
                    if code != 0:
                        raise BenchError(f"curl exited {code}")
                    r = {"wall": wall, "cpu_client": user + sys_, "cpu_daemon": 0.0}
                else:
                    d0 = ferryd.cpu()
                    _, wall, user, sys_, ids = ctx.ferry("get", url, "-o", out, "--wait")
                    r = {"wall": wall, "cpu_client": user + sys_, "cpu_daemon": ferryd.cpu() - d0}
                    h.remove_all_transfers(conn)  # untimed: keep the list short
                problem = check_output(out, size, digest, tool not in verified)
                if problem:
                    raise BenchError(f"{tool} run {i}: {problem}")
                verified.add(tool)
                r.update(tool=tool, run=i, cpu=r["cpu_client"] + r["cpu_daemon"])
                h.log(f"single {'run ' + str(i) if i >= 1 else 'warm-up'} {tool}: "
                      f"{r['wall']:.3f} s wall, {r['cpu']:.3f} s cpu")
                if i >= 1:
                    runs_out.append(r)
    finally:
        if os.path.exists(out):
            os.unlink(out)
        conn.close()
        ferryd.stop()

    curl = [r for r in runs_out if r["tool"] == "curl"]
    ferry = [r for r in runs_out if r["tool"] == "ferry"]
    wall_ratio = h.median([f["wall"] / c["wall"] for c, f in zip(curl, ferry)])
    cpu_ratio = h.median([f["cpu"] / max(c["cpu"], 1e-3) for c, f in zip(curl, ferry)])
    suite.data = {"size_bytes": size, "runs": runs_out, "wall_ratio": wall_ratio, "cpu_ratio": cpu_ratio}
    mw = lambda rs, k: h.median([r[k] for r in rs])
    suite.row(f"{size_mib} MiB wall: ferry get / curl -o", h.fmt_s(mw(ferry, "wall")),
              f"curl {h.fmt_s(mw(curl, 'wall'))}", wall_ratio, f"<= {TARGET_WALL:.2f}", wall_ratio <= TARGET_WALL)
    suite.row(f"{size_mib} MiB CPU: (ferryd + ferry) / curl", h.fmt_s(mw(ferry, "cpu")),
              f"curl {h.fmt_s(mw(curl, 'cpu'))}", cpu_ratio, f"<= {TARGET_CPU:.2f}", cpu_ratio <= TARGET_CPU)
