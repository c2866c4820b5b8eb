"""Issue 25 finding 5: one tenant's argument broke the API, the UI and
backups for everyone. A byte-array or decimal argument on a queue,
exchange, binding or consumer made /api/queues, /api/exchanges,
/api/bindings, /api/consumers and /api/definitions answer 400 for every
user; NaN or Infinity was written as bare `NaN` (not JSON: the UI's queue
page showed 0 rows).

The expected JSON is what RabbitMQ 3.10.8 (Debian's rabbitmq-server)
answers for the same frames: a byte array as its text, or "Not UTF-8,
base64 is: ..." when it is not UTF-8; a decimal of scale s and value v as
the number s.v (v unsigned); NaN and infinities refused (RabbitMQ drops the
connection on them; here the channel is closed with 406)."""
import json
import math
import struct

import pika
from pamqp import commands

from lavinmq.http.field_json import json_value
from tests.helpers.rawclient import RawClient
from tests.security.conftest import add_user, call


def _shortstr(s):
    b = s.encode()
    return struct.pack(">B", len(b)) + b


def _table(items):
    body = b"".join(_shortstr(k) + v for k, v in items)
    return struct.pack(">I", len(body)) + body


def _method(ch, cid, mid, payload):
    p = struct.pack(">HH", cid, mid) + payload
    return struct.pack(">BHI", 1, ch, len(p)) + p + b"\xce"


BYTES = b"x" + struct.pack(">I", 3) + b"\x00\xffa"
UTF8_BYTES = b"x" + struct.pack(">I", 5) + b"h\xc3\xa9ll"
DECIMAL = b"D" + struct.pack(">Bi", 2, 12345)
NEGATIVE_DECIMAL = b"D" + struct.pack(">Bi", 3, -5)
ARRAY = b"A" + struct.pack(">I", 15) + b"x" + struct.pack(">I", 1) + b"\x01" + b"D" + struct.pack(">Bi", 1, 7) \
    + b"s\x00\x01"
ARGS = [("x-bytes", BYTES), ("x-text", UTF8_BYTES), ("x-decimal", DECIMAL), ("x-negative", NEGATIVE_DECIMAL),
        ("x-array", ARRAY), ("x-nested", b"F" + _table([("b", BYTES)]))]
# RabbitMQ 3.10.8's answer for ARGS
RABBIT = {"x-bytes": "Not UTF-8, base64 is: AP9h", "x-text": "h\u00e9ll", "x-decimal": 2.12345,
          "x-negative": 3.4294967291, "x-array": ["\u0001", 1.7, 1],
          "x-nested": {"b": "Not UTF-8, base64 is: AP9h"}}


def _strict(text):
    def refuse(token):
        raise AssertionError(f"{token} is not JSON")
    return json.loads(text, parse_constant=refuse)


