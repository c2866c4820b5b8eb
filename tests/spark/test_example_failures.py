"""The example pipeline's known failures, one line each (issue 47 item 5):
`python -m lavinmq.spark.example` with a bad --uri, as a user runs it,
says what is wrong in one line on stderr and exits with that failure's own
code (documented in its --help and the README), before Spark starts or
anything is written. Wrong credentials gave 25 lines ending in `AMQPError:
403`, a port where something else listens a TimeoutError after 7 s.
These run without the spark extra: the checks come first."""
import socket
import subprocess
import sys
import threading
import time

import pytest

from lavinmq.spark import example
from tests.conftest import ROOT, free_port


def pipeline(uri, tmp_path):
    """-> (exit code, stderr lines, seconds) of the example run against uri."""
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "lavinmq.spark.example", "--uri", uri, "--out", str(tmp_path / "out")],
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    took = time.monotonic() - t0
    assert not (tmp_path / "out").exists(), "it wrote before its checks passed"
    return p.returncode, p.stderr.splitlines(), took


class Listener:
    """A TCP listener that answers each connection with `reply` (bytes, or
    None: it reads and says nothing) and records what it was sent."""

    def __init__(self, reply):
        self.reply = reply
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.received = []
        self.stopped = False
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        self.sock.settimeout(0.1)
        while not self.stopped:
            try:
                conn, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            with conn:
                conn.settimeout(10)
                try:
                    self.received.append(conn.recv(8))
                    if self.reply is not None:
                        conn.sendall(self.reply)
                    while conn.recv(4096):      # until the client hangs up
                        pass
                except OSError:
                    pass

    def uri(self):
        return f"amqp://guest:secret@127.0.0.1:{self.port}/%2F"

    def close(self):
        self.stopped = True
        self.sock.close()


@pytest.fixture
def listener(request):
    made = []

    def make(reply):
        made.append(Listener(reply))
        return made[-1]
    yield make
    for x in made:
        x.close()


def one_line(lines):
    assert len(lines) == 1, "\n".join(lines)
    assert lines[0].startswith("pipeline: ") and "Traceback" not in lines[0]
    return lines[0]


def test_wrong_password(broker, tmp_path):
    if broker.external:
        pytest.skip("needs the test broker's guest user")
    uri = broker.url.replace("guest:guest@", "guest:wrong@")
    rc, lines, _ = pipeline(uri, tmp_path)
    line = one_line(lines)
    assert rc == example.EXIT_LOGIN == 77
    assert "login refused by" in line and "for user 'guest': wrong user name or password" in line, line
    assert "403" in line and "wrong@" not in line


def test_unknown_user(broker, tmp_path):
    rc, lines, _ = pipeline(broker.url.replace("guest:guest@", "nobody:x@"), tmp_path)
    assert rc == example.EXIT_LOGIN and "for user 'nobody'" in one_line(lines)


def test_vhost_missing(broker, tmp_path):
    rc, lines, _ = pipeline(broker.url.replace("/%2F", "/no-such-vhost"), tmp_path)
    line = one_line(lines)
    assert rc == example.EXIT_NO_VHOST == 68
    assert "no vhost 'no-such-vhost' on" in line and "lavinmqctl add_vhost" in line, line


