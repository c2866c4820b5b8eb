"""Dynamic shovels between two brokers of ours: the parameter API, queue to
queue with on-confirm, what arrives (bodies, properties, order), the state
the API shows, deletion, and the checks on a definition."""
import pika
import pytest

from tests.conftest import free_port, unique
from tests.links.conftest import call, drain, ok, publish, queue_depth, shovel_state, wait_for


def shovel(src, dest, **extra):
    value = {"src-uri": src.url, "src-queue": extra.pop("src_queue"), "dest-uri": dest.url}
    value.update({k.replace("_", "-"): v for k, v in extra.items()})
    return {"value": value}


def test_queue_to_queue_on_confirm(broker_a, broker_b):
    src_q, dest_q, name = unique("src"), unique("dest"), unique("shovel")
    props = pika.BasicProperties(delivery_mode=2, content_type="application/json", message_id="id-1",
                                 headers={"tenant": "t1", "n": 7}, priority=3, correlation_id="c",
                                 app_id="app", type="kind", timestamp=1700000000)
    publish(broker_a, src_q, [f"m{i}".encode() for i in range(1000)], props)
    status, _ = call(broker_a, "PUT", f"/api/parameters/shovel/%2F/{name}",
                     shovel(broker_a, broker_b, src_queue=src_q, dest_queue=dest_q))
    assert status == 201
    wait_for("all moved", lambda: queue_depth(broker_b, dest_q) == 1000 and queue_depth(broker_a, src_q) == 0)
    state = wait_for("message_count", lambda: (s := shovel_state(broker_a, name)) and s["message_count"] == 1000
                     and s)
    assert state["state"] == "running" and state["error"] is None and state["vhost"] == "/"
    assert state["src_queue"] == src_q and state["dest_queue"] == dest_q and state["ack_mode"] == "on-confirm"
    assert "guest:guest" not in state["src_uri"]
    got = drain(broker_b, dest_q)
    assert [body for body, _ in got] == [f"m{i}".encode() for i in range(1000)]
    p = got[0][1]
    assert (p.content_type, p.message_id, p.headers, p.priority, p.delivery_mode, p.correlation_id,
            p.app_id, p.type, p.timestamp) == ("application/json", "id-1", {"tenant": "t1", "n": 7}, 3, 2, "c",
                                               "app", "kind", 1700000000)
    # the definition is a parameter; PUT again is an update
    listed = ok(broker_a, "GET", "/api/parameters/shovel/%2F")
    assert [p["value"]["src-queue"] for p in listed if p["name"] == name] == [src_q]
    assert ok(broker_a, "GET", f"/api/parameters/shovel/%2F/{name}")["component"] == "shovel"
    status, _ = call(broker_a, "PUT", f"/api/parameters/shovel/%2F/{name}",
                     shovel(broker_a, broker_b, src_queue=src_q, dest_queue=dest_q))
    assert status == 204
    wait_for("running again", lambda: shovel_state(broker_a, name)["state"] == "running")
    publish(broker_a, src_q, [b"late"])
    assert [b for b, _ in drain(broker_b, dest_q, 1)] == [b"late"]
    # deleted: it stops, and what comes later stays at the source
    assert call(broker_a, "DELETE", f"/api/parameters/shovel/%2F/{name}")[0] == 204
    assert shovel_state(broker_a, name) is None
    assert call(broker_a, "GET", f"/api/parameters/shovel/%2F/{name}")[0] == 404
    assert call(broker_a, "DELETE", f"/api/parameters/shovel/%2F/{name}")[0] == 404
    wait_for("consumer gone", lambda: ok(broker_a, "GET", f"/api/queues/%2F/{src_q}")["consumers"] == 0)
    publish(broker_a, src_q, [b"stays"])
    assert queue_depth(broker_a, src_q) == 1 and queue_depth(broker_b, dest_q) == 0


