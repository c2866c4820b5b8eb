"""MQTT clients and sessions in the management API and Prometheus, as
LavinMQ shows them: connections with protocol "MQTT 3.1.1" and the client
id, sessions as queues mqtt.<client_id>, subscriptions as bindings."""
import urllib.parse
import urllib.request

from tests.conftest import unique
from tests.mqtt.conftest import Client, wait_for
from tests.mqtt.test_basic import api


def metrics(broker, path="/metrics"):
    req = urllib.request.Request(broker.http_url + path, headers={"Authorization": "Basic Z3Vlc3Q6Z3Vlc3Q="})
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.read().decode()


def test_connections_sessions_and_bindings_in_the_api(mqtt_broker):
    cid, topic, will_topic = unique("dev"), unique("api"), unique("will")
    watcher = Client(mqtt_broker, unique("watch"))
    assert watcher.subscribe(will_topic, 1) == [1]
    c = Client(mqtt_broker, cid, clean=False, keepalive=30, will=(will_topic, b"closed by admin", 1))
    assert c.subscribe([(topic + "/+/x", 1), (topic + "/#", 0)]) == [1, 0]
    pub = Client(mqtt_broker, unique("pub"))
    pub.publish(topic + "/a/x", b"hello", qos=1)
    c.get()
    conns = {x.get("client_id"): x for x in api(mqtt_broker, "GET", "/api/connections")}
    info = conns[cid]
    assert (info["protocol"], info["user"], info["vhost"], info["timeout"]) == ("MQTT 3.1.1", "guest", "/", 30)
    assert (info["clean_session"], info["session"], info["channels"], info["transport"]) == \
        (False, f"mqtt.{cid}", 0, "tcp")
    assert info["recv_oct"] > 0 and info["send_oct"] > 0 and info["state"] == "running"
    one = api(mqtt_broker, "GET", "/api/connections/" + urllib.parse.quote(info["name"], safe=""))
    assert one["client_id"] == cid
    assert api(mqtt_broker, "GET", "/api/connections/" + urllib.parse.quote(info["name"], safe="") + "/channels") == []
    q = api(mqtt_broker, "GET", f"/api/queues/%2F/mqtt.{cid}")
    assert (q["type"], q["durable"], q["consumers"], q["arguments"]) == ("mqtt", True, 1, {"x-queue-type": "mqtt", "x-mqtt-owner": "guest"})
    assert q["consumer_details"][0]["consumer_tag"] == cid
    bindings = [(b["routing_key"], b["arguments"]) for b in api(mqtt_broker, "GET", f"/api/queues/%2F/mqtt.{cid}/bindings")
                if b["source"] == "amq.topic"]
    assert sorted(bindings) == sorted([(f"{topic}.*.x", {"x-mqtt-subscription-qos": 1}),
                                       (f"{topic}.#", {"x-mqtt-subscription-qos": 0})])
    overview = api(mqtt_broker, "GET", "/api/overview")
    assert overview["object_totals"]["connections"] >= 3
    # closing it from the API is closing it from the server: the will goes out
    req = urllib.request.Request(mqtt_broker.http_url + "/api/connections/" + urllib.parse.quote(info["name"], safe=""),
                                 method="DELETE", headers={"Authorization": "Basic Z3Vlc3Q6Z3Vlc3Q="})
    urllib.request.urlopen(req, timeout=10).close()
    c.disconnected.get(timeout=5)
    assert watcher.get().payload == b"closed by admin"
    c.c.loop_stop()
    # the persistent session stays, without a consumer, and keeps QoS 1 messages
    pub.publish(topic + "/b/x", b"while away", qos=1)
    wait_for(lambda: api(mqtt_broker, "GET", f"/api/queues/%2F/mqtt.{cid}")["messages"] == 1, what="queued")
    assert api(mqtt_broker, "GET", f"/api/queues/%2F/mqtt.{cid}")["consumers"] == 0
    # deleting the session queue from the API ends the session (and a connected client)
    c = Client(mqtt_broker, cid, clean=False)
    assert c.session_present and c.get().payload == b"while away"
    req = urllib.request.Request(mqtt_broker.http_url + f"/api/queues/%2F/mqtt.{cid}", method="DELETE",
                                 headers={"Authorization": "Basic Z3Vlc3Q6Z3Vlc3Q="})
    urllib.request.urlopen(req, timeout=10).close()
    c.disconnected.get(timeout=5)
    c.c.loop_stop()
    c = Client(mqtt_broker, cid, clean=False)
    assert not c.session_present
    c.disconnect()
    Client(mqtt_broker, cid, clean=True).disconnect()
    watcher.disconnect()
    pub.disconnect()


def test_prometheus(mqtt_broker):
    cid = unique("prom")
    c = Client(mqtt_broker, cid)
    assert c.subscribe("prom/#", 1) == [1]
    text = metrics(mqtt_broker)
    conns = int(next(line.split()[-1] for line in text.splitlines() if line.startswith("lavinmq_connections ")))
    assert conns >= 1
    detailed = metrics(mqtt_broker, "/metrics/detailed?family=queue_coarse_metrics&family=connection_coarse_metrics")
    assert f'queue="mqtt.{cid}"' in detailed
    assert "lavinmq_detailed_connection_incoming_bytes_total" in detailed
    c.disconnect()
