"""Federation between two brokers of ours (a upstream, b downstream):
upstreams and sets as parameters, the policy keys, exchange federation
(bindings mirrored upstream, x-received-from, the hop limit), queue
federation (consumer-driven) and /api/federation-links."""
import urllib.parse

import pika

from tests.conftest import free_port, unique
from tests.links.conftest import call, drain, ok, publish, queue_depth, wait_for


def q(name):
    return urllib.parse.quote(name, safe="")


def channel(b, vhost="%2F"):
    conn = pika.BlockingConnection(pika.URLParameters(b.url.rsplit("/", 1)[0] + "/" + vhost))
    return conn, conn.channel()


def links(b, **match):
    return [link for link in ok(b, "GET", "/api/federation-links")
            if all(link.get(k) == v for k, v in match.items())]


def link_running(b, resource, upstream=None):
    match = {"resource": resource, **({"upstream": upstream} if upstream else {})}
    return wait_for(f"link {resource} running", lambda: (found := links(b, **match)) and
                    all(link["status"] == "running" for link in found) and found)


def federate(down, up, prefix, kind="exchanges", **upstream_extra):
    """An upstream named after the prefix, and a policy for names starting with it."""
    name = prefix + "-up"
    extra = {k.replace("_", "-"): v for k, v in upstream_extra.items()}
    ok(down, "PUT", f"/api/parameters/federation-upstream/%2F/{name}", {"value": {"uri": up.url, **extra}})
    ok(down, "PUT", f"/api/policies/%2F/{prefix}", {"pattern": f"^{prefix}", "apply-to": kind,
                                                      "definition": {"federation-upstream": name}})
    return name


def upstream_bindings(b, queue_name):
    return [bd for bd in ok(b, "GET", "/api/bindings/%2F") if bd["destination"] == queue_name
            and bd["destination_type"] == "exchange"]


def test_exchange_federation_mirrors_bindings(broker_a, broker_b):
    prefix = unique("fx")
    ex, local_q = prefix + ".orders", unique("local")
    upstream = federate(broker_b, broker_a, prefix, prefetch_count=50, expires=600000, message_ttl=3600000)
    conn, ch = channel(broker_b)
    ch.exchange_declare(ex, "topic", durable=True)
    ch.queue_declare(local_q, durable=True)
    ch.queue_bind(local_q, ex, "eu.*")
    (link,) = link_running(broker_b, ex)
    assert (link["type"], link["upstream"], link["upstream_exchange"], link["vhost"]) == ("exchange", upstream, ex, "/")
    assert "guest:guest" not in link["uri"] and link["consumer-tag"] == f"federation-link-{upstream}"
    # upstream: its queue (with expires and message-ttl) and the helper exchange bound to it
    fed_q = next(x["name"] for x in ok(broker_a, "GET", "/api/queues/%2F") if x["name"].startswith(f"federation: {ex} ->"))
    assert fed_q.endswith(f":/:{ex}")
    args = ok(broker_a, "GET", f"/api/queues/%2F/{q(fed_q)}")["arguments"]
    assert args == {"x-internal-purpose": "federation", "x-expires": 600000, "x-message-ttl": 3600000}
    helper = ok(broker_a, "GET", f"/api/exchanges/%2F/{q(fed_q)}")
    assert helper["type"] == "x-federation-upstream" and helper["internal"]
    wait_for("binding mirrored", lambda: [b["routing_key"] for b in upstream_bindings(broker_a, fed_q)] == ["eu.*"])
    (mirrored,) = upstream_bindings(broker_a, fed_q)
    assert mirrored["source"] == ex
    assert mirrored["arguments"]["x-bound-from"] == [{"vhost": "/", "exchange": ex, "hops": 1}]
    # messages published upstream arrive downstream with x-received-from
    pub_conn, pub = channel(broker_a)
    for rk in ("eu.se", "us.ny", "eu.no"):
        pub.basic_publish(ex, rk, rk.encode(), pika.BasicProperties(headers={"h": 1}))
    got = drain(broker_b, local_q, 2)
    assert sorted(body for body, _ in got) == [b"eu.no", b"eu.se"]
    headers = got[0][1].headers
    assert headers["h"] == 1
    (entry,) = headers["x-received-from"]
    assert entry["exchange"] == ex and entry["redelivered"] is False and entry["uri"] == link["uri"]
    # a new binding is mirrored at once, a removed one goes upstream too
    ch.queue_bind(local_q, ex, "us.#")
    wait_for("second binding", lambda: len(upstream_bindings(broker_a, fed_q)) == 2)
    pub.basic_publish(ex, "us.ny", b"now")
    assert [b for b, _ in drain(broker_b, local_q, 1)] == [b"now"]
    ch.queue_unbind(local_q, ex, "eu.*")
    wait_for("unbound upstream", lambda: [b["routing_key"] for b in upstream_bindings(broker_a, fed_q)] == ["us.#"])
    # two local bindings with one key are one upstream binding, removed with the last of them
    other_q = unique("other")
    ch.queue_declare(other_q, durable=True)
    ch.queue_bind(other_q, ex, "us.#")
    ch.queue_unbind(local_q, ex, "us.#")
    pub.basic_publish(ex, "us.ny", b"still")
    assert [b for b, _ in drain(broker_b, other_q, 1)] == [b"still"]
    assert len(upstream_bindings(broker_a, fed_q)) == 1
    # the policy goes: the link goes, and what it made upstream with it
    ok(broker_b, "DELETE", f"/api/policies/%2F/{prefix}")
    wait_for("link gone", lambda: not links(broker_b, resource=ex))
    wait_for("upstream queue gone", lambda: call(broker_a, "GET", f"/api/queues/%2F/{q(fed_q)}")[0] == 404)
    assert call(broker_a, "GET", f"/api/exchanges/%2F/{q(fed_q)}")[0] == 404
    pub_conn.close()
    conn.close()
    ok(broker_b, "DELETE", f"/api/parameters/federation-upstream/%2F/{upstream}")


