"""The model test's second target: a three-node cluster with one etcd
(tests/cluster/harness.py). A restart is the leader's: SIGTERM (it drains
and hands over) or SIGKILL (the others elect a new one); the old leader
comes back as a follower and the walk goes on once all three are in sync.
The client connects to the leader, or now and then to a follower, which
proxies it there."""
import signal
import time

from tests.cluster.harness import Cluster, _answers
from tests.model.driver import write_ini
from tests.model.model import ModelError


class ThreeNodes:
    name = "3-node cluster"
    reproduce = "tests/model/test_cluster.py -k reproduce"

    def __init__(self, etcd, base_dir, prefix, rng, strict_replication=False):
        self.cluster = Cluster(etcd, base_dir, prefix, extra_args=["-c", write_ini(base_dir)])
        self.rng = rng
        # a follower that refuses what the leader replicates drops out of the
        # ISR (the deleted directory of a transient queue, seen here): a
        # failure when strict, else counted, and the ISR awaited before a stop
        self.strict_replication = strict_replication
        self.entry = None       # the node the client connects to
        self.leader = None

    def start(self):
        self.cluster.start()
        self.settle()

    def settle(self, other_than=None):
        """A leader (not other_than), every node in sync, and a node for the client."""
        self.leader = self.cluster.wait_leader(timeout=60, other_than=other_than)
        self.cluster.wait_isr(3, timeout=60)
        self.leader = self.cluster.wait_leader(timeout=60)
        followers = [n for n in self.cluster.nodes if n is not self.leader]
        self.entry = self.rng.choice(followers) if self.rng.random() < 0.25 else self.leader

    @property
    def url(self):
        return self.entry.url

    @property
    def http_url(self):
        return self.leader.http_url

    def clean_restart(self, pump, during=None):
        self.cluster.wait_isr(3, timeout=60)        # someone can take over
        old = self.cluster.wait_leader(timeout=60)
        old.proc.send_signal(signal.SIGTERM)
        if during is not None:
            during()
        deadline = time.monotonic() + 60
        while old.proc.poll() is None:
            if time.monotonic() > deadline:
                old.proc.kill()
                raise ModelError(f"leader {old.index} ignored SIGTERM for 60 s:\n{old.log_tail()}")
            pump()
        if old.proc.returncode != 0:
            raise ModelError(f"leader {old.index} exited with {old.proc.returncode} on SIGTERM:\n{old.log_tail()}")
        self.new_leader(old)
        old.start()
        self.settle()

    def kill_restart(self):
        self.cluster.wait_isr(3, timeout=60)
        old = self.cluster.wait_leader(timeout=60)
        old.kill()
        self.new_leader(old)
        old.start()
        self.settle()

    def new_leader(self, old, timeout=60):
        """Until another node leads and answers (the harness's wait_leader
        takes the stopped node's exit for a failure)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            node = self.cluster.leader()
            if node is not None and node is not old and node.running and _answers(node.host, self.cluster.amqp_port):
                return node
            time.sleep(0.02)
        raise ModelError(f"no new leader {timeout} s after the old one stopped:\n{self.log_tail()}")

    def stop(self):
        self.cluster.stop()
        return 0

    def problems(self):
        for n in self.cluster.nodes:
            text = n.log_text()
            if "Traceback (most recent call last)" in text:
                at = text.index("Traceback (most recent call last)")
                return f"node {n.index} logged a traceback:\n" + text[max(0, at - 2000):at + 4000]
            if self.strict_replication and "is not replicated" in text:
                return f"node {n.index} refused what the leader replicated:\n" + "\n".join(
                    line for line in text.splitlines() if "is not replicated" in line or "left the in-sync" in line)
        return None

    def notes(self):
        """What the summary adds: followers that refused a replicated change."""
        refused = sum(n.log_text().count("is not replicated") for n in self.cluster.nodes)
        return {"follower refusals (not replicated)": refused} if refused else {}

    def log_tail(self):
        return "\n".join(f"-- node {n.index}{' (leader)' if n is self.leader else ''}:\n{n.log_tail(12)}"
                         for n in self.cluster.nodes)
