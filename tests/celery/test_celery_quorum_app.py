"""A Celery app on quorum queues (`task_default_queue_type = "quorum"`) against
the broker, with a real prefork worker (`celery worker`, a process of its
own) and Debian's redis-server for results: it starts (its native
delayed-delivery queues carry TTLs up to 134,217,728,000 ms, which the
broker used to refuse, and the worker never finished starting), countdown
tasks come back through native delayed delivery, also across a broker
restart, and a poison task (its worker process dies each time: acks_late
and task_reject_on_worker_lost requeue it) is dead-lettered after its
queue's delivery limit, the count kept across a restart."""
import base64
import importlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import pika
import pytest

from tests.celery import suite
from tests.conftest import BrokerProcess

pytestmark = [pytest.mark.timeout(300),
              # Celery's own (pending) deprecation warnings are Celery's business here
              pytest.mark.filterwarnings("ignore::DeprecationWarning"),
              pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")]

DELIVERY_LIMIT = 3

APP = '''
import os
from celery import Celery
from kombu import Exchange, Queue

app = Celery("quorum_app", broker=os.environ["QAPP_BROKER"], backend=os.environ["QAPP_BACKEND"])
app.conf.update(
    task_default_queue_type="quorum",
    task_default_exchange_type="topic",
    task_default_queue="tasks",
    task_queues=[Queue("tasks", Exchange("tasks", type="topic"), routing_key="tasks",
                       queue_arguments={"x-queue-type": "quorum", "x-delivery-limit": %(limit)d,
                                        "x-dead-letter-exchange": "dead"})],
    task_default_routing_key="tasks",
    task_default_exchange="tasks",
    broker_transport_options={"confirm_publish": True},
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
)


@app.task
def add(x, y):
    return x + y


@app.task
def poison(path):
    """Dies with its worker process, every time it runs."""
    with open(path, "a") as f:
        f.write("ran\\n")
    os._exit(1)
''' % {"limit": DELIVERY_LIMIT}


@pytest.fixture(scope="module")
def redis(tmp_path_factory):
    problem = suite.missing()
    if problem:
        if os.environ.get("CI") == "true":
            pytest.fail(problem)
        pytest.skip(problem)
    r = suite.Redis(tmp_path_factory.mktemp("redis")).start()
    yield r
    r.stop()


class World:
    """The broker, the app's module, its worker process."""

    def __init__(self, tmp_path, redis):
        self.dir = tmp_path
        self.broker = BrokerProcess(tmp_path / "data").start()
        (tmp_path / "quorum_app.py").write_text(APP)
        self.env = dict(os.environ, QAPP_BROKER=f"pyamqp://guest:guest@{self.broker.host}:{self.broker.port}//",
                        QAPP_BACKEND=f"redis://127.0.0.1:{redis.port}/0", PYTHONPATH=str(tmp_path))
        self.env.pop("PYTEST_CURRENT_TEST", None)
        ch = self.channel()
        ch.exchange_declare("dead", "fanout", durable=True)
        ch.queue_declare("poisoned", durable=True)
        ch.queue_bind("poisoned", "dead")
        ch.connection.close()
        self.worker = None
        self.app = None

    def channel(self):
        return pika.BlockingConnection(pika.URLParameters(self.broker.url)).channel()

    def start_worker(self):
        log = open(self.dir / "worker.log", "ab")
        self.worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "quorum_app", "worker", "-P", "prefork", "-c", "2",
             "-Q", "tasks", "-l", "info", "--without-gossip", "--without-mingle", "--without-heartbeat",
             "-n", f"qapp-{os.getpid()}@localhost"],
            cwd=self.dir, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        # ready once it consumes from its queue (after declaring the delayed-delivery topology)
        self.wait(lambda: self.consumers("tasks") > 0, 60, "the worker did not start consuming")

    def client(self):
        """The app, imported here as the worker imports it."""
        if self.app is None:
            os.environ.update(QAPP_BROKER=self.env["QAPP_BROKER"], QAPP_BACKEND=self.env["QAPP_BACKEND"])
            sys.path.insert(0, str(self.dir))
            sys.modules.pop("quorum_app", None)
            self.app = importlib.import_module("quorum_app")
            sys.path.remove(str(self.dir))
        return self.app

    def api(self, path):
        req = urllib.request.Request(self.broker.http_url + path)
        req.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read())

    def queue(self, name):
        return self.api("/api/queues/%2F/" + urllib.parse.quote(name, safe=""))

    def consumers(self, name):
        try:
            return self.queue(name)["consumers"]
        except urllib.error.HTTPError:
            return 0

    def wait(self, predicate, timeout, what):
        deadline = time.monotonic() + timeout
        while not predicate():
            if self.worker is not None and self.worker.poll() is not None:
                raise AssertionError(f"the worker exited ({self.worker.returncode}):\n{self.worker_log()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} in {timeout} s\n{self.worker_log()}")
            time.sleep(0.1)

    def worker_log(self):
        try:
            return (self.dir / "worker.log").read_text(errors="replace")[-4000:]
        except FileNotFoundError:
            return ""

    def restart_broker(self, how):
        if how == "graceful":
            self.broker.restart()
        else:
            self.broker.kill()
            self.broker.start()

    def close(self):
        if self.app is not None:
            app = self.app.app
            app.pool.force_close_all()      # the producer's connections
            app.backend.client.close()      # redis
            app.close()
        if self.worker is not None and self.worker.poll() is None:
            os.killpg(self.worker.pid, signal.SIGTERM)
            try:
                self.worker.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.worker.pid, signal.SIGKILL)
                self.worker.wait()
        self.broker.stop()
        self.broker.check_clean()


