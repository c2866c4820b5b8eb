"""OAuth tokens over MQTT, as LavinMQ's MQTT signs in through the same chain
([main] auth_backends): the token is the CONNECT password, its `sub` the
user, its scopes the permissions; a bad token is CONNACK 4; the connection
closes when its token expires. The issuer is the local one test_oauth.py
uses."""
import socket
import time

import pytest

from tests.conftest import BrokerProcess
from tests.parity.helpers import api
from tests.parity.oauth_issuer import Issuer
from tests.parity.test_mqtt_listeners import raw_connect

SCOPES = "lavinmq.configure:%2F/* lavinmq.write:%2F/* lavinmq.read:%2F/*"


@pytest.fixture(scope="module")
def issuer():
    i = Issuer()
    yield i
    i.close()


@pytest.fixture(scope="module")
def broker(tmp_path_factory, issuer):
    d = tmp_path_factory.mktemp("oauth-mqtt")
    ini = d / "lavinmq.ini"
    ini.write_text(f"[main]\nauth_backends = local,oauth\n[oauth]\nissuer = {issuer.url}\n"
                   "resource_server_id = lavinmq\n")
    b = BrokerProcess(d / "data", mqtt=True, extra_args=["-c", str(ini)]).start()
    # the issuer's keys are fetched at start; a token's CONNECT before they
    # are here waits for them (the last test)
    with mqtt(b) as s:
        assert raw_connect(s, b"oauth-0", b"anyone", issuer.token("grace", SCOPES).encode()) == 0
    yield b
    b.stop()
    b.check_clean()


def mqtt(b):
    return socket.create_connection(("127.0.0.1", b.mqtt_port), timeout=10)


def mqtt_users(b):
    return [c["user"] for c in api(b, "GET", "/api/connections")[1] if c.get("protocol", "").startswith("MQTT")]


def test_a_token_signs_in_over_mqtt(broker, issuer):
    s = mqtt(broker)
    assert raw_connect(s, b"oauth-1", b"anyone", issuer.token("grace", SCOPES).encode()) == 0
    assert "grace" in mqtt_users(broker)                # the token's sub, not the MQTT user name
    s.close()
    # a local user still signs in (auth_backends = local,oauth)
    s = mqtt(broker)
    assert raw_connect(s, b"local-1", b"guest", b"guest") == 0
    s.close()


@pytest.mark.parametrize("kw", [{"lifetime": -10}, {"aud": "someone-else"}, {"kid": "nope"}])
def test_bad_tokens_get_connack_4(broker, issuer, kw):
    s = mqtt(broker)
    assert raw_connect(s, b"oauth-bad", b"anyone", issuer.token("mallory", SCOPES, **kw).encode()) == 4
    s.close()


def test_expiry_closes_the_mqtt_connection(broker, issuer):
    s = mqtt(broker)
    assert raw_connect(s, b"oauth-short", b"anyone", issuer.token("heidi", SCOPES, lifetime=2).encode()) == 0
    start = time.monotonic()
    assert s.recv(10) == b""                            # closed by the broker, no packet first
    assert 1.0 < time.monotonic() - start < 8
    s.close()
    assert "heidi" not in mqtt_users(broker)


def test_a_token_before_the_keys_are_fetched_waits_for_them(tmp_path):
    """A token's CONNECT while the issuer's keys are still on their way is
    answered once they are here (as AMQP's connection.tune waits), not with
    CONNACK 3 for the client to retry."""
    slow = Issuer()
    slow.jwks_delay = 1.5
    ini = tmp_path / "lavinmq.ini"
    ini.write_text(f"[main]\nauth_backends = local,oauth\n[oauth]\nissuer = {slow.url}\n"
                   "resource_server_id = lavinmq\n")
    b = BrokerProcess(tmp_path / "data", mqtt=True, extra_args=["-c", str(ini)]).start()
    try:
        assert slow.jwks_fetches == 0                   # still on its way
        with mqtt(b) as s:
            assert raw_connect(s, b"oauth-early", b"anyone", slow.token("ivan", SCOPES).encode()) == 0
            assert slow.jwks_fetches >= 1
            assert "ivan" in mqtt_users(b)
    finally:
        b.stop()
        slow.close()
    b.check_clean()
