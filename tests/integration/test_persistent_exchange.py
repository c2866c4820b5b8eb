"""Persistent exchanges, as AvalancheMQ had them: x-persist-messages and
x-persist-ms keep what an exchange of any type receives, bound or not;
a new binding with x-head, x-tail or x-from gets stored messages first,
each with its x-offset header, then new ones in order. The stored messages
survive a restart and a kill -9; the API shows them; bad arguments get 406."""
import io
import os
from decimal import Decimal
import threading
import time

import pika
import pytest

from lavinmq import ctl
from lavinmq._core.segment import name_digest
from tests.conftest import unique
from tests.integration.test_http_api import call
from tests.security.test_disk_full import fill, small_disk, start_broker  # noqa: F401 (a fixture)


@pytest.fixture
def own(broker):
    if broker.external:
        pytest.skip("persistent exchanges are AvalancheMQ's, not RabbitMQ's")
    return broker


def connect(b):
    return pika.BlockingConnection(pika.URLParameters(b.url))


def drain(ch, q):
    """[(body, headers)] of everything in q, in order."""
    out = []
    while True:
        m, p, body = ch.basic_get(q, auto_ack=True)
        if m is None:
            return out
        out.append((body, p.headers or {}))


def bodies(ch, q):
    return [b for b, _ in drain(ch, q)]


def persistent(ch, type_="topic", **keep):
    ex = unique("px")
    args = {"x-" + k.replace("_", "-"): v for k, v in keep.items()}
    ch.exchange_declare(ex, type_, arguments=args, auto_delete=False)
    return ex


def new_queue(ch):
    return ch.queue_declare("", exclusive=True).method.queue


def publish(ch, ex, n, rk="k", start=1, props=None):
    for i in range(start, start + n):
        ch.basic_publish(ex, rk, b"m%d" % i, props)


def test_kept_without_bindings_and_x_persist_messages_keeps_the_newest(own):
    c = connect(own)
    ch = c.channel()
    ex = persistent(ch, persist_messages=3)
    publish(ch, ex, 5)                              # nothing bound: kept all the same
    q = new_queue(ch)
    ch.queue_bind(q, ex, "#", arguments={"x-from": 0})
    got = drain(ch, q)
    assert [b for b, _ in got] == [b"m3", b"m4", b"m5"]
    assert [h["x-offset"] for _, h in got] == [3, 4, 5]
    # the queue bound with x-from routes new messages too, with their offset
    ch.basic_publish(ex, "k", b"m6")
    assert drain(ch, q) == [(b"m6", {"x-offset": 6})]
    status, shape = call(own, "GET", f"/api/exchanges/%2F/{ex}")
    assert status == 200 and shape["arguments"] == {"x-persist-messages": 3}
    kept = shape["persist"]
    assert (kept["messages"], kept["first_offset"], kept["last_offset"], kept["max_messages"]) == (3, 4, 6, 3)
    assert kept["bytes"] > 3 * len(b"m4")
    # a mandatory publish no binding routes is kept, and still returned
    ch.queue_unbind(q, ex, "#", arguments={"x-from": 0})
    ch.confirm_delivery()
    with pytest.raises(pika.exceptions.UnroutableError):
        ch.basic_publish(ex, "k", b"m7", mandatory=True)
    assert call(own, "GET", f"/api/exchanges/%2F/{ex}")[1]["persist"]["last_offset"] == 7
    ch.exchange_delete(ex)
    c.close()


def test_x_head_the_oldest_and_negative_all_but_the_newest(own):
    c = connect(own)
    ch = c.channel()
    ex = persistent(ch, persist_messages=10)
    publish(ch, ex, 10)
    cases = {3: [1, 2, 3], -3: [1, 2, 3, 4, 5, 6, 7], 20: list(range(1, 11)), 0: [], -10: []}
    for n, want in cases.items():
        q = new_queue(ch)
        ch.queue_bind(q, ex, "#", arguments={"x-head": n})
        assert bodies(ch, q) == [b"m%d" % i for i in want], n
    ch.exchange_delete(ex)
    c.close()


def test_x_tail_the_newest_and_negative_all_but_the_oldest(own):
    c = connect(own)
    ch = c.channel()
    ex = persistent(ch, "direct", persist_messages=10)
    publish(ch, ex, 10)
    cases = {3: [8, 9, 10], -3: [4, 5, 6, 7, 8, 9, 10], 11: list(range(1, 11)), 0: []}
    for n, want in cases.items():
        q = new_queue(ch)
        ch.queue_bind(q, ex, "k", arguments={"x-tail": n})
        assert bodies(ch, q) == [b"m%d" % i for i in want], n
    ch.exchange_delete(ex)
    c.close()


