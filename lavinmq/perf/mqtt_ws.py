"""MQTT over WebSocket for the load generator (ws:// and wss:// URIs): the
handshake, then each write goes out as one masked binary frame and the
server's frames (one per broker flush) are unwrapped per read. The mask key
is zero, which RFC 6455 allows a client to pick and makes masking a no-op:
this is a load generator, and what it measures is the broker."""
import asyncio
import base64
import os
import struct


class _Transport:
    def __init__(self, real):
        self.real = real

    def write(self, data):
        n = len(data)
        if n < 126:
            head = struct.pack(">BB", 0x82, 0x80 | n)
        elif n < 65536:
            head = struct.pack(">BBH", 0x82, 0x80 | 126, n)
        else:
            head = struct.pack(">BBQ", 0x82, 0x80 | 127, n)
        self.real.writelines((head, b"\x00\x00\x00\x00", data))

    def close(self):
        self.real.close()

    def abort(self):
        self.real.abort()

    def is_closing(self):
        return self.real.is_closing()

    def get_write_buffer_size(self):
        return self.real.get_write_buffer_size()

    def pause_reading(self):
        self.real.pause_reading()

    def resume_reading(self):
        self.real.resume_reading()


class _WSProtocol(asyncio.Protocol):
    def __init__(self, inner_cls, handshake_done):
        self.inner = inner_cls()
        self.done = handshake_done
        self.buf = b""
        self.upgraded = False

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.buf += data
        if not self.upgraded:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head, self.buf = self.buf[:end], self.buf[end + 4:]
            if not head.startswith(b"HTTP/1.1 101"):
                self.done.set_exception(ConnectionError(head.split(b"\r\n")[0].decode(errors="replace")))
                return
            self.upgraded = True
            self.inner.connection_made(_Transport(self.transport))
            self.done.set_result(None)
        out = []
        pos, n = 0, len(self.buf)
        while n - pos >= 2:
            b1 = self.buf[pos + 1] & 0x7f
            off = 2
            if b1 == 126:
                if n - pos < 4:
                    break
                b1 = struct.unpack_from(">H", self.buf, pos + 2)[0]
                off = 4
            elif b1 == 127:
                if n - pos < 10:
                    break
                b1 = struct.unpack_from(">Q", self.buf, pos + 2)[0]
                off = 10
            if n - pos < off + b1:
                break
            if self.buf[pos] & 0x0f in (0, 2):
                out.append(self.buf[pos + off:pos + off + b1])
            pos += off + b1
        self.buf = self.buf[pos:]
        if out:
            self.inner.data_received(b"".join(out))

    def pause_writing(self):
        self.inner.pause_writing()

    def resume_writing(self):
        self.inner.resume_writing()

    def connection_lost(self, exc):
        self.inner.connection_lost(exc)


async def open_websocket(inner_cls, target, ssl_context):
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    transport, proto = await loop.create_connection(lambda: _WSProtocol(inner_cls, done), target["host"],
                                                    target["port"], ssl=ssl_context)
    key = base64.b64encode(os.urandom(16)).decode()
    transport.write((f"GET {target['path']} HTTP/1.1\r\nHost: {target['host']}:{target['port']}\r\n"
                     f"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                     f"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: mqtt\r\n\r\n").encode())
    await asyncio.wait_for(done, 10)
    return transport, proto.inner
