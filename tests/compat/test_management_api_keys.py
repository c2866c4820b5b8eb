"""Issue 13 item 10: the management API answers with RabbitMQ 3.10's keys
and types (outside Erlang internals) for the state RabbitMQ's samples were
captured in, and has the routes tools expect."""
import time

import pika

from tests.compat import api_keys
from tests.security.conftest import call


def test_keys_and_types_match_rabbitmq(make_broker):
    b = make_broker("[main]\nstats_interval = 200\n")
    params = pika.URLParameters(b.url)
    params.client_properties = {"connection_name": "api-sample"}
    conn = pika.BlockingConnection(params)
    ch = conn.channel()
    ch.exchange_declare("sample_x", "direct", durable=True)
    ch.queue_declare("sample_q", durable=True, arguments={"x-max-length": 1000})
    ch.queue_bind("sample_q", "sample_x", "rk")
    ch.confirm_delivery()
    for _ in range(5):
        ch.basic_publish("sample_x", "rk", b"sample!", pika.BasicProperties(delivery_mode=2))
    consumer = conn.channel()
    consumer.basic_qos(prefetch_count=2)
    consumer.basic_consume("sample_q", lambda *a: None)
    conn.process_data_events(0.3)
    time.sleep(0.8)                  # a few samples: rates, and idle_since once nothing moves
    conn.process_data_events(0.05)
    matched = total = 0
    report = []
    for route, theirs in api_keys.samples().items():
        if route.startswith("_"):
            continue
        path = route.replace("port-listener/5672", f"port-listener/{b.port}")
        status, ours = call(b, "GET", "/api" + path)
        assert status == api_keys.samples()["_http_status_by_route"].get(route, 200), (route, status)
        m, missing, mistyped = api_keys.compare(route, theirs, ours)
        matched += len(m)
        total += len(m) + len(missing) + len(mistyped)
        report += [f"{route}: missing {p}" for p in missing] + [f"{route}: {p} is {o}, not {t}"
                                                                for p, t, o in mistyped]
    print(f"RabbitMQ 3.10 keys matched: {matched}/{total} ({matched / total:.1%})")
    assert not [r for r in report if " is " in r], report          # no key with another type
    assert matched / total >= 0.9, "\n".join(report)
    assert matched / total >= 0.95, f"{matched}/{total}\n" + "\n".join(report)
    conn.close()


def test_routes_tools_expect(make_broker):
    b = make_broker()
    status, node = call(b, "GET", "/api/nodes")
    name = node[0]["name"]
    assert call(b, "GET", f"/api/nodes/{name}")[1]["name"] == name
    assert call(b, "GET", "/api/nodes/rabbit@nowhere")[0] == 404
    assert call(b, "GET", "/api/healthchecks/node/") == (200, {"status": "ok"})
    assert call(b, "GET", f"/api/healthchecks/node/{name}") == (200, {"status": "ok"})
    _, overview = call(b, "GET", "/api/overview")
    assert isinstance(overview["contexts"], list) and overview["contexts"][0]["port"] == str(b.http_port)
    for u in ("bulk1", "bulk2", "bulk3"):
        assert call(b, "PUT", f"/api/users/{u}", {"password": "x", "tags": ""})[0] == 201
    assert call(b, "POST", "/api/users/bulk-delete", {"users": ["bulk1", "bulk2", "nobody"]})[0] == 204
    names = [u["name"] for u in call(b, "GET", "/api/users")[1]]
    assert "bulk3" in names and "bulk1" not in names and "bulk2" not in names
    defs = call(b, "GET", "/api/definitions")[1]
    assert defs["parameters"] == [] and defs["global_parameters"][0]["name"] == "cluster_name"


def test_counters_mean_what_they_say(make_broker):
    b = make_broker("[main]\nstats_interval = 200\n")
    conn = pika.BlockingConnection(pika.URLParameters(b.url))
    ch = conn.channel()
    ch.queue_declare("cq")
    ch.confirm_delivery()
    for _ in range(4):
        ch.basic_publish("", "cq", b"x", pika.BasicProperties(timestamp=1700000000))
    ch.basic_publish("amq.direct", "nowhere", b"x")                      # dropped
    try:
        ch.basic_publish("amq.direct", "nowhere", b"x", mandatory=True)  # returned
    except pika.exceptions.UnroutableError:
        pass
    assert call(b, "GET", "/api/queues/%2F/cq")[1]["head_message_timestamp"] == 1700000000
    ch.basic_get("cq", auto_ack=True)
    ch.basic_get("cq", auto_ack=False)
    ch.basic_consume("cq", lambda c, m, p, body: None, auto_ack=True)
    conn.process_data_events(0.3)
    ch.basic_get("cq", auto_ack=True)                                    # empty now
    _, q = call(b, "GET", "/api/queues/%2F/cq")
    ms = q["message_stats"]
    assert (ms["publish"], ms["get_no_ack"], ms["get"], ms["deliver_no_ack"], ms["get_empty"]) == (4, 1, 1, 2, 1)
    assert ms["deliver_get"] == 4
    _, chans = call(b, "GET", "/api/channels")
    stats = chans[0]["message_stats"]
    assert (stats["confirm"], stats["drop_unroutable"], stats["return_unroutable"]) == (6, 1, 1)
    assert chans[0]["messages_unconfirmed"] == 0
    _, overview = call(b, "GET", "/api/overview")
    churn = overview["churn_rates"]
    assert churn["connection_created"] >= 1 and churn["channel_created"] >= 1 and churn["queue_declared"] >= 1
    conn.close()
