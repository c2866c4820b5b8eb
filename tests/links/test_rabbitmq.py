"""RabbitMQ 3.10 as a peer: a queue migrated from RabbitMQ by our shovel,
RabbitMQ as an exchange and a queue federation upstream, and the other way
round (RabbitMQ's own federation plugin with our broker as its upstream)."""
import json
import time

import pika

from tests.conftest import unique
from tests.links.conftest import call, drain, ok, publish, queue_depth, wait_for


def links(b, resource):
    return [link for link in ok(b, "GET", "/api/federation-links") if link["resource"] == resource]


def test_migrate_a_queue_from_rabbitmq(rabbitmq, broker_b):
    """A shovel per queue drains RabbitMQ into this broker while both run:
    src-delete-after queue-length, and the shovel is gone when it is done."""
    queue, name = unique("legacy"), unique("migrate")
    props = pika.BasicProperties(delivery_mode=2, content_type="text/plain", message_id="x",
                                 headers={"origin": "rabbit", "n": 1}, priority=2, expiration="600000")
    bodies = [f"msg {i}".encode() for i in range(10_000)]
    publish(rabbitmq, queue, bodies, props)
    assert queue_depth(rabbitmq, queue) == 10_000
    ok(broker_b, "PUT", f"/api/parameters/shovel/%2F/{name}",
       {"value": {"src-uri": rabbitmq.url, "src-queue": queue, "dest-uri": "amqp://", "dest-queue": queue,
                  "src-delete-after": "queue-length"}})
    wait_for("migrated", lambda: call(broker_b, "GET", f"/api/parameters/shovel/%2F/{name}")[0] == 404,
             timeout=60)
    assert queue_depth(rabbitmq, queue) == 0
    got = drain(broker_b, queue)
    assert [b for b, _ in got] == bodies
    p = got[0][1]
    assert (p.content_type, p.message_id, p.headers, p.priority, p.delivery_mode, p.expiration) == \
        ("text/plain", "x", {"origin": "rabbit", "n": 1}, 2, 2, "600000")


def test_rabbitmq_as_exchange_upstream(rabbitmq, broker_b):
    prefix = unique("rx")
    ex, local_q = prefix + ".events", unique("local")
    ok(broker_b, "PUT", f"/api/parameters/federation-upstream/%2F/{prefix}",
       {"value": {"uri": rabbitmq.url, "max-hops": 2}})
    ok(broker_b, "PUT", f"/api/policies/%2F/{prefix}", {"pattern": f"^{prefix}", "apply-to": "exchanges",
                                                          "definition": {"federation-upstream": prefix}})
    conn = pika.BlockingConnection(pika.URLParameters(broker_b.url))
    ch = conn.channel()
    ch.exchange_declare(ex, "topic", durable=True)
    ch.queue_declare(local_q, durable=True)
    ch.queue_bind(local_q, ex, "a.#")
    wait_for("link running", lambda: [lk["status"] for lk in links(broker_b, ex)] == ["running"])
    # the link declared the exchange, its queue and RabbitMQ's own x-federation-upstream exchange there
    listed = rabbitmq.ctl("list_exchanges", "name", "type", "--formatter", "json")
    types = {e["name"]: e["type"] for e in json.loads(listed[listed.index("["):])}
    assert types[ex] == "topic"
    helper = next(n for n in types if n.startswith(f"federation: {ex} ->"))
    assert types[helper] == "x-federation-upstream"
    rconn = pika.BlockingConnection(pika.URLParameters(rabbitmq.url))
    rch = rconn.channel()
    wait_for("binding mirrored", lambda: f"{ex}\texchange\t{helper}\texchange\ta.#" in
             rabbitmq.ctl("list_bindings", "source_name", "source_kind", "destination_name", "destination_kind",
                          "routing_key"))
    for rk in ("a.1", "b.1", "a.2"):
        rch.basic_publish(ex, rk, rk.encode())
    got = drain(broker_b, local_q, 2)
    assert sorted(b for b, _ in got) == [b"a.1", b"a.2"]
    (entry,) = got[0][1].headers["x-received-from"]
    assert entry["exchange"] == ex and entry["cluster-name"].startswith("lavinmq-test-")
    ok(broker_b, "DELETE", f"/api/policies/%2F/{prefix}")
    wait_for("cleaned up on RabbitMQ", lambda: helper not in rabbitmq.ctl("list_queues", "name"))
    rconn.close()
    conn.close()
    ok(broker_b, "DELETE", f"/api/parameters/federation-upstream/%2F/{prefix}")


