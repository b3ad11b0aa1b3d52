"""segments (issue 8): one file over several connections.

1. Throttled: 256 MiB from nginx's `/slow/` location (`limit_rate 8m`, per connection):
   Ferry `connections=8`, `aria2c -x8 -s8 -k1M`, Ferry `connections=1`; one run each,
   alternating in that order (issue 8: "one run, alternating"; `--segment-runs` for more).
2. Unthrottled: 1 GiB, Ferry `connections=4` against `connections=1`, medians of
   `--runs` alternating rounds; `aria2c -x4` against `aria2c -x1` in the same rounds, for
   reference: what four streams into one file cost a peer on this machine.

Ferry is driven over the bus (`Download` with the `connections` option, then wait for
`Completed`), so the suite does not depend on the CLI's flags. Every output is checked
against the source's sha256 outside the timing: a file stitched from wrong ranges fails
the suite.
"""

import os

import harness as h
import wire

TARGET_VS_ARIA2 = 1.0     # connections=8 wall <= 1.0 x aria2c -x8 -s8 -k1M
TARGET_SPEEDUP = 6.0      # and >= 6x faster than connections=1
TARGET_UNTHROTTLED = 1.05  # connections=4 <= 1.05 x connections=1


def run(ctx, suite):
    slow_mib = 64 if ctx.quick else 256
    fast_mib = 256 if ctx.quick else 1024
    slow_runs = 1 if ctx.quick else ctx.args.segment_runs
    fast_runs = 2 if ctx.quick else ctx.args.runs
    slow_name, slow_path, slow_sum = h.ensure_data_file(slow_mib * h.MIB)
    fast_name, fast_path, fast_sum = h.ensure_data_file(fast_mib * h.MIB)
    out_dir = os.path.join(h.OUT_DIR, "segments-dest")
    h.empty_dir(out_dir)

    ferryd, counter, conn = h.start_listening(ctx, "segments")
    # A transfer's connections count against the session's per-host limit (default 6):
    # allow the 8 that aria2c -x8 gets.
    session = h.open_session(conn, "org.ferry.bench.segments",
                             {"max-connections-per-host": wire.Variant("u", 16)})

    def ferry(url, connections):
        out = os.path.join(out_dir, "ferry.bin")
        opts = h.download_options(destination=out, connections=connections, overwrite=True)
        return h.bus_download_wall(conn, counter, session, url, opts, f"ferry connections={connections}"), out

    def aria2(url, connections=8):
        return h.aria2_wall(out_dir, connections, [url])

    def timed(what, fn, digest):
        return h.checked_wall("segments", what, fn, digest)

    with h.bus_rounds(ferryd, conn, out_dir, "a segmented download"):
        h.warm_page_cache(slow_path)
        slow_url = ctx.url(f"slow/{slow_name}")
        slow = {"ferry x8": [], "aria2c x8": [], "ferry x1": []}
        for _ in range(slow_runs):
            slow["ferry x8"].append(timed(f"{slow_mib} MiB at 8 MiB/s/conn, ferry connections=8",
                                          lambda: ferry(slow_url, 8), slow_sum))
            slow["aria2c x8"].append(timed(f"{slow_mib} MiB at 8 MiB/s/conn, aria2c -x8 -s8 -k1M",
                                           lambda: aria2(slow_url), slow_sum))
            slow["ferry x1"].append(timed(f"{slow_mib} MiB at 8 MiB/s/conn, ferry connections=1",
                                          lambda: ferry(slow_url, 1), slow_sum))

        h.warm_page_cache(fast_path)
        fast_url = ctx.url(fast_name)
        fast = {"x4": [], "x1": [], "aria2c x4": [], "aria2c x1": []}
        for _ in range(fast_runs):
            fast["x4"].append(timed(f"{fast_mib} MiB unthrottled, connections=4", lambda: ferry(fast_url, 4), fast_sum))
            fast["x1"].append(timed(f"{fast_mib} MiB unthrottled, connections=1", lambda: ferry(fast_url, 1), fast_sum))
            fast["aria2c x4"].append(timed(f"{fast_mib} MiB unthrottled, aria2c -x4 -s4 -k1M",
                                           lambda: aria2(fast_url, 4), fast_sum))
            fast["aria2c x1"].append(timed(f"{fast_mib} MiB unthrottled, aria2c -x1 -s1",
                                           lambda: aria2(fast_url, 1), fast_sum))

    vs_aria2 = h.median([f / a for f, a in zip(slow["ferry x8"], slow["aria2c x8"])])
    speedup = h.median([one / eight for one, eight in zip(slow["ferry x1"], slow["ferry x8"])])
    unthrottled = h.median([four / one for four, one in zip(fast["x4"], fast["x1"])])
    aria2_unthrottled = h.median([four / one for four, one in zip(fast["aria2c x4"], fast["aria2c x1"])])
    suite.data = {"throttled_bytes": slow_mib * h.MIB, "throttled_s": slow,
                  "unthrottled_bytes": fast_mib * h.MIB, "unthrottled_s": fast,
                  "ratios": {"x8_vs_aria2": vs_aria2, "x1_over_x8": speedup, "x4_vs_x1": unthrottled,
                             "aria2c_x4_vs_x1": aria2_unthrottled}}
    m = h.median
    suite.row(f"{slow_mib} MiB at 8 MiB/s/conn: connections=8 / aria2c -x8", h.fmt_s(m(slow["ferry x8"])),
              f"aria2c {h.fmt_s(m(slow['aria2c x8']))}", vs_aria2, f"<= {TARGET_VS_ARIA2}", vs_aria2 <= TARGET_VS_ARIA2)
    suite.row(f"{slow_mib} MiB at 8 MiB/s/conn: speed-up of connections=8 over 1",
              f"{speedup:.2f}x", f"x1 {h.fmt_s(m(slow['ferry x1']))}", speedup, f">= {TARGET_SPEEDUP:g}x",
              speedup >= TARGET_SPEEDUP)
    suite.row(f"{fast_mib} MiB unthrottled: connections=4 / connections=1", h.fmt_s(m(fast["x4"])),
              f"x1 {h.fmt_s(m(fast['x1']))}", unthrottled, f"<= {TARGET_UNTHROTTLED}", unthrottled <= TARGET_UNTHROTTLED)
    suite.row(f"{fast_mib} MiB unthrottled, same rounds: aria2c -x4 / aria2c -x1 (reference)",
              h.fmt_s(m(fast["aria2c x4"])), f"x1 {h.fmt_s(m(fast['aria2c x1']))}", aria2_unthrottled, "", None)
