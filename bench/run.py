#!/usr/bin/env python3
"""Ferry's benchmarks (issues 7 and 8): one command, every figure a ratio against a
peer measured in the same run, or an absolute figure against its target.

nginx serves files on 127.0.0.1; a private dbus-daemon carries a release ferryd (a new
one, with its own state directory, for each suite). Suites:

  batch     1,000 x 100 KiB: a bus client and `ferry get` against curl --parallel and aria2c -j6
  queued    10,000 paused transfers: RSS, Download latency, ferry ls, restart to answering
  running   100 transfers at once: Progress signals per transfer, ferryd and dbus-daemon CPU
  idle      wakeups per second of an idle ferryd
  single    one 1 GiB file: ferry get against curl -o
  segments  256 MiB at 8 MiB/s per connection: connections=8 against aria2c -x8 and
            connections=1; 1 GiB unthrottled: connections=4 against connections=1
  mirrors   256 MiB from 4 mirror paths with pieces: connections=4 against aria2c -x4 -s4
            given the same URLs
  upload    1 GiB PUT: Session.Upload against curl -T, with ferryd's peak RSS
  latency   HTTPS through a proxy adding 40 ms RTT: 1,000 x 100 KiB over h2 against curl -Z 100
            and aria2c -j16, over HTTP/1.1 against curl --http1.1 -Z 6; 1 GiB against curl
  metalink  256 MiB from 4 mirror paths by a .meta4 (4 MiB sha-256 pieces): ferry get
            --metalink -x4 against aria2c -x4 with the same document
  dedupe    1,000 downloads of 10 URLs x 100 KiB: server GETs and wall with dedupe on and off

Python 3 standard library only; no root needed. See bench/README.md.
"""

import argparse
import datetime
import json
import os
import platform
import shutil
import signal
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ beside the sources

import harness as h
import wire
import suite_batch
import suite_dedupe
import suite_idle
import suite_latency
import suite_metalink
import suite_mirrors
import suite_queued
import suite_running
import suite_segments
import suite_single
import suite_upload

SUITES = {
    "batch": suite_batch,
    "queued": suite_queued,
    "running": suite_running,
    "idle": suite_idle,
    "single": suite_single,
    "segments": suite_segments,
    "mirrors": suite_mirrors,
    "upload": suite_upload,
    "latency": suite_latency,
    "metalink": suite_metalink,
    "dedupe": suite_dedupe,
}


def parse_args():
    ap = argparse.ArgumentParser(description="Ferry's benchmarks against curl and aria2c over loopback.")
    ap.add_argument("--suite", default="all",
                    help=f"comma-separated suites to run (default all: {','.join(SUITES)})")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: smaller counts and files, 2 rounds, no warm-up (figures not comparable)")
    ap.add_argument("--runs", type=int, default=5, help="alternating rounds where medians are taken (default 5)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed rounds first, batch, single and latency (default 1)")
    ap.add_argument("--batch-tools", help="batch: only these of bus,group,get,curl,aria2c (for profiling; ratios need the peers)")
    ap.add_argument("--segment-runs", type=int, default=1,
                    help="rounds of the throttled segments comparison (default 1, as issue 8 asks)")
    ap.add_argument("--size-mib", type=int, default=1024, help="size of the single and upload file (default 1024)")
    ap.add_argument("--rtt-ms", type=float, default=40,
                    help="latency: the round-trip time its delay proxies add, in ms (default 40)")
    ap.add_argument("--bin-dir", help="where ferryd and ferry are (default: swift build -c release --show-bin-path)")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir with the logs")
    args = ap.parse_args()
    names = list(SUITES) if args.suite == "all" else [s.strip() for s in args.suite.split(",") if s.strip()]
    unknown = [s for s in names if s not in SUITES]
    if unknown:
        ap.error(f"unknown suite(s) {', '.join(unknown)}; choose from {', '.join(SUITES)}")
    if args.runs < 1 or args.warmup < 0 or args.segment_runs < 1 or args.rtt_ms < 0:
        ap.error("--runs and --segment-runs must be at least 1, --warmup and --rtt-ms at least 0")
    args.suites = names
    return args


