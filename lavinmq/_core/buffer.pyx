# cython: language_level=3
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_Check
from libc.stdlib cimport malloc, realloc, free

from lavinmq.errors import FrameError, SyntaxError_

DEF_CAP = 16384


cdef class WriteBuffer:
    """Growable output buffer. Frames are opened with start_frame and closed
    with end_frame, which back-patches the payload size and adds frame-end."""

    def __cinit__(self):
        self.cap = 16384
        self.buf = <char *>malloc(self.cap)
        if self.buf is NULL:
            raise MemoryError()
        self.len = 0
        self.frame_start = -1

    def __dealloc__(self):
        free(self.buf)

    cdef int reserve(self, Py_ssize_t extra) except -1:
        cdef Py_ssize_t need = self.len + extra
        cdef Py_ssize_t cap = self.cap
        cdef char *nb
        if need <= cap:
            return 0
        while cap < need:
            cap *= 2
        nb = <char *>realloc(self.buf, cap)
        if nb is NULL:
            raise MemoryError()
        self.buf = nb
        self.cap = cap
        return 0

    cdef inline int write_u8(self, uint8_t v) except -1:
        self.reserve(1)
        self.buf[self.len] = <char>v
        self.len += 1
        return 0

    cdef inline int write_u16(self, uint16_t v) except -1:
        self.reserve(2)
        put_be16(self.buf + self.len, v)
        self.len += 2
        return 0

    cdef inline int write_u32(self, uint32_t v) except -1:
        self.reserve(4)
        put_be32(self.buf + self.len, v)
        self.len += 4
        return 0

    cdef inline int write_u64(self, uint64_t v) except -1:
        self.reserve(8)
        put_be64(self.buf + self.len, v)
        self.len += 8
        return 0

    cdef int write_raw(self, const char *data, Py_ssize_t n) except -1:
        self.reserve(n)
        memcpy(self.buf + self.len, data, n)
        self.len += n
        return 0

    cdef int write_bytes(self, bytes data) except -1:
        return self.write_raw(PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data))

    cdef int write_shortstr(self, const char *data, Py_ssize_t n) except -1:
        if n > 255:
            raise ValueError("shortstr longer than 255 bytes")
        self.reserve(1 + n)
        self.buf[self.len] = <char>n
        memcpy(self.buf + self.len + 1, data, n)
        self.len += 1 + n
        return 0

    cdef int write_shortstr_obj(self, object s) except -1:
        cdef bytes b = s.encode("utf-8", "surrogateescape") if PyUnicode_Check(s) else bytes(s)
        return self.write_shortstr(PyBytes_AS_STRING(b), PyBytes_GET_SIZE(b))

    cdef int write_longstr_obj(self, object s) except -1:
        cdef bytes b = s.encode("utf-8", "surrogateescape") if PyUnicode_Check(s) else bytes(s)
        self.write_u32(<uint32_t>PyBytes_GET_SIZE(b))
        return self.write_bytes(b)

    cdef int start_frame(self, uint8_t frame_type, uint16_t channel) except -1:
        self.reserve(7)
        self.frame_start = self.len
        self.buf[self.len] = <char>frame_type
        put_be16(self.buf + self.len + 1, channel)
        self.len += 7
        return 0

    cdef int end_frame(self) except -1:
        put_be32(self.buf + self.frame_start + 3, <uint32_t>(self.len - self.frame_start - 7))
        self.frame_start = -1
        return self.write_u8(0xCE)

    cdef int start_method(self, uint16_t channel, uint16_t class_id, uint16_t method_id) except -1:
        self.start_frame(1, channel)
        self.reserve(4)
        put_be16(self.buf + self.len, class_id)
        put_be16(self.buf + self.len + 2, method_id)
        self.len += 4
        return 0

    cdef bytes take(self):
        """Copy the contents out and empty the buffer. The copy is what the
        transport may keep; this buffer is reused at once."""
        cdef bytes out = PyBytes_FromStringAndSize(self.buf, self.len)
        self.len = 0
        return out

    cdef void clear(self):
        self.len = 0

    cdef void shrink(self, Py_ssize_t keep):
        """Empty, and give back memory above `keep` bytes (after one big
        message a channel should not hold its size for good)."""
        cdef char *nb
        self.len = 0
        if self.cap > keep:
            nb = <char *>realloc(self.buf, keep)
            if nb is not NULL:
                self.buf = nb
                self.cap = keep

    # Python-facing helpers, used by tests and the control plane
    def getvalue(self):
        return PyBytes_FromStringAndSize(self.buf, self.len)

    def __len__(self):
        return self.len


cdef int reader_need(Reader *r, Py_ssize_t n) except -1:
    if n < 0 or r.pos + n > r.len:
        raise FrameError("truncated frame: arguments run past the end")
    return 0

cdef uint8_t read_u8(Reader *r) except? 0xff:
    reader_need(r, 1)
    r.pos += 1
    return <uint8_t>r.p[r.pos - 1]

cdef uint16_t read_u16(Reader *r) except? 0xffff:
    reader_need(r, 2)
    r.pos += 2
    return be16(r.p + r.pos - 2)

cdef uint32_t read_u32(Reader *r) except? 0xffffffff:
    reader_need(r, 4)
    r.pos += 4
    return be32(r.p + r.pos - 4)

cdef uint64_t read_u64(Reader *r) except? 0xffffffffffffffff:
    reader_need(r, 8)
    r.pos += 8
    return be64(r.p + r.pos - 8)

cdef const char *read_shortstr(Reader *r, Py_ssize_t *n) except NULL:
    cdef Py_ssize_t l = read_u8(r)
    reader_need(r, l)
    n[0] = l
    r.pos += l
    return r.p + r.pos - l

cdef const char *read_longstr(Reader *r, Py_ssize_t *n) except NULL:
    cdef Py_ssize_t l = read_u32(r)
    reader_need(r, l)
    n[0] = l
    r.pos += l
    return r.p + r.pos - l
