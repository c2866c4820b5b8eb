# cython: language_level=3
import asyncio

from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport realloc, free
from libc.string cimport memcmp, memmove, memcpy
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE

from lavinmq._core.buffer cimport (
    WriteBuffer, Reader, read_u8, read_u16, read_shortstr, be16, be32, be64, put_le64, le16, put_le16,
)
from lavinmq._core.codec cimport props_convert
from lavinmq._core.dedup cimport Deduper
from lavinmq._core.exchange_store cimport keep_routed
from lavinmq._core.delayed cimport delay_of
from lavinmq._core.props cimport prop_offset, prop_offset_insert, parse_expiration, P_EXPIRATION, P_REPLY_TO, P_TIMESTAMP
from lavinmq._core.queue cimport Queue, ConsumerBase, schedule_queue, PUBLISH_NO_SPACE
from lavinmq._core.routing cimport Exchange, RouteOut, acquire_route_out, release_route_out
from lavinmq._core.segment cimport SP, record_parts
from lavinmq._core cimport spec

from lavinmq._core import queue as _queue_mod
from lavinmq._core.clock cimport now_ms
from lavinmq.errors import (
    FrameError, PreconditionFailed, SyntaxError_, UnexpectedFrame, NotFound, ResourceError,
)

cdef enum:
    BUFFER_KEEP = 1 << 20      # a publish buffer above this is given back before the next publish
    NO_CONSUMER = 0xffffffff
    FLUSH_AT = 262144          # bytes of output before a mid-pass flush
    ACT_ACK = 0
    ACT_REQUEUE = 1
    ACT_DROP = 2
    PS_IDLE = 0
    PS_HEADER = 1
    PS_BODY = 2
    USER_ID_FLAG = 0x10         # user_id's bit in the low byte of the property flags

# connections with output written during a delivery pass
cdef list _dirty_conns = []


def flush_dirty_connections():
    global _dirty_conns
    cdef ConnState st
    work = _dirty_conns
    _dirty_conns = []
    for x in work:
        st = <ConnState>x
        st.dirty = False
        if not st.closed:
            st.conn.flush()

_queue_mod.add_after_delivery_hook(flush_dirty_connections)


cdef class ConnState:
    def __init__(self, conn):
        self.conn = conn
        self.wbuf = WriteBuffer()
        self.frame_max = 131072
        self.max_message_size = 128 * 1024 * 1024
        self.confirm_dirty = []

    cdef int mark_dirty(self) except -1:
        if not self.dirty:
            self.dirty = True
            _dirty_conns.append(self)
        return 0


cdef int write_content(WriteBuffer wb, uint16_t channel, const char *rec, uint32_t frame_max) except -1:
    """Content header and body frames for a store record."""
    cdef const char *ex
    cdef const char *rk
    cdef const char *props
    cdef const char *body
    cdef Py_ssize_t exlen, rklen, propslen
    cdef uint64_t bodylen, off = 0, chunk
    cdef uint64_t max_body = frame_max - 8
    record_parts(rec, &ex, &exlen, &rk, &rklen, &props, &propslen, &body, &bodylen)
    wb.start_frame(spec.FRAME_HEADER, channel)
    wb.write_u16(spec.CLASS_BASIC)
    wb.write_u16(0)
    wb.write_u64(bodylen)
    wb.reserve(propslen)
    props_convert(props, propslen, wb.buf + wb.len, True)
    wb.len += propslen
    wb.end_frame()
    while off < bodylen:
        chunk = bodylen - off
        if chunk > max_body:
            chunk = max_body
        wb.start_frame(spec.FRAME_BODY, channel)
        wb.write_raw(body + off, chunk)
        wb.end_frame()
        off += chunk
    return 0


