"""lavinmq.ports holds the listeners' ports from the start of the process;
each listener takes its own held sockets (no second bind), and what no
listener took is closed by release()."""
import socket

import pytest

from lavinmq import listener, ports
from lavinmq.config import Config
from lavinmq.listener import ListenError, bind_sockets
from tests.conftest import free_port


def config(tmp_path, amqp, http, metrics):
    return Config.load(["-D", str(tmp_path), "-b", "127.0.0.1", "-p", str(amqp), "--http-port", str(http), "--mqtt-port", "0",
                        "--metrics-http-port", str(metrics)])


def test_listeners_take_the_held_sockets(tmp_path):
    amqp, http, metrics = free_port(), free_port(), free_port()
    ports.hold(config(tmp_path, amqp, http, metrics))
    try:
        held = dict(listener.HELD)
        assert set(held) == {("127.0.0.1", amqp), ("127.0.0.1", http), ("127.0.0.1", metrics)}
        # bound, not listening: a client is refused until the listener opens
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", amqp), timeout=2)
        socks = bind_sockets("127.0.0.1", amqp, "AMQP port", "--amqp-port / [amqp] port")
        assert socks == held[("127.0.0.1", amqp)]
        socket.create_connection(("127.0.0.1", amqp), timeout=2).close()
        assert ("127.0.0.1", amqp) not in listener.HELD
        for s in socks:
            s.close()
    finally:
        ports.release()
    assert listener.HELD == {}
    assert all(s.fileno() == -1 for group in held.values() for s in group)


def test_nothing_is_held_when_one_port_is_busy(tmp_path):
    with socket.create_server(("127.0.0.1", 0)) as busy:
        http = busy.getsockname()[1]
        with pytest.raises(ListenError, match=f"HTTP port {http} .* is in use"):
            ports.hold(config(tmp_path, free_port(), http, free_port()))
    assert listener.HELD == {}
