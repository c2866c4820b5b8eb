"""The interpreter's switch interval while the event loop runs long work.

The group commit's fdatasyncs (lavinmq.sync) and policy writes run in
worker threads, which need the GIL for the Python around each system call.
While the event loop computes (a slice of a long API answer, of a policy
change, of a metrics scrape), a thread that wants the GIL waits for the
interpreter's switch interval, 5 ms by default, each time: a flush took 4-6
of them, and a second tenant's publisher confirms waited 25-45 ms (p50)
while another tenant's listings ran. Half a millisecond lets the flush
through.

Set for the whole process, the short interval cost the message path: the
loop handed the GIL to the fsync threads ten times as often, and confirmed
publishing (compare.py's `confirms -c 1000`) lost ~20%. So it is set only
while some long work is under way, and the default comes back when the last
one ends: a broker nobody runs such work on pays nothing.

Everything here runs on the event loop's thread: a plain counter is enough."""
import sys

BUSY_INTERVAL = 0.0005      # seconds: the switch interval while long work runs

_running = 0
_normal = None              # the interval to go back to


def begin():
    global _running, _normal
    if _running == 0:
        _normal = sys.getswitchinterval()
        sys.setswitchinterval(BUSY_INTERVAL)
    _running += 1


def end():
    global _running
    if _running == 0:
        return
    _running -= 1
    if _running == 0:
        sys.setswitchinterval(_normal)


class running:
    """`with long_work.running():` around long work, awaits included."""

    def __enter__(self):
        begin()
        return self

    def __exit__(self, *exc):
        end()
        return False
