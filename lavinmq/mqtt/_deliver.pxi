# A session's consumer: its queue's delivery pass calls deliver() for each
# message, which writes a PUBLISH packet straight from the store record into
# the connection's output buffer. QoS 1 and 2 deliveries are tracked in a
# ring indexed by a running tag, from which the packet id follows, so an
# acknowledgement finds its message without a lookup table.
# Included by _mqtt.pyx.

cdef enum:
    RING_MIN = 64


cdef inline int header_value_size(uint8_t kind, const char *v) noexcept nogil:
    """Size of a field-table value of this type at v, -1 if unknown."""
    if kind == b't' or kind == b'b' or kind == b'B':
        return 1
    if kind == b's' or kind == b'u':
        return 2
    if kind == b'I' or kind == b'i' or kind == b'f':
        return 4
    if kind == b'l' or kind == b'L' or kind == b'd' or kind == b'T':
        return 8
    if kind == b'D':
        return 5
    if kind == b'V':
        return 0
    if kind == b'S' or kind == b'x' or kind == b'F' or kind == b'A':
        return 4 + <int>be32(v)
    return -1


cdef inline int header_int(uint8_t kind, const char *v) noexcept nogil:
    if kind == b'b':
        return <signed char>v[0]
    if kind == b'B' or kind == b't':
        return <uint8_t>v[0]
    if kind == b's':
        return <short>be16(v)
    if kind == b'u':
        return be16(v)
    if kind == b'I' or kind == b'i':
        return <int>be32(v)
    if kind == b'l' or kind == b'L':
        return <int>be64(v)
    return -1


cdef Py_ssize_t mqtt_props(const char *props, int *qos, bint *retained) noexcept:
    """The properties' length, and what the MQTT headers say: the QoS the
    message was published with (a message without x-mqtt-publish-qos came
    from AMQP: QoS 1, as RabbitMQ's plugin treats it) and whether it is a
    retained message delivered on subscribe."""
    cdef uint16_t flags
    cdef Py_ssize_t pos = 2, hoff = -1, tend, tpos, klen
    cdef int i, sz
    cdef uint8_t kind
    if memcmp(props, PyBytes_AS_STRING(<bytes>PROPS[1]), PROPS_LEN) == 0:
        qos[0] = 1
        retained[0] = False
        return PROPS_LEN
    if memcmp(props, PyBytes_AS_STRING(<bytes>PROPS[0]), PROPS_LEN) == 0:
        qos[0] = 0
        retained[0] = False
        return PROPS_LEN
    qos[0] = 1
    retained[0] = False
    flags = le16(props)
    for i in range(PROP_COUNT):
        if flags & (1 << (15 - i)):
            if i == P_HEADERS:
                hoff = pos
            pos += prop_field_size(props + pos, i)
    if hoff < 0:
        return pos
    tend = hoff + 4 + le32(props + hoff)
    tpos = hoff + 4
    while tpos < tend:
        klen = <uint8_t>props[tpos]
        kind = <uint8_t>props[tpos + 1 + klen]
        sz = header_value_size(kind, props + tpos + 2 + klen)
        if sz < 0:
            break
        if klen == 18 and memcmp(props + tpos + 1, b"x-mqtt-publish-qos", 18) == 0:
            i = header_int(kind, props + tpos + 2 + klen)
            if 0 <= i <= 2:
                qos[0] = i
        elif klen == 13 and memcmp(props + tpos + 1, b"x-mqtt-retain", 13) == 0:
            retained[0] = kind == b't' and props[tpos + 2 + klen] != 0
        tpos += 2 + klen + sz
    return pos


cdef bint filter_match(const char *pat, Py_ssize_t pn, const char *key, Py_ssize_t kn) noexcept:
    """An MQTT subscription in its binding-key form (words split by '.',
    '*' one word, '#' only at the end: zero or more words) against a routing
    key. An empty routing key has no words."""
    cdef Py_ssize_t pi = 0, ki = 0, pe, ke
    cdef bint key_done = kn == 0
    while True:
        if pi > pn:
            return key_done
        pe = pi
        while pe < pn and pat[pe] != b'.':
            pe += 1
        if pe - pi == 1 and pat[pi] == b'#':
            return True
        if key_done:
            return False
        ke = ki
        while ke < kn and key[ke] != b'.':
            ke += 1
        if not (pe - pi == 1 and pat[pi] == b'*'):
            if pe - pi != ke - ki or memcmp(pat + pi, key + ki, pe - pi) != 0:
                return False
        pi = pe + 1
        ki = ke + 1
        if ki > kn:
            key_done = True


