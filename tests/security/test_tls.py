"""Issue 14 item 14: AMQPS and HTTPS as LavinMQ configures them, with
pika, aio-pika and aiormq as the clients, certificates made by the test
setup (tests/security/conftest.py), optional client certificates and a
certificate reloaded on SIGHUP."""
import asyncio
import shutil
import signal
import socket
import ssl
import time
import urllib.request

import aio_pika
import aiormq
import pika
import pytest

from tests.security.conftest import call


def client_context(certs, with_client_cert=False):
    ctx = ssl.create_default_context(cafile=certs["ca"])
    if with_client_cert:
        ctx.load_cert_chain(certs["client_cert"], certs["client_key"])
    return ctx


def server_cn(port, certs):
    ctx = client_context(certs)
    with socket.create_connection(("127.0.0.1", port)) as raw, \
            ctx.wrap_socket(raw, server_hostname="localhost") as s:
        cert = s.getpeercert()
    return dict(pair for rdn in cert["subject"] for pair in rdn)["commonName"]


def pika_tls(b, certs, **kw):
    params = pika.ConnectionParameters("127.0.0.1", b.amqps_port, credentials=pika.PlainCredentials("guest", "guest"),
                                       ssl_options=pika.SSLOptions(client_context(certs, **kw), "localhost"))
    return pika.BlockingConnection(params)


@pytest.fixture
def tls_broker(make_broker, certs, tmp_path):
    cert = tmp_path / "cert.pem"
    key = tmp_path / "key.pem"
    shutil.copy(certs["cert"], cert)
    shutil.copy(certs["key"], key)
    b = make_broker("", tls=(str(cert), str(key)))
    b.cert_path, b.key_path = cert, key
    return b


def test_pika_over_amqps_and_https(tls_broker, certs):
    b = tls_broker
    conn = pika_tls(b, certs)
    ch = conn.channel()
    ch.queue_declare("tls-q")
    ch.confirm_delivery()
    ch.basic_publish("", "tls-q", b"over tls")
    method, _, body = ch.basic_get("tls-q", auto_ack=True)
    assert body == b"over tls"
    # the API says which connection is TLS
    status, conns = call(b, "GET", "/api/connections")
    assert status == 200 and [c["ssl"] for c in conns] == [True]
    conn.close()
    ctx = client_context(certs)
    req = urllib.request.Request(f"https://localhost:{b.https_port}/api/overview",
                                 headers={"Authorization": "Basic Z3Vlc3Q6Z3Vlc3Q="})
    with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
        assert resp.status == 200
    # plain AMQP and HTTP are still there
    plain = pika.BlockingConnection(pika.URLParameters(b.url))
    plain.close()
    assert call(b, "GET", "/api/overview")[0] == 200


async def test_aio_pika_and_aiormq_over_amqps(tls_broker, certs):
    b = tls_broker
    url = f"amqps://guest:guest@localhost:{b.amqps_port}/"
    conn = await aio_pika.connect_robust(url, ssl_context=client_context(certs))
    ch = await conn.channel()
    q = await ch.declare_queue("", exclusive=True)
    await ch.default_exchange.publish(aio_pika.Message(b"aio"), routing_key=q.name)
    msg = await q.get(timeout=5)
    assert msg.body == b"aio"
    await msg.ack()
    await conn.close()
    raw = await aiormq.connect(url, context=client_context(certs))
    chan = await raw.channel()
    declared = await chan.queue_declare(exclusive=True)
    await chan.basic_publish(b"aiormq", routing_key=declared.queue)
    got = await chan.basic_get(declared.queue, no_ack=True)
    assert got.body == b"aiormq"
    await raw.close()


def test_plain_clients_and_bad_handshakes_do_not_hurt(tls_broker, certs):
    b = tls_broker
    # plain AMQP bytes to the TLS port: the handshake fails, the broker goes on
    with socket.create_connection(("127.0.0.1", b.amqps_port)) as s:
        s.sendall(b"AMQP\x00\x00\x09\x01")
        s.settimeout(5)
        try:
            s.recv(100)
        except OSError:
            pass
    pika_tls(b, certs).close()


def test_tls_min_version(make_broker, certs):
    b = make_broker("[main]\ntls_min_version = 1.3\n", tls=(certs["cert"], certs["key"]))
    old = client_context(certs)
    old.maximum_version = ssl.TLSVersion.TLSv1_2
    with pytest.raises(ssl.SSLError):
        with socket.create_connection(("127.0.0.1", b.amqps_port)) as raw:
            old.wrap_socket(raw, server_hostname="localhost").close()
    pika_tls(b, certs).close()


def test_client_certificates_required_when_configured(make_broker, certs):
    b = make_broker(f"[main]\ntls_verify_peer = true\ntls_ca_cert = {certs['ca']}\n",
                    tls=(certs["cert"], certs["key"]))
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        pika_tls(b, certs)
    conn = pika_tls(b, certs, with_client_cert=True)
    assert conn.is_open
    conn.close()


def test_sighup_reloads_the_certificate(tls_broker, certs):
    b = tls_broker
    assert server_cn(b.amqps_port, certs) == "server"
    kept = pika_tls(b, certs)
    shutil.copy(certs["cert2"], b.cert_path)
    shutil.copy(certs["key2"], b.key_path)
    b.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while server_cn(b.amqps_port, certs) != "server2":
        assert time.monotonic() < deadline, b.log_tail()
        time.sleep(0.1)
    assert server_cn(b.https_port, certs) == "server2"
    assert kept.is_open                    # open connections keep theirs
    kept.channel().queue_declare("", exclusive=True)
    kept.close()
    # a broken file on reload keeps the running certificate
    b.cert_path.write_text("not a certificate")
    b.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while "TLS reload failed" not in b.log_text():
        assert time.monotonic() < deadline, b.log_tail()
        time.sleep(0.1)
    assert server_cn(b.amqps_port, certs) == "server2"


def test_a_fifo_at_the_certificate_path_does_not_hang_the_broker(tls_broker, certs):
    """Issue 25 finding 9: at SIGHUP the certificate was opened with a
    blocking open(): a FIFO there (nobody writing) hung the event loop."""
    import os
    b = tls_broker
    b.cert_path.unlink()
    os.mkfifo(b.cert_path)
    conn = pika.BlockingConnection(pika.URLParameters(b.url))
    ch = conn.channel()
    b.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while "TLS reload failed" not in b.log_text():
        assert time.monotonic() < deadline, b.log_tail()
        time.sleep(0.1)
    assert "not a regular file" in b.log_text()
    started = time.monotonic()
    ch.queue_declare("", exclusive=True)            # the loop answers
    assert time.monotonic() - started < 1
    assert server_cn(b.amqps_port, certs) == "server"      # the certificate in use stays
    conn.close()