cdef int check_user_id(const char *props, bytes user, int *pstate) except -1:
    """A publish whose user_id property is not the authenticated user is
    refused (406), as RabbitMQ does. Runs only for messages that carry a
    user_id; props is the wire's property list, already bounds-checked by
    props_convert."""
    cdef uint16_t flags = be16(props)
    cdef Py_ssize_t pos = 2
    cdef int bit
    cdef Py_ssize_t n
    for bit in range(15, 4, -1):      # the properties before user_id (bit 4)
        if not flags & (1 << bit):
            continue
        if bit == 13:                 # headers: a table, u32 length
            pos += 4 + be32(props + pos)
        elif bit == 12 or bit == 11:  # delivery_mode, priority: octets
            pos += 1
        elif bit == 6:                # timestamp
            pos += 8
        else:                         # short strings
            pos += 1 + <uint8_t>props[pos]
    n = <uint8_t>props[pos]
    if n != PyBytes_GET_SIZE(user) or memcmp(props + pos + 1, PyBytes_AS_STRING(user), n) != 0:
        pstate[0] = PS_IDLE
        raise PreconditionFailed(
            f"user_id property set to '{props[pos + 1:pos + 1 + n].decode('utf-8', 'replace')}' but "
            f"authenticated user was '{user.decode('utf-8', 'replace')}'", 60, 40)
    return 0


cdef inline int write_method_with_message(WriteBuffer wb, const char *rec) except -1:
    """Exchange and routing key of a record, as the tail of deliver/get-ok/return.
    Both sit at fixed places after the timestamp: no property walk here."""
    cdef Py_ssize_t exlen = <uint8_t>rec[8]
    wb.write_shortstr(rec + 9, exlen)
    wb.write_shortstr(rec + 10 + exlen, <uint8_t>rec[9 + exlen])
    return 0


cdef class Consumer(ConsumerBase):

    def __init__(self, Channel channel, tag, Queue queue, bint no_ack, bint exclusive,
                 int priority, arguments):
        self.channel = channel
        self.tag = tag
        self.tag_bytes = tag.encode("utf-8", "surrogateescape")
        self.queue = queue
        self.no_ack = no_ack
        self.exclusive = exclusive
        self.priority = priority
        self.arguments = arguments
        self.prefetch = channel.prefetch_consumer
        self.queue_idx = channel.index_of(queue)

    cdef bint has_capacity(self):
        cdef Channel ch = self.channel
        cdef ConnState st = ch.state
        if self.cancelled or ch.closing or not ch.flow_active or st.paused or st.closed:
            return False
        if self.no_ack:
            return True
        # a full window takes the next message as soon as an ack frees room,
        # in the pass that read the ack, as LavinMQ does: some clients
        # (LavinMQ's own, Crystal's amqp-client) send most of their acks
        # only once more deliveries arrive, so a window held shut until a
        # share of it is free waits for a timer on every refill. Acks read
        # in one loop iteration are still answered by one write.
        if self.prefetch and self.unacked >= self.prefetch:
            return False
        if ch.prefetch_global and ch.unacked_total >= ch.prefetch_global:
            return False
        return True

    cdef int deliver(self, const char *rec, SP sp, bint redelivered) except -1:
        cdef Channel ch = self.channel
        cdef ConnState st = ch.state
        cdef WriteBuffer wb = st.wbuf
        cdef uint64_t tag
        ch.next_tag += 1
        tag = ch.next_tag
        if not self.no_ack:
            ch.track(tag, sp, self.queue_idx, self.slot, self.deliver_time)
            self.unacked += 1
        ch.deliver_count += 1
        wb.start_method(ch.id, spec.CLASS_BASIC, spec.BASIC_DELIVER)
        wb.write_shortstr(PyBytes_AS_STRING(self.tag_bytes), PyBytes_GET_SIZE(self.tag_bytes))
        wb.write_u64(tag)
        wb.write_u8(1 if redelivered else 0)
        write_method_with_message(wb, rec)
        wb.end_frame()
        write_content(wb, ch.id, rec, st.frame_max)
        st.mark_dirty()
        if wb.len >= FLUSH_AT:
            st.conn.flush()
        return 0


