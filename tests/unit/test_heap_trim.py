"""The broker gives freed heap back after bursts of closed connections
(lavinmq.process.trim_if_due, from the housekeeping loop)."""
import time

import pytest

from lavinmq import process


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.setattr(process, "_closed", 0)
    monkeypatch.setattr(process, "_last_close", 0.0)
    monkeypatch.setattr(process, "_last_trim", time.monotonic())
    calls = []
    monkeypatch.setattr(process, "_malloc_trim", lambda pad: calls.append(pad))
    return calls


def test_trims_once_a_burst_of_closes_is_over(fresh, monkeypatch):
    for _ in range(process.TRIM_AFTER - 1):
        process.released()
    monkeypatch.setattr(process, "_last_close", time.monotonic() - process.QUIET_FOR - 1)
    assert not process.trim_if_due() and fresh == []          # too few closes
    process.released()
    assert not process.trim_if_due()                           # the burst is still going on
    monkeypatch.setattr(process, "_last_close", time.monotonic() - process.QUIET_FOR - 1)
    assert process.trim_if_due() and fresh == [0]
    assert not process.trim_if_due() and fresh == [0]          # once per burst


def test_trims_at_most_every_30_s_under_steady_churn(fresh, monkeypatch):
    for _ in range(process.TRIM_AFTER):
        process.released()
    assert not process.trim_if_due()
    monkeypatch.setattr(process, "_last_trim", time.monotonic() - process.TRIM_AT_MOST - 1)
    assert process.trim_if_due() and fresh == [0]


def test_glibc_trim_is_found_here():
    assert process._malloc_trim is not None      # Debian's glibc: the real function
