"""One connected spell of a shovel to an HTTP destination: each message is
POSTed, in order, as LavinMQ's docs/shovels.md maps it:

    body                the message body
    Content-Type        the content_type property, when set
    X-Message-Id        the message_id property, when set
    X-<header>          one per AMQP header (tables and arrays as JSON)
    X-Shovel            the shovel's name
    User-Agent          LavinMQ
    path                dest-uri's path, else the uri_path header, else /
    Basic auth          dest-uri's user info

The source delivery is acked only after a 2xx answer (in small batches).
Any other answer, a timeout or a refused connection ends the spell: what
was not acked stays at the source, the shovel shows the error and tries
again after reconnect-delay (LavinMQ 2.9 drops the message instead). With
ack-mode no-ack nothing is acked and a failed POST loses that message, as
no-ack asks."""
import asyncio
import collections
import logging
import urllib.parse

import aiohttp
import orjson

from lavinmq._core.codec import decode_properties
from lavinmq._core.relay import Relay
from lavinmq.client.connection import ClientError, ConnectionClosed, connect
from lavinmq.client.session import CH
from lavinmq.client.uri import scrub
from lavinmq.shovel.amqp_session import CONSUMER_TAG, AMQPSession

log = logging.getLogger("lavinmq.shovel")

ACK_EVERY = 100             # acks are sent at least this often while POSTs succeed
MAX_PENDING = 1000          # read messages waiting for their POST before the source is paused (no-ack)
CONNECT_TIMEOUT = 10
REQUEST_TIMEOUT = 30


def header_value(value):
    """An AMQP header value as one line of HTTP header text."""
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value).decode("utf-8", "replace")
    elif isinstance(value, (dict, list, tuple)):
        value = orjson.dumps(value, default=str).decode()
    elif isinstance(value, bool):
        value = "true" if value else "false"
    else:
        value = str(value)
    return value.replace("\r", " ").replace("\n", " ")


def header_name(key):
    # a header name is a token: characters outside it would make the request invalid
    return "".join(c if c.isalnum() or c in "!#$%&'*+-.^_`|~" else "-" for c in str(key))


