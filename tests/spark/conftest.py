"""Real Spark for the connector's tests: a standalone cluster (a master and
two workers started from the pyspark package's own classes, loopback, ports
of their own) and one classic session on it with an executor on each worker,
for the whole run, started on first use, with the data sources registered.
A Spark Connect server on the same cluster is started when a test first asks
for it. Spark needs Java 17: ./dev test installs openjdk-17-jre-headless (as
root)."""
import os
import shutil

import pytest

from tests.conftest import unique

HERE = os.path.dirname(os.path.abspath(__file__))


def pytest_collection_modifyitems(items):
    # the first test to use Spark starts the cluster, its session (and the
    # Connect server): minutes on a loaded 2-core machine, counted in its timeout
    for item in items:
        if str(item.fspath).startswith(HERE) and item.get_closest_marker("timeout") is None \
                and {"spark", "cluster", "connect_server"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.timeout(600))


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    if shutil.which("java") is None:
        pytest.fail("Spark needs Java 17: apt-get install openjdk-17-jre-headless (./dev test does it as root)")
    from lavinmq.spark.cluster import StandaloneCluster
    c = StandaloneCluster(workers=2, cores=2, base_dir=str(tmp_path_factory.mktemp("spark-cluster"))).start()
    yield c
    c.stop()


@pytest.fixture(scope="session")
def spark(cluster):
    from lavinmq.spark.cluster import session, wait_executors
    from lavinmq.spark.cluster import SMALL_JVM
    s = session(cluster.master_url, "lavinmq-tests", {**cluster.app_conf(), "spark.driver.memory": "512m",
                                                      "spark.driver.extraJavaOptions": SMALL_JVM})
    wait_executors(s, 2)
    yield s
    s.stop()


@pytest.fixture(scope="session")
def connect_server(cluster, tmp_path_factory):
    from lavinmq.spark.cluster import ConnectServer
    from lavinmq.spark.cluster import SMALL_JVM
    # one executor: enough to show the connector working through Connect
    server = ConnectServer(cluster.master_url, {**cluster.app_conf(executors=1),
                                                "spark.driver.extraJavaOptions": SMALL_JVM},
                           base_dir=str(tmp_path_factory.mktemp("spark-connect"))).start()
    yield server
    server.stop()


@pytest.fixture
def stream(broker):
    """A new stream queue on the session broker: its name."""
    from lavinmq.spark.amqp import Connection
    name = unique("spark")
    with Connection(broker.url) as c:
        c.declare_queue(name, arguments={"x-queue-type": "stream", "x-stream-max-segment-size-bytes": 65536})
    return name


def publish(url, queue, bodies, headers=None, exchange=""):
    """Bodies (bytes) with confirms, through our own client."""
    from lavinmq.spark.amqp import Connection, properties, publish_frames
    with Connection(url) as c:
        c.confirm_select()
        frames = []
        for i, body in enumerate(bodies):
            props = properties(content_type="text/plain", headers=headers(i) if headers else None,
                               message_id=f"id-{i}", delivery_mode=2)
            frames.append(publish_frames(1, exchange, queue, body, props, c.frame_max))
        for k in range(0, len(frames), 1000):
            chunk = frames[k:k + 1000]
            c.sock.sendall(b"".join(chunk))
            c.published += len(chunk)
        c.wait_confirms(c.published)
        assert c.nacked == 0
