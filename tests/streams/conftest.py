"""Helpers for the stream tests: pika connections to the session broker (or
a fresh one), a stream declaration and a consumer that collects
(offset, body, properties) until it has what it waits for."""
import time

import pika
import pytest

STREAM = {"x-queue-type": "stream"}


@pytest.fixture
def conn(broker):
    c = pika.BlockingConnection(pika.URLParameters(broker.url))
    yield c
    if c.is_open:
        c.close()


@pytest.fixture
def ch(conn):
    return conn.channel()


def declare(ch, name, **args):
    ch.queue_declare(name, durable=True, arguments={**STREAM, **args})
    return name


def publish(ch, name, bodies, headers=None, confirm=True):
    if confirm and not ch._delivery_confirmation:
        ch.confirm_delivery()
    for b in bodies:
        ch.basic_publish("", name, b if isinstance(b, bytes) else b.encode(),
                         pika.BasicProperties(headers=headers(b) if callable(headers) else headers))


class Collector:
    """Consumes a stream on its own channel; every delivery is acked."""

    def __init__(self, conn, queue, prefetch=100, tag="", ack=True, **arguments):
        self.conn = conn
        self.ch = conn.channel()
        self.ch.basic_qos(prefetch_count=prefetch)
        self.got = []
        self.ack = ack
        self.tag = self.ch.basic_consume(queue, self.on_message, consumer_tag=tag or None,
                                         arguments=arguments or None)

    def on_message(self, ch, method, props, body):
        self.got.append(((props.headers or {}).get("x-stream-offset"), body, props, method))
        if self.ack:
            ch.basic_ack(method.delivery_tag)

    def wait(self, n, timeout=10):
        deadline = time.monotonic() + timeout
        while len(self.got) < n and time.monotonic() < deadline:
            self.conn.process_data_events(0.05)
        return self.got

    def settle(self, seconds=0.3):
        """Give the broker time to (not) deliver more."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.conn.process_data_events(0.05)
        return self.got

    @property
    def offsets(self):
        return [g[0] for g in self.got]

    @property
    def bodies(self):
        return [g[1] for g in self.got]

    def cancel(self):
        self.ch.basic_cancel(self.tag)
