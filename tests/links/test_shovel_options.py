"""The other shovel options (ack modes, src-delete-after, prefetch, several
destinations), pause/resume/restart, and shovels as definitions: kept
across a restart (paused ones stay paused), exported and imported."""
import pika
import pytest

from tests.conftest import BrokerProcess, unique
from tests.links.conftest import call, drain, ok, publish, queue_depth, shovel_state, wait_for


def define(broker, name, value):
    return call(broker, "PUT", f"/api/parameters/shovel/%2F/{name}", {"value": value})


@pytest.mark.parametrize("ack_mode", ["on-publish", "no-ack"])
def test_other_ack_modes_move_everything(broker_a, broker_b, ack_mode):
    src_q, dest_q, name = unique("src"), unique("dest"), unique("shovel")
    publish(broker_a, src_q, [str(i).encode() for i in range(5000)])
    define(broker_a, name, {"src-uri": broker_a.url, "src-queue": src_q, "dest-uri": broker_b.url,
                            "dest-queue": dest_q, "ack-mode": ack_mode})
    wait_for("moved", lambda: queue_depth(broker_b, dest_q) == 5000 and queue_depth(broker_a, src_q) == 0)
    assert [b for b, _ in drain(broker_b, dest_q)] == [str(i).encode() for i in range(5000)]
    assert shovel_state(broker_a, name)["ack_mode"] == ack_mode
    ok(broker_a, "DELETE", f"/api/parameters/shovel/%2F/{name}")


def test_delete_after_queue_length_moves_what_was_there_then_goes(broker_a, http_sink):
    """The length when the shovel starts: what arrives while it runs stays.
    A slow HTTP destination makes it run long enough to publish meanwhile."""
    src_q, name = unique("src"), unique("shovel")
    publish(broker_a, src_q, [str(i).encode() for i in range(100)])
    http_sink.set_delay(0.01)
    assert define(broker_a, name, {"src-uri": broker_a.url, "src-queue": src_q, "dest-uri": http_sink.url,
                                   "src-delete-after": "queue-length", "src-prefetch-count": 10})[0] == 201
    wait_for("started", lambda: len(http_sink.requests) > 0)
    publish(broker_a, src_q, [str(i).encode() for i in range(100, 150)])
    wait_for("deleted itself", lambda: call(broker_a, "GET", f"/api/parameters/shovel/%2F/{name}")[0] == 404)
    assert shovel_state(broker_a, name) is None
    assert [r["body"] for r in http_sink.ok_requests()] == [str(i).encode() for i in range(100)]
    assert queue_depth(broker_a, src_q) == 50


def test_delete_after_a_count_and_an_empty_queue(broker_a, broker_b):
    src_q, dest_q, name = unique("src"), unique("dest"), unique("shovel")
    publish(broker_a, src_q, [str(i).encode() for i in range(50)])
    define(broker_a, name, {"src-uri": broker_a.url, "src-queue": src_q, "dest-uri": broker_b.url,
                            "dest-queue": dest_q, "src-delete-after": 20})
    wait_for("deleted itself", lambda: call(broker_a, "GET", f"/api/parameters/shovel/%2F/{name}")[0] == 404)
    assert (queue_depth(broker_b, dest_q), queue_depth(broker_a, src_q)) == (20, 30)
    empty, name = unique("empty"), unique("shovel")
    publish(broker_a, empty, [])
    define(broker_a, name, {"src-uri": broker_a.url, "src-queue": empty, "dest-uri": broker_b.url,
                            "dest-queue": dest_q, "src-delete-after": "queue-length"})
    wait_for("deleted itself", lambda: call(broker_a, "GET", f"/api/parameters/shovel/%2F/{name}")[0] == 404)


def test_prefetch_and_several_destinations(broker_a, broker_b):
    src_q, dest_q, name = unique("src"), unique("dest"), unique("shovel")
    publish(broker_a, src_q, [b"x"] * 100)
    define(broker_a, name, {"src-uri": [broker_a.url], "src-queue": src_q, "src-prefetch-count": 7,
                            "dest-uri": [broker_b.url, broker_a.url], "dest-queue": dest_q})
    wait_for("moved", lambda: queue_depth(broker_a, src_q) == 0)
    # one destination, picked at the start, gets them all
    assert sorted([queue_depth(broker_a, dest_q) or 0, queue_depth(broker_b, dest_q) or 0]) == [0, 100]
    consumers = [c for c in ok(broker_a, "GET", "/api/consumers") if c["queue"]["name"] == src_q]
    assert [(c["prefetch_count"], c["exclusive"]) for c in consumers] == [(7, True)]
    ok(broker_a, "DELETE", f"/api/parameters/shovel/%2F/{name}")