class HTTPSession(AMQPSession):
    def __init__(self, shovel, src_uri, dest_uri):
        super().__init__(shovel, src_uri, dest_uri)
        parts = urllib.parse.urlsplit(dest_uri)
        self.auth = None
        if parts.username is not None:
            self.auth = aiohttp.BasicAuth(urllib.parse.unquote(parts.username),
                                          urllib.parse.unquote(parts.password or ""))
        netloc = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
        if parts.port:
            netloc += f":{parts.port}"
        self.base = urllib.parse.urlunsplit((parts.scheme, netloc, "", "", ""))
        self.path = parts.path + (f"?{parts.query}" if parts.query else "")
        self.scrubbed = scrub(dest_uri)
        self.pending = collections.deque()
        self.wakeup = asyncio.Event()
        self.http = None
        self.worker = None
        self.last_delivered = 0
        self.source_paused = False

    async def run(self):
        cfg = self.config
        name = self.shovel.name
        self.relay = relay = Relay(CH, CH, 131072, cfg.ack_mode, collect=True)
        relay.max_collect = self.server.config.max_message_size
        self.http = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT, connect=CONNECT_TIMEOUT),
            headers={"User-Agent": "LavinMQ", "X-Shovel": header_value(name)})
        self.src = await connect(self.src_uri, f"Shovel {name} source", self.server, relay.source)
        await self.src.open_channel(CH)
        queue, count = await self._source_queue()
        stop_after = self._stop_after(count)
        if stop_after == 0:
            return True
        relay.stop_after = stop_after or 0
        await self._qos(stop_after)
        self.src.on_read = self._source_read
        self.src.on_method = self._source_method
        self.worker = asyncio.ensure_future(self._post_loop())
        await self._consume(queue)
        try:
            await asyncio.wait([self.src.closed, self.outcome, self.worker], return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not self.worker.done():
                self.worker.cancel()
        if self.outcome.done():
            return self.outcome.result()
        if self.worker.done() and not self.worker.cancelled() and self.worker.exception() is not None:
            raise self.worker.exception()
        if self.src.closed.done():
            raise self.src.closed.result()
        raise ConnectionClosed("connection lost")

    def _source_read(self):
        batch = self.relay.take_messages()
        if batch:
            self.pending.extend(batch)
            self.wakeup.set()
            if len(self.pending) >= MAX_PENDING and not self.source_paused:
                self.source_paused = True
                self._pause_source()

    async def _post_loop(self):
        relay = self.relay
        since_ack = 0
        while True:
            if not self.pending:
                self._ack(relay)
                since_ack = 0
                if relay.done:
                    if not self.outcome.done():
                        self.outcome.set_result(True)
                    return
                self.wakeup.clear()
                await self.wakeup.wait()
                continue
            tag, redelivered, exchange, routing_key, props, body = self.pending[0]
            try:
                await self._post(decode_properties(props), body)
            except ClientError:
                self._ack(relay)
                raise
            self.pending.popleft()
            if self.source_paused and len(self.pending) < MAX_PENDING // 2:
                self.source_paused = False
                self._resume_source()
            self.shovel.message_count += 1
            self.last_delivered = tag
            since_ack += 1
            if since_ack >= ACK_EVERY:
                self._ack(relay)
                since_ack = 0

    def _ack(self, relay):
        tag = self.last_delivered
        if tag and self.config.ack_mode != "no-ack" and not self.src.closed.done():
            relay.ack_upto(tag)
            self._flush_acks()

    async def _post(self, props, body):
        headers = {}
        if props.get("content_type") is not None:
            headers["Content-Type"] = header_value(props["content_type"])
        if props.get("message_id") is not None:
            headers["X-Message-Id"] = header_value(props["message_id"])
        amqp_headers = props.get("headers") or {}
        for key, value in amqp_headers.items():
            headers["X-" + header_name(key)] = header_value(value)
        path = self.path
        if not path:
            path = amqp_headers.get("uri_path") or "/"
            if isinstance(path, bytes):
                path = path.decode("utf-8", "replace")
            path = str(path)
            if not path.startswith("/"):
                path = "/" + path
        try:
            async with self.http.post(self.base + path, data=body, headers=headers, auth=self.auth,
                                      allow_redirects=False) as resp:
                resp.release()      # the answer's body is not read: its size is the endpoint's to choose
                if not 200 <= resp.status < 300:
                    raise ClientError(f"{self.scrubbed} answered {resp.status} {resp.reason or ''}".rstrip())
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError) as exc:
            text = "timed out" if isinstance(exc, asyncio.TimeoutError) else (str(exc) or type(exc).__name__)
            raise ClientError(f"POST to {self.scrubbed} failed: {text}") from None

    async def close(self, graceful, timeout=5.0):
        if graceful and self.consuming and self.src is not None and not self.src.closed.done():
            self.consuming = False
            try:
                async with asyncio.timeout(timeout):
                    await self.src.cancel(CH, CONSUMER_TAG)
                    # what was read before cancel-ok is POSTed and acked, if in time
                    while self.pending and self.worker is not None and not self.worker.done():
                        await asyncio.sleep(0.02)
            except (ClientError, asyncio.TimeoutError):
                pass
        if self.worker is not None and not self.worker.done():
            self.worker.cancel()
        if self.relay is not None and self.src is not None:
            self._ack(self.relay)
        if self.src is not None:
            if graceful and not self.src.closed.done():
                await self.src.close(timeout=min(timeout, 2.0))
            elif self.src.transport is not None:
                self.src.abort(ConnectionClosed("closed", 200))
        if self.http is not None:
            await self.http.close()
