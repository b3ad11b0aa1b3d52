"""Tests of the benchmark's upload suite against a test double of ferryd (fake_ferryd.py).

They check what the lead relies on when uploads land: a working `Upload` is timed
against `curl -T` and gets a ratio and a peak RSS; a refused one is reported as "not
supported" without stopping the run. Needs nginx and curl; about 10 s.
Run: python3 -m unittest discover -s bench -p 'test_*.py'
"""

import argparse
import os
import shutil
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness as h  # noqa: E402
import suite_upload  # noqa: E402


class UploadSuiteTests(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="bench-suite-test-")
        self.children = h.Children()
        bin_dir = h.fake_ferry_bin(self.tmp)
        port = h.free_port()
        h.start_nginx(self.children, self.tmp, h.OUT_DIR, port)
        address, bus = h.start_bus(self.children, self.tmp)
        args = argparse.Namespace(quick=True, runs=2, warmup=0, size_mib=256, segment_runs=1)
        self.ctx = h.Context(args, self.tmp, self.children, bin_dir, address, bus, port)

    def tearDown(self):
        self.children.stop_all()
        shutil.rmtree(self.tmp, ignore_errors=True)

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


if __name__ == "__main__":
    unittest.main()
