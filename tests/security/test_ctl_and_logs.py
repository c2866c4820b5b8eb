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

from lavinmq import ctl
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
    assert "\x1b" not in text and "\x9b" not in text and len(text.splitlines()) == 2
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
    uptime = dict(line.split("\t") for line in out.getvalue().splitlines()[1:])["uptime"]
    assert uptime.endswith("s") and uptime.split()[-1][:-1].isdigit(), uptime
    assert ctl.format_uptime(93784000) == "1d 2h 3m 4s"
    pika.BlockingConnection(pika.URLParameters(b.url)).close()
    b.stop()
    lines = b.log_text().splitlines()
    opened = [line.split()[1] for line in lines if " opened by user guest" in line]
    closed = [line.split()[1] for line in lines if " closed (user guest)" in line]
    assert opened == closed == ["INFO"]


LISTENER = """
import os, socket, sys
path, seen = sys.argv[1], sys.argv[2]
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind(path)
srv.listen()
open(seen + ".ready", "w").close()
srv.settimeout(20)
try:
    conn, _ = srv.accept()
    conn.settimeout(2)
    data = b""
    try:
        while True:
            chunk = conn.recv(65536)
            if not chunk:
                break
            data += chunk
    except OSError:
        pass
    open(seen, "wb").write(data)
except socket.timeout:
    pass
"""


def test_credentials_go_only_to_a_trusted_listener_whatever_the_path_says(capsys):
    """Issue 25 finding 9: lavinmqctl looked at the path, then connected:
    a symlink flipped in between (a writable directory) sent the admin's
    credentials to another user's socket in 21 of 150 runs. Here the worst
    case of that race, made to happen every time: the file is root's when
    looked at, the process listening on it is nobody's."""
    import subprocess
    import time
    if os.getuid() != 0:
        pytest.skip("needs root to run a listener as another user")
    import shutil
    import tempfile
    d = tempfile.mkdtemp(prefix="lavinmqctl-race-", dir="/tmp")     # pytest's own are root's, 0700
    os.chmod(d, 0o777)
    path, seen = os.path.join(d, "lavinmqctl.sock"), os.path.join(d, "seen")

    def as_nobody():
        os.setgid(65534)
        os.setuid(65534)
    # the system's Python: nobody may not be able to run the test's virtualenv
    proc = subprocess.Popen(["/usr/bin/python3", "-c", LISTENER, path, seen], preexec_fn=as_nobody, cwd="/")
    try:
        deadline = time.monotonic() + 10
        while not os.path.exists(seen + ".ready"):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        os.chown(path, 0, 0)        # what the look at the path sees
        assert ctl.trusted_socket(path) is None
        assert ctl.main(["--socket", path, "--user", "admin", "--password", "s3cret", "list_users"],
                        out=io.StringIO()) == 77
        assert "runs as uid 65534" in capsys.readouterr().err
        proc.wait(timeout=25)
        assert b"s3cret" not in open(seen, "rb").read() and b"Authorization" not in open(seen, "rb").read()
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(d, ignore_errors=True)
