"""The management HTTP API against a running broker, with a real HTTP
client (urllib): auth and errors, objects created over HTTP and used over
AMQP, counters, Prometheus, definitions from RabbitMQ 3.10 and round
trips, and lavinmqctl end to end over the control socket."""
import base64
import io
import json
import os
import urllib.error
import urllib.parse
import urllib.request

import pika
import pytest

from lavinmq import ctl
from tests.conftest import BrokerProcess, unique

FIXTURE = os.path.join(os.path.dirname(__file__), "..", "fixtures", "rabbitmq-3.10-definitions.json")


def call(b, method, path, body=None, user="guest", password="guest", raw=None):
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(b.http_url + path, data=data, method=method)
    if user is not None:
        req.add_header("Authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            text = resp.read()
            return resp.status, (json.loads(text) if text and resp.headers.get_content_type() == "application/json"
                                 else text.decode())
    except urllib.error.HTTPError as e:
        with e:
            text = e.read()
        return e.code, json.loads(text) if text else None


@pytest.fixture
def api(broker):
    if broker.external:
        pytest.skip("needs our broker's HTTP port")
    return broker


def test_auth_and_error_shapes(api):
    assert call(api, "GET", "/api/overview", user=None)[0] == 401
    status, body = call(api, "GET", "/api/overview", password="wrong")
    assert status == 401 and body["error"] == "not_authorised"
    name = unique("mgmt")
    assert call(api, "PUT", f"/api/users/{name}", {"password": "pw", "tags": "management"})[0] == 201
    assert call(api, "PUT", f"/api/users/{name}", {"password": "pw", "tags": "management"})[0] == 204
    status, body = call(api, "GET", "/api/users", user=name, password="pw")
    assert status == 403 and set(body) == {"error", "reason"}
    assert call(api, "GET", "/api/whoami", user=name, password="pw") == (200, {"name": name, "tags": ["management"]})
    status, body = call(api, "GET", "/api/queues/%2F/" + unique("nope"))
    assert (status, body) == (404, {"error": "Object Not Found", "reason": "Not Found"})
    status, body = call(api, "PUT", "/api/queues/%2F/" + unique("q"), raw=b"{not json")
    assert status == 400 and "Malformed JSON" in body["reason"]
    assert call(api, "GET", "/api/vhosts/nosuch")[0] == 404
    assert call(api, "PATCH", "/api/overview")[0] == 405
    assert call(api, "DELETE", f"/api/users/{name}")[0] == 204


def test_objects_over_http_used_over_amqp(api):
    q, x = unique("q"), unique("x")
    assert call(api, "PUT", f"/api/exchanges/%2F/{x}", {"type": "topic", "durable": True})[0] == 201
    assert call(api, "PUT", f"/api/queues/%2F/{q}", {"durable": True, "arguments": {"x-max-priority": 5}})[0] == 201
    status, _ = call(api, "POST", f"/api/bindings/%2F/e/{x}/q/{q}", {"routing_key": "a.#"})
    assert status == 201
    # redeclaring with other arguments fails as over AMQP (406 -> 400)
    status, body = call(api, "PUT", f"/api/queues/%2F/{q}", {"durable": True, "arguments": {"x-max-priority": 9}})
    assert status == 400 and "inequivalent" in body["reason"]
    conn = pika.BlockingConnection(pika.URLParameters(api.url))
    ch = conn.channel()
    ch.confirm_delivery()
    for i in range(3):
        ch.basic_publish(x, "a.b", b"m%d" % i)
    status, queue = call(api, "GET", f"/api/queues/%2F/{q}")
    assert status == 200 and queue["messages"] == 3 and queue["arguments"] == {"x-max-priority": 5}
    assert queue["message_stats"]["publish"] == 3 and "rate" in queue["message_stats"]["publish_details"]
    _, ex = call(api, "GET", f"/api/exchanges/%2F/{x}")
    assert ex["type"] == "topic" and ex["message_stats"]["publish_out"] == 3
    _, bindings = call(api, "GET", f"/api/queues/%2F/{q}/bindings")
    assert [(b["source"], b["routing_key"]) for b in bindings] == [("", q), (x, "a.#")]
    # list parameters
    _, page = call(api, "GET", f"/api/queues/%2F?name={q}&page=1&page_size=1&columns=name,messages")
    assert page["items"] == [{"name": q, "messages": 3}] and page["filtered_count"] == 1
    # a consumer and connection show up
    ch.basic_consume(q, lambda *a: None, consumer_tag="watcher")
    _, consumers = call(api, "GET", "/api/consumers/%2F")
    assert any(c["consumer_tag"] == "watcher" and c["queue"]["name"] == q for c in consumers)
    _, conns = call(api, "GET", "/api/connections")
    assert any(c["user"] == "guest" and c["vhost"] == "/" for c in conns)
    assert call(api, "DELETE", f"/api/queues/%2F/{q}/contents")[0] == 204
    key = bindings[1]["properties_key"]
    assert call(api, "DELETE", f"/api/bindings/%2F/e/{x}/q/{q}/" + urllib.parse.quote(key, safe=""))[0] == 204
    ch.basic_publish(x, "a.b", b"unrouted")
    assert call(api, "GET", f"/api/queues/%2F/{q}")[1]["messages_ready"] == 0
    conn.close()
    assert call(api, "DELETE", f"/api/queues/%2F/{q}")[0] == 204
    assert call(api, "DELETE", f"/api/exchanges/%2F/{x}")[0] == 204
    assert call(api, "DELETE", "/api/exchanges/%2F/amq.direct")[0] == 403


def test_close_connection_over_http(api):
    label = unique("victim")
    params = pika.URLParameters(api.url)
    params.client_properties = {"connection_name": label}
    conn = pika.BlockingConnection(params)
    _, conns = call(api, "GET", "/api/connections")
    mine = [c["name"] for c in conns if c["client_properties"].get("connection_name") == label]
    assert len(mine) == 1
    assert call(api, "DELETE", "/api/connections/" + urllib.parse.quote(mine[0], safe=""))[0] == 204
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as e:
        conn.process_data_events(2)
        conn.channel()
    assert e.value.reply_code == 320


def test_prometheus_metrics(api):
    q = unique("q")
    conn = pika.BlockingConnection(pika.URLParameters(api.url))
    ch = conn.channel()
    ch.queue_declare(q)
    ch.basic_publish("", q, b"x")
    ch.basic_publish("", q, b"y")
    assert call(api, "GET", "/metrics", user=None)[0] == 401
    status, text = call(api, "GET", "/metrics")
    assert status == 200
    for name in ("lavinmq_connections ", "lavinmq_process_resident_memory_bytes ",
                 "lavinmq_disk_space_available_bytes ", "lavinmq_global_messages_delivered_total "):
        assert name in text
    # per queue, as LavinMQ: the detailed endpoint's queue family (tests/compat has the rest)
    status, text = call(api, "GET", "/metrics/detailed?family=queue_coarse_metrics")
    assert f'lavinmq_detailed_queue_messages_ready{{queue="{q}", vhost="/"}} 2' in text
    conn.close()


def test_rabbitmq_definitions_import_and_round_trip(tmp_path):
    a = BrokerProcess(tmp_path / "a").start()
    b = BrokerProcess(tmp_path / "b").start()
    try:
        with open(FIXTURE) as f:
            rabbit = json.load(f)
        assert call(a, "POST", "/api/definitions", rabbit)[0] == 204
        # the imported user logs in with its RabbitMQ password and uses the imported topology
        conn = pika.BlockingConnection(pika.URLParameters(f"amqp://app:s3cret@{a.host}:{a.port}/prod"))
        ch = conn.channel()
        ch.confirm_delivery()
        ch.basic_publish("events", "orders.new", b"order")     # topic "orders.#" -> app.orders
        ch.basic_publish("events", "", b"audit")               # e2e binding "" -> audit (fanout) -> app.audit
        assert ch.queue_declare("app.orders", durable=True, passive=True,
                                arguments={"x-max-length": 1000, "x-message-ttl": 60000}).method.message_count == 1
        assert ch.queue_declare("app.audit", durable=True, passive=True).method.message_count == 1
        conn.close()
        _, policies = call(a, "GET", "/api/policies/prod")
        assert [(p["name"], p["pattern"], p["priority"]) for p in policies] == [("ttl", "^app\\.", 1)]
        # export -> a fresh broker -> import -> the same export
        _, exported = call(a, "GET", "/api/definitions")
        assert call(b, "POST", "/api/definitions", exported)[0] == 204
        _, again = call(b, "GET", "/api/definitions")
        assert again == exported
        # and it survives a restart
        a.restart()
        assert call(a, "GET", "/api/definitions")[1] == exported
        # a broken file changes nothing
        status, body = call(b, "POST", "/api/definitions", {"queues": [{"vhost": "nosuch", "name": "q"}]})
        assert status == 400
    finally:
        a.stop()
        b.stop()
    a.check_clean()
    b.check_clean()


def test_lavinmqctl_over_the_control_socket(api, capsys):
    sock = os.path.join(api.data_dir, "lavinmqctl.sock")

    def run(*argv):
        out = io.StringIO()
        rc = ctl.main(["--socket", sock, *argv], out=out)
        return rc, out.getvalue()

    v, q, user = unique("v"), unique("q"), unique("u")
    assert run("add_vhost", v)[0] == 0
    assert run("add_user", user, "pw", "--tags", "management")[0] == 0
    assert run("set_permissions", "-p", v, user, ".*", ".*", ".*")[0] == 0
    assert run("create_queue", q, "--durable", "-p", v)[0] == 0
    rc, out = run("-f", "json", "list_queues", "-p", v)
    assert rc == 0 and json.loads(out) == [{"name": q, "messages": 0, "ready": 0, "unacked": 0, "consumers": 0}]
    conn = pika.BlockingConnection(pika.URLParameters(f"amqp://{user}:pw@{api.host}:{api.port}/{v}"))
    conn.channel().basic_publish("", q, b"hello")
    rc, out = run("-s", "list_queues", "-p", v)
    assert out == f"{q}\t1\t1\t0\t0\n"
    assert run("purge_queue", q, "-p", v)[0] == 0
    rc, out = run("-s", "list_connections", "name", "user", "vhost")
    assert any(line.split("\t")[1:3] == [user, v] for line in out.splitlines())
    conn.close()
    assert run("delete_queue", q, "-p", v)[0] == 0
    assert run("delete_queue", q, "-p", v)[0] == 1          # gone: the broker says 404
    assert "404" in capsys.readouterr().err
    rc, out = run("-f", "json", "status")
    assert rc == 0 and isinstance(json.loads(out)["Queues"], int)
    assert run("delete_vhost", v)[0] == 0
    assert run("delete_user", user)[0] == 0


def test_rates_are_sampled(tmp_path):
    import time
    ini = tmp_path / "lavinmq.ini"
    ini.write_text("[main]\nstats_interval = 200\n")
    b = BrokerProcess(tmp_path / "data", extra_args=["-c", str(ini)]).start()
    try:
        conn = pika.BlockingConnection(pika.URLParameters(b.url))
        ch = conn.channel()
        ch.queue_declare("rated")
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            for _ in range(50):
                ch.basic_publish("", "rated", b"x")
            conn.process_data_events(0.02)
        _, q = call(b, "GET", "/api/queues/%2F/rated")
        assert q["message_stats"]["publish_details"]["rate"] > 100
        assert q["messages_ready_details"]["rate"] > 100
        _, overview = call(b, "GET", "/api/overview")
        assert overview["message_stats"]["publish_details"]["rate"] > 100
        conn.close()
        time.sleep(0.6)      # idle: the rate falls back to zero
        _, q = call(b, "GET", "/api/queues/%2F/rated")
        assert q["message_stats"]["publish_details"]["rate"] == 0
    finally:
        b.stop()
    b.check_clean()


def test_publish_and_get_over_http(api):
    q = unique("q")
    assert call(api, "PUT", f"/api/queues/%2F/{q}", {"durable": False})[0] == 201
    status, body = call(api, "POST", "/api/exchanges/%2F/amq.default/publish",
                        {"routing_key": q, "payload": "hello", "payload_encoding": "string",
                         "properties": {"headers": {"k": 1}, "delivery_mode": 2}})
    assert (status, body) == (200, {"routed": True})
    assert call(api, "POST", "/api/exchanges/%2F/amq.default/publish",
                {"routing_key": q, "payload": "AAEC/w==", "payload_encoding": "base64"})[1] == {"routed": True}
    assert call(api, "POST", "/api/exchanges/%2F/amq.direct/publish",
                {"routing_key": "nobody", "payload": "x", "payload_encoding": "string"})[1] == {"routed": False}
    # peek: requeued, still there
    status, msgs = call(api, "POST", f"/api/queues/%2F/{q}/get", {"count": 5, "ackmode": "ack_requeue_true"})
    assert status == 200 and [m["payload"] for m in msgs] == ["hello", "AAEC/w=="]
    assert msgs[0]["properties"]["headers"] == {"k": 1} and msgs[1]["payload_encoding"] == "base64"
    assert call(api, "GET", f"/api/queues/%2F/{q}")[1]["messages_ready"] == 2
    # take: gone, and the order is kept
    _, msgs = call(api, "POST", f"/api/queues/%2F/{q}/get", {"count": 1, "ackmode": "ack_requeue_false"})
    assert msgs[0]["payload"] == "hello" and msgs[0]["message_count"] == 1
    conn = pika.BlockingConnection(pika.URLParameters(api.url))
    m = conn.channel().basic_get(q, auto_ack=True)
    assert m[2] == b"\x00\x01\x02\xff"
    conn.close()
    assert call(api, "POST", f"/api/queues/%2F/{q}/get", {"count": 0})[0] == 400
    assert call(api, "POST", "/api/exchanges/%2F/amq.direct/publish", {"payload": "x"})[0] == 400
    call(api, "DELETE", f"/api/queues/%2F/{q}")


def test_vhost_limits_and_parameters(api):
    v = unique("v")
    assert call(api, "PUT", f"/api/vhosts/{v}")[0] == 201
    assert call(api, "PUT", f"/api/vhost-limits/{v}/max-connections", {"value": 1})[0] == 204
    assert call(api, "GET", f"/api/vhost-limits/{v}")[1] == [{"vhost": v, "value": {"max-connections": 1}}]
    assert call(api, "PUT", f"/api/vhost-limits/{v}/max-bananas", {"value": 1})[0] == 400
    c1 = pika.BlockingConnection(pika.URLParameters(f"amqp://guest:guest@{api.host}:{api.port}/{v}"))
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError):
        pika.BlockingConnection(pika.URLParameters(f"amqp://guest:guest@{api.host}:{api.port}/{v}"))
    c1.close()
    assert call(api, "DELETE", f"/api/vhost-limits/{v}/max-connections")[0] == 204
    assert call(api, "GET", f"/api/parameters/shovel/{v}")[1] == []
    status, body = call(api, "PUT", f"/api/parameters/shovel/{v}/s1", {"value": {}})
    assert status == 400 and "required" in body["reason"]      # tests/links has the shovels
    status, body = call(api, "PUT", f"/api/parameters/bananas/{v}/s1", {"value": {}})
    assert status == 400 and "not supported" in body["reason"]
    assert call(api, "DELETE", f"/api/vhosts/{v}")[0] == 204


