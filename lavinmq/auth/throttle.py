"""Failed logins slow down password guessing, per (source address, user).

The first back-off counted failures per address and, once past the limit,
refused every login from that address without looking at the password:
a guesser at the same address (every local client is 127.0.0.1; every
client behind one proxy or NAT shares one) kept a user who knows the
password out completely, and any valid login reset the counter for all.

Now, per (address, user): after FREE_FAILURES failures within WINDOW
seconds, each further attempt is *answered late* -- DELAY seconds, doubling
with each failure up to MAX_DELAY -- but always checked. So:

- a user with the right password always gets in, at worst MAX_DELAY later
  (below the connect timeouts of clients); nobody can lock anybody out;
- a guesser waits DELAY for each answer, whatever it sends: one connection
  guesses at most 1/MAX_DELAY per second, and the sockets it may hold open
  before login are capped per address (lavinmq.listener);
- failures of one user never slow another, a success clears nothing (a
  valid account cannot be used to reset the count: failures only expire,
  WINDOW after the last one);
- usernames that do not exist share one key per address, so a flood of
  made-up names cannot push real entries out.

Memory is bounded: at most MAX_ENTRIES keys, those no longer backing off
forgotten first."""
import time

FREE_FAILURES = 5
WINDOW = 60.0
FIRST_DELAY = 0.5
MAX_DELAY = 3.0
MAX_ENTRIES = 10000
UNKNOWN_USER = ""       # the key's user part for names that are not users


class LoginThrottle:
    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self.entries = {}       # (address, user) -> [failures, last failure]

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
        failures, last = entry
        if self.clock() - last > WINDOW:
            del self.entries[(address, user)]
            return 0.0
        over = failures - FREE_FAILURES
        return 0.0 if over < 0 else min(MAX_DELAY, FIRST_DELAY * 2 ** over)

    def failed(self, address, user):
        if not address:
            return
        now = self.clock()
        entry = self.entries.get((address, user))
        if entry is None or now - entry[1] > WINDOW:
            if len(self.entries) >= MAX_ENTRIES:
                self._forget_one(now)
            entry = self.entries[(address, user)] = [0, now]
        entry[0] += 1
        entry[1] = now

    def _forget_one(self, now):
        # expired entries first, then those still under the free failures,
        # then the oldest: a blocked key is the last to go
        oldest = None
        for k, (failures, last) in self.entries.items():
            if now - last > WINDOW:
                del self.entries[k]
                return
            if failures < FREE_FAILURES and oldest is None:
                oldest = k
        del self.entries[oldest if oldest is not None else next(iter(self.entries))]
