"""`./dev cluster [N]`: a cluster of N nodes (default 3) and its etcd on this
machine, in the foreground; Ctrl-C stops it all.

    ./dev cluster                  three nodes on 127.0.0.11, .12, .13; etcd on 127.0.0.10
    ./dev cluster 5 --fresh        five nodes, their data directories made anew
    ./dev cluster --help           ports, addresses, where the data goes

Each node listens on an address of its own, every listener of it (AMQP,
HTTP, metrics, MQTT, the leader's replication port) on LavinMQ's default
ports, as nodes on separate machines would: a follower pipes its clients to
the leader's address on the same port numbers. etcd is Debian's (./dev
installs etcd-server when it is missing), on 127.0.0.10 with its data next
to the nodes'. Data directories and logs go under ./data-cluster
(--base-dir): n1/, n1.log, ..., etcd/, etcd.log; a second run carries on
with them, --fresh starts from nothing.

It prints each node's name, role, AMQP URL and management UI, then a line
whenever a role changes or a node exits. Ctrl-C stops the followers first,
then the leader (a clean hand-over would only elect another), then etcd.

tests/cluster/test_local_cluster.py runs this module's LocalCluster, the
code path of `./dev cluster 3`, with ports of its own.
"""
import argparse
import base64
import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PREFIX = "lavinmq"          # the etcd prefix: LavinMQ's default


@dataclasses.dataclass
class Ports:
    """Every node's ports (the same on each node: LavinMQ's defaults), etcd's."""
    amqp: int = 5672
    http: int = 15672
    metrics: int = 15692
    mqtt: int = 1883
    clustering: int = 5679
    etcd: int = 2379
    etcd_peer: int = 2380


class StartError(Exception):
    """The cluster could not start; the message says why and what to change."""


def etcd_binary():
    return shutil.which("etcd") or ("/usr/bin/etcd" if os.path.exists("/usr/bin/etcd") else None)


def check_free(host, port, what, flag):
    """StartError unless host:port can be listened on (before anything starts)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
            s.listen(1)
        except OSError as exc:
            raise StartError(f"{what} {host}:{port} cannot be listened on ({exc.strerror}): "
                             f"something else has it; {flag} moves it") from None


def _pdeathsig():
    """In the child: SIGTERM when this tool dies, however it dies (Linux)."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)     # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _spawn(args, log_path):
    """A child in a process group of its own: the terminal's Ctrl-C reaches
    this tool only, which stops the nodes in order."""
    with open(log_path, "ab") as log:
        return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=ROOT,
                                start_new_session=True, preexec_fn=_pdeathsig)


