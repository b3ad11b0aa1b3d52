#!/usr/bin/env python3
"""A loopback TCP proxy that adds a round-trip time: every chunk read from one side is
written to the other side RTT/2 after it was read, in each direction.

For the latency suite (this machine has no `tc netem`). Each direction of each
connection keeps a queue of (due time, bytes) and one timer for its head: reading goes on
while earlier chunks wait for their time, and every chunk due is written at once, so the
delay is added once and the throughput is not cut (no sleep per chunk). The sender is
paused while 64 MiB wait in one direction. What it does not model: loss, a bandwidth
limit, TCP's slow start (the local sockets have their full windows at once).

A new connection also pays the round trip of TCP's handshake, which the kernel answers
locally before the proxy sees the connection: the client's first bytes are delivered no
sooner than RTT + RTT/2 after the connection was accepted (as if its connect() had
returned one RTT later), unless `handshake_rtt` is off.

Run: python3 bench/delay_proxy.py --listen PORT --to PORT [--rtt-ms 40]
(prints "listening on 127.0.0.1:PORT" once it accepts connections; SIGTERM stops it).
Python 3 standard library only.
"""

import argparse
import asyncio
import collections
import signal
import socket
import sys

HIGH = 64 * 1024 * 1024   # bytes waiting in one direction before the sender is paused
LOW = 16 * 1024 * 1024    # ... and resumed (far above RTT x throughput here)
EOF_MARK = b""
RESET = None


class DelayProxy:
    """Accepts on 127.0.0.1:`listen_port` (0: any free port) and forwards to
    127.0.0.1:`target_port`, each direction delayed by `rtt` / 2 seconds.

    Protocols and timers, not a coroutine per chunk: one Python process has to carry a
    gigabyte of TLS through it in a few seconds."""

    def __init__(self, target_port, rtt=0.040, listen_port=0, handshake_rtt=True, host="127.0.0.1"):
        self.target_port, self.rtt, self.listen_port = target_port, rtt, listen_port
        self.handshake_rtt, self.host = handshake_rtt, host
        self.server = None
        self.connections = 0
        self.bytes_up = 0      # client -> server
        self.bytes_down = 0    # server -> client
        self.sides = set()

    async def start(self):
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(self._accepted, self.host, self.listen_port,
                                               backlog=4096, reuse_address=True)
        self.listen_port = self.server.sockets[0].getsockname()[1]
        return self

    async def close(self):
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
        for side in list(self.sides):
            if side.transport is not None:
                side.transport.abort()
        await asyncio.sleep(0)

    def _accepted(self):
        loop = asyncio.get_running_loop()
        now = loop.time()
        self.connections += 1
        half = self.rtt / 2
        up = _Pipe(self, loop, half, now + (self.rtt if self.handshake_rtt else 0) + half, "bytes_up")
        down = _Pipe(self, loop, half, 0.0, "bytes_down")
        client = _Side(self, out=up, into=down)
        up.src, down.dest = client, client

        async def connect():
            try:
                await loop.create_connection(lambda: _Side(self, out=down, into=up, upstream=True),
                                             self.host, self.target_port)
            except OSError:
                if client.transport is not None:
                    client.transport.abort()
        client.connecting = loop.create_task(connect())
        return client


