"""The leader killed again and again under a publisher with confirms: no
confirmed message is lost, none appears that was never published, the
nodes end with the same data. LAVINMQ_CLUSTER_KILLS sets how many
(default 10; 50 or more for the long run)."""
import os
import statistics
import time

import pytest

from tests.cluster.harness import wait_same_data
from tests.cluster.traffic import Publisher, check, drain

KILLS = int(os.environ.get("LAVINMQ_CLUSTER_KILLS", "10"))


@pytest.mark.timeout(60 + 15 * KILLS)
def test_leader_kills_under_confirmed_publishing(cluster):
    cluster.wait_leader()
    cluster.wait_isr(3)
    pub = Publisher([n.url for n in cluster.nodes], "kills").start()
    failovers, handovers = [], []
    try:
        pub.wait_confirmed(200)
        for k in range(KILLS):
            leader = cluster.wait_leader()
            cluster.wait_isr(3)
            # every third time a clean stop (SIGTERM) under load: issue 26 item 8
            clean = k % 3 == 2
            n = len(pub.confirmed)
            pub.wait_confirmed(n + 100)
            t0 = time.monotonic()
            connection = pub.connections
            if clean:
                leader.proc.terminate()
            else:
                leader.kill()
            first = pub.wait_confirm_after(t0, connection=connection)
            (handovers if clean else failovers).append(first - t0)
            if clean:
                assert leader.proc.wait(20) == 0, leader.log_tail()
            leader.start()
        cluster.wait_leader()
        cluster.wait_isr(3)
        pub.wait_confirmed(len(pub.confirmed) + 100)
    finally:
        pub.stop()
    leader = cluster.wait_leader()
    delivered = drain(leader.url, "kills")
    lost, phantoms, duplicates = check(pub, delivered)
    report = (f"{KILLS} leader stops ({len(failovers)} SIGKILL, {len(handovers)} SIGTERM): "
              f"{len(pub.confirmed)} confirmed, {len(delivered)} delivered, {len(lost)} lost, "
              f"{len(phantoms)} phantoms, {duplicates} duplicates; SIGKILL to the next confirm "
              f"min {min(failovers):.3f} median {statistics.median(failovers):.3f} max {max(failovers):.3f} s")
    if handovers:
        report += f"; SIGTERM to the next confirm median {statistics.median(handovers):.3f} s"
    print(report)
    assert lost == [], report
    assert phantoms == [], report
    assert statistics.median(failovers) <= 2.0, report
    wait_same_data(cluster.nodes)
