"""The example pipeline writes only to this broker (issue 31 item 3): it
reads what the broker at --uri says of itself (Connection.Start, before
logging in) and stops, having sent nothing but the protocol header, when
another broker answers there."""
import socket
import struct
import threading

import pytest

import lavinmq
from lavinmq.spark import amqp, example
from tests.conftest import free_port


class OtherBroker:
    """A listener that answers the protocol header with RabbitMQ 3.10's
    Connection.Start (its server properties, as that broker sends them) and
    records every byte a client sends it."""

    PROPS = {"product": "RabbitMQ", "version": "3.10.8", "platform": "Erlang/OTP 25.2.3",
             "copyright": "Copyright (c) 2007-2022 VMware, Inc. or its affiliates.",
             "information": "Licensed under the MPL 2.0. Website: https://rabbitmq.com",
             "capabilities": {"publisher_confirms": True, "consumer_cancel_notify": True},
             "cluster_name": "rabbit@localhost"}

    def __init__(self):
        self.port = free_port()
        self.sock = socket.create_server(("127.0.0.1", self.port))
        self.received = []
        self.served = threading.Event()     # set after each connection is over
        self.stopped = False
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        self.sock.settimeout(0.1)       # to see `stopped` (closing does not wake accept)
        while not self.stopped:
            try:
                conn, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            with conn:
                data = b""
                while len(data) < 8:
                    chunk = conn.recv(8 - len(data))
                    if not chunk:
                        break
                    data += chunk
                args = b"\x00\x09" + amqp.table(self.PROPS) + amqp.longstr("PLAIN AMQPLAIN") + amqp.longstr("en_US")
                conn.sendall(amqp.method_frame(0, 10, 10, args))
                conn.settimeout(5)
                try:
                    while chunk := conn.recv(65536):
                        data += chunk
                except OSError:
                    pass
                self.received.append(data)
                self.served.set()

    @property
    def uri(self):
        return f"amqp://guest:secret@127.0.0.1:{self.port}/%2F"

    def close(self):
        self.stopped = True
        self.thread.join(10)
        self.sock.close()


@pytest.fixture
def other():
    o = OtherBroker()
    yield o
    o.close()


def test_another_broker_gets_nothing(other, tmp_path, capsys):
    out = tmp_path / "out"
    rc = example.main(["--uri", other.uri, "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == example.EXIT_OTHER_BROKER == 78
    assert err.startswith(f"pipeline: amqp://guest:***@127.0.0.1:{other.port}/%2F is RabbitMQ 3.10.8 "
                          f"(Licensed under the MPL 2.0. Website: https://rabbitmq.com), not lavinmq for Python")
    assert "--any-broker" in err and "secret" not in err
    # it only asked who is there: the protocol header and nothing more
    assert other.served.wait(10)
    assert other.received == [b"AMQP\x00\x00\x09\x01"]
    assert not out.exists()


def test_any_broker_lets_it_through(other):
    name = example.check_target(other.uri, any_broker=True)
    assert name.startswith("RabbitMQ 3.10.8 (")


def test_this_broker_is_recognised(broker):
    if broker.external:
        pytest.skip("names our own broker")
    assert example.check_target(broker.url) == f"LavinMQ {lavinmq.__version__} (lavinmq for Python)"
    props = amqp.server_properties(broker.url)
    assert props["information"] == example.THIS_BROKER
    assert props["capabilities"]["publisher_confirms"] is True


def test_not_amqp_at_all(tmp_path, capsys):
    """Something that is not an AMQP broker (an HTTP server's port, say)."""
    with socket.create_server(("127.0.0.1", 0)) as srv:
        port = srv.getsockname()[1]

        def answer():
            conn, _ = srv.accept()
            with conn:
                conn.recv(8)
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        t = threading.Thread(target=answer, daemon=True)
        t.start()
        rc = example.main(["--uri", f"amqp://guest:guest@127.0.0.1:{port}/%2F", "--out", str(tmp_path / "o")])
        t.join(10)
    assert rc == example.EXIT_NOT_AMQP == 76
    assert "answered 'HTTP/1.1 400 Bad Request...', not a Connection.Start: not an AMQP 0-9-1 broker" in \
        capsys.readouterr().err


def test_help_shows_the_defaults(capsys):
    with pytest.raises(SystemExit):
        example.parse_args(["--help"])
    out = capsys.readouterr().out
    assert "(default: amqp://guest:guest@127.0.0.1:5672/%2F)" in " ".join(out.split())
    for default in ("(default: 20000)", "(default: 5000)", "(default: 600)", "(default: pipeline-out)"):
        assert default in " ".join(out.split()).replace("pipeline- out", "pipeline-out")


def test_field_table_round_trip():
    props = {"s": "text", "n": -5, "f": 1.5, "b": True, "nested": {"x": [1, "two", None]}, "raw": b"\x00\x01"}
    assert amqp.read_table(amqp.table(props), 0) == (props, len(amqp.table(props)))
    assert amqp.read_value(b"s" + struct.pack(">h", -2), 0) == (-2, 3)
