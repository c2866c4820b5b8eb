# MQTT 3.1.1 wire format: the remaining-length varint, UTF-8 strings as the
# specification wants them (well-formed, no U+0000, no surrogates), topic
# names and filters, and the decoders of the packets Python handles.
# Included by _mqtt.pyx.

cdef enum:
    MAX_REMAINING = 268435455       # what four varint bytes hold


cdef inline Py_ssize_t read_varint(const char *p, Py_ssize_t avail, uint32_t *out) except -2:
    """Bytes taken by the remaining length at p, -1 when more are needed."""
    cdef uint32_t v = 0
    cdef int i
    cdef uint8_t b
    for i in range(4):
        if i >= avail:
            return -1
        b = <uint8_t>p[i]
        v |= <uint32_t>(b & 0x7f) << (7 * i)
        if not b & 0x80:
            out[0] = v
            return i + 1
    raise ProtocolError("malformed remaining length (more than four bytes)")


cdef inline int write_varint(WriteBuffer wb, uint32_t v) except -1:
    cdef uint8_t b
    wb.reserve(4)
    while True:
        b = v & 0x7f
        v >>= 7
        if v:
            b |= 0x80
        wb.buf[wb.len] = <char>b
        wb.len += 1
        if not v:
            return 0


cdef bint valid_utf8(const char *s, Py_ssize_t n) noexcept nogil:
    """Well-formed UTF-8 without U+0000 and without surrogates, as MQTT
    1.5.3 asks (a server must close the connection otherwise)."""
    cdef const uint8_t *u = <const uint8_t *>s
    cdef Py_ssize_t i = 0
    cdef uint32_t c
    cdef uint8_t b
    cdef int more
    while i < n:
        b = u[i]
        if b < 0x80:
            if b == 0:
                return False
            i += 1
            continue
        if b < 0xc2:
            return False            # continuation byte, or an overlong two-byte lead
        if b < 0xe0:
            more = 1
            c = b & 0x1f
        elif b < 0xf0:
            more = 2
            c = b & 0x0f
        elif b < 0xf5:
            more = 3
            c = b & 0x07
        else:
            return False
        if i + more >= n:
            return False            # the sequence runs past the end
        i += 1
        while more:
            if (u[i] & 0xc0) != 0x80:
                return False
            c = (c << 6) | (u[i] & 0x3f)
            i += 1
            more -= 1
        if c < 0x800 and b >= 0xe0:
            return False            # overlong three-byte form
        if c < 0x10000 and b >= 0xf0:
            return False            # overlong four-byte form
        if 0xd800 <= c <= 0xdfff or c > 0x10ffff:
            return False
    return True


cdef inline char swap_separator(char c) noexcept nogil:
    # MQTT levels are separated by '/', AMQP words by '.': swapped both
    # ways, as RabbitMQ's MQTT plugin does, so that the mapping is reversible
    if c == b'/':
        return b'.'
    if c == b'.':
        return b'/'
    return c


cdef int check_topic_name(const char *t, Py_ssize_t n) except -1:
    """A PUBLISH (or will) topic: non-empty UTF-8 without wildcards."""
    cdef Py_ssize_t i
    if n == 0:
        raise ProtocolError("PUBLISH with an empty topic name")
    for i in range(n):
        if t[i] == b'+' or t[i] == b'#':
            raise ProtocolError("PUBLISH topic names may not contain wildcards (+ or #)")
    if not valid_utf8(t, n):
        raise ProtocolError("topic name is not well-formed UTF-8")
    if n > 255:
        # the routing key it becomes is an AMQP short string
        raise ProtocolError(f"topic name of {n} bytes: at most 255 are supported (an AMQP routing key)")
    return 0


cdef class PacketReader:
    """Bounds-checked reads of a packet's variable header and payload; any
    overrun is a ProtocolError (the connection closes)."""
    cdef const char *p
    cdef Py_ssize_t n
    cdef Py_ssize_t pos

    cdef int need(self, Py_ssize_t k) except -1:
        if self.pos + k > self.n:
            raise ProtocolError("packet shorter than its fields")
        return 0

    cdef uint8_t u8(self) except? 0xff:
        self.need(1)
        self.pos += 1
        return <uint8_t>self.p[self.pos - 1]

    cdef uint16_t u16(self) except? 0xffff:
        self.need(2)
        self.pos += 2
        return be16(self.p + self.pos - 2)

    cdef bytes blob(self):
        cdef uint16_t k = self.u16()
        self.need(k)
        self.pos += k
        return self.p[self.pos - k:self.pos]

    cdef bytes text(self):
        cdef uint16_t k = self.u16()
        self.need(k)
        if not valid_utf8(self.p + self.pos, k):
            raise ProtocolError("string is not well-formed UTF-8")
        self.pos += k
        return self.p[self.pos - k:self.pos]


