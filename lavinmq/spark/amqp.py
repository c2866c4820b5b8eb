"""A small blocking AMQP 0-9-1 client for Spark workers: what reading a
stream and publishing with confirms need, nothing more. Deliveries are
decoded in bulk by the Cython DeliveryDecoder into Arrow columns; this module
only speaks the control methods (a handful per task). It does not import the
broker: a Spark worker needs lavinmq installed, not running."""
import datetime
import decimal
import socket
import struct
import time
import urllib.parse

FRAME_END = b"\xce"


class AMQPError(Exception):
    def __init__(self, code, text, class_id=0, method_id=0):
        super().__init__(f"{code} {text}")
        self.code = code
        self.text = text
        self.class_id = class_id
        self.method_id = method_id


# -- encoding ---------------------------------------------------------------------

def shortstr(s):
    b = s.encode() if isinstance(s, str) else bytes(s)
    if len(b) > 255:
        raise ValueError(f"{s!r} is longer than 255 bytes")
    return bytes((len(b),)) + b


def longstr(s):
    b = s.encode() if isinstance(s, str) else bytes(s)
    return struct.pack(">I", len(b)) + b


def value(v):
    if v is None:
        return b"V"
    if isinstance(v, bool):
        return b"t" + (b"\x01" if v else b"\x00")
    if isinstance(v, int):
        return b"l" + struct.pack(">q", v)
    if isinstance(v, float):
        return b"d" + struct.pack(">d", v)
    if isinstance(v, decimal.Decimal):
        sign, digits, exp = v.as_tuple()
        scale = max(0, -exp)
        return b"D" + struct.pack(">Bi", scale, int(v.scaleb(scale)))
    if isinstance(v, str):
        return b"S" + longstr(v)
    if isinstance(v, (bytes, bytearray)):
        return b"x" + longstr(v)
    if isinstance(v, datetime.datetime):
        return b"T" + struct.pack(">Q", int(v.timestamp()))
    if isinstance(v, dict):
        return b"F" + table(v)
    if isinstance(v, (list, tuple)):
        body = b"".join(value(x) for x in v)
        return b"A" + struct.pack(">I", len(body)) + body
    raise TypeError(f"cannot put {type(v).__name__} in an AMQP table")


def table(d):
    body = b"".join(shortstr(k) + value(v) for k, v in (d or {}).items())
    return struct.pack(">I", len(body)) + body


def method_frame(channel, class_id, method_id, args=b""):
    payload = struct.pack(">HH", class_id, method_id) + args
    return struct.pack(">BHI", 1, channel, len(payload)) + payload + FRAME_END


def bits(*flags):
    return bytes((sum(1 << i for i, f in enumerate(flags) if f),))


def publish_frames(channel, exchange, routing_key, body, properties=b"\x00\x00", frame_max=131072):
    """One basic.publish; properties: an encoded property list (flags first)."""
    out = [method_frame(channel, 60, 40, b"\x00\x00" + shortstr(exchange) + shortstr(routing_key) + b"\x00")]
    hdr = struct.pack(">HHQ", 60, 0, len(body)) + properties
    out.append(struct.pack(">BHI", 2, channel, len(hdr)) + hdr + FRAME_END)
    step = frame_max - 8
    for i in range(0, len(body), step):
        chunk = body[i:i + step]
        out.append(struct.pack(">BHI", 3, channel, len(chunk)) + chunk + FRAME_END)
    return b"".join(out)


def properties(content_type=None, headers=None, delivery_mode=None, message_id=None):
    """A property list with the few properties the tools here set."""
    flags, parts = 0, []
    if content_type is not None:
        flags |= 0x8000
        parts.append(shortstr(content_type))
    if headers:
        flags |= 0x2000
        parts.append(table(headers))
    if delivery_mode is not None:
        flags |= 0x1000
        parts.append(bytes((delivery_mode,)))
    if message_id is not None:
        flags |= 0x0080
        parts.append(shortstr(message_id))
    return struct.pack(">H", flags) + b"".join(parts)


# -- decoding the few replies we look at ---------------------------------------------

def read_shortstr(p, pos):
    n = p[pos]
    return p[pos + 1:pos + 1 + n].decode("utf-8", "replace"), pos + 1 + n


