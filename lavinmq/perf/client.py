"""A small asyncio AMQP client for the load generator. Incoming frames go
through the Cython FrameScanner, so deliveries and confirms are counted
without a Python object per frame; other methods resolve waiting calls."""
import asyncio
import struct
import urllib.parse

from lavinmq._core.codec import decode_method, encode_method_frame
from lavinmq._core.perfscan import FrameScanner

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"


class AMQPClosed(Exception):
    def __init__(self, code, text):
        super().__init__(f"{code} {text}")
        self.code = code
        self.text = text


def parse_uri(uri):
    u = urllib.parse.urlparse(uri)
    if u.scheme not in ("amqp", ""):
        raise ValueError(f"unsupported URI scheme {u.scheme!r} (amqp:// only)")
    vhost = urllib.parse.unquote(u.path[1:]) if len(u.path) > 1 else "/"
    return (u.hostname or "127.0.0.1", u.port or 5672, urllib.parse.unquote(u.username or "guest"),
            urllib.parse.unquote(u.password or "guest"), vhost)


class Client(asyncio.Protocol):
    def __init__(self):
        self.scanner = FrameScanner()
        self.transport = None
        self.waiters = {}          # channel -> list of futures awaiting a method
        self.closed = asyncio.get_running_loop().create_future()
        self.frame_max = 131072
        self.paused = False
        self.resume = None
        self.on_progress = None    # called after each read batch (deliveries/confirms moved)

    @classmethod
    async def connect(cls, uri):
        host, port, user, password, vhost = parse_uri(uri)
        loop = asyncio.get_running_loop()
        _, self = await loop.create_connection(cls, host, port)
        self.transport.write(PROTOCOL_HEADER)
        await self.wait(0, (10, 10))
        resp = b"\x00" + user.encode() + b"\x00" + password.encode()
        self.send(0, 10, 11, ({"product": "lavinmqperf", "capabilities": {"consumer_cancel_notify": True}},
                              "PLAIN", resp, "en_US"))
        tune = await self.wait(0, (10, 30))
        self.frame_max = min(tune[1] or 131072, 131072)
        self.send(0, 10, 31, (tune[0], self.frame_max, 0))
        self.send(0, 10, 40, (vhost, "", False))
        await self.wait(0, (10, 41))
        return self

    # -- protocol --------------------------------------------------------------

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        for ch, cid, mid, payload in self.scanner.feed(data):
            args = decode_method(cid, mid, payload)
            if (cid, mid) in ((10, 50), (20, 40)):
                exc = AMQPClosed(args[0], args[1])
                if cid == 10:
                    self.send(0, 10, 51)
                    self._fail(exc)
                else:
                    self.send(ch, 20, 41)
                    self._fail(exc, ch)
                continue
            for fut in self.waiters.get(ch, ()):
                if not fut.done() and (cid, mid) in fut.kinds:
                    fut.set_result(args)
                    self.waiters[ch].remove(fut)
                    break
        if self.on_progress is not None:
            self.on_progress()

    def connection_lost(self, exc):
        self._fail(AMQPClosed(320, "connection lost"))

    def _fail(self, exc, channel=None):
        for ch, futs in self.waiters.items():
            if channel is None or ch == channel:
                for fut in futs:
                    if not fut.done():
                        fut.set_exception(exc)
        if channel is None and not self.closed.done():
            self.closed.set_result(exc)

    def pause_writing(self):
        self.paused = True
        self.resume = asyncio.get_running_loop().create_future()

    def resume_writing(self):
        self.paused = False
        if self.resume and not self.resume.done():
            self.resume.set_result(None)

    async def drain(self):
        if self.paused:
            await self.resume

    # -- calls -------------------------------------------------------------------

    def send(self, ch, class_id, method_id, args=()):
        self.transport.write(encode_method_frame(ch, class_id, method_id, tuple(args)))

    def wait(self, ch, *kinds):
        fut = asyncio.get_running_loop().create_future()
        fut.kinds = kinds
        self.waiters.setdefault(ch, []).append(fut)
        return fut

    async def call(self, ch, class_id, method_id, args, reply):
        fut = self.wait(ch, reply)
        self.send(ch, class_id, method_id, args)
        return await fut

    async def open_channel(self, ch=1):
        await self.call(ch, 20, 10, ("",), (20, 11))

    async def close(self):
        if self.transport.is_closing():
            return
        fut = self.wait(0, (10, 51))
        self.send(0, 10, 50, (200, "bye", 0, 0))
        try:
            await asyncio.wait_for(fut, 5)
        except (asyncio.TimeoutError, AMQPClosed):
            pass
        self.transport.close()


def publish_frames(channel, exchange, routing_key, body, persistent=False, frame_max=131072):
    """One basic.publish (method, header, body frames) as bytes, built once
    and written many times."""
    out = [encode_method_frame(channel, 60, 40, (0, exchange, routing_key, False, False))]
    flags = 0x1000 if persistent else 0
    props = struct.pack(">H", flags) + (b"\x02" if persistent else b"")
    hdr = struct.pack(">HHQ", 60, 0, len(body)) + props
    out.append(struct.pack(">BHI", 2, channel, len(hdr)) + hdr + b"\xce")
    step = frame_max - 8
    for i in range(0, len(body), step):
        chunk = body[i:i + step]
        out.append(struct.pack(">BHI", 3, channel, len(chunk)) + chunk + b"\xce")
    return b"".join(out)


def ack_frame(channel, tag, multiple=True):
    return struct.pack(">BHIHHQB", 1, channel, 13, 60, 80, tag, 1 if multiple else 0) + b"\xce"
