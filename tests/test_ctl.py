"""lavinmqctl's own behaviour: local commands, argument errors, exit codes,
and the UNIX-socket transport against a real HTTP server on a socket."""
import base64
import http.server
import io
import json
import os
import socketserver
import threading

import pytest

from lavinmq import ctl
from lavinmq.auth.password import verify


def run(argv):
    out = io.StringIO()
    return ctl.main(argv, out=out), out.getvalue()


def test_hash_password_is_rabbitmq_compatible():
    rc, out = run(["hash_password", "s3cret"])
    assert rc == 0 and verify("s3cret", out.strip()) and not verify("other", out.strip())


def test_unreachable_broker_exits_69(capsys):
    rc, _ = run(["--uri", "http://127.0.0.1:1", "list_users"])
    assert rc == 69 and "cannot reach the broker" in capsys.readouterr().err


def test_bad_json_argument_is_a_usage_error(capsys):
    rc, _ = run(["--uri", "http://127.0.0.1:1", "create_queue", "q", "--args", "{nope"])
    assert rc == 2 and "--args is not JSON" in capsys.readouterr().err


def test_bad_uri_scheme(capsys):
    rc, _ = run(["--uri", "amqp://127.0.0.1", "list_users"])
    assert rc == 2 and "http://" in capsys.readouterr().err


class UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


class Handler(http.server.BaseHTTPRequestHandler):
    seen = []

    def do_GET(self):
        self.seen.append((self.command, self.path, self.headers.get("Authorization")))
        if self.path == "/api/users":
            body = json.dumps([{"name": "guest", "tags": ["administrator"]}]).encode()
            self.send_response(200)
        else:
            body = json.dumps({"error": "Object Not Found", "reason": "Not Found"}).encode()
            self.send_response(404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def control_socket(tmp_path):
    path = str(tmp_path / "lavinmqctl.sock")
    server = UnixHTTPServer(path, Handler)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield path
    server.shutdown()
    server.server_close()


def test_control_socket_is_used_when_present(control_socket):
    Handler.seen.clear()
    rc, out = run(["--socket", control_socket, "-u", "admin", "--password", "pw", "-f", "json", "list_users"])
    assert rc == 0 and json.loads(out) == [{"name": "guest", "tags": "administrator"}]
    method, path, auth = Handler.seen[0]
    assert (method, path) == ("GET", "/api/users")
    assert base64.b64decode(auth.split()[1]) == b"admin:pw"
    rc, out = run(["--socket", control_socket, "-q", "list_users"])
    assert out == "name\ttags\nguest\tadministrator\n"          # quiet: no "Listing users ..." (LavinMQ)
    rc, out = run(["--socket", control_socket, "-s", "list_users"])
    assert out == "guest\tadministrator\n"          # silent: no header either


def test_http_errors_give_exit_1_with_the_reason(control_socket, capsys):
    rc, _ = run(["--socket", control_socket, "list_vhosts"])
    assert rc == 1 and "404 Not Found" in capsys.readouterr().err
