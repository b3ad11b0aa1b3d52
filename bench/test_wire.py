"""Tests of the benchmark's D-Bus client against a real private dbus-daemon.

Run: python3 -m unittest discover -s bench -p 'test_*.py'
"""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402
import wire  # noqa: E402


class MarshallingTests(unittest.TestCase):
    def test_values_come_back_as_written(self):
        sig = "sa{sv}ao(ut)abayix"
        values = ["héllo", {"destination": wire.Variant("s", "/tmp/x"), "start": wire.Variant("b", False),
                            "connections": wire.Variant("u", 8),
                            "headers": wire.Variant("a{ss}", {"A": "b"})},
                  ["/org/ferry/Ferry1/transfer/1", "/a"], (7, 2 ** 40), [True, False], b"\x00\xff", 3, -5]
        expected = list(values)
        expected[1] = {"destination": "/tmp/x", "start": False, "connections": 8, "headers": {"A": "b"}}
        self.assertEqual(wire.unmarshal(sig, wire.marshal(sig, values)), expected)

    def test_alignment_follows_the_specification(self):
        # A byte then a uint64: the uint64 starts at offset 8.
        self.assertEqual(wire.marshal("yt", [1, 2]), b"\x01" + b"\0" * 7 + (2).to_bytes(8, "little"))
        # An empty array of structs still pads to the struct's alignment.
        self.assertEqual(wire.marshal("a(y)", [[]]), b"\0\0\0\0" + b"\0" * 4)

    def test_signatures_split_into_complete_types(self):
        self.assertEqual(wire.split_signature("sa{sv}(ua(yy))aao"), ["s", "a{sv}", "(ua(yy))", "aao"])


class BusTests(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="wire-test-")
        self.children = harness.Children()
        self.address, _ = harness.start_bus(self.children, self.tmp)

    def tearDown(self):
        self.children.stop_all()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_calls_pipelined_beyond_the_default_pending_limit_all_answer(self):
        conn = wire.Connection(self.address)
        self.assertTrue(conn.unique_name.startswith(":"))
        serials = [conn.send_call(wire.BUS, wire.BUS_PATH, wire.BUS, "NameHasOwner", "s", [conn.unique_name])
                   for _ in range(1000)]
        answers = [conn.wait_reply(s).check()[0] for s in serials]
        self.assertEqual(answers, [True] * 1000)
        conn.close()

    def test_an_error_reply_raises_with_its_name(self):
        conn = wire.Connection(self.address)
        with self.assertRaises(wire.DBusError) as caught:
            conn.call("org.example.Nobody", "/", "org.example.Nobody", "Nothing")
        self.assertEqual(caught.exception.name, "org.freedesktop.DBus.Error.ServiceUnknown")
        conn.close()

    def test_signals_reach_the_handler_of_a_matching_client(self):
        got = []
        listener = wire.Connection(self.address, on_signal=got.append)
        listener.add_match("type='signal',interface='org.freedesktop.DBus',member='NameOwnerChanged'")
        other = wire.Connection(self.address)
        listener.wait_until(lambda: any(m.args[0] == other.unique_name for m in got), 5, "NameOwnerChanged")
        other.close()
        listener.close()


if __name__ == "__main__":
    unittest.main()
