"""The connector from a Spark Connect client: SparkSession.builder.remote()
against a Connect server started from the pyspark package (bin/spark-submit
--class org.apache.spark.sql.connect.service.SparkConnectServer, an
application of the test cluster), registered and used as from a classic
session: the batch and streaming sources, the segment reader, the sink and
the query's progress. The client runs in a process of its own
(tests/spark/connect_client.py), as a notebook would."""
import json
import subprocess
import sys

from tests.conftest import ROOT
from tests.spark.conftest import publish


def test_a_connect_client_reads_and_writes(connect_server, broker, stream, tmp_path):
    publish(broker.url, stream, [b"c%04d" % i for i in range(1000)], headers=lambda i: {"i": i})
    run = subprocess.run([sys.executable, "-m", "tests.spark.connect_client", connect_server.url, broker.url,
                          stream, broker.data_dir, str(tmp_path / "ck")],
                         cwd=ROOT, capture_output=True, text=True, timeout=500)
    assert run.returncode == 0, run.stderr[-5000:]
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    assert seen["session"] == "pyspark.sql.connect.session"
    assert seen["batch offsets"] == list(range(101, 701))
    assert seen["first row"] == [stream, "c0100", {"i": "100"}]
    assert seen["segment rows"] == 1000
    progress = [p for p in seen["progress"] if p["rows"]]
    assert [p["rows"] for p in progress] == [400, 400, 200]
    assert json.loads(progress[0]["latestOffset"])["offsetsBehindLatest"] == {stream: 600}
    assert json.loads(progress[-1]["latestOffset"])["maxOffsetsBehindLatest"] == 0
    assert seen["published"] == 1000
