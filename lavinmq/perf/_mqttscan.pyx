# cython: language_level=3
"""The MQTT load generator's per-message work (lavinmqperf mqtt): PUBLISH
packets built in batches with running packet ids, and received bytes
scanned for PUBLISH/PUBACK/PUBREC/PUBCOMP without a Python object per
packet, so that the measuring client is not what is measured."""
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy
from libc.stdlib cimport realloc, free
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING

cdef enum:
    MAX_ID = 65535


cdef inline int put_varint(char *p, uint32_t v) noexcept nogil:
    cdef int n = 0
    cdef uint8_t b
    while True:
        b = v & 0x7f
        v >>= 7
        if v:
            b |= 0x80
        p[n] = <char>b
        n += 1
        if not v:
            return n


cdef class PublishBatch:
    """PUBLISH packets of one topic and body; at QoS 1/2 each carries the
    next packet id (1..65535, cycling)."""
    cdef bytes topic
    cdef bytes body
    cdef int qos
    cdef bint retain
    cdef public uint32_t next_id
    cdef Py_ssize_t size            # one packet's length
    cdef bytes one                  # the packet (QoS 0: every packet is the same)

    def __init__(self, bytes topic, bytes body, int qos, bint retain=False):
        cdef char hdr[5]
        cdef int k
        self.topic = topic
        self.body = body
        self.qos = qos
        self.retain = retain
        self.next_id = 1
        rem = 2 + len(topic) + (2 if qos else 0) + len(body)
        k = put_varint(hdr, rem)
        first = 0x30 | (qos << 1) | (1 if retain else 0)
        self.one = (bytes((first,)) + hdr[:k] + len(topic).to_bytes(2, "big") + topic
                    + (b"\x00\x01" if qos else b"") + body)
        self.size = len(self.one)

    @property
    def packet_size(self):
        return self.size

    def take(self, Py_ssize_t n):
        """n packets in one bytes object."""
        cdef bytes out
        cdef char *p
        cdef Py_ssize_t i, id_off
        if self.qos == 0:
            return self.one * n
        out = PyBytes_FromStringAndSize(NULL, self.size * n)
        p = PyBytes_AS_STRING(out)
        id_off = self.size - len(self.body) - 2
        for i in range(n):
            memcpy(p + i * self.size, PyBytes_AS_STRING(self.one), self.size)
            p[i * self.size + id_off] = <char>(self.next_id >> 8)
            p[i * self.size + id_off + 1] = <char>(self.next_id & 0xff)
            self.next_id = self.next_id + 1 if self.next_id < MAX_ID else 1
        return out

    def set_body(self, bytes body):
        """--random-bodies / latency: the same size, other bytes."""
        if len(body) != len(self.body):
            raise ValueError("the body size is fixed")
        self.body = body
        self.one = self.one[:self.size - len(body)] + body


cdef class Scanner:
    """Fed what the broker sends. Counts PUBLISH (and answers QoS 1 with
    PUBACK and QoS 2 with PUBREC/PUBCOMP, in `replies`), PUBACK and PUBCOMP
    (publisher side); hands CONNACK/SUBACK and anything else to Python."""
    cdef bytearray pending
    cdef public uint64_t publishes
    cdef public uint64_t acks           # PUBACK or PUBCOMP: a publish of ours is done
    cdef public uint64_t bad_bodies
    cdef public bytes expected_body     # -V
    cdef char *replies                  # acknowledgements owed, sent after each read
    cdef Py_ssize_t rlen
    cdef Py_ssize_t rcap

    def __init__(self):
        self.pending = bytearray()

    def __dealloc__(self):
        free(self.replies)

    cdef int reply(self, uint8_t first, uint8_t hi, uint8_t lo) except -1:
        cdef char *nb
        if self.rlen + 4 > self.rcap:
            nb = <char *>realloc(self.replies, max(4096, self.rcap * 2))
            if nb is NULL:
                raise MemoryError()
            self.replies = nb
            self.rcap = max(4096, self.rcap * 2)
        self.replies[self.rlen] = <char>first
        self.replies[self.rlen + 1] = 2
        self.replies[self.rlen + 2] = <char>hi
        self.replies[self.rlen + 3] = <char>lo
        self.rlen += 4
        return 0

    def feed(self, data):
        """-> list of (first byte, body) of the packets not counted here."""
        cdef const uint8_t[:] view
        cdef const char *p
        cdef Py_ssize_t n, pos = 0, i, start, body_off
        cdef uint32_t rem, mult
        cdef uint8_t first, t, b
        cdef uint16_t tlen
        cdef int qos
        cdef list others = []
        self.pending += data
        n = len(self.pending)
        if n == 0:
            return others
        view = self.pending
        p = <const char *>&view[0]
        while n - pos >= 2:
            first = <uint8_t>p[pos]
            rem = 0
            mult = 1
            i = pos + 1
            while True:
                if i >= n:
                    rem = 0xffffffff
                    break
                b = <uint8_t>p[i]
                rem += (b & 0x7f) * mult
                mult *= 128
                i += 1
                if not b & 0x80:
                    break
            if rem == 0xffffffff or n - i < rem:
                break
            start = i
            t = first >> 4
            if t == 3:
                self.publishes += 1
                qos = (first >> 1) & 3
                tlen = (<uint8_t>p[start] << 8) | <uint8_t>p[start + 1]
                if qos:
                    # PUBACK (QoS 1) or PUBREC (QoS 2) with the packet id
                    self.reply(0x40 if qos == 1 else 0x50, <uint8_t>p[start + 2 + tlen],
                               <uint8_t>p[start + 3 + tlen])
                if self.expected_body is not None:
                    body_off = start + 2 + tlen + (2 if qos else 0)
                    if (rem - (body_off - start) != len(self.expected_body)
                            or memcmp(p + body_off, PyBytes_AS_STRING(self.expected_body),
                                      len(self.expected_body)) != 0):
                        self.bad_bodies += 1
            elif t == 4 or t == 7:
                self.acks += 1
            elif t == 5:
                # our QoS 2 publish was received: release it
                self.reply(0x62, <uint8_t>p[start], <uint8_t>p[start + 1])
            elif t == 6:
                # the broker releases its QoS 2 delivery: complete it
                self.reply(0x70, <uint8_t>p[start], <uint8_t>p[start + 1])
            else:
                others.append((first, bytes(p[start:start + rem])))
            pos = start + rem
        view = None
        if pos:
            del self.pending[:pos]
        return others

    def take_replies(self):
        cdef bytes out = PyBytes_FromStringAndSize(self.replies, self.rlen) if self.rlen else b""
        self.rlen = 0
        return out
