"""Failover, the followers' proxies, and what the API shows of a cluster."""
import re
import subprocess
import sys
import time
import urllib.request

import pika

from tests.cluster.harness import ROOT, wait_same_data
from tests.cluster.test_replication import consume, publish
from tests.helpers.rawclient import RawClient


def serves(node, queue="probe", timeout=20):
    """Seconds until a confirmed publish through this node's address works."""
    t0 = time.monotonic()
    deadline = t0 + timeout
    while True:
        try:
            publish(node.url, queue, [b"probe"])
            return time.monotonic() - t0
        except (pika.exceptions.AMQPError, OSError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def test_a_killed_leader_is_replaced_fast_and_rejoins_without_a_full_copy(cluster):
    leader = cluster.wait_leader()
    cluster.wait_isr(3)
    publish(leader.url, "q", [b"m%d" % i for i in range(500)])
    survivor = next(n for n in cluster.nodes if n is not leader)
    leader.kill()
    took = serves(survivor)         # through a follower's proxy, or the new leader itself
    new = cluster.wait_leader(other_than=leader)
    assert took < 5, took
    # nothing listens on its replication port any more: its lease was revoked, the TTL not waited out
    assert "is gone (its replication port refuses connections)" in "".join(
        n.log_text() for n in cluster.nodes if n is not leader)
    assert len(consume(new.url, "q", 1000)) == 500      # all confirmed, none lost
    leader.start()                  # the old leader comes back as a follower
    cluster.wait_isr(3)
    wait_same_data(cluster.nodes)
    line = [x for x in leader.log_text().splitlines() if "sync pass 1" in x][-1]
    listed, fetched = (int(w) for w in re.findall(r"(\d+) files listed, (\d+) to fetch", line)[0])
    assert fetched < listed, line


def test_a_clean_stop_hands_over_at_once_and_never_shrinks_the_isr(cluster):
    """LavinMQ 2.9 shrinks the ISR on SIGTERM and can leave no one to lead
    (issue 26 item 8): here the leader gives its lease back first."""
    for round_ in range(3):
        leader = cluster.wait_leader()
        cluster.wait_isr(3)
        publish(leader.url, "q", [b"r%d-%d" % (round_, i) for i in range(200)])
        isr = cluster.isr()
        t0 = time.monotonic()
        assert leader.stop() == 0
        new = cluster.wait_leader(other_than=leader)
        took = time.monotonic() - t0
        assert cluster.isr() >= isr - {leader.node_id()}, "the stop shrank the ISR"
        assert took < 3, took
        leader.start()
    new = cluster.wait_leader()
    cluster.wait_isr(3)
    assert len(consume(new.url, "q", 1000)) == 600


def test_followers_proxy_clients_to_the_leader(cluster):
    leader = cluster.wait_leader()
    cluster.wait_isr(3)
    follower = next(n for n in cluster.nodes if n is not leader)
    publish(follower.url, "via-follower", [b"x", b"y"])
    assert consume(follower.url, "via-follower", 5) == [b"x", b"y"]
    # the management API and the metrics port answer through it too
    overview = follower.api("/api/overview")
    assert overview["object_totals"]["queues"] >= 1
    with urllib.request.urlopen(f"http://{follower.host}:{cluster.metrics_port}/metrics", timeout=5) as r:
        text = r.read().decode()
    assert "lavinmq_total_connected_followers 2" in text
    assert len(re.findall(r'lavinmq_follower_lag_in_bytes\{id="[0-9a-z]+"\} \d+', text)) == 2
    # and MQTT: a message published to a follower's MQTT port reaches an AMQP queue on the leader
    import paho.mqtt.publish
    publish(follower.url, "via-follower-mqtt", [])
    with pika.BlockingConnection(pika.URLParameters(leader.url)) as conn:
        conn.channel().queue_bind("via-follower-mqtt", "amq.topic", "sensors.t1")
    paho.mqtt.publish.single("sensors/t1", b"m", qos=1, hostname=follower.host, port=cluster.mqtt_port,
                             auth={"username": "guest", "password": "guest"})
    assert consume(leader.url, "via-follower-mqtt", 5) == [b"m"]


def connection_from(node, port, timeout=10):
    """The leader's view of the connection from this local port."""
    deadline = time.monotonic() + timeout
    while True:
        conns = [c for c in node.api("/api/connections") if c.get("peer_port") == port]
        if conns or time.monotonic() > deadline:
            return conns[0] if conns else None
        time.sleep(0.1)


def test_a_client_piped_through_a_follower_is_seen_as_itself(cluster):
    """A follower's AMQP and MQTT pipes start with a PROXY header naming the
    client (as LavinMQ's AMQP pipe): the leader shows, limits and judges the
    client's address, not the follower's. A header from anyone else is not
    believed."""
    import paho.mqtt.client as mqtt
    leader = cluster.wait_leader()
    cluster.wait_isr(3)
    follower = next(n for n in cluster.nodes if n is not leader)
    amqp = RawClient(follower.host, cluster.amqp_port, source="127.0.0.99")
    try:
        seen = connection_from(leader, amqp.sock.getsockname()[1])
        assert seen is not None and seen["peer_host"] == "127.0.0.99", seen
    finally:
        amqp.close()
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="piped", protocol=mqtt.MQTTv311)
    client.username_pw_set("guest", "guest")
    client.connect(follower.host, cluster.mqtt_port, bind_address="127.0.0.98")
    client.loop_start()
    try:
        seen = connection_from(leader, client.socket().getsockname()[1])
        assert seen is not None and seen["peer_host"] == "127.0.0.98", seen
    finally:
        client.loop_stop()
        client.disconnect()
    # a client of the leader's own that sends a header names nobody but itself
    forged = RawClient(leader.host, cluster.amqp_port, source="127.0.0.97", handshake=False)
    try:
        forged.sendall(b"PROXY TCP4 10.1.2.3 127.0.0.1 1234 5672\r\n")
        forged.handshake("guest", "guest", "/")
        seen = connection_from(leader, forged.sock.getsockname()[1])
        assert seen is not None and seen["peer_host"] == "127.0.0.97", seen
    finally:
        forged.close()


def test_nodes_api_and_cluster_status(cluster):
    leader = cluster.wait_leader()
    cluster.wait_isr(3)
    nodes = leader.api("/api/nodes")
    assert [n["role"] for n in nodes] == ["leader", "follower", "follower"]
    assert all(n["in_isr"] for n in nodes)
    assert {n["uri"] for n in nodes} == {n.uri for n in cluster.nodes}
    assert all(isinstance(n["lag_in_bytes"], int) for n in nodes[1:])
    assert len(nodes[0]["followers"]) == 2 and nodes[0]["uri"] == leader.uri
    out = subprocess.run([sys.executable, "-m", "lavinmq.ctl", "-U", leader.http_url, "cluster_status"],
                         capture_output=True, text=True, cwd=ROOT, timeout=30)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[0].split("\t") == ["node", "role", "uri", "in_isr", "lag_in_bytes", "state"]
    assert sorted(line.split("\t")[1] for line in lines[1:]) == ["follower", "follower", "leader"]
    # a follower that stops is shown, out of sync, until the ISR drops it
    follower = next(n for n in cluster.nodes if n is not leader)
    follower.stop()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        nodes = leader.api("/api/nodes")
        gone = [n for n in nodes if n.get("uri") in (follower.uri, None) and n["role"] == "follower"]
        if len(nodes) == 3 and gone and not gone[0]["running"]:
            break
        time.sleep(0.1)
    assert gone and not gone[0]["running"], nodes
