"""amqps:// destinations: the certificate is verified against cacertfile
(or the system's CAs), verify=verify_none skips it, and a failed check is
an error in the shovel's state, with the messages kept at the source."""
import subprocess
import urllib.parse

import pytest

from tests.conftest import BrokerProcess, unique
from tests.links.conftest import drain, ok, publish, queue_depth, shovel_state, wait_for


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory):
    d = tmp_path_factory.mktemp("tls")

    def run(*args):
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    for ca in ("ca", "other-ca"):
        run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{ca}.key", "-out", f"{ca}.pem",
            "-days", "2", "-subj", f"/CN=lavinmq test {ca}")
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=server")
    (d / "server.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "server.pem", "-days", "2", "-extfile", "server.ext")
    b = BrokerProcess(d / "data", tls=True, extra_args=["--cert", str(d / "server.pem"),
                                                         "--key", str(d / "server.key")]).start()
    b.ca, b.other_ca = str(d / "ca.pem"), str(d / "other-ca.pem")
    yield b
    b.stop()
    b.check_clean()


def amqps(b, **params):
    return f"amqps://guest:guest@127.0.0.1:{b.amqps_port}/%2F?" + urllib.parse.urlencode(params)


@pytest.mark.parametrize("params", [lambda b: {"cacertfile": b.ca}, lambda b: {"verify": "verify_none"}])
def test_amqps_destination(broker_a, tls_broker, params):
    src_q, dest_q, name = unique("src"), unique("dest"), unique("tls")
    publish(broker_a, src_q, [b"over TLS"])
    ok(broker_a, "PUT", f"/api/parameters/shovel/%2F/{name}",
       {"value": {"src-uri": broker_a.url, "src-queue": src_q, "dest-uri": amqps(tls_broker, **params(tls_broker)),
                  "dest-queue": dest_q}})
    wait_for("moved", lambda: queue_depth(tls_broker, dest_q) == 1)
    assert [b for b, _ in drain(tls_broker, dest_q, 1)] == [b"over TLS"]
    state = shovel_state(broker_a, name)
    assert state["state"] == "running" and state["dest_uri"].startswith("amqps://")
    ok(broker_a, "DELETE", f"/api/parameters/shovel/%2F/{name}")


def test_a_certificate_that_does_not_verify_is_an_error(broker_a, tls_broker):
    src_q, name = unique("src"), unique("tls")
    publish(broker_a, src_q, [b"kept"])
    ok(broker_a, "PUT", f"/api/parameters/shovel/%2F/{name}",
       {"value": {"src-uri": broker_a.url, "src-queue": src_q, "dest-uri": amqps(tls_broker, cacertfile=tls_broker.other_ca),
                  "dest-queue": "q", "reconnect-delay": 30}})
    state = wait_for("error", lambda: (s := shovel_state(broker_a, name)) and s["state"] == "error" and s)
    assert "CERTIFICATE_VERIFY_FAILED" in state["error"] or "certificate verify failed" in state["error"], state
    assert queue_depth(broker_a, src_q) == 1
    ok(broker_a, "DELETE", f"/api/parameters/shovel/%2F/{name}")