cdef class SessionConsumer(ConsumerBase):

    def __init__(self, MQTTCore conn, Queue queue, uint32_t window, tag):
        self.conn = conn
        self.st = conn.state
        self.queue = queue
        self.tag = tag
        self.window = min(max(window, 1), MAX_PACKET_ID)
        self.prefetch = self.window
        self.head_tag = 1
        self.qos_lo = self.qos_hi = 0
        self.no_ack = True
        self.filters = []
        self.arguments = {}
        self.channel = conn

    def __dealloc__(self):
        free(self.ring)

    def set_filters(self, list filters):
        """[(binding key bytes, granted QoS)] of the session's subscriptions."""
        self.filters = filters
        self.qos_lo = min([q for _, q in filters], default=0)
        self.qos_hi = max([q for _, q in filters], default=0)
        # all at QoS 0: the queue drops what it delivers (nothing to track)
        self.no_ack = self.qos_hi == 0
        self.dollar_check = any(k[:1] in (b"*", b"#") for k, _ in filters)

    cdef bint has_capacity(self):
        cdef ConnState st = self.st
        if st.paused or st.closed or self.conn.phase != MP_OPEN or self.conn.output_held:
            return False
        if self.no_ack:
            return True
        # packet ids repeat every 65535 tags: the span of the ring never reaches that
        return <uint64_t>(self.tail - self.head) < self.window

    cdef int sub_qos(self, const char *rk, Py_ssize_t rklen, bint *deliver):
        """The highest QoS of the subscriptions that match; deliver is
        False when none does for a '$' topic (wildcards at the first level
        do not match those, MQTT 4.7.2)."""
        cdef int best = -1
        cdef bint dollar = rklen > 0 and rk[0] == b'$'
        cdef bytes k
        cdef int q
        for item in self.filters:
            k = <bytes>(<tuple>item)[0]
            q = (<tuple>item)[1]
            if q <= best:
                continue
            if dollar and (k[:1] == b"*" or k[:1] == b"#"):
                continue
            if filter_match(PyBytes_AS_STRING(k), PyBytes_GET_SIZE(k), rk, rklen):
                best = q
        if best < 0:
            # dropped if '$'; otherwise an AMQP binding of the session's queue led it here
            deliver[0] = not dollar
            return self.qos_hi
        deliver[0] = True
        return best

    cdef int deliver(self, const char *rec, SP sp, bint redelivered) except -1:
        cdef Queue q = self.queue
        cdef ConnState st = self.st
        cdef WriteBuffer wb = st.wbuf
        cdef Py_ssize_t exlen = <uint8_t>rec[8]
        cdef const char *rk = rec + 10 + exlen
        cdef Py_ssize_t rklen = <uint8_t>rec[9 + exlen]
        cdef const char *props = rk + rklen
        cdef int pub_qos = 1, qos, sq
        cdef bint retained = False, ok = True
        cdef Py_ssize_t plen = mqtt_props(props, &pub_qos, &retained)
        cdef uint64_t blen = le64(props + plen)
        cdef const char *body = props + plen + 8
        cdef Py_ssize_t i, start
        cdef uint64_t tag
        cdef uint16_t pid
        cdef uint8_t first
        if self.qos_lo == self.qos_hi and not (self.dollar_check and rklen and rk[0] == b'$'):
            sq = self.qos_hi
        else:
            sq = self.sub_qos(rk, rklen, &ok)
        qos = pub_qos if pub_qos < sq else sq
        if self.no_ack:
            qos = 0
        self.deliver_count += 1
        if rklen == 0 or not ok:
            # no MQTT topic to give it (an AMQP publish with an empty routing
            # key), or a '$' topic no subscription asked for: dropped
            if not self.no_ack:
                self.settle_now(sp)
            return 0
        wb.reserve(5 + 4 + rklen + blen)
        first = (T_PUBLISH << 4) | (qos << 1) | (1 if retained else 0)
        if redelivered and qos:
            first |= 8
        wb.buf[wb.len] = <char>first
        wb.len += 1
        write_varint(wb, <uint32_t>(2 + rklen + (2 if qos else 0) + blen))
        put_be16(wb.buf + wb.len, <uint16_t>rklen)
        start = wb.len + 2
        for i in range(rklen):
            wb.buf[start + i] = swap_separator(rk[i])
        wb.len = start + rklen
        if qos:
            tag = self.head_tag + <uint64_t>(self.tail - self.head)
            pid = <uint16_t>((tag - 1) % MAX_PACKET_ID + 1)
            put_be16(wb.buf + wb.len, pid)
            wb.len += 2
            self.track(sp, <uint8_t>qos)
        memcpy(wb.buf + wb.len, body, blen)
        wb.len += blen
        if qos == 0 and not self.no_ack:
            self.settle_now(sp)
        st.mark_dirty()
        if wb.len >= 262144:
            st.conn.flush()
        return 0

    cdef void settle_now(self, SP sp) noexcept:
        # delivered at QoS 0 although the queue counted it as unacked
        cdef Queue q = self.queue
        q.unacked_count -= 1
        q.unacked_bytes -= sp.size
        q.deliver_no_ack_count += 1
        try:
            q.store.delete(sp)
        except Exception:
            log.exception("deleting a delivered message failed on queue %s", q.name)

    cdef int track(self, SP sp, uint8_t qos) except -1:
        cdef Py_ssize_t live
        cdef Flight *n
        if self.tail == self.ring_cap:
            live = self.tail - self.head
            if self.head > 0 and live < self.ring_cap // 2:
                memmove(self.ring, self.ring + self.head, live * sizeof(Flight))
            else:
                n = <Flight *>realloc(self.ring, max(RING_MIN, self.ring_cap * 2) * sizeof(Flight))
                if n is NULL:
                    raise MemoryError()
                self.ring = n
                self.ring_cap = max(RING_MIN, self.ring_cap * 2)
                if self.head > 0:
                    memmove(self.ring, self.ring + self.head, live * sizeof(Flight))
            self.head = 0
            self.tail = live
        self.ring[self.tail].sp = sp
        self.ring[self.tail].state = FL_SENT
        self.ring[self.tail].qos = qos
        self.tail += 1
        self.inflight += 1
        self.unacked = self.inflight
        return 0

    cdef Py_ssize_t find(self, uint16_t pid):
        cdef uint64_t head_pid
        cdef Py_ssize_t off
        if pid == 0 or self.head == self.tail:
            return -1
        head_pid = (self.head_tag - 1) % MAX_PACKET_ID + 1
        off = <Py_ssize_t>((pid + MAX_PACKET_ID - head_pid) % MAX_PACKET_ID)
        if self.head + off >= self.tail:
            return -1
        return self.head + off

    cdef int advance(self) except -1:
        while self.head < self.tail and self.ring[self.head].state == FL_DONE:
            self.head += 1
            self.head_tag += 1
        if self.head == self.tail:
            self.head = self.tail = 0
        return 0

    cdef int on_ack(self, uint8_t kind, uint16_t pid) except -1:
        """PUBACK, PUBREC or PUBCOMP from the client. One for a packet id
        that is not in flight (or in another state) is ignored."""
        cdef Py_ssize_t idx = self.find(pid)
        cdef Flight *f
        if idx < 0:
            return 0
        f = &self.ring[idx]
        if kind == T_PUBACK and f.state == FL_SENT and f.qos == 1:
            f.state = FL_DONE
            self.ack_count += 1
            if f.sp.seg:            # 0: a retained message, never in the queue
                self.queue.ack(f.sp)
        elif kind == T_PUBREC and f.state == FL_SENT and f.qos == 2:
            # the client has it: the message leaves the queue; the packet id
            # stays taken until PUBCOMP
            f.state = FL_RELEASED
            self.ack_count += 1
            if f.sp.seg:
                self.queue.ack(f.sp)
            self.conn.owe((T_PUBREL << 4) | 2, pid)
        elif kind == T_PUBCOMP and f.state == FL_RELEASED:
            f.state = FL_DONE
            schedule_queue(self.queue)      # a packet id is free again
        else:
            return 0
        if f.state == FL_DONE:
            self.inflight -= 1
            self.unacked = self.inflight
            self.advance()
        return 0

    def detach(self, bint requeue):
        """The client is gone: its unacknowledged messages go back to the
        queue (a persistent session keeps them; a clean one is deleted
        next). -> packet ids that were waiting for PUBCOMP."""
        cdef Py_ssize_t i
        cdef Flight *f
        cdef list released = []
        cdef Queue q = self.queue
        for i in range(self.head, self.tail):
            f = &self.ring[i]
            if f.state == FL_SENT:
                if not q.closed and f.sp.seg:
                    q.reject(f.sp, requeue)
            elif f.state == FL_RELEASED:
                released.append((self.head_tag + <uint64_t>(i - self.head) - 1) % MAX_PACKET_ID + 1)
            f.state = FL_DONE
        self.head = self.tail = 0
        self.inflight = 0
        self.unacked = 0
        return released

    def take_packet_ids(self, Py_ssize_t n, int qos):
        """Packet ids for n retained messages sent outside the queue
        (lavinmq.mqtt.retain_delivery), tracked in the ring as deliveries
        are (segment 0: an ack settles nothing in the queue, and they are
        not sent again if the client goes first) -> list, or None when
        the window has no room for n now."""
        cdef SP none
        cdef uint64_t tag
        cdef list ids = []
        if <uint64_t>(self.tail - self.head) + <uint64_t>n > self.window:
            return None
        none.seg = 0
        none.pos = 0
        none.size = 0
        for _ in range(n):
            tag = self.head_tag + <uint64_t>(self.tail - self.head)
            ids.append(<uint16_t>((tag - 1) % MAX_PACKET_ID + 1))
            self.track(none, <uint8_t>qos)
        return ids

    @property
    def in_flight(self):
        return self.inflight