def test_hop_limit_in_a_cycle(broker_a, broker_b):
    """a and b federate each other's exchange: with max-hops 1 a message
    crosses once and does not come back."""
    prefix = unique("cyc")
    ex = prefix + ".x"
    federate(broker_b, broker_a, prefix)
    federate(broker_a, broker_b, prefix)
    queues = {}
    for b in (broker_a, broker_b):
        conn, ch = channel(b)
        ch.exchange_declare(ex, "fanout", durable=True)
        queues[b] = unique("cq")
        ch.queue_declare(queues[b], durable=True)
        ch.queue_bind(queues[b], ex, "")
        conn.close()
    link_running(broker_a, ex)
    link_running(broker_b, ex)
    # each side mirrors its own binding; the binding mirrored to it has no hop left to go on
    conn, ch = channel(broker_a)
    wait_for("both bound", lambda: all(any(bd["destination"].startswith(f"federation: {ex}")
                                           for bd in ok(b, "GET", "/api/bindings/%2F") if bd["source"] == ex)
                                       for b in (broker_a, broker_b)))
    ch.basic_publish(ex, "", b"from a")
    conn.close()
    assert [b for b, _ in drain(broker_b, queues[broker_b], 1)] == [b"from a"]
    assert [b for b, _ in drain(broker_a, queues[broker_a], 1)] == [b"from a"]
    import time
    time.sleep(0.5)         # a copy coming back would have had the time to
    assert queue_depth(broker_a, queues[broker_a]) == 0 and queue_depth(broker_b, queues[broker_b]) == 0
    dropped = [link for b in (broker_a, broker_b) for link in links(b, resource=ex)]
    assert sum(link["message_count"] for link in dropped) == 1
    for b in (broker_a, broker_b):
        ok(b, "DELETE", f"/api/policies/%2F/{prefix}")
        ok(b, "DELETE", f"/api/parameters/federation-upstream/%2F/{prefix}-up")


