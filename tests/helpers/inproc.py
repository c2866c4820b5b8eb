"""The broker's connection without sockets: a server object with a real
vhost and user store, and a transport that collects what the broker
writes. Bytes are fed as the event loop would feed them."""
from lavinmq.auth.users import UserStore
from lavinmq.config import Config
from lavinmq.vhost import VHost


class FakeTransport:
    def __init__(self):
        self.out = bytearray()
        self.writes = 0             # write calls: a pass that answers several acks writes once
        self.closed = False
        self.reading = True
        self.eof_written = False

    def write(self, data):
        self.out += data
        self.writes += 1

    def close(self):
        self.closed = True

    def abort(self):
        self.closed = True

    def is_closing(self):
        return self.closed

    def pause_reading(self):
        self.reading = False

    def resume_reading(self):
        self.reading = True

    def can_write_eof(self):
        return True

    def write_eof(self):
        self.eof_written = True

    def get_extra_info(self, name):
        return ("127.0.0.1", 40000) if name in ("peername", "sockname") else None


class FakeServer:
    def __init__(self, tmp_path):
        self.config = Config.load(["-D", str(tmp_path)], env={})
        self.users = UserStore(str(tmp_path))
        self.vhosts = {"/": VHost("/", str(tmp_path))}
        self.connections = set()
        self.syncer = None      # no event loop here: confirms go out at once
        self.disk_alarm = False
        self.memory_alarm = False
        self.alarm_reason = None


def feed(conn, data, chunk=None):
    """Deliver bytes as the event loop would, optionally in small reads."""
    chunk = chunk or len(data)
    for i in range(0, len(data), chunk):
        part = data[i:i + chunk]
        buf = conn.get_buffer(len(part))
        buf[:len(part)] = part
        conn.buffer_updated(len(part))


def open_connection(tmp_path):
    """(server, conn): an AMQP connection on a FakeServer, its transport
    (collecting what the broker writes) also as conn.t."""
    from lavinmq.amqp.connection import AMQPConnection
    server = FakeServer(tmp_path)
    c = AMQPConnection(server)
    c.connection_made(FakeTransport())
    c.t = c.transport
    return server, c


def close_connection(server, c):
    c.connection_lost(None)
    server.vhosts["/"].close()
