"""Shovels to HTTP destinations (an aiohttp server): each message POSTed as
LavinMQ maps it, acked at the source only after a 2xx; a failing endpoint
leaves the messages at the source, shows the error, and gets them again
after reconnect-delay."""
import base64

import pika

from tests.conftest import unique
from tests.links.conftest import call, ok, publish, queue_depth, shovel_state, wait_for


def define(broker, name, src_q, dest_uri, **extra):
    value = {"src-uri": broker.url, "src-queue": src_q, "dest-uri": dest_uri, "reconnect-delay": 1}
    value.update(extra)
    ok(broker, "PUT", f"/api/parameters/shovel/%2F/{name}", {"value": value})


def test_messages_are_posted_as_lavinmq_maps_them(broker_a, http_sink):
    src_q, name = unique("src"), unique("http")
    props = pika.BasicProperties(content_type="application/json", message_id="order-1", delivery_mode=2,
                                 headers={"tenant": "t1", "n": 7, "nested": {"a": [1, 2]}, "bad\nname": "x\ry"})
    publish(broker_a, src_q, [b'{"a": 1}'], props)
    publish(broker_a, src_q, [b"plain"], pika.BasicProperties(headers={"uri_path": "/from/header"}))
    user_uri = http_sink.url.replace("http://", "http://hook:s3cret@") + "/hooks/in?x=1"
    define(broker_a, name, src_q, user_uri)
    wait_for("both posted", lambda: len(http_sink.ok_requests()) == 2)
    first, second = http_sink.ok_requests()
    assert first["method"] == "POST" and first["path"] == "/hooks/in?x=1" and first["body"] == b'{"a": 1}'
    h = first["headers"]
    assert h["Content-Type"] == "application/json" and h["X-Message-Id"] == "order-1"
    assert h["X-tenant"] == "t1" and h["X-n"] == "7" and h["X-nested"] == '{"a":[1,2]}'
    assert h["X-bad-name"] == "x y"
    assert h["X-Shovel"] == name and h["User-Agent"] == "LavinMQ"
    assert h["Authorization"] == "Basic " + base64.b64encode(b"hook:s3cret").decode()
    assert second["path"] == "/hooks/in?x=1" and second["body"] == b"plain"     # dest-uri's path wins
    wait_for("acked", lambda: queue_depth(broker_a, src_q) == 0)
    state = shovel_state(broker_a, name)
    assert state["state"] == "running" and state["dest_protocol"] == "http" and state["message_count"] == 2
    ok(broker_a, "DELETE", f"/api/parameters/shovel/%2F/{name}")


def test_path_from_the_uri_path_header_when_dest_uri_has_none(broker_a, http_sink):
    src_q, name = unique("src"), unique("http")
    publish(broker_a, src_q, [b"a"], pika.BasicProperties(headers={"uri_path": "/from/header"}))
    publish(broker_a, src_q, [b"b"])
    define(broker_a, name, src_q, http_sink.url)
    wait_for("posted", lambda: len(http_sink.ok_requests()) == 2)
    assert [r["path"] for r in http_sink.ok_requests()] == ["/from/header", "/"]
    ok(broker_a, "DELETE", f"/api/parameters/shovel/%2F/{name}")


def test_failing_endpoint_keeps_messages_and_retries(broker_a, http_sink):
    src_q, name = unique("src"), unique("http")
    bodies = [f"m{i}".encode() for i in range(20)]
    publish(broker_a, src_q, bodies)
    http_sink.fail_next(10 ** 6, 503)
    define(broker_a, name, src_q, http_sink.url + "/in")
    state = wait_for("error", lambda: (s := shovel_state(broker_a, name)) and s["state"] == "error" and s)
    assert "503" in state["error"]
    assert queue_depth(broker_a, src_q) == 20, "a refused message must stay at the source"
    attempts = len(http_sink.requests)
    wait_for("retried after reconnect-delay", lambda: len(http_sink.requests) > attempts, timeout=10)
    http_sink.fail_next(3, 500)     # three more failures, then the endpoint recovers
    wait_for("all delivered", lambda: len(http_sink.ok_requests()) == 20, timeout=30)
    wait_for("source drained", lambda: queue_depth(broker_a, src_q) == 0)
    assert [r["body"] for r in http_sink.ok_requests()] == bodies       # in order, each once with a 2xx
    wait_for("running", lambda: shovel_state(broker_a, name)["state"] == "running")
    assert shovel_state(broker_a, name)["error"] is None
    ok(broker_a, "DELETE", f"/api/parameters/shovel/%2F/{name}")


def test_unreachable_endpoint_is_an_error(broker_a):
    from tests.conftest import free_port
    src_q, name = unique("src"), unique("http")
    publish(broker_a, src_q, [b"a"])
    define(broker_a, name, src_q, f"http://127.0.0.1:{free_port()}/x")
    state = wait_for("error", lambda: (s := shovel_state(broker_a, name)) and s["state"] == "error" and s)
    assert "POST to http://127.0.0.1" in state["error"]
    assert queue_depth(broker_a, src_q) == 1
    assert call(broker_a, "DELETE", f"/api/parameters/shovel/%2F/{name}")[0] == 204
