"""Issue 14 items 10 and 12: the loopback rule follows the user's name
(loopback_users), failed logins back off per source address and user with a
rate-limited log line, and revoking permissions or deleting a user takes
effect on open connections and channels."""
import time

import pika
import pytest
from pamqp import commands, frame

from lavinmq.amqp.connection import AMQPConnection
from lavinmq.auth.users import UserStore
from tests.helpers.inproc import FakeServer, FakeTransport, feed
from tests.security.conftest import add_user, call


class RemoteTransport(FakeTransport):
    def get_extra_info(self, name):
        return ("10.1.2.3", 40000) if name == "peername" else super().get_extra_info(name)


def amqp_login_from_remote(tmp_path, server, user, password):
    c = AMQPConnection(server)
    c.connection_made(RemoteTransport())
    feed(c, b"AMQP\x00\x00\x09\x01")
    feed(c, frame.marshal(commands.Connection.StartOk(mechanism="PLAIN", response=f"\0{user}\0{password}"), 0))
    out = bytes(c.transport.out)
    c.connection_lost(None)
    pos, frames = 0, []
    while pos < len(out):
        n, _, value = frame.unmarshal(out[pos:])
        frames.append(value)
        pos += n
    return frames[-1]


async def test_loopback_rule_survives_recreating_the_user(tmp_path):
    server = FakeServer(tmp_path)
    try:
        assert isinstance(amqp_login_from_remote(tmp_path, server, "guest", "guest"), commands.Connection.Close)
        server.users.delete_user("guest")
        server.users.add_user("guest", "guest", tags=("administrator",))
        server.users.set_permissions("guest", "/", ".*", ".*", ".*")
        reply = amqp_login_from_remote(tmp_path, server, "guest", "guest")
        assert isinstance(reply, commands.Connection.Close) and reply.reply_code == 403
        server.users.add_user("other", "pw")
        assert isinstance(amqp_login_from_remote(tmp_path, server, "other", "pw"), commands.Connection.Tune)
    finally:
        server.vhosts["/"].close()


def test_loopback_users_independent_of_default_user(tmp_path):
    store = UserStore(str(tmp_path), "admin", "pw", loopback_users="guest, ops")
    assert store.get("admin").loopback_only          # default_user_only_loopback
    for name in ("guest", "ops", "dev"):
        store.add_user(name, "pw")
    assert [store.get(n).loopback_only for n in ("guest", "ops", "dev")] == [True, True, False]
    again = UserStore(str(tmp_path), "admin", "pw", default_user_only_loopback=False, loopback_users="")
    assert not any(u.loopback_only for u in again.users.values())


def test_failed_logins_back_off_per_address_and_user(make_broker):
    """Issue 25 changed what the back-off does (tests/security/
    test_login_throttle.py): attempts are answered late, never refused
    unchecked, so the right password still gets in."""
    from lavinmq.auth import throttle
    b = make_broker()
    bad = pika.URLParameters(b.url.replace("guest:guest", "guest:wrong"))
    good = pika.URLParameters(b.url)
    for _ in range(throttle.FREE_FAILURES + 1):
        with pytest.raises(pika.exceptions.ProbableAuthenticationError):
            pika.BlockingConnection(bad)
    # backing off: the right password from the same address is answered late, and let in ...
    started = time.monotonic()
    pika.BlockingConnection(good).close()
    assert throttle.FIRST_DELAY <= time.monotonic() - started < throttle.MAX_DELAY + 1
    # ... over HTTP too
    started = time.monotonic()
    assert call(b, "GET", "/api/overview")[0] == 200
    assert throttle.FIRST_DELAY <= time.monotonic() - started < throttle.MAX_DELAY + 1
    lines = [line for line in b.log_text().splitlines() if "login refused" in line]
    assert 1 <= len(lines) <= 4, lines                  # 6 refusals, a rate-limited few lines


def test_revoked_permissions_and_deleted_users_take_effect_at_once(make_broker):
    b = make_broker()
    add_user(b, "bob", "pw", "management")
    url = f"amqp://bob:pw@{b.host}:{b.port}/%2F"
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    ch.queue_declare("bob.q")
    ch.confirm_delivery()
    ch.basic_publish("", "bob.q", b"before")
    got = []
    ch.basic_consume("bob.q", lambda c, m, p, body: got.append(body), auto_ack=True)
    conn.process_data_events(0.3)
    assert got == [b"before"]
    cancelled = []
    ch.add_on_cancel_callback(lambda frame_: cancelled.append(frame_))
    # write and read taken away: publishing to the exchange it used before is refused,
    # its consumer is cancelled
    assert call(b, "PUT", "/api/permissions/%2F/bob", {"configure": ".*", "write": "^$", "read": "^$"})[0] == 204
    conn.process_data_events(0.3)
    assert cancelled, "the consumer was not cancelled"
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as err:
        ch.basic_publish("", "bob.q", b"after")
    assert err.value.reply_code == 403
    # access to the vhost taken away: the connection is closed
    assert call(b, "DELETE", "/api/permissions/%2F/bob")[0] == 204
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as err:
        conn.process_data_events(1)
        conn.channel()
    assert err.value.reply_code == 320
    # a deleted user's connections are closed
    assert call(b, "PUT", "/api/permissions/%2F/bob", {"configure": ".*", "write": ".*", "read": ".*"})[0] == 201
    conn = pika.BlockingConnection(pika.URLParameters(url))
    assert call(b, "DELETE", "/api/users/bob")[0] == 204
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as err:
        conn.process_data_events(1)
        conn.channel()
    assert err.value.reply_code == 320 and "deleted" in err.value.reply_text
    q = call(b, "GET", "/api/queues/%2F/bob.q")[1]
    assert q["messages"] == 0
