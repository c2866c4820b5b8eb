# Byte buffers for the wire: a growable WriteBuffer that frames are built in
# (lengths back-patched), and inline big/little-endian readers over raw memory.
cimport cython
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t, int64_t
from libc.string cimport memcpy


# -- raw readers; the caller has checked the bounds ---------------------------

cdef inline uint16_t be16(const char *p) noexcept nogil:
    cdef const uint8_t *u = <const uint8_t *>p
    return (<uint16_t>u[0] << 8) | u[1]

cdef inline uint32_t be32(const char *p) noexcept nogil:
    cdef const uint8_t *u = <const uint8_t *>p
    return (<uint32_t>u[0] << 24) | (<uint32_t>u[1] << 16) | (<uint32_t>u[2] << 8) | u[3]

cdef inline uint64_t be64(const char *p) noexcept nogil:
    return (<uint64_t>be32(p) << 32) | be32(p + 4)

cdef inline uint32_t le32(const char *p) noexcept nogil:
    cdef uint32_t v
    memcpy(&v, p, 4)       # x86-64 and aarch64 are little-endian
    return v

cdef inline uint64_t le64(const char *p) noexcept nogil:
    cdef uint64_t v
    memcpy(&v, p, 8)
    return v

cdef inline uint16_t le16(const char *p) noexcept nogil:
    cdef uint16_t v
    memcpy(&v, p, 2)
    return v

cdef inline void put_be16(char *p, uint16_t v) noexcept nogil:
    p[0] = <char>(v >> 8)
    p[1] = <char>v

cdef inline void put_be32(char *p, uint32_t v) noexcept nogil:
    p[0] = <char>(v >> 24)
    p[1] = <char>(v >> 16)
    p[2] = <char>(v >> 8)
    p[3] = <char>v

cdef inline void put_be64(char *p, uint64_t v) noexcept nogil:
    put_be32(p, <uint32_t>(v >> 32))
    put_be32(p + 4, <uint32_t>v)

cdef inline void put_le64(char *p, uint64_t v) noexcept nogil:
    memcpy(p, &v, 8)

cdef inline void put_le32(char *p, uint32_t v) noexcept nogil:
    memcpy(p, &v, 4)

cdef inline void put_le16(char *p, uint16_t v) noexcept nogil:
    memcpy(p, &v, 2)


cdef inline void copy_short(char *dst, const char *src, Py_ssize_t n) noexcept nogil:
    """memcpy for the few bytes of a shortstr (n <= 255). Told that bound,
    gcc -O2 inlines memcpy as `rep movsq`, whose start-up costs more cycles
    than a consumer tag or a routing key takes to copy with plain moves
    (perf on a consuming broker: write_shortstr 13% of the loop, most of it
    on that one instruction)."""
    cdef uint64_t a, b
    cdef uint32_t c, d
    if n >= 8:
        while n > 16:
            memcpy(&a, src, 8)
            memcpy(&b, src + 8, 8)
            memcpy(dst, &a, 8)
            memcpy(dst + 8, &b, 8)
            dst += 16
            src += 16
            n -= 16
        # 8 to 16 bytes left: two 8-byte moves, overlapping if need be
        memcpy(&a, src, 8)
        memcpy(&b, src + n - 8, 8)
        memcpy(dst, &a, 8)
        memcpy(dst + n - 8, &b, 8)
    elif n >= 4:
        memcpy(&c, src, 4)
        memcpy(&d, src + n - 4, 4)
        memcpy(dst, &c, 4)
        memcpy(dst + n - 4, &d, 4)
    else:
        while n > 0:
            n -= 1
            dst[n] = src[n]


# final and the hot writers inline, here: a delivery writes ~12 fields, and
# as vtable calls into another module each cost more than the bytes it wrote
@cython.final
cdef class WriteBuffer:
    cdef:
        char *buf
        Py_ssize_t len
        Py_ssize_t cap
        Py_ssize_t frame_start   # where the open frame's header begins

    cdef int grow(self, Py_ssize_t extra) except -1

    cdef inline int reserve(self, Py_ssize_t extra) except -1:
        if self.len + extra <= self.cap:
            return 0
        return self.grow(extra)

    cdef inline int write_u8(self, uint8_t v) except -1:
        if self.len + 1 > self.cap:
            self.grow(1)
        self.buf[self.len] = <char>v
        self.len += 1
        return 0

    cdef inline int write_u16(self, uint16_t v) except -1:
        if self.len + 2 > self.cap:
            self.grow(2)
        put_be16(self.buf + self.len, v)
        self.len += 2
        return 0

    cdef inline int write_u32(self, uint32_t v) except -1:
        if self.len + 4 > self.cap:
            self.grow(4)
        put_be32(self.buf + self.len, v)
        self.len += 4
        return 0

    cdef inline int write_u64(self, uint64_t v) except -1:
        if self.len + 8 > self.cap:
            self.grow(8)
        put_be64(self.buf + self.len, v)
        self.len += 8
        return 0

    cdef inline int write_raw(self, const char *data, Py_ssize_t n) except -1:
        if self.len + n > self.cap:
            self.grow(n)
        memcpy(self.buf + self.len, data, n)
        self.len += n
        return 0

    cdef inline int write_shortstr(self, const char *data, Py_ssize_t n) except -1:
        if n > 255:
            raise ValueError("shortstr longer than 255 bytes")
        if self.len + 1 + n > self.cap:
            self.grow(1 + n)
        self.buf[self.len] = <char>n
        copy_short(self.buf + self.len + 1, data, n)
        self.len += 1 + n
        return 0

    cdef inline int start_frame(self, uint8_t frame_type, uint16_t channel) except -1:
        if self.len + 7 > self.cap:
            self.grow(7)
        self.frame_start = self.len
        self.buf[self.len] = <char>frame_type
        put_be16(self.buf + self.len + 1, channel)
        self.len += 7
        return 0

    cdef inline int end_frame(self) except -1:
        put_be32(self.buf + self.frame_start + 3, <uint32_t>(self.len - self.frame_start - 7))
        self.frame_start = -1
        return self.write_u8(0xCE)

    cdef inline int start_method(self, uint16_t channel, uint16_t class_id, uint16_t method_id) except -1:
        if self.len + 11 > self.cap:
            self.grow(11)
        self.frame_start = self.len
        self.buf[self.len] = <char>1
        put_be16(self.buf + self.len + 1, channel)
        put_be16(self.buf + self.len + 7, class_id)
        put_be16(self.buf + self.len + 9, method_id)
        self.len += 11
        return 0

    cdef int write_bytes(self, bytes data) except -1
    cdef int write_shortstr_obj(self, object s) except -1
    cdef int write_longstr_obj(self, object s) except -1
    cdef int send(self, object transport) except -1
    cdef bytes take(self)
    cdef void clear(self)
    cdef void shrink(self, Py_ssize_t keep)


# A bounds-checked cursor over untrusted bytes. Every read goes through
# need(), so a truncated frame is caught in exactly one place.
cdef struct Reader:
    const char *p
    Py_ssize_t len
    Py_ssize_t pos

cdef int reader_need(Reader *r, Py_ssize_t n) except -1
cdef uint8_t read_u8(Reader *r) except? 0xff
cdef uint16_t read_u16(Reader *r) except? 0xffff
cdef uint32_t read_u32(Reader *r) except? 0xffffffff
cdef uint64_t read_u64(Reader *r) except? 0xffffffffffffffff
cdef const char *read_shortstr(Reader *r, Py_ssize_t *n) except NULL
cdef const char *read_longstr(Reader *r, Py_ssize_t *n) except NULL