def test_upstream_sets_and_all(broker_a, broker_b):
    """Two upstreams (two vhosts of a); a set overriding the upstream
    exchange of one; then "all"."""
    prefix = unique("set")
    vhosts = [unique("v1"), unique("v2")]
    for v in vhosts:
        ok(broker_a, "PUT", f"/api/vhosts/{v}")
        ok(broker_a, "PUT", f"/api/permissions/{v}/guest", {"configure": ".*", "write": ".*", "read": ".*"})
    ups = [f"{prefix}-{i}" for i in (1, 2)]
    for up, v in zip(ups, vhosts):
        ok(broker_b, "PUT", f"/api/parameters/federation-upstream/%2F/{up}",
           {"value": {"uri": broker_a.url.rsplit("/", 1)[0] + "/" + v}})
    ok(broker_b, "PUT", f"/api/parameters/federation-upstream-set/%2F/{prefix}",
       {"value": [{"upstream": ups[0]}, {"upstream": ups[1], "exchange": "renamed"}]})
    ok(broker_b, "PUT", f"/api/policies/%2F/{prefix}", {"pattern": f"^{prefix}", "apply-to": "exchanges",
                                                          "definition": {"federation-upstream-set": prefix}})
    ex, local_q = prefix + ".x", unique("local")
    conn, ch = channel(broker_b)
    ch.exchange_declare(ex, "direct", durable=True)
    ch.queue_declare(local_q, durable=True)
    ch.queue_bind(local_q, ex, "k")
    found = link_running(broker_b, ex)
    assert sorted((f["upstream"], f["upstream_exchange"]) for f in found) == [(ups[0], ex), (ups[1], "renamed")]
    for v, target in zip(vhosts, (ex, "renamed")):
        c, up_ch = channel(broker_a, v)
        wait_for("mirrored", lambda: any(bd["source"] == target for bd in ok(broker_a, "GET", f"/api/bindings/{v}")
                                         if bd["destination_type"] == "exchange"))
        up_ch.basic_publish(target, "k", f"from {v}".encode())
        c.close()
    assert sorted(b for b, _ in drain(broker_b, local_q, 2)) == sorted(f"from {v}".encode() for v in vhosts)
    ok(broker_b, "PUT", f"/api/policies/%2F/{prefix}", {"pattern": f"^{prefix}", "apply-to": "exchanges",
                                                          "definition": {"federation-upstream-set": "all"}})
    wait_for("all: every upstream, as they are", lambda: sorted(
        (f["upstream"], f["upstream_exchange"], f["status"]) for f in links(broker_b, resource=ex))
        == [(ups[0], ex, "running"), (ups[1], ex, "running")]
        and len(links(broker_b, resource=ex)) == 2)
    # an upstream deleted: its links go
    ok(broker_b, "DELETE", f"/api/parameters/federation-upstream/%2F/{ups[1]}")
    wait_for("one left", lambda: [f["upstream"] for f in links(broker_b, resource=ex)] == [ups[0]])
    conn.close()
    ok(broker_b, "DELETE", f"/api/policies/%2F/{prefix}")
    ok(broker_b, "DELETE", f"/api/parameters/federation-upstream/%2F/{ups[0]}")
    ok(broker_b, "DELETE", f"/api/parameters/federation-upstream-set/%2F/{prefix}")
    for v in vhosts:
        ok(broker_a, "DELETE", f"/api/vhosts/{v}")


