"""Failed logins, per source address: after FREE_FAILURES failures within
WINDOW seconds, every attempt from that address is refused without looking
at the password, for a back-off that doubles with each further failure (up
to MAX_BACKOFF). A successful login clears the address. Memory is bounded:
at most MAX_ADDRESSES are remembered, the oldest forgotten first."""
import time

FREE_FAILURES = 10
WINDOW = 60.0
FIRST_BACKOFF = 1.0
MAX_BACKOFF = 30.0
MAX_ADDRESSES = 10000


class LoginThrottle:
    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self.entries = {}       # address -> [failures, first failure, blocked until]

    def blocked_for(self, address):
        """Seconds this address must still wait; 0 = may try."""
        if not address:          # the control UNIX socket: the file's permissions guard it
            return 0.0
        entry = self.entries.get(address)
        if entry is None:
            return 0.0
        return max(0.0, entry[2] - self.clock())

    def failed(self, address):
        if not address:
            return
        now = self.clock()
        entry = self.entries.get(address)
        if entry is None or now - entry[1] > WINDOW and entry[2] <= now:
            if len(self.entries) >= MAX_ADDRESSES:
                self.entries.pop(next(iter(self.entries)))
            entry = self.entries[address] = [0, now, 0.0]
        entry[0] += 1
        over = entry[0] - FREE_FAILURES
        if over >= 0:
            entry[2] = now + min(MAX_BACKOFF, FIRST_BACKOFF * 2 ** over)
            entry[1] = now       # the window restarts: a blocked address stays watched

    def succeeded(self, address):
        self.entries.pop(address, None)
