"""A small asyncio AMQP 0-9-1 client for shovels and federation links.

Reads go to a FrameReader from lavinmq._core.relay, which walks every frame
of a read in one call: a plain reader hands the method frames up (they are
decoded here by _core's codec); a Relay's readers consume deliveries and
confirms themselves and hand up only the rest. After each read the owner's
on_read hook runs once, so the message path costs Python one call per read
batch, not one per message."""
import asyncio
import logging
import platform
import socket

import lavinmq
from lavinmq._core.codec import decode_method, encode_method_frame
from lavinmq._core.relay import FrameReader
from lavinmq.client.uri import parse

log = logging.getLogger("lavinmq.client")

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
HEARTBEAT_FRAME = b"\x08\x00\x00\x00\x00\x00\x00\xce"
OUR_FRAME_MAX = 131072
CLOSE_TIMEOUT = 5.0


class ClientError(Exception):
    """The peer closed the connection or a channel (code and text are the
    peer's), or the connection failed."""

    def __init__(self, text, code=0, class_id=0, method_id=0):
        super().__init__(text)
        self.text = text
        self.code = code
        self.class_id = class_id
        self.method_id = method_id


class ChannelClosed(ClientError):
    pass


class ConnectionClosed(ClientError):
    pass


def describe(exc):
    """An error as the API shows it."""
    if isinstance(exc, ClientError):
        return str(exc)
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return "timed out"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, OSError):
        return exc.strerror or str(exc) or type(exc).__name__
    return str(exc) or type(exc).__name__


