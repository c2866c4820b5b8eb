"""Replication to followers: full sync, streaming, acks after the
follower's fsync, confirms that wait for the ISR."""
import os
import re
import shutil
import subprocess
import time

import pika
import pytest

from tests.cluster.harness import wait_same_data


def publish(url, queue, bodies, declare=True, arguments=None):
    conn = pika.BlockingConnection(pika.URLParameters(url))
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        if declare:
            ch.queue_declare(queue, durable=True, arguments=arguments)
        for body in bodies:
            ch.basic_publish("", queue, body, pika.BasicProperties(delivery_mode=2))
    finally:
        conn.close()


def consume(url, queue, n):
    conn = pika.BlockingConnection(pika.URLParameters(url))
    try:
        ch = conn.channel()
        out = []
        for _ in range(n):
            method, _, body = ch.basic_get(queue)
            if method is None:
                break
            ch.basic_ack(method.delivery_tag)
            out.append(body)
        return out
    finally:
        conn.close()


def test_followers_hold_what_the_leader_holds(cluster):
    leader = cluster.wait_leader()
    cluster.wait_isr(3)
    # messages, acks, a priority queue, a stream, definitions of every kind
    publish(leader.url, "plain", [b"m%d" % i for i in range(1000)])
    assert len(consume(leader.url, "plain", 300)) == 300
    publish(leader.url, "prio", [b"p%d" % i for i in range(200)], arguments={"x-max-priority": 5})
    publish(leader.url, "stream", [b"s%d" % i for i in range(500)], arguments={"x-queue-type": "stream"})
    conn = pika.BlockingConnection(pika.URLParameters(leader.url))
    ch = conn.channel()
    ch.exchange_declare("ex", "topic", durable=True)
    ch.queue_bind("plain", "ex", "a.#")
    ch.exchange_declare("kept", "direct", durable=True, arguments={"x-persist-messages": 1000})
    ch.confirm_delivery()
    for i in range(50):
        ch.basic_publish("kept", "k", b"e%d" % i, pika.BasicProperties(delivery_mode=2))
    ch.queue_declare("gone", durable=True)
    ch.queue_delete("gone")
    conn.close()
    leader.api("/api/vhosts/other", method="PUT", body={})
    leader.api("/api/users/alice", method="PUT", body={"password": "pw", "tags": ""})
    leader.api("/api/policies/%2F/ttl", method="PUT", body={"pattern": "^plain$", "definition": {"max-length": 100000}})
    digest = wait_same_data(cluster.nodes)
    names = {rel.rsplit("/", 1)[-1] for rel in digest}
    assert {"users.json", "vhosts.json", "definitions.amqp", "policies.json", "commit"} <= names
    assert any(n.startswith("acks.") for n in names) and any(n.startswith("meta.") for n in names)


def test_confirms_wait_for_every_in_sync_replica(cluster):
    """A stopped follower holds the confirms back until the leader has
    written an ISR without it; then they go on, and it catches up later."""
    leader = cluster.wait_leader()
    cluster.wait_isr(3)
    follower = next(n for n in cluster.nodes if n is not leader)
    publish(leader.url, "q", [b"before"])
    follower.pause()
    try:
        t0 = time.monotonic()
        conn = pika.BlockingConnection(pika.URLParameters(leader.url))
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare("q2", durable=True)        # its declare-ok waits too
        declared = time.monotonic() - t0
        isr_then = cluster.isr()
        ch.basic_publish("", "q", b"during", pika.BasicProperties(delivery_mode=2))
        confirmed = time.monotonic() - t0
        conn.close()
        assert 2.5 < declared < 8, declared         # the ack deadline (3 s), then the ISR write
        assert follower.node_id() not in isr_then   # out of the ISR before the reply
        assert confirmed - declared < 1             # and nothing waits on it any more
    finally:
        follower.resume()
    cluster.wait_isr(3)
    wait_same_data(cluster.nodes)