def test_queue_federation_follows_consumers(broker_a, broker_b):
    prefix = unique("fq")
    name = prefix + ".work"
    federate(broker_b, broker_a, prefix, kind="queues")
    publish(broker_a, name, [f"m{i}".encode() for i in range(100)])
    conn, ch = channel(broker_b)
    ch.queue_declare(name, durable=True)
    (link,) = link_running(broker_b, name)
    assert (link["type"], link["queue"], link["upstream_queue"]) == ("queue", name, name)
    import time
    time.sleep(0.5)
    assert queue_depth(broker_a, name) == 100, "no consumer here: nothing is fetched"
    got = []
    ch.basic_qos(prefetch_count=10)
    tag = ch.basic_consume(name, lambda c, m, p, body: (got.append((body, p)), c.basic_ack(m.delivery_tag)))
    deadline = time.monotonic() + 20
    while len(got) < 100 and time.monotonic() < deadline:
        conn.process_data_events(0.1)
    assert sorted(body for body, _ in got) == sorted(f"m{i}".encode() for i in range(100))
    assert got[0][1].headers["x-received-from"][0]["queue"] == name
    wait_for("upstream drained", lambda: queue_depth(broker_a, name) == 0)
    ch.basic_cancel(tag)
    conn.process_data_events(0.3)
    publish(broker_a, name, [b"after"], declare=False)
    time.sleep(0.5)
    assert queue_depth(broker_a, name) == 1, "no consumer any more: the link stopped fetching"
    ok(broker_b, "DELETE", f"/api/policies/%2F/{prefix}")
    wait_for("link gone", lambda: not links(broker_b, resource=name))
    assert queue_depth(broker_a, name) == 1, "a queue link leaves the upstream queue alone"
    conn.close()
    ok(broker_b, "DELETE", f"/api/parameters/federation-upstream/%2F/{prefix}-up")


def test_unreachable_upstream_and_bad_values(broker_b):
    prefix = unique("bad")
    federate(broker_b, type("B", (), {"url": f"amqp://guest:guest@127.0.0.1:{free_port()}"}), prefix,
             reconnect_delay=1)
    conn, ch = channel(broker_b)
    ch.exchange_declare(prefix + ".x", "direct", durable=True)
    conn.close()
    (link,) = wait_for("error", lambda: (found := links(broker_b, resource=prefix + ".x"))
                       and found[0]["status"] == "error" and found)
    assert "connection refused" in link["error"]
    ok(broker_b, "DELETE", f"/api/policies/%2F/{prefix}")
    ok(broker_b, "DELETE", f"/api/parameters/federation-upstream/%2F/{prefix}-up")
    for component, value, reason in [
        ("federation-upstream", {}, "'uri' is required"),
        ("federation-upstream", {"uri": "http://x"}, "amqp or amqps"),
        ("federation-upstream", {"uri": "amqp://", "max-hops": 0}, "max-hops"),
        ("federation-upstream", {"uri": "amqp://", "ack-mode": "maybe"}, "ack-mode"),
        ("federation-upstream", {"uri": "amqp://", "expires": "soon"}, "expires"),
        ("federation-upstream-set", {"upstream": "x"}, "list of objects"),
        ("federation-upstream-set", [{"max-hops": 2}], "'upstream'"),
    ]:
        status, body = call(broker_b, "PUT", f"/api/parameters/{component}/%2F/x", {"value": value})
        assert status == 400 and reason in body["reason"], (component, value, body)


def test_upstreams_in_definitions(broker_b):
    name = unique("up")
    value = {"uri": "amqp://guest:guest@127.0.0.1:1", "max-hops": 2, "prefetch-count": 10}
    ok(broker_b, "PUT", f"/api/parameters/federation-upstream/%2F/{name}", {"value": value})
    ok(broker_b, "PUT", f"/api/parameters/federation-upstream-set/%2F/{name}", {"value": [{"upstream": name}]})
    exported = ok(broker_b, "GET", "/api/definitions")["parameters"]
    assert {"name": name, "vhost": "/", "component": "federation-upstream", "value": value} in exported
    assert {"name": name, "vhost": "/", "component": "federation-upstream-set",
            "value": [{"upstream": name}]} in exported
    ok(broker_b, "DELETE", f"/api/parameters/federation-upstream/%2F/{name}")
    ok(broker_b, "DELETE", f"/api/parameters/federation-upstream-set/%2F/{name}")
    ok(broker_b, "POST", "/api/definitions", {"parameters": [p for p in exported if p["name"] == name]})
    assert ok(broker_b, "GET", f"/api/parameters/federation-upstream/%2F/{name}")["value"] == value
    ok(broker_b, "DELETE", f"/api/parameters/federation-upstream/%2F/{name}")
    ok(broker_b, "DELETE", f"/api/parameters/federation-upstream-set/%2F/{name}")
