"""A leader that cannot know it lost: stopped (SIGSTOP) while another is
elected, or cut off from etcd. Never two leaders confirming, and nothing
confirmed is lost."""
import os
import time

import pytest

from tests.cluster.harness import wait_same_data
from tests.cluster.traffic import Publisher, check, drain


def publishers(cluster, queue):
    """The leader once the ISR is whole, and two publishers under way: one
    on the leader's own address, one through the others."""
    leader = cluster.wait_leader()
    cluster.wait_isr(3)
    direct = Publisher([leader.url], queue).start()
    others = Publisher([n.url for n in cluster.nodes if n is not leader], queue).start()
    return leader, direct, others


def test_a_stopped_leader_never_confirms_after_another_was_elected(cluster):
    old, direct, others = publishers(cluster, "stopped")
    try:
        direct.wait_confirmed(100)
        others.wait_confirmed(100)
        first_connection = direct.connections
        t0 = time.monotonic()
        old.pause()
        try:
            # its lease runs out (no process answers to revoke it early): a new leader
            new = cluster.wait_leader(other_than=old, timeout=20)
            elected = time.monotonic()
            others.wait_confirm_after(elected, connection=others.connections - 1)
            time.sleep(1)
        finally:
            old.resume()
        resumed = time.monotonic()
        # what reached the stopped leader's socket meanwhile is read now: nothing of it is confirmed
        time.sleep(2)
        late = [ts for ts, c in direct.confirmed.values() if c == first_connection and ts > elected]
        assert late == [], f"the old leader confirmed {len(late)} messages after {new.index} was elected"
        assert elected - t0 < 2 * cluster.lease_ttl + 2
        cluster.wait_isr(3, timeout=40)        # the old leader came back as a follower
        others.wait_confirmed(len(others.confirmed) + 50)
    finally:
        direct.stop()
        others.stop()
    assert resumed > elected
    leader = cluster.wait_leader()
    delivered = drain(leader.url, "stopped")
    for pub in (direct, others):
        lost, phantoms, _ = check(pub, delivered)
        assert lost == [], f"{len(lost)} confirmed messages lost"
    assert set(delivered) <= direct.attempted | others.attempted
    assert "fenced" in old.log_text() or "lease lost" in old.log_text()
    wait_same_data(cluster.nodes)


HOOKS = "/tmp/lavinmq-cluster-hooks-{}.log".format(__import__("os").getpid())


@pytest.mark.cluster_args("--clustering-on-leader-elected", f"echo elected >> {HOOKS}",
                          "--clustering-on-leader-lost", f"echo lost >> {HOOKS}")
def test_without_etcd_nothing_is_confirmed_until_it_returns(cluster):
    if os.path.exists(HOOKS):
        os.unlink(HOOKS)
    etcd = cluster.etcd
    cluster.wait_leader()
    cluster.wait_isr(3)
    pub = Publisher([n.url for n in cluster.nodes], "no-etcd").start()
    try:
        pub.wait_confirmed(200)
        t0 = time.monotonic()
        etcd.pause()
        try:
            time.sleep(cluster.lease_ttl + 3)
            # the leader fenced itself by its own clock, at the latest one TTL after its last keepalive
            last = max(ts for ts, _ in pub.confirmed.values())
            assert last < t0 + cluster.lease_ttl + 0.2, f"confirmed {last - t0:.2f} s after etcd stopped"
            count = len(pub.confirmed)
            time.sleep(1)
            assert len(pub.confirmed) == count
        finally:
            etcd.resume()
        back = time.monotonic()
        first = pub.wait_confirm_after(back, timeout=30)
        assert first - back < 15
        cluster.wait_isr(3, timeout=40)
        pub.wait_confirmed(len(pub.confirmed) + 100)
    finally:
        pub.stop()
    leader = cluster.wait_leader()
    lost, phantoms, duplicates = check(pub, drain(leader.url, "no-etcd"))
    assert lost == [] and phantoms == []
    wait_same_data(cluster.nodes)
    # the hooks ran: elected at the start and again after etcd came back, lost when it went
    with open(HOOKS) as f:
        events = f.read().split()
    os.unlink(HOOKS)
    assert events.count("elected") >= 2 and events.count("lost") >= 1, events


@pytest.mark.etcd_relays
def test_a_leader_cut_off_from_etcd_stops_confirming_before_another_is_elected(cluster):
    """A partition between the leader and etcd alone: the leader runs on,
    its followers and clients still reach it, and the followers, who still
    reach etcd, elect one of them once its lease runs out there. Two
    leaders run at once; only one may confirm. The old one stops by its own
    clock, before etcd lets the lease go."""
    old, direct, others = publishers(cluster, "cut")
    try:
        direct.wait_confirmed(100)
        others.wait_confirmed(100)
        first_connection = direct.connections
        t0 = time.monotonic()
        old.relay.cut()
        try:
            new = cluster.wait_leader(other_than=old, timeout=20)
            elected = time.monotonic()
            assert old.running, "the cut-off leader must still run: it is the one to be fenced"
            others.wait_confirm_after(elected, connection=others.connections - 1)
            last = max(ts for ts, c in direct.confirmed.values() if c == first_connection)
            assert last < elected, f"the old leader confirmed {last - elected:.2f} s after {new.index} was elected"
            assert last < t0 + cluster.lease_ttl + 0.2, f"confirmed {last - t0:.2f} s after the cut"
            deadline = time.monotonic() + 10
            while "leadership ends" not in old.log_text():
                assert time.monotonic() < deadline, old.log_tail()
                time.sleep(0.05)
        finally:
            old.relay.restore()
        cluster.wait_isr(3, timeout=40)        # the old leader came back as a follower
        others.wait_confirmed(len(others.confirmed) + 50)
    finally:
        direct.stop()
        others.stop()
    leader = cluster.wait_leader()
    delivered = drain(leader.url, "cut")
    for pub in (direct, others):
        lost, _, _ = check(pub, delivered)
        assert lost == [], f"{len(lost)} confirmed messages lost"
    assert set(delivered) <= direct.attempted | others.attempted
    wait_same_data(cluster.nodes)
