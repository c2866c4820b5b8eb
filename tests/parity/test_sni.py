"""Per-hostname certificates ([sni:host] sections, as LavinMQ's): a TLS
client naming the host gets its certificate, on AMQPS, MQTTS and HTTPS, with the
protocol's own override; *.domain serves one label under it; others get
[main]'s. Certificates made with the openssl command for the test."""
import socket
import ssl
import subprocess

import pytest

from tests.conftest import BrokerProcess


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = tmp_path_factory.mktemp("sni-certs")

    def run(*args):
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)
    for name in ("default", "exact", "exact-http", "exact-mqtt", "wild"):
        run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.pem",
            "-days", "2", "-subj", f"/CN={name}")
    return d


def served_cn(port, server_name):
    """The CN of the certificate the broker shows to a client naming server_name."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname=server_name) as s:
            der = s.getpeercert(binary_form=True)
    pem = ssl.DER_cert_to_PEM_cert(der)
    out = subprocess.run(["openssl", "x509", "-noout", "-subject"], input=pem, capture_output=True, text=True,
                         check=True).stdout
    return out.strip().rsplit("CN", 1)[1].lstrip(" =")


def test_certificate_per_host_and_protocol(tmp_path, certs):
    ini = tmp_path / "lavinmq.ini"
    ini.write_text(f"""[main]
tls_cert = {certs}/default.pem
tls_key = {certs}/default.key
[sni:broker.example.test]
tls_cert = {certs}/exact.pem
tls_key = {certs}/exact.key
http_tls_cert = {certs}/exact-http.pem
http_tls_key = {certs}/exact-http.key
mqtt_tls_cert = {certs}/exact-mqtt.pem
mqtt_tls_key = {certs}/exact-mqtt.key
[sni:*.wild.example.test]
tls_cert = {certs}/wild.pem
tls_key = {certs}/wild.key
tls_min_version = 1.2
mqtt_tls_verify_peer = true
[sni:nocert.example.test]
tls_min_version = 1.3
""")
    b = BrokerProcess(tmp_path / "data", tls=True, mqtt=True, extra_args=["-c", str(ini)]).start()
    try:
        amqps, https, mqtts = b.amqps_port, b.https_port, b.mqtts_port
        assert served_cn(amqps, "broker.example.test") == "exact"
        assert served_cn(https, "broker.example.test") == "exact-http"      # http_tls_cert wins on HTTPS
        assert served_cn(mqtts, "broker.example.test") == "exact-mqtt"      # mqtt_tls_cert on MQTTS
        assert served_cn(mqtts, "a.wild.example.test") == "wild"
        assert served_cn(mqtts, "other.example.test") == "default"
        assert served_cn(amqps, "a.wild.example.test") == "wild"
        assert served_cn(https, "B.Wild.Example.Test") == "wild"           # names compare without case
        assert served_cn(amqps, "a.b.wild.example.test") == "default"      # one label only
        assert served_cn(amqps, "other.example.test") == "default"
        assert served_cn(amqps, "nocert.example.test") == "default"        # ignored: no tls_cert (a warning)
        assert "[sni:nocert.example.test] has no tls_cert, ignored" in b.log_text()
    finally:
        b.stop()
    # a certificate that does not load stops the start, naming the section
    ini.write_text(f"[main]\ntls_cert = {certs}/default.pem\ntls_key = {certs}/default.key\n"
                   f"[sni:bad.example.test]\ntls_cert = {certs}/default.key\n")
    bad = BrokerProcess(tmp_path / "data2", tls=True, extra_args=["-c", str(ini)])
    with pytest.raises(RuntimeError, match=r"\[sni:bad.example.test\]"):
        bad.start()