@pytest.fixture
def world(tmp_path, redis):
    redis.flush()
    w = World(tmp_path, redis)
    yield w
    w.close()


def delayed_messages(world):
    return sum(q["messages"] for q in world.api("/api/queues/%2F") if q["name"].startswith("celery_delayed_"))


def test_worker_starts_on_quorum_queues_and_countdowns_use_native_delayed_delivery(world):
    world.start_worker()
    tasks = world.queue("tasks")
    assert (tasks["type"], tasks["durable"], tasks["arguments"]["x-delivery-limit"]) == ("quorum", True, 3)
    top = world.queue("celery_delayed_27")
    assert top["type"] == "quorum" and top["arguments"]["x-message-ttl"] == 2 ** 27 * 1000
    assert top["arguments"]["x-dead-letter-strategy"] == "at-least-once"
    add = world.client().add
    assert add.delay(1, 2).get(timeout=30) == 3
    started = time.monotonic()
    result = add.apply_async((2, 3), countdown=3)
    # it waits in the delayed-delivery queues (levels 1 and 0 for 3 s), not in the task queue
    world.wait(lambda: delayed_messages(world) == 1, 10, "the countdown task never reached celery_delayed_*")
    assert world.queue("tasks")["messages"] == 0
    assert result.get(timeout=30) == 5
    assert time.monotonic() - started >= 2.5


@pytest.mark.parametrize("how", ["graceful", "sigkill"])
def test_countdown_task_survives_a_broker_restart(world, how):
    world.start_worker()
    add = world.client().add
    started = time.monotonic()
    result = add.apply_async((20, 22), countdown=8)
    world.wait(lambda: delayed_messages(world) == 1, 10, "the countdown task never reached celery_delayed_*")
    world.restart_broker(how)
    assert delayed_messages(world) == 1       # kept, with its TTL still running
    assert result.get(timeout=60) == 42
    assert time.monotonic() - started >= 7.5


@pytest.mark.parametrize("how", ["graceful", "sigkill"])
def test_poison_task_is_dead_lettered_at_the_delivery_limit_across_a_restart(world, how, tmp_path):
    world.start_worker()
    attempts = tmp_path / "attempts"
    world.client().poison.delay(str(attempts))

    def runs():
        return len(attempts.read_text().splitlines()) if attempts.exists() else 0

    world.wait(lambda: runs() >= 2, 60, "the poison task did not run twice")
    # its second run was requeued: the count must outlive the broker
    world.wait(lambda: world.queue("tasks")["messages_unacknowledged"] == 0 or runs() > 2, 20,
               "the second run was not requeued")
    world.restart_broker(how)
    ch = world.channel()

    def dead():
        return ch.queue_declare("poisoned", durable=True, passive=True).method.message_count == 1
    world.wait(dead, 90, "the poison task was not dead-lettered")
    m, props, body = ch.basic_get("poisoned", auto_ack=True)
    death = props.headers["x-death"][0]
    assert (death["reason"], death["queue"]) == ("delivery_limit", "tasks")
    # delivery limit 3: four deliveries; after SIGKILL the last requeue before
    # it may not have reached the disk, which costs at most one more
    assert runs() == DELIVERY_LIMIT + 1 if how == "graceful" else DELIVERY_LIMIT + 1 <= runs() <= DELIVERY_LIMIT + 2
    assert world.queue("tasks")["messages"] == 0
    ch.connection.close()
