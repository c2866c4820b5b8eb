"""Issue 41 row 5: WebSocket upgrades on /ws and /mqtt had no Origin check.
Any web page the operator opens can open a WebSocket to the broker on
localhost, and the browser's connection comes from loopback: the page could
log in as the loopback-only guest (an upgrade with `Origin:
https://evil.example` was answered 101). Now a browser's upgrade is taken
from the broker's own origin (Origin's host is the Host the request names)
and from [mgmt] websocket_allowed_origins; a client that is no browser
sends no Origin and is let in as before."""
import base64
import os
import socket

import pytest

from tests.security.conftest import start_broker


def _upgrade(b, path="/mqtt", origin=None, host=None):
    host = host or f"127.0.0.1:{b.http_port}"
    s = socket.create_connection(("127.0.0.1", b.http_port), timeout=5)
    key = base64.b64encode(os.urandom(16)).decode()
    req = (f"GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n")
    if origin is not None:
        req += f"Origin: {origin}\r\n"
    s.sendall((req + "\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        data = s.recv(1)
        if not data:
            break
        head += data
    s.close()
    return int(head.split(b" ", 2)[1])


@pytest.fixture
def broker(make_broker):
    return make_broker(mqtt=True)


@pytest.mark.parametrize("path", ["/mqtt", "/ws", "/ws/mqtt"])
def test_a_foreign_page_cannot_open_a_websocket(broker, path):
    for origin in ("https://evil.example", "null", f"http://127.0.0.1:{broker.http_port + 1}",
                   f"http://localhost:{broker.http_port}"):
        assert _upgrade(broker, path, origin) == 403, origin


def test_the_brokers_own_pages_and_non_browsers_may(broker):
    assert _upgrade(broker, "/mqtt") == 101                                   # no Origin: not a browser
    assert _upgrade(broker, "/mqtt", f"http://127.0.0.1:{broker.http_port}") == 101
    assert _upgrade(broker, "/ws", f"http://localhost:{broker.http_port}",
                    host=f"localhost:{broker.http_port}") == 101
    # a page of the broker's UI names its origin: case does not matter in a host
    assert _upgrade(broker, "/ws", f"http://LOCALHOST:{broker.http_port}",
                    host=f"localhost:{broker.http_port}") == 101


def test_allowed_origins_are_configured(tmp_path):
    b = start_broker(tmp_path, "[mgmt]\nwebsocket_allowed_origins = https://app.example, http://dash.local:8080\n",
                     mqtt=True)
    try:
        assert _upgrade(b, "/mqtt", "https://app.example") == 101
        assert _upgrade(b, "/mqtt", "http://dash.local:8080") == 101
        assert _upgrade(b, "/mqtt", "http://app.example") == 403            # another scheme: another origin
        assert _upgrade(b, "/mqtt", "https://evil.example") == 403
    finally:
        b.stop()


def test_lavinmqs_behaviour_with_a_star(tmp_path):
    b = start_broker(tmp_path, "[mgmt]\nwebsocket_allowed_origins = *\n", mqtt=True)
    try:
        assert _upgrade(b, "/mqtt", "https://evil.example") == 101
    finally:
        b.stop()


def test_a_bad_origin_in_the_config_stops_the_start(tmp_path):
    with pytest.raises(RuntimeError, match=r"websocket_allowed_origins"):
        start_broker(tmp_path, "[mgmt]\nwebsocket_allowed_origins = app.example/path\n", mqtt=True)
