"""Exchange features through pika against the real broker: alternate
exchanges (with mandatory), exchange-to-exchange loops, the consistent-hash
exchange, CC/BCC sender-selected distribution, headers matching, and a
client binding pathological topic patterns while others keep working."""
import datetime
import decimal
import random
import threading
import time

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker, UnroutableError

from tests.conftest import unique


@pytest.fixture
def conn(broker):
    c = pika.BlockingConnection(pika.URLParameters(broker.url))
    yield c
    if c.is_open:
        c.close()


_declared = []


@pytest.fixture
def ch(conn):
    c = conn.channel()
    c.confirm_delivery()
    yield c
    if conn.is_open:
        cleanup = conn.channel()
        while _declared:
            cleanup.queue_delete(_declared.pop())


def queue(ch, bind_to=None, routing_key="", arguments=None):
    # not exclusive: a passive declare (message counts) of one's own exclusive
    # queue is refused by the broker today (amqp/channel.py passes no owner)
    q = ch.queue_declare(unique("q")).method.queue
    _declared.append(q)
    if bind_to is not None:
        ch.queue_bind(q, bind_to, routing_key, arguments=arguments)
    return q


def drain(ch, q):
    """Bodies (and properties) of every message in q, by basic.get."""
    out = []
    while True:
        method, props, body = ch.basic_get(q, auto_ack=True)
        if method is None:
            return out
        out.append((body, props))


def bodies(ch, q):
    return [b for b, _ in drain(ch, q)]


# -- alternate exchange ---------------------------------------------------------------

def test_alternate_exchange_takes_unroutable_messages(ch):
    ae, main = unique("ae"), unique("main")
    ch.exchange_declare(ae, "fanout", auto_delete=True)
    ch.exchange_declare(main, "direct", auto_delete=True, arguments={"alternate-exchange": ae})
    routed, caught = queue(ch, main, "k"), queue(ch, ae)
    ch.basic_publish(main, "k", b"routed", mandatory=True)
    ch.basic_publish(main, "other", b"unroutable", mandatory=True)   # no basic.return: the AE took it
    assert bodies(ch, routed) == [b"routed"]
    assert bodies(ch, caught) == [b"unroutable"]


def test_alternate_exchange_that_cannot_route_returns_mandatory(ch):
    ae, main = unique("ae"), unique("main")
    ch.exchange_declare(ae, "direct", auto_delete=False)
    ch.exchange_declare(main, "topic", auto_delete=True, arguments={"x-alternate-exchange": ae})
    only_a = queue(ch, ae, "a")
    with pytest.raises(UnroutableError) as e:
        ch.basic_publish(main, "b", b"lost", mandatory=True)
    [returned] = e.value.messages
    assert (returned.method.reply_code, returned.method.exchange, returned.method.routing_key) == (312, main, "b")
    ch.basic_publish(main, "a", b"via ae", mandatory=True)
    assert bodies(ch, only_a) == [b"via ae"]
    ch.exchange_delete(ae)


def test_alternate_exchanges_chain_and_loop(ch):
    a, b, c = unique("a"), unique("b"), unique("c")
    ch.exchange_declare(a, "direct", auto_delete=False, arguments={"alternate-exchange": b})
    ch.exchange_declare(b, "direct", auto_delete=False, arguments={"alternate-exchange": c})
    ch.exchange_declare(c, "direct", auto_delete=False, arguments={"alternate-exchange": a})   # a loop
    end = queue(ch, c, "k")
    ch.basic_publish(a, "k", b"through two alternates", mandatory=True)
    assert bodies(ch, end) == [b"through two alternates"]
    with pytest.raises(UnroutableError):
        ch.basic_publish(a, "nothing", b"x", mandatory=True)
    for x in (a, b, c):
        ch.exchange_delete(x)


def test_alternate_of_an_exchange_bound_behind_another(ch):
    """As RabbitMQ: y's alternate gets what y could not route, even when
    the message reached a queue another way."""
    x, y, z = unique("x"), unique("y"), unique("z")
    ch.exchange_declare(z, "fanout", auto_delete=False)
    ch.exchange_declare(y, "direct", auto_delete=False, arguments={"alternate-exchange": z})
    ch.exchange_declare(x, "fanout", auto_delete=False)
    ch.exchange_bind(y, x, "")
    qz = queue(ch, z)
    ch.basic_publish(x, "k", b"1")
    q1 = queue(ch, x)
    ch.basic_publish(x, "k", b"2")
    assert bodies(ch, q1) == [b"2"]
    assert bodies(ch, qz) == [b"1", b"2"]
    for e in (x, y, z):
        ch.exchange_delete(e)


