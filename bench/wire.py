"""A small D-Bus client speaking the wire protocol directly (Python standard library only).

Why not python3-dbus: the benchmarks need to send a thousand calls without waiting for
each reply (pipelining), to time every reply as it arrives, and to count signals cheaply,
without a GLib main loop. This module marshals and unmarshals the D-Bus types the Ferry
interface uses, authenticates with EXTERNAL over a unix socket, and keeps every reply by
serial so that a caller can send many calls first and collect the answers later.

Values: `b` is a Python bool, integers are ints, `s`/`o`/`g` are str, `ay` is bytes,
arrays are lists, dicts are dicts, structs are tuples, and a variant is written as a
`Variant(signature, value)` and read back as its plain value.
"""

import os
import select
import socket
import struct
import time

CALL, RETURN, ERROR, SIGNAL = 1, 2, 3, 4
NO_REPLY_EXPECTED = 0x1
F_PATH, F_INTERFACE, F_MEMBER, F_ERROR, F_REPLY_SERIAL, F_DEST, F_SENDER, F_SIG = 1, 2, 3, 4, 5, 6, 7, 8

BUS = "org.freedesktop.DBus"
BUS_PATH = "/org/freedesktop/DBus"

_FIXED = {"y": ("B", 1), "b": ("I", 4), "n": ("h", 2), "q": ("H", 2), "i": ("i", 4),
          "u": ("I", 4), "x": ("q", 8), "t": ("Q", 8), "d": ("d", 8), "h": ("I", 4)}
_ALIGN = {"s": 4, "o": 4, "g": 1, "a": 4, "(": 8, "{": 8, "v": 1}


class Variant:
    __slots__ = ("signature", "value")

    def __init__(self, signature, value):
        self.signature, self.value = signature, value


class DBusError(Exception):
    def __init__(self, name, message):
        super().__init__(f"{name}: {message}")
        self.name, self.message = name, message


def _align_of(t):
    return _FIXED[t[0]][1] if t[0] in _FIXED else _ALIGN[t[0]]


def _end_of_type(sig, i):
    c = sig[i]
    if c == "a":
        return _end_of_type(sig, i + 1)
    if c in "({":
        close = ")" if c == "(" else "}"
        i += 1
        while sig[i] != close:
            i = _end_of_type(sig, i)
        return i + 1
    return i + 1


def split_signature(sig):
    out, i = [], 0
    while i < len(sig):
        j = _end_of_type(sig, i)
        out.append(sig[i:j])
        i = j
    return out


def _pad(buf, n):
    buf.extend(b"\0" * (-len(buf) % n))


def _write(buf, t, v, e):
    c = t[0]
    if c in _FIXED:
        fmt, size = _FIXED[c]
        _pad(buf, size)
        buf.extend(struct.pack(e + fmt, int(v) if c == "b" else v))
    elif c in "so":
        raw = v.encode()
        _pad(buf, 4)
        buf.extend(struct.pack(e + "I", len(raw)) + raw + b"\0")
    elif c == "g":
        raw = v.encode()
        buf.extend(bytes([len(raw)]) + raw + b"\0")
    elif c == "v":
        _write(buf, "g", v.signature, e)
        _write(buf, v.signature, v.value, e)
    elif c == "a":
        _pad(buf, 4)
        at = len(buf)
        buf.extend(b"\0\0\0\0")
        elem = t[1:]
        _pad(buf, _align_of(elem))
        start = len(buf)
        if elem == "y":
            buf.extend(v)
        elif elem[0] == "{":
            key_t, val_t = split_signature(elem[1:-1])
            for k, val in v.items():
                _pad(buf, 8)
                _write(buf, key_t, k, e)
                _write(buf, val_t, val, e)
        else:
            for item in v:
                _write(buf, elem, item, e)
        buf[at:at + 4] = struct.pack(e + "I", len(buf) - start)
    elif c == "(":
        _pad(buf, 8)
        for sub, val in zip(split_signature(t[1:-1]), v):
            _write(buf, sub, val, e)
    else:
        raise ValueError(f"cannot marshal type {t!r}")


def marshal(sig, values, e="<"):
    buf = bytearray()
    for t, v in zip(split_signature(sig), values):
        _write(buf, t, v, e)
    return bytes(buf)