def test_x_from_an_offset_and_zero_or_unknown_is_everything(own):
    c = connect(own)
    ch = c.channel()
    ex = persistent(ch, persist_messages=4)
    publish(ch, ex, 6)                              # offsets 3..6 are held
    for offset, want in ((5, [5, 6]), (3, [3, 4, 5, 6]), (0, [3, 4, 5, 6]), (2, [3, 4, 5, 6]),
                         (99, [3, 4, 5, 6])):
        q = new_queue(ch)
        ch.queue_bind(q, ex, "#", arguments={"x-from": offset})
        got = drain(ch, q)
        assert [h["x-offset"] for _, h in got] == want, offset
        assert [b for b, _ in got] == [b"m%d" % i for i in want]
    ch.exchange_delete(ex)
    c.close()


def test_x_persist_ms_keeps_for_so_long(own):
    c = connect(own)
    ch = c.channel()
    ex = persistent(ch, persist_ms=300)
    publish(ch, ex, 2)
    time.sleep(0.45)
    publish(ch, ex, 1, start=3)
    q = new_queue(ch)
    ch.queue_bind(q, ex, "#", arguments={"x-from": 0})
    assert bodies(ch, q) == [b"m3"]
    shape = call(own, "GET", f"/api/exchanges/%2F/{ex}")[1]["persist"]
    assert (shape["messages"], shape["max_ms"], shape["max_messages"]) == (1, 300, None)
    # both limits: the stricter wins
    ex2 = persistent(ch, persist_ms=60000, persist_messages=2)
    publish(ch, ex2, 3)
    q2 = new_queue(ch)
    ch.queue_bind(q2, ex2, "#", arguments={"x-tail": 5})
    assert bodies(ch, q2) == [b"m2", b"m3"]
    ch.exchange_delete(ex)
    ch.exchange_delete(ex2)
    c.close()


def test_a_binding_without_them_gets_only_new_messages(own):
    c = connect(own)
    ch = c.channel()
    ex = persistent(ch, persist_messages=100)
    publish(ch, ex, 3)
    q = new_queue(ch)
    ch.queue_bind(q, ex, "#")
    assert bodies(ch, q) == []
    publish(ch, ex, 1, start=4)
    got = drain(ch, q)
    assert got == [(b"m4", {"x-offset": 4})]
    # a plain exchange: nothing kept, no x-offset
    plain = unique("plain")
    ch.exchange_declare(plain, "topic", auto_delete=True)
    q2 = new_queue(ch)
    ch.queue_bind(q2, plain, "#", arguments={"x-from": 0})   # means nothing here
    ch.basic_publish(plain, "k", b"p", pika.BasicProperties(headers={"a": 1}))
    assert drain(ch, q2) == [(b"p", {"a": 1})]
    assert "persist" not in call(own, "GET", f"/api/exchanges/%2F/{plain}")[1]
    ch.exchange_delete(ex)
    c.close()


def test_every_exchange_type_replays_what_the_binding_matches(own):
    c = connect(own)
    ch = c.channel()
    hdr = pika.BasicProperties(headers={"color": "red", "x-offset": 12345})   # a stale x-offset is replaced
    # direct: only the binding's key
    ex = persistent(ch, "direct", persist_messages=10)
    publish(ch, ex, 2, rk="a")
    publish(ch, ex, 2, rk="b", start=3)
    q = new_queue(ch)
    ch.queue_bind(q, ex, "b", arguments={"x-from": 0})
    assert bodies(ch, q) == [b"m3", b"m4"]
    # topic with a CC header: the CC keys route as in a publish
    ex = persistent(ch, "topic", persist_messages=10)
    ch.basic_publish(ex, "x.y", b"cc", pika.BasicProperties(headers={"CC": ["a.b"]}))
    ch.basic_publish(ex, "x.y", b"no")
    q = new_queue(ch)
    ch.queue_bind(q, ex, "a.*", arguments={"x-head": 10})
    assert bodies(ch, q) == [b"cc"]
    # fanout: everything
    ex = persistent(ch, "fanout", persist_messages=10)
    publish(ch, ex, 2)
    q = new_queue(ch)
    ch.queue_bind(q, ex, "", arguments={"x-tail": 10})
    assert bodies(ch, q) == [b"m1", b"m2"]
    # headers: the binding's headers
    ex = persistent(ch, "headers", persist_messages=10)
    ch.basic_publish(ex, "", b"red", hdr)
    ch.basic_publish(ex, "", b"blue", pika.BasicProperties(headers={"color": "blue"}))
    q = new_queue(ch)
    ch.queue_bind(q, ex, "", arguments={"x-match": "all", "color": "red", "x-from": 0})
    got = drain(ch, q)
    assert got == [(b"red", {"color": "red", "x-offset": 1})]
    # consistent hash: the share the new binding gets of every stored message
    ex = persistent(ch, "x-consistent-hash", persist_messages=1000)
    for i in range(200):
        ch.basic_publish(ex, f"key-{i}", b"%d" % i)
    q1, q2 = new_queue(ch), new_queue(ch)
    # weight 50: fifty points each on the ring, so the split does not hang
    # on where two random queue names happen to hash (weight 1 gave 176/24)
    ch.queue_bind(q1, ex, "50", arguments={"x-from": 0})
    first = bodies(ch, q1)
    assert len(first) == 200                        # alone: all of them
    ch.queue_bind(q2, ex, "50", arguments={"x-from": 0})
    second = bodies(ch, q2)
    assert 40 < len(second) < 160                   # with q1: its share
    ch.basic_publish(ex, "one-more", b"new")
    assert len(bodies(ch, q1)) + len(bodies(ch, q2)) == 1
    c.close()