def test_a_follower_down_catches_up(cluster):
    leader = cluster.wait_leader()
    cluster.wait_isr(3)
    follower = next(n for n in cluster.nodes if n is not leader)
    publish(leader.url, "q", [b"a%d" % i for i in range(1000)])
    follower.kill()
    publish(leader.url, "q", [b"b%d" % i for i in range(1000)], declare=False)
    consume(leader.url, "q", 500)
    assert follower.node_id() not in cluster.isr()          # dropped before those confirms
    follower.start()
    cluster.wait_isr(3)
    wait_same_data(cluster.nodes)
    # by checksums: only what changed while it was down came again
    line = [x for x in follower.log_text().splitlines() if "sync pass 1" in x][-1]
    listed, fetched = (int(w) for w in re.findall(r"(\d+) files listed, (\d+) to fetch", line)[0])
    assert 0 < fetched < listed, line


def test_a_sync_leaves_out_pages_of_zeros(cluster):
    """A queue's commit file is four slots 64 KB apart, zeros between. On
    another machine the follower's differs (its boot id is in its slots),
    so every sync sends it: as its pages that hold something, not 192 KB."""
    leader = cluster.wait_leader()
    cluster.wait_isr(3)
    follower = next(n for n in cluster.nodes if n is not leader)
    for q in range(5):
        publish(leader.url, f"z{q}", [b"x" * 100] * 100)
    wait_same_data(cluster.nodes)
    assert follower.stop() == 0
    commits = [os.path.join(root, "commit") for root, _, names in os.walk(follower.data_dir) if "commit" in names]
    assert len(commits) == 5 and all(os.path.getsize(c) > 3 * 65536 for c in commits)
    for c in commits:
        os.unlink(c)
    follower.start()
    cluster.wait_isr(3)
    wait_same_data(cluster.nodes)       # zeros where pages were left out: the same bytes
    line = [x for x in leader.log_text().splitlines() if "sync pass 1" in x][-1]
    files, sent = (int(w) for w in re.findall(r"(\d+) sent \((\d+) bytes\)", line)[0])
    assert files == 5, line
    assert sent <= 5 * 4 * 4096, line


@pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2)")
def test_replication_and_proxy_links_keep_alive(cluster):
    """Both ends of each follower's replication link, and a follower's pipe
    to the leader, probe a silent peer ([main] tcp_keepalive, as LavinMQ's
    clustering): a node whose machine vanished is not waited for forever."""
    leader = cluster.wait_leader()
    cluster.wait_isr(3)
    follower = next(n for n in cluster.nodes if n is not leader)
    # a client through a follower: its pipe to the leader is a link too
    conn = pika.BlockingConnection(pika.URLParameters(follower.url))
    try:
        conn.channel()
        links = {"replication": cluster.repl_port, "proxy": cluster.amqp_port}
        for what, port in links.items():
            deadline = time.monotonic() + 5
            while True:
                out = subprocess.run(["ss", "-tnoi", "state", "established", f"( dport = :{port} )"],
                                     capture_output=True, text=True, timeout=10).stdout
                blocks = [b for b in re.split(r"\n(?=\S)", out.strip())[1:] if f":{port} " in b]
                if what == "proxy":         # from the follower's address to the leader's
                    blocks = [b for b in blocks if f"{follower.host}:" in b and f"{leader.host}:{port}" in b]
                idle = [b for b in blocks if "timer:(on," not in b]
                if len(idle) >= (2 if what == "replication" else 1) or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            assert len(idle) >= (2 if what == "replication" else 1), out
            assert all("timer:(keepalive," in b for b in idle), out
        # the leader's ends of the replication links
        out = subprocess.run(["ss", "-tnoi", "state", "established", f"( sport = :{cluster.repl_port} )"],
                             capture_output=True, text=True, timeout=10).stdout
        blocks = [b for b in re.split(r"\n(?=\S)", out.strip())[1:] if "timer:(on," not in b]
        assert len(blocks) >= 2 and all("timer:(keepalive," in b for b in blocks), out
    finally:
        conn.close()