def test_vhost_refused_to_the_user(broker, tmp_path):
    """A vhost that exists, the user without permissions on it: its own line, code 77."""
    import base64
    import urllib.error
    import urllib.request
    vhost = f"first-contact-{free_port()}"
    req = urllib.request.Request(f"{broker.http_url}/api/vhosts/{vhost}", method="PUT", data=b"{}",
                                 headers={"Authorization": "Basic " + base64.b64encode(b"guest:guest").decode(),
                                          "Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=10).close()
    req = urllib.request.Request(f"{broker.http_url}/api/permissions/{vhost}/guest", method="DELETE",
                                 headers={"Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()})
    try:
        urllib.request.urlopen(req, timeout=10).close()
    except urllib.error.HTTPError:
        pass        # none were given: as wanted
    rc, lines, _ = pipeline(broker.url.replace("/%2F", f"/{vhost}"), tmp_path)
    line = one_line(lines)
    assert rc == example.EXIT_LOGIN and f"refused vhost '{vhost}' to user 'guest'" in line, line


def test_no_broker(tmp_path):
    rc, lines, _ = pipeline(f"amqp://guest:guest@127.0.0.1:{free_port()}/%2F", tmp_path)
    assert rc == example.EXIT_NO_BROKER == 69
    assert "no broker at amqp://guest:***@127.0.0.1:" in one_line(lines)


def test_unknown_host(tmp_path):
    rc, lines, _ = pipeline("amqp://guest:guest@no-such-host.invalid:5672/%2F", tmp_path)
    assert rc == example.EXIT_NO_BROKER and "the host 'no-such-host.invalid' is unknown" in one_line(lines)


def test_a_silent_service_is_not_amqp_within_2_s(listener, tmp_path):
    """An HTTP server that waits for the rest of a request line (the old
    TimeoutError came after 7 s)."""
    quiet = listener(None)
    rc, lines, took = pipeline(quiet.uri(), tmp_path)
    line = one_line(lines)
    assert rc == example.EXIT_NOT_AMQP == 76
    assert "did not answer the AMQP protocol header in 2 s: not an AMQP 0-9-1 broker" in line, line
    assert took < 6, took       # 2 s and the interpreter's start, on a loaded machine
    assert quiet.received == [b"AMQP\x00\x00\x09\x01"]


@pytest.mark.parametrize("reply, says", [
    (b"AMQP\x00\x01\x00\x00", "the protocol header of AMQP 1.0.0: a broker of another AMQP version, not 0-9-1"),
    (b"AMQP\x03\x01\x00\x00", "the protocol header of AMQP 1.0.0 (SASL)"),
    (b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n",
     "answered 'HTTP/1.1 400 Bad Request...', not a Connection.Start: not an AMQP 0-9-1 broker"),
    (b"\x15\x03\x01\x00\x02\x02\x32", "a TLS server (this client speaks amqp:// only)"),
    (b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n", "answered 'SSH-2.0-OpenSSH_9.2p1 Debian-2...'"),
])
def test_another_protocol_is_named(listener, tmp_path, reply, says):
    other = listener(reply)
    rc, lines, took = pipeline(other.uri(), tmp_path)
    line = one_line(lines)
    assert rc == example.EXIT_NOT_AMQP and says in line, line
    assert "secret" not in line


def test_not_an_amqp_uri(tmp_path):
    rc, lines, _ = pipeline("http://127.0.0.1:15672/", tmp_path)
    assert rc == example.EXIT_USAGE == 64 and "unsupported URI scheme 'http'" in one_line(lines)


def test_the_codes_are_documented():
    out = subprocess.run([sys.executable, "-m", "lavinmq.spark.example", "--help"], capture_output=True,
                         text=True, timeout=60, cwd=ROOT).stdout
    codes = {v for k, v in vars(example).items() if k.startswith("EXIT_")}
    assert len(codes) == 6, "each failure has a code of its own"
    for code in codes:
        assert f"\n    {code}  " in out, (code, out)
    readme = open(f"{ROOT}/README.md", encoding="utf-8").read()
    for code in codes:
        assert f"| {code} |" in readme, code


def test_this_broker_passes(broker):
    if broker.external:
        pytest.skip("names our own broker")
    assert example.preflight(broker.url).endswith("(lavinmq for Python)")


def test_where_spark_starts_and_what_it_read():
    """The log's words (the old ones: "continues at offset 0" for an empty
    stream, whose first message gets offset 1; "Spark read 20001" next to
    20000 events, without saying the end marker is the one more)."""
    assert example.start_text(None) == "stream 'clicks' is empty: Spark reads it from its first message"
    assert example.start_text((1, 20002)) == ("stream 'clicks' holds offsets 1 to 20001 from earlier runs: "
                                              "Spark reads from offset 20002, this run's first event")
    assert example.progress_text(20000, 20000, 20001) == (
        "published 20000/20000 events | Spark read 20001/20001 messages (the events and the end marker)")
