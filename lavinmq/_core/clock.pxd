# Wall-clock milliseconds, as stored in record timestamps; monotonic seconds.
from libc.stdint cimport uint64_t
from posix.time cimport clock_gettime, timespec, CLOCK_REALTIME, CLOCK_MONOTONIC


cdef inline uint64_t now_ms() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_REALTIME, &ts)
    return <uint64_t>ts.tv_sec * 1000 + <uint64_t>(ts.tv_nsec // 1000000)


cdef inline double monotonic_s() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec + ts.tv_nsec * 1e-9
