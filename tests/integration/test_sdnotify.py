"""Type=notify: the broker tells systemd READY=1 once its listeners are
up, and STOPPING=1 on SIGTERM, over $NOTIFY_SOCKET (here a real datagram
socket standing in for systemd's)."""
import socket

from tests.conftest import BrokerProcess


def test_ready_and_stopping_are_sent(tmp_path, monkeypatch):
    path = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(20)
    monkeypatch.setenv("NOTIFY_SOCKET", path)
    b = BrokerProcess(tmp_path / "data")
    b.start()
    try:
        ready = sock.recv(4096).decode()
        assert "READY=1" in ready and f":{b.port}" in ready
        socket.create_connection((b.host, b.port), timeout=5).close()    # listeners were up
    finally:
        assert b.stop() == 0
    assert sock.recv(4096) == b"STOPPING=1"
    sock.close()


def test_abstract_socket_name(monkeypatch):
    from lavinmq import sdnotify
    name = "lavinmq-test-%d" % id(monkeypatch)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    sock.settimeout(5)
    monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
    assert sdnotify.notify("READY=1")
    assert sock.recv(100) == b"READY=1"
    monkeypatch.delenv("NOTIFY_SOCKET")
    assert sdnotify.notify("READY=1") is False
    sock.close()
