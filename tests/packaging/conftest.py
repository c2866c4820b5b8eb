"""Packaging tests build real artefacts (minutes): they run in their own CI
step (`.ci/run`), or with LAVINMQ_PACKAGING_TESTS=1."""
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def pytest_collection_modifyitems(config, items):
    if os.environ.get("LAVINMQ_PACKAGING_TESTS") == "1":
        return
    skip = pytest.mark.skip(reason="packaging step: set LAVINMQ_PACKAGING_TESTS=1 (.ci/run does)")
    for item in items:
        if "tests/packaging" in str(item.fspath):
            item.add_marker(skip)