def read_value(p, pos):
    """One field-table value at pos -> (value, pos after it). The types
    RabbitMQ's and our brokers put in server properties, and the rest of
    the 0-9-1 table types, read plainly."""
    kind = p[pos:pos + 1]
    pos += 1
    if kind == b"S" or kind == b"x":
        n = struct.unpack_from(">I", p, pos)[0]
        raw = p[pos + 4:pos + 4 + n]
        return (raw.decode("utf-8", "replace") if kind == b"S" else bytes(raw)), pos + 4 + n
    if kind == b"F":
        return read_table(p, pos)
    if kind == b"A":
        n = struct.unpack_from(">I", p, pos)[0]
        end, pos, out = pos + 4 + n, pos + 4, []
        while pos < end:
            v, pos = read_value(p, pos)
            out.append(v)
        return out, end
    if kind == b"t":
        return p[pos] != 0, pos + 1
    if kind == b"V":
        return None, pos
    if kind == b"D":
        scale, unscaled = struct.unpack_from(">Bi", p, pos)
        return decimal.Decimal(unscaled).scaleb(-scale), pos + 5
    # RabbitMQ's reading of the types (its errata: "s" is a short int)
    fmt = {b"b": ">b", b"B": ">B", b"s": ">h", b"U": ">h", b"u": ">H", b"I": ">i", b"i": ">I", b"L": ">q",
           b"l": ">q", b"f": ">f", b"d": ">d", b"T": ">Q"}.get(kind)
    if fmt is None:
        raise ValueError(f"unknown field type {kind!r}")
    return struct.unpack_from(fmt, p, pos)[0], pos + struct.calcsize(fmt)


def read_table(p, pos):
    n = struct.unpack_from(">I", p, pos)[0]
    end, pos, out = pos + 4 + n, pos + 4, {}
    while pos < end:
        key, pos = read_shortstr(p, pos)
        out[key], pos = read_value(p, pos)
    return out, end


class NotAMQP(ConnectionError):
    """Something listens at the address, but not an AMQP 0-9-1 broker."""


PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
ANSWER_TIMEOUT = 2.0        # s a broker has to answer the protocol header (one answers at once)


def server_properties(uri, timeout=5.0, answer_timeout=ANSWER_TIMEOUT):
    """What the broker at uri says of itself in Connection.Start (product,
    version, platform, information, ...), read before logging in: the
    socket is closed after the first frame, nothing is sent but the
    protocol header. NotAMQP when what answers is not an AMQP 0-9-1 broker:
    another protocol's answer, another AMQP version's header (a broker that
    does not speak 0-9-1 answers with the one it does), or no answer within
    answer_timeout (an HTTP server waits for the rest of a request line)."""
    host, port, *_ = parse_uri(uri)
    where = f"{host}:{port}"
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(PROTOCOL_HEADER)
        buf = b""
        deadline = time.monotonic() + answer_timeout
        while True:
            if len(buf) >= 8 and buf.startswith(b"AMQP"):
                raise NotAMQP(f"{where} answered with the protocol header of {amqp_version(buf[:8])}: "
                              f"a broker of another AMQP version, not 0-9-1")
            if len(buf) >= 7 and not buf.startswith(b"AMQP"):
                if buf[0] != 1:      # not a method frame: another protocol's answer
                    break
                size = struct.unpack_from(">I", buf, 3)[0]
                if len(buf) >= size + 8:
                    break
            left = deadline - time.monotonic()
            try:
                if left <= 0:
                    raise socket.timeout
                sock.settimeout(left)
                chunk = sock.recv(65536)
            except socket.timeout:
                raise NotAMQP(f"{where} did not answer the AMQP protocol header in {answer_timeout:g} s"
                              + (f" (it sent {preview(buf)})" if buf else "")
                              + ": not an AMQP 0-9-1 broker (an HTTP server, or another protocol's?)") from None
            if not chunk:
                raise NotAMQP(f"{where} closed the connection without a Connection.Start"
                              + (f" (it sent {preview(buf)})" if buf else "") + ": not an AMQP 0-9-1 broker")
            buf += chunk
    if buf[0] != 1 or len(buf) < 13 or struct.unpack_from(">HH", buf, 7) != (10, 10):
        what = "a TLS server (this client speaks amqp:// only)" if buf[:2] in (b"\x15\x03", b"\x16\x03") else \
            "not an AMQP 0-9-1 broker"
        raise NotAMQP(f"{where} answered {preview(buf)}, not a Connection.Start: {what}")
    return read_table(buf, 13)[0]      # after the header (7), class/method (4), version (2)


def amqp_version(header):
    """b"AMQP" + protocol id + major, minor, revision -> "AMQP 1.0.0" (and its id)."""
    pid, major, minor, rev = header[4:8]
    kind = {0: "", 2: " over TLS", 3: " (SASL)"}.get(pid, f" (protocol id {pid})")
    return f"AMQP {major}.{minor}.{rev}{kind}" if major else f"AMQP 0-{minor}-{rev}{kind}"


