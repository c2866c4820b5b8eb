"""Issue 14 item 7: no single API request may stall the event loop. Before,
one `?name=...&use_regex=true` stalled every AMQP client for 22 s and an
import of 2,000 users froze the broker 12.6 s (users.json written per user)."""
import threading
import time
import urllib.parse

import pika

from tests.security.conftest import call


class StallMeter:
    """AMQP round trips in a thread; the longest one is the stall."""

    def __init__(self, url):
        self.conn = pika.BlockingConnection(pika.URLParameters(url))
        self.ch = self.conn.channel()
        self.ch.queue_declare("stall-probe")
        self.longest = 0.0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run)

    def run(self):
        while not self.stop.is_set():
            t = time.monotonic()
            self.ch.queue_declare("stall-probe", passive=True)
            self.longest = max(self.longest, time.monotonic() - t)
            time.sleep(0.01)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()
        self.conn.close()


def test_catastrophic_regex_filter_is_linear(make_broker):
    b = make_broker()
    for i in range(3):
        assert call(b, "PUT", f"/api/queues/%2F/{'a' * 60}{i}!", {})[0] == 201
    pattern = urllib.parse.quote("(a+)+$", safe="")
    with StallMeter(b.url) as meter:
        started = time.monotonic()
        status, body = call(b, "GET", f"/api/queues?name={pattern}&use_regex=true")
        took = time.monotonic() - started
    assert status == 200 and body == []
    assert took < 2 and meter.longest < 1, (took, meter.longest)
    status, body = call(b, "GET", f"/api/queues?name={urllib.parse.quote('^a{60}0', safe='')}&use_regex=true")
    assert status == 200 and [q["name"] for q in body] == ["a" * 60 + "0!"]
    # what needs backtracking is refused, not run
    backref = urllib.parse.quote("(a)\\1", safe="")
    status, body = call(b, "GET", f"/api/queues?name={backref}&use_regex=true")
    assert status == 400 and "bad regex" in body["reason"]
    assert call(b, "GET", "/api/queues?use_regex=true&name=" + "a" * 2000)[0] == 400


def _users(n, prefix):
    return [{"name": f"{prefix}{i}", "password_hash": "", "tags": "management"} for i in range(n)]


def test_importing_many_users_does_not_freeze_the_broker(make_broker):
    b = make_broker()
    users = _users(2000, "imp")
    perms = [{"user": u["name"], "vhost": "/", "configure": "", "write": "", "read": ".*"} for u in users]
    with StallMeter(b.url) as meter:
        started = time.monotonic()
        status, _ = call(b, "POST", "/api/definitions", {"users": users, "permissions": perms})
        took = time.monotonic() - started
    assert status == 204
    assert took < 3 and meter.longest < 1.5, (took, meter.longest)
    status, listed = call(b, "GET", "/api/users")
    assert sum(u["name"].startswith("imp") for u in listed) == 2000


def test_import_is_all_or_nothing(make_broker):
    b = make_broker()
    before = sorted(u["name"] for u in call(b, "GET", "/api/users")[1])
    # found before anything is applied: a permission on a vhost that does not exist
    bad = {"users": _users(50, "half"), "vhosts": [{"name": "v-new"}],
           "permissions": [{"user": "half0", "vhost": "nowhere", "configure": ".*", "write": ".*", "read": ".*"}]}
    status, body = call(b, "POST", "/api/definitions", bad)
    assert status == 400 and "nowhere" in body["reason"]
    # found only while applying: a queue name the vhost refuses, after users, vhosts, exchanges were made
    late = {"users": _users(50, "late"), "vhosts": [{"name": "v-late"}],
            "permissions": [{"user": "late0", "vhost": "v-late", "configure": ".*", "write": ".*", "read": ".*"}],
            "exchanges": [{"name": "x-late", "vhost": "/", "type": "fanout", "durable": True}],
            "queues": [{"name": "q-late", "vhost": "/", "durable": True},
                       {"name": "amq.reserved", "vhost": "/", "durable": True}],
            "bindings": [{"source": "x-late", "vhost": "/", "destination": "q-late", "destination_type": "queue",
                          "routing_key": ""}]}
    status, body = call(b, "POST", "/api/definitions", late)
    assert status == 400 and "nothing imported" in body["reason"], body
    assert sorted(u["name"] for u in call(b, "GET", "/api/users")[1]) == before
    assert [v["name"] for v in call(b, "GET", "/api/vhosts")[1]] == ["/"]
    assert call(b, "GET", "/api/exchanges/%2F/x-late")[0] == 404
    assert call(b, "GET", "/api/queues/%2F/q-late")[0] == 404
    # and the same survives a restart (nothing half-written to disk)
    b.restart()
    assert sorted(u["name"] for u in call(b, "GET", "/api/users")[1]) == before
    assert call(b, "GET", "/api/queues/%2F/q-late")[0] == 404
