"""Real Spark (local[2]) for the connector's tests: one session for the
whole run, started on first use, with the data sources registered. Spark
needs Java 17: ./dev test installs openjdk-17-jre-headless (as root)."""
import shutil

import pytest

from tests.conftest import unique


@pytest.fixture(scope="session")
def spark():
    if shutil.which("java") is None:
        pytest.fail("Spark needs Java 17: apt-get install openjdk-17-jre-headless (./dev test does it as root)")
    from lavinmq.spark.example import spark_session
    session = spark_session("lavinmq-tests")
    yield session
    session.stop()


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
