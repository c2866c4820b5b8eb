# cython: language_level=3
# A queue over its message store: publish, expiry, dropping and
# dead-lettering, settings from arguments and policies, delivery to
# consumers. Included: _delivery_pass.pxi (the once-per-loop-iteration
# delivery scheduler).
import asyncio
import logging

from libc.stdint cimport uint32_t, uint64_t, int64_t
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE

from lavinmq._core.buffer cimport WriteBuffer, le64
from lavinmq._core.clock cimport now_ms
from lavinmq._core.deadletter cimport (
    build_dead_letter, build_with_int_header, is_cycle, DL_REJECTED, DL_EXPIRED, DL_MAXLEN,
    DL_DELIVERY_LIMIT,
)
from libc.stdlib cimport calloc, free
from lavinmq._core.props cimport (
    record_expiration, record_props_offset, record_body_len, has_prop, P_EXPIRATION,
)
from lavinmq._core.routing cimport Exchange, RouteOut, acquire_route_out, release_route_out
from lavinmq._core.exchange_store cimport keep_routed
from lavinmq._core.segment cimport MessageStore, SP, APPEND_NO_SPACE, CountMap, sp_key

log = logging.getLogger("lavinmq.queue")

# messages one queue may deliver in one pass before yielding to the loop
cdef enum:
    DELIVERY_BUDGET = 8192
    # dead-lettering into a queue that dead-letters again (drop-head into a
    # full queue, ...) nests; cycles are cut by the x-death rule, this is
    # the backstop
    MAX_DL_DEPTH = 16

# one scratch buffer per nesting level of dead-lettering: no object per message
cdef list _dl_bufs = [WriteBuffer() for _ in range(MAX_DL_DEPTH)]
cdef int _dl_depth = 0

# the consumer list of every queue that has none: add_consumer gives a queue
# its own before inserting (an empty list is 56 bytes, 100,000 queues 5.6 MB)
cdef list NO_CONSUMERS = []

# LavinMQ's RoughTime: wall-clock ms, read once a second by the broker's
# housekeeping. Deliveries are stamped with it (what the API's unacked
# messages show); a queue that times its consumers stamps the exact time.
cdef uint64_t rough_ms = now_ms()


def tick_rough_clock():
    global rough_ms
    rough_ms = now_ms()

# the redelivery copy with x-delivery-count is built here: one buffer, reused
cdef WriteBuffer _count_buf = WriteBuffer()


REASON_NAMES = {DL_REJECTED: "rejected", DL_EXPIRED: "expired", DL_MAXLEN: "maxlen",
                DL_DELIVERY_LIMIT: "delivery_limit"}


include "_delivery_pass.pxi"


cdef class ConsumerBase:
    cdef bint has_capacity(self):
        return False

    cdef int deliver(self, const char *rec, SP sp, bint redelivered) except -1:
        raise NotImplementedError


cdef class QueueExtras:

    def __cinit__(self):
        self.ttl = -1
        self.max_length = -1
        self.max_length_bytes = -1
        self.delivery_limit = -1