def print_table(suites):
    head = ("suite", "measure", "ferry", "peer", "ratio", "target", "")
    rows = []
    for s in suites:
        if s.error:
            rows.append((s.name, "ERROR: " + s.error.splitlines()[0][:90], "", "", "", "", "ERROR"))
        for r in s.rows:
            ratio = "" if r["ratio"] is None else f"{r['ratio']:.2f}"
            rows.append((s.name, r["what"], r["ferry"], r["peer"], ratio, r["target"], h.verdict(r["met"])))
    widths = [max(len(str(x[i])) for x in [head] + rows) for i in range(len(head))]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()
    print()
    print(line(head))
    print(line(["-" * w for w in widths]))
    for r in rows:
        print(line(r))
    print()


def main():
    args = parse_args()

    # SIGTERM and SIGHUP end the run the way Ctrl-C does: through the cleanup below.
    def interrupted(signum, _frame):
        raise KeyboardInterrupt
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, interrupted)

    os.makedirs(h.OUT_DIR, exist_ok=True)
    children = h.Children()
    tmp = tempfile.mkdtemp(prefix="ferry-bench-")
    done = []
    started = time.monotonic()
    try:
        for tool in ("nginx", "curl", "aria2c", "dbus-daemon"):
            if not shutil.which(tool):
                raise h.BenchError(f"{tool} not found (run `make deps`)")
        bin_dir = args.bin_dir or h.release_bin_dir()
        for exe in ("ferryd", "ferry"):
            if not os.access(os.path.join(bin_dir, exe), os.X_OK):
                raise h.BenchError(f"{bin_dir}/{exe} missing (run `make build`)")
        port = h.free_port()
        nginx_proc = h.start_nginx(children, tmp, h.OUT_DIR, port)
        address, bus_proc = h.start_bus(children, tmp)
        ctx = h.Context(args, tmp, children, bin_dir, address, bus_proc, port)
        ctx.nginx_proc = nginx_proc
        h.log(f"nginx on 127.0.0.1:{port}, bus {address}, suites: {', '.join(args.suites)}"
              + (" (quick)" if args.quick else ""))

        for name in args.suites:
            suite = h.Suite(name)
            t0 = time.monotonic()
            h.log(f"--- {name}")
            try:
                SUITES[name].run(ctx, suite)
            except (h.BenchError, wire.DBusError, TimeoutError, OSError) as e:
                suite.error = str(e)
                print(f"bench: {name}: error: {e}", file=sys.stderr)
            finally:
                # A suite that failed half-way may have left its ferryd running.
                for pname, proc in list(children.procs):
                    if pname.startswith("ferryd-"):
                        children.stop(proc)
            suite.data["seconds"] = time.monotonic() - t0
            done.append(suite)
            print_table([suite])
            with open(os.path.join(h.OUT_DIR, f"result-{name}.json"), "w") as f:
                json.dump(suite.as_json(), f, indent=2)
                f.write("\n")
    except h.BenchError as e:
        print(f"bench: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\nbench: interrupted", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # let the cleanup finish
        children.stop_all()
        if args.keep:
            h.log(f"logs kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)

    print(f"Summary ({time.monotonic() - started:.0f} s{', quick mode' if args.quick else ''}):")
    print_table(done)
    result = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": {"machine": platform.machine(), "kernel": platform.release(), "cpus": os.cpu_count(),
                 "loadavg_at_end": os.getloadavg()},
        "quick": args.quick, "runs": args.runs,
        "suites": [s.as_json() for s in done],
    }
    path = os.path.join(h.OUT_DIR, "result.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    h.log(f"wrote {os.path.relpath(path, h.REPO)}")
    if any(s.error for s in done):
        return 2
    return 1 if any(r["met"] is False for s in done for r in s.rows) else 0


if __name__ == "__main__":
    sys.exit(main())
