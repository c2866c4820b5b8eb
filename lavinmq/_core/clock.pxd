# Wall-clock milliseconds, as stored in record timestamps.
from libc.stdint cimport uint64_t
from posix.time cimport clock_gettime, timespec, CLOCK_REALTIME


cdef inline uint64_t now_ms() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_REALTIME, &ts)
    return <uint64_t>ts.tv_sec * 1000 + <uint64_t>(ts.tv_nsec // 1000000)
