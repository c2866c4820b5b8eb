"""Issue 14 item 11: lavinmqctl sends credentials only to a control socket
owned by root, the broker's user or the caller, and names from clients
cannot put control characters on a terminal or into the log. Issue 13 item
15: status shows uptime with its unit; a connection's close is logged at
the level of its open."""
import io
import os
import socket
import urllib.parse

import pika
import pytest

from lavinmq import ctl, ctl_commands
from tests.helpers.rawclient import RawClient
from tests.security.conftest import call


@pytest.fixture
def foreign_socket(tmp_path):
    """A listening socket another user (nobody) owns, as anyone can make in /tmp."""
    if os.getuid() != 0:
        pytest.skip("needs root to give the socket away")
    path = str(tmp_path / "lavinmqctl.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen()
    srv.setblocking(False)
    os.chown(path, 65534, 65534)
    yield path, srv
    srv.close()


def _nothing_sent(srv):
    try:
        srv.accept()
    except BlockingIOError:
        return True
    return False


def test_no_credentials_to_a_foreign_socket(foreign_socket, monkeypatch, capsys):
    path, srv = foreign_socket
    assert ctl.main(["--socket", path, "list_users"], out=io.StringIO()) == 77
    assert "refusing to send credentials" in capsys.readouterr().err
    assert _nothing_sent(srv)
    # the default places are skipped the same way (then the HTTP API, here not running)
    monkeypatch.setattr(ctl, "DEFAULT_SOCKETS", (path,))
    monkeypatch.setattr(ctl, "DEFAULT_URI", "http://127.0.0.1:1")
    assert ctl.main(["list_users"], out=io.StringIO()) == 69
    assert f"not using {path}: owned by uid 65534" in capsys.readouterr().err
    assert _nothing_sent(srv)


def test_control_characters_escaped_in_output_and_log(make_broker):
    b = make_broker()
    evil = "evil\x1b[2Jfake\tcolumn\x9b"       # (newlines are refused in queue names)
    assert call(b, "PUT", "/api/queues/%2F/" + urllib.parse.quote(evil, safe=""), {})[0] == 201
    out = io.StringIO()
    assert ctl.main(["--socket", os.path.join(b.data_dir, "lavinmqctl.sock"), "list_queues"], out=out) == 0
    text = out.getvalue()
    assert "evil\\x1b[2Jfake\\x09column\\x9b" in text
    assert "\x1b" not in text and "\x9b" not in text and len(text.splitlines()) == 3     # Listing ..., header, row
    # a client's vhost name reaches the log through the refusal; escaped there
    c = RawClient(b.host, b.port, handshake=False)
    try:
        c.handshake("guest", "guest", "\x1b[31mred\nFORGED LINE")
    except Exception:
        pass
    c.sock.close()
    pika.BlockingConnection(pika.URLParameters(b.url)).close()
    log = b.log_text()
    assert "\x1b" not in log and "\nFORGED LINE" not in log
    assert "\\x1b[31mred\\x0aFORGED LINE" in log


def test_status_uptime_unit_and_close_logged_like_open(make_broker):
    b = make_broker()
    out = io.StringIO()
    assert ctl.main(["--socket", os.path.join(b.data_dir, "lavinmqctl.sock"), "status"], out=out) == 0
    uptime = dict(line.split(": ", 1) for line in out.getvalue().splitlines())["Uptime"]
    assert uptime.endswith("s") and uptime.split()[-1][:-1].isdigit(), uptime
    assert ctl_commands.format_uptime(93784000) == "1d 2h 3m 4s"
    pika.BlockingConnection(pika.URLParameters(b.url)).close()
    b.stop()
    lines = b.log_text().splitlines()
    opened = [line.split()[1] for line in lines if " opened by user guest" in line]
    closed = [line.split()[1] for line in lines if " closed (user guest)" in line]
    assert opened == closed == ["INFO"]