class Connection(asyncio.Protocol):
    """One client connection. Methods the owner did not wait for (a
    server-sent basic.cancel, connection.blocked ...) go to on_method."""

    def __init__(self, name, reader=None):
        self.name = name
        self.reader = reader if reader is not None else FrameReader()
        self.transport = None
        self.loop = asyncio.get_running_loop()
        self.waiters = {}               # channel -> [future], each with .kinds
        self.closed = self.loop.create_future()     # result: the ClientError that ended it
        self.frame_max = OUR_FRAME_MAX
        self.channel_max = 0
        self.heartbeat = 0
        self.server_properties = {}
        self.on_read = None             # after every read batch
        self.on_method = None           # (channel, class_id, method_id, args) nobody waited for
        self.on_pause = None            # the transport's buffer is full / drained
        self.on_resume = None
        self.blocked = None             # connection.blocked reason, None when not blocked
        self.paused = False
        self.last_recv = self.last_send = self.loop.time()
        self._heartbeat_timer = None
        self._channel_closed = {}       # channel -> ChannelClosed, once closed by the peer

    # -- asyncio.Protocol ------------------------------------------------------------

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.last_recv = self.loop.time()
        try:
            methods = self.reader.feed(data)
            for ch, cid, mid, payload in methods:
                self._dispatch(ch, cid, mid, payload)
            if self.on_read is not None:
                self.on_read()
        except Exception as exc:        # a broken peer, or a bug of ours: this connection ends
            if not isinstance(exc, ClientError):
                log.debug("%s: %r", self.name, exc, exc_info=exc)
            self.abort(exc if isinstance(exc, ClientError) else
                       ConnectionClosed(f"{type(exc).__name__}: {exc}"))

    def connection_lost(self, exc):
        if self._heartbeat_timer is not None:
            self._heartbeat_timer.cancel()
        text = "connection lost" if exc is None else f"connection lost: {describe(exc)}"
        self._fail(ConnectionClosed(text, 320))
        if self.paused:
            self.resume_writing()

    def pause_writing(self):
        self.paused = True
        if self.on_pause is not None:
            self.on_pause()

    def resume_writing(self):
        self.paused = False
        if self.on_resume is not None:
            self.on_resume()

    # -- frames ------------------------------------------------------------------------

    def _dispatch(self, ch, cid, mid, payload):
        args = decode_method(cid, mid, payload)
        if cid == 10 and mid == 50:         # connection.close
            self.write(encode_method_frame(0, 10, 51, ()))
            self._fail(ConnectionClosed(f"{args[0]} {args[1]}", args[0], args[2], args[3]))
            self.transport.close()
            return
        if cid == 20 and mid == 40:         # channel.close
            self.write(encode_method_frame(ch, 20, 41, ()))
            exc = ChannelClosed(f"{args[0]} {args[1]}", args[0], args[2], args[3])
            self._channel_closed[ch] = exc
            self._fail_channel(ch, exc)
            if self.on_method is not None:
                self.on_method(ch, cid, mid, args)
            return
        if cid == 10 and mid == 60:
            self.blocked = args[0] or "blocked"
        elif cid == 10 and mid == 61:
            self.blocked = None
        for fut in self.waiters.get(ch, ()):
            if not fut.done() and (cid, mid) in fut.kinds:
                self.waiters[ch].remove(fut)
                fut.set_result(args)
                return
        if self.on_method is not None:
            self.on_method(ch, cid, mid, args)

    def _fail_channel(self, ch, exc):
        for fut in self.waiters.pop(ch, ()):
            if not fut.done():
                fut.set_exception(exc)

    def _fail(self, exc):
        for ch in list(self.waiters):
            self._fail_channel(ch, exc)
        if not self.closed.done():
            self.closed.set_result(exc)

    def write(self, data):
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)
            self.last_send = self.loop.time()

    def send(self, ch, class_id, method_id, args=()):
        self.write(encode_method_frame(ch, class_id, method_id, tuple(args)))

    def wait(self, ch, *kinds):
        if self.closed.done():
            raise self.closed.result()
        if ch in self._channel_closed:
            raise self._channel_closed[ch]
        fut = self.loop.create_future()
        fut.kinds = kinds
        self.waiters.setdefault(ch, []).append(fut)
        return fut

    async def call(self, ch, class_id, method_id, args, *replies):
        fut = self.wait(ch, *replies)
        self.send(ch, class_id, method_id, args)
        return await fut

    def abort(self, exc):
        self._fail(exc)
        if self.transport is not None:
            self.transport.abort()

    # -- handshake -------------------------------------------------------------------------

    async def handshake(self, uri):
        start = self.wait(0, (10, 10))
        self.write(PROTOCOL_HEADER)
        try:
            _, _, self.server_properties, mechanisms, _ = await start
        except ConnectionClosed:
            raise ConnectionClosed("the server closed the connection before connection.start "
                                   "(not an AMQP 0-9-1 server?)") from None
        offered = mechanisms.split()
        caps = {"publisher_confirms": True, "consumer_cancel_notify": True, "basic.nack": True,
                "connection.blocked": True, "authentication_failure_close": True,
                "exchange_exchange_bindings": True, "per_consumer_qos": True}
        props = {"product": "LavinMQ", "version": lavinmq.__version__,
                 "platform": f"Python {platform.python_version()}", "capabilities": caps,
                 "connection_name": uri.params.get("name") or self.name}
        if b"PLAIN" in offered:
            mechanism, response = "PLAIN", b"\x00" + uri.user.encode() + b"\x00" + uri.password.encode()
        elif b"AMQPLAIN" in offered:
            from lavinmq._core.codec import encode_table_bytes
            mechanism = "AMQPLAIN"
            response = encode_table_bytes({"LOGIN": uri.user, "PASSWORD": uri.password})[4:]
        else:
            raise ConnectionClosed(f"the server offers no password mechanism ({mechanisms.decode(errors='replace')})")
        tune = self.wait(0, (10, 30))
        self.send(0, 10, 11, (props, mechanism, response, "en_US"))
        try:
            channel_max, frame_max, heartbeat = await tune
        except ConnectionClosed as exc:
            if exc.code:
                raise
            raise ConnectionClosed(f"login as {uri.user!r} refused (the server closed the connection)",
                                   403) from None
        want_frame_max = uri.int_param("frame_max", OUR_FRAME_MAX, 4096)
        self.frame_max = min(frame_max or want_frame_max, want_frame_max)
        want_channels = uri.int_param("channel_max", 0, 0, 65535)
        self.channel_max = min(x for x in (channel_max, want_channels, 65535) if x)
        # in-process connections cannot go silent: no heartbeats there
        want_heartbeat = 0 if uri.local else uri.int_param("heartbeat", 60, 0, 65535)
        self.heartbeat = min(heartbeat, want_heartbeat) if heartbeat and want_heartbeat else 0
        self.reader.frame_max = self.frame_max + 4096
        self.send(0, 10, 31, (self.channel_max, self.frame_max, self.heartbeat))
        await self.call(0, 10, 40, (uri.vhost, "", False), (10, 41))
        if self.heartbeat:
            self._arm_heartbeat()

    def _arm_heartbeat(self):
        self._heartbeat_timer = self.loop.call_later(self.heartbeat / 2, self._check_heartbeat)

    def _check_heartbeat(self):
        now = self.loop.time()
        if now - self.last_recv > 2 * self.heartbeat:
            self.abort(ConnectionClosed(f"no heartbeat from the server in {2 * self.heartbeat} s", 320))
            return
        if now - self.last_send >= self.heartbeat / 2:
            self.write(HEARTBEAT_FRAME)
        self._arm_heartbeat()

    # -- channels and the methods links use ---------------------------------------------

    async def open_channel(self, ch=1):
        self._channel_closed.pop(ch, None)
        await self.call(ch, 20, 10, ("",), (20, 11))

    async def close_channel(self, ch):
        if ch in self._channel_closed:
            return
        try:
            await asyncio.wait_for(self.call(ch, 20, 40, (200, "", 0, 0), (20, 41)), CLOSE_TIMEOUT)
        except (ClientError, asyncio.TimeoutError):
            pass

    async def queue_declare(self, ch, name, passive=False, durable=True, exclusive=False, auto_delete=False,
                            arguments=None):
        """-> (queue name, message count, consumer count)"""
        return await self.call(ch, 50, 10, (0, name, passive, durable, exclusive, auto_delete, False,
                                            arguments or {}), (50, 11))

    async def queue_bind(self, ch, queue, exchange, routing_key, arguments=None):
        await self.call(ch, 50, 20, (0, queue, exchange, routing_key, False, arguments or {}), (50, 21))

    async def queue_delete(self, ch, queue):
        await self.call(ch, 50, 40, (0, queue, False, False, False), (50, 41))

    async def exchange_declare(self, ch, name, type_name, passive=False, durable=True, auto_delete=False,
                               internal=False, arguments=None):
        await self.call(ch, 40, 10, (0, name, type_name, passive, durable, auto_delete, internal, False,
                                     arguments or {}), (40, 11))

    async def exchange_delete(self, ch, name):
        await self.call(ch, 40, 20, (0, name, False, False), (40, 21))

    async def exchange_bind(self, ch, destination, source, routing_key, arguments=None):
        await self.call(ch, 40, 30, (0, destination, source, routing_key, False, arguments or {}), (40, 31))

    async def exchange_unbind(self, ch, destination, source, routing_key, arguments=None):
        await self.call(ch, 40, 40, (0, destination, source, routing_key, False, arguments or {}), (40, 51))

    async def qos(self, ch, prefetch_count):
        await self.call(ch, 60, 10, (0, prefetch_count, False), (60, 11))

    async def confirm_select(self, ch):
        await self.call(ch, 85, 10, (False,), (85, 11))

    async def consume(self, ch, queue, tag, no_ack=False, exclusive=False, arguments=None):
        (tag,) = await self.call(ch, 60, 20, (0, queue, tag, False, no_ack, exclusive, False, arguments or {}),
                                 (60, 21))
        return tag

    async def cancel(self, ch, tag):
        await self.call(ch, 60, 30, (tag, False), (60, 31))

    def close_now(self):
        """connection.close and the socket closed after what is buffered
        (acks) has gone out; no wait for close-ok."""
        if self.transport is None or self.transport.is_closing():
            return
        if not self.closed.done():
            self.send(0, 10, 50, (200, "OK", 0, 0))
        self._fail(ConnectionClosed("closed", 200))
        self.transport.close()

    async def close(self, timeout=CLOSE_TIMEOUT):
        """connection.close, waiting (a while) for close-ok."""
        if self.transport is None or self.transport.is_closing():
            return
        if not self.closed.done():
            fut = self.wait(0, (10, 51))
            self.send(0, 10, 50, (200, "OK", 0, 0))
            try:
                await asyncio.wait_for(fut, timeout)
            except (ClientError, asyncio.TimeoutError):
                pass
        self._fail(ConnectionClosed("closed", 200))
        self.transport.close()


