"""Shovels and federation against real peers: two brokers of ours (session
scope; tests use names of their own), fresh ones for restarts and kills,
RabbitMQ 3.10 (tests/links/rabbitmq.py) and an aiohttp server as an HTTP
destination."""
import base64
import json
import time
import urllib.error
import urllib.request

import pika
import pytest

from tests.conftest import BrokerProcess


def call(b, method, path, body=None, user="guest", password="guest"):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(b.http_url + path, data=data, method=method)
    req.add_header("Authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            text = resp.read()
            return resp.status, json.loads(text) if text else None
    except urllib.error.HTTPError as e:
        with e:
            text = e.read()
        return e.code, json.loads(text) if text else None


def ok(b, method, path, body=None):
    status, answer = call(b, method, path, body)
    assert status < 300, f"{method} {path}: {status} {answer}"
    return answer


def wait_for(what, predicate, timeout=20, interval=0.05):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what} (last: {value!r})")
        time.sleep(interval)


def queue_depth(b, queue, vhost="%2F"):
    """Messages in a queue (ready + unacked), read over AMQP (the HTTP
    figures are sampled); None when the queue does not exist."""
    conn = pika.BlockingConnection(pika.URLParameters(b.url))
    try:
        ch = conn.channel()
        try:
            return ch.queue_declare(queue, passive=True).method.message_count
        except pika.exceptions.ChannelClosedByBroker:
            return None
    finally:
        if conn.is_open:
            conn.close()


def publish(b, queue, bodies, properties=None, declare=True):
    """Persistent messages, all in the queue when this returns (a confirm
    per message is slow on RabbitMQ: one transaction for the lot instead)."""
    conn = pika.BlockingConnection(pika.URLParameters(b.url))
    ch = conn.channel()
    if declare:
        ch.queue_declare(queue, durable=True)
    ch.tx_select()
    props = properties or pika.BasicProperties(delivery_mode=2)
    for body in bodies:
        ch.basic_publish("", queue, body, props)
    ch.tx_commit()
    conn.close()


def drain(b, queue, count=None, timeout=10):
    """Every message in the queue (acked), as (body, properties); with a
    count, waits up to timeout for that many (and for the queue to exist)."""
    conn = pika.BlockingConnection(pika.URLParameters(b.url))
    ch = conn.channel()
    out = []
    deadline = time.monotonic() + timeout
    while count is None or len(out) < count:
        try:
            method, props, body = ch.basic_get(queue, auto_ack=True)
        except pika.exceptions.ChannelClosedByBroker as exc:
            # the shovel or link that declares the queue may not have yet
            if exc.reply_code != 404 or time.monotonic() > deadline:
                raise
            ch = conn.channel()
            time.sleep(0.05)
            continue
        if method is None:
            if count is None or time.monotonic() > deadline:
                break
            time.sleep(0.05)
            continue
        out.append((body, props))
    conn.close()
    return out


def shovel_state(b, name, vhost="%2F"):
    status, body = call(b, "GET", f"/api/shovels/{vhost}/{name}")
    return body if status == 200 else None


@pytest.fixture(scope="session")
def broker_a(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("link-a") / "data").start()
    yield b
    b.stop()
    b.check_clean()


@pytest.fixture(scope="session")
def broker_b(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("link-b") / "data").start()
    yield b
    b.stop()
    b.check_clean()


class HTTPSink:
    """tests/links/http_sink.py in a process of its own (an HTTP peer, not
    a thread of the test process): every request it got, and what it
    answers next."""

    def __init__(self):
        import socket
        import subprocess
        import sys
        from tests.conftest import ROOT, free_port
        self.port = free_port()
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.links.http_sink", str(self.port)], cwd=ROOT)
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("the HTTP sink did not start")
                time.sleep(0.05)

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def _call(self, method, path, body=None):
        req = urllib.request.Request(self.url + path, method=method,
                                     data=json.dumps(body).encode() if body is not None else None,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read())

    @property
    def requests(self):
        import base64
        out = self._call("GET", "/_sink/requests")
        for r in out:
            r["body"] = base64.b64decode(r["body"])
        return out

    def ok_requests(self):
        return [r for r in self.requests if r["status"] == 200]

    def fail_next(self, n, status=500):
        self._call("POST", "/_sink/settings", {"failures": n, "fail_with": status})

    def set_delay(self, seconds):
        self._call("POST", "/_sink/settings", {"delay": seconds})

    def close(self):
        self.proc.terminate()
        self.proc.wait(10)


@pytest.fixture
def http_sink():
    sink = HTTPSink()
    yield sink
    sink.close()


@pytest.fixture(scope="session")
def rabbitmq(tmp_path_factory):
    """RabbitMQ 3.10 with its shovel and federation plugins, once per session."""
    import os
    from tests.links.rabbitmq import RabbitMQ, missing
    problem = missing()
    if problem:
        if os.environ.get("CI") == "true":
            pytest.fail(problem)
        pytest.skip(problem)
    r = RabbitMQ(tmp_path_factory.mktemp("rabbitmq")).start()
    yield r
    r.stop()