def preview(data, n=40):
    """The first bytes something sent, to show: its first line, printable."""
    line = data[:n].split(b"\r\n")[0].split(b"\n")[0]
    text = "".join(chr(b) if 32 <= b < 127 else f"\\x{b:02x}" for b in line)
    return repr(text + ("..." if len(data) > len(line) else ""))


def parse_uri(uri):
    u = urllib.parse.urlparse(uri)
    if u.scheme not in ("amqp", ""):
        raise ValueError(f"unsupported URI scheme {u.scheme!r} (amqp:// only)")
    vhost = urllib.parse.unquote(u.path[1:]) if len(u.path) > 1 else "/"
    return (u.hostname or "127.0.0.1", u.port or 5672, urllib.parse.unquote(u.username or "guest"),
            urllib.parse.unquote(u.password or "guest"), vhost)


class Connection:
    """One connection with one channel (1)."""

    def __init__(self, uri, timeout=30.0):
        host, port, user, password, vhost = parse_uri(uri)
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.stage = "start"        # the handshake's step (what failed, when it does)
        try:
            self._open(user, password, vhost)
        except BaseException as exc:
            exc.stage = self.stage  # "start", "login", "open" or "channel"
            self.sock.close()
            raise

    def _open(self, user, password, vhost):
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()
        self.replies = []            # method frames not handled yet, for wait()
        self.frame_max = 131072
        self.decoder = None          # a DeliveryDecoder while consuming
        self.confirmed = 0           # publisher confirms: acked up to
        self.nacked = 0
        self.returned = 0            # mandatory publishes that could not be routed
        self.published = 0
        self.sock.sendall(PROTOCOL_HEADER)
        self.wait(0, (10, 10))
        # authentication_failure_close: a refused login is a connection.close
        # 403, not a dropped socket (RabbitMQ drops it for clients without it)
        props = {"product": "lavinmq.spark", "capabilities": {"consumer_cancel_notify": True,
                                                              "publisher_confirms": True,
                                                              "authentication_failure_close": True}}
        self.stage = "login"
        self.send(0, 10, 11, table(props) + shortstr("PLAIN") + longstr(f"\0{user}\0{password}")
                  + shortstr("en_US"))
        tune = self.wait(0, (10, 30))
        channel_max, frame_max, _ = struct.unpack_from(">HIH", tune)
        self.frame_max = min(frame_max or 131072, 131072)
        self.send(0, 10, 31, struct.pack(">HIH", channel_max, self.frame_max, 0))
        self.stage = "open"
        self.send(0, 10, 40, shortstr(vhost) + shortstr("") + b"\x00")
        self.wait(0, (10, 41))
        self.stage = "channel"
        self.send(1, 20, 10, shortstr(""))
        self.wait(1, (20, 11))
        self.stage = "ready"

    # -- frames ------------------------------------------------------------------

    def send(self, channel, class_id, method_id, args=b""):
        self.sock.sendall(method_frame(channel, class_id, method_id, args))

    def _frames(self):
        """Complete frames in the buffer (non-delivery path)."""
        while len(self.buf) >= 8:
            size = struct.unpack_from(">I", self.buf, 3)[0]
            if len(self.buf) < size + 8:
                return
            ftype, ch = self.buf[0], struct.unpack_from(">H", self.buf, 1)[0]
            payload = bytes(self.buf[7:7 + size])
            del self.buf[:size + 8]
            yield ftype, ch, payload

    def recv(self, timeout=None):
        if timeout is not None:
            self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(1 << 20)
        except socket.timeout:
            return False
        finally:
            if timeout is not None:
                self.sock.settimeout(30.0)
        if not data:
            raise AMQPError(320, "connection closed by the broker")
        if self.decoder is not None:
            self.decoder.feed(data)
            for ch, cid, mid, args in self.decoder.others:
                self.method(ch, cid, mid, args)
            self.decoder.others.clear()
        else:
            self.buf += data
            for ftype, ch, payload in self._frames():
                if ftype == 1:
                    self.method(ch, *struct.unpack_from(">HH", payload), payload[4:])
        return True

    def method(self, ch, cid, mid, args):
        """A method frame that came in: errors raise, confirms are counted,
        replies are kept for wait()."""
        if (cid, mid) == (10, 50) or (cid, mid) == (20, 40):
            code = struct.unpack_from(">H", args)[0]
            text, pos = read_shortstr(args, 2)
            cls, meth = struct.unpack_from(">HH", args, pos)
            try:
                self.send(ch, cid, mid + 1)
            except OSError:
                pass
            raise AMQPError(code, text, cls, meth)
        if (cid, mid) == (60, 80):
            tag, multiple = struct.unpack_from(">QB", args)
            self.confirmed = max(self.confirmed, tag)
            return
        if (cid, mid) == (60, 120):
            tag, flags = struct.unpack_from(">QB", args)
            self.nacked += 1
            self.confirmed = max(self.confirmed, tag)
            return
        if (cid, mid) == (60, 50):       # basic.return (its content frames are skipped)
            self.returned += 1
            return
        if (cid, mid) == (60, 30):       # the server cancelled our consumer (queue deleted)
            raise AMQPError(404, "consumer cancelled by the broker: the queue is gone", 60, 30)
        self.replies.append((ch, cid, mid, args))

    def wait(self, channel, kind, timeout=30.0):
        deadline = time.monotonic() + timeout
        while True:
            for i, (ch, cid, mid, args) in enumerate(self.replies):
                if ch == channel and (cid, mid) == kind:
                    del self.replies[i]
                    return args
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no reply {kind} from the broker in {timeout} s")
            self.recv(min(left, 1.0))

    def call(self, class_id, method_id, args, reply):
        self.send(1, class_id, method_id, args)
        return self.wait(1, reply)

    # -- methods -------------------------------------------------------------------

    def declare_queue(self, name, passive=False, durable=True, arguments=None):
        """-> message count."""
        args = self.call(50, 10, b"\x00\x00" + shortstr(name) + bits(passive, durable, False, False, False)
                         + table(arguments), (50, 11))
        _, pos = read_shortstr(args, 0)
        return struct.unpack_from(">I", args, pos)[0]

    def declare_exchange(self, name, type_="fanout", durable=True, arguments=None):
        self.call(40, 10, b"\x00\x00" + shortstr(name) + shortstr(type_) + bits(False, durable, False, False, False)
                  + table(arguments), (40, 11))

    def bind_queue(self, queue, exchange, routing_key=""):
        self.call(50, 20, b"\x00\x00" + shortstr(queue) + shortstr(exchange) + shortstr(routing_key) + b"\x00"
                  + table({}), (50, 21))

    def message_count(self, queue):
        """-> the queue's message count, or None when there is no such queue
        (the broker closes the channel for that: it is opened again)."""
        try:
            return self.declare_queue(queue, passive=True)
        except AMQPError as e:
            if e.code != 404:
                raise
            self.send(1, 20, 10, shortstr(""))
            self.wait(1, (20, 11))
            return None

    def delete_queue(self, name):
        self.call(50, 40, b"\x00\x00" + shortstr(name) + b"\x00", (50, 41))

    def qos(self, prefetch):
        self.call(60, 10, struct.pack(">IHB", 0, prefetch, 0), (60, 11))

    def consume(self, queue, arguments, decoder, tag=""):
        """Deliveries go to decoder (a DeliveryDecoder) from here on."""
        self.send(1, 60, 20, b"\x00\x00" + shortstr(queue) + shortstr(tag) + bits(False, False, False, False)
                  + table(arguments))
        # consume-ok may share a read with the first deliveries: the decoder
        # takes over before it arrives
        self.decoder = decoder
        decoder.feed(bytes(self.buf))
        self.buf.clear()
        args = self.wait(1, (60, 21))
        return read_shortstr(args, 0)[0]

    def cancel(self, tag):
        self.send(1, 60, 30, shortstr(tag) + b"\x00")
        self.wait(1, (60, 31))

    def ack(self, tag, multiple=True):
        self.sock.sendall(method_frame(1, 60, 80, struct.pack(">QB", tag, 1 if multiple else 0)))

    def confirm_select(self):
        self.call(85, 10, b"\x00", (85, 11))

    def wait_confirms(self, upto, timeout=60.0):
        deadline = time.monotonic() + timeout
        while self.confirmed < upto:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"publisher confirms: {upto - self.confirmed} not confirmed in {timeout} s")
            self.recv(min(left, 1.0))

    def close(self):
        try:
            self.send(0, 10, 50, struct.pack(">H", 200) + shortstr("bye") + struct.pack(">HH", 0, 0))
            self.decoder = None
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                try:
                    if not self.recv(0.5):
                        continue
                except AMQPError:
                    break
                if any((cid, mid) == (10, 51) for _, cid, mid, _ in self.replies):
                    break
        except OSError:
            pass
        finally:
            self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