def test_reference_routes_answer_like_rabbitmq(api):
    # every route in a RabbitMQ 3.10 capture (../shared/reference) answers with the same status here
    with open(os.path.join(os.path.dirname(FIXTURE), "rabbitmq-3.10-route-statuses.json")) as f:
        statuses = json.load(f)
    call(api, "PUT", "/api/queues/%2F/sample_q", {"durable": True})
    call(api, "PUT", "/api/exchanges/%2F/sample_x", {"type": "direct"})
    call(api, "POST", "/api/bindings/%2F/e/sample_x/q/sample_q", {"routing_key": "rk"})
    # the capture's AMQP port was 5672; ours is the test broker's
    got = {route: call(api, "GET", "/api" + route.replace("/5672", f"/{api.port}"))[0] for route in statuses}
    assert got == statuses


def test_open_metrics_listener(tmp_path):
    from tests.conftest import free_port
    port = free_port()
    b = BrokerProcess(tmp_path / "data", extra_args=["--metrics-http-port", str(port)]).start()
    try:
        with urllib.request.urlopen(f"http://{b.host}:{port}/metrics", timeout=10) as resp:
            text = resp.read().decode()
        assert resp.status == 200 and "lavinmq_queues 0" in text
        with pytest.raises(urllib.error.HTTPError) as e:     # only /metrics there
            urllib.request.urlopen(f"http://{b.host}:{port}/api/overview", timeout=10)
        assert e.value.code == 404
        e.value.close()
    finally:
        b.stop()