def test_the_readme_example_bind_after_the_fact_and_replay_from_a_logged_offset(own):
    c = connect(own)
    ch = c.channel()
    ex = unique("orders")
    ch.exchange_declare(ex, "topic", durable=True, arguments={"x-persist-messages": 100000})
    # a publisher writes for a while; nobody has bound a queue yet
    publish(ch, ex, 5, rk="order.new")
    # bind one after the fact: everything stored, then new messages
    q = unique("orders-q")
    ch.queue_declare(q, exclusive=True)
    ch.queue_bind(q, ex, "order.*", arguments={"x-from": 0})
    publish(ch, ex, 2, rk="order.new", start=6)
    logged = {}
    processed = []
    for _ in range(7):
        m, p, body = ch.basic_get(q)
        logged[body] = p.headers["x-offset"]        # the consumer logs each offset
        if body == b"m4":
            ch.basic_nack(m.delivery_tag, requeue=False)    # dropped by mistake
        else:
            ch.basic_ack(m.delivery_tag)
            processed.append(body)
    assert processed == [b"m1", b"m2", b"m3", b"m5", b"m6", b"m7"]
    # replay from the dropped message's offset into a new queue
    q2 = new_queue(ch)
    ch.queue_bind(q2, ex, "order.*", arguments={"x-from": logged[b"m4"]})
    assert bodies(ch, q2) == [b"m4", b"m5", b"m6", b"m7"]
    ch.exchange_delete(ex)
    c.close()


def test_a_long_replay_comes_in_batches_then_live_messages_in_order(own):
    n = 30000                                       # several batches of 4096
    c = connect(own)
    ch = c.channel()
    ex = persistent(ch, "fanout", persist_messages=1000000)
    for i in range(n):
        ch.basic_publish(ex, "", b"%d" % i)
    # another connection publishes while the queue is being bound
    stop, during = threading.Event(), []

    def keep_publishing():
        c2 = connect(own)
        ch2 = c2.channel()
        i = 0
        while not stop.is_set():
            ch2.basic_publish(ex, "", b"late-%d" % i)
            i += 1
        during.append(i)
        c2.close()

    t = threading.Thread(target=keep_publishing)
    t.start()
    time.sleep(0.3)
    q = new_queue(ch)
    start = time.monotonic()
    ch.queue_bind(q, ex, "", arguments={"x-head": n})
    took = time.monotonic() - start
    stop.set()
    t.join()
    late = during[0]
    got = ch.queue_declare(q, passive=True).method.message_count
    offsets = []

    def on_message(_ch, m, p, body):
        offsets.append(p.headers["x-offset"])
        if len(offsets) == got:
            ch.stop_consuming()

    ch.basic_qos(prefetch_count=1000)
    ch.basic_consume(q, on_message, auto_ack=True)
    ch.start_consuming()
    # the selection (the first n), then every message published after the
    # bind began, in offset order: nothing lost, nothing twice
    assert len(offsets) == got
    assert offsets[:n] == list(range(1, n + 1))
    tail = offsets[n:]
    assert tail, "the other publisher got nothing in while the queue was bound"
    assert tail == list(range(tail[0], n + late + 1))
    # the replay went on in batches, the loop serving the other publisher
    # between them
    assert f"replaying stored messages 1..{n}" in own.log_text(), took
    c.close()


