"""The broker through pika's BlockingConnection: declarations, routing,
consume/get/ack/reject, confirms, transactions. Each test uses unique names
on the shared session broker."""
import decimal

import time

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker, ConnectionClosedByBroker

from tests.conftest import unique


def wait_for(conn, cond, timeout=10):
    # pika delivers in process_data_events; a loaded CI machine may need more than one turn
    deadline = time.monotonic() + timeout
    while not cond() and time.monotonic() < deadline:
        conn.process_data_events(0.05)


@pytest.fixture
def conn(broker):
    c = pika.BlockingConnection(pika.URLParameters(broker.url))
    yield c
    if c.is_open:
        c.close()


@pytest.fixture
def ch(conn):
    return conn.channel()


def closed_code(excinfo):
    return excinfo.value.args[0]


# -- connection -----------------------------------------------------------------

def test_server_properties_and_capabilities(conn):
    props = conn._impl.server_properties
    caps = props["capabilities"]
    for cap in ("publisher_confirms", "exchange_exchange_bindings", "basic.nack", "consumer_cancel_notify",
                "connection.blocked", "consumer_priorities", "authentication_failure_close",
                "per_consumer_qos", "direct_reply_to"):
        assert caps[cap] is True, cap


def test_wrong_password_refused(broker):
    params = pika.URLParameters(broker.url.replace("guest:guest", "guest:wrong"))
    with pytest.raises(pika.exceptions.ProbableAuthenticationError) as e:
        pika.BlockingConnection(params)
    assert "403" in str(e.value) or "ACCESS_REFUSED" in str(e.value)


def test_unknown_vhost_not_allowed(broker):
    params = pika.URLParameters(broker.url.rsplit("/", 1)[0] + "/nosuchvhost")
    with pytest.raises((pika.exceptions.ProbableAccessDeniedError, ConnectionClosedByBroker)) as e:
        pika.BlockingConnection(params)
    assert "530" in str(e.value) or "NOT_ALLOWED" in str(e.value)


def test_tune_negotiated_down(broker):
    params = pika.URLParameters(broker.url + "?frame_max=8192&channel_max=10&heartbeat=7")
    c = pika.BlockingConnection(params)
    try:
        assert c._impl.params.frame_max == 8192
        assert c._impl.params.channel_max == 10
        ch = c.channel()
        q = unique()
        ch.queue_declare(q, auto_delete=True)
        body = bytes(range(256)) * 100      # 25.6 kB: several body frames at frame_max 8192
        ch.basic_publish("", q, body)
        m, p, got = next(ch.consume(q, auto_ack=True, inactivity_timeout=5))
        assert got == body
    finally:
        c.close()


# -- exchanges ---------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["direct", "fanout", "topic", "headers"])
def test_exchange_declare_each_type(ch, kind):
    ex = unique()
    ch.exchange_declare(ex, kind, auto_delete=False)
    ch.exchange_declare(ex, kind, passive=True)
    ch.exchange_delete(ex)


def test_exchange_passive_missing_404(ch):
    with pytest.raises(ChannelClosedByBroker) as e:
        ch.exchange_declare(unique(), "direct", passive=True)
    assert closed_code(e) == 404


def test_exchange_redeclare_other_type_406(ch):
    ex = unique()
    ch.exchange_declare(ex, "direct")
    with pytest.raises(ChannelClosedByBroker) as e:
        ch.exchange_declare(ex, "fanout")
    assert closed_code(e) == 406


def test_exchange_args_equal_by_value(conn, broker):
    if broker.external:
        pytest.skip("RabbitMQ compares argument types too; LavinMQ compares numbers by value")
    ch = conn.channel()
    ex = unique()
    ch.exchange_declare(ex, "direct", arguments={"x-foo": 10})
    # pika cannot send a float: a decimal 10 must equal the integer 10
    ch.exchange_declare(ex, "direct", arguments={"x-foo": decimal.Decimal("10.0")})
    with pytest.raises(ChannelClosedByBroker) as e:
        ch.exchange_declare(ex, "direct", arguments={"x-foo": 11})
    assert closed_code(e) == 406


def test_reserved_amq_names_403(ch):
    with pytest.raises(ChannelClosedByBroker) as e:
        ch.exchange_declare("amq." + unique(), "direct")
    assert closed_code(e) == 403


def test_unknown_exchange_type_406(conn, broker):
    if broker.external:
        pytest.skip("RabbitMQ 3.10 closes the connection with 503; LavinMQ the channel with 406")
    ch = conn.channel()
    with pytest.raises(ChannelClosedByBroker) as e:
        ch.exchange_declare(unique(), "no-such-type")
    assert closed_code(e) == 406
    assert conn.is_open


