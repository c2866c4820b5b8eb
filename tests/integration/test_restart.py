"""Durable state across a clean restart and across SIGKILL."""
import pika
import pytest

from tests.conftest import unique


def connect(b):
    return pika.BlockingConnection(pika.URLParameters(b.url))


def fill(b, q, ex, n):
    c = connect(b)
    ch = c.channel()
    ch.exchange_declare(ex, "topic", durable=True)
    ch.queue_declare(q, durable=True)
    ch.queue_bind(q, ex, "k.#")
    ch.queue_declare(q + "-transient", durable=False)
    ch.confirm_delivery()
    for i in range(n):
        ch.basic_publish(ex, "k.x", b"%06d" % i, pika.BasicProperties(delivery_mode=2, headers={"i": i}))
    # ack the first tenth
    for _ in range(n // 10):
        m, p, body = ch.basic_get(q)
        ch.basic_ack(m.delivery_tag)
    c.close()


def check(b, q, ex, n):
    c = connect(b)
    ch = c.channel()
    assert ch.queue_declare(q, passive=True).method.message_count == n - n // 10
    ch.basic_publish(ex, "k.y", b"after", pika.BasicProperties(delivery_mode=2))   # binding survived
    bodies = []
    while True:
        m, p, body = ch.basic_get(q, auto_ack=True)
        if m is None:
            break
        bodies.append(body)
        if body != b"after":
            assert p.headers == {"i": int(body)} and p.delivery_mode == 2
    assert bodies == [b"%06d" % i for i in range(n // 10, n)] + [b"after"]
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as e:
        ch.queue_declare(q + "-transient", passive=True)
    assert e.value.args[0] == 404
    c.close()


@pytest.mark.parametrize("how", ["graceful", "sigkill"])
def test_durable_messages_survive(fresh_broker, how):
    q, ex = unique(), unique()
    n = 30000     # several segments' worth with headers
    fill(fresh_broker, q, ex, n)
    if how == "graceful":
        fresh_broker.restart()
    else:
        fresh_broker.kill()
        fresh_broker.start()
    check(fresh_broker, q, ex, n)


def test_deleted_things_stay_deleted(fresh_broker):
    c = connect(fresh_broker)
    ch = c.channel()
    ch.exchange_declare("gone-ex", "direct", durable=True)
    ch.queue_declare("gone-q", durable=True)
    ch.queue_declare("kept-q", durable=True)
    ch.queue_bind("kept-q", "gone-ex", "k")
    ch.exchange_delete("gone-ex")
    ch.queue_delete("gone-q")
    c.close()
    fresh_broker.restart()
    c = connect(fresh_broker)
    ch = c.channel()
    ch.queue_declare("kept-q", passive=True)
    for kind, name in (("exchange", "gone-ex"), ("queue", "gone-q")):
        with pytest.raises(pika.exceptions.ChannelClosedByBroker):
            ch = c.channel()
            if kind == "exchange":
                ch.exchange_declare(name, passive=True)
            else:
                ch.queue_declare(name, passive=True)
    c.close()


def test_second_broker_on_same_data_dir_refused(fresh_broker):
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "lavinmq", "-D", fresh_broker.data_dir, "-p", "0", "--http-port", "0",
                        "--metrics-http-port", "0", "--amqps-port", "0", "--https-port", "0",
                        "--mqtt-port", "0", "--mqtts-port", "0"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    assert "(--data-dir / [main] data_dir) is locked by another lavinmq process" in r.stderr


@pytest.mark.parametrize("how", ["graceful", "sigkill"])
def test_queue_deleted_and_declared_again_keeps_confirmed_messages(fresh_broker, how):
    """Issue 40's reproduction: boot replayed declare / delete / declare, and
    the replayed delete removed the directory of the live second queue."""
    c = connect(fresh_broker)
    ch = c.channel()
    ch.exchange_declare("lx", "direct", durable=True)
    ch.queue_declare("q", durable=True)
    ch.queue_bind("q", "lx", "old")
    ch.basic_publish("", "q", b"gone", pika.BasicProperties(delivery_mode=2))
    ch.queue_delete("q")
    ch.queue_declare("q", durable=True)
    ch.queue_bind("q", "lx", "new")
    # a persistent exchange and a delayed one, deleted and declared again too
    ch.exchange_declare("px", "fanout", durable=True, arguments={"x-persist-messages": 10})
    ch.exchange_delete("px")
    ch.exchange_declare("px", "fanout", durable=True, arguments={"x-persist-messages": 10})
    ch.exchange_declare("dx", "x-delayed-message", durable=True, arguments={"x-delayed-type": "direct"})
    ch.exchange_delete("dx")
    ch.exchange_declare("dx", "x-delayed-message", durable=True, arguments={"x-delayed-type": "direct"})
    ch.queue_bind("q", "dx", "d")
    ch.confirm_delivery()
    for i in range(3):
        ch.basic_publish("", "q", b"m%d" % i, pika.BasicProperties(delivery_mode=2))
    ch.basic_publish("px", "", b"kept", pika.BasicProperties(delivery_mode=2))
    ch.basic_publish("dx", "d", b"later", pika.BasicProperties(delivery_mode=2, headers={"x-delay": 60000}))
    c.close()
    if how == "graceful":
        fresh_broker.restart()
    else:
        fresh_broker.kill()
        fresh_broker.start()
    c = connect(fresh_broker)
    ch = c.channel()
    got = []
    while (m := ch.basic_get("q", auto_ack=True))[0] is not None:
        got.append(m[2])
    assert got == [b"m0", b"m1", b"m2"]
    ch.basic_publish("lx", "old", b"x")
    ch.basic_publish("lx", "new", b"y")
    assert ch.basic_get("q", auto_ack=True)[2] == b"y"
    assert ch.basic_get("q", auto_ack=True)[0] is None     # the first queue's binding went with it
    ch.queue_declare("r", durable=True)
    ch.queue_bind("r", "px", "", arguments={"x-head": 1})    # the persistent exchange kept its message
    assert ch.basic_get("r", auto_ack=True)[2] == b"kept"
    import urllib.request, base64, json
    req = urllib.request.Request(fresh_broker.http_url + "/api/queues/%2F/amq.delayed.dx",
                                 headers={"Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()})
    shape = json.loads(urllib.request.urlopen(req).read())
    assert shape["messages"] == 1, shape        # the delayed message waits on
    c.close()


@pytest.mark.parametrize("how", ["graceful", "sigkill"])
@pytest.mark.parametrize("args", [{}, {"x-max-priority": 5}, {"x-queue-type": "quorum"}],
                         ids=["classic", "priority", "quorum"])
def test_redelivered_and_delivery_count_survive_a_restart(fresh_broker, how, args):
    """RabbitMQ keeps both; a poison message's delivery limit must not start
    again at 0 after each restart (LavinMQ #1911)."""
    c = connect(fresh_broker)
    ch = c.channel()
    ch.exchange_declare("dlx", "fanout", durable=True)
    ch.queue_declare("dead", durable=True)
    ch.queue_bind("dead", "dlx", "")
    ch.queue_declare("lim", durable=True, arguments={**args, "x-delivery-limit": 3, "x-dead-letter-exchange": "dlx"})
    ch.queue_declare("plain", durable=True, arguments=args)
    ch.confirm_delivery()
    for q in ("lim", "plain"):
        for body in (b"a", b"b", b"c"):
            ch.basic_publish("", q, body, pika.BasicProperties(delivery_mode=2))
    # "a" of each queue delivered twice and requeued; "b" delivered and acked
    for q in ("lim", "plain"):
        for _ in range(2):
            m = ch.basic_get(q)
            assert m[2] == b"a"
            ch.basic_nack(m[0].delivery_tag, requeue=True)
        m = ch.basic_get(q)
        assert m[2] == b"a"
        m2 = ch.basic_get(q)
        assert m2[2] == b"b"
        ch.basic_ack(m2[0].delivery_tag)
        ch.basic_nack(m[0].delivery_tag, requeue=True)     # three deliveries of "a" now
    c.close()
    if how == "graceful":
        fresh_broker.restart()
    else:
        fresh_broker.kill()
        fresh_broker.start()
    c = connect(fresh_broker)
    ch = c.channel()
    m = ch.basic_get("plain", auto_ack=True)
    assert (m[2], m[0].redelivered) == (b"a", True)
    m = ch.basic_get("plain", auto_ack=True)
    assert (m[2], m[0].redelivered) == (b"c", False)
    m = ch.basic_get("lim")
    assert (m[2], m[0].redelivered, m[1].headers) == (b"a", True, {"x-delivery-count": 3})
    ch.basic_nack(m[0].delivery_tag, requeue=True)      # the fourth: past the limit, dead-lettered
    m = ch.basic_get("lim", auto_ack=True)
    assert (m[2], m[0].redelivered) == (b"c", False)
    assert ch.basic_get("lim")[0] is None
    m = ch.basic_get("dead", auto_ack=True)
    assert m[2] == b"a" and m[1].headers["x-death"][0]["reason"] == "delivery_limit"
    c.close()
