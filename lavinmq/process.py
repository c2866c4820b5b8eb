"""The broker process's own resource use, read from /proc.

A chroot or a minimal container may have no /proc: then the figures are
unknown (0) rather than an exception, and the memory alarm stays off,
since a guess from getrusage (the peak, not the current size) would block
publishers for good after one spike."""
import os

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
