"""Three (or more) broker nodes on loopback and one etcd: node i listens on
127.0.0.1i with the same ports as the others (followers proxy clients to
the leader's address on their own port numbers, as LavinMQ's do)."""
import base64
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OWN = {".lock", ".clustering_id", ".clustering_syncing", "lavinmqctl.sock"}


def port_free_on(port, hosts):
    for host in hosts:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host, port))
            except OSError:
                return False
    return True


_taken = set()


def shared_port(hosts):
    """A port free on every one of hosts, never handed out twice in a run."""
    while True:
        with socket.socket() as s:
            s.bind((hosts[0], 0))
            port = s.getsockname()[1]
        if port not in _taken and port_free_on(port, hosts):
            _taken.add(port)
            return port


class ClusterNode:
    def __init__(self, cluster, index, data_dir):
        self.cluster = cluster
        self.index = index
        self.host = f"127.0.0.{11 + index}"
        self.data_dir = str(data_dir)
        self.log_path = self.data_dir + ".log"
        self.proc = None
        self.relay = None       # relay.Relay between this node and etcd, if the cluster has them

    @property
    def url(self):
        return f"amqp://guest:guest@{self.host}:{self.cluster.amqp_port}/%2F"

    @property
    def http_url(self):
        return f"http://{self.host}:{self.cluster.http_port}"

    @property
    def uri(self):
        return f"tcp://{self.host}:{self.cluster.repl_port}"

    def args(self):
        c = self.cluster
        return [sys.executable, "-m", "lavinmq", "-D", self.data_dir, "-b", self.host,
                "-p", str(c.amqp_port), "--http-port", str(c.http_port),
                "--metrics-http-bind", self.host, "--metrics-http-port", str(c.metrics_port),
                "--amqps-port", "0", "--https-port", "0", "--mqtt-port", str(c.mqtt_port), "--mqtts-port", "0",
                "-l", c.log_level,
                "--clustering", "--clustering-bind", self.host, "--clustering-port", str(c.repl_port),
                "--clustering-advertised-uri", self.uri,
                "--clustering-etcd-endpoints", self.relay.endpoint if self.relay else c.etcd.endpoint, "--clustering-etcd-prefix", c.prefix,
                "--clustering-lease-ttl", str(c.lease_ttl), *c.extra_args]

    def start(self):
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.args(), stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        log.close()
        return self

    @property
    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self, timeout=20):
        if not self.running:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError(f"node {self.index} ignored SIGTERM:\n{self.log_tail()}")

    def pause(self):
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self):
        self.proc.send_signal(signal.SIGCONT)

    def node_id(self):
        with open(os.path.join(self.data_dir, ".clustering_id")) as f:
            return int(f.read().strip(), 36)

    def log_text(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, n=40):
        return "\n".join(self.log_text().splitlines()[-n:])

    def api(self, path, timeout=5, method="GET", body=None):
        headers = {"Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(self.http_url + path, data=data, headers=headers, method=method)
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
            return json.loads(raw) if raw else None


class Cluster:
    def __init__(self, etcd, base_dir, prefix, size=3, lease_ttl=2, log_level="info", extra_args=(), relays=False):
        self.etcd = etcd
        self.prefix = prefix
        self.lease_ttl = lease_ttl
        self.log_level = log_level
        self.extra_args = list(extra_args)
        hosts = [f"127.0.0.{11 + i}" for i in range(size)]
        self.amqp_port = shared_port(hosts)
        self.http_port = shared_port(hosts)
        self.metrics_port = shared_port(hosts)
        self.mqtt_port = shared_port(hosts)
        self.repl_port = shared_port(hosts)
        self.nodes = [ClusterNode(self, i, os.path.join(str(base_dir), f"n{i}")) for i in range(size)]
        if relays:      # each node reaches etcd through a relay of its own, which a test can cut
            from tests.cluster.relay import Relay
            host, port = etcd.endpoint.rsplit(":", 1)
            for n in self.nodes:
                n.relay = Relay(host, int(port))

    def start(self):
        for n in self.nodes:
            n.start()
        return self

    def stop(self):
        """Followers first, so that no follower takes over on the way out."""
        for n in self.nodes:
            if n.running:
                n.resume()
        leader = self.leader()
        for n in sorted(self.nodes, key=lambda n: n is leader):
            try:
                n.stop()
            except (RuntimeError, OSError):
                pass
        for n in self.nodes:
            if n.relay is not None:
                n.relay.close()

    # -- what etcd says --------------------------------------------------------------------

    def leader_uri(self):
        keys = self.etcd.get_prefix(f"{self.prefix}/leader/")
        return next(iter(keys.values()), None)

    def leader(self):
        uri = self.leader_uri()
        return next((n for n in self.nodes if n.uri == uri), None)

    def isr(self):
        value = self.etcd.get(f"{self.prefix}/isr")
        return set() if not value else {int(x, 36) for x in value.split(",") if x}

    def wait_leader(self, timeout=20, other_than=None):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            node = self.leader()
            if node is not None and node is not other_than and _answers(node.host, self.amqp_port):
                return node
            for n in self.nodes:
                if n.proc is not None and n.proc.poll() not in (None, 0):
                    raise RuntimeError(f"node {n.index} exited with {n.proc.returncode}:\n{n.log_tail()}")
            time.sleep(0.02)
        raise RuntimeError("no leader in time:\n" + "\n".join(n.log_tail(15) for n in self.nodes))

    def wait_isr(self, count=None, timeout=30):
        """Until the ISR holds every running node (or count nodes), as the
        current leader wrote it: its followers are all in sync."""
        want = count or sum(1 for n in self.nodes if n.running)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            leader = self.leader()
            if leader is not None and len(self.isr()) >= want:
                try:
                    followers = leader.api("/api/nodes", timeout=2)[0].get("followers", [])
                except (OSError, ValueError, IndexError):
                    followers = []
                if sum(1 for f in followers if f["state"] == "in sync") >= want - 1 and len(self.isr()) >= want:
                    return self.isr()
            time.sleep(0.05)
        raise RuntimeError(f"ISR {self.isr()} not {want} in time:\n" + "\n".join(n.log_tail(15) for n in self.nodes))


def wait_same_data(nodes, timeout=15):
    """Until every node's replicated files are the same; -> the digest."""
    deadline = time.monotonic() + timeout
    while True:
        digests = [data_digest(n.data_dir) for n in nodes]
        if all(d == digests[0] for d in digests[1:]):
            return digests[0]
        if time.monotonic() > deadline:
            ref = digests[0]
            diff = {i: sorted(k for k in set(d) | set(ref) if d.get(k) != ref.get(k))[:8]
                    for i, d in enumerate(digests)}
            raise AssertionError(f"nodes differ: {diff}")
        time.sleep(0.2)


def _answers(host, port):
    try:
        socket.create_connection((host, port), timeout=0.3).close()
        return True
    except OSError:
        return False


def data_digest(data_dir):
    """{relative path: sha1} of a node's replicated files, a write segment
    without its preallocated zeros: what must be the same on every node."""
    out = {}
    for root, dirs, files in os.walk(data_dir):
        dirs[:] = [d for d in dirs if d != "transient"]
        for name in files:
            path = os.path.join(root, name)
            rel = os.path.relpath(path, data_dir)
            if rel in OWN or name.endswith(".tmp") or not os.path.isfile(path):
                continue
            with open(path, "rb") as f:
                data = f.read()
            if name.startswith("msgs."):
                data = data.rstrip(b"\0")       # its zeros past the data (records end in a body, never in zeros we add)
            out[rel] = hashlib.sha1(data).hexdigest()
    return out
