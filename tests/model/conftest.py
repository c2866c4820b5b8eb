"""The cluster variant's etcd: tests/cluster's session fixture (skipped
without etcd, failed under CI)."""
from tests.cluster.conftest import etcd, prefix  # noqa: F401 (fixtures)
