"""Backups always restore: an export of a broker that holds every kind of
object imports into a fresh broker (over the API, per vhost, through
lavinmqctl) and loads at start (`load_definitions`), and files written by
LavinMQ 2.9 and RabbitMQ 3.10 in their own forms import too.
tests/integration/test_definitions_property.py generates the topologies."""
import io
import json
import time

import pika
import pytest

from lavinmq import ctl
from tests.conftest import BrokerProcess, unique
from tests.integration.test_http_api import call


def _start(path, *extra):
    return BrokerProcess(path, extra_args=list(extra)).start()


def _everything(b):
    """One of each kind of object this broker holds, made as clients make them."""
    conn = pika.BlockingConnection(pika.URLParameters(b.url))
    ch = conn.channel()
    ch.exchange_declare("delayed", "x-delayed-message", durable=True, arguments={"x-delayed-type": "direct"})
    ch.exchange_declare("hashed", "x-consistent-hash", durable=True, arguments={"x-algorithm": "jump"})
    ch.exchange_declare("kept", "topic", durable=True, arguments={"x-persist-messages": 10})
    ch.exchange_declare("fallback", "fanout", durable=True, internal=True)
    ch.exchange_declare("front", "direct", durable=True, arguments={"alternate-exchange": "fallback"})
    ch.exchange_declare("by-policy", "topic", durable=True)
    ch.exchange_bind("fallback", "front", "k")
    ch.queue_declare("classic", durable=True, arguments={"x-max-length": 3, "x-dead-letter-exchange": "front"})
    ch.queue_declare("prio", durable=True, arguments={"x-max-priority": 5})
    ch.queue_declare("log", durable=True, arguments={"x-queue-type": "stream", "x-max-age": "7D"})
    server_named = ch.queue_declare("", durable=True, exclusive=False, auto_delete=False).method.queue
    ch.queue_bind("classic", "delayed", "k")
    ch.queue_bind("prio", "hashed", "3")
    ch.queue_bind("log", "kept", "a.#")
    ch.queue_bind(server_named, "fallback", "", arguments={"x-any": 1})
    conn.close()
    for path, body in [
            ("/api/vhosts/other", None),
            ("/api/users/app", {"password": "pw", "tags": "management,policymaker"}),
            ("/api/permissions/other/app", {"configure": "^app\\.", "write": ".*", "read": ""}),
            ("/api/policies/%2F/cap", {"pattern": "^classic$", "definition": {"max-length": 10},
                                        "apply-to": "queues", "priority": 2}),
            ("/api/policies/%2F/delays", {"pattern": "^by-policy$", "definition": {"delayed-message": True},
                                           "apply-to": "exchanges"}),
            ("/api/operator-policies/%2F/ttl", {"pattern": ".*", "definition": {"message-ttl": 60000},
                                                 "apply-to": "queues"}),
            ("/api/vhost-limits/other/max-queues", {"value": 10}),
            ("/api/global-parameters/site", {"value": {"region": "north"}}),
            ("/api/parameters/shovel/%2F/move", {"value": {"src-uri": "amqp://127.0.0.1:1", "src-queue": "a",
                                                           "dest-uri": "amqp://127.0.0.1:1", "dest-queue": "b"}}),
            ("/api/parameters/federation-upstream/%2F/up", {"value": {"uri": "amqp://127.0.0.1:1"}})]:
        status, reason = call(b, "PUT", path, body)
        assert status in (201, 204), (path, reason)
    return server_named