def test_exchange_delete_if_unused(conn):
    ch = conn.channel()
    ex, q = unique(), unique()
    ch.exchange_declare(ex, "direct")
    ch.queue_declare(q, auto_delete=True)
    ch.queue_bind(q, ex, "k")
    with pytest.raises(ChannelClosedByBroker) as e:
        ch.exchange_delete(ex, if_unused=True)
    assert closed_code(e) == 406
    ch = conn.channel()
    ch.exchange_delete(ex)


def test_publish_to_internal_exchange_403(conn):
    ch = conn.channel()
    ex = unique()
    ch.exchange_declare(ex, "fanout", internal=True)
    ch.basic_publish(ex, "", b"x")
    with pytest.raises(ChannelClosedByBroker) as e:
        ch.queue_declare(unique())      # any sync call surfaces the close
    assert closed_code(e) == 403


def test_publish_to_missing_exchange_404(conn):
    ch = conn.channel()
    ch.basic_publish(unique(), "k", b"x")
    with pytest.raises(ChannelClosedByBroker) as e:
        ch.queue_declare(unique())
    assert closed_code(e) == 404


def test_bind_to_default_exchange_403(ch):
    q = unique()
    ch.queue_declare(q, auto_delete=True)
    with pytest.raises(ChannelClosedByBroker) as e:
        ch.queue_bind(q, "", q)
    assert closed_code(e) == 403


def test_exchange_to_exchange_binding(ch):
    src, dst, q = unique(), unique(), unique()
    ch.exchange_declare(src, "topic")
    ch.exchange_declare(dst, "direct")
    ch.exchange_bind(dst, src, "a.*")
    ch.queue_declare(q, auto_delete=True)
    ch.queue_bind(q, dst, "a.b")
    ch.basic_publish(src, "a.b", b"through two exchanges")
    ch.basic_publish(src, "a.c", b"not bound downstream")
    m = get_all(ch, q)
    assert m == [b"through two exchanges"]
    ch.exchange_unbind(dst, src, "a.*")
    ch.basic_publish(src, "a.b", b"after unbind")
    assert get_all(ch, q) == []


# -- queues ---------------------------------------------------------------------------

def test_server_named_queue(ch):
    r = ch.queue_declare("", exclusive=True)
    assert r.method.queue.startswith("amq.gen-")


def test_queue_passive_missing_404(ch):
    with pytest.raises(ChannelClosedByBroker) as e:
        ch.queue_declare(unique(), passive=True)
    assert closed_code(e) == 404


def test_exclusive_queue_locked_for_others(broker, ch):
    q = unique()
    ch.queue_declare(q, exclusive=True)
    other = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        with pytest.raises(ChannelClosedByBroker) as e:
            other.channel().queue_declare(q)
        assert closed_code(e) == 405
    finally:
        other.close()


def test_declare_ok_counts(ch):
    q = unique()
    ch.queue_declare(q, auto_delete=False)
    for i in range(3):
        ch.basic_publish("", q, b"m")
    r = ch.queue_declare(q, passive=True)
    assert (r.method.message_count, r.method.consumer_count) == (3, 0)
    ch.basic_consume(q, lambda *a: None)
    r = ch.queue_declare(q, passive=True)
    assert r.method.consumer_count == 1
    ch.queue_delete(q)


def test_queue_redeclare_different_args_406(ch):
    q = unique()
    ch.queue_declare(q, arguments={"x-max-length": 10})
    with pytest.raises(ChannelClosedByBroker) as e:
        ch.queue_declare(q, arguments={"x-max-length": 20})
    assert closed_code(e) == 406


def test_purge_and_delete_counts(ch):
    q = unique()
    ch.queue_declare(q)
    for i in range(5):
        ch.basic_publish("", q, b"m")
    assert ch.queue_purge(q).method.message_count == 5
    ch.basic_publish("", q, b"m")
    assert ch.queue_delete(q).method.message_count == 1


def test_delete_if_empty_and_if_unused(conn):
    ch = conn.channel()
    q = unique()
    ch.queue_declare(q)
    ch.basic_publish("", q, b"m")
    with pytest.raises(ChannelClosedByBroker) as e:
        ch.queue_delete(q, if_empty=True)
    assert closed_code(e) == 406
    ch = conn.channel()
    ch.basic_consume(q, lambda *a: None)
    with pytest.raises(ChannelClosedByBroker) as e:
        conn.channel().queue_delete(q, if_unused=True)
    assert closed_code(e) == 406
    ch.queue_delete(q)


