"""The model-based durability test over a three-node cluster (issue 40):
the walk of tests/model/test_single_node.py, where each restart is the
leader's (SIGTERM: it drains and hands over; SIGKILL: a new one is
elected) and the client reconnects to the new leader (or through a
follower's proxy). Everything confirmed must be on the new leader.

The long run: LAVINMQ_MODEL_CLUSTER_STEPS=2000 pytest tests/model/test_cluster.py -k long -s
(LAVINMQ_MODEL_SEED, LAVINMQ_MODEL_RESTART_EVERY as for one node)."""
import os
import random

import pytest

from tests.model.cluster_target import ThreeNodes
from tests.model.model import ModelError
from tests.model.walk import Walk

CI_SEEDS = (1,)
CI_STEPS = 60

# found and not fixed yet (strict xfails: the fix makes them fail until the
# mark goes): (seed, steps, restart_every, strict_replication) -> what it is
OPEN = {}
# found and fixed: (seed, steps, restart_every, strict_replication) -> what it was
REGRESSIONS = {
    (6, 9, 10, True): "deleting a non-durable queue on the leader replicated the removal of its directory "
                      "under transient/; every follower refused it ('... is not replicated'), disconnected and "
                      "left the ISR (fixed: the replicator leaves out what is not replicated)",
    (35, 83, 8, False): "purge-ok did not wait for the followers: a leader killed just after a purge left "
                        "the purged messages on the new leader (fixed: purge-ok is sent as other definition "
                        "changes are, once the in-sync replicas have the acks)",
    (22, 33, 8, False): "a delivery still unacked when the leader stopped cleanly was requeued when its "
                        "connection closed, after the last replicated flush: the new leader delivered it with "
                        "redelivered=False (fixed: the drain requeues what clients hold before its last flush)",
}
CASES = [pytest.param(*k, id=f"seed{k[0]}") for k in sorted(REGRESSIONS)] + [
    pytest.param(*k, id=f"seed{k[0]}-open", marks=pytest.mark.xfail(reason=why, strict=True, raises=ModelError))
    for k, why in sorted(OPEN.items())]


def run_walk(etcd, tmp_path, prefix, seed, steps, restart_every, strict=True, strict_replication=False):
    if os.environ.get("LAVINMQ_TEST_URL"):
        pytest.skip("starts and kills its own cluster")
    target = ThreeNodes(etcd, tmp_path, prefix, random.Random(seed + 1), strict_replication)
    target.start()
    walk = Walk(target, seed, steps, restart_every=restart_every, strict=strict)
    try:
        walk.run()
    finally:
        target.stop()
        print(walk.summary())
    return walk


@pytest.mark.timeout(400)
@pytest.mark.parametrize("seed", CI_SEEDS)
def test_cluster_walk(etcd, tmp_path, prefix, seed):
    run_walk(etcd, tmp_path, prefix, seed, CI_STEPS, restart_every=10)


@pytest.mark.timeout(400)
@pytest.mark.parametrize("seed,steps,restart_every,strict_replication", CASES)
def test_cluster_regression(etcd, tmp_path, prefix, seed, steps, restart_every, strict_replication):
    run_walk(etcd, tmp_path, prefix, seed, steps, restart_every, strict_replication=strict_replication)


LONG_STEPS = int(os.environ.get("LAVINMQ_MODEL_CLUSTER_STEPS", "0"))


@pytest.mark.timeout(600 + 5 * LONG_STEPS)
def test_cluster_long(etcd, tmp_path, prefix):
    if not LONG_STEPS:
        pytest.skip("the long run: LAVINMQ_MODEL_CLUSTER_STEPS=2000")
    seed = int(os.environ.get("LAVINMQ_MODEL_SEED") or random.randrange(1_000_000))
    every = int(os.environ.get("LAVINMQ_MODEL_RESTART_EVERY", "40"))
    walk = run_walk(etcd, tmp_path, prefix, seed, LONG_STEPS, every, strict=False)
    bad = [f"step {step}: {kind}: {text}" for step, kind, text in walk.anomalies]
    assert not bad, f"{walk.summary()}\n" + "\n".join(bad[:30])


@pytest.mark.timeout(3600)
def test_cluster_reproduce(etcd, tmp_path, prefix):
    """A walk of a failure's seed, strict, as its message says."""
    if not os.environ.get("LAVINMQ_MODEL_SEED"):
        pytest.skip("LAVINMQ_MODEL_SEED=... (and the other settings a failure printed)")
    run_walk(etcd, tmp_path, prefix, int(os.environ["LAVINMQ_MODEL_SEED"]),
             int(os.environ.get("LAVINMQ_MODEL_STEPS") or CI_STEPS),
             int(os.environ.get("LAVINMQ_MODEL_RESTART_EVERY", "12")))
