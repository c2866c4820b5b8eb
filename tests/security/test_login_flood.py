"""Issue 41 row 1: a flood of wrong logins locked a user out. After about
1,030 failures of one user from one address the back-off computed
`0.5 * 2 ** over`, which raised OverflowError: every later login of that
user from that address failed for 60 s, the right password included, each
with a traceback in the log (10,850 lines in one run). And with a socket
per guess, parallel sockets bought ~100 real password checks per second
from one address (300 sockets, each answered after 3 s)."""
import asyncio

from lavinmq.auth import throttle
from tests.security.login_flood import Flood, timed_login

SOCKETS = 300


def test_a_flood_of_wrong_logins_locks_nobody_out(make_broker):
    b = make_broker()

    async def scenario():
        flood = Flood(b.host, b.port, "guest", SOCKETS)
        await flood.run(15.0)
        after = await timed_login(b.host, b.port, "guest", "guest")
        return flood.answers, after

    answers, (ok, took) = asyncio.run(scenario())
    # the right password gets in once the guesser stops, at most one delay late
    assert ok, f"guest was refused after the flood ({answers} guesses answered)\n{b.log_tail()}"
    assert took < throttle.MAX_DELAY + 1.0, took
    # checks from one address are bounded whatever the number of sockets
    assert answers <= throttle.FREE_FAILURES + throttle.CHECKS_PER_ADDRESS * 15 * 1.2 + 5, answers
    log = b.log_text()
    assert "OverflowError" not in log
    # one line for the episode, not one per attempt
    lines = [line for line in log.splitlines() if "'guest'" in line or " guest " in line]
    assert len(lines) <= 5, "\n".join(lines[:20])


def test_the_right_password_gets_in_during_a_flood(make_broker):
    """While the guesser holds fewer sockets than the address may have
    checked in one back-off delay, the user's own login waits no longer
    than the delay; a user without failures at the same address is not
    slowed at all."""
    b = make_broker()
    from tests.security.conftest import add_user
    add_user(b, "bob", "pw")
    sockets = int(throttle.CHECKS_PER_ADDRESS * throttle.MAX_DELAY) // 2

    async def scenario():
        flood = Flood(b.host, b.port, "guest", sockets)
        task = asyncio.create_task(flood.run(12.0))
        await asyncio.sleep(6.0)        # well into the back-off
        mine = [await timed_login(b.host, b.port, "guest", "guest") for _ in range(3)]
        bobs = await timed_login(b.host, b.port, "bob", "pw")
        await task
        return mine, bobs, flood.answers

    mine, bobs, answers = asyncio.run(scenario())
    assert all(ok for ok, _ in mine), mine
    assert max(t for _, t in mine) < throttle.MAX_DELAY + 1.0, mine
    assert bobs[0] and bobs[1] < 0.5, bobs
    assert answers <= throttle.FREE_FAILURES + throttle.CHECKS_PER_ADDRESS * 12 * 1.2 + 5, answers


def test_the_delay_is_capped_however_many_failures():
    t = throttle.LoginThrottle()
    for _ in range(5000):       # past 1,030 the uncapped exponent overflowed a float
        t.failed("10.0.0.1", "guest")
    assert t.delay_for("10.0.0.1", "guest") == throttle.MAX_DELAY


def test_one_line_per_address_checks_at_the_rate_and_skips_who_went():
    """The address's line serves at most CHECKS_PER_ADDRESS logins a
    second, in their order; a login whose client went (cancelled, or no
    longer there when its turn comes) costs no check."""
    async def scenario():
        t = throttle.LoginThrottle()
        for _ in range(throttle.FREE_FAILURES + 1):
            t.failed("10.0.0.1", "guest")
        served = []
        loop = asyncio.get_running_loop()
        started = loop.time()
        waits = [t.admit("10.0.0.1", "guest", served.append, i,
                         alive=(lambda: False) if i % 4 == 3 else None) for i in range(12)]
        assert all(w is not None for w in waits)
        waits[1].cancel()
        # another user at the same address, without failures, is not in the line
        assert t.admit("10.0.0.1", "bob", served.append, "bob") is None
        while len(served) < 8:
            await asyncio.sleep(0.02)
        took = loop.time() - started
        await asyncio.sleep(0.3)
        return served, took, t
    served, took, t = asyncio.run(scenario())
    assert served == [0, 2, 4, 5, 6, 8, 9, 10], served
    # the first after the key's delay, then one per 1/CHECKS_PER_ADDRESS
    least = t.delay_for("10.0.0.1", "guest") + 7 / throttle.CHECKS_PER_ADDRESS
    assert least - 0.05 <= took < least + 0.5, took
    assert not t.lines          # an empty line is forgotten