cdef class Queue:

    def __init__(self, str name, vhost, MessageStore store):
        self.name = name
        self.vhost = vhost
        self.store = store
        self.consumers = NO_CONSUMERS
        self.closed = store.closed      # its data could not be loaded

    cdef QueueExtras extras(self):
        # the queue's extras, made on first need (a setting, a message with
        # its own TTL): never per message
        if self.x is None:
            self.x = QueueExtras()
        return self.x

    cdef int schedule(self) except -1:
        return schedule_queue(self)

    cdef bytes name_b(self):
        # the name as x-death records it: once per queue, not per message
        if self._name_bytes is None:
            self._name_bytes = self.name.encode("utf-8", "surrogateescape")
        return self._name_bytes

    # -- publish -----------------------------------------------------------------

    cdef int publish(self, const char *rec, Py_ssize_t n) except -1:
        """-> 0, or PUBLISH_NO_SPACE / PUBLISH_REJECTED (nothing stored)."""
        cdef SP sp
        if self.ext:
            return self.publish_ext(rec, n)
        if has_prop(rec + record_props_offset(rec), P_EXPIRATION):
            # any queue honours a message's own TTL: from here on this one checks
            self.extras().msg_ttl = True
            self.update_ext()
            return self.publish_ext(rec, n)
        if self.store.append(rec, n, &sp):
            return PUBLISH_NO_SPACE
        self.publish_count += 1
        if self.consumers:
            schedule_queue(self)
        return 0

    cdef int publish_ext(self, const char *rec, Py_ssize_t n) except -1:
        cdef SP sp
        cdef MessageStore st = self.store
        cdef QueueExtras x = self.x       # not None: ext is set
        cdef bint own_ttl
        if x.dedup is not None and x.dedup.seen(rec):
            return 0        # a duplicate: dropped, and still confirmed
        if x.overflow != OVERFLOW_DROP_HEAD and (x.max_length >= 0 or x.max_length_bytes >= 0):
            if ((x.max_length >= 0 and <int64_t>st.ready >= x.max_length)
                    or (x.max_length_bytes >= 0
                        and <int64_t>(st.ready_body + record_body_len(rec)) > x.max_length_bytes)):
                self.rejected_publish_count += 1
                if x.overflow == OVERFLOW_REJECT_PUBLISH_DLX:
                    self.dead_letter(rec, DL_MAXLEN)
                return PUBLISH_REJECTED
        if st.append(rec, n, &sp):
            return PUBLISH_NO_SPACE
        self.publish_count += 1
        own_ttl = has_prop(rec + record_props_offset(rec), P_EXPIRATION)
        if own_ttl:
            x.msg_ttl = True
        if x.overflow == OVERFLOW_DROP_HEAD:
            while self.over_limit():
                self.drop_head(DL_MAXLEN)
        if x.ttl >= 0 or own_ttl:
            if x.ttl == 0 or (own_ttl and record_expiration(rec) == 0):
                # deliver now or drop: the delivery pass decides
                schedule_queue(self)
            elif x.expiry_at == 0:
                self.arm_expiry(now_ms())
        if self.consumers:
            schedule_queue(self)
        return 0

    cdef int over_limit(self):
        cdef MessageStore st = self.store
        cdef QueueExtras x = self.x
        return x is not None and (
            (x.max_length >= 0 and <int64_t>st.ready > x.max_length)
            or (x.max_length_bytes >= 0 and <int64_t>st.ready_body > x.max_length_bytes))

    def drop_head(self, int reason):
        cdef SP sp
        cdef bint redelivered
        cdef const char *rec = self.store.shift(&sp, &redelivered)
        if rec is not NULL:
            self.drop(rec, sp, reason)

    # -- expiry ---------------------------------------------------------------------

    cdef int64_t expires_at(self, const char *rec):
        """When the message expires (ms), -1 never."""
        cdef QueueExtras x = self.x
        cdef int64_t ttl
        cdef int64_t own
        if x is None:
            return -1
        ttl = x.ttl
        if x.msg_ttl:
            own = record_expiration(rec)
            if own >= 0 and (ttl < 0 or own < ttl):
                ttl = own
        if ttl < 0:
            return -1
        return <int64_t>le64(rec) + ttl

    cdef bint is_expired(self, const char *rec, uint64_t now, bint zero_expires):
        """zero_expires: whether a TTL of 0 counts as expired here (it does
        unless a consumer is taking the message right now)."""
        cdef int64_t at = self.expires_at(rec)
        if at < 0:
            return False
        if at == <int64_t>le64(rec):
            return zero_expires
        return <int64_t>now >= at

    cdef int expire_head(self, uint64_t now, bint zero_expires) except -1:
        """Drop (dead-letter) expired messages at the head, as RabbitMQ
        does: a message behind an unexpired one waits for its turn."""
        cdef SP sp, sp2
        cdef bint redelivered
        cdef const char *rec
        cdef int dropped = 0
        self.expiry_behind = False
        while True:
            rec = self.store.peek(&sp)
            if rec is NULL or not self.is_expired(rec, now, zero_expires):
                break
            if dropped == EXPIRY_BUDGET:
                # more are due: the loop serves others first, and publishers
                # into this queue are slowed until expiry catches up
                self.expiry_behind = True
                break
            rec = self.store.shift(&sp2, &redelivered)
            self.drop(rec, sp2, DL_EXPIRED)
            dropped += 1
        if dropped:
            self.store.flush_acks()
        return dropped

    cdef int arm_expiry(self, uint64_t now) except -1:
        """Arm the timer for the head's expiry (not per message: once per
        head, and at most every EXPIRY_MIN_INTERVAL ms)."""
        cdef SP sp
        cdef const char *rec = self.store.peek(&sp)
        cdef int64_t at
        if rec is NULL:
            return 0
        at = self.expires_at(rec)
        if at < 0:
            return 0
        if at < <int64_t>(now + EXPIRY_MIN_INTERVAL):
            at = now + EXPIRY_MIN_INTERVAL
        if self.x.expiry_at and self.x.expiry_at <= <uint64_t>at:
            return 0
        self.x.expiry_at = at
        self.set_expiry_timer((at - <int64_t>now) / 1000.0)
        return 0

    def set_expiry_timer(self, double delay):
        cdef QueueExtras x = self.extras()
        if x.expiry_timer is not None:
            x.expiry_timer.cancel()
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:        # no loop (tools, unit tests): no time passes either
            x.expiry_at = 0
            return
        x.expiry_timer = loop.call_later(delay, self.on_expiry_timer)

    def on_expiry_timer(self):
        cdef uint64_t now = now_ms()
        cdef QueueExtras x = self.extras()
        x.expiry_timer = None
        x.expiry_at = 0
        if self.closed:
            return
        try:
            self.expire_head(now, self.next_consumer() is None)
            if self.expiry_behind:
                self.set_expiry_timer(0)        # the rest on the next loop turn
                x.expiry_at = now
            else:
                self.arm_expiry(now)
        except Exception:
            log.exception("expiring messages failed on queue %s", self.name)

    # -- dropping and dead-lettering ---------------------------------------------

    cdef int drop(self, const char *rec, SP sp, int reason) except -1:
        """The message leaves the queue without being delivered."""
        if reason == DL_EXPIRED:
            self.expired_count += 1
        self.dropped_count += 1
        if self.x is not None:
            if self.x.dlx is not None:
                self.dead_letter(rec, reason)
            if self.x.deliveries is not None:
                self.x.deliveries.remove(sp_key(sp))
        self.store.delete(sp)
        return 0

    cdef int dead_letter(self, const char *rec, int reason) except -1:
        """Publish a copy with x-death to the dead-letter exchange."""
        global _dl_depth
        cdef WriteBuffer wb
        cdef Exchange ex
        cdef Queue q
        cdef Py_ssize_t n, exlen, po, i
        cdef const char *r
        cdef RouteOut out
        cdef int kept_rc = 0            # a full disk: the copy is lost either way
        cdef QueueExtras x = self.x
        if x is None or x.dlx is None or _dl_depth >= MAX_DL_DEPTH:
            return 0
        if x.dlx_ex is None or x.dlx_ex.deleted or x.dlx_ver != self.routing_version.value:
            x.dlx_ex = self.lookup_dead_letter_exchange()
            x.dlx_ver = self.routing_version.value
        ex = x.dlx_ex
        if ex is None:
            return 0        # as RabbitMQ: a missing dead-letter exchange drops the message
        wb = <WriteBuffer>_dl_bufs[_dl_depth]
        n = build_dead_letter(wb, rec, reason, self.name_b(), x.dlx, x.dlrk, now_ms())
        r = wb.buf
        exlen = <unsigned char>r[8]
        po = record_props_offset(r)
        self.dead_lettered_count += 1
        out = acquire_route_out()
        _dl_depth += 1
        try:
            # routed with its CC keys too when it kept them (no dead-letter routing key)
            ex.route(out, r + 10 + exlen, <unsigned char>r[9 + exlen], r + po, n - po)
            if out.npstores:
                r = keep_routed(out, r, &n, &kept_rc)
            for i in range(out.nq):
                q = <Queue><object>out.queues[i]
                if q.closed or is_cycle(r, q.name_b()):
                    continue
                q.publish(r, n)
        finally:
            _dl_depth -= 1
            release_route_out(out)
        return 0

    def lookup_dead_letter_exchange(self):
        """-> the Exchange named by dlx, or None (vhost lookup, only when the
        vhost's routing changed)."""
        return None

    # -- settings (from arguments and policies; per queue, not per message) --------

    def apply_settings(self, ttl=None, max_length=None, max_length_bytes=None, overflow="drop-head",
                       dlx=None, dlrk=None):
        """Set the queue semantics; None turns one off. Applied at once to
        what the queue holds (a lower limit drops the head, a TTL expires)."""
        cdef QueueExtras x
        cdef int ov = {"reject-publish": OVERFLOW_REJECT_PUBLISH,
                       "reject-publish-dlx": OVERFLOW_REJECT_PUBLISH_DLX}.get(overflow, OVERFLOW_DROP_HEAD)
        if (self.x is None and ttl is None and max_length is None and max_length_bytes is None
                and ov == OVERFLOW_DROP_HEAD and dlx is None):
            return      # nothing set, nothing was: the queue stays without extras
        x = self.extras()
        x.ttl = -1 if ttl is None else ttl
        x.max_length = -1 if max_length is None else max_length
        x.max_length_bytes = -1 if max_length_bytes is None else max_length_bytes
        x.overflow = ov
        x.dlx = None if dlx is None else dlx.encode("utf-8", "surrogateescape")
        x.dlrk = None if dlrk is None else dlrk.encode("utf-8", "surrogateescape")
        x.dlx_ex = None
        if x.max_length_bytes >= 0:
            self.store.count_body_bytes()
        self.update_ext()
        if self.closed:
            return
        if x.overflow == OVERFLOW_DROP_HEAD:
            while self.over_limit():
                self.drop_head(DL_MAXLEN)
            self.store.flush_acks()
        self.check_expiry()

    def check_expiry(self):
        """Expire the head now and arm the timer (after settings change, or
        at start when messages with their own TTL may be stored)."""
        cdef uint64_t now
        cdef QueueExtras x = self.x
        if self.closed or x is None:
            return
        now = now_ms()
        if x.expiry_timer is not None:
            x.expiry_timer.cancel()
            x.expiry_timer = None
        x.expiry_at = 0
        if x.ttl >= 0 or x.msg_ttl:
            self.expire_head(now, not self.consumers)
            self.arm_expiry(now)

    def note_message_ttls(self):
        """Messages with their own expiration may be in the store (after a
        restart we don't know): check them at the head."""
        if self.store.ready:
            self.extras().msg_ttl = True
            self.ext = True

    def stop_timers(self):
        cdef QueueExtras x = self.x
        if x is None:
            return
        if x.expiry_timer is not None:
            x.expiry_timer.cancel()
            x.expiry_timer = None
        x.expiry_at = 0

    # -- delivery ---------------------------------------------------------------------

    cdef ConsumerBase next_consumer(self):
        """Round robin among the consumers with capacity, preferring higher
        priority: a lower priority consumer only gets a message when every
        higher one is blocked."""
        cdef Py_ssize_t n = len(self.consumers)
        cdef Py_ssize_t i, idx
        cdef ConsumerBase c, best = None
        cdef Py_ssize_t best_idx = 0
        if n == 0 or self.paused:
            return None
        if self.single_active:
            c = self.x.active
            return c if c is not None and c.has_capacity() else None
        if n == 1:
            c = <ConsumerBase>self.consumers[0]
            return c if c.has_capacity() else None
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
        cdef ConsumerBase c = None
        cdef SP sp
        cdef bint redelivered
        cdef const char *rec
        cdef int budget = DELIVERY_BUDGET
        cdef QueueExtras x = self.x
        cdef bint expiring = self.ext and (x.ttl >= 0 or x.msg_ttl)
        cdef bint limited = x is not None and x.delivery_limit >= 0
        cdef uint64_t now = now_ms() if expiring or self.consumer_timeout else rough_ms
        if self.paused:
            return 0
        while self.store.ready and budget > 0:
            c = self.next_consumer()
            if c is None:
                break
            rec = self.store.shift(&sp, &redelivered)
            if rec is NULL:
                break
            if expiring and self.is_expired(rec, now, False):
                self.drop(rec, sp, DL_EXPIRED)
                continue
            budget -= 1
            self.deliver_count += 1
            if redelivered:
                self.redeliver_count += 1
            if c.no_ack:
                self.deliver_no_ack_count += 1
                c.deliver(rec, sp, redelivered)
                self.store.delete(sp)
            else:
                self.unacked_count += 1
                self.unacked_bytes += sp.size
                if limited:
                    rec = self.count_delivery(rec, sp)
                c.deliver_time = now
                c.deliver(rec, sp, redelivered)
        if budget == 0 and self.store.ready:
            schedule_queue(self)
        elif expiring and self.store.ready:
            # no consumer can take more: what had TTL 0 expires now
            self.expire_head(now, True)
            if self.expiry_behind and x.expiry_timer is None:
                self.set_expiry_timer(0)
        elif x is not None and x.msg_ttl and not self.store.ready and not self.unacked_count:
            # nothing left that could carry its own expiration
            x.msg_ttl = False
            self.update_ext()
        return 0

    cdef void update_ext(self):
        cdef QueueExtras x = self.x
        self.ext = x is not None and (
            x.ttl >= 0 or x.msg_ttl or x.max_length >= 0 or x.max_length_bytes >= 0
            or x.dlx is not None or x.dedup is not None)

    def set_dedup(self, Deduper dedup):
        if dedup is not None or self.x is not None:
            self.extras().dedup = dedup
        self.update_ext()

    cdef const char *get(self, SP *sp, bint *redelivered, bint no_ack) except? NULL:
        cdef const char *rec
        cdef QueueExtras x = self.x
        cdef bint expiring = self.ext and (x.ttl >= 0 or x.msg_ttl)
        cdef uint64_t now = now_ms() if expiring else 0
        while True:
            rec = self.store.shift(sp, redelivered)
            if rec is NULL or not expiring or not self.is_expired(rec, now, True):
                break
            self.drop(rec, sp[0], DL_EXPIRED)
        if rec is not NULL:
            self.get_count += 1
            if redelivered[0]:
                self.redeliver_count += 1
            if x is not None and x.delivery_limit >= 0 and not no_ack:
                rec = self.count_delivery(rec, sp[0])
        return rec

    cdef const char *count_delivery(self, const char *rec, SP sp) except NULL:
        """One more delivery of this message; from the second on it carries
        x-delivery-count (the deliveries before this one), as LavinMQ."""
        cdef uint64_t key = sp_key(sp)
        cdef CountMap deliveries = self.x.deliveries
        cdef uint32_t n = deliveries.get(key)
        deliveries.put(key, n + 1)
        if n == 0:
            return rec
        build_with_int_header(_count_buf, rec, b"x-delivery-count", 16, n)
        return _count_buf.buf

    cdef int ack(self, SP sp) except -1:
        if self.closed:
            return 0
        self.unacked_count -= 1
        self.unacked_bytes -= sp.size
        self.ack_count += 1
        if self.x is not None and self.x.deliveries is not None:
            self.x.deliveries.remove(sp_key(sp))
        self.store.delete(sp)
        schedule_queue(self)
        return 0

    cdef int reject(self, SP sp, bint requeue) except -1:
        if self.closed:
            return 0
        self.unacked_count -= 1
        self.unacked_bytes -= sp.size
        cdef QueueExtras x = self.x
        if requeue:
            if x is None or x.deliveries is None:
                self.store.requeue(sp)
            elif x.delivery_limit >= 0 and x.deliveries.get(sp_key(sp)) > <uint64_t>x.delivery_limit:
                self.drop(self.store.read(sp), sp, DL_DELIVERY_LIMIT)
            else:
                self.store.requeue(sp, x.deliveries.get(sp_key(sp)))
        else:
            if x is not None:
                if x.dlx is not None:
                    self.dead_letter(self.store.read(sp), DL_REJECTED)
                if x.deliveries is not None:
                    x.deliveries.remove(sp_key(sp))
            self.store.delete(sp)
        schedule_queue(self)
        return 0

    cdef int consumer_settled(self, ConsumerBase c, SP sp, bint acked, bint requeue) except -1:
        """Queues with per_consumer_acks (streams) implement this."""
        raise NotImplementedError


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
        if self.consumers is NO_CONSUMERS:
            self.consumers = []
        self.consumers.insert(i, c)
        if self.single_active:
            self.x.subscribed.append(c)
            if self.x.active is None:
                self.x.active = c
        schedule_queue(self)

    def remove_consumer(self, ConsumerBase c):
        try:
            self.consumers.remove(c)
        except ValueError:
            pass
        if not self.consumers:
            self.consumers = NO_CONSUMERS   # an idle queue holds no list of its own
        cdef QueueExtras x = self.x
        if self.single_active:
            if c in x.subscribed:
                x.subscribed.remove(c)
            if x.active is c:
                # the next in order of subscription takes over
                x.active = x.subscribed[0] if x.subscribed else None
                schedule_queue(self)

    def set_single_active(self, bint on):
        cdef QueueExtras x
        if not on and self.x is None:
            return
        x = self.extras()
        self.single_active = on
        x.subscribed = list(self.consumers) if on else None
        x.active = x.subscribed[0] if on and x.subscribed else None

    def set_delivery_limit(self, limit):
        cdef QueueExtras x
        if limit is None and self.x is None:
            return
        x = self.extras()
        x.delivery_limit = -1 if limit is None else limit
        if x.delivery_limit >= 0 and x.deliveries is None:
            x.deliveries = CountMap()
            # what requeued.N kept of deliveries before a restart
            for key, n in self.store.redelivery_counts():
                x.deliveries.put(key, n)

    # the extras that the API and tests read, as attributes

    @property
    def ttl(self):
        return self.x.ttl if self.x is not None else -1

    @property
    def msg_ttl(self):
        return self.x is not None and self.x.msg_ttl

    @property
    def max_length(self):
        return self.x.max_length if self.x is not None else -1

    @property
    def dlx(self):
        return self.x.dlx if self.x is not None else None

    @property
    def delivery_limit(self):
        return self.x.delivery_limit if self.x is not None else -1

    @property
    def active(self):
        return self.x.active if self.x is not None else None

    @property
    def has_extras(self):
        return self.x is not None

    def set_paused(self, bint paused):
        self.paused = paused
        if not paused:
            schedule_queue(self)

    # -- the management API's publish and get (per request, not per message) --

    def publish_record(self, bytes rec):
        """-> False when the message was not stored (disk full, or refused
        by x-overflow)."""
        if not self.closed:
            return self.publish(rec, len(rec)) == 0
        return False

    def take_records(self, Py_ssize_t count, bint requeue):
        """-> [(record bytes, redelivered)] of up to count ready messages,
        put back (requeue) or removed as acked."""
        cdef SP sp
        cdef bint redelivered
        cdef const char *rec
        out, taken = [], []
        while len(out) < count and not self.closed:
            rec = self.get(&sp, &redelivered, True)
            if rec is NULL:
                break
            out.append((rec[:sp.size], redelivered))
            taken.append((sp.seg, sp.pos, sp.size))
        for seg, pos, size in reversed(taken):
            sp.seg, sp.pos, sp.size = seg, pos, size
            if requeue:
                self.store.requeue(sp)
            else:
                self.ack_count += 1
                self.store.delete(sp)
        if taken:
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
    def message_bytes_ready(self):
        return self.store.ready_body if self.store.track_body else self.store.ready_bytes

    @property
    def consumer_count(self):
        return len(self.consumers)

    def purge(self):
        if self.closed:
            return 0
        return self.store.purge()



