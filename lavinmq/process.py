"""The broker process's own resource use, read from /proc.

A chroot or a minimal container may have no /proc: then the figures are
unknown (0) rather than an exception, and the memory alarm stays off,
since a guess from getrusage (the peak, not the current size) would block
publishers for good after one spike."""
import ctypes
import os
import time

_PAGE = os.sysconf("SC_PAGE_SIZE")


def resident_memory():
    """Resident set size in bytes, 0 when /proc is not mounted."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


def open_fds():
    """Open file descriptors, 0 when /proc is not mounted."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0


# -- giving freed heap back --------------------------------------------------

try:
    _malloc_trim = ctypes.CDLL(None).malloc_trim     # glibc; absent on musl
    _malloc_trim.argtypes = [ctypes.c_size_t]
except (OSError, AttributeError):
    _malloc_trim = None

TRIM_AFTER = 1000       # closed connections that make a trim worth it
QUIET_FOR = 6.0         # s without a close (the stats sampler lets go of closed ones within 5 s)
TRIM_AT_MOST = 30.0     # s between trims under steady churn
_closed = 0
_last_close = 0.0
_last_trim = 0.0


def released():
    """A connection went away (its memory is freed now or at the next
    stats tick)."""
    global _closed, _last_close
    _closed += 1
    _last_close = time.monotonic()


def trim_if_due():
    """From the housekeeping loop. glibc gives freed memory in the middle of
    its heap back only on malloc_trim: 10,000 connections opened and closed
    left ~55 MB more resident each round without it. Trim once a burst of
    closes is over, or every TRIM_AT_MOST seconds while they go on."""
    global _closed, _last_trim
    if _closed < TRIM_AFTER or _malloc_trim is None:
        return False
    now = time.monotonic()
    if now - _last_close < QUIET_FOR and now - _last_trim < TRIM_AT_MOST:
        return False
    _closed = 0
    _last_trim = now
    _malloc_trim(0)
    return True


class _MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                "fsmblks", "uordblks", "fordblks", "keepcost")]


def gc_stats():
    """What LavinMQ's GET /api/nodes/gc_stats reports of its collector, for
    Python's: collections so far, objects tracked per generation, and the C
    heap (glibc's mallinfo2) with the resident size."""
    import gc
    gens = gc.get_stats()
    out = {"gc_no": sum(g["collections"] for g in gens), "generations": gens,
           "tracked_objects": list(gc.get_count()), "rss_bytes": resident_memory()}
    try:
        mallinfo2 = ctypes.CDLL(None).mallinfo2
        mallinfo2.restype = _MallInfo2
        mi = mallinfo2()
        out.update(heap_size=mi.arena + mi.hblkhd, free_bytes=mi.fordblks, in_use_bytes=mi.uordblks + mi.hblkhd)
    except (AttributeError, OSError):
        pass        # not glibc
    return out


def collect_garbage():
    """LavinMQ's gc_collect: a full collection, then the freed heap given
    back to the system."""
    import gc
    gc.collect()
    if _malloc_trim is not None:
        _malloc_trim(0)
