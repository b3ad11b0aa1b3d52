#!/usr/bin/env python3
"""A test double of ferryd, for testing the benchmark's own measuring code.

It owns org.ferry.Ferry1 on DBUS_SESSION_BUS_ADDRESS and answers the few calls the
upload and segments suites make: `OpenSession`, `ListTransfers`, `Download` and
`Upload` (each carried out by a curl child, then `Completed` is sent) and `Remove`.
With FAKE_FERRYD_UPLOAD=unsupported, `Upload` answers NotSupported as ferryd did
before issue 8. It lets `test_suites.py` check that the upload suite times a working
`Upload` and reports a refusal, before the real ferryd can upload.
"""

import os
import subprocess
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import wire  # noqa: E402

TRANSFER = "org.ferry.Ferry1.Transfer"


def main():
    if "--help" in sys.argv:
        print("USAGE: fake_ferryd.py [--no-idle-exit]")
        return 0
    running = {}  # transfer path -> curl Popen
    serial = [0]
    conn = None

    def on_call(m):
        if m.member == "ListTransfers":
            conn.send_reply(m, "ao", [list(running)])
        elif m.member == "OpenSession":
            conn.send_reply(m, "o", ["/org/ferry/Ferry1/session/1"])
        elif m.member == "Upload" and os.environ.get("FAKE_FERRYD_UPLOAD") == "unsupported":
            conn.send_error(m, "org.freedesktop.DBus.Error.NotSupported", "uploads are not supported (fake)")
        elif m.member in ("Upload", "Download"):
            serial[0] += 1
            path = f"/org/ferry/Ferry1/transfer/{serial[0]}"
            if m.member == "Upload":
                url, source, _ = m.args
                argv = ["curl", "-s", "-f", "-o", "/dev/null", "-T", source, url]
            else:
                url, options = m.args
                dest = options["destination"]
                # A folder (the batch and latency suites) or a file; curl reads
                # CURL_CA_BUNDLE from the environment, as ferryd is to.
                argv = (["curl", "-s", "-f", "--output-dir", dest, "-O", url] if os.path.isdir(dest) else
                        ["curl", "-s", "-f", "-o", dest, url])
            running[path] = subprocess.Popen(argv)
            conn.send_reply(m, "o", [path])
        elif m.member == "Remove":
            running.pop(m.path, None)
            conn.send_reply(m)
        else:
            conn.send_error(m, "org.freedesktop.DBus.Error.UnknownMethod", f"the fake has no {m.member}")

    conn = wire.Connection(os.environ["DBUS_SESSION_BUS_ADDRESS"], on_call=on_call)
    conn.call(wire.BUS, wire.BUS_PATH, wire.BUS, "RequestName", "su", ["org.ferry.Ferry1", 4])
    signalled = set()
    while True:
        conn.pump(0.02)
        for path, proc in list(running.items()):
            if path not in signalled and proc.poll() is not None:
                signalled.add(path)
                error = "" if proc.returncode == 0 else "org.ferry.Ferry1.Error.Http"
                conn.emit_signal(path, TRANSFER, "Completed", "tss", [serial[0], error, ""])


if __name__ == "__main__":
    sys.exit(main())