def test_rabbitmq_as_queue_upstream(rabbitmq, broker_b):
    prefix = unique("rq")
    queue = prefix + ".jobs"
    publish(rabbitmq, queue, [f"job {i}".encode() for i in range(500)])
    ok(broker_b, "PUT", f"/api/parameters/federation-upstream/%2F/{prefix}", {"value": {"uri": rabbitmq.url}})
    ok(broker_b, "PUT", f"/api/policies/%2F/{prefix}", {"pattern": f"^{prefix}", "apply-to": "queues",
                                                          "definition": {"federation-upstream": prefix}})
    conn = pika.BlockingConnection(pika.URLParameters(broker_b.url))
    ch = conn.channel()
    ch.queue_declare(queue, durable=True)
    wait_for("link running", lambda: [lk["status"] for lk in links(broker_b, queue)] == ["running"])
    got = []
    ch.basic_consume(queue, lambda c, m, p, body: got.append(body), auto_ack=True)
    deadline = time.monotonic() + 30
    while len(got) < 500 and time.monotonic() < deadline:
        conn.process_data_events(0.1)
    assert got == [f"job {i}".encode() for i in range(500)]
    assert queue_depth(rabbitmq, queue) == 0
    conn.close()
    ok(broker_b, "DELETE", f"/api/policies/%2F/{prefix}")
    ok(broker_b, "DELETE", f"/api/parameters/federation-upstream/%2F/{prefix}")


def test_rabbitmq_federates_and_shovels_from_us(rabbitmq, broker_a):
    """The other way round: RabbitMQ's federation plugin uses our broker as
    its upstream (our x-federation-upstream exchange type), and RabbitMQ's
    shovel plugin drains one of our queues."""
    prefix = unique("from-us")
    ex, rabbit_q = prefix + ".x", unique("rq")
    uri = broker_a.url.rsplit("/", 1)[0]
    rabbitmq.ctl("set_parameter", "federation-upstream", prefix, json.dumps({"uri": uri}))
    rabbitmq.ctl("set_policy", "--apply-to", "exchanges", prefix, f"^{prefix}",
                 json.dumps({"federation-upstream": prefix}))
    rconn = pika.BlockingConnection(pika.URLParameters(rabbitmq.url))
    rch = rconn.channel()
    rch.exchange_declare(ex, "direct", durable=True)
    rch.queue_declare(rabbit_q, durable=True)
    rch.queue_bind(rabbit_q, ex, "k")
    helper = wait_for("RabbitMQ's link made its helper exchange here", lambda: next(
        (e["name"] for e in ok(broker_a, "GET", "/api/exchanges/%2F") if e["type"] == "x-federation-upstream"
         and e["name"].startswith(f"federation: {ex} ->")), None), timeout=30)
    wait_for("binding mirrored here", lambda: any(
        b["source"] == ex and b["destination"] == helper and b["routing_key"] == "k"
        for b in ok(broker_a, "GET", "/api/bindings/%2F")), timeout=30)
    conn = pika.BlockingConnection(pika.URLParameters(broker_a.url))
    ch = conn.channel()
    ch.basic_publish(ex, "k", b"to rabbit")
    ch.basic_publish(ex, "other", b"not bound")
    assert [b for b, _ in drain(rabbitmq, rabbit_q, 1, timeout=20)] == [b"to rabbit"]
    rabbitmq.ctl("clear_policy", prefix)
    rabbitmq.ctl("clear_parameter", "federation-upstream", prefix)
    # RabbitMQ's shovel with our queue as its source
    src_q = unique("ours")
    publish(broker_a, src_q, [f"s{i}".encode() for i in range(200)])
    rabbitmq.ctl("set_parameter", "shovel", prefix, json.dumps({
        "src-uri": uri, "src-queue": src_q, "dest-uri": "amqp://", "dest-queue": src_q,
        "src-delete-after": "queue-length"}))
    wait_for("moved to RabbitMQ", lambda: queue_depth(rabbitmq, src_q) == 200, timeout=30)
    assert [b for b, _ in drain(rabbitmq, src_q, 200, timeout=30)] == [f"s{i}".encode() for i in range(200)]
    wait_for("acked here", lambda: queue_depth(broker_a, src_q) == 0)
    conn.close()
    rconn.close()