def test_to_an_exchange_with_its_key_and_from_a_local_source(broker_a, broker_b):
    """Defined on the destination broker: src-uri is the other broker,
    dest-uri "amqp://" is this broker itself (in-process, LavinMQ's local
    shovels); dest-exchange with dest-exchange-key."""
    src_q, bound_q, name, ex = unique("src"), unique("bound"), unique("shovel"), unique("ex")
    conn = pika.BlockingConnection(pika.URLParameters(broker_b.url))
    ch = conn.channel()
    ch.exchange_declare(ex, "direct", durable=True)
    ch.queue_declare(bound_q, durable=True)
    ch.queue_bind(bound_q, ex, "to-here")
    conn.close()
    publish(broker_a, src_q, [b"1", b"2", b"3"])
    ok(broker_b, "PUT", f"/api/parameters/shovel/%2F/{name}",
       {"value": {"src-uri": broker_a.url, "src-queue": src_q, "dest-uri": "amqp://",
                  "dest-exchange": ex, "dest-exchange-key": "to-here"}})
    assert [b for b, _ in drain(broker_b, bound_q, 3)] == [b"1", b"2", b"3"]
    connections = ok(broker_b, "GET", "/api/connections")
    assert f"Shovel {name} sink" in [c["name"] for c in connections]
    ok(broker_b, "DELETE", f"/api/parameters/shovel/%2F/{name}")


def test_source_exchange_gets_its_own_queue(broker_a, broker_b):
    ex, dest_q, name = unique("ex"), unique("dest"), unique("shovel")
    conn = pika.BlockingConnection(pika.URLParameters(broker_a.url))
    ch = conn.channel()
    ch.exchange_declare(ex, "topic", durable=True)
    ok(broker_a, "PUT", f"/api/parameters/shovel/%2F/{name}",
       {"value": {"src-uri": broker_a.url, "src-exchange": ex, "src-exchange-key": "orders.#",
                  "dest-uri": broker_b.url, "dest-queue": dest_q}})
    wait_for("running", lambda: shovel_state(broker_a, name)["state"] == "running")
    for rk in ("orders.eu", "invoices.eu", "orders.us"):
        ch.basic_publish(ex, rk, rk.encode())
    conn.close()
    assert sorted(b for b, _ in drain(broker_b, dest_q, 2)) == [b"orders.eu", b"orders.us"]
    assert queue_depth(broker_b, dest_q) == 0
    ok(broker_a, "DELETE", f"/api/parameters/shovel/%2F/{name}")


@pytest.mark.parametrize("value, reason", [
    ({"src-queue": "q", "dest-uri": "amqp://", "dest-queue": "q"}, "'src-uri' and 'dest-uri' are required"),
    ({"src-uri": "amqp://", "dest-uri": "amqp://", "dest-queue": "q"}, "requires a queue or an exchange"),
    ({"src-uri": "amqp://", "src-queue": "q", "dest-uri": "amqp://"}, "destination requires"),
    ({"src-uri": "ftp://x", "src-queue": "q", "dest-uri": "amqp://", "dest-queue": "q"}, "amqp or amqps"),
    ({"src-uri": "amqp://", "src-queue": "q", "dest-uri": "amqp://", "dest-queue": "q", "ack-mode": "never"},
     "ack-mode must be one of"),
    ({"src-uri": "amqp://", "src-queue": "q", "dest-uri": "amqp://", "dest-queue": "q",
      "src-prefetch-count": -1}, "src-prefetch-count"),
    ({"src-uri": "amqp://", "src-queue": "q", "dest-uri": "amqp://", "dest-queue": "q",
      "src-delete-after": "soon"}, "src-delete-after"),
    ({"src-uri": "amqp://", "src-queue": "q", "dest-uri": "amqp://", "dest-queue": "q",
      "reconnect-delay": "x"}, "reconnect-delay"),
    ({"src-uri": [], "src-queue": "q", "dest-uri": "amqp://", "dest-queue": "q"}, "non-empty list"),
    ({"src-uri": "amqp://h/a/b", "src-queue": "q", "dest-uri": "amqp://", "dest-queue": "q"}, "percent-encoded"),
    ("not an object", "must be an object"),
])
def test_bad_definitions_are_refused(broker_a, value, reason):
    name = unique("bad")
    status, body = call(broker_a, "PUT", f"/api/parameters/shovel/%2F/{name}", {"value": value})
    assert status == 400 and reason in body["reason"], body
    assert call(broker_a, "GET", f"/api/parameters/shovel/%2F/{name}")[0] == 404
    assert shovel_state(broker_a, name) is None


