"""Tests of the latency suite against the test double of ferryd (fake_ferryd.py, which
downloads with curl, and so trusts the test CA through CURL_CA_BUNDLE as ferryd is to):
the peers and the bus client are timed over TLS through the delay proxies, a Ferry tool
that fails (here `ferry` is `false`) gives FAIL rows without stopping the suite, and
everything the suite started or wrote is gone afterwards. Needs nginx, openssl, curl and
aria2c; about 15 s (20 files, 8 MiB, 10 ms RTT, one round).
Run: python3 -m unittest discover -s bench -p 'test_*.py'
"""

import argparse
import os
import sys
import unittest

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness as h  # noqa: E402
import suite_latency  # noqa: E402


class LatencySuiteTests(unittest.TestCase):
    def setUp(self):
        args = argparse.Namespace(quick=False, runs=1, warmup=0, rtt_ms=10, keep=False,
                                  latency_files=20, latency_big_mib=8)
        world = h.FakeWorld("bench-latency-test-", args)
        self.addCleanup(world.close)
        self.tmp, self.children, self.ctx = world.tmp, world.children, world.ctx

    def test_peers_and_the_bus_client_are_timed_and_a_failing_ferry_get_is_reported(self):
        suite = h.Suite("latency")
        before = {name for name, _ in self.children.procs}
        suite_latency.run(self.ctx, suite)
        rows = {r["what"]: r for r in suite.rows}
        get_h2 = rows["10 ms h2 20 x 100 KiB: ferry get / curl -Z 100"]
        self.assertTrue(get_h2["ferry"].startswith("failed: "), get_h2)
        self.assertFalse(get_h2["met"])
        self.assertIsNone(get_h2["ratio"])
        # The fake's bus downloads (curl, with the CA from CURL_CA_BUNDLE) are timed.
        for what in ("10 ms h2 20 x 100 KiB: bus client / curl -Z 100",
                     "10 ms HTTP/1.1 20 x 100 KiB: bus client / curl --http1.1 -Z 6"):
            self.assertIsNotNone(rows[what]["ratio"], rows[what])
            self.assertGreater(rows[what]["ratio"], 0)
        walls = suite.data["median_wall"]
        for key in ("h2 curl100", "h2 aria2c", "h2 curl6", "h1 curl6", "big curl"):
            self.assertGreater(walls[key], 0.01, key)  # at least one round trip each
        self.assertEqual(set(suite.data["failed"]), {"h2 get", "h1 get", "big get"})
        served = {(r["group"], r["tool"]): r["served"] for r in suite.data["runs"]}
        self.assertEqual(served[("h2", "curl100")]["protocols"], {"HTTP/2.0": 20})
        self.assertEqual(served[("h2", "curl100")]["connections"], 1)
        self.assertEqual(served[("h1", "curl6")]["protocols"], {"HTTP/1.1": 20})
        self.assertEqual(served[("h2", "aria2c")]["not_200"], 0)
        # Everything the suite started is stopped, and its files are gone.
        self.assertEqual({name for name, _ in self.children.procs}, before)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "latency")))
        self.assertFalse(os.path.exists(os.path.join(h.OUT_DIR, "latency-dest")))

    def test_a_failing_peer_stops_the_suite_and_it_still_cleans_up(self):
        self.ctx.args.latency_files = 20
        suite = h.Suite("latency")
        before = {name for name, _ in self.children.procs}
        real_check = suite_latency.suite_batch._check_files
        # curl's files "differ": a peer's wrong file is an error of the suite.
        suite_latency.suite_batch._check_files = lambda *a: "f00000.bin differs from the source"
        try:
            with self.assertRaises(h.BenchError):
                suite_latency.run(self.ctx, suite)
        finally:
            suite_latency.suite_batch._check_files = real_check
        self.assertEqual({name for name, _ in self.children.procs}, before)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "latency")))
        self.assertFalse(os.path.exists(os.path.join(h.OUT_DIR, "latency-dest")))


if __name__ == "__main__":
    unittest.main()
