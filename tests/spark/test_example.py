"""The example pipeline end to end on a small input: events into the
stream, Spark's per-page-and-minute counts back out through the exchange
and into Parquet, every count checked."""
import pytest

from lavinmq.spark import example


@pytest.mark.timeout(600)
def test_example_pipeline(spark, broker, tmp_path, capsys):
    opts = example.parse_args(["--uri", broker.url, "--events", "2000", "--pages", "10", "--minutes", "3",
                               "--rate", "0", "--out", str(tmp_path / "out"), "--timeout", "300"])
    rc = example.run(opts, spark=spark)
    out = capsys.readouterr().out
    assert "every aggregate matches the generator:        yes" in out, out[-3000:]
    assert "aggregates received on queue 'page-stats':     " in out
    # it said which broker it wrote to, and that it is this one (tests/spark/test_example_target.py)
    assert f"broker amqp://guest:***@127.0.0.1:{broker.port}/%2F: LavinMQ " in out
    assert rc == 0
