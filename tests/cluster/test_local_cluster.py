"""`./dev cluster 3` (tools/cluster.py's LocalCluster, the code the command
runs, on ports of the test's own), issue 47 item 4: three nodes on their
own loopback addresses and one etcd from one call; a leader SIGKILLed under
confirmed messages is replaced with all of them; every node's /api/nodes,
the UI's source, names the nodes one way; a follower answers lavinmqctl on
its control socket; the promoted node never refuses a connection; a clean
stop of a follower logs no warning about the in-sync replicas."""
import io
import re
import socket
import threading
import time

import pika

from lavinmq import ctl
from tests.cluster.conftest import require_etcd
from tests.cluster.harness import shared_port, wait_same_data
from tests.cluster.test_replication import consume, publish
from tools import cluster as local_cluster


def api(node, path):
    import base64
    import json
    import urllib.request
    req = urllib.request.Request(node.http_url + path,
                                 headers={"Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def lavinmqctl(*args):
    out = io.StringIO()
    rc = ctl.main(list(args), out=out)
    return rc, out.getvalue()


class RefusalProbe(threading.Thread):
    """Connects to each address's AMQP port every few ms and counts refusals."""

    def __init__(self, hosts, port):
        super().__init__(daemon=True)
        self.hosts, self.port = hosts, port
        self.refused = {h: 0 for h in hosts}
        self.stopped = threading.Event()

    def run(self):
        while not self.stopped.is_set():
            for h in self.hosts:
                try:
                    socket.create_connection((h, self.port), timeout=1).close()
                except ConnectionRefusedError:
                    self.refused[h] += 1
                except OSError:
                    pass
            time.sleep(0.003)


def wait_for(what, check, timeout=30):
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not in {timeout} s")
        time.sleep(0.1)


def names_of(nodes_api):
    return [n["name"] for n in nodes_api]


def test_dev_cluster_three_nodes_failover_and_names(tmp_path):
    require_etcd()
    first = 11
    hosts = [f"127.0.0.{first + i}" for i in range(3)]
    etcd_host = f"127.0.0.{first - 1}"
    ports = local_cluster.Ports(amqp=shared_port(hosts), http=shared_port(hosts), metrics=shared_port(hosts),
                                mqtt=shared_port(hosts), clustering=shared_port(hosts),
                                etcd=shared_port([etcd_host]), etcd_peer=shared_port([etcd_host]))
    c = local_cluster.LocalCluster(3, tmp_path / "data-cluster", ports, first)
    c.start()
    try:
        leader = c.wait_leader(60)
        # every listener on the node's own address: nothing on 127.0.0.1
        for n in c.nodes:
            assert f"-b {n.host}" in " ".join(n.args())
            assert all(a not in ("127.0.0.1", "0.0.0.0") for a in n.args())
        wait_for("the ISR holds every node", lambda: len(c.isr()) == 3 and all(
            r in ("leader", "follower (in sync)") for r in c.roles().values()), 60)
        followers = [n for n in c.nodes if n is not leader]
        # a new cluster's first minute has nothing to warn about (the followers
        # meeting the leader's port before it opened did)
        for n in c.nodes:
            assert not [x for x in n.log_tail(10000).splitlines() if " WARNING " in x or " ERROR " in x], n.log_tail()

        # confirmed messages, published through a follower's proxy
        publish(followers[0].amqp_url, "first-contact", [b"m%d" % i for i in range(1000)])

        # a follower answers lavinmqctl on its own control socket
        rc, out = lavinmqctl("-D", followers[1].data_dir, "status")
        assert rc == 0, out
        assert f"Node: {followers[1].name}" in out and "Role: follower" in out, out
        assert f"Leader: {leader.name}" in out and f"Leader_API: {leader.http_url}" in out, out
        rc, out = lavinmqctl("-D", followers[1].data_dir, "cluster_status")   # passed to the leader
        assert rc == 0, out
        assert sorted(line.split("\t")[0] for line in out.strip().splitlines()[1:]) == sorted(n.name for n in c.nodes)
        rc, out = lavinmqctl("-D", followers[1].data_dir, "list_queues")
        assert rc == 0 and "first-contact\t1000" in out, out

        # the leader SIGKILLed: the followers' ports never refuse, the promoted one's neither
        probe = RefusalProbe([n.host for n in followers], ports.amqp)
        probe.start()
        time.sleep(0.2)
        leader.kill()
        new = c.wait_leader(30, other_than=leader)
        time.sleep(0.3)
        probe.stopped.set()
        probe.join(5)
        assert probe.refused == {n.host: 0 for n in followers}, probe.refused
        assert "ms after the election" in new.log_tail(200)

        # it has every confirmed message
        got = consume(new.amqp_url, "first-contact", 2000)
        assert sorted(got) == sorted(b"m%d" % i for i in range(1000))

        # the surviving follower joined it: every node's /api/nodes names the
        # nodes the same way, the one that died too, and the ISR with those names
        other = next(n for n in followers if n is not new)
        wait_for("the other follower joins the new leader",
                 lambda: any(f["name"] == other.name and f["state"] == "in sync"
                             for f in api(new, "/api/nodes")[0]["followers"]))
        views = {n.name: api(n, "/api/nodes") for n in (new, other)}   # the follower's is piped to the leader
        expected = {n.name: n.uri for n in c.nodes}
        for where, nodes in views.items():
            assert nodes[0]["name"] == new.name and nodes[0]["role"] == "leader", (where, nodes)
            for n in nodes:
                assert expected[n["name"]] == n["uri"], (where, n)
                assert n["name"] == f"lavinmq@{re.match(r'tcp://(.+):', n['uri']).group(1)}"
            assert set(nodes[0]["isr"]) <= set(names_of(nodes)), (where, nodes)
            assert [f["name"] for f in nodes[0]["followers"]] == [other.name], (where, nodes)
        assert api(new, "/api/overview")["node"] == new.name
        assert api(other, "/api/nodes/" + new.name)["name"] == new.name

        # the dead leader left the ISR when a flush first needed it gone: a
        # shrink, and a warning says so
        wait_for("the ISR without the dead leader", lambda: c.isr() == {new.node_id(), other.node_id()})
        assert re.search(rf" WARNING .*the in-sync replicas shrink: {leader.node_id()} left", new.log_tail(1000))

        # a clean stop of a follower, nothing being written: no warning about
        # the in-sync replicas (it stays in the ISR key until a flush needs it
        # gone), and none at all. The consumer's acks reach the disk (and the
        # follower) up to a second later: waited for
        wait_same_data([new, other])
        time.sleep(0.5)
        mark = len(new.log_tail(100000).splitlines())
        assert other.stop() == 0
        time.sleep(1)
        after = new.log_tail(100000).splitlines()[mark:]
        assert any("disconnected" in line for line in after), after
        assert not [line for line in after if " WARNING " in line or " ERROR " in line], after
        assert c.isr() == {new.node_id(), other.node_id()}
        # ... and when a publish needs it gone, the shrink is a warning
        publish(new.amqp_url, "first-contact", [b"after"])
        assert re.search(rf" WARNING .*the in-sync replicas shrink: {re.escape(other.name)} [(]{other.node_id()}[)] "
                         rf"left [(]disconnected[)]",
                         "\n".join(new.log_tail(100000).splitlines()[mark:]))
        # no spurious errors on the way (a node that won its election meeting its own key)
        for n in c.nodes:
            text = n.log_tail(100000)
            assert "Traceback" not in text and " ERROR " not in text, f"{n.name}:\n{text[-3000:]}"
    except pika.exceptions.AMQPError:
        print("\n".join(f"--- {n.name}\n{n.log_tail(30)}" for n in c.nodes))
        raise
    finally:
        c.stop()