def test_auto_delete_after_last_consumer(ch):
    q = unique()
    ch.queue_declare(q, auto_delete=True)
    tag = ch.basic_consume(q, lambda *a: None)
    ch.basic_cancel(tag)
    with pytest.raises(ChannelClosedByBroker) as e:
        ch.queue_declare(q, passive=True)
    assert closed_code(e) == 404


# -- routing ----------------------------------------------------------------------------

def get_all(ch, q):
    out = []
    while True:
        m, p, body = ch.basic_get(q, auto_ack=True)
        if m is None:
            return out
        out.append(body)


def test_direct_fanout_topic_routing(ch):
    d, f, t = unique(), unique(), unique()
    qa, qb = unique(), unique()
    for ex, kind in ((d, "direct"), (f, "fanout"), (t, "topic")):
        ch.exchange_declare(ex, kind, auto_delete=True)
    for q in (qa, qb):
        ch.queue_declare(q, auto_delete=True)
    ch.queue_bind(qa, d, "red")
    ch.queue_bind(qb, d, "blue")
    ch.queue_bind(qa, f)
    ch.queue_bind(qb, f)
    ch.queue_bind(qa, t, "stock.*.nyse")
    ch.queue_bind(qb, t, "stock.#")
    ch.basic_publish(d, "red", b"d-red")
    ch.basic_publish(f, "ignored", b"f")
    ch.basic_publish(t, "stock.ibm.nyse", b"t1")
    ch.basic_publish(t, "stock", b"t2")
    ch.basic_publish(t, "stock.a.b.nyse", b"t3")
    assert get_all(ch, qa) == [b"d-red", b"f", b"t1"]
    assert get_all(ch, qb) == [b"f", b"t1", b"t2", b"t3"]


def test_headers_routing(ch):
    ex, q_all, q_any = unique(), unique(), unique()
    ch.exchange_declare(ex, "headers", auto_delete=True)
    ch.queue_declare(q_all, auto_delete=True)
    ch.queue_declare(q_any, auto_delete=True)
    ch.queue_bind(q_all, ex, arguments={"x-match": "all", "a": 1, "b": "x"})
    ch.queue_bind(q_any, ex, arguments={"x-match": "any", "a": 1, "b": "x"})
    ch.basic_publish(ex, "", b"both", pika.BasicProperties(headers={"a": 1, "b": "x"}))
    ch.basic_publish(ex, "", b"one", pika.BasicProperties(headers={"a": 1}))
    ch.basic_publish(ex, "", b"none", pika.BasicProperties(headers={"c": 1}))
    assert get_all(ch, q_all) == [b"both"]
    assert get_all(ch, q_any) == [b"both", b"one"]


def test_two_bindings_deliver_once(ch):
    ex, q = unique(), unique()
    ch.exchange_declare(ex, "topic", auto_delete=True)
    ch.queue_declare(q, auto_delete=True)
    ch.queue_bind(q, ex, "a.*")
    ch.queue_bind(q, ex, "*.b")
    ch.basic_publish(ex, "a.b", b"once")
    assert get_all(ch, q) == [b"once"]


def test_mandatory_unroutable_returned(ch):
    # with confirms, pika's blocking channel hands the basic.return back in UnroutableError
    ch.confirm_delivery()
    with pytest.raises(pika.exceptions.UnroutableError) as e:
        ch.basic_publish("amq.direct", unique(), b"lost", mandatory=True)
    [returned] = e.value.messages
    assert (returned.method.reply_code, returned.method.reply_text, returned.body) == (312, "NO_ROUTE", b"lost")
    # and the channel stays usable
    ch.basic_publish("amq.direct", unique(), b"not mandatory")


# -- consume, get, ack ---------------------------------------------------------------------

def test_properties_round_trip(ch):
    q = unique()
    ch.queue_declare(q, auto_delete=True)
    props = pika.BasicProperties(
        content_type="application/json", content_encoding="utf-8", delivery_mode=2, priority=3,
        correlation_id="corr", reply_to="rt", expiration="60000", message_id="mid", timestamp=1700000000,
        type="t", user_id="guest", app_id="app",
        headers={"int": 1, "neg": -5, "big": 2 ** 40, "dec": decimal.Decimal("1.5"), "bool": True, "str": "s",
                 "nested": {"list": [1, "two", {"three": 3}]}})
    ch.basic_publish("", q, b"", props)
    m, p, body = ch.basic_get(q, auto_ack=True)
    assert body == b""
    for attr in ("content_type", "content_encoding", "delivery_mode", "priority", "correlation_id",
                 "reply_to", "expiration", "message_id", "timestamp", "type", "user_id", "app_id"):
        assert getattr(p, attr) == getattr(props, attr), attr
    assert p.headers == props.headers