cdef PacketReader reader(const char *p, Py_ssize_t n):
    cdef PacketReader r = PacketReader.__new__(PacketReader)
    r.p = p
    r.n = n
    r.pos = 0
    return r


cdef tuple decode_connect(const char *p, Py_ssize_t n):
    """-> (protocol name, level, clean_session, keepalive, client_id,
    will (topic, payload, qos, retain) or None, username or None,
    password or None). Strings stay bytes; their UTF-8 is checked."""
    cdef PacketReader r = reader(p, n)
    cdef bytes name = r.text()
    cdef uint8_t level = r.u8()
    cdef uint8_t flags
    cdef uint16_t keepalive
    cdef bytes client_id
    will = username = password = None
    if name != b"MQTT" and name != b"MQIsdp":
        raise ConnectRefused(BAD_PROTOCOL_VERSION, f"protocol name {name!r} is not MQTT")
    if (name == b"MQTT" and level != 4) or (name == b"MQIsdp" and level != 3):
        raise ConnectRefused(BAD_PROTOCOL_VERSION, f"protocol level {level} is not supported (MQTT 3.1.1 and 3.1)")
    flags = r.u8()
    if flags & 1:
        raise ProtocolError("CONNECT flags: the reserved bit is set")
    keepalive = r.u16()
    client_id = r.text()
    if flags & 0x04:
        will_topic = r.text()
        will_payload = r.blob()
        will = (will_topic, will_payload, (flags >> 3) & 3, bool(flags & 0x20))
        if will[2] == 3:
            raise ProtocolError("CONNECT: will QoS 3")
    elif flags & 0x38:
        raise ProtocolError("CONNECT: will QoS or retain set without a will")
    if flags & 0x80:
        username = r.text()
    if flags & 0x40:
        if not flags & 0x80 and name == b"MQTT":
            raise ProtocolError("CONNECT: a password without a user name")
        password = r.blob()
    if r.pos != r.n:
        raise ProtocolError("CONNECT: bytes after the payload")
    return (name, level, bool(flags & 0x02), keepalive, client_id, will, username, password)


cdef tuple decode_subscribe(const char *p, Py_ssize_t n):
    """-> (packet id, [(filter bytes, requested QoS)])."""
    cdef PacketReader r = reader(p, n)
    cdef uint16_t pid = r.u16()
    cdef list out = []
    cdef uint8_t qos
    if pid == 0:
        raise ProtocolError("SUBSCRIBE with packet id 0")
    while r.pos < r.n:
        f = r.text()
        qos = r.u8()
        if qos & 0xfc:
            raise ProtocolError("SUBSCRIBE: reserved bits of the requested QoS are set")
        if qos == 3:
            raise ProtocolError("SUBSCRIBE: QoS 3")
        out.append((f, qos))
        if len(out) > 65535:
            raise ProtocolError("SUBSCRIBE with too many topic filters")
    if not out:
        raise ProtocolError("SUBSCRIBE without a topic filter")
    return (pid, out)


cdef tuple decode_unsubscribe(const char *p, Py_ssize_t n):
    """-> (packet id, [filter bytes])."""
    cdef PacketReader r = reader(p, n)
    cdef uint16_t pid = r.u16()
    cdef list out = []
    if pid == 0:
        raise ProtocolError("UNSUBSCRIBE with packet id 0")
    while r.pos < r.n:
        out.append(r.text())
    if not out:
        raise ProtocolError("UNSUBSCRIBE without a topic filter")
    return (pid, out)


# -- packets the control plane sends --------------------------------------------

def connack(bint session_present, int code):
    return bytes((T_CONNACK << 4, 2, 1 if session_present else 0, code))


def suback(uint16_t pid, codes):
    cdef WriteBuffer wb = WriteBuffer()
    wb.write_u8(T_SUBACK << 4)
    write_varint(wb, 2 + len(codes))
    wb.write_u16(pid)
    wb.write_bytes(bytes(codes))
    return wb.getvalue()


def unsuback(uint16_t pid):
    return bytes((T_UNSUBACK << 4, 2, pid >> 8, pid & 0xff))


def pubrel(uint16_t pid):
    return bytes((T_PUBREL << 4 | 2, 2, pid >> 8, pid & 0xff))


def encode_packet(int first, bytes body):
    """Any packet: first byte, remaining length, body (tests, the perf client)."""
    cdef WriteBuffer wb = WriteBuffer()
    wb.write_u8(first)
    write_varint(wb, len(body))
    wb.write_bytes(body)
    return wb.getvalue()


def check_will_topic(bytes topic):
    check_topic_name(topic, len(topic))


def py_valid_utf8(bytes s):
    return valid_utf8(s, len(s))
