"""Helpers for the attack tests: a broker with its own settings, HTTP
calls with any user, and TLS certificates made for the test run."""
import base64
import json
import subprocess
import urllib.error
import urllib.parse
import urllib.request

import pytest

from tests.conftest import BrokerProcess


def start_broker(tmp_path, ini_text="", tls=None, extra_args=(), **kw):
    """A broker with an ini file of the test's settings; tls=(cert, key) turns on AMQPS/HTTPS."""
    ini = tmp_path / "lavinmq.ini"
    ini.write_text(ini_text)
    args = ["-c", str(ini), *extra_args]
    if tls:
        args += ["--cert", tls[0], "--key", tls[1]]
    return BrokerProcess(tmp_path / "data", extra_args=args, tls=bool(tls), **kw).start()


@pytest.fixture
def make_broker(tmp_path):
    brokers = []

    def make(ini_text="", **kw):
        b = start_broker(tmp_path, ini_text, **kw)
        brokers.append(b)
        return b
    yield make
    for b in brokers:
        if b.proc.poll() is None:
            assert b.stop() == 0, b.log_tail()
        b.check_clean()


def call(b, method, path, body=None, user="guest", password="guest", headers=None, raw=None,
         content_type="application/json", base=None):
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request((base or b.http_url) + path, data=data, method=method)
    if user is not None:
        req.add_header("Authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())
    if data is not None and content_type:
        req.add_header("Content-Type", content_type)
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=15) as resp:
            text = resp.read()
            ctype = resp.headers.get_content_type()
            return resp.status, (json.loads(text) if text and ctype == "application/json" else text.decode())
    except urllib.error.HTTPError as e:
        with e:
            text = e.read()
        try:
            return e.code, json.loads(text) if text else None
        except ValueError:
            return e.code, text.decode(errors="replace")


def add_user(b, name, password="pw", tags="management", vhost="/", perms=(".*", ".*", ".*")):
    assert call(b, "PUT", f"/api/users/{name}", {"password": password, "tags": tags})[0] in (201, 204)
    if perms is not None:
        status, _ = call(b, "PUT", f"/api/permissions/{urllib.parse.quote(vhost, safe='')}/{name}",
                         {"configure": perms[0], "write": perms[1], "read": perms[2]})
        assert status in (201, 204)


@pytest.fixture(scope="session")
def certs(tmp_path_factory):
    """A CA, a server certificate for 127.0.0.1/localhost and a client
    certificate, made with the openssl command line for this test run."""
    d = tmp_path_factory.mktemp("certs")

    def run(*args):
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
        "-subj", "/CN=lavinmq test CA")
    for name, ext in (("server", "subjectAltName=IP:127.0.0.1,DNS:localhost"), ("client", "extendedKeyUsage=clientAuth"),
                      ("server2", "subjectAltName=IP:127.0.0.1,DNS:localhost")):
        run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
            "-subj", f"/CN={name}")
        (d / f"{name}.ext").write_text(ext + "\n")
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext")
    return {k: str(d / v) for k, v in (("ca", "ca.pem"), ("cert", "server.pem"), ("key", "server.key"),
                                      ("client_cert", "client.pem"), ("client_key", "client.key"),
                                      ("cert2", "server2.pem"), ("key2", "server2.key"))}
