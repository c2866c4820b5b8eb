"""The WebSocket byte stream under an AMQP or MQTT connection: the socket's
protocol (WebSocketProtocol, over the Cython frame reader) and the transport
the connection sees (WebSocketTransport: each write one binary frame)."""
import asyncio
import logging

from lavinmq.websocket._ws import CLOSE_NORMAL, WebSocketCore, frame_header

CLOSE_GOING_AWAY = 1001

log = logging.getLogger("lavinmq.websocket")

OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 2, 8, 9, 10


class WebSocketTransport(asyncio.Transport):
    """What the AMQP/MQTT connection writes to and closes."""

    def __init__(self, ws):
        super().__init__()
        self._ws = ws
        self._real = ws.real

    def write(self, data):
        if self._ws.closing or not data:
            return
        self._real.writelines((frame_header(OP_BINARY, len(data)), data))

    def writelines(self, chunks):
        self.write(b"".join(chunks))

    def close(self):
        self._ws.close(CLOSE_NORMAL, b"")

    def abort(self):
        self._ws.closing = True
        self._real.abort()

    def is_closing(self):
        return self._ws.closing or self._real.is_closing()

    def pause_reading(self):
        self._real.pause_reading()

    def resume_reading(self):
        self._real.resume_reading()

    def is_reading(self):
        return self._real.is_reading()

    def get_write_buffer_size(self):
        return self._real.get_write_buffer_size()

    def set_write_buffer_limits(self, high=None, low=None):
        self._real.set_write_buffer_limits(high, low)

    def get_extra_info(self, name, default=None):
        return self._real.get_extra_info(name, default)

    def get_protocol(self):
        return self._ws.inner

    def set_protocol(self, protocol):
        self._ws.inner = protocol


class WebSocketProtocol(WebSocketCore, asyncio.BufferedProtocol):
    """The socket's protocol once the handshake is done. `http` is aiohttp's
    handler that had the socket: told when it closes, so that it gives back
    its connection slot and its request ends."""

    def __init__(self, real, inner, http, done):
        self.real = real
        self.inner = inner
        self.http = http
        self.done = done
        self.closing = False

    def start(self, tail=b""):
        self.inner.connection_made(WebSocketTransport(self))
        if tail:
            mv = memoryview(self.get_buffer(len(tail)))
            mv[:len(tail)] = tail
            self.buffer_updated(len(tail))

    # the socket's side
    def pause_writing(self):
        self.inner.pause_writing()

    def resume_writing(self):
        self.inner.resume_writing()

    def eof_received(self):
        return False

    def connection_lost(self, exc):
        self.stopped = True
        self.closing = True
        try:
            self.inner.connection_lost(exc)
        finally:
            try:
                self.http.connection_lost(exc)
            finally:
                if not self.done.done():
                    self.done.set_result(None)

    # frames
    def on_control(self, opcode, payload):
        if opcode == OP_PING:
            if not self.closing:
                self.real.writelines((frame_header(OP_PONG, len(payload)), payload))
        elif opcode == OP_CLOSE:
            # the peer closes: answer with its status, as RFC 6455 5.5.1 asks
            self.stopped = True
            self.close(int.from_bytes(payload[:2], "big") if len(payload) >= 2 else CLOSE_NORMAL, b"")

    def protocol_error(self, code, reason):
        log.info("WebSocket %s closed: %s", self.real.get_extra_info("peername"), reason)
        self.close(code, reason.encode()[:120])

    def shutdown(self):
        """The broker stops: the connection says so in its protocol, then
        the WebSocket closes (1001, going away)."""
        try:
            self.inner.close()
        finally:
            self.close(CLOSE_GOING_AWAY, b"broker shutdown")

    def close(self, code, reason):
        if self.closing:
            return
        self.closing = True
        payload = code.to_bytes(2, "big") + reason
        self.real.writelines((frame_header(OP_CLOSE, len(payload)), payload))
        self.real.close()