def _get(b, path, user="guest", password="guest"):
    import base64
    import urllib.request
    req = urllib.request.Request(b.http_url + path)
    req.add_header("Authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())
    try:
        with urllib.request.urlopen(req, timeout=15) as resp:
            return resp.status, _strict(resp.read().decode())
    except urllib.error.HTTPError as e:
        with e:
            return e.code, e.read().decode()


def test_odd_argument_types_do_not_break_the_api(make_broker):
    b = make_broker()
    add_user(b, "tenant")
    c = RawClient(b.host, b.port, user="tenant", password="pw")
    c.open_channel(1)
    args = _table(ARGS)
    c.sendall(_method(1, 50, 10, struct.pack(">H", 0) + _shortstr("odd-q") + b"\x02" + args))   # durable
    assert isinstance(c.read_frame()[1], commands.Queue.DeclareOk)
    c.sendall(_method(1, 40, 10, struct.pack(">H", 0) + _shortstr("odd-x") + _shortstr("fanout") + b"\x02" + args))
    assert isinstance(c.read_frame()[1], commands.Exchange.DeclareOk)
    c.sendall(_method(1, 50, 20, struct.pack(">H", 0) + _shortstr("odd-q") + _shortstr("odd-x") + _shortstr("rk")
                      + b"\x00" + args))
    assert isinstance(c.read_frame()[1], commands.Queue.BindOk)
    c.sendall(_method(1, 60, 20, struct.pack(">H", 0) + _shortstr("odd-q") + _shortstr("odd-tag") + b"\x00" + args))
    assert isinstance(c.read_frame()[1], commands.Basic.ConsumeOk)
    # a message whose headers hold the same values, read back over the API
    conn = pika.BlockingConnection(pika.URLParameters(b.url))
    conn.channel().queue_declare("odd-get")
    conn.close()
    c.send(1, commands.Basic.Publish(exchange="", routing_key="odd-get"))
    header = struct.pack(">HHQH", 60, 0, 2, 0x2000) + _table(ARGS + [("x-nan", b"d" + struct.pack(">d", math.nan))])
    c.sendall(struct.pack(">BHI", 2, 1, len(header)) + header + b"\xce" + struct.pack(">BHI", 3, 1, 2) + b"hi\xce")

    for path, kind in (("/api/queues", "queue"), ("/api/exchanges", "exchange"), ("/api/bindings", "binding"),
                       ("/api/consumers", "consumer"), ("/api/definitions", None)):
        status, body = _get(b, path)
        assert status == 200, (path, body)
    assert _get(b, "/api/queues/%2F/odd-q")[1]["arguments"] == RABBIT
    assert _get(b, "/api/exchanges/%2F/odd-x")[1]["arguments"] == RABBIT
    assert _get(b, "/api/bindings/%2F/e/odd-x/q/odd-q")[1][0]["arguments"] == RABBIT
    assert [x["arguments"] for x in _get(b, "/api/consumers")[1] if x["consumer_tag"] == "odd-tag"] == [RABBIT]
    defs = _get(b, "/api/definitions")[1]
    assert [q["arguments"] for q in defs["queues"] if q["name"] == "odd-q"] == [RABBIT]
    assert [x["arguments"] for x in defs["exchanges"] if x["name"] == "odd-x"] == [RABBIT]
    assert [x["arguments"] for x in defs["bindings"] if x["source"] == "odd-x"] == [RABBIT]
    # the paged listing the UI asks for, as the tenant and as the admin
    for user, password in (("tenant", "pw"), ("guest", "guest")):
        status, page = _get(b, "/api/queues?page=1&page_size=100", user, password)
        assert status == 200 and page["filtered_count"] == 2
    status, got = call(b, "POST", "/api/queues/%2F/odd-get/get", {"count": 1, "ackmode": "ack_requeue_true",
                                                                  "encoding": "auto"})
    assert status == 200
    headers = got[0]["properties"]["headers"]
    assert headers["x-nan"] == "NaN" and {k: headers[k] for k in RABBIT} == RABBIT
    c.close()
    # and a backup made of them imports
    b2_defs = {k: defs[k] for k in ("queues", "exchanges", "bindings")}
    for q in b2_defs["queues"]:
        q["name"] += "-copy"
    assert call(b, "POST", "/api/definitions", {"queues": b2_defs["queues"]})[0] == 204


def test_nan_and_infinity_arguments_are_refused(make_broker):
    b = make_broker()
    for value in (b"d" + struct.pack(">d", math.nan), b"d" + struct.pack(">d", math.inf),
                  b"f" + struct.pack(">f", -math.inf), b"F" + _table([("deep", b"d" + struct.pack(">d", math.nan))])):
        c = RawClient(b.host, b.port)
        c.open_channel(1)
        c.sendall(_method(1, 50, 10, struct.pack(">H", 0) + _shortstr("nan-q") + b"\x00"
                          + _table([("x-value", value)])))
        close = c.read_frame()[1]
        assert isinstance(close, commands.Channel.Close) and close.reply_code == 406, close
        assert "NaN or infinite" in close.reply_text
        c.sendall(_method(1, 40, 10, struct.pack(">H", 0) + _shortstr("nan-x") + _shortstr("direct") + b"\x00"
                          + _table([("x-value", value)])))
        c.close()
    # JSON's NaN token over HTTP too
    status, body = call(b, "PUT", "/api/queues/%2F/nan-http", raw=b'{"arguments": {"x-value": NaN}}')
    assert status == 400 and "NaN" in body["reason"], body
    assert call(b, "GET", "/api/queues/%2F/nan-q")[0] == 404
    status, _ = _get(b, "/api/queues")
    assert status == 200


def test_stored_non_finite_numbers_are_written_as_strings():
    """Kept from before the check, or in a message header: never bare NaN."""
    assert json_value({"a": math.nan, "b": [math.inf, -math.inf], "c": 1.5}) == \
        {"a": "NaN", "b": ["Infinity", "-Infinity"], "c": 1.5}
    assert json.dumps(json_value(math.nan)) == '"NaN"'
