"""Resource alarms, as RabbitMQ's: below free_disk_min free disk or above
vm_memory_high_watermark resident memory, publishers are blocked
(connection.blocked) until the resource comes back. Below free_disk_warn
(LavinMQ's) a warning is logged first."""
import logging
import os
import time

from lavinmq.process import resident_memory

log = logging.getLogger("lavinmq.server")


class ResourceAlarms:
    def __init__(self, server):
        self.server = server
        self.disk = False
        self.disk_warning = False   # below free_disk_warn
        self.memory = False
        self.memory_limit = 0

    @property
    def reason(self):
        """What blocks publishers now, None when nothing does."""
        if self.disk:
            return "low on disk"
        if self.memory:
            return "low on memory"
        return None

    def check(self):
        self.check_disk()
        self.check_memory()

    def check_memory(self):
        config = self.server.config
        self.memory_limit = int(config.vm_memory_high_watermark * total_memory())
        # resident_memory() is 0 where /proc is missing (a chroot): no alarm
        high = bool(self.memory_limit) and resident_memory() > self.memory_limit
        if high and self.memory:
            self._shed_unfinished()
        if high == self.memory:
            return
        self.memory = high
        if high:
            log.warning("memory alarm: resident memory %d bytes above the high watermark %d: "
                        "publishers blocked", resident_memory(), self.memory_limit)
        else:
            log.warning("memory alarm cleared: publishers unblocked")
        self._changed()

    def _shed_unfinished(self):
        """The memory alarm blocks every publisher: it must not be held by
        bytes nobody finishes. Of the connections whose unfinished bodies
        or transactions made no progress for ALARM_GRACE seconds, the one
        holding most is closed (one a round, until the alarm clears)."""
        from lavinmq.amqp.connection import ALARM_GRACE, STALL_BYTES
        now = time.monotonic()
        stalled = [c for c in self.server.connections if getattr(c, "phase", None) == 2
                   and c.held_bytes >= STALL_BYTES and c.stalled_for(now) >= ALARM_GRACE]
        if stalled:
            worst = max(stalled, key=lambda c: c.held_bytes)
            log.warning("memory alarm: closing %s, its unfinished message bodies and transactions (%d bytes) "
                        "made no progress for %d s", worst.name, worst.held_bytes, ALARM_GRACE)
            worst.close(320, "CONNECTION_FORCED - low on memory: unfinished messages made no progress")

    def check_disk(self):
        config = self.server.config
        limit = config.disk_free_limit
        warn_limit = disk_warn_limit(config)
        low = False
        free = None
        if limit or warn_limit:
            st = os.statvfs(config.data_dir)
            free = st.f_bavail * st.f_frsize
            low = bool(limit) and free < limit
        self._check_disk_warning(free, warn_limit)
        if low == self.disk:
            return
        self.disk = low
        if low:
            log.warning("disk alarm: %d bytes free in %s, below free_disk_min %d: publishers blocked",
                        free, config.data_dir, limit)
        else:
            log.warning("disk alarm cleared: publishers unblocked")
        self._changed()

    def _check_disk_warning(self, free, warn_limit):
        """LavinMQ's free_disk_warn: a warning when free space falls below
        it (and below 6 segments), before the alarm blocks publishers; once
        on the way down, and a line when it is back above."""
        low = free is not None and bool(warn_limit) and free < warn_limit
        if low == self.disk_warning:
            return
        self.disk_warning = low
        if low:
            log.warning("low on disk space: %d bytes free in %s, below %d (free_disk_warn)",
                        free, self.server.config.data_dir, warn_limit)
        else:
            log.info("disk space no longer low (free_disk_warn)")

    def _changed(self):
        blocked = self.disk or self.memory
        reason = self.reason or "low on memory"
        for conn in list(self.server.connections):
            conn.set_blocked(blocked, reason)


def disk_warn_limit(config):
    """Bytes free below which a warning is logged: free_disk_warn, but never
    below 6 segments (LavinMQ's floor), unless the disk alarm is off
    (free_disk_min = 0) and free_disk_warn is not set."""
    floor = 0 if config.free_disk_min == 0 else 6 * config.segment_size
    return max(floor, config.free_disk_warn)


def total_memory():
    """The machine's memory, or the cgroup's limit when that is lower."""
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as f:
                raw = f.read().strip()
        except OSError:
            continue
        if raw.isdigit() and 0 < int(raw) < total:
            return int(raw)
    return total
