"""Failed logins slow down password guessing, per (source address, user).

The first back-off counted failures per address and, once past the limit,
refused every login from that address without looking at the password:
a guesser at the same address (every local client is 127.0.0.1; every
client behind one proxy or NAT shares one) kept a user who knows the
password out completely, and any valid login reset the counter for all.

Now, per (address, user): after FREE_FAILURES failures within WINDOW
seconds, each further attempt is *answered late* -- FIRST_DELAY seconds,
doubling with each failure up to MAX_DELAY -- but always checked. So:

- a user with the right password gets in, at worst MAX_DELAY later while
  their address has fewer than CHECKS_PER_ADDRESS * MAX_DELAY logins
  backing off; nobody can lock anybody out;
- one address has at most CHECKS_PER_ADDRESS passwords checked per second
  while backing off, however many sockets it opens: the attempts wait in
  one line per address (first come, first checked), so 300 parallel
  sockets buy no more guesses than 30 do (they bought 100 checks/s when
  each socket waited on its own). The price is honest and bounded: a user
  whose own address floods the line waits their turn in it, (logins ahead)
  / CHECKS_PER_ADDRESS seconds -- whatever tells the right password apart
  quickly would tell a guesser too;
- failures of one user never slow another (only attempts of a key that is
  backing off join the line), a success clears nothing (a valid account
  cannot be used to reset the count: failures only expire, WINDOW after
  the last one);
- usernames that do not exist share one key per address, so a flood of
  made-up names cannot push real entries out.

The delay's exponent is capped: 1,030 failures once made `2 ** over` too
large for a float, and every later login of that user raised. The log gets
one line when a key starts backing off and one when its episode is over,
not one per attempt.

Memory is bounded: at most MAX_ENTRIES keys, those no longer backing off
forgotten first; a line holds one entry per socket waiting in it, and
sockets are capped per address (lavinmq.listener)."""
import asyncio
import collections
import logging
import time

log = logging.getLogger("lavinmq.auth")

FREE_FAILURES = 5
WINDOW = 60.0
FIRST_DELAY = 0.5
MAX_DELAY = 3.0
MAX_DOUBLINGS = 8           # FIRST_DELAY * 2 ** 8 is far past MAX_DELAY already
CHECKS_PER_ADDRESS = 10     # passwords checked per second for one address while it backs off
MAX_ENTRIES = 10000
UNKNOWN_USER = ""       # the key's user part for names that are not users


class Waiting:
    """A login waiting in its address's line; cancel() when its socket goes."""
    __slots__ = ("ready_at", "callback", "args", "alive", "cancelled")

    def __init__(self, ready_at, callback, args, alive):
        self.ready_at = ready_at
        self.callback = callback
        self.args = args
        self.alive = alive          # -> False when the client went while it waited
        self.cancelled = False

    def cancel(self):
        self.cancelled = True
        self.callback = self.args = self.alive = None


class AddressLine:
    """The logins of one address that back off, checked in their order, at
    most CHECKS_PER_ADDRESS a second."""
    __slots__ = ("waiting", "next_check", "timer")

    def __init__(self):
        self.waiting = collections.deque()
        self.next_check = 0.0
        self.timer = None


class LoginThrottle:
    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self.entries = {}       # (address, user) -> [failures, last failure, first failure]
        self.lines = {}         # address -> AddressLine

    @staticmethod
    def key(address, username, exists):
        return address, (username if exists else UNKNOWN_USER)

    def delay_for(self, address, user):
        """Seconds to wait before answering a login of `user` (a key's user
        part: the name, or UNKNOWN_USER) from `address`; 0 = answer now."""
        if not address:          # the control UNIX socket: the file's permissions guard it
            return 0.0
        entry = self.entries.get((address, user))
        if entry is None:
            return 0.0
        failures, last, _ = entry
        if self.clock() - last > WINDOW:
            self._episode_over((address, user), entry)
            del self.entries[(address, user)]
            return 0.0
        over = failures - FREE_FAILURES
        return 0.0 if over < 0 else min(MAX_DELAY, FIRST_DELAY * (1 << min(over, MAX_DOUBLINGS)))

    def admit(self, address, user, callback, *args, alive=None):
        """A login of `user` from `address` is about to be checked: None
        when it may be at once (the caller checks it), else a Waiting, and
        callback(*args) is called when its turn comes -- unless alive(),
        asked then, says the client went (no check is spent on it)."""
        delay = self.delay_for(address, user)
        if not delay:
            return None
        now = self.clock()
        line = self.lines.get(address)
        if line is None:
            line = self.lines[address] = AddressLine()
        w = Waiting(now + delay, callback, args, alive)
        line.waiting.append(w)
        if line.timer is None:
            self._serve(address, line)
        return w

    def _serve(self, address, line):
        """Check the next logins of the line whose time has come, then wait
        for the next one's."""
        line.timer = None
        waiting = line.waiting
        while True:
            while waiting and waiting[0].cancelled:
                waiting.popleft()
            now = self.clock()
            if not waiting:
                if now >= line.next_check:
                    del self.lines[address]
                else:       # kept until then: a new line must not start with a burst
                    line.timer = asyncio.get_running_loop().call_later(
                        line.next_check - now, self._serve, address, line)
                return
            w = waiting[0]
            due = max(w.ready_at, line.next_check)
            if due > now:
                line.timer = asyncio.get_running_loop().call_later(due - now, self._serve, address, line)
                return
            waiting.popleft()
            callback, args, alive = w.callback, w.args, w.alive
            w.cancel()
            if alive is not None and not alive():
                continue
            line.next_check = now + 1.0 / CHECKS_PER_ADDRESS
            try:
                callback(*args)
            except Exception:
                log.exception("a login answered late failed")

    def failed(self, address, user):
        """A login of the key failed -> whether the caller should log it
        (not while the key backs off: its episode has a line of its own)."""
        if not address:
            return True
        now = self.clock()
        key = (address, user)
        entry = self.entries.get(key)
        if entry is None or now - entry[1] > WINDOW:
            if entry is not None:
                self._episode_over(key, entry)
            if len(self.entries) >= MAX_ENTRIES:
                self._forget_one(now)
            entry = self.entries[key] = [0, now, now]
        entry[0] += 1
        entry[1] = now
        if entry[0] == FREE_FAILURES + 1:
            log.warning("%d failed logins of %s from %s within %d s: its logins from there are answered "
                        "late now (up to %.1f s; at most %d passwords checked per second from that address)",
                        entry[0], _who(user), address, WINDOW, MAX_DELAY, CHECKS_PER_ADDRESS)
        return entry[0] <= FREE_FAILURES

    @staticmethod
    def _episode_over(key, entry):
        failures, last, first = entry
        if failures > FREE_FAILURES:
            log.warning("failed logins of %s from %s: %d in %.0f s, backing off ended", _who(key[1]), key[0],
                        failures, last - first)

    def _forget_one(self, now):
        # expired entries first, then those still under the free failures,
        # then the oldest: a blocked key is the last to go
        oldest = None
        for k, entry in self.entries.items():
            if now - entry[1] > WINDOW:
                self._episode_over(k, entry)
                del self.entries[k]
                return
            if entry[0] < FREE_FAILURES and oldest is None:
                oldest = k
        del self.entries[oldest if oldest is not None else next(iter(self.entries))]


def _who(user):
    return f"user {user!r}" if user != UNKNOWN_USER else "unknown users"
