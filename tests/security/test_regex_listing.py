"""Issue 25 finding 2: a `management` user's name filter stalled every
client. With `page=` (what the UI sends) `use_regex=true` compiled the
pattern with Python's backtracking `re` (one request hung the broker for
over 12 minutes); without it RE2 ran, but a crafted pattern over 1,500
crafted 255-byte names held the loop 16.6 s."""
import random
import time
import urllib.parse

import pika

from tests.security.conftest import add_user, call
from tests.security.stall_meter import ProcessStallMeter as StallMeter


def _declare(b, names):
    conn = pika.BlockingConnection(pika.URLParameters(b.url))
    ch = conn.channel()
    for n in names:
        ch.queue_declare(n)
    conn.close()


def _get(b, path, **kw):
    started = time.monotonic()
    status, body = call(b, "GET", path, user="manager", password="pw", **kw)
    return status, body, time.monotonic() - started


def test_paged_regex_filter_does_not_backtrack(make_broker):
    b = make_broker()
    add_user(b, "manager")
    # (a+)+$ backtracks 2^n steps on n a's and no match: ~2 s per name in Python's re
    _declare(b, ["a" * 24 + f"!{i}" for i in range(3)] + ["a" * 10])
    pattern = urllib.parse.quote("(a+)+$", safe="")
    with StallMeter(b.url) as meter:
        for path in ("/api/queues", "/api/exchanges"):
            status, body, took = _get(b, f"{path}?page=1&page_size=100&use_regex=true&name={pattern}")
            assert status == 200, body
            assert took < 2, took
    assert meter.longest < 0.5, meter.longest
    status, body, _ = _get(b, f"/api/queues?page=1&use_regex=true&name={pattern}")
    assert [q["name"] for q in body["items"]] == ["a" * 10] and body["filtered_count"] == 1
    # a backreference needs backtracking: refused on the paged path too
    status, body, _ = _get(b, "/api/queues?page=1&use_regex=true&name=" + urllib.parse.quote("(a)\\1", safe=""))
    assert status == 400 and "bad regex" in body["reason"]


CRAFTED = "(?:(?:.{0,30}a){30}|(?:.{0,30}b){30})c"      # ~16,000 RE2 instructions
HEAVY = "(?:[ab]{0,20}a){20}c"                          # under the cap, ~1.3 ms per crafted name


def test_re2_over_crafted_names_does_not_stall_the_loop(make_broker):
    b = make_broker()
    add_user(b, "manager")
    rng = random.Random(25)
    names = ["".join(rng.choice("ab") for _ in range(250)) + f"{i:05d}" for i in range(1000)]
    _declare(b, names)
    _declare(b, ["a" * 20 + "c-match"])
    with StallMeter(b.url) as meter:
        # a pattern that compiles to a large program is refused before it runs
        for query in ("", "page=1&"):
            status, body, took = _get(b, f"/api/queues?{query}use_regex=true&name=" + urllib.parse.quote(CRAFTED))
            assert status == 400 and "too complex" in body["reason"], body
            assert took < 1, took
        # one under the cap still costs ~1.3 s over these names: it runs in
        # slices, and the loop serves everyone else in between
        for query in ("", "page=1&page_size=10&"):
            status, body, took = _get(b, f"/api/queues?{query}use_regex=true&name=" + urllib.parse.quote(HEAVY))
            assert status == 200, body
            items = body["items"] if query else body
            assert [q["name"] for q in items] == ["a" * 20 + "c-match"]
    assert meter.longest < 0.4, f"an AMQP round trip waited {meter.longest:.2f} s"
