"""End to end: start the broker, run lavinmqperf throughput against it.
The rates go into extra_info (msgs/s); the timing is the run itself."""
import json
import subprocess
import sys

from tests.conftest import BrokerProcess


def perf(url, *args):
    out = subprocess.run([sys.executable, "-m", "lavinmq.perf", "throughput", "--uri", url, "-j", *args],
                         capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_throughput_publish_consume(benchmark, tmp_path):
    b = BrokerProcess(tmp_path / "data").start()
    try:
        result = benchmark.pedantic(perf, args=(b.url, "-z", "5"), rounds=1, iterations=1)
        benchmark.extra_info.update(result)
        assert result["avg_consume_rate"] > 0
    finally:
        b.stop()