def _read(data, pos, t, e):
    c = t[0]
    if c in _FIXED:
        fmt, size = _FIXED[c]
        pos += -pos % size
        v = struct.unpack_from(e + fmt, data, pos)[0]
        return (bool(v) if c == "b" else v), pos + size
    if c in "so":
        pos += -pos % 4
        n = struct.unpack_from(e + "I", data, pos)[0]
        return data[pos + 4:pos + 4 + n].decode(errors="replace"), pos + 5 + n
    if c == "g":
        n = data[pos]
        return data[pos + 1:pos + 1 + n].decode(), pos + 2 + n
    if c == "v":
        sig, pos = _read(data, pos, "g", e)
        return _read(data, pos, sig, e)
    if c == "a":
        pos += -pos % 4
        n = struct.unpack_from(e + "I", data, pos)[0]
        pos += 4
        elem = t[1:]
        pos += -pos % _align_of(elem)
        end = pos + n
        if elem == "y":
            return bytes(data[pos:end]), end
        if elem[0] == "{":
            key_t, val_t = split_signature(elem[1:-1])
            out = {}
            while pos < end:
                pos += -pos % 8
                k, pos = _read(data, pos, key_t, e)
                out[k], pos = _read(data, pos, val_t, e)
            return out, end
        out = []
        while pos < end:
            item, pos = _read(data, pos, elem, e)
            out.append(item)
        return out, end
    if c == "(":
        pos += -pos % 8
        out = []
        for sub in split_signature(t[1:-1]):
            item, pos = _read(data, pos, sub, e)
            out.append(item)
        return tuple(out), pos
    raise ValueError(f"cannot unmarshal type {t!r}")


def unmarshal(sig, data, e="<"):
    out, pos = [], 0
    for t in split_signature(sig):
        v, pos = _read(data, pos, t, e)
        out.append(v)
    return out


class Message:
    """One received message; the body is unmarshalled only when `args` is read."""

    __slots__ = ("type", "flags", "serial", "fields", "body", "endian", "received", "_args")

    def __init__(self, type_, flags, serial, fields, body, endian, received):
        self.type, self.flags, self.serial, self.fields = type_, flags, serial, fields
        self.body, self.endian, self.received, self._args = body, endian, received, None

    path = property(lambda self: self.fields.get(F_PATH))
    interface = property(lambda self: self.fields.get(F_INTERFACE))
    member = property(lambda self: self.fields.get(F_MEMBER))
    error_name = property(lambda self: self.fields.get(F_ERROR))
    reply_serial = property(lambda self: self.fields.get(F_REPLY_SERIAL))
    signature = property(lambda self: self.fields.get(F_SIG, ""))

    @property
    def args(self):
        if self._args is None:
            self._args = unmarshal(self.signature, self.body, self.endian) if self.body else []
        return self._args

    def check(self):
        """The reply's arguments, or DBusError for an error reply."""
        if self.type == ERROR:
            args = self.args
            raise DBusError(self.error_name, args[0] if args and isinstance(args[0], str) else "")
        return self.args


def _connect_address(address):
    for part in address.split(";"):
        kind, _, rest = part.partition(":")
        if kind != "unix":
            continue
        keys = dict(kv.split("=", 1) for kv in rest.split(",") if "=" in kv)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if "path" in keys:
            s.connect(keys["path"])
        elif "abstract" in keys:
            s.connect("\0" + keys["abstract"])
        else:
            s.close()
            continue
        return s
    raise OSError(f"no unix: transport in bus address {address!r}")


