"""queued (issue 7): 10,000 transfers created with `start=false`.

- ferryd's RSS (VmRSS) at start with nothing, after creating them, after a restart;
- the latency of each `Download` call (one at a time: send, wait for the reply);
- `ferry ls` and `ferry ls --json` wall time (alternating), and one
  `GetManagedObjects` round trip for comparison;
- restart to answering: spawn of ferryd until a `ListTransfers` call answers.
"""

import time

import harness as h
from harness import BUS_NAME, MANAGER, MANAGER_PATH, OBJECT_MANAGER, SESSION, BenchError

TARGET_RSS_MIB = 64
TARGET_P99_S = 0.005
TARGET_LS_S = 0.5
TARGET_RESTART_S = 2.0
SETTLE_S = 1.0  # let allocations settle before reading RSS


def run(ctx, suite):
    count = 1000 if ctx.quick else 10000
    ls_runs = 2 if ctx.quick else ctx.args.runs
    restarts = 1 if ctx.quick else 3

    ferryd = h.Ferryd(ctx, "queued").start()
    conn = ctx.connect()
    ferryd.wait_answering(conn)
    time.sleep(SETTLE_S)
    rss_empty = ferryd.rss_mib()
    mem = {"empty": h.memory_breakdown_mib(ferryd.pid)}
    session = h.open_session(conn, "org.ferry.bench.queued")
    dest = h.OUT_DIR  # never written: the transfers stay paused
    opts = h.download_options(destination=dest, start=False)

    latencies = []
    t_all = time.perf_counter()
    for i in range(count):
        url = ctx.url(f"queued/{i:06d}.bin")
        t0 = time.perf_counter()
        serial = conn.send_call(BUS_NAME, session, SESSION, "Download", "sa{sv}", [url, opts])
        reply = conn.wait_reply(serial, 60)
        latencies.append(reply.received - t0)
        reply.check()
    t_all = time.perf_counter() - t_all
    time.sleep(SETTLE_S)
    rss_created = ferryd.rss_mib()
    mem["created"] = h.memory_breakdown_mib(ferryd.pid)
    suite.note(f"{count} paused transfers created in {t_all:.1f} s; RSS {rss_empty:.1f} -> {rss_created:.1f} MiB")

    ls_times, json_times = [], []
    for _ in range(ls_runs):
        _, wall, _, _, out = ctx.ferry("ls")
        if out.count("\n") < count:
            raise BenchError(f"ferry ls printed {out.count(chr(10))} lines for {count} transfers")
        ls_times.append(wall)
        _, wall, _, _, out = ctx.ferry("ls", "--json")
        json_times.append(wall)
    t0 = time.perf_counter()
    objects = conn.wait_reply(conn.send_call(BUS_NAME, MANAGER_PATH, OBJECT_MANAGER, "GetManagedObjects"), 120)
    gmo = objects.received - t0
    gmo_bytes = len(objects.body)
    # The listing the CLI reads (an addition): every transfer, a column per property.
    t0 = time.perf_counter()
    columns = conn.wait_reply(conn.send_call(BUS_NAME, MANAGER_PATH, MANAGER, "ListTransferProperties", "as", [[]]), 120)
    columns.check()
    ltp = columns.received - t0
    ltp_bytes = len(columns.body)
    h.log(f"queued: ferry ls {h.fmt_s(h.median(ls_times))}, --json {h.fmt_s(h.median(json_times))}, "
          f"GetManagedObjects {h.fmt_s(gmo)} ({gmo_bytes // 1024} KiB), "
          f"ListTransferProperties {h.fmt_s(ltp)} ({ltp_bytes // 1024} KiB)")

    restart_times, rss_restarted = [], []
    for _ in range(restarts):
        ferryd.stop()
        ferryd.start()
        restart_times.append(ferryd.wait_answering(conn))
        paths = conn.call(BUS_NAME, MANAGER_PATH, MANAGER, "ListTransfers")[0]
        if len(paths) != count:
            raise BenchError(f"after a restart ferryd lists {len(paths)} transfers, not {count}")
        time.sleep(SETTLE_S)
        rss_restarted.append(ferryd.rss_mib())
        mem["restarted"] = h.memory_breakdown_mib(ferryd.pid)
        h.log(f"queued: restart answered after {restart_times[-1]:.3f} s, RSS {rss_restarted[-1]:.1f} MiB")
    conn.close()
    ferryd.stop()

    p50, p99 = h.percentile(latencies, 50), h.percentile(latencies, 99)
    suite.data = {"transfers": count, "rss_mib": {"empty": rss_empty, "created": rss_created,
                                                  "restarted": rss_restarted},
                  "download_latency_s": {"p50": p50, "p99": p99, "max": max(latencies),
                                         "mean": sum(latencies) / len(latencies)},
                  "create_all_s": t_all, "ls_s": ls_times, "ls_json_s": json_times,
                  "get_managed_objects_s": gmo, "get_managed_objects_bytes": gmo_bytes,
                  "list_transfer_properties_s": ltp, "list_transfer_properties_bytes": ltp_bytes,
                  "restart_to_answering_s": restart_times, "memory_mib": mem}
    for when, m in mem.items():
        suite.note(f"memory {when}: " + ", ".join(f"{k} {v:.1f}" for k, v in m.items()) + " MiB")
    rss_r = max(rss_restarted)
    suite.row("ferryd RSS at start, nothing queued", f"{rss_empty:.1f} MiB", "", None, "", None)
    suite.row(f"ferryd RSS with {count} queued", f"{rss_created:.1f} MiB", "", None,
              f"<= {TARGET_RSS_MIB} MiB", rss_created <= TARGET_RSS_MIB)
    suite.row(f"ferryd RSS after a restart restores {count}", f"{rss_r:.1f} MiB", "", None,
              f"<= {TARGET_RSS_MIB} MiB", rss_r <= TARGET_RSS_MIB)
    suite.row("Download latency p50 / max", f"{h.fmt_s(p50)} / {h.fmt_s(max(latencies))}", "", None, "", None)
    suite.row("Download latency p99", h.fmt_s(p99), "", None, f"<= {h.fmt_s(TARGET_P99_S)}", p99 <= TARGET_P99_S)
    ls, lsj = h.median(ls_times), h.median(json_times)
    suite.row(f"ferry ls, {count} transfers", h.fmt_s(ls), f"ListTransferProperties {h.fmt_s(ltp)}",
              None, f"<= {TARGET_LS_S} s", ls <= TARGET_LS_S)
    suite.row(f"ferry ls --json, {count} transfers", h.fmt_s(lsj), "", None, f"<= {TARGET_LS_S} s",
              lsj <= TARGET_LS_S)
    rt = h.median(restart_times)
    suite.row("restart to answering (ListTransfers)", h.fmt_s(rt), "", None,
              f"<= {TARGET_RESTART_S} s", rt <= TARGET_RESTART_S)
