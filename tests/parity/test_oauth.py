"""OAuth 2.0 / JWT sign-in as LavinMQ's [oauth], against a local issuer the
test serves: tokens as AMQP and HTTP passwords, scopes mapped to tags and
permissions, the checks (expiry, issuer, audience, kid, algorithm,
signature), the JWKS fetched once and cached for its max-age, the
connection closed when its token expires, update-secret with a new token,
and the management UI's code flow with PKCE (cookies)."""
import base64
import http.cookiejar
import json
import time
import urllib.error
import urllib.parse
import urllib.request

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker, ConnectionClosedByBroker, ProbableAuthenticationError

from tests.conftest import BrokerProcess, unique
from tests.parity.helpers import api
from tests.parity.oauth_issuer import Issuer

SCOPES = "lavinmq.tag:management lavinmq.configure:%2F/oa-* lavinmq.write:%2F/* lavinmq.read:%2F/oa-* other.scope"


@pytest.fixture(scope="module")
def issuer():
    i = Issuer()
    yield i
    i.close()


@pytest.fixture(scope="module")
def broker(tmp_path_factory, issuer):
    d = tmp_path_factory.mktemp("oauth")
    b = BrokerProcess(d / "data")
    ini = d / "lavinmq.ini"
    ini.write_text(f"[main]\nauth_backends = local,oauth\n[oauth]\nissuer = {issuer.url}\n"
                   f"resource_server_id = lavinmq\nclient_id = lavinmq-ui\n"
                   f"mgmt_base_url = http://127.0.0.1:{b.http_port}\n")
    b.extra_args += ["-c", str(ini)]
    b.start()
    # the refused tokens below log in as this user: their failures slow
    # (lavinmq.auth.throttle) its logins from 127.0.0.1, not every token's
    api(b, "PUT", "/api/users/mallory", {"password": "not-a-token", "tags": ""})
    yield b
    b.stop()
    b.check_clean()


def connect(b, token, user="anyone"):
    params = pika.ConnectionParameters(b.host, b.port, credentials=pika.PlainCredentials(user, token),
                                       connection_attempts=1)
    return pika.BlockingConnection(params)


def test_token_login_and_scopes(broker, issuer):
    conn = connect(broker, issuer.token("alice", SCOPES))
    ch = conn.channel()
    ch.queue_declare("oa-mine")                          # configure:/oa-*
    ch.basic_publish("", "oa-mine", b"hi")              # write:/* (the default exchange)
    assert ch.basic_get("oa-mine", auto_ack=True)[2] == b"hi"   # read:/oa-*
    with pytest.raises(ChannelClosedByBroker) as e:
        ch.queue_declare("other-queue")
    assert e.value.reply_code == 403
    users = {c["user"] for c in api(broker, "GET", "/api/connections")[1]}
    assert "alice" in users                             # the token's sub, not the AMQP user name
    conn.close()
    # the management API takes the token as a Basic password too: tags from scopes
    status, me = api(broker, "GET", "/api/whoami", user="whoever", password=issuer.token("alice", SCOPES))
    assert status == 200 and me["name"] == "alice" and me["tags"] in (["management"], "management")
    # local users still log in (auth_backends = local,oauth)
    pika.BlockingConnection(pika.URLParameters(broker.url)).close()


@pytest.mark.parametrize("why,kw", [
    ("expired", {"lifetime": -10}),
    ("another issuer", {"iss": "https://evil.example"}),
    ("another audience", {"aud": "someone-else"}),
    ("no audience", {"aud": None}),
    ("unknown kid", {"kid": "nope"}),
    ("HS256", {"alg": "HS256"}),
    ("signed by another key", {"key": "other"}),
])
def test_bad_tokens_are_refused(broker, issuer, why, kw):
    if kw.get("key") == "other":
        kw["key"] = issuer.other_key
    if why == "expired":
        assert api(broker, "GET", "/api/whoami", user="mallory",
                   password=issuer.token("mallory", SCOPES, **kw))[0] == 401
    else:
        with pytest.raises(ProbableAuthenticationError):
            connect(broker, issuer.token("mallory", SCOPES, **kw), user="mallory")


def test_a_tampered_token_is_refused(broker, issuer):
    head, body, sig = issuer.token("alice", SCOPES).split(".")
    claims = json.loads(base64.urlsafe_b64decode(body + "=="))
    claims["scope"] += " lavinmq.tag:administrator"
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    with pytest.raises(ProbableAuthenticationError):
        connect(broker, f"{head}.{forged}.{sig}", user="mallory")


def test_jwks_is_fetched_once_and_cached(broker, issuer):
    before = issuer.jwks_fetches
    for _ in range(3):
        connect(broker, issuer.token("bob", SCOPES)).close()
    assert issuer.jwks_fetches == before                # cached (fetched at start)
    assert before >= 1