class Connection:
    """A bus connection. Replies are kept by serial; signals go to `on_signal`."""

    def __init__(self, address, on_signal=None, on_call=None):
        self.sock = _connect_address(address)
        self.on_signal = on_signal
        self.on_call = on_call  # a test double of a service handles calls here
        self.replies = {}
        self.inbox = bytearray()
        self.serial = 0
        self._auth()
        self.sock.setblocking(False)
        self.unique_name = self.call(BUS, BUS_PATH, BUS, "Hello")[0]

    def close(self):
        self.sock.close()

    def _auth(self):
        uid_hex = str(os.getuid()).encode().hex()
        self.sock.sendall(b"\0AUTH EXTERNAL " + uid_hex.encode() + b"\r\n")
        line = b""
        while not line.endswith(b"\r\n"):
            chunk = self.sock.recv(256)
            if not chunk:
                raise OSError("the bus closed the connection during authentication")
            line += chunk
        if not line.startswith(b"OK "):
            raise OSError(f"bus authentication refused: {line!r}")
        self.sock.sendall(b"BEGIN\r\n")

    # ------------------------------------------------------------ sending

    def _build(self, type_, flags, fields, sig, args):
        body = marshal(sig, args) if sig else b""
        self.serial += 1
        header_fields = [(code, Variant(t, v)) for code, t, v in fields if v is not None]
        if sig:
            header_fields.append((F_SIG, Variant("g", sig)))
        head = bytearray(struct.pack("<cBBBII", b"l", type_, flags, 1, len(body), self.serial))
        _write(head, "a(yv)", header_fields, "<")
        _pad(head, 8)
        return self.serial, bytes(head) + body

    def send_call(self, dest, path, iface, member, sig="", args=(), no_reply=False):
        """Sends one call without waiting; returns its serial."""
        serial, data = self._build(CALL, NO_REPLY_EXPECTED if no_reply else 0,
                                   [(F_PATH, "o", path), (F_INTERFACE, "s", iface),
                                    (F_MEMBER, "s", member), (F_DEST, "s", dest)], sig, args)
        self._send(data)
        return serial

    def _send(self, data):
        """Writes everything, reading whatever arrives meanwhile (no deadlock on full buffers)."""
        view = memoryview(data)
        while view:
            readable, writable, _ = select.select([self.sock], [self.sock], [], 30)
            if readable:
                self._receive()
            if writable:
                try:
                    n = self.sock.send(view)
                    view = view[n:]
                except BlockingIOError:
                    pass

    # ------------------------------------------------------------ receiving

    def _receive(self):
        try:
            chunk = self.sock.recv(1 << 20)
        except BlockingIOError:
            return
        if not chunk:
            raise OSError("the bus closed the connection")
        self.inbox.extend(chunk)
        now = time.perf_counter()
        while True:
            msg = self._take_message(now)
            if msg is None:
                break
            self._dispatch(msg)

    def _take_message(self, now):
        buf = self.inbox
        if len(buf) < 16:
            return None
        e = "<" if buf[0:1] == b"l" else ">"
        _, type_, flags, _, body_len, serial, fields_len = struct.unpack_from(e + "cBBBIII", buf, 0)
        body_start = 16 + fields_len + (-(16 + fields_len) % 8)
        total = body_start + body_len
        if len(buf) < total:
            return None
        head = bytes(buf[:16 + fields_len])
        fields, _ = _read(head, 12, "a(yv)", e)
        body = bytes(buf[body_start:total])
        del buf[:total]
        return Message(type_, flags, serial, dict(fields), body, e, now)

    def _dispatch(self, msg):
        if msg.type in (RETURN, ERROR):
            self.replies[msg.reply_serial] = msg
        elif msg.type == SIGNAL:
            if self.on_signal:
                self.on_signal(msg)
        elif msg.type == CALL:
            if self.on_call:
                self.on_call(msg)
            elif not msg.flags & NO_REPLY_EXPECTED:
                # Nobody calls us on purpose; answer so the caller does not hang.
                self.send_error(msg, "org.freedesktop.DBus.Error.UnknownMethod", "no methods here")

    def send_reply(self, call, sig="", args=()):
        """Answers a received method call (used by test doubles of a service)."""
        _, data = self._build(RETURN, NO_REPLY_EXPECTED,
                              [(F_REPLY_SERIAL, "u", call.serial), (F_DEST, "s", call.fields.get(F_SENDER))],
                              sig, args)
        self._send(data)

    def send_error(self, call, name, message):
        _, data = self._build(ERROR, NO_REPLY_EXPECTED,
                              [(F_ERROR, "s", name), (F_REPLY_SERIAL, "u", call.serial),
                               (F_DEST, "s", call.fields.get(F_SENDER))], "s", [message])
        self._send(data)

    def emit_signal(self, path, iface, member, sig="", args=()):
        _, data = self._build(SIGNAL, NO_REPLY_EXPECTED,
                              [(F_PATH, "o", path), (F_INTERFACE, "s", iface), (F_MEMBER, "s", member)], sig, args)
        self._send(data)

    def pump(self, timeout):
        """Waits up to `timeout` s for data, then handles every complete message."""
        readable, _, _ = select.select([self.sock], [], [], max(timeout, 0))
        if readable:
            self._receive()

    def wait_reply(self, serial, timeout=60):
        deadline = time.monotonic() + timeout
        while serial not in self.replies:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no reply to call {serial} after {timeout} s")
            self.pump(left)
        return self.replies.pop(serial)

    def wait_until(self, condition, timeout, what="condition"):
        deadline = time.monotonic() + timeout
        while not condition():
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{what} not reached after {timeout} s")
            self.pump(min(left, 0.2))

    def call(self, dest, path, iface, member, sig="", args=(), timeout=60):
        return self.wait_reply(self.send_call(dest, path, iface, member, sig, args), timeout).check()

    def add_match(self, rule):
        self.call(BUS, BUS_PATH, BUS, "AddMatch", "s", [rule])
