"""upload (issue 8): 1 GiB PUT to nginx on loopback (WebDAV `dav_methods PUT`).

`curl -s -f -T FILE URL` against `Session.Upload(URL, FILE, {method: PUT})` over the bus
(wall: call to `Completed`), alternating, medians of per-round ratios. During each
Ferry upload ferryd's VmRSS is sampled every 20 ms for its peak. nginx writes what it
receives to disk for both tools; the stored file is checked (size every time, sha256
once per tool, outside the timing).

While `Upload` answers `org.freedesktop.DBus.Error.NotSupported` (or any error), the
suite reports "not supported", times curl alone, and goes on.
"""

import os
import time

import harness as h
import wire
from harness import BUS_NAME, SESSION, BenchError

TARGET_WALL = 1.10
TARGET_RSS_MIB = 64


def run(ctx, suite):
    size_mib = 256 if ctx.quick else ctx.args.size_mib
    runs = 2 if ctx.quick else ctx.args.runs
    name, src, digest = h.ensure_data_file(size_mib * h.MIB)
    size = size_mib * h.MIB
    stored_dir = os.path.join(ctx.tmp, "upload")
    h.warm_page_cache(src)

    ferryd, counter, conn = h.start_listening(ctx, "upload")
    session = h.open_session(conn, "org.ferry.bench.upload")
    opts = {"method": wire.Variant("s", "PUT")}
    verified = set()

    def check_stored(tool):
        stored = os.path.join(stored_dir, f"{tool}.bin")
        if not os.path.exists(stored) or os.path.getsize(stored) != size:
            raise BenchError(f"{tool} upload: the server stored "
                             f"{os.path.getsize(stored) if os.path.exists(stored) else 'no'} bytes, not {size}")
        if tool not in verified and h.sha256_file(stored) != digest:
            raise BenchError(f"{tool} upload: the stored file's sha256 differs from the source")
        verified.add(tool)
        os.unlink(stored)

    def curl():
        os.sync()
        code, wall, user, sys_ = h.timed_run(["curl", "-s", "-f", "-o", "/dev/null", "-T", src,
                                              ctx.url("upload/curl.bin")])
        if code != 0:
            raise BenchError(f"curl -T exited {code}")
        check_stored("curl")
        return wall

    supported, why = True, ""

    def ferry():
        nonlocal supported, why
        os.sync()
        counter.reset()
        peak = ferryd.rss_mib()
        t0 = time.perf_counter()
        reply = conn.wait_reply(conn.send_call(BUS_NAME, session, SESSION, "Upload", "ssa{sv}",
                                               [ctx.url("upload/ferry.bin"), src, opts]))
        if reply.type == wire.ERROR:
            supported, why = False, f"{reply.error_name}: {reply.args[0] if reply.args else ''}"
            return None, None
        path = reply.args[0]
        while path not in counter.completed:
            conn.pump(0.02)
            peak = max(peak, ferryd.rss_mib())
            if time.perf_counter() - t0 > 600:
                raise BenchError("the Ferry upload did not complete in 600 s")
        received, error, message = counter.completed[path]
        if error:
            raise BenchError(f"ferry upload: {error}: {message}")
        h.remove_all_transfers(conn)
        check_stored("ferry")
        return received - t0, peak

    curl_walls, ferry_walls, peaks = [], [], []
    try:
        for i in range(runs):
            curl_walls.append(curl())
            h.log(f"upload run {i + 1} curl -T: {curl_walls[-1]:.3f} s")
            if supported:
                wall, peak = ferry()
                if supported:
                    ferry_walls.append(wall)
                    peaks.append(peak)
                    h.log(f"upload run {i + 1} ferry: {wall:.3f} s, peak RSS {peak:.1f} MiB")
                else:
                    suite.note(f"Upload is not supported by this ferryd ({why}); timing curl alone")
    finally:
        conn.close()
        ferryd.stop()

    suite.data = {"size_bytes": size, "curl_s": curl_walls, "ferry_s": ferry_walls,
                  "ferryd_peak_rss_mib": peaks, "supported": supported, "refusal": why}
    label = f"{size_mib} MiB PUT: ferry Upload / curl -T"
    if not supported:
        suite.row(label, "not supported", f"curl {h.fmt_s(h.median(curl_walls))}", None,
                  f"<= {TARGET_WALL:.2f}", False)
        suite.row("ferryd peak RSS during the upload", "not supported", "", None, f"< {TARGET_RSS_MIB} MiB", False)
        return
    ratio = h.median([f / c for f, c in zip(ferry_walls, curl_walls)])
    suite.row(label, h.fmt_s(h.median(ferry_walls)), f"curl {h.fmt_s(h.median(curl_walls))}", ratio,
              f"<= {TARGET_WALL:.2f}", ratio <= TARGET_WALL)
    suite.row("ferryd peak RSS during the upload", f"{max(peaks):.1f} MiB", "", None,
              f"< {TARGET_RSS_MIB} MiB", max(peaks) < TARGET_RSS_MIB)
