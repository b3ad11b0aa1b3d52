"""Tests of the harness's measuring helpers.
Run: python3 -m unittest discover -s bench -p 'test_*.py'
"""

import os
import signal
import subprocess
import sys
import time
import unittest

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness as h  # noqa: E402

# A child that burns about half a second of CPU, then stops itself (SIGSTOP), so its
# parent's tree can be read while both are still there.
BURN = ("import os, signal, time\n"
        "end = time.process_time() + 0.5\n"
        "while time.process_time() < end: pass\n"
        "os.kill(os.getpid(), signal.SIGSTOP)\n")


class TreeCPUTests(unittest.TestCase):
    def test_counts_the_childrens_cpu_too(self):
        # The parent (a shell) does nothing but wait for its child, as nginx's master does.
        parent = subprocess.Popen(["sh", "-c", f'{sys.executable} -c "$0" & wait', BURN])
        try:
            child = None
            deadline = time.monotonic() + 30
            while child is None and time.monotonic() < deadline:
                with open(f"/proc/{parent.pid}/task/{parent.pid}/children") as f:
                    pids = [int(p) for p in f.read().split()]
                for pid in pids:
                    with open(f"/proc/{pid}/stat") as f:
                        if f.read().rpartition(")")[2].split()[0] == "T":
                            child = pid
                if child is None:
                    os.sched_yield()
            self.assertIsNotNone(child, "the child did not stop within 30 s")
            self.assertLess(h.proc_cpu_seconds(parent.pid), 0.2, "the shell itself only waits")
            self.assertGreaterEqual(h.tree_cpu_seconds(parent.pid), 0.4, "the child's half second is counted")
        finally:
            for p in subprocess.run(["pgrep", "-P", str(parent.pid)], capture_output=True, text=True).stdout.split():
                os.kill(int(p), signal.SIGKILL)
            parent.wait()


if __name__ == "__main__":
    unittest.main()