def _stop(proc, timeout):
    """SIGTERM, then SIGKILL after timeout; -> the exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


class Etcd:
    """Debian's etcd, one member, on host:client port."""

    def __init__(self, base_dir, host, ports):
        self.host, self.ports = host, ports
        self.data_dir = os.path.join(base_dir, "etcd")
        self.log_path = os.path.join(base_dir, "etcd.log")
        self.proc = None

    @property
    def endpoint(self):
        return f"{self.host}:{self.ports.etcd}"

    @property
    def url(self):
        return f"http://{self.endpoint}"

    def start(self, timeout=20):
        binary = etcd_binary()
        if binary is None:
            raise StartError("etcd is not installed: apt-get install etcd-server (./dev cluster does it)")
        check_free(self.host, self.ports.etcd, "etcd's client port", "--etcd-port")
        check_free(self.host, self.ports.etcd_peer, "etcd's peer port", "--etcd-port (and the port after it)")
        client, peer = self.url, f"http://{self.host}:{self.ports.etcd_peer}"
        self.proc = _spawn([binary, "--name", "dev-cluster", "--data-dir", self.data_dir,
                            "--listen-client-urls", client, "--advertise-client-urls", client,
                            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                            "--initial-cluster", f"dev-cluster={peer}", "--logger", "zap", "--log-level", "warn"],
                           self.log_path)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise StartError(f"etcd exited with {self.proc.returncode}; its log: {self.log_path}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=0.5) as r:
                    if json.loads(r.read()).get("health") == "true":
                        return self
            except OSError:
                pass
            time.sleep(0.05)
        raise StartError(f"etcd did not answer in {timeout} s; its log: {self.log_path}")

    def stop(self):
        if self.proc is not None:
            _stop(self.proc, 10)

    def get_prefix(self, prefix):
        """{key: value} of the keys under prefix (str)."""
        end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        body = {"key": base64.b64encode(prefix.encode()).decode(),
                "range_end": base64.b64encode(end.encode()).decode()}
        req = urllib.request.Request(self.url + "/v3/kv/range", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=2) as r:
            kvs = json.loads(r.read()).get("kvs") or []
        return {base64.b64decode(kv["key"]).decode(): base64.b64decode(kv.get("value", "")).decode() for kv in kvs}


class Node:
    def __init__(self, cluster, index, host):
        self.cluster = cluster
        self.index = index                  # 1, 2, ...
        self.host = host
        self.data_dir = os.path.join(cluster.base_dir, f"n{index}")
        self.log_path = os.path.join(cluster.base_dir, f"n{index}.log")
        self.proc = None

    @property
    def name(self):
        """As the management API names it (lavinmq.clustering.settings.node_name)."""
        return f"lavinmq@{self.host}"

    @property
    def uri(self):
        return f"tcp://{self.host}:{self.cluster.ports.clustering}"

    @property
    def amqp_url(self):
        return f"amqp://guest:guest@{self.host}:{self.cluster.ports.amqp}/%2F"

    @property
    def http_url(self):
        return f"http://{self.host}:{self.cluster.ports.http}"

    def args(self):
        c, p = self.cluster, self.cluster.ports
        secret = ["--clustering-secret-file", c.secret_file] if c.secret_file else []
        # every listener named on the node's own address: nothing is left on
        # 127.0.0.1, where the nodes would meet (TLS listeners: no certificate)
        return [c.python, "-m", "lavinmq", "-D", self.data_dir, "-b", self.host,
                "-p", str(p.amqp), "--http-port", str(p.http),
                "--metrics-http-bind", self.host, "--metrics-http-port", str(p.metrics),
                "--mqtt-bind", self.host, "--mqtt-port", str(p.mqtt),
                "--clustering", "--clustering-bind", self.host, "--clustering-port", str(p.clustering),
                "--clustering-advertised-uri", self.uri,
                "--clustering-etcd-endpoints", c.etcd.endpoint, "--clustering-etcd-prefix", c.prefix,
                *secret, *c.node_args]

    def start(self):
        os.makedirs(self.data_dir, exist_ok=True)
        self.proc = _spawn(self.args(), self.log_path)
        return self

    @property
    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self, timeout=30):
        return _stop(self.proc, timeout) if self.proc is not None else None

    def node_id(self):
        """Its cluster node id (base36), once it has made one."""
        try:
            with open(os.path.join(self.data_dir, ".clustering_id")) as f:
                return f.read().strip()
        except FileNotFoundError:
            return None

    def log_tail(self, n=20):
        try:
            with open(self.log_path, "rb") as f:
                return "\n".join(f.read().decode(errors="replace").splitlines()[-n:])
        except FileNotFoundError:
            return ""