def test_pause_resume_restart(broker_a, broker_b):
    src_q, dest_q, name = unique("src"), unique("dest"), unique("shovel")
    base = f"/api/shovels/%2F/{name}"
    define(broker_a, name, {"src-uri": broker_a.url, "src-queue": src_q, "dest-uri": broker_b.url,
                            "dest-queue": dest_q})
    wait_for("running", lambda: shovel_state(broker_a, name)["state"] == "running")
    assert call(broker_a, "PUT", base + "/resume")[0] == 422
    assert call(broker_a, "PUT", base + "/pause")[0] == 204
    assert shovel_state(broker_a, name)["state"] == "paused"
    assert call(broker_a, "PUT", base + "/pause")[0] == 422
    publish(broker_a, src_q, [b"held"])
    assert ok(broker_a, "GET", f"/api/queues/%2F/{src_q}")["consumers"] == 0
    assert queue_depth(broker_a, src_q) == 1
    assert call(broker_a, "PUT", base + "/resume")[0] == 204
    assert [b for b, _ in drain(broker_b, dest_q, 1)] == [b"held"]
    wait_for("running", lambda: shovel_state(broker_a, name)["state"] == "running")
    before = {c["name"] for c in ok(broker_a, "GET", "/api/connections")}
    assert call(broker_a, "PUT", base + "/restart")[0] == 204
    wait_for("reconnected", lambda: shovel_state(broker_a, name)["state"] == "running"
             and {c["name"] for c in ok(broker_a, "GET", "/api/connections")} - before)
    assert call(broker_a, "DELETE", f"/api/shovels/vhost/%2F/{name}/restart")[0] == 204    # RabbitMQ's form
    publish(broker_a, src_q, [b"after restart"])
    assert [b for b, _ in drain(broker_b, dest_q, 1)] == [b"after restart"]
    assert call(broker_a, "PUT", f"/api/shovels/%2F/{unique('none')}/pause")[0] == 404
    ok(broker_a, "DELETE", f"/api/parameters/shovel/%2F/{name}")


def test_shovels_survive_a_restart_and_paused_stays_paused(tmp_path, broker_b):
    a = BrokerProcess(tmp_path / "a").start()
    try:
        src_q, dest_q, kept, paused = unique("src"), unique("dest"), unique("kept"), unique("paused")
        value = {"src-uri": a.url, "src-queue": src_q, "dest-uri": broker_b.url, "dest-queue": dest_q}
        assert define(a, kept, value)[0] == 201
        assert define(a, paused, dict(value, **{"src-queue": src_q + "-2"}))[0] == 201
        wait_for("running", lambda: shovel_state(a, paused)["state"] == "running")
        assert call(a, "PUT", f"/api/shovels/%2F/{paused}/pause")[0] == 204
        a.restart()
        wait_for("running after restart", lambda: (s := shovel_state(a, kept)) and s["state"] == "running")
        assert shovel_state(a, paused)["state"] == "paused"
        publish(a, src_q, [b"1"])
        publish(a, src_q + "-2", [b"2"])
        assert [b for b, _ in drain(broker_b, dest_q, 1)] == [b"1"]
        assert queue_depth(a, src_q + "-2") == 1
        assert call(a, "PUT", f"/api/shovels/%2F/{paused}/resume")[0] == 204
        assert [b for b, _ in drain(broker_b, dest_q, 1)] == [b"2"]
        # deleting a paused shovel forgets that it was paused
        assert call(a, "PUT", f"/api/shovels/%2F/{paused}/pause")[0] == 204
        ok(a, "DELETE", f"/api/parameters/shovel/%2F/{paused}")
        assert define(a, paused, dict(value, **{"src-queue": src_q + "-2"}))[0] == 201
        wait_for("running", lambda: shovel_state(a, paused)["state"] == "running")
    finally:
        a.stop()
    a.check_clean()


def test_export_and_import(tmp_path, broker_a, broker_b):
    src_q, dest_q, name = unique("src"), unique("dest"), unique("shovel")
    value = {"src-uri": broker_a.url, "src-queue": src_q, "dest-uri": broker_b.url, "dest-queue": dest_q,
             "ack-mode": "on-publish", "reconnect-delay": 2}
    assert define(broker_a, name, value)[0] == 201
    exported = ok(broker_a, "GET", "/api/definitions")
    assert {"name": name, "vhost": "/", "component": "shovel", "value": value} in exported["parameters"]
    only_vhost = ok(broker_a, "GET", "/api/definitions/%2F")
    assert {"name": name, "component": "shovel", "value": value} in only_vhost["parameters"]
    ok(broker_a, "DELETE", f"/api/parameters/shovel/%2F/{name}")
    c = BrokerProcess(tmp_path / "c").start()
    try:
        ok(c, "POST", "/api/definitions", {"parameters": [p for p in exported["parameters"] if p["name"] == name]})
        assert ok(c, "GET", f"/api/parameters/shovel/%2F/{name}")["value"] == value
        publish(broker_a, src_q, [b"via import"])
        wait_for("moved", lambda: queue_depth(broker_b, dest_q) == 1)
        assert [b for b, _ in drain(broker_b, dest_q, 1)] == [b"via import"]
        bad = {"parameters": [{"name": "x", "vhost": "/", "component": "shovel", "value": {"src-uri": "amqp://"}}],
               "queues": [{"name": unique("q"), "vhost": "/", "durable": True}]}
        status, body = call(c, "POST", "/api/definitions", bad)
        assert status == 400 and "parameter shovel/x" in body["reason"]
        assert bad["queues"][0]["name"] not in [q["name"] for q in ok(c, "GET", "/api/queues")]
        ok(c, "DELETE", f"/api/parameters/shovel/%2F/{name}")
    finally:
        c.stop()
    c.check_clean()
