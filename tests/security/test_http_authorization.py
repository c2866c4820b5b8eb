"""Issue 14 item 8: authorization over HTTP as strict as over AMQP, with
the reproduction's tenant: `alice`, tag management, rights on ^alice\\.
only; `mon`, tag monitoring."""
import urllib.parse

import pika
import pytest

from tests.security.conftest import add_user, call


@pytest.fixture
def tenants(make_broker):
    b = make_broker()
    # write also on the default exchange, to publish to her queues: as in
    # RabbitMQ, its permission is checked under the name amq.default
    add_user(b, "alice", "pw", "management", perms=("^alice\\.", "^(alice\\..*|amq\\.default)$", "^alice\\."))
    add_user(b, "mon", "pw", "monitoring", perms=None)
    return b


def login(b, user):
    return pika.BlockingConnection(pika.URLParameters(f"amqp://{user}:pw@{b.host}:{b.port}/%2F"))


def test_exclusive_queues_of_another_connection(tenants):
    b = tenants
    owner = pika.BlockingConnection(pika.URLParameters(b.url))
    ch = owner.channel()
    ch.queue_declare("alice.private", exclusive=True)
    ch.confirm_delivery()
    ch.basic_publish("", "alice.private", b"secret")
    q = "/api/queues/%2F/alice.private"
    for user, password in (("alice", "pw"), ("guest", "guest")):
        status, body = call(b, "POST", q + "/get", {"count": 1, "ackmode": "ack_requeue_false",
                                                    "encoding": "auto"}, user=user, password=password)
        assert status == 400 and "exclusive" in body["reason"], body
        status, body = call(b, "DELETE", q + "/contents", user=user, password=password)
        assert status == 400 and "exclusive" in body["reason"]
        status, body = call(b, "DELETE", q, user=user, password=password)
        assert status == 400 and "exclusive" in body["reason"]
    assert call(b, "GET", q)[1]["messages"] == 1
    owner.close()


def test_closing_a_connection_is_for_admins_and_its_own_user(tenants):
    b = tenants
    guest = pika.BlockingConnection(pika.URLParameters(b.url))
    alice = login(b, "alice")
    status, conns = call(b, "GET", "/api/connections", user="mon", password="pw")
    assert status == 200 and len(conns) == 2          # monitoring sees them all
    by_user = {c["user"]: urllib.parse.quote(c["name"], safe="") for c in conns}
    assert call(b, "DELETE", f"/api/connections/{by_user['guest']}", user="mon", password="pw")[0] == 403
    assert call(b, "DELETE", f"/api/connections/{by_user['alice']}", user="mon", password="pw")[0] == 403
    assert call(b, "DELETE", f"/api/connections/{by_user['guest']}", user="alice", password="pw")[0] == 404
    assert call(b, "DELETE", f"/api/connections/{by_user['alice']}", user="alice", password="pw")[0] == 204
    guest.process_data_events(0.2)
    assert guest.is_open
    assert call(b, "DELETE", f"/api/connections/{by_user['guest']}")[0] == 204
    for c in (alice, guest):
        try:
            c.close()
        except pika.exceptions.AMQPError:
            pass


def test_user_id_must_be_the_authenticated_user(tenants):
    b = tenants
    conn = login(b, "alice")
    ch = conn.channel()
    ch.queue_declare("alice.inbox")
    ch.confirm_delivery()
    ch.basic_publish("", "alice.inbox", b"mine", pika.BasicProperties(user_id="alice"))
    ch.basic_publish("", "alice.inbox", b"no user_id")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as err:
        ch.basic_publish("", "alice.inbox", b"forged", pika.BasicProperties(user_id="guest", headers={"h": 1},
                                                                              content_type="text/plain"))
    assert err.value.reply_code == 406
    assert "user_id property set to 'guest' but authenticated user was 'alice'" in err.value.reply_text
    ch = conn.channel()
    assert ch.queue_declare("alice.inbox", passive=True).method.message_count == 2
    conn.close()
    publish = "/api/exchanges/%2F/amq.default/publish"
    msg = {"routing_key": "alice.inbox", "payload": "x", "payload_encoding": "string"}
    status, body = call(b, "POST", publish, dict(msg, properties={"user_id": "guest"}), user="alice", password="pw")
    assert status == 400 and "user_id" in body["reason"]
    assert call(b, "POST", publish, dict(msg, properties={"user_id": "alice"}), user="alice", password="pw")[0] == 200


def test_no_publish_into_internal_exchanges_over_http(tenants):
    b = tenants
    assert call(b, "PUT", "/api/exchanges/%2F/inner", {"type": "fanout", "internal": True})[0] == 201
    status, body = call(b, "POST", "/api/exchanges/%2F/inner/publish",
                        {"routing_key": "", "payload": "x", "payload_encoding": "string"})
    assert status == 403 and "internal" in body["reason"]


def test_unbind_needs_read_on_the_source(tenants):
    b = tenants
    assert call(b, "PUT", "/api/exchanges/%2F/shared", {"type": "direct"})[0] == 201
    assert call(b, "PUT", "/api/queues/%2F/alice.q", {})[0] == 201
    assert call(b, "POST", "/api/bindings/%2F/e/shared/q/alice.q", {"routing_key": "k"})[0] == 201
    path = "/api/bindings/%2F/e/shared/q/alice.q/k"
    status, _ = call(b, "DELETE", path, user="alice", password="pw")
    assert status == 403
    assert call(b, "GET", path)[0] == 200                   # still bound
    assert call(b, "DELETE", path)[0] == 204


def test_policies_are_for_policymakers(tenants):
    b = tenants
    assert call(b, "PUT", "/api/policies/%2F/p1", {"pattern": "^x", "definition": {"max-length": 1}})[0] == 201
    for path in ("/api/policies", "/api/policies/%2F", "/api/policies/%2F/p1"):
        assert call(b, "GET", path, user="alice", password="pw")[0] == 403, path
        assert call(b, "GET", path)[0] == 200


def test_overview_counts_only_the_users_vhosts(tenants):
    b = tenants
    assert call(b, "PUT", "/api/vhosts/other", {})[0] == 201
    for i in range(3):
        assert call(b, "PUT", f"/api/queues/other/q{i}", {})[0] == 201
    assert call(b, "PUT", "/api/queues/%2F/alice.mine", {})[0] == 201
    _, mine = call(b, "GET", "/api/overview", user="alice", password="pw")
    _, everything = call(b, "GET", "/api/overview")
    assert everything["object_totals"]["queues"] - mine["object_totals"]["queues"] == 3
    assert everything["object_totals"]["exchanges"] > mine["object_totals"]["exchanges"]


def test_a_management_user_cannot_pause_another_connections_exclusive_queue(make_broker):
    """Issue 25 finding 9: PUT .../pause stopped deliveries from an
    exclusive queue of someone else's connection (delete and purge were
    refused already)."""
    b = make_broker()
    add_user(b, "mgr", "pw", "management")
    owner = pika.BlockingConnection(pika.URLParameters(b.url))
    ch = owner.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    for action in ("pause", "resume"):
        status, body = call(b, "PUT", f"/api/queues/%2F/{q}/{action}", user="mgr", password="pw")
        assert status == 400 and "exclusive" in body["reason"], (action, status, body)
    assert call(b, "GET", f"/api/queues/%2F/{q}")[1]["state"] == "running"
    ch.basic_publish("", q, b"still delivered")
    assert ch.basic_get(q, auto_ack=True)[2] == b"still delivered"
    owner.close()