class LocalCluster:
    """etcd and `size` nodes on 127.0.0.<first>, <first + 1>, ... (etcd on <first - 1>)."""

    def __init__(self, size=3, base_dir="data-cluster", ports=None, first=11, prefix=PREFIX, node_args=(),
                 python=sys.executable):
        if not 1 <= size <= 9:
            raise StartError(f"{size} nodes: 1 to 9")
        if not 2 <= first <= 254 - size:
            raise StartError(f"--first-address {first}: 2 to {254 - size}")
        self.base_dir = os.path.abspath(base_dir)
        self.ports = ports or Ports()
        self.prefix = prefix
        self.node_args = list(node_args)
        self.python = python
        self.etcd = Etcd(self.base_dir, f"127.0.0.{first - 1}", self.ports)
        self.nodes = [Node(self, i + 1, f"127.0.0.{first + i}") for i in range(size)]
        self.secret_file = None     # the nodes' shared secret, where the broker asks for one

    def _make_secret(self):
        """A broker that takes [clustering] secret_file gets one, made once
        (owner only) and shared by every node of this cluster."""
        from lavinmq.config import CLI_FIELDS
        if "clustering_secret_file" not in CLI_FIELDS:
            return
        path = os.path.join(self.base_dir, "clustering_secret")
        if not os.path.exists(path):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(base64.b64encode(os.urandom(32)).decode() + "\n")
        self.secret_file = path

    def start(self):
        """etcd, then every node; StartError (nothing left running) if a port is taken."""
        p = self.ports
        for n in self.nodes:
            for what, port, flag in (("AMQP", p.amqp, "--amqp-port"), ("HTTP", p.http, "--http-port"),
                                     ("metrics", p.metrics, "--metrics-port"), ("MQTT", p.mqtt, "--mqtt-port"),
                                     ("clustering", p.clustering, "--clustering-port")):
                check_free(n.host, port, f"node {n.index}'s {what} port", flag)
        os.makedirs(self.base_dir, exist_ok=True)
        self._make_secret()
        self.etcd.start()
        try:
            for n in self.nodes:
                n.start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self):
        """Followers first, then the leader (no election on the way out), then etcd."""
        try:
            leader = self.leader()
        except OSError:
            leader = None
        for n in sorted(self.nodes, key=lambda n: n is leader):
            n.stop()
        self.etcd.stop()

    # -- what etcd says ----------------------------------------------------------------------

    def leader(self):
        """The node the leader key names, or None."""
        uris = set(self.etcd.get_prefix(f"{self.prefix}/leader/").values())
        return next((n for n in self.nodes if n.uri in uris), None)

    def isr(self):
        """Node ids (base36) of the in-sync replicas."""
        value = self.etcd.get_prefix(f"{self.prefix}/isr").get(f"{self.prefix}/isr", "")
        ids = value.split(";", 1)[0]        # a signed key: the ids, then ";" and the signature
        return {x for x in ids.split(",") if x}

    def roles(self):
        """{node: role}: leader, follower (in sync), follower (syncing),
        starting, exited (code)."""
        leader, isr = self.leader(), self.isr()
        out = {}
        for n in self.nodes:
            if n.proc is None or n.proc.poll() is not None:
                out[n] = f"exited ({n.proc.returncode})" if n.proc is not None else "not started"
            elif n is leader:
                out[n] = "leader"
            elif leader is None:
                out[n] = "starting" if n.node_id() is None else "follower (no leader)"
            else:
                out[n] = "follower (in sync)" if n.node_id() in isr else "follower (syncing)"
        return out

    def wait_leader(self, timeout=60, other_than=None):
        """The leader, once it serves AMQP; StartError if none in time."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                node = self.leader()
            except OSError:
                node = None
            if node is not None and node is not other_than and node.running and _answers(node.host,
                                                                                       self.ports.amqp):
                return node
            if not any(n.running for n in self.nodes):
                break
            time.sleep(0.05)
        raise StartError("no leader in time:\n" + "\n".join(f"--- node {n.index} ({n.log_path})\n{n.log_tail(8)}"
                                                           for n in self.nodes))

    def table(self, roles=None):
        """The nodes as printed: name, role, AMQP URL, management UI, log."""
        roles = roles or self.roles()
        rows = [("node", "role", "AMQP", "management UI", "log")]
        rows += [(n.name, roles[n], n.amqp_url, n.http_url, shown_path(n.log_path)) for n in self.nodes]
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
        return ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1] for r in rows]


def _answers(host, port):
    try:
        socket.create_connection((host, port), timeout=0.3).close()
        return True
    except OSError:
        return False


def say(text):
    print(f"[cluster {time.strftime('%H:%M:%S')}] {text}", flush=True)


def shown_path(path):
    """A path as printed: relative to here when it is below here."""
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def watch(cluster, stopping, settle=10.0):
    """Print the table once the followers are in sync (or settle seconds
    after a leader appeared), then each change, until stopping()."""
    last = None
    shown = False
    led_at = None
    while not stopping():
        try:
            roles = cluster.roles()
        except OSError as exc:
            if cluster.etcd.proc.poll() is not None:
                say(f"etcd exited ({cluster.etcd.proc.returncode}); its log: {cluster.etcd.log_path}")
                return 1
            say(f"etcd does not answer: {exc}")
            time.sleep(1)
            continue
        if led_at is None and "leader" in roles.values():
            led_at = time.monotonic()
        settled = all(r in ("leader", "follower (in sync)") or r.startswith("exited") for r in roles.values())
        if not shown and led_at is not None and (settled or time.monotonic() - led_at > settle):
            shown = True
            print("\n".join(cluster.table(roles)), flush=True)
            leader = next(n for n, r in roles.items() if r == "leader")
            print(f"\n  lavinmqctl -D {shown_path(leader.data_dir)} cluster_status    "
                  f"(any node's data directory: its control socket)\n"
                  f"  Ctrl-C stops the nodes and etcd\n", flush=True)
        elif last is not None and roles != last:
            for n in cluster.nodes:
                # before the table, only a node that exits is news
                if roles[n] != last[n] and (shown or roles[n].startswith("exited")):
                    say(f"{n.name}: {last[n]} -> {roles[n]}"
                        + (f"; last lines of {shown_path(n.log_path)}:\n{n.log_tail(5)}"
                           if roles[n].startswith("exited") and not roles[n].endswith("(0)") else ""))
        last = roles
        if not any(n.running for n in cluster.nodes):
            say("every node has exited")
            return 1
        time.sleep(0.2)
    return 0


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="./dev cluster", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("size", nargs="?", type=int, default=3, help="nodes (1 to 9; default 3)")
    ap.add_argument("--base-dir", default="data-cluster",
                    help="data directories and logs (default ./data-cluster)")
    ap.add_argument("--fresh", action="store_true", help="remove --base-dir first: a new cluster")
    ap.add_argument("--first-address", type=int, default=11, metavar="N",
                    help="node 1 on 127.0.0.N, node 2 on N+1, ...; etcd on N-1 (default 11)")
    d = Ports()
    for name in ("amqp", "http", "metrics", "mqtt", "clustering", "etcd"):
        ap.add_argument(f"--{name}-port", type=int, default=getattr(d, name),
                        help=f"on every node (default {getattr(d, name)})" if name != "etcd"
                        else f"etcd's client port; its peer port is the next one (default {d.etcd})")
    ap.add_argument("node_args", nargs=argparse.REMAINDER,
                    help="after --: flags every node gets too (e.g. -- --clustering-lease-ttl 5)")
    opts = ap.parse_args(argv)
    if opts.node_args[:1] == ["--"]:
        opts.node_args = opts.node_args[1:]
    return opts


def main(argv=None):
    opts = parse_args(argv)
    ports = Ports(amqp=opts.amqp_port, http=opts.http_port, metrics=opts.metrics_port, mqtt=opts.mqtt_port,
                  clustering=opts.clustering_port, etcd=opts.etcd_port, etcd_peer=opts.etcd_port + 1)
    if opts.fresh and os.path.isdir(opts.base_dir):
        shutil.rmtree(opts.base_dir)
    stopping = []
    # the first Ctrl-C stops in order; the handler stays (nodes get their SIGTERM from stop())
    signal.signal(signal.SIGINT, lambda *_: stopping.append(1))
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    try:
        cluster = LocalCluster(opts.size, opts.base_dir, ports, opts.first_address, node_args=opts.node_args)
        say(f"{opts.size} node(s) on 127.0.0.{opts.first_address}-{opts.first_address + opts.size - 1}, etcd at "
            f"{cluster.etcd.url} (prefix {PREFIX}); data and logs in {shown_path(cluster.base_dir)}/")
        cluster.start()
    except StartError as exc:
        print(f"./dev cluster: {exc}", file=sys.stderr)
        return 1
    rc = 1
    try:
        rc = watch(cluster, lambda: bool(stopping))
    finally:
        say("stopping: followers, then the leader, then etcd")
        cluster.stop()
        say("stopped")
    return rc


if __name__ == "__main__":
    sys.exit(main())