def test_an_export_with_every_kind_of_object_restores(tmp_path):
    """A durable delayed exchange used to put its internal store
    amq.delayed.<name> among the exported queues, and importing the file
    was refused whole (400 reserved prefix); a durable server-named queue
    likewise."""
    a, b = _start(tmp_path / "a"), _start(tmp_path / "b")
    try:
        server_named = _everything(a)
        _, exported = call(a, "GET", "/api/definitions")
        names = {q["name"] for q in exported["queues"]}
        assert not any(n.startswith("amq.delayed") for n in names) and server_named in names
        assert {"name": "delayed", "vhost": "/", "type": "x-delayed-message", "durable": True,
                "auto_delete": False, "internal": False,
                "arguments": {"x-delayed-type": "direct"}} in exported["exchanges"]
        status, reason = call(b, "POST", "/api/definitions", exported)
        assert status == 204, reason
        _, again = call(b, "GET", "/api/definitions")
        assert again == exported
        # what came back works: the delayed exchange delays, the shovel and upstream are there
        _, dx = call(b, "GET", "/api/exchanges/%2F/delayed")
        assert dx["arguments"] == {"x-delayed-exchange": True}
        _, queues = call(b, "GET", "/api/queues/%2F")
        assert "amq.delayed.delayed" in {q["name"] for q in queues}
        conn = pika.BlockingConnection(pika.URLParameters(b.url))
        ch = conn.channel()
        ch.confirm_delivery()
        ch.basic_publish("delayed", "k", b"later", pika.BasicProperties(headers={"x-delay": 3000}))
        assert ch.queue_declare("classic", durable=True, passive=True).method.message_count == 0
        assert call(b, "GET", "/api/queues/%2F/amq.delayed.delayed")[1]["messages"] == 1
        deadline = time.monotonic() + 10
        while ch.queue_declare("classic", durable=True, passive=True).method.message_count == 0:
            assert time.monotonic() < deadline, "the delayed message never arrived"
            conn.process_data_events(0.05)
        conn.close()
        # and the same data directory starts again
        b.restart()
        assert call(b, "GET", "/api/definitions")[1] == exported
    finally:
        a.stop()
        b.stop()
    a.check_clean()
    b.check_clean()


def test_a_vhost_export_carries_its_limits_and_restores(tmp_path):
    a, b = _start(tmp_path / "a"), _start(tmp_path / "b")
    try:
        _everything(a)
        for broker, vhost in ((a, "%2F"), (a, "other")):
            _, exported = call(broker, "GET", f"/api/definitions/{vhost}")
            assert not any(q["name"].startswith("amq.delayed") for q in exported["queues"])
            assert call(b, "PUT", "/api/vhosts/" + vhost)[0] in (201, 204)
            status, reason = call(b, "POST", f"/api/definitions/{vhost}", exported)
            assert status == 204, reason
            _, again = call(b, "GET", f"/api/definitions/{vhost}")
            assert again == exported
        _, other = call(a, "GET", "/api/definitions/other")
        assert {"name": "limits", "component": "vhost-limits", "value": {"max-queues": 10}} in other["parameters"]
        assert call(b, "GET", "/api/vhosts/other")[1]["limits"] == {"max-queues": 10}
    finally:
        a.stop()
        b.stop()
    a.check_clean()
    b.check_clean()


def test_lavinmqctl_export_then_import(tmp_path):
    a, b = _start(tmp_path / "a"), _start(tmp_path / "b")

    def run(broker, *argv, stdin=None):
        out = io.StringIO()
        rc = ctl.main(["--uri", broker.http_url, "--user", "guest", "--password", "guest", *argv], out=out)
        return rc, out.getvalue()
    try:
        _everything(a)
        rc, text = run(a, "export_definitions")
        assert rc == 0
        path = tmp_path / "backup.json"
        path.write_text(text)
        assert run(b, "import_definitions", str(path)) == (0, "")
        rc, again = run(b, "export_definitions")
        assert json.loads(again) == json.loads(text)
    finally:
        a.stop()
        b.stop()


def test_load_definitions_of_an_export_starts_and_restarts(tmp_path):
    """The broker used to refuse to start with an export of a broker that
    held a durable delayed exchange. At start, as LavinMQ's load_definitions,
    what exists is kept: a restart does not undo what was changed since."""
    a = _start(tmp_path / "a")
    try:
        _everything(a)
        _, exported = call(a, "GET", "/api/definitions")
    finally:
        a.stop()
    backup = tmp_path / "backup.json"
    backup.write_text(json.dumps(exported))
    ini = tmp_path / "lavinmq.ini"
    ini.write_text(f"[main]\nload_definitions = {backup}\n")
    c = _start(tmp_path / "c", "-c", str(ini))
    try:
        _, loaded = call(c, "GET", "/api/definitions")
        for key in ("exchanges", "queues", "bindings", "policies", "operator_policies", "parameters", "vhosts",
                    "permissions"):
            assert sorted(map(json.dumps, loaded[key])) == sorted(map(json.dumps, exported[key])), key
        # changed after the start: a restart with the same file keeps the changes
        assert call(c, "PUT", "/api/policies/%2F/cap", {"pattern": "^classic$", "definition": {"max-length": 4},
                                                        "apply-to": "queues", "priority": 2})[0] == 204
        assert call(c, "PUT", "/api/users/app", {"password": "changed", "tags": "management"})[0] == 204
        assert call(c, "DELETE", "/api/parameters/shovel/%2F/move")[0] == 204
        c.restart()
        assert call(c, "GET", "/api/policies/%2F/cap")[1]["definition"] == {"max-length": 4}
        assert call(c, "GET", "/api/whoami", user="app", password="changed")[0] == 200
        # what is missing is made again
        assert call(c, "GET", "/api/parameters/shovel/%2F/move")[0] == 200
    finally:
        c.stop()
    c.check_clean()