def test_expiry_closes_the_connection_and_update_secret_renews(broker, issuer):
    conn = connect(broker, issuer.token("carol", SCOPES, lifetime=2))
    ch = conn.channel()
    ch.queue_declare("oa-carol")
    conn.update_secret(issuer.token("carol", SCOPES, lifetime=60), "renewed")
    deadline = time.monotonic() + 3.5
    while time.monotonic() < deadline:                 # past the first token's expiry
        conn.process_data_events(0.2)
    assert conn.is_open
    # a token of another user is refused, and the connection goes (LavinMQ: 403)
    with pytest.raises(ConnectionClosedByBroker) as e:
        conn.update_secret(issuer.token("dave", SCOPES, lifetime=60), "swap")
        conn.process_data_events(0.5)
    assert e.value.reply_code == 403 and "mismatch" in e.value.reply_text
    # a token that runs out closes its connection: 320 token expired
    conn = connect(broker, issuer.token("carol", SCOPES, lifetime=2))
    with pytest.raises(ConnectionClosedByBroker) as e:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            conn.process_data_events(0.2)
    assert e.value.reply_code == 320 and "token expired" in e.value.reply_text


def test_update_secret_changes_permissions(broker, issuer):
    conn = connect(broker, issuer.token("erin", SCOPES))
    ch = conn.channel()
    ch.queue_declare("oa-erin")
    got = []
    ch.basic_consume("oa-erin", lambda c, m, p, b: got.append(b), auto_ack=True)
    cancelled = []
    ch.add_on_cancel_callback(lambda f: cancelled.append(f))
    # the new token no longer reads oa-*: the consumer is cancelled
    conn.update_secret(issuer.token("erin", "lavinmq.configure:%2F/oa-* lavinmq.write:%2F/*"), "narrower")
    conn.process_data_events(0.5)
    assert cancelled and conn.is_open
    conn.close()


def test_management_sign_in_code_flow(broker, issuer):
    """What the UI's "Sign in with OAuth" does, with a cookie jar for a browser."""
    issuer.login_claims = {"sub": "frank", "scope": "lavinmq.tag:administrator lavinmq.read:*/*"}
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    base = broker.http_url
    assert json.load(opener.open(base + "/oauth/enabled"))["enabled"] is True
    url = json.load(opener.open(base + "/oauth/authorize"))["authorize_url"]
    q = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query))
    assert q["code_challenge_method"] == "S256" and q["redirect_uri"] == base + "/oauth/callback"
    # the issuer approves and sends the browser back; the broker exchanges the code
    final = opener.open(url)
    assert final.geturl() == base + "/"                # redirected to the UI
    cookies = {c.name: c for c in jar}
    assert "oauth_token" in cookies and cookies["oauth_token"].has_nonstandard_attr("HttpOnly")
    me = json.load(opener.open(base + "/api/whoami"))
    assert me["name"] == "frank"
    # a state that does not match is refused
    opener.open(base + "/oauth/authorize")
    bad = opener.open(base + "/oauth/callback?code=x&state=wrong")
    assert "oauth_error=State%20mismatch" in bad.geturl()
    # logging out drops the session
    opener.open(base + "/oauth/logout")
    with pytest.raises(urllib.error.HTTPError) as e:
        opener.open(base + "/api/whoami")
    assert e.value.code == 401


def test_a_broker_without_oauth_refuses_tokens_and_bad_settings_stop_the_start(tmp_path, issuer):
    ini = tmp_path / "lavinmq.ini"
    ini.write_text("[main]\nauth_backends = local,oauth\n")
    b = BrokerProcess(tmp_path / "data", extra_args=["-c", str(ini)])
    with pytest.raises(RuntimeError, match="issuer is not set"):
        b.start()
    ini.write_text("[main]\nauth_backends = ldap\n")
    with pytest.raises(RuntimeError, match="unsupported authentication backend 'ldap'"):
        BrokerProcess(tmp_path / "data2", extra_args=["-c", str(ini)]).start()


def test_jwks_cache_follows_max_age(issuer):
    """The key set is kept for the answer's Cache-Control max-age (over
    jwks_cache_ttl), and a login before any fetch waits for one."""
    import asyncio
    from lavinmq.auth.jwks import JWKSFetcher

    async def run():
        f = JWKSFetcher(issuer.url, default_ttl=3600)
        issuer.max_age = 1
        try:
            assert f.empty
            await f.ensure_keys()                       # on demand
            assert f.key(issuer.kid) is not None and f.key("ec-ignored") is None
            await asyncio.sleep(1.1)
            assert f.key(issuer.kid) is None            # past max-age: not trusted any more
        finally:
            issuer.max_age = None
        bad = JWKSFetcher("http://127.0.0.1:1", default_ttl=60)
        await bad.ensure_keys()                         # unreachable: no keys, no exception
        assert bad.empty
    asyncio.run(run())
