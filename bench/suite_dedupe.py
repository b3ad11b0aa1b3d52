"""dedupe (contract v1.2): 1,000 downloads of 10 distinct URLs (100 KiB each), sent at
once by one bus client in one session, with `dedupe` true (the default) and false,
alternating.

The files come from a small HTTP server in this process (not nginx: it counts the GETs
it answers). Per run: the GETs the server saw, the wall time (first call sent to the
last `Completed`), ferryd's CPU, and every file checked (size and bytes) against its
source. With dedupe, each URL is fetched about once: a download whose call arrives after
its URL's fetch has ended (the calls come in batches, and a 100 KiB fetch on loopback
ends within milliseconds) fetches again, as the contract says (only a queued or running
download is followed), so the count is a little above 10 and varies with timing.
"""

import hashlib
import http.server
import os
import threading
import time

import harness as h
import wire
from harness import BUS_NAME, SESSION, BenchError

URLS = 10
SIZE = 100 * h.KIB


class CountingServer:
    """A threaded HTTP/1.1 server of in-memory bodies that counts the GETs it answers."""

    def __init__(self, bodies):
        self.bodies = bodies
        self.lock = threading.Lock()
        self.gets = 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):
                body = outer.bodies.get(self.path)
                if body is None:
                    self.send_error(404)
                    return
                with outer.lock:
                    outer.gets += 1
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("ETag", '"' + hashlib.sha1(body).hexdigest() + '"')
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def take_count(self):
        with self.lock:
            n, self.gets = self.gets, 0
        return n

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def run(ctx, suite):
    count = 200 if ctx.quick else 1000
    runs = 2 if ctx.quick else ctx.args.runs
    bodies = {f"/dedupe/{i:02d}.bin": os.urandom(SIZE) for i in range(URLS)}
    server = CountingServer(bodies)
    urls = [f"http://127.0.0.1:{server.port}/dedupe/{i % URLS:02d}.bin" for i in range(count)]
    dest_root = os.path.join(h.OUT_DIR, "dedupe-dest")
    h.empty_dir(dest_root)
    ferryd, counter, conn = h.start_listening(ctx, "dedupe", (("Completed", h.TRANSFER),))
    session = h.open_session(conn, "org.ferry.bench.dedupe")
    suite.note(f"{count} downloads of {URLS} URLs ({SIZE // h.KIB} KiB each) in one session, "
               f"dedupe on and off alternating, {runs} rounds")

    def one_run(dedupe, dest):
        counter.reset()
        server.take_count()
        opts = h.download_options(destination=dest + "/")
        opts["dedupe"] = wire.Variant("b", dedupe)
        c0, t0 = ferryd.cpu(), time.perf_counter()
        serials = [conn.send_call(BUS_NAME, session, SESSION, "Download", "sa{sv}", [u, opts]) for u in urls]
        for s in serials:
            conn.wait_reply(s, 120).check()
        conn.wait_until(lambda: len(counter.completed) >= count, 600, "every Completed")
        wall = max(v[0] for v in counter.completed.values()) - t0
        cpu = ferryd.cpu() - c0
        failed = [(p, v[1]) for p, v in counter.completed.items() if v[1]]
        if failed:
            raise BenchError(f"{len(failed)} transfers failed, e.g. {failed[0]}")
        gets = server.take_count()
        files = os.listdir(dest)
        if len(files) != count:
            raise BenchError(f"{len(files)} files in {dest}, not {count}")
        by_digest = {hashlib.sha256(b).digest(): b for b in bodies.values()}
        for name in files:
            with open(os.path.join(dest, name), "rb") as f:
                data = f.read()
            if hashlib.sha256(data).digest() not in by_digest:
                raise BenchError(f"{name} matches none of the served files")
        h.remove_all_transfers(conn)
        return {"dedupe": dedupe, "wall": wall, "cpu_daemon": cpu, "gets": gets}

    results = []
    try:
        for i in range(1, runs + 1):
            for dedupe in (True, False):
                dest = os.path.join(dest_root, f"run-{i}-{'on' if dedupe else 'off'}")
                h.empty_dir(dest)
                os.sync()
                r = one_run(dedupe, dest)
                r["run"] = i
                h.log(f"dedupe run {i} {'on' if dedupe else 'off'}: {r['wall']:.3f} s wall, "
                      f"{r['gets']} GETs, ferryd cpu {r['cpu_daemon']:.3f} s")
                results.append(r)
    finally:
        conn.close()
        ferryd.stop()
        server.stop()
        h.empty_dir(dest_root)

    on = [r for r in results if r["dedupe"]]
    off = [r for r in results if not r["dedupe"]]
    wall_on, wall_off = h.median([r["wall"] for r in on]), h.median([r["wall"] for r in off])
    gets_on, gets_off = h.median([r["gets"] for r in on]), h.median([r["gets"] for r in off])
    cpu_on, cpu_off = h.median([r["cpu_daemon"] for r in on]), h.median([r["cpu_daemon"] for r in off])
    suite.data = {"downloads": count, "urls": URLS, "size": SIZE, "runs": results}
    suite.row(f"{count} downloads of {URLS} URLs: server GETs, dedupe on",
              f"{gets_on:.0f}", f"dedupe off {gets_off:.0f}", None, "", None)
    suite.row(f"{count} downloads of {URLS} URLs: wall, dedupe on",
              h.fmt_s(wall_on), f"dedupe off {h.fmt_s(wall_off)}", wall_on / wall_off, "", None)
    suite.row(f"{count} downloads of {URLS} URLs: ferryd CPU, dedupe on",
              h.fmt_s(cpu_on), f"dedupe off {h.fmt_s(cpu_off)}", cpu_on / cpu_off if cpu_off else None, "", None)
