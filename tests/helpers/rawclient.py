"""A minimal blocking AMQP client over a raw socket, for tests that need to
send exact bytes or push messages faster than pika can. Frames are encoded
with pamqp, an independent codec."""
import socket
import struct

from pamqp import body as pbody, commands, frame, header


class RawClient:
    def __init__(self, host, port, user="guest", password="guest", vhost="/",
                 frame_max=131072, heartbeat=0, handshake=True, capabilities=None, source=None):
        self.sock = socket.create_connection((host, port), timeout=30,
                                             source_address=(source, 0) if source else None)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.frame_max = frame_max
        self.capabilities = {"consumer_cancel_notify": True, **(capabilities or {})}
        if handshake:
            self.handshake(user, password, vhost, heartbeat)

    def handshake(self, user, password, vhost, heartbeat=0):
        self.sock.sendall(b"AMQP\x00\x00\x09\x01")
        self.expect(commands.Connection.Start)
        self.send(0, commands.Connection.StartOk(
            client_properties={"capabilities": self.capabilities},
            mechanism="PLAIN", response=f"\0{user}\0{password}"))
        tune = self.expect(commands.Connection.Tune)
        self.frame_max = min(self.frame_max, tune.frame_max)
        self.send(0, commands.Connection.TuneOk(tune.channel_max, self.frame_max, heartbeat))
        self.send(0, commands.Connection.Open(vhost))
        self.expect(commands.Connection.OpenOk)

    def send(self, channel, *frames):
        self.sock.sendall(b"".join(frame.marshal(f, channel) for f in frames))

    def sendall(self, data):
        self.sock.sendall(data)

    def read_raw_frame(self):
        """-> (type, channel, payload) or None on EOF."""
        while True:
            if len(self.buf) >= 7:
                size = struct.unpack_from(">I", self.buf, 3)[0]
                if len(self.buf) >= size + 8:
                    f, self.buf = self.buf[:size + 8], self.buf[size + 8:]
                    return f[0], struct.unpack_from(">H", f, 1)[0], f[7:-1]
            data = self.sock.recv(1 << 20)
            if not data:
                return None
            self.buf += data

    def read_frame(self):
        """-> (channel, pamqp frame) or None on EOF."""
        while True:
            if len(self.buf) >= 7:
                size = struct.unpack_from(">I", self.buf, 3)[0]
                if len(self.buf) >= size + 8:
                    f, self.buf = self.buf[:size + 8], self.buf[size + 8:]
                    _, ch, value = frame.unmarshal(f)
                    return ch, value
            data = self.sock.recv(1 << 20)
            if not data:
                return None
            self.buf += data

    def expect(self, kind):
        got = self.read_frame()
        assert got is not None, f"connection closed while waiting for {kind.__name__}"
        assert isinstance(got[1], kind), f"expected {kind.__name__}, got {got[1]!r}"
        return got[1]

    def open_channel(self, ch=1):
        self.send(ch, commands.Channel.Open())
        self.expect(commands.Channel.OpenOk)

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def publish_frames(channel, exchange, routing_key, body, properties=None, frame_max=131072):
    """The frames of one basic.publish, as bytes."""
    out = [frame.marshal(commands.Basic.Publish(exchange=exchange, routing_key=routing_key), channel),
           frame.marshal(header.ContentHeader(0, len(body), properties or commands.Basic.Properties()),
                         channel)]
    step = frame_max - 8
    for i in range(0, len(body), step):
        out.append(frame.marshal(pbody.ContentBody(body[i:i + step]), channel))
    return b"".join(out)


def ack_frame(channel, tag, multiple=True):
    return frame.marshal(commands.Basic.Ack(delivery_tag=tag, multiple=multiple), channel)