def test_parameter_api_rules(broker_a):
    assert call(broker_a, "PUT", "/api/parameters/nonsense/%2F/x", {"value": {}})[0] == 400
    assert call(broker_a, "PUT", "/api/parameters/shovel/%2F/x", {"nothing": 1})[0] == 400
    assert call(broker_a, "GET", "/api/parameters/shovel/no-such-vhost")[0] == 404
    assert call(broker_a, "GET", "/api/shovels/%2F/no-such-shovel")[0] == 404
    user = unique("mgmt")
    ok(broker_a, "PUT", f"/api/users/{user}", {"password": "pw", "tags": "management"})
    ok(broker_a, "PUT", f"/api/permissions/%2F/{user}", {"configure": ".*", "write": ".*", "read": ".*"})
    value = {"value": {"src-uri": "amqp://", "src-queue": "q", "dest-uri": "amqp://", "dest-queue": "q2"}}
    assert call(broker_a, "PUT", "/api/parameters/shovel/%2F/x", value, user=user, password="pw")[0] == 403
    assert call(broker_a, "GET", "/api/shovels", user=user, password="pw")[0] == 403
    # a policymaker may define shovels, but a local one only over what it may read and configure
    ok(broker_a, "PUT", f"/api/users/{user}", {"password": "pw", "tags": "policymaker"})
    ok(broker_a, "PUT", f"/api/permissions/%2F/{user}", {"configure": "^mine", "write": ".*", "read": ".*"})
    status, body = call(broker_a, "PUT", f"/api/parameters/shovel/%2F/{unique('x')}", value, user=user,
                        password="pw")
    assert status == 403 and "can't access" in body["reason"]


def test_unreachable_destination_shows_error_and_keeps_messages(broker_a):
    src_q, name = unique("src"), unique("shovel")
    publish(broker_a, src_q, [b"kept"])
    port = free_port()      # nothing listens there
    ok(broker_a, "PUT", f"/api/parameters/shovel/%2F/{name}",
       {"value": {"src-uri": broker_a.url, "src-queue": src_q, "dest-uri": f"amqp://guest:guest@127.0.0.1:{port}",
                  "dest-queue": "q", "reconnect-delay": 1}})
    state = wait_for("error", lambda: (s := shovel_state(broker_a, name)) and s["state"] == "error" and s)
    assert "connection refused" in state["error"] and str(port) in state["error"]
    assert queue_depth(broker_a, src_q) == 1
    ok(broker_a, "DELETE", f"/api/parameters/shovel/%2F/{name}")


def test_wrong_password_is_an_error_with_the_reason(broker_a, broker_b):
    name = unique("shovel")
    bad = broker_b.url.replace("guest:guest", "guest:wrong")
    ok(broker_a, "PUT", f"/api/parameters/shovel/%2F/{name}",
       {"value": {"src-uri": broker_a.url, "src-queue": unique("q"), "dest-uri": bad, "dest-queue": "q",
                  "reconnect-delay": 30}})
    state = wait_for("error", lambda: (s := shovel_state(broker_a, name)) and s["state"] == "error" and s)
    assert "403" in state["error"] and "wrong" not in state["error"]
    ok(broker_a, "DELETE", f"/api/parameters/shovel/%2F/{name}")


def test_answers_match_the_openapi_document(broker_a, broker_b):
    import jsonschema
    doc = ok(broker_a, "GET", "/api/openapi.json")
    name, prefix = unique("shovel"), unique("doc")
    ok(broker_a, "PUT", f"/api/parameters/shovel/%2F/{name}",
       {"value": {"src-uri": "amqp://", "src-queue": unique("q"), "dest-uri": broker_b.url, "dest-queue": "q"}})
    ok(broker_a, "PUT", f"/api/parameters/federation-upstream/%2F/{prefix}", {"value": {"uri": broker_b.url}})
    ok(broker_a, "PUT", f"/api/policies/%2F/{prefix}", {"pattern": f"^{prefix}", "apply-to": "exchanges",
                                                          "definition": {"federation-upstream": prefix}})
    ok(broker_a, "PUT", f"/api/exchanges/%2F/{prefix}.x", {"type": "fanout", "durable": True})
    wait_for("link", lambda: any(lk["resource"] == f"{prefix}.x" for lk in ok(broker_a, "GET", "/api/federation-links")))
    for path in ("/api/shovels", "/api/federation-links", "/api/parameters"):
        schema = doc["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
        root = {"$ref": "#/$defs/t", "$defs": {"t": schema}, "components": doc["components"]}
        for suffix in ("", "?page=1&page_size=2"):
            body = ok(broker_a, "GET", path + suffix)
            assert body, path
            jsonschema.Draft202012Validator(root).validate(body)
    ok(broker_a, "DELETE", f"/api/policies/%2F/{prefix}")
    ok(broker_a, "DELETE", f"/api/exchanges/%2F/{prefix}.x")
    ok(broker_a, "DELETE", f"/api/parameters/federation-upstream/%2F/{prefix}")
    ok(broker_a, "DELETE", f"/api/parameters/shovel/%2F/{name}")
