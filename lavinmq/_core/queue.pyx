# cython: language_level=3
import asyncio
import logging

from lavinmq._core.segment cimport MessageStore, SP

log = logging.getLogger("lavinmq.queue")

# Queues with work to do (new messages, freed consumer capacity, pending ack
# positions) are collected here and served once per loop iteration, so a
# read batch of N publishes costs one delivery pass, not N.
cdef list _dirty = []
cdef bint _pending = False
cdef list _after_hooks = []     # run after each delivery pass (flush sockets)

# messages one queue may deliver in one pass before yielding to the loop
cdef enum:
    DELIVERY_BUDGET = 8192


def add_after_delivery_hook(fn):
    _after_hooks.append(fn)


def run_delivery_pass():
    global _pending, _dirty
    cdef Queue q
    _pending = False
    work = _dirty
    _dirty = []
    for x in work:
        q = <Queue>x
        q.scheduled = False
        if q.closed:
            continue
        try:
            q.deliver_pending()
            q.store.flush_acks()
        except Exception:
            log.exception("delivery failed on queue %s", q.name)
            q.closed = True
    for fn in _after_hooks:
        fn()


cdef int schedule_queue(Queue q) except -1:
    global _pending
    if q.scheduled:
        return 0
    q.scheduled = True
    _dirty.append(q)
    if not _pending:
        _pending = True
        asyncio.get_running_loop().call_soon(run_delivery_pass)
    return 0


cdef class ConsumerBase:
    cdef bint has_capacity(self):
        return False

    cdef int deliver(self, const char *rec, SP sp, bint redelivered) except -1:
        raise NotImplementedError


cdef class Queue:

    def __init__(self, str name, vhost, MessageStore store):
        self.name = name
        self.vhost = vhost
        self.store = store
        self.consumers = []
        self.closed = store.closed      # its data could not be loaded

    cdef int schedule(self) except -1:
        return schedule_queue(self)

    cdef int publish(self, const char *rec, Py_ssize_t n) except -1:
        cdef SP sp
        self.store.append(rec, n, &sp)
        self.publish_count += 1
        if self.consumers:
            schedule_queue(self)
        return 0

    cdef ConsumerBase next_consumer(self):
        """Round robin among the consumers with capacity, preferring higher
        priority: a lower priority consumer only gets a message when every
        higher one is blocked."""
        cdef Py_ssize_t n = len(self.consumers)
        cdef Py_ssize_t i, idx
        cdef ConsumerBase c, best = None
        cdef Py_ssize_t best_idx = 0
        if n == 0:
            return None
        for i in range(n):
            idx = (self.rr + i) % n
            c = <ConsumerBase>self.consumers[idx]
            if (best is None or c.priority > best.priority) and c.has_capacity():
                best = c
                best_idx = idx
        if best is not None:
            self.rr = best_idx + 1
        return best

    cdef int deliver_pending(self) except -1:
        cdef ConsumerBase c
        cdef SP sp
        cdef bint redelivered
        cdef const char *rec
        cdef int budget = DELIVERY_BUDGET
        while self.store.ready and budget > 0:
            c = self.next_consumer()
            if c is None:
                return 0
            rec = self.store.shift(&sp, &redelivered)
            if rec is NULL:
                return 0
            budget -= 1
            self.deliver_count += 1
            if redelivered:
                self.redeliver_count += 1
            if c.no_ack:
                c.deliver(rec, sp, redelivered)
                self.store.delete(sp)
            else:
                self.unacked_count += 1
                self.unacked_bytes += sp.size
                c.deliver(rec, sp, redelivered)
        if budget == 0 and self.store.ready:
            schedule_queue(self)
        return 0

    cdef const char *get(self, SP *sp, bint *redelivered) except? NULL:
        cdef const char *rec = self.store.shift(sp, redelivered)
        if rec is not NULL:
            self.get_count += 1
            if redelivered[0]:
                self.redeliver_count += 1
        return rec

    cdef int ack(self, SP sp) except -1:
        if self.closed:
            return 0
        self.unacked_count -= 1
        self.unacked_bytes -= sp.size
        self.ack_count += 1
        self.store.delete(sp)
        schedule_queue(self)
        return 0

    cdef int reject(self, SP sp, bint requeue) except -1:
        if self.closed:
            return 0
        self.unacked_count -= 1
        self.unacked_bytes -= sp.size
        if requeue:
            self.store.requeue(sp)
        else:
            self.store.delete(sp)
            self.on_dropped()
        schedule_queue(self)
        return 0

    cdef int consumer_settled(self, ConsumerBase c, SP sp, bint acked, bint requeue) except -1:
        """Queues with per_consumer_acks (streams) implement this."""
        raise NotImplementedError

    def on_dropped(self):
        """A message was rejected without requeue (dead-lettering hooks in here)."""

    # -- Python-facing -------------------------------------------------------

    def add_consumer(self, ConsumerBase c):
        cdef Py_ssize_t i = 0
        cdef ConsumerBase other
        for i in range(len(self.consumers) + 1):
            if i == len(self.consumers):
                break
            other = self.consumers[i]
            if other.priority < c.priority:
                break
        self.consumers.insert(i, c)
        schedule_queue(self)

    def remove_consumer(self, ConsumerBase c):
        try:
            self.consumers.remove(c)
        except ValueError:
            pass

    # -- the management API's publish and get (per request, not per message) --

    def publish_record(self, bytes rec):
        if not self.closed:
            self.publish(rec, len(rec))

    def take_records(self, Py_ssize_t count, bint requeue):
        """-> [(record bytes, redelivered)] of up to count ready messages,
        put back (requeue) or removed as acked."""
        cdef SP sp
        cdef bint redelivered
        cdef const char *rec
        out, taken = [], []
        while len(out) < count and not self.closed:
            rec = self.store.shift(&sp, &redelivered)
            if rec is NULL:
                break
            out.append((rec[:sp.size], redelivered))
            taken.append((sp.seg, sp.pos, sp.size))
            self.get_count += 1
        for seg, pos, size in reversed(taken):
            sp.seg, sp.pos, sp.size = seg, pos, size
            if requeue:
                self.store.requeue(sp)
            else:
                self.ack_count += 1
                self.store.delete(sp)
        if requeue and taken:
            schedule_queue(self)
        return out

    def notify(self):
        """Consumer capacity or state changed: try to deliver."""
        schedule_queue(self)

    def add_unacked_from_get(self, uint32_t size):
        self.unacked_count += 1
        self.unacked_bytes += size

    @property
    def message_count(self):
        return self.store.ready

    @property
    def consumer_count(self):
        return len(self.consumers)

    def purge(self):
        if self.closed:
            return 0
        return self.store.purge()