def test_dead_letters_and_api_publishes_are_kept_too(own):
    c = connect(own)
    ch = c.channel()
    ex = persistent(ch, "fanout", persist_messages=10)
    dlq = unique("dl")
    ch.queue_declare(dlq, exclusive=True, arguments={"x-dead-letter-exchange": ex, "x-message-ttl": 1})
    ch.basic_publish("", dlq, b"expired")
    status, body = call(own, "POST", f"/api/exchanges/%2F/{ex}/publish",
                        {"routing_key": "", "payload": "by-api", "payload_encoding": "string", "properties": {}})
    assert status == 200 and body == {"routed": False}
    deadline = time.monotonic() + 5
    while call(own, "GET", f"/api/exchanges/%2F/{ex}")[1]["persist"]["messages"] < 2:
        assert time.monotonic() < deadline
        ch.queue_declare(dlq, passive=True)         # expiry runs as the queue is looked at
        time.sleep(0.05)
    q = new_queue(ch)
    ch.queue_bind(q, ex, "", arguments={"x-from": 0})
    got = drain(ch, q)
    assert sorted(b for b, _ in got) == [b"by-api", b"expired"]
    assert sorted(h["x-offset"] for _, h in got) == [1, 2]
    ch.exchange_delete(ex)
    c.close()


def test_bad_arguments_are_refused_with_406(own):
    c = connect(own)
    for args in ({"x-persist-messages": "ten"}, {"x-persist-messages": -1}, {"x-persist-ms": Decimal("1.5")},
                 {"x-persist-ms": True}):
        ch = c.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as e:
            ch.exchange_declare(unique("bad"), "topic", arguments=args)
        assert e.value.reply_code == 406, args
    ch = c.channel()
    ex = persistent(ch, persist_messages=5)
    for args in ({"x-head": "3"}, {"x-tail": Decimal("1.5")}, {"x-from": -1}, {"x-head": 1, "x-tail": 1}):
        ch = c.channel()
        q = new_queue(ch)
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as e:
            ch.queue_bind(q, ex, "#", arguments=args)
        assert e.value.reply_code == 406, args
    # replay into an exchange is not done: refused, and said so
    ch = c.channel()
    dest = unique("dest")
    ch.exchange_declare(dest, "fanout", auto_delete=True)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as e:
        ch.exchange_bind(dest, ex, "#", arguments={"x-from": 0})
    assert e.value.reply_code == 406 and "queues only" in e.value.reply_text
    # without them an exchange-to-exchange binding works, and what passes
    # through a persistent exchange bound to another is kept by it
    ch = c.channel()
    inner = persistent(ch, "fanout", persist_messages=5)
    ch.exchange_bind(inner, ex, "#")
    ch.basic_publish(ex, "k", b"through")
    q = new_queue(ch)
    ch.queue_bind(q, inner, "", arguments={"x-from": 0})
    assert drain(ch, q) == [(b"through", {"x-offset": 1})]
    # an HTTP declare is checked the same way
    status, _ = call(own, "PUT", f"/api/exchanges/%2F/{unique('bad')}",
                     {"type": "topic", "arguments": {"x-persist-messages": "x"}})
    assert status == 400
    for name in (ex, inner):
        ch.exchange_delete(name)
    c.close()