def test_lavinmq_and_rabbitmq_forms_import(fresh_broker):
    """LavinMQ 2.9 writes a delayed exchange as type x-delayed-exchange and
    lists its store amq.delayed-<name>; RabbitMQ and LavinMQ write vhost
    limits and operator policies as runtime parameters."""
    b, v = fresh_broker, unique("v")
    body = {
        "vhosts": [{"name": v}],
        "exchanges": [{"name": "later", "vhost": v, "type": "x-delayed-exchange", "durable": True,
                       "auto_delete": False, "internal": False, "arguments": {"x-delayed-type": "topic"}},
                      {"name": "rabbit", "vhost": v, "type": "x-delayed-message", "durable": True,
                       "auto_delete": False, "internal": False, "arguments": {"x-delayed-type": "fanout"}}],
        "queues": [{"name": "amq.delayed-later", "vhost": v, "durable": False, "auto_delete": False,
                    "arguments": {"x-dead-letter-exchange": "later", "auto-delete": False}},
                   {"name": "amq.delayed.rabbit", "vhost": v, "durable": True, "auto_delete": False,
                    "arguments": {}},
                   {"name": "q", "vhost": v, "durable": True, "auto_delete": False, "arguments": {}}],
        "bindings": [{"source": "later", "vhost": v, "destination": "q", "destination_type": "queue",
                      "routing_key": "#", "arguments": {}}],
        "parameters": [{"name": "limits", "vhost": v, "component": "vhost-limits",
                        "value": {"max-connections": 7, "max-queues": 20}},
                       {"name": "cap", "vhost": v, "component": "operator_policy",
                        "value": {"pattern": "^q$", "definition": {"max-length": 5}, "priority": 1,
                                  "apply-to": "queues"}}],
    }
    status, reason = call(b, "POST", "/api/definitions", body)
    assert status == 204, reason
    vq = v.replace("/", "%2F")
    assert call(b, "GET", f"/api/exchanges/{vq}/later")[1]["arguments"] == {"x-delayed-exchange": True}
    assert call(b, "GET", f"/api/exchanges/{vq}/later")[1]["type"] == "topic"
    assert call(b, "GET", f"/api/exchanges/{vq}/rabbit")[1]["type"] == "fanout"
    _, queues = call(b, "GET", f"/api/queues/{vq}")
    assert sorted(q["name"] for q in queues) == ["amq.delayed.later", "amq.delayed.rabbit", "q"]
    assert call(b, "GET", f"/api/vhosts/{vq}")[1]["limits"] == {"max-connections": 7, "max-queues": 20}
    _, ops = call(b, "GET", f"/api/operator-policies/{vq}")
    assert [(p["name"], p["definition"]) for p in ops] == [("cap", {"max-length": 5})]
    # a limit that is not one is named
    status, body = call(b, "POST", "/api/definitions", {"parameters": [
        {"name": "limits", "vhost": v, "component": "vhost-limits", "value": {"max-channels": 1}}]})
    assert status == 400 and "max-channels" in body["reason"]


@pytest.mark.parametrize("route", ["/api/definitions", "/api/definitions/upload"])
def test_a_file_with_a_bad_delayed_exchange_changes_nothing(fresh_broker, route):
    v = unique("v")
    status, body = call(fresh_broker, "POST", route, {
        "vhosts": [{"name": v}],
        "exchanges": [{"name": "x", "vhost": v, "type": "x-delayed-message", "durable": True,
                       "arguments": {}}]})
    assert status == 400 and "x-delayed-type" in body["reason"]
    assert call(fresh_broker, "GET", "/api/vhosts/" + v)[0] == 404
