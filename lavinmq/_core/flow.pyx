# cython: language_level=3
# Flow control of publishers, AMQP's and MQTT's alike.
#
# An AMQP or MQTT publisher that fills a consumed queue past FLOW_BACKLOG ready messages,
# or feeds one whose expired messages wait, is not read again until the
# queue lets it in: it joins that queue's line (FlowLine). After every
# delivery pass, and on a FLOW_TICK timer while anyone waits, each line lets
# in from its head about as many messages as the queue delivered since the
# last look (its credit). A publisher let in is counted on for as many
# publishes as its last read batch brought; what its next batch really
# brings is settled against the credit when that batch makes it wait again.
#
# Why a line and not a fixed pause per publisher: one loop turn reads every
# readable socket (a read is up to 256 KiB, ~3,700 small publishes) but runs
# one delivery pass per queue (DELIVERY_BUDGET deliveries). With 1,000
# publishers a turn took ~1 s and the consumer got one pass of 8,192
# messages per second, while the queue grew by millions; a 2 ms pause was
# shorter than such a turn, so it skipped nothing. Counting what comes in
# against what goes out keeps the turn short however many publishers wait,
# and, while the consumers keep up, the backlog near FLOW_BACKLOG.
#
# Beyond what the consumers take, a line takes in FLOW_TICK_SHARE messages
# per tick (~500k/s): publishers faster than the consumers still grow the
# queue (on disk, as a queue with slow or stuck consumers does, and as one
# publisher did under the old 2 ms pause), but at a bounded pace whatever
# their number, and never by more than a few read batches per loop turn,
# so the consumers keep their delivery pass every few milliseconds.
import asyncio
from collections import deque

from libc.stdint cimport int64_t, uint64_t

from lavinmq._core.channel cimport FLOW_BACKLOG
from lavinmq._core.queue cimport Queue
from lavinmq._core import queue as _queue_mod


cdef class FlowClient:
    """A connection whose reading may wait in a queue's line, or for a
    resource alarm to end: the base of lavinmq._core.connection.CoreConnection
    (AMQP) and lavinmq.mqtt._mqtt.MQTTCore (MQTT). `resume_after_flow()` is
    called when the line lets it in."""

    def slow_down(self):
        """A queue this connection publishes to is behind (its consumers, or
        its expiry; state.flow_queue). Its socket is not read until that
        queue's line lets it in, so its publisher blocks on a full socket and
        leaves the CPU to the consumers. One loop turn reads every readable
        socket but runs one delivery pass per queue: a thousand publishers
        let in at once left the subscriber a third of what they brought."""
        cdef Queue q = self.state.flow_queue
        self.state.flow_queue = None
        if q is None or self.transport is None or self.phase != self.open_phase or self.flow_line is not None:
            return
        if not self.paused_reading:
            self.transport.pause_reading()
            self.paused_reading = True
        flow_wait(self, q)

    def resume_after_flow(self):
        if self.flow_line is not None:
            flow_forget(self)      # let in by other means (an alarm's end)
        if self.paused_reading and self.transport is not None and self.phase == self.open_phase \
                and not self.state.blocked:
            self.paused_reading = False
            self.transport.resume_reading()

    def block_reading(self):
        if not self.paused_reading and self.transport is not None:
            self.transport.pause_reading()
            self.paused_reading = True

cdef double FLOW_TICK = 0.002     # seconds between looks while publishers wait

cdef enum:
    FLOW_CREDIT_MAX = 16384      # credit kept for a line (two delivery passes)
    FLOW_TICK_SHARE = 1024       # messages a line takes in per tick beyond what was delivered

cdef dict _lines = {}             # Queue -> FlowLine, while someone waits or it is in debt
cdef object _flow_timer = None


cdef class FlowLine:
    def __cinit__(self, Queue q):
        self.waiting = deque()
        self.delivered_mark = q.deliver_count


cdef inline bint _flow_reason(Queue q):
    """Whether q still has a reason to hold publishers back at all."""
    return not q.closed and (q.consumers or q.expiry_behind)


cdef int flow_wait(FlowClient c, Queue q) except -1:
    global _flow_timer
    cdef FlowLine line = _lines.get(q)
    if line is None:
        line = FlowLine(q)
        _lines[q] = line
    if c.flow_from is line:
        # what it brought since it was let in, against what was counted on
        line.credit += c.flow_reserved - <int64_t>c.flow_batch
    c.flow_from = None
    c.flow_line = line
    line.waiting.append(c)
    if _flow_timer is None:
        _flow_timer = asyncio.get_running_loop().call_later(FLOW_TICK, _flow_tick)
    return 0


cdef int flow_forget(FlowClient c) except -1:
    """c closed while waiting: its place is dropped, all such places at once
    when they are half the line (a line holds only connections, not churn)."""
    cdef FlowLine line = c.flow_line
    c.flow_line = None
    if line is None:
        return 0
    line.dead += 1
    if line.dead * 2 > len(line.waiting):
        line.waiting = deque(x for x in line.waiting if (<FlowClient>x).flow_line is line)
        line.dead = 0
    return 0


cdef int _flow_let_in(Queue q, FlowLine line, bint tick) except -1:
    cdef FlowClient c
    cdef uint64_t delivered = q.deliver_count - line.delivered_mark
    cdef bint everyone = not _flow_reason(q)
    cdef bint behind = q.expiry_behind or q.store.ready > FLOW_BACKLOG
    line.delivered_mark = q.deliver_count
    line.credit += <int64_t>delivered
    if not behind and line.credit < <int64_t>(FLOW_BACKLOG - q.store.ready):
        line.credit = <int64_t>(FLOW_BACKLOG - q.store.ready)     # room below the backlog mark
    if tick:
        line.credit += FLOW_TICK_SHARE
    while line.waiting and (everyone or line.credit > 0):
        c = <FlowClient>line.waiting.popleft()
        if c.flow_line is not line:     # closed, or resumed by other means
            if line.dead:
                line.dead -= 1
            continue
        c.flow_line = None
        c.flow_from = line
        c.flow_reserved = c.flow_batch if c.flow_batch else 1
        line.credit -= c.flow_reserved
        c.resume_after_flow()
    if line.credit > <int64_t>FLOW_CREDIT_MAX:
        line.credit = FLOW_CREDIT_MAX      # no hoarding while nobody waits
    return 0


cdef int _flow_turn(bint tick) except -1:
    if not _lines:
        return 0
    for q, line in list(_lines.items()):
        _flow_let_in(<Queue>q, <FlowLine>line, tick)
        # kept while in debt: the batches of those it let in are settled
        # against it when they wait again (a lone publisher, let in, empties
        # the line every time)
        if not (<FlowLine>line).waiting and (<FlowLine>line).credit >= 0:
            del _lines[q]
    return 0


def _flow_after_delivery():
    _flow_turn(False)


def _flow_tick():
    global _flow_timer
    _flow_timer = None
    _flow_turn(True)
    if _lines:
        _flow_timer = asyncio.get_running_loop().call_later(FLOW_TICK, _flow_tick)


_queue_mod.add_after_delivery_hook(_flow_after_delivery)


def flow_waiting():
    """{queue name: publishers waiting in its line} (tests, diagnostics)."""
    return {(<Queue>q).name: len((<FlowLine>line).waiting) - (<FlowLine>line).dead for q, line in _lines.items()}
