# cython: language_level=3
from cpython.buffer cimport PyBuffer_FillInfo
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.ref cimport Py_REFCNT
from cpython.unicode cimport PyUnicode_Check
from libc.stdlib cimport malloc, realloc, free

from lavinmq.errors import FrameError, SyntaxError_

DEF_CAP = 16384

cdef enum:
    # below this a write goes out as a bytes copy: cheaper than lending
    COPY_BELOW = 16384


cdef class OutBlock:
    """A WriteBuffer's memory lent to a transport (read-only, through a
    memoryview). The transport sends it at once and keeps nothing, and the
    buffer takes its memory back; or it keeps a view of what it could not
    send yet, and the block frees the memory when the last view goes."""
    cdef char *buf
    cdef Py_ssize_t len
    cdef int exports

    def __getbuffer__(self, Py_buffer *view, int flags):
        PyBuffer_FillInfo(view, self, self.buf, self.len, 1, flags)
        self.exports += 1

    def __releasebuffer__(self, Py_buffer *view):
        self.exports -= 1

    def __dealloc__(self):
        free(self.buf)


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

    cdef int grow(self, Py_ssize_t extra) except -1:
        """The slow half of reserve: room for `extra` more bytes."""
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

    cdef int write_bytes(self, bytes data) except -1:
        return self.write_raw(PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data))

    cdef int write_shortstr_obj(self, object s) except -1:
        cdef bytes b = s.encode("utf-8", "surrogateescape") if PyUnicode_Check(s) else bytes(s)
        return self.write_shortstr(PyBytes_AS_STRING(b), PyBytes_GET_SIZE(b))

    cdef int write_longstr_obj(self, object s) except -1:
        cdef bytes b = s.encode("utf-8", "surrogateescape") if PyUnicode_Check(s) else bytes(s)
        self.write_u32(<uint32_t>PyBytes_GET_SIZE(b))
        return self.write_bytes(b)

    cdef int send(self, object transport) except -1:
        """Hand the contents to transport.write and empty the buffer. A big
        output (a delivery pass's) is lent, not copied: uvloop writes it to
        the socket at once and keeps nothing (the usual case), and the
        memory is reused; a copy into a fresh bytes of 256 KiB is a new
        mmap, 64 page faults and a munmap per write (glibc maps blocks that
        big: see connection.pyx). Only when the transport keeps part of it
        (a full socket) does the buffer take new memory."""
        cdef OutBlock blk
        cdef object view
        cdef char *nb
        if self.len < COPY_BELOW:
            view = PyBytes_FromStringAndSize(self.buf, self.len)
            self.len = 0
            transport.write(view)
            return 0
        blk = OutBlock.__new__(OutBlock)
        blk.buf = self.buf
        blk.len = self.len
        self.buf = NULL
        self.len = 0
        try:
            view = memoryview(blk)
            transport.write(view)
            view = None             # ours released; a view the transport kept lives on
        finally:
            if blk.exports == 0 and Py_REFCNT(blk) == 1:
                self.buf = blk.buf          # sent and forgotten: ours again
                blk.buf = NULL
            else:
                nb = <char *>malloc(self.cap)
                if nb is NULL:
                    # nothing to write into: a small buffer, grown again on use
                    self.cap = DEF_CAP
                    nb = <char *>malloc(self.cap)
                    if nb is NULL:
                        raise MemoryError()
                self.buf = nb
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
    def py_write_shortstr(self, bytes s):
        """Tests: write_shortstr from Python."""
        self.write_shortstr(PyBytes_AS_STRING(s), PyBytes_GET_SIZE(s))

    def py_write_raw(self, bytes s):
        """Tests: write_raw from Python."""
        self.write_raw(PyBytes_AS_STRING(s), PyBytes_GET_SIZE(s))

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