def bench_publish(Queue q, bytes rec, int n):
    """Benchmarks: publish rec n times through the queue's own checks
    (limits, TTL, dead-lettering), as route_record does."""
    cdef int i
    for i in range(n):
        q.publish(rec, len(rec))
    q.store.flush_acks()


def bench_drain(Queue q):
    """Benchmarks: take every ready message as a no-ack consumer would
    (expired ones are dropped/dead-lettered on the way)."""
    cdef SP sp
    cdef bint redelivered
    cdef int n = 0
    while q.get(&sp, &redelivered, True) is not NULL:
        q.store.delete(sp)
        n += 1
    q.store.flush_acks()
    return n


def bench_expire(Queue q):
    """Benchmarks: expire (and dead-letter) what is due at the head now."""
    n = q.expire_head(now_ms(), True)
    q.store.flush_acks()
    return n


def bench_deliver(Queue q, uint64_t n):
    """Benchmarks: n deliveries from q's backlog to its consumers in
    delivery passes as the loop runs them (DELIVERY_BUDGET each, the ack
    positions written and the connections flushed after each), without an
    event loop: n should be a multiple of the budget."""
    cdef uint64_t start = q.deliver_count
    while q.deliver_count - start < n and q.store.ready:
        q.scheduled = True          # a pass that runs out of budget does not reschedule
        q.deliver_pending()
        q.scheduled = False
        q.store.flush_acks()
        for fn in _after_hooks:
            fn()
    return q.deliver_count - start