def test_overview_counts_bindings_and_lavinmqctl_status_prints_them(fresh_broker):
    """object_totals had no bindings: lavinmqctl status printed an empty
    "Bindings:". Counted as LavinMQ counts them: not the default exchange's."""
    b = fresh_broker
    before = call(b, "GET", "/api/overview")[1]["object_totals"]["bindings"]
    conn = pika.BlockingConnection(pika.URLParameters(b.url))
    ch = conn.channel()
    ch.exchange_declare("totals", "topic")
    ch.exchange_declare("totals2", "fanout")
    ch.queue_declare("totals.q")
    ch.queue_bind("totals.q", "totals", "a.#")
    ch.queue_bind("totals.q", "totals", "b.*")
    ch.exchange_bind("totals2", "totals", "#")
    _, overview = call(b, "GET", "/api/overview")
    assert overview["object_totals"]["bindings"] == before + 3
    out = io.StringIO()
    assert ctl.main(["--uri", b.http_url, "--user", "guest", "--password", "guest", "status"], out=out) == 0
    assert f"Bindings: {before + 3}\n" in out.getvalue()
    _, metrics = call(b, "GET", "/metrics")
    assert f"lavinmq_bindings {before + 3}\n" in metrics
    ch.queue_delete("totals.q")
    assert call(b, "GET", "/api/overview")[1]["object_totals"]["bindings"] == before + 1
    conn.close()
