"""The clustering tests need etcd (Debian's etcd-server: ./dev test and
.ci/run install it). Without it they skip, except under CI, where a
missing etcd fails them instead of passing unnoticed. One etcd serves the
session; every test uses a prefix of its own."""
import os
import uuid

import pytest

from tests.cluster.etcd_server import EtcdProcess, etcd_binary


def require_etcd():
    if etcd_binary() is None:
        if os.environ.get("CI"):
            pytest.fail("etcd is not installed (apt-get install etcd-server)")
        pytest.skip("etcd is not installed (apt-get install etcd-server)")


@pytest.fixture(scope="session")
def etcd(tmp_path_factory):
    require_etcd()
    e = EtcdProcess(tmp_path_factory.mktemp("etcd") / "data").start()
    yield e
    e.stop()


@pytest.fixture
def prefix():
    return f"test-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def cluster(etcd, tmp_path, prefix, request):
    """Three nodes, started; the test waits for what it needs. A test marked
    cluster_args(...) gives every node those flags too; one marked
    etcd_relays has each node reach etcd through a relay it can cut
    (tests/cluster/relay.py)."""
    from tests.cluster.harness import Cluster
    marker = request.node.get_closest_marker("cluster_args")
    relays = request.node.get_closest_marker("etcd_relays") is not None
    c = Cluster(etcd, tmp_path, prefix, extra_args=marker.args if marker else (), relays=relays).start()
    yield c
    c.stop()
    for n in c.nodes:
        text = n.log_text()
        assert "Traceback (most recent call last)" not in text, f"node {n.index} logged a traceback:\n{text[-6000:]}"
