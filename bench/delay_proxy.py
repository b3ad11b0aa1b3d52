#!/usr/bin/env python3
"""A loopback TCP proxy that adds a round-trip time: every chunk read from one side is
written to the other side RTT/2 after it was read, in each direction.

For the latency suite (this machine has no `tc netem`). Each direction of each
connection has a reader and a writer joined by a queue of (due time, bytes): the reader
keeps reading while earlier chunks wait for their time, so the delay is added once and
the throughput is not cut (no sleep per chunk). What it does not model: loss, a
bandwidth limit, TCP's slow start (the local sockets have their full windows at once).

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
import signal
import socket
import sys

READ_SIZE = 256 * 1024
QUEUE_CHUNKS = 1024          # per direction: up to 256 MiB waiting, far above RTT x throughput here


class DelayProxy:
    """Accepts on 127.0.0.1:`listen_port` (0: any free port) and forwards to
    127.0.0.1:`target_port`, each direction delayed by `rtt` / 2 seconds."""

    def __init__(self, target_port, rtt=0.040, listen_port=0, handshake_rtt=True, host="127.0.0.1"):
        self.target_port, self.rtt, self.listen_port = target_port, rtt, listen_port
        self.handshake_rtt, self.host = handshake_rtt, host
        self.server = None
        self.connections = 0
        self.bytes_up = 0      # client -> server
        self.bytes_down = 0    # server -> client
        self._tasks = set()

    async def start(self):
        self.server = await asyncio.start_server(self._accept, self.host, self.listen_port,
                                                 backlog=4096, reuse_address=True)
        self.listen_port = self.server.sockets[0].getsockname()[1]
        return self

    async def close(self):
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
        for t in list(self._tasks):
            t.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def _accept(self, c_reader, c_writer):
        task = asyncio.ensure_future(self._serve(c_reader, c_writer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, c_reader, c_writer):
        loop = asyncio.get_running_loop()
        accepted = loop.time()
        self.connections += 1
        try:
            s_reader, s_writer = await asyncio.open_connection(self.host, self.target_port)
        except OSError:
            c_writer.close()
            return
        for w in (c_writer, s_writer):
            sock = w.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        half = self.rtt / 2
        first_due = accepted + (self.rtt if self.handshake_rtt else 0) + half
        up = self._direction(c_reader, s_writer, half, first_due, "bytes_up")
        down = self._direction(s_reader, c_writer, half, 0.0, "bytes_down")
        try:
            await asyncio.gather(up, down, return_exceptions=True)
        finally:
            for w in (c_writer, s_writer):
                try:
                    w.close()
                except OSError:
                    pass

    async def _direction(self, reader, writer, delay, not_before, counter):
        """Copies reader to writer, each chunk written `delay` s after it was read."""
        loop = asyncio.get_running_loop()
        queue = asyncio.Queue(QUEUE_CHUNKS)

        async def read_side():
            try:
                while True:
                    data = await reader.read(READ_SIZE)
                    await queue.put((max(loop.time() + delay, not_before), data))
                    if not data:
                        return
            except OSError:
                await queue.put((loop.time(), None))  # a reset: pass it on at once

        async def write_side():
            while True:
                due, data = await queue.get()
                wait = due - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                if data is None:
                    writer.transport.abort()
                    return
                if not data:  # EOF: half-close, as TCP would pass it on
                    if writer.can_write_eof():
                        writer.write_eof()
                    return
                # Chunks already due go out together.
                parts = [data]
                while not queue.empty():
                    due2, more = queue._queue[0]  # peek: the queue is in due order
                    if not more or due2 > loop.time():
                        break
                    queue.get_nowait()
                    parts.append(more)
                blob = b"".join(parts) if len(parts) > 1 else data
                setattr(self, counter, getattr(self, counter) + len(blob))
                writer.write(blob)
                await writer.drain()

        reading = asyncio.ensure_future(read_side())
        try:
            await write_side()
        finally:
            reading.cancel()  # done already unless writing failed
            await asyncio.gather(reading, return_exceptions=True)


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
