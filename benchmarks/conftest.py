"""Benchmarks run with pytest-benchmark, outside the default test run:
    .venv/bin/pytest benchmarks --benchmark-autosave
Each benchmark processes a batch of N messages per round; `per_message_ns`
in extra_info (and the JSON report) is the figure to compare."""
import pytest

N = 10_000


@pytest.fixture
def per_message(benchmark):
    """Run fn(N) under the benchmark and record ns per message."""
    def run(fn, n=N):
        benchmark(fn, n)
        benchmark.extra_info["messages_per_round"] = n
        if benchmark.stats is not None:         # None under --benchmark-disable
            benchmark.extra_info["per_message_ns"] = round(benchmark.stats.stats.mean / n * 1e9, 1)
    return run
