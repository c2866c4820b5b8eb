# cython: language_level=3
"""WebSocket framing (RFC 6455) as a byte-stream transport: the payload of
every data frame is unmasked straight into the read buffer of the protocol
behind it (an AMQP or MQTT connection, both asyncio.BufferedProtocol),
once per read batch, wherever frames begin or end; what that protocol
writes goes out as one binary frame per write. Frame boundaries carry no
meaning for AMQP or MQTT, so none are kept."""
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport malloc, free
from libc.string cimport memcpy
from cpython.buffer cimport PyBUF_WRITE
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.memoryview cimport PyMemoryView_FromMemory

cdef enum:
    READ_BUFFER = 65536
    OP_CONTINUATION = 0
    OP_TEXT = 1
    OP_BINARY = 2
    OP_CLOSE = 8
    OP_PING = 9
    OP_PONG = 10
    MAX_CONTROL = 125

# close codes (RFC 6455 7.4.1)
CLOSE_NORMAL = 1000
CLOSE_PROTOCOL_ERROR = 1002
CLOSE_UNSUPPORTED_DATA = 1003


class WebSocketError(Exception):
    def __init__(self, code, reason):
        super().__init__(reason)
        self.code = code


def frame_header(int opcode, uint64_t length):
    """A server frame's header: FIN, the opcode, the length (unmasked)."""
    cdef char h[10]
    cdef int n, i
    h[0] = <char>(0x80 | opcode)
    if length < 126:
        h[1] = <char>length
        n = 2
    elif length < 65536:
        h[1] = 126
        h[2] = <char>((length >> 8) & 0xff)
        h[3] = <char>(length & 0xff)
        n = 4
    else:
        h[1] = 127
        for i in range(8):
            h[2 + i] = <char>((length >> (56 - 8 * i)) & 0xff)
        n = 10
    return PyBytes_FromStringAndSize(h, n)


