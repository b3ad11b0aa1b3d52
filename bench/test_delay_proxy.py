"""Tests of the latency suite's delay proxy (delay_proxy.py): the delay is added once per
direction (RTT/2 each way, one RTT for a request and its answer), a new connection pays
the handshake's round trip once, a large body is forwarded intact and without a delay
per chunk, and EOF is passed on. A few seconds.
Run: python3 -m unittest discover -s bench -p 'test_*.py'
"""

import asyncio
import hashlib
import os
import socket
import subprocess
import sys
import time
import unittest

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import delay_proxy  # noqa: E402

RTT = 0.3
SLACK = 0.14  # a busy machine's scheduling; less than RTT/2, so a delay added twice shows


class Upstream:
    """A server that notes when each chunk arrives and answers "pong" to "ping",
    echoes "echo" requests' bodies, and notes EOF."""

    def __init__(self):
        self.arrivals = []     # (loop time, bytes)
        self.eof_at = None
        self.received = bytearray()

    async def start(self):
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def _serve(self, reader, writer):
        loop = asyncio.get_running_loop()
        while True:
            try:
                data = await reader.read(65536)
            except ConnectionError:  # the proxy closed at the end of a test
                data = b""
            if not data:
                self.eof_at = loop.time()
                writer.close()
                return
            self.arrivals.append((loop.time(), data))
            self.received += data
            if data.endswith(b"ping"):
                writer.write(b"pong")
            await writer.drain()

    async def close(self):
        self.server.close()
        await self.server.wait_closed()