def test_definitions_keep_the_arguments_and_delete_removes_the_store(own):
    c = connect(own)
    ch = c.channel()
    ex = unique("defs")
    ch.exchange_declare(ex, "direct", durable=True, arguments={"x-persist-messages": 7, "x-persist-ms": 86400000})
    q = unique("defs-q")
    ch.queue_declare(q, durable=True)
    ch.queue_bind(q, ex, "k", arguments={"x-tail": 2})
    _, exported = call(own, "GET", "/api/definitions")
    mine = [x for x in exported["exchanges"] if x["name"] == ex]
    assert mine[0]["arguments"] == {"x-persist-messages": 7, "x-persist-ms": 86400000}
    binding = [b for b in exported["bindings"] if b["source"] == ex]
    assert binding[0]["arguments"] == {"x-tail": 2}
    # lavinmqctl's flags, as avalanchemqctl's
    out = io.StringIO()
    made = unique("ctl")
    assert ctl.main(["-U", own.http_url, "create_exchange", "fanout", made, "--persist-messages", "9",
                     "--persist-ms", "1000"], out=out) == 0
    assert call(own, "GET", f"/api/exchanges/%2F/{made}")[1]["persist"]["max_messages"] == 9
    ch.exchange_delete(made)
    # imported again in a new vhost: a persistent exchange there
    vhost = unique("vh")
    assert call(own, "PUT", f"/api/vhosts/{vhost}")[0] in (201, 204)
    assert call(own, "PUT", f"/api/permissions/{vhost}/guest",
                {"configure": ".*", "write": ".*", "read": ".*"})[0] in (201, 204)
    doc = {"exchanges": [dict(mine[0], vhost=vhost)], "queues": [], "bindings": []}
    assert call(own, "POST", "/api/definitions", doc)[0] == 204
    shape = call(own, "GET", f"/api/exchanges/{vhost}/{ex}")[1]
    assert shape["persist"]["max_messages"] == 7 and shape["persist"]["max_ms"] == 86400000
    # the store is a directory of the vhost's, as a queue's, and goes with the exchange
    ch.basic_publish(ex, "k", b"x")
    store = os.path.join(own.data_dir, name_digest("/"), name_digest("amq.persistent." + ex))
    assert os.path.exists(os.path.join(store, "msgs.0000000001"))
    ch.exchange_delete(ex)
    assert not os.path.exists(store)
    ch.queue_delete(q)
    call(own, "DELETE", f"/api/vhosts/{vhost}")
    c.close()


def test_stored_messages_survive_a_restart_and_a_kill(fresh_broker):
    b = fresh_broker
    c = connect(b)
    ch = c.channel()
    ch.confirm_delivery()
    ex = unique("durable")
    ch.exchange_declare(ex, "topic", durable=True, arguments={"x-persist-messages": 1000})
    transient = unique("transient")
    ch.exchange_declare(transient, "topic", durable=False, arguments={"x-persist-messages": 1000})
    publish(ch, ex, 3, props=pika.BasicProperties(delivery_mode=2))
    publish(ch, transient, 1)
    c.close()
    b.restart()
    c = connect(b)
    ch = c.channel()
    q = new_queue(ch)
    ch.queue_bind(q, ex, "#", arguments={"x-from": 0})
    assert [(body, h["x-offset"]) for body, h in drain(ch, q)] == [(b"m1", 1), (b"m2", 2), (b"m3", 3)]
    ch.confirm_delivery()
    publish(ch, ex, 2, start=4, props=pika.BasicProperties(delivery_mode=2))   # confirmed: on disk
    b.kill()
    b.start()
    c = connect(b)
    ch = c.channel()
    q = new_queue(ch)
    ch.queue_bind(q, ex, "#", arguments={"x-tail": 2})
    assert [(body, h["x-offset"]) for body, h in drain(ch, q)] == [(b"m4", 4), (b"m5", 5)]
    ch.basic_publish(ex, "k", b"m6")                # offsets go on, never reused
    q2 = new_queue(ch)
    ch.queue_bind(q2, ex, "#", arguments={"x-from": 5})
    assert [h["x-offset"] for _, h in drain(ch, q2)] == [5, 6]
    # the transient one is gone with its messages, as transient exchanges are
    with pytest.raises(pika.exceptions.ChannelClosedByBroker):
        c.channel().exchange_declare(transient, passive=True)
    c.close()


def test_a_full_disk_nacks_what_the_exchange_cannot_keep(small_disk, tmp_path):
    b = start_broker(small_disk, tmp_path)
    ex = unique("full")
    body = os.urandom(60 * 1024)
    try:
        c = connect(b)
        ch = c.channel()
        ch.exchange_declare(ex, "fanout", durable=True, arguments={"x-persist-messages": 100000})
        ch.confirm_delivery()
        filler = fill(small_disk, 4 * 1024 * 1024)
        confirmed = 0
        for i in range(2000):              # nothing bound: only the exchange keeps them
            try:
                ch.basic_publish(ex, "", b"%06d" % i + body, pika.BasicProperties(delivery_mode=2))
            except pika.exceptions.NackError:
                break
            confirmed += 1
        else:
            pytest.fail("the disk never filled up")
        assert confirmed > 0
        c.close()
        b.kill()
        os.unlink(filler)
        b.start()
        c = connect(b)
        ch = c.channel()
        q = new_queue(ch)
        ch.queue_bind(q, ex, "", arguments={"x-from": 0})
        got = drain(ch, q)
        assert [m[:6] for m, _ in got] == [b"%06d" % i for i in range(confirmed)]
        assert [h["x-offset"] for _, h in got] == list(range(1, confirmed + 1))
        c.close()
    finally:
        if b.proc.poll() is None:
            b.kill()
