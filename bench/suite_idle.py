"""idle (issue 7): wakeups per second of a ferryd with nothing to do.

A wakeup is counted as a context switch of any of ferryd's threads (voluntary and
involuntary, from /proc/PID/task/*/status, polled so that threads which come and go
are counted too): a thread that wakes and sleeps again switches at least once.
Three daemons, each measured over the same window after a quiet second:

- fresh: just started, nothing stored, `--no-idle-exit`;
- after work: a small batch downloaded, its AllFinished seen, the transfers removed;
- idle-exit: just started with the default idle exit (60 s), as bus activation runs it.
  Its idle check is a timer by design, so this row is for information.
"""

import os
import time

import harness as h
from harness import BUS_NAME, SESSION

TARGET_WAKEUPS = 0.0


def _measure(ferryd, window, quiet=1.0):
    time.sleep(quiet)
    cs = h.ContextSwitches(ferryd.pid)
    end = time.monotonic() + window
    t0 = time.monotonic()
    while time.monotonic() < end:
        time.sleep(0.25)
        cs.sample()
    return cs.total() / (time.monotonic() - t0), cs.threads_seen(), cs.by_thread_name()


def _small_batch(ctx, conn, counter):
    dirname, names = h.ensure_small_files(1000, 100 * h.KIB)
    dest = os.path.join(h.OUT_DIR, "idle-dest")
    h.empty_dir(dest)
    session = h.open_session(conn, "org.ferry.bench.idle")
    opts = h.download_options(destination=dest)
    serials = [conn.send_call(BUS_NAME, session, SESSION, "Download", "sa{sv}",
                              [ctx.url(f"{dirname}/{n}"), opts]) for n in names[:20]]
    paths = [conn.wait_reply(s).check()[0] for s in serials]
    conn.wait_until(lambda: all(p in counter.completed for p in paths), 60, "the small batch")
    conn.wait_until(lambda: counter.all_finished, 15, "AllFinished")
    h.remove_all_transfers(conn)
    h.empty_dir(dest)


def run(ctx, suite):
    window = 3.0 if ctx.quick else 10.0
    results = {}

    ferryd = h.Ferryd(ctx, "idle").start()
    counter = h.SignalCounter()
    conn = ctx.connect(on_signal=counter)
    ferryd.wait_answering(conn)
    results["fresh"] = _measure(ferryd, window)
    conn.add_match(h.match_rule("Completed"))
    conn.add_match(h.match_rule("AllFinished", h.MANAGER))
    _small_batch(ctx, conn, counter)
    results["after work"] = _measure(ferryd, window, quiet=2.0)
    ferryd.stop()

    ferryd = h.Ferryd(ctx, "idle-exit", extra_args=()).start()
    ferryd.wait_answering(conn)
    results["idle-exit (default)"] = _measure(ferryd, window)
    ferryd.stop()
    conn.close()

    suite.data = {"window_s": window, **{k: {"wakeups_per_s": v, "threads": n, "switches_by_thread": by}
                                         for k, (v, n, by) in results.items()}}
    for what, (rate, threads, by) in results.items():
        if by:
            suite.note(f"{what}: context switches by thread name over {window:g} s: "
                       + ", ".join(f"{k} {v}" for k, v in by.items()))
        informational = what.startswith("idle-exit")
        suite.row(f"idle ferryd wakeups/s, {what}", f"{rate:.2f} ({threads} threads)", "", None,
                  "0" if not informational else "(timer by design)",
                  None if informational else rate <= TARGET_WAKEUPS)