class DelayProxyTests(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self):
        self.loop = asyncio.get_running_loop()
        self.loop.slow_callback_duration = 5  # hashing 16 MiB is not what this debug warning is for
        self.upstream = await Upstream().start()
        self.proxies = []

    async def asyncTearDown(self):
        for p in self.proxies:
            await p.close()
        await asyncio.sleep(0.05)  # the upstream's handlers see their connections end
        await self.upstream.close()

    async def proxy(self, handshake_rtt):
        p = await delay_proxy.DelayProxy(self.upstream.port, RTT, handshake_rtt=handshake_rtt).start()
        self.proxies.append(p)
        return p

    async def ping(self, reader, writer):
        """(seconds until the server had the ping, seconds until the pong was back)."""
        n = len(self.upstream.arrivals)
        t0 = self.loop.time()
        writer.write(b"ping")
        await writer.drain()
        self.assertEqual(await reader.readexactly(4), b"pong")
        back = self.loop.time() - t0
        return self.upstream.arrivals[n][0] - t0, back

    async def test_the_delay_is_added_once_per_direction(self):
        p = await self.proxy(handshake_rtt=False)
        reader, writer = await asyncio.open_connection("127.0.0.1", p.listen_port)
        for _ in range(3):  # the first exchange and later ones alike
            there, back = await self.ping(reader, writer)
            self.assertGreaterEqual(there, RTT / 2 - 0.002)
            self.assertLess(there, RTT / 2 + SLACK)
            self.assertGreaterEqual(back, RTT - 0.002)
            self.assertLess(back, RTT + SLACK)
        writer.close()

    async def test_a_new_connection_pays_the_handshake_round_trip_once(self):
        p = await self.proxy(handshake_rtt=True)
        t0 = self.loop.time()
        reader, writer = await asyncio.open_connection("127.0.0.1", p.listen_port)
        there, back = await self.ping(reader, writer)
        there += self.loop.time() - back - t0  # from the connect() call, as a client counts
        self.assertGreaterEqual(there, 1.5 * RTT - 0.002)
        self.assertLess(there, 1.5 * RTT + SLACK)
        there, back = await self.ping(reader, writer)  # later exchanges: one RTT
        self.assertLess(back, RTT + SLACK)
        self.assertGreaterEqual(back, RTT - 0.002)
        writer.close()

    async def test_bytes_are_forwarded_intact_without_a_delay_per_chunk(self):
        p = await self.proxy(handshake_rtt=False)
        body = os.urandom(16 * 1024 * 1024)
        reader, writer = await asyncio.open_connection("127.0.0.1", p.listen_port)
        t0 = self.loop.time()
        for i in range(0, len(body), 64 * 1024):  # 256 writes
            writer.write(body[i:i + 64 * 1024])
            await writer.drain()
        writer.write_eof()
        while self.upstream.eof_at is None:
            await asyncio.sleep(0.01)
        took = self.upstream.eof_at - t0
        self.assertEqual(hashlib.sha256(self.upstream.received).digest(), hashlib.sha256(body).digest())
        self.assertEqual(p.bytes_up, len(body))
        # Many chunks, each RTT/2 late, but overlapping: far less than one delay per chunk.
        self.assertGreater(len(self.upstream.arrivals), 8)
        self.assertGreaterEqual(took, RTT / 2)
        self.assertLess(took, RTT / 2 + 2.0)
        # EOF came through: the upstream closed, so the client sees EOF too.
        self.assertEqual(await reader.read(), b"")
        writer.close()

    async def test_chunks_in_flight_overlap(self):
        # 20 chunks sent 20 ms apart: each reaches the server RTT/2 after it was sent, so the
        # last arrives about 0.38 + RTT/2 s after the first was sent; a sleep per chunk that
        # held up the next would make it 20 x RTT/2.
        p = await self.proxy(handshake_rtt=False)
        reader, writer = await asyncio.open_connection("127.0.0.1", p.listen_port)
        await self.ping(reader, writer)
        n = len(self.upstream.arrivals)
        sent = []
        for i in range(20):
            sent.append(self.loop.time())
            writer.write(b"%02d" % i)
            await writer.drain()
            await asyncio.sleep(0.02)
        while len(self.upstream.received) < 4 + 40:
            await asyncio.sleep(0.005)
        arrivals = self.upstream.arrivals[n:]
        self.assertEqual(bytes(self.upstream.received[4:]), b"".join(b"%02d" % i for i in range(20)))
        # Match each chunk to its arrival (one read may hold several chunks).
        at, offset = {}, 0
        for t, data in arrivals:
            for k in range(len(data) // 2):
                at[offset + k] = t
            offset += len(data) // 2
        lateness = [at[i] - sent[i] for i in range(20)]
        self.assertGreaterEqual(min(lateness), RTT / 2 - 0.002)
        self.assertLess(sorted(lateness)[10], RTT / 2 + SLACK)  # the median: a stall of the machine may hit one
        # Serialised, the last chunk would arrive 20 x RTT/2 = 3 s after the first was sent.
        self.assertLess(at[19] - sent[0], 20 * 0.02 + RTT / 2 + 0.5)
        writer.close()

    async def test_server_to_client_bytes_are_intact(self):
        body = os.urandom(8 * 1024 * 1024)

        async def serve(reader, writer):
            await reader.read(1)
            writer.write(body)
            await writer.drain()
            writer.close()
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        p = await delay_proxy.DelayProxy(server.sockets[0].getsockname()[1], RTT, handshake_rtt=False).start()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", p.listen_port)
            t0 = self.loop.time()
            writer.write(b"x")
            got = await reader.read()
            took = self.loop.time() - t0
            self.assertEqual(hashlib.sha256(got).digest(), hashlib.sha256(body).digest())
            self.assertEqual(p.bytes_down, len(body))
            self.assertGreaterEqual(took, RTT - 0.002)
            self.assertLess(took, RTT + 2.0)
            writer.close()
        finally:
            await p.close()
            server.close()
            await server.wait_closed()


class ScriptTests(unittest.TestCase):
    def test_the_script_forwards_and_stops_on_sigterm(self):
        with socket.socket() as srv:
            srv.bind(("127.0.0.1", 0))
            srv.listen()
            proc = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(__file__), "delay_proxy.py"),
                                     "--to", str(srv.getsockname()[1]), "--rtt-ms", "100"],
                                    stdout=subprocess.PIPE, text=True)
            try:
                line = proc.stdout.readline()
                self.assertTrue(line.startswith("listening on 127.0.0.1:"), line)
                port = int(line.rsplit(":", 1)[1])
                t0 = time.monotonic()  # before connecting: the proxy may accept before connect() returns here
                with socket.create_connection(("127.0.0.1", port)) as c:
                    c.sendall(b"hello")
                    s, _ = srv.accept()
                    with s:
                        s.settimeout(5)
                        self.assertEqual(s.recv(5), b"hello")
                        # 100 ms for the handshake's round trip, 50 ms one way.
                        self.assertGreaterEqual(time.monotonic() - t0, 0.148)
                        s.sendall(b"world")
                        c.settimeout(5)
                        self.assertEqual(c.recv(5), b"world")
            finally:
                proc.terminate()
                out, _ = proc.communicate(timeout=10)
            self.assertEqual(proc.returncode, 0)
            self.assertIn("connections 1, bytes up 5, down 5", out)


if __name__ == "__main__":
    unittest.main()
