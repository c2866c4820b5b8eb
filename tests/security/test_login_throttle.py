"""Issue 25 finding 7: the login back-off was a lockout. Failures counted
per source address, AMQP and HTTP together, and past the limit every login
from the address was refused unchecked: a guesser at the same address kept
guest out completely (0 of 190 logins with the right password), while a
valid account reset the counter and allowed 159 guesses/s."""
import threading
import time

import pika
import pytest

from lavinmq.auth import throttle
from tests.security.conftest import add_user, call


def _amqp_login(b, user, password):
    params = pika.URLParameters(f"amqp://{user}:{password}@{b.host}:{b.port}/%2F")
    params.connection_attempts = 1
    params.socket_timeout = 10
    try:
        pika.BlockingConnection(params).close()
        return True
    except pika.exceptions.ProbableAuthenticationError:
        return False


class Guesser:
    """Threads guessing a user's password, over AMQP and HTTP, as fast as
    the broker answers."""

    def __init__(self, b, user, threads=3):
        self.b, self.user = b, user
        self.stop = threading.Event()
        self.attempts = 0
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.run, args=(i,)) for i in range(threads)]

    def run(self, i):
        n = 0
        while not self.stop.is_set():
            n += 1
            if i == 0:
                assert call(self.b, "GET", "/api/whoami", user=self.user, password=f"guess{n}")[0] == 401
            else:
                assert not _amqp_login(self.b, self.user, f"guess-{i}-{n}")
            with self.lock:
                self.attempts += 1

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join()


def test_a_guesser_cannot_lock_out_the_right_password(make_broker):
    b = make_broker()
    with Guesser(b, "guest") as g:
        time.sleep(2)           # past the free failures: the guesser is being slowed down
        logins = []
        for _ in range(2):
            started = time.monotonic()
            ok_amqp = _amqp_login(b, "guest", "guest")
            ok_http = call(b, "GET", "/api/whoami")[0] == 200
            logins.append((ok_amqp, ok_http, time.monotonic() - started))
        guessed = g.attempts
        seconds = 2 + sum(t for _, _, t in logins)
    assert all(a and h for a, h, _ in logins), logins
    # each login answered at most MAX_DELAY late (twice: AMQP and HTTP)
    assert max(t for _, _, t in logins) < 2 * throttle.MAX_DELAY + 2, logins
    # and the guesser got few answers: the free ones, then one per delay per thread
    assert guessed <= throttle.FREE_FAILURES + 3 * (seconds / throttle.FIRST_DELAY), (guessed, seconds)
    assert guessed / seconds < 8, f"{guessed} guesses in {seconds:.1f} s"


def test_another_users_success_neither_helps_nor_hinders(make_broker):
    b = make_broker()
    add_user(b, "bob", "pw")
    for i in range(throttle.FREE_FAILURES + 2):
        assert not _amqp_login(b, "guest", f"wrong{i}")
    # guest is being slowed down; bob at the same address is not ...
    started = time.monotonic()
    assert _amqp_login(b, "bob", "pw")
    assert call(b, "GET", "/api/whoami", user="bob", password="pw")[0] == 200
    assert time.monotonic() - started < 0.5 * throttle.FIRST_DELAY + 0.5
    # ... and bob's success reset nothing for guest
    started = time.monotonic()
    assert not _amqp_login(b, "guest", "wrong-again")
    assert time.monotonic() - started >= throttle.FIRST_DELAY
    # made-up names share one key per address: they cannot push guest's out, nor slow bob
    for i in range(throttle.FREE_FAILURES + 1):
        assert not _amqp_login(b, f"nobody{i}", "x")
    started = time.monotonic()
    assert not _amqp_login(b, "nobody-else", "x")
    assert time.monotonic() - started >= throttle.FIRST_DELAY
    started = time.monotonic()
    assert _amqp_login(b, "bob", "pw")
    assert time.monotonic() - started < 0.5


@pytest.mark.parametrize("clock_step", [throttle.WINDOW + 1])
def test_failures_expire_and_memory_is_bounded(clock_step):
    now = [0.0]
    t = throttle.LoginThrottle(clock=lambda: now[0])
    for _ in range(throttle.FREE_FAILURES + 3):
        t.failed("10.0.0.1", "guest")
    assert t.delay_for("10.0.0.1", "guest") == min(throttle.MAX_DELAY, throttle.FIRST_DELAY * 2 ** 3)
    assert t.delay_for("10.0.0.1", "bob") == 0 and t.delay_for("10.0.0.2", "guest") == 0
    # a flood from other addresses pushes out what is not backing off first
    for i in range(throttle.MAX_ENTRIES + 10):
        t.failed(f"10.1.{i // 256}.{i % 256}", "guest")
    assert len(t.entries) <= throttle.MAX_ENTRIES
    assert t.delay_for("10.0.0.1", "guest") > 0
    now[0] += clock_step
    assert t.delay_for("10.0.0.1", "guest") == 0