cdef class WebSocketCore:
    """Fed the socket's bytes (it is the transport's protocol); calls
    self.inner's get_buffer/buffer_updated with the unmasked payload, and
    on_control(opcode, payload) for close and ping frames."""
    cdef:
        public object inner
        char *rbuf
        char hdr[14]
        int hlen                # bytes of the current frame header received
        int hneed               # bytes the header has (known once two are in)
        uint64_t remaining      # payload bytes of the current frame still to come
        uint8_t mask[4]
        uint32_t mpos           # payload bytes unmasked so far (mask phase)
        uint8_t opcode          # of the current frame (continuations: of its message)
        uint8_t msg_opcode      # of the data message in progress
        bint in_payload         # the header is in: payload bytes come next
        bytearray control       # a control frame's payload being collected
        public bint stopped     # a close frame was handled or an error found: input is ignored
        public uint64_t frames_in

    def __cinit__(self, *args, **kwargs):
        self.rbuf = <char *>malloc(READ_BUFFER)
        if self.rbuf is NULL:
            raise MemoryError()
        self.control = bytearray()

    def __dealloc__(self):
        free(self.rbuf)

    def get_buffer(self, Py_ssize_t sizehint):
        return PyMemoryView_FromMemory(self.rbuf, READ_BUFFER, PyBUF_WRITE)

    def buffer_updated(self, Py_ssize_t nbytes):
        try:
            self.feed(self.rbuf, nbytes)
        except WebSocketError as exc:
            self.stopped = True
            self.protocol_error(exc.code, str(exc))

    cdef int feed(self, const char *p, Py_ssize_t n) except -1:
        cdef Py_ssize_t pos = 0, take, i, start
        cdef uint8_t b1
        cdef unsigned char[::1] view
        cdef unsigned char *dst
        cdef Py_ssize_t room, chunk
        while pos < n and not self.stopped:
            if not self.in_payload:
                # the frame header, which may arrive in pieces
                while pos < n:
                    self.hdr[self.hlen] = p[pos]
                    self.hlen += 1
                    pos += 1
                    if self.hlen == 2:
                        b1 = <uint8_t>self.hdr[1]
                        if not b1 & 0x80:
                            raise WebSocketError(CLOSE_PROTOCOL_ERROR, "client frames must be masked")
                        b1 &= 0x7f
                        self.hneed = 2 + (2 if b1 == 126 else 8 if b1 == 127 else 0) + 4
                    if self.hlen >= 2 and self.hlen == self.hneed:
                        break
                if self.hlen < 2 or self.hlen < self.hneed:
                    break
                self.start_frame()
                if self.remaining == 0:
                    self.end_frame()
                continue
            take = <Py_ssize_t>min(<uint64_t>(n - pos), self.remaining)
            if self.opcode >= OP_CLOSE:
                for i in range(take):
                    self.control.append((<uint8_t>p[pos + i]) ^ self.mask[(self.mpos + i) & 3])
                self.mpos += take
                self.remaining -= take
                pos += take
            else:
                # data: unmasked into the protocol's own buffer, as much as it takes
                start = pos
                while take > 0:
                    view = self.inner.get_buffer(take)
                    room = view.shape[0]
                    chunk = take if take < room else room
                    dst = &view[0]
                    for i in range(chunk):
                        dst[i] = (<uint8_t>p[start + i]) ^ self.mask[(self.mpos + i) & 3]
                    self.mpos += chunk
                    self.remaining -= chunk
                    start += chunk
                    take -= chunk
                    view = None
                    self.inner.buffer_updated(chunk)
                    if self.stopped:
                        return 0
                pos = start
            if self.remaining == 0:
                self.end_frame()
        return 0

    cdef int start_frame(self) except -1:
        cdef uint8_t b0 = <uint8_t>self.hdr[0]
        cdef uint8_t b1 = <uint8_t>self.hdr[1]
        cdef uint64_t length = b1 & 0x7f
        cdef int i, off = 2
        cdef uint8_t op = b0 & 0x0f
        if b0 & 0x70:
            raise WebSocketError(CLOSE_PROTOCOL_ERROR, "reserved bits set (no extension was agreed)")
        if length == 126:
            length = (<uint8_t>self.hdr[2] << 8) | <uint8_t>self.hdr[3]
            off = 4
        elif length == 127:
            length = 0
            for i in range(8):
                length = (length << 8) | <uint8_t>self.hdr[2 + i]
            off = 10
            if length >> 63:
                raise WebSocketError(CLOSE_PROTOCOL_ERROR, "frame length with the high bit set")
        for i in range(4):
            self.mask[i] = <uint8_t>self.hdr[off + i]
        self.frames_in += 1
        if op >= OP_CLOSE:
            if not b0 & 0x80 or length > MAX_CONTROL:
                raise WebSocketError(CLOSE_PROTOCOL_ERROR, "control frames are short and not fragmented")
            if op > OP_PONG:
                raise WebSocketError(CLOSE_PROTOCOL_ERROR, f"unknown opcode {op}")
            del self.control[:]
        elif op == OP_CONTINUATION:
            if self.msg_opcode == 0:
                raise WebSocketError(CLOSE_PROTOCOL_ERROR, "continuation frame without a message")
        elif op == OP_TEXT:
            raise WebSocketError(CLOSE_UNSUPPORTED_DATA, "text frames: AMQP and MQTT take binary frames only")
        elif op == OP_BINARY:
            if self.msg_opcode != 0:
                raise WebSocketError(CLOSE_PROTOCOL_ERROR, "a new message inside a fragmented one")
            self.msg_opcode = op
        else:
            raise WebSocketError(CLOSE_PROTOCOL_ERROR, f"unknown opcode {op}")
        if op < OP_CLOSE and b0 & 0x80:
            self.msg_opcode = 0         # this frame ends the message
        self.opcode = op
        self.remaining = length
        self.mpos = 0
        self.hlen = 0
        self.hneed = 0
        self.in_payload = True
        return 0

    cdef int end_frame(self) except -1:
        self.in_payload = False
        if self.opcode >= OP_CLOSE:
            self.on_control(self.opcode, bytes(self.control))
        return 0

    def on_control(self, int opcode, bytes payload):
        raise NotImplementedError

    def protocol_error(self, int code, str reason):
        raise NotImplementedError


def mask_payload(bytes data, bytes key):
    """Client side (tests): data masked with a four-byte key."""
    cdef bytearray out = bytearray(data)
    cdef Py_ssize_t i
    for i in range(len(out)):
        out[i] ^= key[i & 3]
    return bytes(out)