async def connect(uri, name, server=None, reader=None):
    """Open and log in. uri: an AMQP URI string (or AMQPURI); server: this
    broker, for a URI without a host; reader: a Relay's reader, which reads
    the connection from its first byte."""
    if isinstance(uri, str):
        uri = parse(uri)
    loop = asyncio.get_running_loop()
    timeout = uri.connect_timeout
    conn = None
    try:
        async with asyncio.timeout(timeout):
            if uri.local:
                if server is None:
                    raise ConnectionClosed("a URI without a host names this broker, which is not here")
                from lavinmq.client.direct import open_direct
                conn = await open_direct(server, lambda: Connection(name, reader), name)
            else:
                ctx = uri.ssl_context()
                _, conn = await loop.create_connection(
                    lambda: Connection(name, reader), uri.host, uri.port, ssl=ctx,
                    server_hostname=(uri.params.get("server_name_indication") or uri.host) if ctx else None)
                sock = conn.transport.get_extra_info("socket")
                if sock is not None:
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await conn.handshake(uri)
    except BaseException as exc:
        if conn is not None and conn.transport is not None:
            conn.transport.abort()
        if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
            raise ConnectionClosed(f"{uri.scrubbed()}: no connection within {timeout:g} s") from None
        if isinstance(exc, OSError):
            raise ConnectionClosed(f"{uri.scrubbed()}: {describe(exc)}") from None
        raise
    return conn