cdef class Channel:

    def __init__(self, ConnState state, uint16_t channel_id):
        self.state = state
        self.id = channel_id
        self.flow_active = True
        self.rec = WriteBuffer()
        self.queues = []
        self.queue_idx = {}
        self.consumer_slots = []
        self.consumers = {}
        self.tx_msgs = []
        self.tx_acks = []

    def __dealloc__(self):
        free(self.unacked)

    # -- publish: method, header and body frames -----------------------------

    cdef int on_publish(self, const char *p, Py_ssize_t n) except -1:
        cdef Reader r
        cdef Py_ssize_t exlen, rklen
        cdef const char *ex
        cdef const char *rk
        cdef uint8_t bits
        r.p = p
        r.len = n
        r.pos = 0
        read_u16(&r)
        ex = read_shortstr(&r, &exlen)
        rk = read_shortstr(&r, &rklen)
        bits = read_u8(&r)
        self.mandatory = bits & 1
        self.immediate = bits & 2
        # the exchange and the right to write to it are checked now, before
        # any body is buffered (a refused publisher sends its bodies for nothing)
        self.ex_pending = self.exchange_for(ex, exlen)
        if self.rec.cap > BUFFER_KEEP:
            self.rec.shrink(BUFFER_KEEP)
        self.rec.clear()
        self.rec.write_u64(0)              # timestamp, set with the header
        self.rec.write_shortstr(ex, exlen)
        self.rec.write_shortstr(rk, rklen)
        self.props_off = self.rec.len
        self.pstate = PS_HEADER
        return 0

    cdef int on_header(self, const char *p, Py_ssize_t n) except -1:
        cdef uint64_t body_size
        cdef Py_ssize_t plen
        if n < 14:
            raise FrameError("content header frame too short")
        if be16(p) != spec.CLASS_BASIC:
            raise UnexpectedFrame(f"content header for class {be16(p)}")
        body_size = be64(p + 4)
        if body_size > self.state.max_message_size:
            self.pstate = PS_IDLE
            raise PreconditionFailed(
                f"message size {body_size} larger than max size {self.state.max_message_size}", 60, 40)
        if self.state.assembling + body_size > self.state.max_message_size:
            # one connection assembles at most max_message_size of bodies at
            # once, whatever its channels: clients send a message's frames
            # together, so only a hostile one gets here
            self.pstate = PS_IDLE
            raise PreconditionFailed(
                f"unfinished message bodies on this connection would exceed {self.state.max_message_size} "
                f"bytes", 60, 40)
        self.state.assembling += body_size
        self.body_declared = body_size
        self.rec.reserve(n - 12 + 8)
        plen = props_convert(p + 12, n - 12, self.rec.buf + self.rec.len, False)
        if plen != n - 12:
            raise FrameError("content header has bytes after its properties")
        if (<uint8_t>p[13]) & USER_ID_FLAG and self.state.user_id is not None:
            check_user_id(p + 12, self.state.user_id, &self.pstate)
        self.rec.len += plen
        self.props_len = plen
        if le16(self.rec.buf + self.props_off) & 0x0300 or self.state.set_timestamp:
            self.fix_props()        # reply-to / expiration / a missing timestamp: rare
        put_le64(self.rec.buf, self.state.now_ms)
        self.rec.reserve(8)
        put_le64(self.rec.buf + self.rec.len, body_size)
        self.rec.len += 8
        self.body_left = body_size
        if body_size == 0:
            return self.publish_complete()
        self.pstate = PS_BODY
        return 0

    cdef int fix_props(self) except -1:
        """The properties of the publish being assembled (the tail of rec):
        refuse a bad expiration, point reply-to amq.rabbitmq.reply-to at
        this channel's direct reply-to queue, add a timestamp if asked."""
        cdef char *props = self.rec.buf + self.props_off
        cdef Py_ssize_t off, n, diff
        cdef uint16_t flags = le16(props)
        cdef bytes name
        if flags & 0x0100:
            off = prop_offset(props, P_EXPIRATION)
            if parse_expiration(props + off + 1, <uint8_t>props[off]) < 0:
                raise PreconditionFailed(f"invalid expiration '{props[off + 1:off + 1 + <uint8_t>props[off]].decode(errors='replace')}'", 60, 40)
        if flags & 0x0200:
            off = prop_offset(props, P_REPLY_TO)
            n = <uint8_t>props[off]
            if n == 21 and memcmp(props + off + 1, b"amq.rabbitmq.reply-to", 21) == 0:
                name = self.direct_reply
                if name is None:
                    raise PreconditionFailed("fast reply consumer does not exist", 60, 40)
                diff = PyBytes_GET_SIZE(name) - n
                self.rec.reserve(diff)
                props = self.rec.buf + self.props_off
                memmove(props + off + 1 + n + diff, props + off + 1 + n, self.props_len - off - 1 - n)
                props[off] = <char>PyBytes_GET_SIZE(name)
                memcpy(props + off + 1, PyBytes_AS_STRING(name), PyBytes_GET_SIZE(name))
                self.props_len += diff
                self.rec.len += diff
        if self.state.set_timestamp and not (flags & 0x0040):
            off = prop_offset_insert(props, P_TIMESTAMP)
            self.rec.reserve(8)
            props = self.rec.buf + self.props_off
            memmove(props + off + 8, props + off, self.props_len - off)
            put_le64(props + off, self.state.now_ms // 1000)
            put_le16(props, le16(props) | 0x0040)
            self.props_len += 8
            self.rec.len += 8
        return 0

    cdef int on_body(self, const char *p, Py_ssize_t n) except -1:
        if <uint64_t>n > self.body_left:
            raise FrameError("body frames longer than the content header's body size")
        self.rec.write_raw(p, n)
        self.body_left -= n
        if self.body_left == 0:
            return self.publish_complete()
        return 0

    def expecting_content(self):
        return self.pstate != PS_IDLE

    cdef Exchange exchange_for(self, const char *name, Py_ssize_t n):
        cdef Exchange ex = self.ex_cache
        cdef bytes cur
        if ex is not None and not ex.deleted:
            cur = ex.name_bytes
            if PyBytes_GET_SIZE(cur) == n and memcmp(PyBytes_AS_STRING(cur), name, n) == 0:
                return ex
        ex = self.lookup_exchange(name[:n].decode("utf-8", "surrogateescape"))
        self.ex_cache = ex
        return ex

    def forget_exchange(self):
        """Permissions changed: the next publish looks its exchange up (and
        checks write access) again."""
        self.ex_cache = None

    def lookup_exchange(self, str name):
        """-> Exchange the user may publish to, or raise (404/403).
        Implemented by the control plane's subclass."""
        raise NotFound(f"no exchange '{name}' in vhost", 60, 40)

    cdef int publish_complete(self) except -1:
        cdef Exchange ex = self.ex_pending
        cdef int rc
        cdef const char *rec = self.rec.buf
        self.pstate = PS_IDLE
        self.publish_count += 1
        self.state.publishes += 1
        self.state.assembling -= self.body_declared
        self.body_declared = 0
        self.ex_pending = None
        if self.tx:
            # capped per connection, not per channel: six channels each
            # holding 120 MiB took +730 MB
            self.tx_bytes += self.rec.len
            self.state.tx_held += self.rec.len
            if self.state.tx_held > self.state.max_message_size:
                raise PreconditionFailed(f"the transactions of this connection hold more than "
                                         f"{self.state.max_message_size} bytes of messages: commit or roll back",
                                         60, 40)
            self.tx_msgs.append((ex, self.rec.getvalue(), self.mandatory, self.immediate))
            return 0
        rc = self.route_record(ex, rec, self.rec.len, self.props_len, self.mandatory, self.immediate)
        if self.confirm:
            self.publish_seq += 1
            if rc:
                self.refused(self.publish_seq)
            if not self.in_confirm_dirty:
                self.in_confirm_dirty = True
                self.state.confirm_dirty.append(self)
        elif rc & PUBLISH_NO_SPACE:
            raise ResourceError("disk full: the message could not be stored", 60, 40)
        return 0

    def refused(self, uint64_t seq):
        """A store refused publish seq (disk full): it is nacked, in order,
        when the confirms before it go out."""
        if self.nack_seqs is None:
            self.nack_seqs = []
        self.nack_seqs.append(seq)

    cdef int route_record(self, Exchange ex, const char *rec, Py_ssize_t n, Py_ssize_t props_len,
                          bint mandatory, bint immediate) except -1:
        cdef Py_ssize_t exlen = <uint8_t>rec[8]
        cdef const char *rk = rec + 10 + exlen
        cdef Py_ssize_t rklen = <uint8_t>rec[9 + exlen]
        cdef Py_ssize_t props_off = 10 + exlen + rklen
        if props_len < 0:       # a record held by a transaction
            props_len = props_convert(rec + props_off, n - props_off, NULL, True)
        if ex.dedup is not None and (<Deduper>ex.dedup).seen(rec):
            return 0            # a duplicate: dropped, and still confirmed
        if ex.delay_queue is not None and delay_of(rec) > 0:
            return (<Queue>ex.delay_queue).publish(rec, n)      # routed when its time comes
        cdef RouteOut out = acquire_route_out()
        cdef int kept_rc = 0
        try:
            ex.route(out, rk, rklen, rec + props_off, props_len)
            if out.bcc_off >= 0:
                rec = out.strip_bcc(rec, n, props_off, &n)
            if out.npstores:
                # persistent exchanges on its way keep it, with its x-offset
                rec = keep_routed(out, rec, &n, &kept_rc)
            return self.store_routed(ex, out, rec, n, mandatory, immediate) | kept_rc
        finally:
            release_route_out(out)

    cdef int store_routed(self, Exchange ex, RouteOut out, const char *rec, Py_ssize_t n,
                          bint mandatory, bint immediate) except -1:
        cdef Queue q
        cdef int rc
        cdef int refused = 0
        cdef Py_ssize_t i
        cdef bint any_consumer = False
        if out.nq == 0:
            if mandatory:
                self.return_unroutable_count += 1
                self.send_return(312, b"NO_ROUTE", rec)
            else:
                self.drop_unroutable_count += 1
            return 0
        if immediate:
            for i in range(out.nq):
                if (<Queue><object>out.queues[i]).consumers:
                    any_consumer = True
                    break
            if not any_consumer:
                self.send_return(313, b"NO_CONSUMERS", rec)
                return 0
        ex.publish_out_count += 1
        for i in range(out.nq):
            q = <Queue><object>out.queues[i]
            if not q.closed:
                rc = q.publish(rec, n)
                if rc:
                    refused |= rc
                elif (q.consumers and q.store.ready > FLOW_BACKLOG) or q.expiry_behind:
                    self.state.flow_queue = q
        return refused

    cdef int send_return(self, uint16_t code, bytes text, const char *rec) except -1:
        cdef WriteBuffer wb = self.state.wbuf
        wb.start_method(self.id, spec.CLASS_BASIC, spec.BASIC_RETURN)
        wb.write_u16(code)
        wb.write_shortstr(PyBytes_AS_STRING(text), PyBytes_GET_SIZE(text))
        write_method_with_message(wb, rec)
        wb.end_frame()
        write_content(wb, self.id, rec, self.state.frame_max)
        return 0

    cdef int send_confirms(self) except -1:
        self.in_confirm_dirty = False
        return self.ack_to(self.publish_seq)

    cdef int ack_to(self, uint64_t seq) except -1:
        # one cumulative basic.ack for everything up to seq; refused
        # publishes are nacked in their place, so that every confirm goes
        # out in order (clients such as amqp091-go rely on it)
        cdef WriteBuffer wb
        cdef uint64_t t
        cdef int sent = 0
        if not self.nack_seqs:
            return self.ack_to_plain(seq)
        if self.closing or self.state.closed:
            return 0
        wb = self.state.wbuf
        while self.nack_seqs and self.nack_seqs[0] <= seq:
            t = self.nack_seqs.pop(0)
            if t <= self.confirmed_seq:
                continue
            sent |= self.ack_to_plain(t - 1)
            wb.start_method(self.id, spec.CLASS_BASIC, spec.BASIC_NACK)
            wb.write_u64(t)
            wb.write_u8(0)
            wb.end_frame()
            self.confirmed_seq = t
            sent = 1
        return self.ack_to_plain(seq) | sent

    cdef int ack_to_plain(self, uint64_t seq) except -1:
        cdef WriteBuffer wb = self.state.wbuf
        if seq <= self.confirmed_seq or self.closing or self.state.closed:
            return 0
        wb.start_method(self.id, spec.CLASS_BASIC, spec.BASIC_ACK)
        wb.write_u64(seq)
        wb.write_u8(0 if seq == self.confirmed_seq + 1 else 1)
        wb.end_frame()
        self.confirmed_seq = seq
        return 1

    def flush_confirms(self):
        self.send_confirms()

    def confirm_to(self, uint64_t seq):
        """A flush covered publishes up to seq: confirm them. -> the
        connection to flush, or None if nothing was sent."""
        if self.ack_to(seq):
            return self.state.conn
        return None

    # -- deliveries and acks -------------------------------------------------

    cdef uint32_t index_of(self, Queue q) except? 0xffffffff:
        idx = self.queue_idx.get(q)
        if idx is None:
            idx = len(self.queues)
            self.queues.append(q)
            self.queue_idx[q] = idx
        return idx

    cdef int track(self, uint64_t tag, SP sp, uint32_t queue_idx, uint32_t consumer_idx,
                   uint64_t delivered_at) except -1:
        cdef Unacked *n
        cdef Py_ssize_t live
        if self.u_tail == self.u_cap:
            live = self.u_tail - self.u_head
            if self.u_head > 0 and live < self.u_cap // 2:
                memmove(self.unacked, self.unacked + self.u_head, live * sizeof(Unacked))
            else:
                self.u_cap = self.u_cap * 2 if self.u_cap else 256
                n = <Unacked *>realloc(self.unacked, self.u_cap * sizeof(Unacked))
                if n is NULL:
                    raise MemoryError()
                self.unacked = n
                if self.u_head > 0:
                    memmove(self.unacked, self.unacked + self.u_head, live * sizeof(Unacked))
            self.u_head = 0
            self.u_tail = live
        self.unacked[self.u_tail].tag = tag
        self.unacked[self.u_tail].sp = sp
        self.unacked[self.u_tail].queue_idx = queue_idx
        self.unacked[self.u_tail].consumer_idx = consumer_idx
        self.unacked[self.u_tail].delivered_at = delivered_at
        self.unacked[self.u_tail].done = 0
        self.u_tail += 1
        self.unacked_total += 1
        return 0

    cdef Py_ssize_t find_tag(self, uint64_t tag):
        cdef Py_ssize_t lo = self.u_head, hi = self.u_tail, mid
        while lo < hi:
            mid = (lo + hi) >> 1
            if self.unacked[mid].tag < tag:
                lo = mid + 1
            else:
                hi = mid
        if lo < self.u_tail and self.unacked[lo].tag == tag and not self.unacked[lo].done:
            return lo
        return -1

    cdef int settle(self, Unacked *u, int action) except -1:
        cdef Queue q = <Queue>self.queues[u.queue_idx]
        cdef Consumer c = None
        u.done = 1
        self.unacked_total -= 1
        if u.consumer_idx != NO_CONSUMER:
            c = <Consumer>self.consumer_slots[u.consumer_idx]
            c.unacked -= 1
            if c.cancelled and c.unacked == 0:
                self.consumer_slots[u.consumer_idx] = None
        if q.per_consumer_acks and c is not None:
            return q.consumer_settled(c, u.sp, action == ACT_ACK, action == ACT_REQUEUE)
        if action == ACT_ACK:
            q.ack(u.sp)
        else:
            q.reject(u.sp, action == ACT_REQUEUE)
        return 0

    cdef int on_ack(self, uint64_t tag, bint multiple, int action) except -1:
        """basic.ack / nack / reject, single or multiple."""
        cdef Py_ssize_t idx, i
        cdef bint was_full = self.prefetch_global and self.unacked_total >= self.prefetch_global
        if self.tx:
            self.tx_acks.append((tag, multiple, action))
            return 0
        if multiple and tag == 0:
            idx = self.u_tail - 1
        else:
            idx = self.find_tag(tag)
            if idx < 0:
                raise PreconditionFailed(f"unknown delivery tag {tag}", 60, 80)
        if multiple:
            for i in range(self.u_head, idx + 1):
                if not self.unacked[i].done:
                    self.settle(&self.unacked[i], action)
        else:
            self.settle(&self.unacked[idx], action)
        while self.u_head < self.u_tail and self.unacked[self.u_head].done:
            self.u_head += 1
        if self.u_head == self.u_tail:
            self.u_head = self.u_tail = 0
        self.ack_count += 1
        self.state.acked = True     # its later confirms wait for these acks' files (lavinmq/sync.py)
        if was_full:
            for c in self.consumers.values():
                schedule_queue((<Consumer>c).queue)
        return 0

    def ack(self, uint64_t tag, bint multiple=False):
        self.on_ack(tag, multiple, ACT_ACK)

    def reject(self, uint64_t tag, bint multiple=False, bint requeue=True):
        self.on_ack(tag, multiple, ACT_REQUEUE if requeue else ACT_DROP)

    def requeue_all(self):
        """Channel closed or basic.recover: every unacked message goes back
        to its queue, at its original position."""
        cdef Py_ssize_t i
        for i in range(self.u_head, self.u_tail):
            if not self.unacked[i].done:
                self.settle(&self.unacked[i], ACT_REQUEUE)
        self.u_head = self.u_tail = 0

    def commit(self):
        """tx.commit: route the held publishes, then apply the held acks."""
        cdef Exchange ex
        cdef bytes rec
        cdef int refused = 0
        msgs, acks = self.tx_msgs, self.tx_acks
        self.tx_msgs = []
        self.tx_acks = []
        self.state.tx_held -= self.tx_bytes
        self.tx_bytes = 0
        self.tx = False
        try:
            for ex, rec, mandatory, immediate in msgs:
                if not ex.deleted:
                    refused |= self.route_record(ex, rec, len(rec), -1, mandatory, immediate)
                if self.confirm:
                    self.publish_seq += 1
            for tag, multiple, action in acks:
                self.on_ack(tag, multiple, action)
        finally:
            self.tx = True
        if refused & PUBLISH_NO_SPACE:
            raise ResourceError("disk full: messages of the transaction could not be stored", 90, 20)
        if self.confirm:
            self.send_confirms()

    def rollback(self):
        self.tx_msgs = []
        self.tx_acks = []
        self.state.tx_held -= self.tx_bytes
        self.tx_bytes = 0

    def content_left(self):
        """Body bytes the publish being received still waits for (0: none)."""
        return self.body_left if self.pstate == PS_BODY else 0

    def abandon_publish(self):
        """The channel closes with a publish half received: its body no
        longer counts against the connection's limit."""
        self.state.assembling -= self.body_declared
        self.body_declared = 0
        self.ex_pending = None
        self.pstate = PS_IDLE

    def add_consumer_slot(self, Consumer c):
        c.slot = len(self.consumer_slots)
        for i, x in enumerate(self.consumer_slots):
            if x is None:
                c.slot = i
                self.consumer_slots[i] = c
                return
        self.consumer_slots.append(c)

    def release_consumer_slot(self, Consumer c):
        c.cancelled = True
        if c.unacked == 0 and c.slot < len(self.consumer_slots) and self.consumer_slots[c.slot] is c:
            self.consumer_slots[c.slot] = None

    def basic_get(self, Queue q, bint no_ack):
        """basic.get: get-ok with the next message, or get-empty (always,
        from a paused queue: LavinMQ)."""
        cdef SP sp
        cdef bint redelivered
        cdef WriteBuffer wb = self.state.wbuf
        cdef const char *rec = NULL if q.paused else q.get(&sp, &redelivered, no_ack)
        if rec is NULL:
            q.get_empty_count += 1
            wb.start_method(self.id, spec.CLASS_BASIC, spec.BASIC_GET_EMPTY)
            wb.write_shortstr(b"", 0)
            wb.end_frame()
            return False
        self.next_tag += 1
        wb.start_method(self.id, spec.CLASS_BASIC, spec.BASIC_GET_OK)
        wb.write_u64(self.next_tag)
        wb.write_u8(1 if redelivered else 0)
        write_method_with_message(wb, rec)
        wb.write_u32(<uint32_t>q.store.ready)
        wb.end_frame()
        write_content(wb, self.id, rec, self.state.frame_max)
        if no_ack:
            q.get_no_ack_count += 1
            q.store.delete(sp)
            schedule_queue(q)
        else:
            self.track(self.next_tag, sp, self.index_of(q), NO_CONSUMER, now_ms())
            q.add_unacked_from_get(sp.size)
        return True

    def time_held(self, Queue queue, uint64_t now):
        """A consumer timeout now applies to `queue` (a policy, a setting):
        what this channel holds of it unacked, delivered while it had none
        and so never timed, is timed from now."""
        cdef Py_ssize_t i
        cdef Unacked *u
        if queue not in self.queues:
            return
        for i in range(self.u_head, self.u_tail):
            u = &self.unacked[i]
            if not u.done and u.delivered_at == 0 and self.queues[u.queue_idx] is queue:
                u.delivered_at = now

    def overdue(self, uint64_t now):
        """-> the consumer timeout (ms) of the first queue whose oldest
        delivery on this channel is unacked past it, or 0. Called once a
        second, not per message; one entry per queue is looked at."""
        cdef Py_ssize_t i
        cdef Unacked *u
        cdef Queue q
        seen = set()
        for i in range(self.u_head, self.u_tail):
            u = &self.unacked[i]
            if u.done or u.queue_idx in seen:
                continue
            seen.add(u.queue_idx)
            q = <Queue>self.queues[u.queue_idx]
            if q.consumer_timeout and u.delivered_at and u.delivered_at + q.consumer_timeout < now:
                return q.consumer_timeout
            if len(seen) == len(self.queues):
                break
        return 0

    @property
    def unacked_count(self):
        return self.unacked_total

    def unacked_of(self, Queue q):
        """[(delivery tag, consumer tag or None for basic.get, delivered
        at ms or 0)] of q's messages this channel holds unacked: for the
        API (LavinMQ's GET /api/queues/{vhost}/{name}/unacked), not the
        message path."""
        cdef Py_ssize_t i
        cdef Unacked *u
        cdef Consumer c
        idx = self.queue_idx.get(q)
        out = []
        if idx is None:
            return out
        for i in range(self.u_head, self.u_tail):
            u = &self.unacked[i]
            if u.done or u.queue_idx != <uint32_t>idx:
                continue
            tag = None
            if u.consumer_idx != NO_CONSUMER and u.consumer_idx < len(self.consumer_slots):
                c = self.consumer_slots[u.consumer_idx]
                if c is not None:
                    tag = c.tag
            out.append((u.tag, tag, u.delivered_at))
        return out


def bench_write_content(bytes rec, int n, uint32_t frame_max=131072):
    """Benchmarks: write the header and body frames of rec n times into a
    WriteBuffer, as a delivery pass does."""
    cdef WriteBuffer wb = WriteBuffer()
    cdef int i
    for i in range(n):
        wb.start_method(1, spec.CLASS_BASIC, spec.BASIC_DELIVER)
        wb.write_shortstr(b"ctag", 4)
        wb.write_u64(i)
        wb.write_u8(0)
        write_method_with_message(wb, rec)
        wb.end_frame()
        write_content(wb, 1, rec, frame_max)
        if wb.len > 1 << 20:
            wb.clear()
    return wb.len