class _Pipe:
    """One direction: what `src` reads is written to `dest` `delay` s later (not before
    `not_before`); an EOF is passed on as a half-close, a reset as an abort."""

    def __init__(self, proxy, loop, delay, not_before, counter):
        self.proxy, self.loop, self.delay, self.not_before, self.counter = proxy, loop, delay, not_before, counter
        self.items = collections.deque()  # (due, bytes | EOF_MARK | RESET), in due order
        self.queued = 0
        self.timer = None
        self.src = self.dest = None
        self.dest_blocked = False
        self.done = False  # EOF or reset delivered, or the destination is gone

    def put(self, data):
        if self.done:
            return
        self.items.append((max(self.loop.time() + self.delay, self.not_before), data))
        if data:
            self.queued += len(data)
            if self.queued > HIGH:
                self._pause_src()
        self._schedule()

    def _schedule(self):
        if self.timer is None and self.items and self.dest is not None and self.dest.transport is not None:
            self.timer = self.loop.call_at(self.items[0][0], self._fire)

    def _fire(self):
        self.timer = None
        now = self.loop.time()
        parts, end = [], False
        while self.items and self.items[0][0] <= now:
            _, data = self.items.popleft()
            if not data:  # EOF_MARK or RESET
                end, kind = True, data
                break
            parts.append(data)
        t = self.dest.transport
        if parts:
            blob = b"".join(parts) if len(parts) > 1 else parts[0]
            self.queued -= len(blob)
            setattr(self.proxy, self.counter, getattr(self.proxy, self.counter) + len(blob))
            if not t.is_closing():
                t.write(blob)
        if end:
            self.items.clear()
            self.done = True
            if kind is RESET:
                t.abort()
            else:
                if not t.is_closing() and t.can_write_eof():
                    t.write_eof()
                self.dest.maybe_close()
            return
        self._maybe_resume_src()
        self._schedule()

    def _pause_src(self):
        t = self.src.transport if self.src is not None else None
        if t is not None and not t.is_closing():
            t.pause_reading()

    def _maybe_resume_src(self):
        t = self.src.transport if self.src is not None else None
        if t is not None and not t.is_closing() and not self.dest_blocked and self.queued < LOW:
            t.resume_reading()

    def drop(self):
        """The destination is gone: nothing more is delivered."""
        self.done = True
        self.items.clear()
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None


class _Side(asyncio.Protocol):
    """One socket of a proxied connection: what it reads goes into `out`; `into` writes to it."""

    def __init__(self, proxy, out, into, upstream=False):
        self.proxy, self.out, self.into, self.upstream = proxy, out, into, upstream
        self.transport = None
        self.got_eof = False
        self.connecting = None

    def connection_made(self, transport):
        self.transport = transport
        self.proxy.sides.add(self)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.upstream:
            self.out.src, self.into.dest = self, self
            self.into._schedule()  # what the client sent before the upstream connection was made

    def data_received(self, data):
        self.out.put(data)

    def eof_received(self):
        self.got_eof = True
        self.out.put(EOF_MARK)
        self.maybe_close()
        return True  # keep the socket open for what still comes the other way

    def connection_lost(self, exc):
        self.proxy.sides.discard(self)
        if not self.got_eof:
            self.out.put(RESET)
        self.into.drop()

    def pause_writing(self):
        self.into.dest_blocked = True
        self.into._pause_src()

    def resume_writing(self):
        self.into.dest_blocked = False
        self.into._maybe_resume_src()

    def maybe_close(self):
        """Closed once both directions have ended (it sent EOF, and EOF was passed to it)."""
        if self.got_eof and self.into.done and self.transport is not None:
            self.transport.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--listen", type=int, default=0, help="port on 127.0.0.1 (default: any free one)")
    ap.add_argument("--to", type=int, required=True, help="port on 127.0.0.1 to forward to")
    ap.add_argument("--rtt-ms", type=float, default=40.0, help="round-trip time to add (default 40)")
    ap.add_argument("--no-handshake-rtt", action="store_true",
                    help="do not add the round trip of TCP's handshake to a new connection")
    args = ap.parse_args()

    async def serve():
        proxy = await DelayProxy(args.to, args.rtt_ms / 1000, args.listen,
                                 handshake_rtt=not args.no_handshake_rtt).start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.add_signal_handler(s, stop.set)
        print(f"listening on 127.0.0.1:{proxy.listen_port}", flush=True)
        await stop.wait()
        await proxy.close()
        print(f"connections {proxy.connections}, bytes up {proxy.bytes_up}, down {proxy.bytes_down}", flush=True)

    asyncio.run(serve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