def test_large_body_split_over_frames(ch):
    q = unique()
    ch.queue_declare(q, auto_delete=True)
    body = bytes(range(256)) * 4096 * 3     # 3 MiB
    ch.basic_publish("", q, body)
    m, p, got = ch.basic_get(q, auto_ack=True)
    assert got == body


def test_get_ok_message_count_and_empty(ch):
    q = unique()
    ch.queue_declare(q, auto_delete=True)
    for i in range(3):
        ch.basic_publish("", q, b"%d" % i)
    m, p, body = ch.basic_get(q, auto_ack=True)
    assert (m.message_count, body) == (2, b"0")
    get_all(ch, q)
    assert ch.basic_get(q)[0] is None


def test_reject_requeue_keeps_position(ch):
    q = unique()
    ch.queue_declare(q, auto_delete=True)
    for i in range(1, 6):
        ch.basic_publish("", q, b"%d" % i)
    got = [ch.basic_get(q) for _ in range(5)]
    ch.basic_reject(got[2][0].delivery_tag, requeue=True)
    ch.basic_nack(got[1][0].delivery_tag, multiple=False, requeue=True)
    ch.basic_ack(got[0][0].delivery_tag)
    ch.basic_ack(got[4][0].delivery_tag)
    ch.basic_reject(got[3][0].delivery_tag, requeue=False)
    again = [ch.basic_get(q, auto_ack=True) for _ in range(2)]
    assert [a[2] for a in again] == [b"2", b"3"]
    assert all(a[0].redelivered for a in again)
    assert ch.basic_get(q)[0] is None


def test_nack_multiple_requeue(ch):
    q = unique()
    ch.queue_declare(q, auto_delete=True)
    for i in range(4):
        ch.basic_publish("", q, b"%d" % i)
    got = [ch.basic_get(q) for _ in range(4)]
    ch.basic_nack(got[2][0].delivery_tag, multiple=True, requeue=True)
    ch.basic_ack(got[3][0].delivery_tag)
    assert [b for _, _, b in [ch.basic_get(q, auto_ack=True) for _ in range(3)]] == [b"0", b"1", b"2"]


def test_unknown_delivery_tag_406(ch):
    q = unique()
    ch.queue_declare(q, auto_delete=True)
    ch.basic_publish("", q, b"x")
    m = ch.basic_get(q)[0]
    ch.basic_ack(m.delivery_tag)
    ch.basic_ack(m.delivery_tag)        # twice
    with pytest.raises(ChannelClosedByBroker) as e:
        ch.queue_declare(unique())
    assert closed_code(e) == 406


def test_prefetch_limits_unacked(ch):
    q = unique()
    ch.queue_declare(q, auto_delete=True)
    for i in range(10):
        ch.basic_publish("", q, b"%d" % i)
    ch.basic_qos(prefetch_count=3)
    got = []
    ch.basic_consume(q, lambda c, m, p, b: got.append(m.delivery_tag))
    wait_for(ch.connection, lambda: len(got) >= 3)
    ch.connection.process_data_events(0.3)      # and no more than the prefetch
    assert len(got) == 3
    ch.basic_ack(got[-1], multiple=True)
    wait_for(ch.connection, lambda: len(got) >= 6)
    ch.connection.process_data_events(0.3)
    assert len(got) == 6


def test_unacked_requeued_on_channel_close(conn):
    q = unique()
    ch = conn.channel()
    ch.queue_declare(q)
    ch.basic_publish("", q, b"a")
    ch.basic_publish("", q, b"b")
    assert ch.basic_get(q)[2] == b"a"
    ch.close()
    ch2 = conn.channel()
    m, p, body = ch2.basic_get(q, auto_ack=True)
    assert (body, m.redelivered) == (b"a", True)
    ch2.queue_delete(q)


def test_recover_requeues(ch):
    q = unique()
    ch.queue_declare(q, auto_delete=True)
    ch.basic_publish("", q, b"a")
    assert ch.basic_get(q)[2] == b"a"
    ch.basic_recover(requeue=True)
    m, p, body = ch.basic_get(q, auto_ack=True)
    assert body == b"a" and m.redelivered