# -- exchange-to-exchange ------------------------------------------------------------------

def test_exchange_to_exchange_loops_deliver_once(ch):
    x1, x2, x3 = unique("x1"), unique("x2"), unique("x3")
    for x in (x1, x2, x3):
        ch.exchange_declare(x, "topic", auto_delete=False)
    ch.exchange_bind(x2, x1, "#")
    ch.exchange_bind(x3, x2, "a.*")
    ch.exchange_bind(x1, x3, "#")             # back to the start
    ch.exchange_bind(x2, x2, "#")             # and onto itself
    q = queue(ch, x3, "a.b")
    q_all = queue(ch, x2, "#")
    for x in (x1, x2, x3):
        ch.basic_publish(x, "a.b", x.encode())
    ch.basic_publish(x1, "c.d", b"only x2")
    assert sorted(bodies(ch, q)) == sorted([x1.encode(), x2.encode(), x3.encode()])
    assert sorted(bodies(ch, q_all)) == sorted([x1.encode(), x2.encode(), x3.encode(), b"only x2"])
    for x in (x1, x2, x3):
        ch.exchange_delete(x)


# -- consistent hash -----------------------------------------------------------------------

def test_consistent_hash_distribution_follows_weights(conn, ch):
    """Issue 12: within 5% of the weights over 100k random keys (jump; the
    ring, LavinMQ's default, has only `weight` points per queue)."""
    x = unique("chx")
    ch.exchange_declare(x, "x-consistent-hash", auto_delete=True, arguments={"x-algorithm": "jump"})
    weights = [1, 2, 3, 4]
    qs = [queue(ch, x, str(w)) for w in weights]
    rnd = random.Random(15)
    n = 100_000
    fast = conn.channel()           # no confirms: 100k publishes in a few seconds
    for _ in range(n):
        fast.basic_publish(x, rnd.randbytes(8).hex(), b"")
    deadline = time.monotonic() + 60
    while True:
        counts = [ch.queue_declare(q, passive=True).method.message_count for q in qs]
        if sum(counts) >= n or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert sum(counts) == n
    for c, w in zip(counts, weights):
        assert abs(c - n * w / 10) <= n * w / 10 * 0.05, counts


def test_consistent_hash_adding_a_binding_moves_only_its_share(ch):
    x = unique("chx")
    ch.exchange_declare(x, "x-consistent-hash", auto_delete=True, arguments={"x-algorithm": "jump"})
    qs = [queue(ch, x, "1") for _ in range(4)]
    keys = [f"order-{i}" for i in range(2000)]

    def placement():
        for k in keys:
            ch.basic_publish(x, k, k.encode())
        return {body.decode(): q for q in qs for body in bodies(ch, q)}

    before = placement()
    assert len(before) == len(keys)
    qs.append(queue(ch, x, "1"))
    after = placement()
    moved = [k for k in keys if after[k] != before[k]]
    assert {after[k] for k in moved} == {qs[-1]}
    assert 0.15 < len(moved) / len(keys) < 0.25


def test_consistent_hash_binding_key_must_be_a_weight(conn):
    ch = conn.channel()
    x = unique("chx")
    ch.exchange_declare(x, "x-consistent-hash", auto_delete=True)
    q = ch.queue_declare(unique("q"), exclusive=True).method.queue
    with pytest.raises(ChannelClosedByBroker) as e:
        ch.queue_bind(q, x, "heavy")
    assert e.value.reply_code == 406


def test_consistent_hash_on_header(conn):
    ch = conn.channel()
    ch.confirm_delivery()
    x = unique("chx")
    ch.exchange_declare(x, "x-consistent-hash", auto_delete=True, arguments={"hash-header": "tenant"})
    qs = [queue(ch, x, "1") for _ in range(3)]
    for tenant in ("acme", "globex", "initech"):
        for i in range(5):
            ch.basic_publish(x, f"rk{i}", tenant.encode(), pika.BasicProperties(headers={"tenant": tenant}))
    per_queue = [set(bodies(ch, q)) for q in qs]
    # every tenant's messages land together in one queue, whatever the routing key
    assert sorted(b for s in per_queue for b in s) == [b"acme", b"globex", b"initech"]
    with pytest.raises(ChannelClosedByBroker) as e:
        ch.basic_publish(x, "k", b"", pika.BasicProperties(headers={"tenant": 42}))
    assert e.value.reply_code == 406


