# cython: language_level=3
"""Messages into Arrow columns, without a Python object per message.

Two sources feed the same column builders: segment files read straight from
disk (LavinMQ's record layout: little-endian integers, properties with a
little-endian flag word and table lengths) and AMQP frames from a stream
consumer (basic.deliver, content header and body frames, big-endian), whose
x-stream-offset and x-stream-timestamp headers become the offset and
timestamp columns. A finished batch is handed to pyarrow as buffers: no
copy, no per-row work in Python.

This module is the Spark connector's own: it does not import the broker."""
from cpython.buffer cimport PyBUF_WRITABLE
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport malloc, realloc, free
from libc.stdio cimport snprintf
from libc.string cimport memcpy, memcmp, memset


# -- byte order ------------------------------------------------------------------

cdef inline uint16_t be16(const char *p) noexcept nogil:
    return (<uint16_t><uint8_t>p[0] << 8) | <uint8_t>p[1]

cdef inline uint32_t be32(const char *p) noexcept nogil:
    return ((<uint32_t><uint8_t>p[0] << 24) | (<uint32_t><uint8_t>p[1] << 16)
            | (<uint32_t><uint8_t>p[2] << 8) | <uint8_t>p[3])

cdef inline uint64_t be64(const char *p) noexcept nogil:
    return (<uint64_t>be32(p) << 32) | be32(p + 4)

cdef inline uint16_t le16(const char *p) noexcept nogil:
    cdef uint16_t v
    memcpy(&v, p, 2)
    return v

cdef inline uint32_t le32(const char *p) noexcept nogil:
    cdef uint32_t v
    memcpy(&v, p, 4)
    return v

cdef inline uint64_t le64(const char *p) noexcept nogil:
    cdef uint64_t v
    memcpy(&v, p, 8)
    return v


class MalformedMessage(ValueError):
    """Bytes that are not a message this broker wrote or sent."""


include "columns_builders.pxi"
include "columns_values.pxi"
include "columns_decode.pxi"