def test_server_generated_consumer_tag(ch):
    q = unique()
    ch.queue_declare(q, auto_delete=True)
    tag = ch.basic_consume(q, lambda *a: None)
    assert tag.startswith("ctag") or tag.startswith("amq.ctag")


def test_exclusive_consumer_403(conn):
    q = unique()
    ch = conn.channel()
    ch.queue_declare(q, auto_delete=True)
    ch.basic_consume(q, lambda *a: None, exclusive=True)
    with pytest.raises(ChannelClosedByBroker) as e:
        conn.channel().basic_consume(q, lambda *a: None)
    assert closed_code(e) == 403


def test_consumer_priority(conn):
    q = unique()
    ch = conn.channel()
    ch.queue_declare(q, auto_delete=True)
    ch.basic_qos(prefetch_count=1)
    low, high = [], []
    ch.basic_consume(q, lambda c, m, p, b: low.append(b), arguments={"x-priority": 1})
    ch.basic_consume(q, lambda c, m, p, b: high.append(b), arguments={"x-priority": 10})
    ch.basic_publish("", q, b"1")
    ch.basic_publish("", q, b"2")
    wait_for(conn, lambda: len(high) + len(low) >= 2)
    # the high priority consumer gets the first; with prefetch 1 the second spills to low
    assert high == [b"1"] and low == [b"2"]


def test_server_cancel_when_queue_deleted(conn):
    q = unique()
    ch = conn.channel()
    ch.queue_declare(q)
    cancelled = []
    ch.add_on_cancel_callback(lambda frame: cancelled.append(frame.method.consumer_tag))
    tag = ch.basic_consume(q, lambda *a: None)
    conn.channel().queue_delete(q)
    wait_for(conn, lambda: cancelled)
    assert cancelled == [tag]


def test_prefetch_size_not_implemented(conn, broker):
    if broker.external:
        pytest.skip("RabbitMQ accepts and ignores prefetch_size; LavinMQ answers 540")
    ch = conn.channel()
    with pytest.raises(ConnectionClosedByBroker) as e:
        ch.basic_qos(prefetch_size=1024)
    assert closed_code(e) == 540


# -- confirms and transactions ---------------------------------------------------------------

def test_confirms_many(ch):
    q = unique()
    ch.queue_declare(q, auto_delete=True)
    ch.confirm_delivery()
    for i in range(2000):
        ch.basic_publish("", q, b"%d" % i)
    assert ch.queue_declare(q, passive=True).method.message_count == 2000
    got = []
    for m, p, body in ch.consume(q, inactivity_timeout=5):
        got.append(body)
        ch.basic_ack(m.delivery_tag)
        if len(got) == 2000:
            break
    ch.cancel()
    assert got == [b"%d" % i for i in range(2000)]


def test_tx_commit_and_rollback(ch):
    q = unique()
    ch.queue_declare(q, auto_delete=True)
    ch.tx_select()
    ch.basic_publish("", q, b"rolled back")
    ch.tx_rollback()
    ch.basic_publish("", q, b"committed")
    assert ch.queue_declare(q, passive=True).method.message_count == 0
    ch.tx_commit()
    assert get_all(ch, q) == [b"committed"]


def test_tx_ack_rollback_keeps_unacked(ch):
    q = unique()
    ch.queue_declare(q, auto_delete=True)
    ch.basic_publish("", q, b"x")
    ch.tx_select()
    m = ch.basic_get(q)[0]
    ch.basic_ack(m.delivery_tag)
    ch.tx_rollback()
    ch.tx_commit()
    ch.basic_recover(requeue=True)
    m2, p, body = ch.basic_get(q)
    assert body == b"x" and m2.redelivered


def test_tx_commit_without_select_406(ch):
    with pytest.raises(ChannelClosedByBroker) as e:
        ch.tx_commit()
    assert closed_code(e) == 406


def test_direct_exchange_bound_to_headers_exchange(ch):
    # the direct exchange's route cache must not swallow a headers decision downstream
    d, h, q = unique(), unique(), unique()
    ch.exchange_declare(d, "direct", auto_delete=True)
    ch.exchange_declare(h, "headers", auto_delete=True)
    ch.exchange_bind(h, d, "k")
    ch.queue_declare(q, auto_delete=True)
    ch.queue_bind(q, h, arguments={"x-match": "all", "color": "red"})
    for color in ("red", "blue", "red"):
        ch.basic_publish(d, "k", color.encode(), pika.BasicProperties(headers={"color": color}))
    assert get_all(ch, q) == [b"red", b"red"]