def test_consistent_hash_exchange_survives_restart(fresh_broker):
    c = pika.BlockingConnection(pika.URLParameters(fresh_broker.url))
    ch = c.channel()
    ch.exchange_declare("chx", "x-consistent-hash", durable=True, arguments={"x-algorithm": "jump"})
    for i in range(3):
        ch.queue_declare(f"q{i}", durable=True)
        ch.queue_bind(f"q{i}", "chx", str(i + 1))
    c.close()
    fresh_broker.restart()
    c = pika.BlockingConnection(pika.URLParameters(fresh_broker.url))
    ch = c.channel()
    ch.confirm_delivery()
    for i in range(600):
        ch.basic_publish("chx", f"k{i}", b"")
    counts = [ch.queue_declare(f"q{i}", passive=True).method.message_count for i in range(3)]
    assert sum(counts) == 600 and counts[0] < counts[1] < counts[2]
    c.close()


# -- CC / BCC ----------------------------------------------------------------------------------

def test_cc_and_bcc_deliver_to_more_keys_and_bcc_is_removed(ch):
    x = unique("d")
    ch.exchange_declare(x, "direct", auto_delete=True)
    qa, qb, qc, qd = (queue(ch, x, k) for k in ("a", "b", "c", "d"))
    headers = {"CC": ["b"], "BCC": ["c", "b"], "keep": "me"}
    ch.basic_publish(x, "a", b"hello", pika.BasicProperties(headers=headers, message_id="m1"))
    for q in (qa, qb, qc):
        [(body, props)] = drain(ch, q)
        assert body == b"hello"
        assert props.headers == {"CC": ["b"], "keep": "me"}
        assert props.message_id == "m1"
    assert drain(ch, qd) == []


def test_bcc_only_and_default_exchange(ch):
    qa, qb = queue(ch), queue(ch)
    ch.basic_publish("", qa, b"to both", pika.BasicProperties(headers={"BCC": [qb]}))
    for q in (qa, qb):
        [(body, props)] = drain(ch, q)
        assert body == b"to both" and props.headers == {}


def test_cc_through_topic_and_mandatory(ch):
    x = unique("t")
    ch.exchange_declare(x, "topic", auto_delete=True)
    q = queue(ch, x, "eu.#")
    # the routing key matches nothing, a CC key does: routed, so no return
    ch.basic_publish(x, "us.orders", b"cc", pika.BasicProperties(headers={"CC": ["eu.orders"]}), mandatory=True)
    assert bodies(ch, q) == [b"cc"]
    with pytest.raises(UnroutableError):
        ch.basic_publish(x, "us.orders", b"", pika.BasicProperties(headers={"CC": ["asia"]}), mandatory=True)


def test_cc_header_that_is_not_an_array_closes_the_channel(conn):
    ch = conn.channel()
    ch.confirm_delivery()
    with pytest.raises(ChannelClosedByBroker) as e:
        ch.basic_publish("amq.direct", "k", b"", pika.BasicProperties(headers={"CC": "k2"}))
    assert e.value.reply_code == 406


# -- headers ------------------------------------------------------------------------------------

def test_headers_exchange_typed_matching(ch):
    x = unique("h")
    ch.exchange_declare(x, "headers", auto_delete=True)
    q_all = queue(ch, x, "", {"x-match": "all", "format": "pdf", "pages": 3})
    q_any = queue(ch, x, "", {"x-match": "any", "format": "zip", "lang": "sv"})
    q_x = queue(ch, x, "", {"x-match": "any-with-x", "x-tenant": "acme"})
    q_present = queue(ch, x, "", {"x-match": "all", "urgent": None})
    cases = [
        ({"format": "pdf", "pages": 3, "lang": "sv"}, {q_all, q_any}),
        ({"format": "pdf", "pages": 3, "extra": True}, {q_all}),
        ({"format": "pdf", "pages": decimal.Decimal(3)}, set()),     # a decimal is not an integer
        ({"format": "pdf", "pages": True}, set()),
        ({"format": "pdf", "pages": "3"}, set()),
        ({"format": "zip"}, {q_any}),
        ({"x-tenant": "acme", "urgent": False}, {q_x, q_present}),
        ({}, set()),
    ]
    for i, (headers, _) in enumerate(cases):
        ch.basic_publish(x, "", str(i).encode(), pika.BasicProperties(headers=headers))
    got = {q: set(bodies(ch, q)) for q in (q_all, q_any, q_x, q_present)}
    for i, (_, want) in enumerate(cases):
        assert {q for q, bs in got.items() if str(i).encode() in bs} == want, cases[i]


def test_headers_bad_x_match_refused(conn):
    ch = conn.channel()
    q = ch.queue_declare(unique("q"), exclusive=True).method.queue
    with pytest.raises(ChannelClosedByBroker) as e:
        ch.queue_bind(q, "amq.headers", "", arguments={"x-match": "most"})
    assert e.value.reply_code == 406


