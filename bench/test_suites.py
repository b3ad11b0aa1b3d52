"""Tests of the benchmark's upload and mirrors suites against a test double of ferryd
(fake_ferryd.py).

They check what the lead relies on when uploads land: a working `Upload` is timed
against `curl -T` and gets a ratio and a peak RSS; a refused one is reported as "not
supported" without stopping the run. The mirrors suite times each download over the bus
against aria2c, checks every file and leaves nothing behind. Needs nginx, curl and
aria2c; about 20 s.
Run: python3 -m unittest discover -s bench -p 'test_*.py'
"""

import argparse
import os
import sys
import unittest

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness as h  # noqa: E402
import suite_mirrors  # noqa: E402
import suite_upload  # noqa: E402


class UploadSuiteTests(unittest.TestCase):
    def setUp(self):
        args = argparse.Namespace(quick=True, runs=2, warmup=0, size_mib=256, segment_runs=1)
        world = h.FakeWorld("bench-suite-test-", args, nginx=True)
        self.addCleanup(world.close)
        self.ctx = world.ctx

    def test_a_working_upload_is_timed_against_curl(self):
        suite = h.Suite("upload")
        suite_upload.run(self.ctx, suite)
        wall, rss = suite.rows
        self.assertTrue(suite.data["supported"])
        self.assertEqual(len(suite.data["ferry_s"]), 2)
        # The fake uploads with curl itself: the same work, so a ratio of the same order
        # (these uploads take ~0.1 s, where a busy machine's jitter is as large as them).
        self.assertTrue(0.2 < wall["ratio"] < 5, wall["ratio"])
        self.assertTrue(all(t > 0 for t in suite.data["ferry_s"]))
        self.assertGreater(max(suite.data["ferryd_peak_rss_mib"]), 0)
        self.assertIn(rss["met"], (True, False))

    def test_a_refused_upload_is_reported_and_curl_still_timed(self):
        self.ctx.env["FAKE_FERRYD_UPLOAD"] = "unsupported"
        suite = h.Suite("upload")
        suite_upload.run(self.ctx, suite)
        self.assertFalse(suite.data["supported"])
        self.assertIn("NotSupported", suite.data["refusal"])
        self.assertEqual(suite.rows[0]["ferry"], "not supported")
        self.assertFalse(suite.rows[0]["met"])
        self.assertEqual(len(suite.data["curl_s"]), 2)


class MirrorsSuiteTests(unittest.TestCase):
    def setUp(self):
        args = argparse.Namespace(quick=True, runs=2, warmup=0)
        world = h.FakeWorld("bench-mirrors-test-", args, nginx=True)
        self.addCleanup(world.close)
        self.children, self.ctx = world.children, world.ctx

    def test_each_round_is_timed_over_the_bus_and_against_aria2c_and_cleaned_up(self):
        suite = h.Suite("mirrors")
        before = {name for name, _ in self.children.procs}
        suite_mirrors.run(self.ctx, suite)
        times = suite.data["seconds"]
        self.assertEqual(len(times["ferry"]), 2)
        self.assertEqual(len(times["aria2c"]), 2)
        self.assertTrue(all(t > 0 for t in times["ferry"] + times["aria2c"]), times)
        self.assertGreater(suite.rows[0]["ratio"], 0)
        # ferryd is stopped and the downloaded files are gone, as after every suite.
        self.assertEqual({name for name, _ in self.children.procs}, before)
        self.assertEqual(os.listdir(os.path.join(h.OUT_DIR, "mirrors-dest")), [])


if __name__ == "__main__":
    unittest.main()