# What RabbitMQ 3.10 (Debian's rabbitmq-server) delivers for this matrix of
# bindings and header values, recorded by running the same publishes there.
HEADERS_MATRIX_RABBITMQ = {
    "hd-0-all": [0, 17],
    "hd-0-any": [0, 17],
    "hd-1-all": [1],
    "hd-1-any": [1],
    "hd-2-all": [2],
    "hd-2-any": [2],
    "hd-3-all": [3],
    "hd-3-any": [3],
    "hd-4-all": [4],
    "hd-4-any": [4],
    "hd-5-all": [5, 6],
    "hd-5-any": [5, 6],
    "hd-6-all": [5, 6],
    "hd-6-any": [5, 6],
    "hd-7-all": [7, 8],
    "hd-7-any": [7, 8],
    "hd-8-all": [7, 8],
    "hd-8-any": [7, 8],
    "hd-9-all": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 17, 19],
    "hd-9-any": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 17, 19],
    "hd-10-all": [10],
    "hd-10-any": [10],
    "hd-11-all": [11],
    "hd-11-any": [11],
    "hd-12-all": [12, 13],
    "hd-12-any": [12, 13],
    "hd-13-all": [12, 13],
    "hd-13-any": [12, 13],
    "hd-14-all": [14],
    "hd-14-any": [14],
    "hd-empty-all": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20],
    "hd-empty-any": [],
    "hd-two-all": [17],
    "hd-two-any": [16, 17],
    "hd-wx-all": [18, 19],
    "hd-wx-any": [18, 19],
    "hd-x-all": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20],
}


def test_headers_value_matrix_as_rabbitmq(ch):
    x = unique("h")
    ch.exchange_declare(x, "headers", auto_delete=True)
    values = [1, 2 ** 40, -1, True, False, "1", b"1", decimal.Decimal("1"), decimal.Decimal("1.0"), None,
              {"a": 1}, [1, "x"], datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc), 1577836800, ""]
    bindings = []
    for i, v in enumerate(values):
        for mode in ("all", "any"):
            bindings.append(({"x-match": mode, "k": v}, f"hd-{i}-{mode}"))
    bindings += [({"x-match": "all"}, "hd-empty-all"), ({"x-match": "any"}, "hd-empty-any"),
                 ({"x-match": "all", "k": 1, "j": None}, "hd-two-all"),
                 ({"x-match": "any", "k": 2, "j": None}, "hd-two-any"),
                 ({"x-match": "all-with-x", "x-k": 1}, "hd-wx-all"),
                 ({"x-match": "any-with-x", "x-k": 1, "k": 9}, "hd-wx-any"),
                 ({"x-match": "all", "x-k": 1}, "hd-x-all")]
    queues = {name: queue(ch, x, "", args) for args, name in bindings}
    msgs = [{"k": v} for v in values] + [{}, {"j": 0}, {"k": 1, "j": "x"}, {"x-k": 1}, {"x-k": 1, "k": 9}, None]
    for i, h in enumerate(msgs):
        ch.basic_publish(x, "", str(i).encode(), pika.BasicProperties(headers=h))
    got = {name: sorted(int(b) for b in bodies(ch, q)) for name, q in queues.items()}
    assert got == HEADERS_MATRIX_RABBITMQ


# -- a client with pathological topic bindings does not stall the others ---------------------

def test_pathological_topic_patterns_keep_the_loop_responsive(broker, ch):
    x = unique("t")
    ch.exchange_declare(x, "topic", auto_delete=True)
    q = queue(ch)
    for i in range(50):
        ch.queue_bind(q, x, ".".join(["#"] * 127))
        ch.queue_bind(q, x, ".".join(["#", "*"] * 63) + f".{i}")
    stop = threading.Event()
    published = []

    def flood():
        c = pika.BlockingConnection(pika.URLParameters(broker.url))
        p = c.channel()
        n = 0
        while not stop.is_set():
            words = ".".join(f"w{n}_{k}" for k in range(60))
            p.basic_publish(x, words[:255], b"")
            n += 1
        published.append(n)
        c.close()

    t = threading.Thread(target=flood)
    t.start()
    try:
        time.sleep(0.5)
        other = pika.BlockingConnection(pika.URLParameters(broker.url))
        och = other.channel()
        worst = 0.0
        for _ in range(30):
            start = time.monotonic()
            och.queue_declare(unique("probe"), exclusive=True)
            worst = max(worst, time.monotonic() - start)
        other.close()
    finally:
        stop.set()
        t.join(30)
    assert published and published[0] > 100
    assert worst < 1.0, f"a queue.declare took {worst:.2f} s while the flood ran"
    assert ch.queue_declare(q, passive=True).method.message_count > 100
